//! State transitions (MODIFY_QP), QUERY_QP and the checks on a connection's path.

use super::rc::{self, atomic_mode, check_remote, check_sgid_index, log_rd_atomic};
use super::*;
use mlx5_prm::cmd_hca_cap;

impl<H: Hal> QueuePair<H> {
    pub(super) fn modify(
        &mut self,
        op: u16,
        inlen: usize,
        f: impl FnOnce(&mut CmdBuf),
    ) -> Result<()> {
        let mut c = CmdBuf::new(op, 0, inlen);
        c.set(rst2init_qp_in::QPN, self.qpn);
        f(&mut c);
        let mut out = [0u8; rst2init_qp_out::BYTES];
        self.ctx.exec(&c, &mut out)
    }

    /// The transition `op` (RST2INIT .. RTR2RTS) with the QP's PD and CQs in its QPC (Linux
    /// ib/qp.c `__mlx5_ib_modify_qp` writes them in every transition) and what `f` adds.
    pub(super) fn transition(&mut self, op: u16, f: impl FnOnce(&mut CmdBuf)) -> Result<()> {
        let (pdn, scqn, rcqn) = (self.pd.pdn, self.scq.cqn, self.rcq.cqn);
        self.modify(op, rst2init_qp_in::BYTES, |c| {
            c.set(mqpc(qpc::PD), pdn)
                .set(mqpc(qpc::CQN_SND), scqn)
                .set(mqpc(qpc::CQN_RCV), rcqn);
            f(c);
        })
    }

    /// Attaches the QP to `set` (`None`: back to no set, `counter_set_id` 0), as Linux binds
    /// a QP to an `rdma_counter` (qp.c `mlx5_ib_qp_set_counter`): in RESET and INIT the set
    /// is remembered and goes into the QPC of the next RST2INIT / INIT2RTR; in RTS it is
    /// changed at once with RTS2RTS and the `COUNTER_SET_ID` optional parameter, which needs
    /// the `rts2rts_qp_counters_set_id` capability ([`Error::Unsupported`] without it). Other
    /// states are [`InvalidInput::QpState`]; a set of another context is
    /// [`InvalidInput::ForeignObject`]. The QP holds the set until it is destroyed or attached
    /// elsewhere.
    pub fn set_counter_set(&mut self, set: Option<&crate::counters::CounterSet<H>>) -> Result<()> {
        if let Some(s) = set {
            if !Arc::ptr_eq(&s.inner.ctx, &self.ctx) {
                return Err(InvalidInput::ForeignObject.into());
            }
        }
        let new = set.map(|s| s.inner.clone());
        match self.state {
            qp::state::RST | qp::state::INIT => {}
            qp::state::RTS => {
                if get(
                    &self.ctx.caps.general_cur,
                    cmd_hca_cap::RTS2RTS_QP_COUNTERS_SET_ID,
                ) == 0
                {
                    return Err(Error::Unsupported);
                }
                let id = new.as_ref().map_or(0, |s| s.id);
                self.modify(opcode::RTS2RTS_QP, rst2init_qp_in::BYTES, |c| {
                    c.set(rst2init_qp_in::OPT_PARAM_MASK, qp::optpar::COUNTER_SET_ID)
                        .set(mqpc(qpc::COUNTER_SET_ID), id.into());
                })?;
            }
            state => return Err(InvalidInput::QpState { state }.into()),
        }
        self.counter = new;
        Ok(())
    }

    /// The `counter_set_id` the next RST2INIT / INIT2RTR writes (0: none).
    pub(crate) fn counter_set_id(&self) -> u32 {
        self.counter.as_ref().map_or(0, |s| s.id.into())
    }

    /// The connected QP's transitions are refused on a datagram QP
    /// ([`InvalidInput::ServiceType`]; it has [`QueuePair::activate_datagram`]).
    fn check_connected(&self) -> Result<()> {
        if self.service.is_datagram() {
            return Err(InvalidInput::ServiceType.into());
        }
        Ok(())
    }

    pub(super) fn check_state(&self, from: &[u8]) -> Result<()> {
        if from.contains(&self.state) {
            Ok(())
        } else {
            Err(InvalidInput::QpState { state: self.state }.into())
        }
    }

