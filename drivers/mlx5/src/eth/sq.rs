//! The send queue: CREATE_SQ, MODIFY_SQ (RST to RDY), DESTROY_SQ, and the Ethernet send WQE
//! with its doorbell (Linux en_main.c `mlx5e_create_sq`, `mlx5e_modify_sq`; en_tx.c
//! `mlx5e_sq_xmit_wqe`; en/txrx.h `mlx5e_notify_hw`).
//!
//! A WQE is a control segment, an Ethernet segment whose `inline_hdr` carries the first bytes
//! of the frame (as many as the device's minimum inline mode asks for), the rest of the inline
//! headers in 16-byte pieces, and one data segment for the rest of the frame, which the queue
//! copied into a transmit buffer of its registered region. WQEs take as many 64-byte blocks as
//! their segments need and may wrap around the ring's end (the device fetches the ring
//! cyclically; rdma-core qp.c `_mlx5_post_send` wraps the same way). Completion bookkeeping is
//! the RC queues' ([`WqShared`]): one slot per WQE start, read by the driver's CQ poller.

use alloc::sync::Arc;
use core::ptr;

use mlx5_prm::{
    create_sq_in, create_sq_out, destroy_sq_in, destroy_sq_out, eth_seg, modify_sq_in,
    modify_sq_out, opcode, qp_db, query_sq_in, query_sq_out, sqc, uar, wq, wqe,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;
use crate::wq::WqShared;

use super::wq::WqMem;
use super::{ETH_HLEN, VLAN_HLEN};

/// `MLX5_INLINE_MODE_*` (Linux include/linux/mlx5/device.h `enum mlx5_inline_modes`): how
/// much of each frame's headers the send WQE must carry inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum InlineMode {
    /// `MLX5_INLINE_MODE_NONE`.
    None = mlx5_prm::inline_mode::NONE,
    /// `MLX5_INLINE_MODE_L2`: the Ethernet header (with its VLAN tags).
    L2 = mlx5_prm::inline_mode::L2,
    /// `MLX5_INLINE_MODE_IP`: through the IP header.
    Ip = mlx5_prm::inline_mode::IP,
    /// `MLX5_INLINE_MODE_TCP_UDP`: through the TCP or UDP header.
    TcpUdp = mlx5_prm::inline_mode::TCP_UDP,
}

impl InlineMode {
    /// The mode of a `min_wqe_inline_mode` value (an unknown one asks for the most).
    pub(super) fn from_raw(v: u32) -> InlineMode {
        use mlx5_prm::inline_mode as m;
        match v {
            v if v == m::NONE.into() => InlineMode::None,
            v if v == m::L2.into() => InlineMode::L2,
            v if v == m::IP.into() => InlineMode::Ip,
            _ => InlineMode::TcpUdp,
        }
    }

    /// The most header bytes a frame needs inline in this mode: two VLAN tags, an IPv4 header
    /// of 60 bytes (IPv6's fixed header is 40), a TCP header of 60.
    fn max_inline(self) -> usize {
        const L2: usize = ETH_HLEN + 2 * VLAN_HLEN;
        match self {
            InlineMode::None => 0,
            InlineMode::L2 => L2,
            InlineMode::Ip => L2 + 60,
            InlineMode::TcpUdp => L2 + 60 + 60,
        }
    }
}

/// The largest WQE a frame takes (control, Ethernet segment, TCP/UDP inline headers, one data
/// segment), in bytes.
const MAX_WQE: usize = 4 * wqe::SEND_WQE_BB;

