//! The receive queue: CREATE_RQ, MODIFY_RQ (RST to RDY), DESTROY_RQ, and its cyclic ring of
//! receive WQEs (Linux en_main.c `mlx5e_create_rq`, `mlx5e_modify_rq_state`, `mlx5e_alloc_rq`;
//! en_rx.c `mlx5e_post_rx_wqes`).
//!
//! mlx5e's non-striding RQ with linear buffers: every WQE is one data segment (`struct
//! mlx5e_rx_wqe_cyc`, stride 16 bytes) naming one receive buffer of the queue's registered
//! region, WQE `i` always buffer `i`. Posting writes no MMIO doorbell: only the doorbell
//! record, after a `dma_wmb` (en_rx.c `mlx5e_post_rx_wqes`, `mlx5_wq_cyc_update_db_record`).
//! Completions come in order on the RQ's CQ and are matched by the driver's CQ poller through
//! [`WqShared`] (receive slots), as an RC receive queue's are.

use alloc::sync::Arc;
use core::ptr;

use mlx5_prm::{
    create_rq_in, create_rq_out, destroy_rq_in, destroy_rq_out, modify_rq_in, modify_rq_out,
    opcode, qp_db, query_rq_in, query_rq_out, rqc, wq, wqe,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;
use crate::wq::WqShared;

use super::wq::WqMem;
/// What CREATE_RQ needs beyond the ring.
pub(super) struct RqParams {
    pub(super) cqn: u32,
    pub(super) pdn: u32,
    /// WQEs (a power of two).
    pub(super) entries: u32,
    /// The Q counter set its drops count in (0: the device's default).
    pub(super) counter_set: u8,
    /// log2 of the largest work queue (`log_max_wq_sz`).
    pub(super) log_max_wq_sz: u8,
}

/// A receive queue in the device, its ring and doorbell record.
pub(super) struct Rq<H: Hal> {
    pub(super) rqn: u32,
    mem: WqMem<H>,
    pub(super) shared: Arc<WqShared>,
    /// WQEs minus one.
    mask: u32,
    /// WQEs posted (mlx5e's `wqe_ctr`).
    head: u32,
    pub(super) destroyed: bool,
}

/// CREATE_RQ in RST on a fresh ring (Linux en_main.c `mlx5e_create_rq`, fields from
/// en/params.c `mlx5e_build_rq_param` for `MLX5_WQ_TYPE_CYCLIC` with one data segment).
pub(super) fn create<H: Hal>(ctx: &Arc<CtxInner<H>>, p: &RqParams) -> Result<Rq<H>> {
    // mlx5e_get_rqwq_log_stride(MLX5_WQ_TYPE_CYCLIC, 1): one data segment.
    let log_stride = wqe::data_seg::SIZE.trailing_zeros();
    let mut mem = WqMem::alloc(&ctx.hal, log_stride, p.entries, p.log_max_wq_sz)?;
    let mut c = mem.create_cmd(opcode::CREATE_RQ, rqc::WQ.within(create_rq_in::CTX), p.pdn)?;
    let r = |f: mlx5_prm::Field| f.within(create_rq_in::CTX);
    c.set(r(rqc::STATE), mlx5_prm::rqc_state::RST.into())
        .set(r(rqc::CQN), p.cqn)
        // en_main.c mlx5e_create_rq: `counter_set_id` the netdev's Q counter.
        .set(r(rqc::COUNTER_SET_ID), p.counter_set.into())
        // VLAN tags stay in the frame (`vsd`, VLAN strip disable: mlx5e sets it when
        // NETIF_F_HW_VLAN_CTAG_RX is off, en_main.c `set_feature_rx_vlan`); no FCS scattered.
        .set(r(rqc::VSD), 1)
        // en/params.c rq_end_pad_mode: ALIGN unless relaxed ordering with LRO.
        .set(
            wq::END_PADDING_MODE.within(r(rqc::WQ)),
            mlx5_prm::wq_end_pad_mode::ALIGN.into(),
        );
    let mut out = [0u8; create_rq_out::BYTES];
    if let Err(e) = ctx.exec(&c, &mut out) {
        mem.release_after(ctx, &e);
        return Err(e);
    }
    let rqn = get(&out, create_rq_out::RQN);
    Ok(Rq {
        rqn,
        mem,
        shared: Arc::new(WqShared::new_recv_by_counter(rqn, p.entries)),
        mask: p.entries - 1,
        head: 0,
        destroyed: false,
    })
}

impl<H: Hal> Rq<H> {
    /// MODIFY_RQ from state `from` to `to` (Linux en_main.c `mlx5e_modify_rq_state`:
    /// `rq_state` the current state, `rqc.state` the next).
    pub(super) fn modify(&self, ctx: &CtxInner<H>, from: u8, to: u8) -> Result<()> {
        let mut c = CmdBuf::new(opcode::MODIFY_RQ, 0, modify_rq_in::BYTES);
        c.set(modify_rq_in::RQ_STATE, from.into())
            .set(modify_rq_in::RQN, self.rqn)
            .set(rqc::STATE.within(modify_rq_in::CTX), to.into());
        let mut out = [0u8; modify_rq_out::BYTES];
        ctx.exec(&c, &mut out)
    }

    /// QUERY_RQ: the RQ's state (Linux core/transobj.c `mlx5_core_query_rq`, whose `rqc.state`
    /// en/reporter_rx.c reads).
    pub(super) fn query_state(&self, ctx: &CtxInner<H>) -> Result<u8> {
        let mut c = CmdBuf::new(opcode::QUERY_RQ, 0, query_rq_in::BYTES);
        c.set(query_rq_in::RQN, self.rqn);
        let mut out = alloc::vec![0u8; query_rq_out::BYTES];
        ctx.exec(&c, &mut out)?;
        Ok(get(&out, rqc::STATE.within(query_rq_out::RQ_CONTEXT)) as u8)
    }

    /// The RQ is in RST on its way back to RDY: no WQE is posted any more, the counters start
    /// again at 0 and so does the doorbell record (en_main.c `mlx5e_rqwq_reset`, wq.c
    /// `mlx5_wq_cyc_reset`).
    pub(super) fn restart(&mut self) -> Result<()> {
        self.head = 0;
        self.shared.reset();
        self.mem.db()?.write_be32(qp_db::RCV_DBR * 4, 0)
    }

    /// DESTROY_RQ (Linux core/transobj.c `mlx5_core_destroy_rq`). The ring and doorbell
    /// record are freed only when it succeeded; otherwise they are quarantined for good.
    pub(super) fn destroy(&mut self, ctx: &CtxInner<H>) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        self.destroyed = true;
        let mut c = CmdBuf::new(opcode::DESTROY_RQ, 0, destroy_rq_in::BYTES);
        c.set(destroy_rq_in::RQN, self.rqn);
        let mut out = [0u8; destroy_rq_out::BYTES];
        self.mem.destroy(ctx, &c, &mut out)
    }

    /// Writes the next WQE: buffer `len` bytes at `addr` of region `lkey` (en_main.c
    /// `mlx5e_alloc_rq`: `byte_count` and `lkey`; en_rx.c `mlx5e_alloc_rx_wqe`: `addr`),
    /// recorded for the poller with the buffer's index as its id. [`Rq::publish`] hands it to
    /// the device. Returns the buffer index (the WQE's).
    pub(super) fn write(
        &mut self,
        lkey: u32,
        addr_of: impl Fn(u32) -> u64,
        len: u32,
    ) -> Result<u32> {
        let ring = self.mem.ring()?;
        let idx = self.head & self.mask;
        let mut d = [0u8; wqe::data_seg::SIZE];
        d[wqe::data_seg::BYTE_COUNT..wqe::data_seg::BYTE_COUNT + 4]
            .copy_from_slice(&len.to_be_bytes());
        d[wqe::data_seg::LKEY..wqe::data_seg::LKEY + 4].copy_from_slice(&lkey.to_be_bytes());
        d[wqe::data_seg::ADDR..wqe::data_seg::ADDR + 8]
            .copy_from_slice(&addr_of(idx).to_be_bytes());
        ring.write(idx as usize * wqe::data_seg::SIZE, &d)?;
        self.shared.record_recv(self.head, u64::from(idx));
        self.head = self.head.wrapping_add(1);
        Ok(idx)
    }

    /// The ring (the tests' hostile WQEs).
    #[cfg(test)]
    pub(super) fn ring(&self) -> Result<&crate::hal::DmaMem<H::Dma>> {
        self.mem.ring()
    }

    /// WQEs in the ring minus one.
    #[cfg(test)]
    pub(super) fn mask(&self) -> u32 {
        self.mask
    }

    /// Free slots: WQEs the ring holds less those posted and not completed (wq.h
    /// `mlx5_wq_cyc_missing`).
    pub(super) fn missing(&self) -> u32 {
        let posted = self.head.wrapping_sub(self.shared.recv_tail());
        (self.mask + 1).saturating_sub(posted)
    }

    /// Publishes the WQEs written: `dma_wmb`, then the doorbell record's receive counter
    /// (en_rx.c `mlx5e_post_rx_wqes`, wq.h `mlx5_wq_cyc_update_db_record`: the 16-bit
    /// `wqe_ctr`).
    pub(super) fn publish(&self, hal: &H) -> Result<()> {
        let db = self.mem.db()?;
        hal.dma_wmb();
        // SAFETY: dword RCV_DBR of the 64-byte doorbell record this RQ owns (4-byte aligned);
        // volatile: the device reads it.
        unsafe {
            ptr::write_volatile(
                (db.ptr() as *mut u32).add(qp_db::RCV_DBR),
                (self.head & 0xffff).to_be(),
            )
        };
        Ok(())
    }
}
