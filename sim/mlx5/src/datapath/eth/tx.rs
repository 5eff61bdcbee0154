//! Ethernet send: an SQ doorbell executes the SQ's new WQEs, each a frame on the port.
//!
//! Linux rings an SQ as it rings a QP (drivers/net/ethernet/mellanox/mlx5/core/en/txrx.h
//! `mlx5e_notify_hw`): it sets CQ_UPDATE on the last WQE's ctrl segment, writes the WQEBB
//! producer counter to the doorbell record's send dword (`MLX5_SND_DBR`), and writes the ctrl
//! segment's first 8 bytes to the UAR's doorbell register, whose `qpn` is the SQN
//! (`datapath::sq_doorbell` hands SQNs here). The model then takes every WQE from
//! the SQ's counter to the producer counter, in order.
//!
//! A send WQE (en_tx.c `mlx5e_sq_xmit_wqe`, en.h `struct mlx5e_tx_wqe`, include/linux/mlx5/qp.h
//! `struct mlx5_wqe_eth_seg`): the ctrl segment (opcode SEND, or NOP; `ds`; `fm_ce_se`), the
//! Ethernet segment (`cs_flags`, `mss`, `inline_hdr.sz` and the first two inline bytes), the
//! rest of the inline headers in the next 16-byte units (`ds_cnt_inl`), then data segments
//! (`byte_count`, `lkey`, `addr`) whose bytes follow the inline ones in the frame. The lkey
//! must be an mkey of the SQ's PD granting local read (Linux uses one PA mkey, en_common.c
//! `mlx5e_create_mkey`); every byte is read through the key table
//! ([`crate::objects::mr::MkeyTable::resolve`]) before the frame leaves.
//!
//! Checks, each an error CQE (REQ_ERR) that moves the SQ to ERR: the ctrl segment's SQN,
//! `ds`, the opcode and opmod, `mss` and the software-parser fields (no LSO or SWP
//! advertised), `cs_flags` beyond L3/L4, inline bytes past the WQE, an inline data segment,
//! keys, a frame shorter than an Ethernet header or longer than the vport MTU (less the FCS),
//! and fewer inline header bytes than the SQ's `min_wqe_inline_mode` asks for. A WQE with
//! CQ_UPDATE completes with a CQE (REQ, the WQE's index in `wqe_counter`, as en_tx.c
//! `mlx5e_poll_tx_cq` reads it); others complete silently. A frame shorter than 60 bytes is
//! padded with zeros, as an Ethernet MAC does. WQEs posted while the SQ is in ERR complete
//! with WR_FLUSH_ERR when `flush_in_error_en` is set.

use mlx5_prm::sqc_state as state;
use mlx5_prm::wqe::{ctrl, ctrl_seg, data_seg, opcode as wqe_opcode, INLINE_SEG};
use mlx5_prm::{cmd_hca_cap, cqe, eth_seg, event_queue_type, inline_mode};

use crate::be::{be32, be64};
use crate::datapath::cq::post_cqe;
use crate::datapath::eth::catastrophe_event;
use crate::datapath::eth::headers::{self, Headers, ETH_HLEN};
use crate::datapath::wqe::{MAX_WQE_BYTES, ZERO_BYTE_COUNT_MEANS};
use crate::datapath::{flush_cqe, lkey_vendor, vendor, Dp};
use crate::objects::cq::Cqe;
use crate::objects::mr::{Access, KeyUser};
use crate::objects::wq::WqKind;
use crate::roce::counters::Counter;

/// Bytes of the ctrl segment.
const CTRL_BYTES: usize = 16;
/// Offset of the Ethernet segment in the WQE (after the ctrl segment).
const ESEG: usize = CTRL_BYTES;
/// Offset of the first inline header byte in the WQE.
const INLINE_START: usize = ESEG + eth_seg::INLINE_HDR_START;
const L3_CSUM: u8 = eth_seg::cs_flags::L3_CSUM;
const L4_CSUM: u8 = eth_seg::cs_flags::L4_CSUM;
/// Ethernet FCS bytes, which the vport MTU counts (Linux en.h `MLX5E_SW2HW_MTU`) and the
/// frames here do not carry.
const ETH_FCS_LEN: u32 = 4;
/// The shortest frame on the wire without FCS (IEEE 802.3 `ETH_ZLEN`).
const ETH_ZLEN: usize = 60;

