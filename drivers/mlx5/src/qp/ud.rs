//! The UD (unreliable datagram) service type, and what the GSI QP ([`super::gsi`]) shares
//! with it: the QPC at CREATE_QP, the transitions to RTS, the datagram segment of a send
//! WQE, the refusals of what UD does not have.
//!
//! A datagram QP has no address path: each send WQE carries one, after its ctrl segment
//! (the 48-byte `struct mlx5_wqe_datagram_seg`: the address handle's vector with the remote
//! QPN and Q_Key, Linux ib/wr.c `set_datagram_seg`, rdma-core providers/mlx5/qp.c
//! `_set_datagram_seg`). Its transitions take the port, the P_Key index and the Q_Key
//! (RESET->INIT), nothing more to RTR, the first send PSN to RTS (ibv_modify_qp(3) "Required
//! attributes" for UD); Linux ib/qp.c `__mlx5_ib_modify_qp` writes the path MTU and message
//! size limit in every transition (4096 and 2^12 for UD, 256 and 2^8 for the special QPs).
//! UD has SEND and SEND with immediate only (IBTA §9.8.3; rdma-core verbs.c `sq_overhead` for
//! `IBV_QPT_UD`): the connected QP's fast paths stay closed on a datagram QP (its send gate
//! never opens, `QueuePair::refresh_limit`), and the general path refuses other opcodes.
//!
//! A received datagram lands behind a 40-byte header area ([`GRH_BYTES`]).

use super::*;
use mlx5_prm::wqe::av;

/// The header area in front of every datagram a UD or GSI QP receives: room for a GRH (IBTA
/// §11.4.1.2); RoCE v2 over IPv4 puts 20 zero bytes then the IPv4 header there, over IPv6
/// the IPv6 header (rdma-core libibverbs/man/ibv_poll_cq.3, Linux include/rdma/ib_verbs.h
/// `struct ib_grh`). A receive buffer needs these bytes beyond the largest payload, and the
/// completion's `byte_len` counts them.
pub const GRH_BYTES: usize = 40;

/// The sender's IPv4 address in a receive's header area ([`GRH_BYTES`]) on RoCE v2 over IPv4:
/// the IPv4 header at byte 20 (Linux include/rdma/ib_verbs.h `union rdma_network_hdr`
/// `roce4grh`), version 4 with a 20-byte header (Linux drivers/infiniband/core/verbs.c
/// `ib_get_rdma_header_version` checks the same before `ib_get_gids_from_rdma_hdr` reads
/// `saddr`; rdma-core libibverbs/verbs.c `ibv_init_ah_from_wc`). None for anything else.
pub fn grh_ipv4_source(area: &[u8]) -> Option<[u8; 4]> {
    let ip = area.get(20..GRH_BYTES)?;
    (ip[0] == 0x45).then(|| [ip[12], ip[13], ip[14], ip[15]])
}

/// The largest datagram WQE without data: ctrl + datagram segment (rdma-core verbs.c
/// `_sq_overhead` for `IBV_QPT_UD`: the ctrl segment of SEND, plus
/// `sizeof(struct mlx5_wqe_datagram_seg)`; Linux ib/qp.c `sq_overhead` the same).
pub(super) const SQ_OVERHEAD_UD: usize = wqe::ctrl_seg::SIZE + av::SIZE;

/// 16-byte units of the datagram segment.
pub(super) const AV_DS: u32 = (av::SIZE / wqe::SEND_WQE_DS) as u32;

/// Where one UD send goes (`ibv_send_wr.wr.ud`: the address handle, remote QPN and Q_Key).
#[derive(Clone, Copy, Debug)]
pub struct UdDest<'a> {
    /// The address handle.
    pub ah: &'a crate::ah::AddressHandle,
    /// The destination QP (24 bits; 1 for the peer's GSI QP).
    pub remote_qpn: u32,
    /// The Q_Key. One with the top bit set stands for the sending QP's own Q_Key (IBTA
    /// §10.2.4, controlled Q_Keys).
    pub remote_qkey: u32,
}

/// The datagram segment of a send to `d`: the handle's vector with the remote QPN (and the
/// extended-AV flag) and the Q_Key (Linux ib/wr.c `set_datagram_seg`).
pub(crate) fn datagram_seg(d: &UdDest<'_>) -> Result<[u8; av::SIZE]> {
    if d.remote_qpn > 0xff_ffff {
        return Err(InvalidInput::RemoteQpn(d.remote_qpn).into());
    }
    let mut s = *d.ah.av();
    s[av::QKEY..av::QKEY + 4].copy_from_slice(&d.remote_qkey.to_be_bytes());
    let dqp = d.remote_qpn | wqe::EXTENDED_UD_AV;
    s[av::DQP_DCT..av::DQP_DCT + 4].copy_from_slice(&dqp.to_be_bytes());
    Ok(s)
}