/// Bytes of `frame`'s headers the WQE carries inline in `mode`: Linux en_tx.c
/// `mlx5e_calc_min_inline` (L2: `mlx5e_skb_l2_header_offset`, at least `ETH_HLEN +
/// VLAN_HLEN`; IP: the transport header's offset, else L2; TCP/UDP: `eth_get_headlen`, the
/// end of the L4 header, with a VLAN_HLEN more when that is only the Ethernet header), never
/// more than the frame.
pub(super) fn inline_len(mode: InlineMode, frame: &[u8]) -> usize {
    let be16 = |o: usize| {
        frame
            .get(o..o + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    // The network header's offset: past the Ethernet header and up to two VLAN tags
    // (ETH_P_8021Q 0x8100, ETH_P_8021AD 0x88a8).
    let mut l3 = ETH_HLEN;
    let mut ethertype = be16(12);
    while matches!(ethertype, Some(0x8100 | 0x88a8)) && l3 < ETH_HLEN + 2 * VLAN_HLEN {
        ethertype = be16(l3 + 2);
        l3 += VLAN_HLEN;
    }
    let l2 = l3.max(eth_seg::MIN_INLINE_L2);
    // The transport header's offset and protocol (IPv4: IHL; IPv6: the fixed header).
    let l4 = match ethertype {
        Some(0x0800) => frame
            .get(l3)
            .map(|&b| (l3 + (b & 0xf) as usize * 4, frame.get(l3 + 9).copied())),
        Some(0x86dd) => Some((l3 + 40, frame.get(l3 + 6).copied())),
        _ => None,
    };
    let hlen = match mode {
        InlineMode::None => 0,
        InlineMode::L2 => l2,
        InlineMode::Ip => l4.map_or(l2, |(o, _)| o),
        InlineMode::TcpUdp => match l4 {
            // TCP: the data offset; UDP: 8 bytes (eth_get_headlen's flow dissection).
            Some((o, Some(6))) => o + frame.get(o + 12).map_or(20, |&b| (b >> 4) as usize * 4),
            Some((o, Some(17))) => o + 8,
            Some((o, _)) => o,
            None if l3 == ETH_HLEN => ETH_HLEN + VLAN_HLEN,
            None => l3,
        },
    };
    hlen.min(mode.max_inline()).min(frame.len())
}

/// What CREATE_SQ needs beyond the ring.
pub(super) struct SqParams {
    pub(super) cqn: u32,
    pub(super) tisn: u32,
    pub(super) pdn: u32,
    /// The UAR whose BlueFlame register takes the doorbell (mlx5e's `bfreg`).
    pub(super) uar_index: u32,
    pub(super) uar_offset: usize,
    /// Frames in flight at most (a power of two).
    pub(super) entries: u32,
    pub(super) inline: InlineMode,
    /// `sqc.min_wqe_inline_mode` is set (the cap says the vport context decides it).
    pub(super) set_min_inline: bool,
    /// log2 of the largest work queue (`log_max_wq_sz`).
    pub(super) log_max_wq_sz: u8,
}

/// A send queue in the device, its ring and doorbell record.
pub(super) struct Sq<H: Hal> {
    pub(super) sqn: u32,
    mem: WqMem<H>,
    pub(super) shared: Arc<WqShared>,
    /// Blocks in the ring minus one.
    mask: u16,
    /// The next WQE's first block, modulo 2^16 (the control segment's `wqe_index`, the
    /// doorbell record, the CQE's `wqe_counter`).
    pc: u16,
    /// Frames posted.
    pub(super) head: u32,
    /// Frames in flight at most.
    pub(super) entries: u32,
    /// BAR0 offset of the doorbell (the UAR's first BlueFlame register).
    db_off: usize,
    pub(super) inline: InlineMode,
    pub(super) destroyed: bool,
}

/// CREATE_SQ in RST on a fresh ring (Linux en_main.c `mlx5e_create_sq`, fields from
/// en/params.c `mlx5e_build_sq_param_common` / `mlx5e_build_sq_param`): one TIS, the CQ,
/// flush in error, the bfreg's UAR, 64-byte strides, as many as `entries` frames of the
/// largest WQE take.
pub(super) fn create<H: Hal>(ctx: &Arc<CtxInner<H>>, p: &SqParams) -> Result<Sq<H>> {
    let max_bbs =
        (eth_seg::EMPTY_DS_COUNT * wqe::SEND_WQE_DS + p.inline.max_inline() + wqe::data_seg::SIZE)
            .div_ceil(wqe::SEND_WQE_BB) as u32;
    let blocks = p
        .entries
        .checked_mul(max_bbs)
        .and_then(u32::checked_next_power_of_two)
        .unwrap_or(u32::MAX);
    let log_stride = wqe::SEND_WQE_BB.trailing_zeros();
    let mut mem = WqMem::alloc(&ctx.hal, log_stride, blocks, p.log_max_wq_sz)?;
    let mut c = mem.create_cmd(opcode::CREATE_SQ, sqc::WQ.within(create_sq_in::CTX), p.pdn)?;
    let s = |f: mlx5_prm::Field| f.within(create_sq_in::CTX);
    c.set(s(sqc::TIS_LST_SZ), 1)
        .set(s(sqc::TIS_NUM_0), p.tisn)
        .set(s(sqc::CQN), p.cqn)
        .set(s(sqc::STATE), mlx5_prm::sqc_state::RST.into())
        .set(s(sqc::FLUSH_IN_ERROR_EN), 1)
        .set(wq::UAR_PAGE.within(s(sqc::WQ)), p.uar_index);
    if p.set_min_inline {
        // en_main.c mlx5e_create_sq: only when `wqe_inline_mode` is VPORT_CONTEXT.
        c.set(s(sqc::MIN_WQE_INLINE_MODE), p.inline as u32);
    }
    let mut out = [0u8; create_sq_out::BYTES];
    if let Err(e) = ctx.exec(&c, &mut out) {
        mem.release_after(ctx, &e);
        return Err(e);
    }
    let sqn = get(&out, create_sq_out::SQN);
    Ok(Sq {
        sqn,
        mem,
        shared: Arc::new(WqShared::new(sqn, blocks, p.entries, 1)),
        mask: (blocks - 1) as u16,
        pc: 0,
        head: 0,
        entries: p.entries,
        db_off: p.uar_offset + uar::BF_OFFSET,
        inline: p.inline,
        destroyed: false,
    })
}

impl<H: Hal> Sq<H> {
    /// MODIFY_SQ from state `from` to `to` (Linux en_main.c `mlx5e_modify_sq`: `sq_state`
    /// the current state, `sqc.state` the next, no bitmask), as `mlx5e_create_sq_rdy` moves a
    /// new SQ from RST to RDY and en/health.c `mlx5e_health_sq_to_ready` an SQ in error back.
    pub(super) fn modify(&self, ctx: &CtxInner<H>, from: u8, to: u8) -> Result<()> {
        let mut c = CmdBuf::new(opcode::MODIFY_SQ, 0, modify_sq_in::BYTES);
        c.set(modify_sq_in::SQ_STATE, from.into())
            .set(modify_sq_in::SQN, self.sqn)
            .set(sqc::STATE.within(modify_sq_in::CTX), to.into());
        let mut out = [0u8; modify_sq_out::BYTES];
        ctx.exec(&c, &mut out)
    }

    /// QUERY_SQ: the SQ's state (Linux core/transobj.c `mlx5_core_query_sq_state`).
    pub(super) fn query_state(&self, ctx: &CtxInner<H>) -> Result<u8> {
        let mut c = CmdBuf::new(opcode::QUERY_SQ, 0, query_sq_in::BYTES);
        c.set(query_sq_in::SQN, self.sqn);
        let mut out = alloc::vec![0u8; query_sq_out::BYTES];
        ctx.exec(&c, &mut out)?;
        Ok(get(&out, sqc::STATE.within(query_sq_out::SQ_CONTEXT)) as u8)
    }

    /// The SQ is in RST on its way back to RDY, where the device starts again at WQE 0: so
    /// does the queue (en/reporter_tx.c `mlx5e_reset_txqsq_cc_pc`), its completion slots
    /// cleared and its doorbell record 0 (wq.c `mlx5_wq_cyc_reset`, as `mlx5e_rqwq_reset`
    /// does on an RQ's RST to RDY), so that no old WQE is taken for a new one.
    pub(super) fn restart(&mut self) -> Result<()> {
        self.pc = 0;
        self.head = 0;
        self.shared.reset();
        self.mem.db()?.write_be32(qp_db::SND_DBR * 4, 0)
    }

    /// DESTROY_SQ (Linux core/transobj.c `mlx5_core_destroy_sq`). The ring and doorbell
    /// record are freed only when it succeeded; otherwise they are quarantined for good.
    pub(super) fn destroy(&mut self, ctx: &CtxInner<H>) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        self.destroyed = true;
        let mut c = CmdBuf::new(opcode::DESTROY_SQ, 0, destroy_sq_in::BYTES);
        c.set(destroy_sq_in::SQN, self.sqn);
        let mut out = [0u8; destroy_sq_out::BYTES];
        self.mem.destroy(ctx, &c, &mut out)
    }

    /// Frames posted and not completed.
    pub(super) fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.shared.send_tail())
    }

    /// Writes the send WQE of a frame whose first `inline.len()` bytes go inline and whose
    /// rest (`len` bytes, copied by the caller) lies at `addr` of region `lkey`, records it for
    /// the poller and rings the doorbell (Linux en_tx.c `mlx5e_sq_xmit_wqe`,
    /// `mlx5e_txwqe_complete`; en/txrx.h `mlx5e_notify_hw`). The caller checked the room.
    pub(super) fn post(
        &mut self,
        hal: &H,
        inline: &[u8],
        lkey: u32,
        addr: u64,
        len: u32,
    ) -> Result<()> {
        let mut w = [0u8; MAX_WQE];
        let ds = build_wqe(&mut w, self.pc, self.sqn, inline, lkey, addr, len);
        let bbs = ds.div_ceil(wqe::SEND_WQE_BB / wqe::SEND_WQE_DS);
        let (ring, db) = (self.mem.ring()?, self.mem.db()?);
        let start = self.pc;
        for (i, block) in w.chunks_exact(wqe::SEND_WQE_BB).take(bbs).enumerate() {
            let idx = (start.wrapping_add(i as u16) & self.mask) as usize;
            ring.write(idx * wqe::SEND_WQE_BB, block)?;
        }
        self.pc = start.wrapping_add(bbs as u16);
        self.head = self.head.wrapping_add(1);
        self.shared
            .record_send(start, self.head, u64::from(self.head));
        // en/txrx.h mlx5e_notify_hw: the WQE visible before the doorbell record (dma_wmb),
        // the record visible before the doorbell (wmb), then the control segment's first 8
        // bytes as one 64-bit store to the BlueFlame register (mlx5_write64).
        hal.dma_wmb();
        // SAFETY: dword SND_DBR of the 64-byte doorbell record this SQ owns (4-byte aligned);
        // volatile: the device reads it.
        unsafe {
            ptr::write_volatile(
                (db.ptr() as *mut u32).add(qp_db::SND_DBR),
                u32::from(self.pc).to_be(),
            )
        };
        hal.dma_wmb();
        let mut ctrl = [0u8; 8];
        ctrl.copy_from_slice(&w[..8]);
        hal.mmio_write64(self.db_off, ctrl);
        Ok(())
    }
}