/// An error completion: (CQE syndrome, vendor syndrome).
type WqeError = (u8, u8);

fn malformed() -> WqeError {
    (cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE)
}

/// Rings SQ `sqn` for a doorbell that came through UAR page `uar`: false if no SQ of that
/// number rings through that page (the doorbell is someone else's, or nobody's).
pub(crate) fn doorbell(dp: &mut Dp<'_>, uar: u32, sqn: u32) -> bool {
    match dp.objects.sqs.get(sqn) {
        Some(sq) if sq.wq.uar == uar => {
            kick(dp, sqn);
            true
        }
        _ => false,
    }
}

/// What executing one WQE needs of its SQ (read before the WQE runs: running it changes
/// only the SQ's counter).
#[derive(Clone, Copy)]
struct SqView {
    sqn: u32,
    pd: u32,
    cqn: u32,
    user_index: u32,
    min_inline: u8,
}

/// Executes the new WQEs of SQ `sqn` (its doorbell rang).
fn kick(dp: &mut Dp<'_>, sqn: u32) {
    let mut raw = [0u8; MAX_WQE_BYTES];
    loop {
        let mem = dp.mem.clone();
        let Some(sq) = dp.objects.sqs.get(sqn) else {
            return;
        };
        match sq.state {
            state::RDY => {}
            state::ERR if sq.flush_in_error => return flush(dp, sqn),
            _ => return,
        }
        let pi = match sq.wq.producer(&*mem, WqKind::Send) {
            Ok(pi) => pi,
            Err(_) => return catastrophe(dp, sqn, "doorbell record unreadable"),
        };
        let pos = sq.next;
        if pos == pi {
            return;
        }
        if pi.wrapping_sub(pos) as u32 > sq.wq.size() {
            return catastrophe(dp, sqn, "SQ producer counter beyond the ring");
        }
        let view = SqView {
            sqn,
            pd: sq.wq.pd,
            cqn: sq.cqn,
            user_index: sq.user_index,
            min_inline: sq.min_inline,
        };
        let Ok(len) = fetch(dp, sqn, pos, &mut raw) else {
            return catastrophe(dp, sqn, "SQ buffer unreadable");
        };
        let w = &raw[..len];
        let bbs = len.div_ceil(64).max(1) as u16;
        if let Some(sq) = dp.objects.sqs.get_mut(sqn) {
            sq.next = pos.wrapping_add(bbs);
        }
        let (op, index) = (w[3], u16::from_be_bytes([w[1], w[2]]));
        match execute(dp, view, w) {
            Ok(()) => {
                if w[ctrl_seg::FM_CE_SE] & ctrl::CQ_UPDATE != 0 {
                    let c = Cqe::requester(op, sqn, index, 0).with_user_index(view.user_index);
                    post_cqe(dp, view.cqn, &c);
                }
            }
            Err((syn, vend)) => {
                let c = Cqe::error(cqe::opcode::REQ_ERR, syn, vend, op, sqn, index)
                    .with_user_index(view.user_index);
                post_cqe(dp, view.cqn, &c);
                if let Some(sq) = dp.objects.sqs.get_mut(sqn) {
                    sq.state = state::ERR;
                }
            }
        }
    }
}