/// The service types of the QPs the driver makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    /// Reliable connected ([`super::rc`]).
    Rc,
    /// Unreliable datagram.
    Ud,
    /// The GSI QP (QP1, [`super::gsi`]).
    Gsi,
}

impl Service {
    /// UD or GSI: sends carry a datagram segment.
    #[inline]
    pub(crate) fn is_datagram(self) -> bool {
        self != Service::Rc
    }
}

/// CREATE_QP: the datagram service type (`qpc.st`, Linux ib/qp.c `to_mlx5_st`: UD, or QP1
/// for `MLX5_IB_QPT_HW_GSI`) and the migration state (`create_qp_common`: MIGRATED).
pub(super) fn create_qpc(c: &mut CmdBuf, service: Service) {
    let st = if service == Service::Gsi {
        qp::st::QP1
    } else {
        qp::st::UD
    };
    c.set(cqpc(qpc::ST), st.into())
        .set(cqpc(qpc::PM_STATE), qp::pm::MIGRATED.into());
}

/// `(qpc.mtu, qpc.log_msg_max)` Linux ib/qp.c `__mlx5_ib_modify_qp` writes in every
/// transition of a datagram QP: 4096 and 2^12 for UD, 256 and 2^8 for the special QPs.
fn mtu_msgmax(service: Service) -> (u32, u32) {
    if service == Service::Gsi {
        (Mtu::Mtu256 as u32, 8)
    } else {
        (Mtu::Mtu4096 as u32, 12)
    }
}

impl<H: Hal> QueuePair<H> {
    /// Moves a datagram QP from RESET to RTS with the Q_Key it was created with: RST2INIT
    /// (port 1, P_Key index 0, the Q_Key), INIT2RTR, RTR2RTS (the send PSN), each with no
    /// optional field (Linux ib/qp.c has no `opt_mask` for QP1, and UD needs none here). A UD
    /// QP starts at its random PSN, the GSI QP at 0 (Linux core/mad.c `ib_mad_port_start`:
    /// `IB_MAD_SEND_Q_PSN`). A failed transition moves the QP back to RESET, as
    /// [`QueuePair::connect`] does. Refused on a connected QP ([`InvalidInput::ServiceType`]).
    pub fn activate_datagram(&mut self) -> Result<()> {
        if !self.service.is_datagram() {
            return Err(InvalidInput::ServiceType.into());
        }
        self.check_state(&[qp::state::RST])?;
        let r = self.datagram_step(opcode::RST2INIT_QP, qp::state::INIT);
        let r = r.and_then(|()| self.datagram_step(opcode::INIT2RTR_QP, qp::state::RTR));
        let r = r.and_then(|()| self.datagram_step(opcode::RTR2RTS_QP, qp::state::RTS));
        if r.is_err() && self.state != qp::state::RST {
            let _ = self.to_reset();
        }
        r
    }

    /// One transition of [`QueuePair::activate_datagram`] to `to`.
    fn datagram_step(&mut self, op: u16, to: u8) -> Result<()> {
        let (mtu, msgmax) = mtu_msgmax(self.service);
        let counter_set = self.counter_set_id();
        let (qkey, psn) = (self.qkey, self.psn);
        self.transition(op, |c| {
            let (x, p) = (mqpc, mpath);
            c.set(x(qpc::MTU), mtu)
                .set(x(qpc::LOG_MSG_MAX), msgmax)
                .set(x(qpc::LOG_ACK_REQ_FREQ), rc::ACK_REQ_FREQ)
                .set(p(ads::VHCA_PORT_NUM), 1);
            match op {
                opcode::RST2INIT_QP => {
                    c.set(p(ads::PKEY_INDEX), 0)
                        .set(x(qpc::Q_KEY), qkey)
                        .set(x(qpc::COUNTER_SET_ID), counter_set);
                }
                opcode::INIT2RTR_QP => {
                    c.set(x(qpc::COUNTER_SET_ID), counter_set);
                }
                _ => {
                    c.set(x(qpc::NEXT_SEND_PSN), psn);
                }
            }
        })?;
        self.set_state(to);
        Ok(())
    }

