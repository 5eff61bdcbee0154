//! Queue sizes, CREATE_QP and DESTROY_QP.

use super::binding::NEXT_QP_TAG;
use super::ud::{self, Service, SQ_OVERHEAD_UD};
use super::*;
use super::{gsi, rc};

/// Sizes computed from the requested caps.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    pub(super) sq_wqe_cnt: u32,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) sq_max_bbs: u32,
    pub(super) rq_wqe_cnt: u32,
    pub(super) rq_stride_shift: u32,
    pub(super) sq_offset: usize,
    pub(super) buf_size: usize,
    pub(super) caps: QpCaps,
}

#[cfg_attr(not(test), allow(dead_code))]
pub(super) fn layout(req: &QpCaps, caps: &crate::caps::Caps) -> Result<Layout> {
    layout_with(req, caps, SQ_OVERHEAD, SQ_OVERHEAD)
}

/// [`layout`] with the send WQE overhead `overhead` (at least [`SQ_OVERHEAD`]; more for QPs
/// that post memory-window WQEs, [`QpOptions::mw_bind`], and for datagram QPs), and
/// `data_overhead`, the largest overhead inline data sits behind (RC's [`SQ_OVERHEAD`], a
/// datagram QP's ctrl and datagram segments).
pub(super) fn layout_with(
    req: &QpCaps,
    caps: &crate::caps::Caps,
    overhead: usize,
    data_overhead: usize,
) -> Result<Layout> {
    let bad = || Error::Invalid(InvalidInput::QpCaps);
    if req.max_send_wr == 0
        || req.max_send_sge as usize > MAX_SGE
        || req.max_recv_sge as usize > MAX_SGE
    {
        return Err(bad());
    }
    // Both queues index their rings with 16-bit counters (sq_mask, the doorbell record):
    // at most 2^15 entries, and never above the device's log_max_qp_sz.
    let log_max = (caps.log_max_qp_sz as u32).min(15);
    let max_entries = 1u32 << log_max;
    // The WR counts are bounded before anything is rounded or multiplied (Linux ib/qp.c
    // set_rq_size: "max_recv_wr > 1 << log_max_qp_sz" is -EINVAL; rdma-core verbs.c
    // mlx5_calc_sq_size bounds max_send_wr "to avoid overflow"), so a count like u32::MAX is
    // refused instead of wrapping to an empty ring.
    if req.max_send_wr > max_entries || req.max_recv_wr > max_entries {
        return Err(bad());
    }
    // Send WQE: overhead + max(gather list, inline segment), in 64-byte blocks
    // (rdma-core verbs.c mlx5_calc_send_wqe). Every term is bounded: at most 30 SGEs, and
    // max_inline_data (a u32) plus 4 fits a usize.
    let gather = req.max_send_sge.max(1) as usize * wqe::data_seg::SIZE;
    let inl = (req.max_inline_data as usize + wqe::inl_data_seg::SIZE).next_multiple_of(16);
    let wqe_size = (overhead.max(SQ_OVERHEAD) + gather.max(inl)).next_multiple_of(wqe::SEND_WQE_BB);
    let max_sq = if caps.max_wqe_sz_sq != 0 {
        (caps.max_wqe_sz_sq as usize).min(MAX_WQE_BYTES)
    } else {
        MAX_WQE_BYTES
    };
    if wqe_size > max_sq {
        return Err(bad());
    }
    let bbs = (wqe_size / wqe::SEND_WQE_BB) as u32;
    let sq_cnt = req
        .max_send_wr
        .checked_mul(bbs)
        .and_then(u32::checked_next_power_of_two)
        .ok_or_else(bad)?;
    if sq_cnt > max_entries {
        return Err(bad());
    }
    // Receive WQE: max_recv_sge data segments, stride a power of two of at least 16 bytes
    // (qpc.log_rq_stride = log2(stride) - 4, Linux ib/qp.c `create_kernel_qp`).
    let (rq_cnt, stride_shift) = if req.max_recv_wr == 0 {
        (0, 4)
    } else {
        let stride = (req.max_recv_sge.max(1) as usize * wqe::data_seg::SIZE).next_power_of_two();
        if caps.max_wqe_sz_rq != 0 && stride > caps.max_wqe_sz_rq as usize {
            return Err(bad());
        }
        let shift = stride.trailing_zeros();
        let cnt = req
            .max_recv_wr
            .checked_next_power_of_two()
            .ok_or_else(bad)?;
        // At least one 64-byte basic block, so that the send queue after it starts 64-byte
        // aligned (Linux ib/qp.c set_rq_size: wq_size = max(wq_size, MLX5_SEND_WQE_BB);
        // rdma-core verbs.c mlx5_calc_rq_size does the same).
        let cnt = cnt.max((wqe::SEND_WQE_BB >> shift) as u32);
        if cnt > max_entries {
            return Err(bad());
        }
        (cnt, shift)
    };
    // Both terms are at most 2^15 entries of at most 2 KiB: no overflow.
    let rq_bytes = (rq_cnt as usize) << stride_shift;
    let sq_offset = rq_bytes;
    let total = (rq_bytes + sq_cnt as usize * wqe::SEND_WQE_BB)
        .next_power_of_two()
        .max(4096);
    // The largest inline payload: the WQE less the largest overhead of data (RC: ctrl +
    // raddr + atomic; UD: ctrl + datagram) and the inline header (rdma-core verbs.c
    // mlx5_calc_sq_size and Linux ib/qp.c calc_sq_size: wqe_size - sq_overhead -
    // sizeof(inl_data_seg)). An RDMA WRITE of that much is ctrl + raddr + align(4 +
    // max_inline, 16) <= wqe_size - 16 bytes, so its ds never exceeds 63 (the 6-bit field of
    // qpn_ds); a UD SEND is ctrl + datagram + the same.
    let max_inline = wqe_size - data_overhead.max(SQ_OVERHEAD) - wqe::inl_data_seg::SIZE;
    Ok(Layout {
        sq_wqe_cnt: sq_cnt,
        sq_max_bbs: bbs,
        rq_wqe_cnt: rq_cnt,
        rq_stride_shift: stride_shift,
        sq_offset,
        buf_size: total,
        caps: QpCaps {
            max_send_wr: sq_cnt / bbs,
            max_recv_wr: rq_cnt,
            max_send_sge: req.max_send_sge.max(1),
            max_recv_sge: if rq_cnt == 0 {
                0
            } else {
                (1u32 << stride_shift) / 16
            },
            max_inline_data: max_inline as u32,
        },
    })
}