/// Copies the WQE at WQEBB counter `pos` of SQ `sqn` into `raw` (undoing the ring's wrap);
/// returns its length in bytes (`ds * 16`, at least the ctrl segment, at most the ring).
fn fetch(dp: &Dp<'_>, sqn: u32, pos: u16, raw: &mut [u8; MAX_WQE_BYTES]) -> Result<usize, ()> {
    let sq = dp.objects.sqs.get(sqn).ok_or(())?;
    let mem = &**dp.mem;
    sq.wq
        .read(mem, pos as u32, 0, &mut raw[..CTRL_BYTES])
        .map_err(|_| ())?;
    let ds = (raw[7] & 0x3f).max(1) as usize;
    let len = (ds * 16).min(sq.wq.size() as usize * 64);
    // Basic block by basic block: the ring wraps between two of them.
    let mut at = 0;
    while at < len {
        let n = (len - at).min(64);
        sq.wq
            .read(mem, pos as u32 + (at / 64) as u32, 0, &mut raw[at..at + n])
            .map_err(|_| ())?;
        at += n;
    }
    Ok(len)
}

/// Runs one WQE: a frame on the port, or nothing (NOP).
fn execute(dp: &mut Dp<'_>, sq: SqView, w: &[u8]) -> Result<(), WqeError> {
    let (opmod, op) = (w[0], w[3]);
    let qpn = be32(w, 4) >> 8;
    let max_wqe = dp.cap(cmd_hca_cap::MAX_WQE_SZ_SQ) as usize;
    if qpn != sq.sqn || opmod != 0 || w.len() > max_wqe {
        return Err(malformed());
    }
    match op {
        wqe_opcode::NOP => Ok(()),
        wqe_opcode::SEND => {
            let frame = build_frame(dp, sq, w)?;
            count_sent(dp, &frame);
            dp.port.send_frame(frame);
            Ok(())
        }
        _ => Err(malformed()),
    }
}

/// Counts a frame an SQ sends in the vport's `transmitted_eth_*` class of its destination
/// MAC (QUERY_VPORT_COUNTER).
fn count_sent(dp: &Dp<'_>, frame: &[u8]) {
    let (frames, bytes) = match frame[0] {
        _ if frame[..6] == [0xff; 6] => {
            (Counter::TxEthBroadcastFrames, Counter::TxEthBroadcastBytes)
        }
        d if d & 1 != 0 => (Counter::TxEthMulticastFrames, Counter::TxEthMulticastBytes),
        _ => (Counter::TxEthUnicastFrames, Counter::TxEthUnicastBytes),
    };
    let c = dp.port.counters();
    c.bump(frames);
    c.add(bytes, frame.len() as u64);
}