    /// RESET -> INIT (port 1, P_Key index 0, responder access per `access`). Remote atomic
    /// access sets `rae` together with the device's `atomic_mode` (Linux ib/qp.c
    /// `set_qpc_atomic_flags`); a device without atomics refuses it ([`Error::Unsupported`]).
    pub fn to_init(&mut self, access: Access) -> Result<()> {
        self.check_connected()?;
        self.check_state(&[qp::state::RST])?;
        let atomic_mode = if access.contains(Access::REMOTE_ATOMIC) {
            atomic_mode(&self.ctx.caps).ok_or(Error::Unsupported)?
        } else {
            0
        };
        let counter_set = self.counter_set_id();
        self.transition(opcode::RST2INIT_QP, |c| {
            c.set(mpath(ads::VHCA_PORT_NUM), 1)
                .set(mpath(ads::PKEY_INDEX), 0)
                // Linux qp.c __mlx5_ib_modify_qp: the QP's counter set on RST2INIT and
                // INIT2RTR.
                .set(mqpc(qpc::COUNTER_SET_ID), counter_set);
            rc::init_qpc(c, access, atomic_mode);
        })?;
        self.set_state(qp::state::INIT);
        Ok(())
    }

    /// INIT -> RTR toward `remote` (RoCE v2 path: Linux ib/qp.c `mlx5_set_path`). Refused
    /// before the command: a remote QPN of 0 or 1 ([`InvalidInput::RemoteQpn`]), an all-zero
    /// GID or MAC ([`InvalidInput::RemoteAddress`]), an `sgid_index` beyond the GID table
    /// ([`InvalidInput::GidIndex`]) and a `max_dest_rd_atomic` above the device's limit
    /// ([`InvalidInput::RdAtomic`]).
    pub fn to_rtr(&mut self, remote: &QpEndpoint, o: &ConnectOptions) -> Result<()> {
        self.check_connected()?;
        self.check_state(&[qp::state::INIT])?;
        let caps = &self.ctx.caps;
        check_remote(remote)?;
        check_sgid_index(caps, o.sgid_index)?;
        let log_msg = caps.log_max_msg as u32;
        let rra = log_rd_atomic(o.max_dest_rd_atomic, caps.log_max_ra_res_qp)?;
        let sport = udp_sport_of(o.flow_label, self.qpn, remote.qpn);
        let counter_set = self.counter_set_id();
        self.transition(opcode::INIT2RTR_QP, |c| {
            c.set(mqpc(qpc::COUNTER_SET_ID), counter_set)
                .set(mpath(ads::VHCA_PORT_NUM), 1)
                .set(mpath(ads::PKEY_INDEX), 0);
            rc::rtr_qpc(c, remote, o, log_msg, rra, sport);
        })?;
        self.set_state(qp::state::RTR);
        Ok(())
    }

    /// RTR -> RTS with the QP's random initial PSN, or [`ConnectOptions::sq_psn`].
    pub fn to_rts(&mut self, o: &ConnectOptions) -> Result<()> {
        self.check_connected()?;
        self.check_state(&[qp::state::RTR])?;
        let sra = log_rd_atomic(o.max_rd_atomic, self.ctx.caps.log_max_ra_req_qp)?;
        let psn = o.sq_psn.map_or(self.psn, |p| p & 0xff_ffff);
        self.transition(opcode::RTR2RTS_QP, |c| rc::rts_qpc(c, o, psn, sra))?;
        self.psn = psn;
        self.set_state(qp::state::RTS);
        Ok(())
    }

    /// RESET -> INIT -> RTR -> RTS toward `remote`. Everything the driver can check is
    /// checked before the first command; if a transition still fails, the QP is moved back
    /// to RESET (2RST is legal from every state) and the transition's error is returned, so a
    /// failed connect never leaves it half-connected. Should that 2RST fail too, the QP stays
    /// where it was ([`QueuePair::state`] tells) and the first error is returned.
    pub fn connect(&mut self, remote: &QpEndpoint, o: &ConnectOptions) -> Result<()> {
        self.check_connected()?;
        self.check_state(&[qp::state::RST])?;
        rc::check_connect(&self.ctx.caps, remote, o)?;
        let r = self
            .to_init(o.access)
            .and_then(|()| self.to_rtr(remote, o))
            .and_then(|()| self.to_rts(o));
        if r.is_err() && self.state != qp::state::RST {
            let _ = self.to_reset();
        }
        r
    }