    /// The service type's refusals of send WR `op`, with a datagram segment (`dgram`) or
    /// without: a datagram QP sends SEND / SEND with immediate only
    /// ([`InvalidInput::ServiceType`]) and only with a destination
    /// ([`InvalidInput::NoDestination`]); a connected QP takes no destination
    /// ([`InvalidInput::NotDatagram`]). The 16-byte units the datagram segment adds.
    #[inline]
    pub(super) fn check_service(&self, op: &SendOp, dgram: bool) -> Result<u32> {
        if self.service.is_datagram() {
            if !matches!(op, SendOp::Send { .. }) {
                return Err(InvalidInput::ServiceType.into());
            }
            if !dgram {
                return Err(InvalidInput::NoDestination.into());
            }
            return Ok(AV_DS);
        }
        if dgram {
            return Err(InvalidInput::NotDatagram.into());
        }
        Ok(0)
    }

    /// Brings a datagram QP's send queue back from the send queue error state to RTS. A UD
    /// send WR that completes in error leaves the receive side working and stops the send
    /// side (SQE, IBTA §10.3.1): the device completes every later send WR with
    /// [`crate::WcStatus::WrFlushErr`] until this SQERR2RTS_QP (Linux core/mad.c
    /// `ib_mad_send_error` moves the GSI QP so on a send error; ib/qp.c `optab`:
    /// `MLX5_CMD_OP_SQERR2RTS_QP`). WRs flushed meanwhile are not posted again. The device
    /// refuses it for a QP whose send queue did not stop ([`crate::CmdStatus::BadQpStateErr`]);
    /// a connected QP is [`InvalidInput::ServiceType`].
    pub fn recover_send_queue(&mut self) -> Result<()> {
        if !self.service.is_datagram() {
            return Err(InvalidInput::ServiceType.into());
        }
        // The driver keeps the QP in RTS through SQE (only the device knows of it).
        self.check_state(&[qp::state::RTS])?;
        self.transition(opcode::SQERR2RTS_QP, |_| {})
    }

    /// The Q_Key the QP was created with (datagram QPs; 0 for a connected QP).
    pub fn qkey(&self) -> u32 {
        self.qkey
    }

    /// Whether the QP is a datagram one (UD or GSI).
    pub fn is_datagram(&self) -> bool {
        self.service.is_datagram()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The segment as Linux ib/wr.c `set_datagram_seg` writes it: the vector, then the Q_Key
    /// at 0 and `remote_qpn | MLX5_EXTENDED_UD_AV` at 8, big-endian.
    #[test]
    fn datagram_segment_is_the_vector_with_qpn_and_qkey() {
        let caps = crate::caps::Caps {
            roce: true,
            port_type: mlx5_prm::hca_cap::port_type::ETH,
            roce_address_table_size: 4,
            ..Default::default()
        };
        let ah = crate::ah::AddressHandle::new(
            &caps,
            &crate::ah::AhAttr {
                dgid: [7; 16],
                dmac: [2, 0, 0, 0, 0, 9],
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            },
        )
        .unwrap();
        let d = UdDest {
            ah: &ah,
            remote_qpn: 0x12,
            remote_qkey: 0x8001_0000,
        };
        let s = datagram_seg(&d).unwrap();
        assert_eq!(&s[0..4], &[0x80, 0x01, 0, 0]);
        assert_eq!(&s[8..12], &[0x80, 0, 0, 0x12]);
        assert_eq!(&s[12..], &ah.av()[12..]);
        let bad = UdDest {
            remote_qpn: 1 << 24,
            ..d
        };
        assert_eq!(
            datagram_seg(&bad),
            Err(InvalidInput::RemoteQpn(1 << 24).into())
        );
        assert_eq!(SQ_OVERHEAD_UD, 64);
        assert_eq!(AV_DS, 3);
    }

    #[test]
    fn the_header_area_names_the_ipv4_sender() {
        let mut area = [0u8; GRH_BYTES];
        area[20] = 0x45;
        area[32..36].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(grh_ipv4_source(&area), Some([10, 0, 0, 2]));
        // A header with options, or not version 4: not read.
        area[20] = 0x46;
        assert_eq!(grh_ipv4_source(&area), None);
        area[20] = 0x60;
        assert_eq!(grh_ipv4_source(&area), None);
        assert_eq!(grh_ipv4_source(&area[..30]), None);
    }
}