/// The frame a SEND WQE describes, checked and with its checksums offloaded.
fn build_frame(dp: &mut Dp<'_>, sq: SqView, w: &[u8]) -> Result<Vec<u8>, WqeError> {
    if w.len() < ESEG + eth_seg::SIZE {
        return Err(malformed());
    }
    let e = &w[ESEG..ESEG + eth_seg::SIZE];
    // No software parser offsets or flags, no LSO `mss`.
    let swp = &e[eth_seg::SWP_OUTER_L4_OFFSET..=eth_seg::SWP_INNER_L3_OFFSET];
    if swp.iter().any(|&b| b != 0)
        || e[eth_seg::SWP_FLAGS] != 0
        || e[eth_seg::MSS..eth_seg::MSS + 2] != [0, 0]
    {
        return Err(malformed());
    }
    let cs_flags = e[eth_seg::CS_FLAGS];
    if cs_flags & !(L3_CSUM | L4_CSUM) != 0 {
        return Err(malformed());
    }
    // `inline_hdr.sz` (a VLAN insertion request would set its bit 15: not advertised).
    let sz = eth_seg::INLINE_HDR_SZ;
    let ihs = u16::from_be_bytes([e[sz], e[sz + 1]]) as usize;
    if INLINE_START + ihs > w.len() {
        return Err(malformed());
    }
    // Data segments start after the inline bytes' 16-byte units (en_tx.c `ds_cnt_inl`).
    let dstart = ESEG + eth_seg::SIZE + eth_seg::inline_ds(ihs) * data_seg::SIZE;
    if dstart > w.len() {
        return Err(malformed());
    }
    let mtu = dp.objects.vport.mtu();
    let max_frame = mtu.saturating_sub(ETH_FCS_LEN) as u64;
    let mut total = ihs as u64;
    for d in w[dstart..].chunks_exact(data_seg::SIZE) {
        let bc = be32(d, 0);
        if bc & INLINE_SEG != 0 {
            return Err(malformed());
        }
        total += if bc == 0 {
            ZERO_BYTE_COUNT_MEANS
        } else {
            bc as u64
        };
    }
    if total > max_frame {
        return Err((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::MSG_TOO_LONG));
    }
    if total < ETH_HLEN as u64 {
        return Err(malformed());
    }
    let mut frame = vec![0u8; total as usize];
    frame[..ihs].copy_from_slice(&w[INLINE_START..INLINE_START + ihs]);
    let user = KeyUser {
        pd: sq.pd,
        qpn: sq.sqn,
    };
    let mut at = ihs;
    for d in w[dstart..].chunks_exact(data_seg::SIZE) {
        let (len, lkey, addr) = (be32(d, 0) as usize, be32(d, 4), be64(d, 8));
        let r = dp
            .objects
            .mkeys
            .resolve(lkey, addr, len as u64, Access::LOCAL_READ, user)
            .map_err(|f| (cqe::syndrome::LOCAL_PROT_ERR, lkey_vendor(f)))?;
        r.read(&**dp.mem, &mut frame[at..at + len])
            .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
        at += len;
    }
    let h = Headers::parse(&frame);
    let need = match sq.min_inline {
        inline_mode::NONE => 0,
        inline_mode::L2 => h.l2,
        inline_mode::IP => h.through_l3(),
        _ => h.through_l4(),
    };
    if ihs < need.min(frame.len()) {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, vendor::INLINE_HEADERS));
    }
    if cs_flags != 0 {
        headers::offload(&mut frame, cs_flags & L3_CSUM != 0, cs_flags & L4_CSUM != 0);
    }
    if frame.len() < ETH_ZLEN {
        frame.resize(ETH_ZLEN, 0);
    }
    Ok(frame)
}

/// Completes every WQE posted to SQ `sqn` (in ERR) with WR_FLUSH_ERR.
fn flush(dp: &mut Dp<'_>, sqn: u32) {
    let mem = dp.mem.clone();
    let Some(sq) = dp.objects.sqs.get(sqn) else {
        return;
    };
    let Ok(pi) = sq.wq.producer(&*mem, WqKind::Send) else {
        return;
    };
    let (cqn, uidx, size) = (sq.cqn, sq.user_index, sq.wq.size());
    // Basic blocks announced and not taken yet.
    let mut left = pi.wrapping_sub(sq.next);
    if left as u32 > size {
        return; // an impossible counter: nothing to flush
    }
    let mut ctrl = [0u8; CTRL_BYTES];
    loop {
        let Some(sq) = dp.objects.sqs.get_mut(sqn) else {
            return;
        };
        let pos = sq.next;
        if left == 0 || sq.wq.read(&*mem, pos as u32, 0, &mut ctrl).is_err() {
            return;
        }
        // A WQE longer than what is announced is not flushed (nor taken).
        let bbs = ((ctrl[7] & 0x3f) as usize * 16).div_ceil(64).max(1) as u16;
        if bbs > left {
            return;
        }
        left -= bbs;
        sq.next = pos.wrapping_add(bbs);
        let index = u16::from_be_bytes([ctrl[1], ctrl[2]]);
        let c = flush_cqe(cqe::opcode::REQ_ERR, ctrl[3], sqn, index, uidx);
        post_cqe(dp, cqn, &c);
    }
}

/// A DMA failure on the SQ: a WQ_CATAS_ERROR event naming the SQ, and the SQ to ERR.
fn catastrophe(dp: &mut Dp<'_>, sqn: u32, why: &str) {
    catastrophe_event(dp, event_queue_type::SQ, sqn, why);
    if let Some(sq) = dp.objects.sqs.get_mut(sqn) {
        sq.state = state::ERR;
    }
}