    /// Any state -> ERR (outstanding WRs complete with flush errors).
    pub fn to_err(&mut self) -> Result<()> {
        let mut c = CmdBuf::new(opcode::QP_2ERR, 0, qp_2err_in::BYTES);
        c.set(qp_2err_in::QPN, self.qpn);
        let mut out = [0u8; qp_2err_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        self.set_state(qp::state::ERR);
        Ok(())
    }

    /// Any state -> RESET; the software queues start over (Linux ib/qp.c resets the
    /// counters and the doorbell record on a move to RESET).
    pub fn to_reset(&mut self) -> Result<()> {
        let mut c = CmdBuf::new(opcode::QP_2RST, 0, mlx5_prm::qp_2rst_in::BYTES);
        c.set(mlx5_prm::qp_2rst_in::QPN, self.qpn);
        let mut out = [0u8; mlx5_prm::qp_2rst_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        self.set_state(qp::state::RST);
        // The CQEs of the old incarnation go (Linux ib/qp.c __mlx5_ib_modify_qp cleans both
        // CQs on a move to RESET; rdma-core the same): the CQs' pollers remove them before
        // they look at anything newer.
        self.clean_cqs();
        self.cur_post = 0;
        self.sq_wr_head = 0;
        self.rq_head = 0;
        self.shared.reset();
        // Nothing is outstanding in RESET: WR-made bindings go, handle-held ones start over.
        self.last_stamp = 0;
        for i in 0..self.bindings.len() {
            if self.bindings[i].explicit {
                let b = &mut self.bindings[i];
                b.last_sq = 0;
                b.last_rq = 0;
            } else {
                self.free_binding(i);
            }
        }
        self.swept = (0, 0);
        if let Some(db) = &self.db {
            db.fill(0, 8, 0)?;
        }
        Ok(())
    }

    /// Asks the send and receive CQs to remove this QP's CQEs written so far (after 2RST or
    /// DESTROY_QP). A CQ that cannot take the request (its QUERY_CQ failed) just stops
    /// routing this QP's completions when it is destroyed.
    pub(super) fn clean_cqs(&self) {
        let retired = self
            .shared
            .retired
            .load(core::sync::atomic::Ordering::Acquire);
        let same = Arc::ptr_eq(&self.scq, &self.rcq);
        for cq in [&self.scq, &self.rcq]
            .into_iter()
            .take(if same { 1 } else { 2 })
        {
            if cq.request_clean(&self.shared).is_err() && retired {
                cq.detach(&self.shared);
            }
        }
    }

    /// QUERY_QP: the state, path and limits the firmware reports, with the capabilities the
    /// QP was granted (`ibv_query_qp`; Linux ib/qp.c `query_qp_attr` reads the same qpc
    /// fields, and `max_rd_atomic = 1 << log_sra_max`).
    pub fn query(&self) -> Result<QpAttr> {
        let mut c = CmdBuf::new(opcode::QUERY_QP, 0, query_qp_in::BYTES);
        c.set(query_qp_in::QPN, self.qpn);
        let mut out = alloc::vec![0u8; query_qp_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        let g = |f: mlx5_prm::Field| get(&out, f.within(query_qp_out::QPC));
        let pp = |f: mlx5_prm::Field| g(f.within(qpc::PRIMARY_ADDRESS_PATH));
        let mut access = Access(0);
        for (f, a) in [
            (qpc::RRE, Access::REMOTE_READ),
            (qpc::RWE, Access::REMOTE_WRITE),
            (qpc::RAE, Access::REMOTE_ATOMIC),
        ] {
            if g(f) != 0 {
                access = access | a;
            }
        }
        Ok(QpAttr {
            state: g(qpc::STATE) as u8,
            cap: self.lay.caps,
            sq_sig_all: self.sig_all != 0,
            max_rd_atomic: 1 << g(qpc::LOG_SRA_MAX).min(31),
            max_dest_rd_atomic: 1 << g(qpc::LOG_RRA_MAX).min(31),
            path_mtu: g(qpc::MTU) as u8,
            dest_qp_num: g(qpc::REMOTE_QPN),
            sq_psn: g(qpc::NEXT_SEND_PSN),
            rq_psn: g(qpc::NEXT_RCV_PSN),
            retry_cnt: g(qpc::RETRY_COUNT) as u8,
            rnr_retry: g(qpc::RNR_RETRY) as u8,
            min_rnr_timer: g(qpc::MIN_RNR_NAK) as u8,
            timeout: pp(ads::ACK_TIMEOUT) as u8,
            access,
            atomic_mode: g(qpc::ATOMIC_MODE) as u8,
            log_ack_req_freq: g(qpc::LOG_ACK_REQ_FREQ) as u8,
            qkey: g(qpc::Q_KEY),
        })
    }

    /// QUERY_QP: the state the firmware reports.
    pub fn query_state(&self) -> Result<u8> {
        let mut c = CmdBuf::new(opcode::QUERY_QP, 0, query_qp_in::BYTES);
        c.set(query_qp_in::QPN, self.qpn);
        let mut out = alloc::vec![0u8; query_qp_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        Ok(get(&out, qpc::STATE.within(query_qp_out::QPC)) as u8)
    }

    pub(super) fn set_state(&mut self, state: u8) {
        self.state = state;
        self.close_gate();
    }

    /// Makes the next post take the slow path of [`QueuePair::gate`].
    #[inline]
    pub(super) fn close_gate(&self) {
        self.shared
            .sq_last
            .store(self.sq_wr_head.wrapping_sub(1), Ordering::Relaxed);
    }
}