pub(crate) fn create<H: Hal>(
    pd: &Arc<PdInner<H>>,
    scq: &CompletionQueue<H>,
    rcq: &CompletionQueue<H>,
    req: &QpCaps,
    opts: &QpOptions,
) -> Result<QueuePair<H>> {
    create_fre(pd, scq, rcq, req, opts, false)
}

/// [`create()`], with `qpc.fre` (fast registration enable) when `fre`: the QP may post UMR
/// WQEs (Linux ib/qp.c `create_kernel_qp`: `MLX5_SET(qpc, qpc, fre, 1)` for kernel QPs, the
/// UMR QP of ib/umr.c `mlx5r_umr_resource_init` among them).
pub(crate) fn create_fre<H: Hal>(
    pd: &Arc<PdInner<H>>,
    scq: &CompletionQueue<H>,
    rcq: &CompletionQueue<H>,
    req: &QpCaps,
    opts: &QpOptions,
    fre: bool,
) -> Result<QueuePair<H>> {
    create_typed(pd, (scq, rcq), req, opts, fre, Service::Rc, 0)
}

/// A datagram QP (UD with Q_Key `qkey`, or the context's GSI QP with [`gsi::GSI_QKEY`]) on
/// `pd` and the CQs `cqs` (send, receive), moved to RTS
/// ([`QueuePair::activate_datagram`]). A second GSI QP is refused
/// ([`InvalidInput::GsiExists`]) before any command.
pub(crate) fn create_datagram<H: Hal>(
    pd: &Arc<PdInner<H>>,
    cqs: (&CompletionQueue<H>, &CompletionQueue<H>),
    req: &QpCaps,
    service: Service,
    qkey: u32,
) -> Result<QueuePair<H>> {
    let gsi = service == Service::Gsi;
    let qkey = if gsi {
        gsi::claim(&pd.ctx)?;
        gsi::GSI_QKEY
    } else {
        qkey
    };
    let mut q = match create_typed(pd, cqs, req, &QpOptions::default(), false, service, qkey) {
        Ok(q) => q,
        Err(e) => {
            if gsi {
                gsi::release(&pd.ctx);
            }
            return Err(e);
        }
    };
    // On failure the QP is dropped: destroyed, and the GSI claim given back with it.
    q.activate_datagram()?;
    Ok(q)
}