/// Builds the send WQE at block `pc` of SQ `sqn` into `w` (zeroed): returns its size in
/// 16-byte segments. Linux en_tx.c `mlx5e_sq_xmit_wqe` (`eseg->inline_hdr.sz`, the headers
/// from `inline_hdr.start` on, the data segments after the inline ones) and
/// `mlx5e_txwqe_complete` (`opmod_idx_opcode = pc << 8 | MLX5_OPCODE_SEND`, `qpn_ds = sqn << 8
/// | ds_cnt`); `fm_ce_se` CQ_UPDATE as `mlx5e_notify_hw` sets it on the WQE it rings; no
/// checksum offload (`cs_flags` 0: the frames carry their checksums), no LSO (`mss` 0).
fn build_wqe(
    w: &mut [u8; MAX_WQE],
    pc: u16,
    sqn: u32,
    inline: &[u8],
    lkey: u32,
    addr: u64,
    len: u32,
) -> usize {
    let eseg = wqe::ctrl_seg::SIZE;
    let mut ds = eth_seg::EMPTY_DS_COUNT;
    if !inline.is_empty() {
        let at = eseg + eth_seg::INLINE_HDR_SZ;
        w[at..at + 2].copy_from_slice(&(inline.len() as u16).to_be_bytes());
        let start = eseg + eth_seg::INLINE_HDR_START;
        w[start..start + inline.len()].copy_from_slice(inline);
        // en_tx.c mlx5e_sq_calc_wqe_attr: ds_cnt_inl.
        ds += eth_seg::inline_ds(inline.len());
    }
    if len != 0 {
        let d = ds * wqe::SEND_WQE_DS;
        w[d + wqe::data_seg::BYTE_COUNT..d + wqe::data_seg::BYTE_COUNT + 4]
            .copy_from_slice(&len.to_be_bytes());
        w[d + wqe::data_seg::LKEY..d + wqe::data_seg::LKEY + 4]
            .copy_from_slice(&lkey.to_be_bytes());
        w[d + wqe::data_seg::ADDR..d + wqe::data_seg::ADDR + 8]
            .copy_from_slice(&addr.to_be_bytes());
        ds += 1;
    }
    let c = wqe::ctrl_seg::OPMOD_IDX_OPCODE;
    w[c..c + 4].copy_from_slice(&wqe::opmod_idx_opcode(0, pc, wqe::opcode::SEND).to_be_bytes());
    let q = wqe::ctrl_seg::QPN_DS;
    w[q..q + 4].copy_from_slice(&wqe::qpn_ds(sqn, ds as u8).to_be_bytes());
    w[wqe::ctrl_seg::FM_CE_SE] = wqe::ctrl::CQ_UPDATE;
    ds
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ethertype: u16, rest: &[u8]) -> alloc::vec::Vec<u8> {
        let mut f = alloc::vec![0u8; 12];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(rest);
        f.resize(f.len().max(100), 0);
        f
    }

    #[test]
    fn inline_lengths_follow_mlx5e_calc_min_inline() {
        // IPv4 with a 20-byte header carrying TCP with a 32-byte header.
        let mut ip = alloc::vec![0x45u8, 0, 0, 0, 0, 0, 0, 0, 0, 6];
        ip.resize(20, 0);
        ip.extend_from_slice(&[0; 12]);
        ip.push(0x80); // data offset 8 words
        let f = frame(0x0800, &ip);
        assert_eq!(inline_len(InlineMode::None, &f), 0);
        assert_eq!(inline_len(InlineMode::L2, &f), 18);
        assert_eq!(inline_len(InlineMode::Ip, &f), 34);
        assert_eq!(inline_len(InlineMode::TcpUdp, &f), 34 + 32);
        // UDP over IPv6.
        let mut ip6 = alloc::vec![0x60u8, 0, 0, 0, 0, 0, 17];
        ip6.resize(40, 0);
        let f = frame(0x86dd, &ip6);
        assert_eq!(inline_len(InlineMode::Ip, &f), 54);
        assert_eq!(inline_len(InlineMode::TcpUdp, &f), 62);
        // ARP: no transport header; one VLAN tag.
        let f = frame(0x0806, &[]);
        assert_eq!(inline_len(InlineMode::Ip, &f), 18);
        assert_eq!(inline_len(InlineMode::TcpUdp, &f), 18);
        let f = frame(0x8100, &[0, 1, 0x08, 0x06]);
        assert_eq!(inline_len(InlineMode::L2, &f), 18);
        assert_eq!(inline_len(InlineMode::TcpUdp, &f), 18);
        // Never more than the frame.
        assert_eq!(inline_len(InlineMode::L2, &f[..15]), 15);
    }

    #[test]
    fn wqe_layout_and_size() {
        let mut w = [0u8; MAX_WQE];
        let hdr = [0xabu8; 18];
        let ds = build_wqe(&mut w, 7, 0x123, &hdr, 0x55, 0x1000, 82);
        // ctrl + eth + 16 inline bytes past the first 2 + data segment.
        assert_eq!(ds, 4);
        assert_eq!(&w[0..4], &[0, 0, 7, wqe::opcode::SEND]);
        assert_eq!(&w[4..8], &[0, 0x01, 0x23, 4]);
        assert_eq!(w[11], wqe::ctrl::CQ_UPDATE);
        assert_eq!(&w[28..30], &[0, 18]);
        assert_eq!(&w[30..48], &hdr);
        assert_eq!(&w[48..52], &82u32.to_be_bytes());
        assert_eq!(&w[52..56], &0x55u32.to_be_bytes());
        assert_eq!(&w[56..64], &0x1000u64.to_be_bytes());
        // No inline, no data: the two fixed segments.
        let mut w = [0u8; MAX_WQE];
        assert_eq!(build_wqe(&mut w, 0, 1, &[], 0, 0, 0), 2);
    }
}