/// CREATE_QP of a QP of type `service` (RC: `opts` and `fre`; datagram: `qkey`).
fn create_typed<H: Hal>(
    pd: &Arc<PdInner<H>>,
    (scq, rcq): (&CompletionQueue<H>, &CompletionQueue<H>),
    req: &QpCaps,
    opts: &QpOptions,
    fre: bool,
    service: Service,
    qkey: u32,
) -> Result<QueuePair<H>> {
    let ctx = &pd.ctx;
    if !Arc::ptr_eq(&scq.shared.ctx, ctx) || !Arc::ptr_eq(&rcq.shared.ctx, ctx) {
        return Err(InvalidInput::BadCq.into());
    }
    let (overhead, data_overhead) = match service {
        Service::Rc if opts.mw_bind => (MW_OVERHEAD, SQ_OVERHEAD),
        Service::Rc => (SQ_OVERHEAD, SQ_OVERHEAD),
        Service::Ud | Service::Gsi => (SQ_OVERHEAD_UD, SQ_OVERHEAD_UD),
    };
    let lay = layout_with(req, &ctx.caps, overhead, data_overhead)?;
    let hal = &ctx.hal;
    let buf = DmaMem::alloc(hal, lay.buf_size, lay.buf_size)?;
    let db = DmaMem::alloc(hal, 64, 64)?;
    let uar = ctx.with_dev(|d| d.alloc_uar(hal))?;
    let mut c = CmdBuf::new(opcode::CREATE_QP, 0, create_qp_in::PAS.bytes_with(1));
    let x = cqpc;
    // Linux ib/qp.c create_qp_common / create_kernel_qp (log_sq_size in WQEBBs: `calc_sq_size`).
    match service {
        Service::Rc => rc::create_qpc(&mut c),
        Service::Ud | Service::Gsi => ud::create_qpc(&mut c, service),
    }
    c.set(x(qpc::PD), pd.pdn)
        .set(x(qpc::UAR_PAGE), uar.index)
        .set(x(qpc::LOG_PAGE_SIZE), lay.buf_size.trailing_zeros() - 12)
        .set(x(qpc::LOG_SQ_SIZE), lay.sq_wqe_cnt.trailing_zeros())
        .set(x(qpc::CQN_SND), scq.shared.cqn)
        .set(x(qpc::CQN_RCV), rcq.shared.cqn)
        .set64(x(qpc::DBR_ADDR), db.bus())
        .set(x(qpc::FRE), fre as u32)
        .put64(create_qp_in::PAS.byte_offset(), buf.bus());
    if lay.rq_wqe_cnt == 0 {
        c.set(x(qpc::RQ_TYPE), qp::rq_type::ZERO_LEN_RQ.into());
    } else {
        c.set(x(qpc::RQ_TYPE), qp::rq_type::NON_ZERO_RQ.into())
            .set(x(qpc::LOG_RQ_SIZE), lay.rq_wqe_cnt.trailing_zeros())
            .set(x(qpc::LOG_RQ_STRIDE), lay.rq_stride_shift - 4);
    }
    let mut out = [0u8; create_qp_out::BYTES];
    if let Err(e) = ctx.exec(&c, &mut out) {
        if e.device_may_hold() {
            // The reply was garbled or never came: the QP may exist and use the buffers and
            // the UAR. The buffers are quarantined (never freed) and the UAR stays allocated.
            ctx.release_after(&e, [buf, db]);
        } else {
            let _ = ctx.with_dev(|d| d.dealloc_uar(hal, uar.index));
        }
        return Err(e);
    }
    let qpn = get(&out, create_qp_out::QPN);
    let made = Made { buf, db, uar, lay };
    Ok(queue_pair(pd, (scq, rcq), opts, service, qkey, qpn, made))
}

/// What CREATE_QP was given: the work queue buffer, the doorbell record, the UAR, the sizes.
struct Made<H: Hal> {
    buf: DmaMem<H::Dma>,
    db: DmaMem<H::Dma>,
    uar: Uar,
    lay: Layout,
}

/// The [`QueuePair`] firmware created as `qpn` from `made`, in RST: its send gate registered,
/// attached to its CQs, its first PSN drawn.
fn queue_pair<H: Hal>(
    pd: &Arc<PdInner<H>>,
    (scq, rcq): (&CompletionQueue<H>, &CompletionQueue<H>),
    opts: &QpOptions,
    service: Service,
    qkey: u32,
    qpn: u32,
    made: Made<H>,
) -> QueuePair<H> {
    let ctx = &pd.ctx;
    let Made { buf, db, uar, lay } = made;
    let shared = Arc::new(WqShared::new(
        qpn,
        lay.sq_wqe_cnt,
        lay.caps.max_send_wr,
        lay.rq_wqe_cnt.max(1),
    ));
    ctx.register_send_gate(&shared);
    scq.shared.attach(&shared);
    if !Arc::ptr_eq(&scq.shared, &rcq.shared) {
        rcq.shared.attach(&shared);
    }
    // The GSI QP sends from PSN 0 (Linux core/mad.c `ib_mad_port_start`: IB_MAD_SEND_Q_PSN).
    let psn = if service == Service::Gsi {
        0
    } else {
        (ctx.random() & 0xff_ffff) as u32
    };
    let bf_size = 1usize << ctx.caps.log_bf_reg_size.clamp(6, 11);
    let (ring, dbrec) = (buf.ptr(), db.ptr());
    // SAFETY: sq_offset + sq_wqe_cnt * 64 <= buf_size (see `layout`).
    let sq_base = unsafe { ring.add(lay.sq_offset) };
    let tag = NEXT_QP_TAG.fetch_add(1, Ordering::Relaxed);
    let sq_slots = shared.sq.as_ptr();
    QueuePair {
        ctx: ctx.clone(),
        counter: None,
        pd: pd.clone(),
        scq: scq.shared.clone(),
        rcq: rcq.shared.clone(),
        shared,
        qpn,
        state: qp::state::RST,
        buf: Some(buf),
        db: Some(db),
        ring,
        sq_base,
        sq_mask: (lay.sq_wqe_cnt - 1) as u16,
        sq_slots,
        dbrec,
        uar,
        bf_off: uar.offset + uar::BF_OFFSET,
        bf_half: bf_size / 2,
        use_bf: ctx.caps.bf && ctx.hal.bf_write_combining(),
        lay,
        cur_post: 0,
        sq_wr_head: 0,
        ctrl_write: ctrl_tpl(qpn, 3, wqe::opcode::RDMA_WRITE),
        ctrl_read: ctrl_tpl(qpn, 3, wqe::opcode::RDMA_READ),
        bf_one: ctx.caps.bf && ctx.hal.bf_write_combining() && bf_size / 2 >= wqe::SEND_WQE_BB,
        sig_all: if opts.sq_sig_all {
            SendFlags::SIGNALED.0
        } else {
            0
        },
        tag,
        rq_head: 0,
        psn,
        bindings: Vec::new(),
        auto_live: 0,
        swept: (0, 0),
        swept_kept: usize::MAX,
        sweep_room: (0, 0),
        last_binding: 0,
        last_mr: ptr::null(),
        last_stamp: 0,
        rq_last_binding: 0,
        rq_last_mr: ptr::null(),
        destroyed: false,
        service,
        qkey,
    }
}

impl<H: Hal> QueuePair<H> {
    /// Destroys the QP now (dropping it does the same, ignoring errors).
    pub fn destroy(mut self) -> Result<()> {
        self.destroy_inner()
    }

    pub(super) fn destroy_inner(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        self.destroyed = true;
        let mut c = CmdBuf::new(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
        c.set(destroy_qp_in::QPN, self.qpn);
        let mut out = [0u8; destroy_qp_out::BYTES];
        let r = self.ctx.exec(&c, &mut out);
        if r.is_ok() {
            // Its CQEs go too (rdma-core verbs.c mlx5_destroy_qp: __mlx5_cq_clean on both
            // CQs); each CQ's poller drops the QP from its list once they are gone.
            self.shared
                .retired
                .store(true, core::sync::atomic::Ordering::Release);
            self.clean_cqs();
        } else {
            for cq in [&self.scq, &self.rcq] {
                cq.detach(&self.shared);
            }
        }
        if let Err(e) = r {
            // The device may still access the buffers and the regions WRs named: keep them.
            // A garbled or missing reply: quarantined (counted, the context needs a reset).
            // A firmware status: the destroy did not happen and the QP lives on with its
            // buffers, which are then never freed either.
            let bufs = [self.buf.take(), self.db.take()].into_iter().flatten();
            if e.device_may_hold() {
                self.ctx.release_after(&e, bufs);
            } else {
                bufs.for_each(core::mem::forget);
            }
            core::mem::forget(core::mem::take(&mut self.bindings));
            return Err(e);
        }
        if self.service == Service::Gsi {
            gsi::release(&self.ctx);
        }
        let hal = &self.ctx.hal;
        let uar = self.uar.index;
        let _ = self.ctx.with_dev(|d| d.dealloc_uar(hal, uar));
        self.bindings.clear();
        self.last_mr = ptr::null();
        self.rq_last_mr = ptr::null();
        self.auto_live = 0;
        r
    }
}
