//! The UAR doorbell path: a BAR0 write into a UAR page ([`bar_write`]) reaches the EQ and CQ
//! doorbells, the send doorbell, or a BlueFlame copy (see [`crate::objects::uar`] for the
//! registers and the BlueFlame model; the UAR table there keeps which page is whose and the
//! BlueFlame copies arriving).

use crate::datapath::Dp;
use crate::objects::eq::COUNTER_MASK;
use crate::objects::uar::{
    BfBurst, Ran, BF_OFFSET, CQ_DOORBELL, EQ_DOORBELL_ARM, EQ_DOORBELL_NO_ARM, UAR_PAGE_SIZE,
};

/// A BAR0 write that landed in UAR page `page` at `offset` (bytes in address order).
///
/// Inlined into the BAR0 write path: a send doorbell (an 8-byte store at an 8-byte aligned
/// register of the DB/BF area, the most frequent write) goes straight to the doorbell, in the
/// same frame; every other write is `bar_write_other`.
#[inline(always)]
pub fn bar_write(hca: &mut Dp<'_>, page: u32, offset: u32, bytes: &[u8]) {
    if let Ok(b) = <[u8; 8]>::try_from(bytes) {
        if offset & 7 == 0
            && (BF_OFFSET..UAR_PAGE_SIZE as u32).contains(&offset)
            && hca.objects.uars.contains(page)
        {
            // What `bar_write_other` does with it: `combine` of an 8-byte store, then
            // `blueflame`.
            hca.objects.uars.forget_half((page, offset));
            return blueflame(hca, page, offset, u64::from_be_bytes(b));
        }
    }
    bar_write_other(hca, page, offset, bytes)
}

/// [`bar_write`] of any write.
#[inline(never)]
fn bar_write_other(hca: &mut Dp<'_>, page: u32, offset: u32, bytes: &[u8]) {
    if !hca.objects.uars.contains(page) {
        hca.trace(format_args!(
            "write to unallocated UAR page {page} offset {offset:#x}: ignored"
        ));
        return;
    }
    let len = bytes.len() as u32;
    match (offset, len) {
        (EQ_DOORBELL_ARM | EQ_DOORBELL_NO_ARM, 4 | 8) => {
            let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            eq_doorbell(hca, page, v, offset == EQ_DOORBELL_ARM);
        }
        _ if register64(offset) => {
            if let Some(v) = combine(hca, page, offset, bytes) {
                let reg = offset & !7;
                if reg == CQ_DOORBELL {
                    crate::datapath::cq::arm_doorbell(hca, v);
                } else {
                    blueflame(hca, page, reg, v);
                }
            }
        }
        _ => hca.trace(format_args!(
            "UAR {page}: {len}-byte write at {offset:#x}: not a doorbell register, ignored"
        )),
    }
}

/// Size in bytes of one half of a BlueFlame register (`bf_reg_size / 2`, rdma-core mlx5.c),
/// as the datapath decodes doorbells.
fn bf_half(hca: &Dp<'_>) -> u32 {
    let log_bf = hca.cap(mlx5_prm::cmd_hca_cap::LOG_BF_REG_SIZE).min(11);
    ((1u32 << log_bf) / 2).max(8)
}

/// A 64-bit store into the DB/BF area at `reg` (8-byte aligned): a doorbell at the start of a
/// half, or a later qword of a BlueFlame copy.
#[inline(always)]
fn blueflame(hca: &mut Dp<'_>, page: u32, reg: u32, v: u64) {
    let half = bf_half(hca);
    let pos = (reg - BF_OFFSET) % half;
    if pos == 0 {
        return bf_doorbell(hca, page, reg, v, half);
    }
    bf_qword(hca, page, reg - pos, pos, v)
}

/// A doorbell: the first 8 bytes of the half at `start` (`v`, the first 8 bytes of the last
/// WQE's ctrl segment). Ends a copy still arriving on the half (torn), records what a
/// BlueFlame copy of the WQE must match, then rings the send queue.
#[inline(always)]
fn bf_doorbell(hca: &mut Dp<'_>, page: u32, start: u32, v: u64, half: u32) {
    let at = (page, start);
    // The record on this half, looked up once for the whole doorbell (ringing adds or removes
    // none: the datapath keeps no BlueFlame state).
    let mut slot = hca.objects.uars.burst_at(at);
    // A new doorbell on this half: a copy still arriving there was abandoned (torn).
    if let Some(i) = slot {
        let old = hca.objects.uars.burst(i);
        if old.is_copy && old.checked.count_ones() as usize != old.len / 64 {
            let qpn = old.qpn;
            bf_torn(hca, at, qpn);
            slot = None;
        }
    }
    // The QP the doorbell rings, if it exists and the doorbell came through its own UAR page.
    // Looked up before the record below is made (which needs to know), and rung after it:
    // ringing touches no record, so this is the order of events of ringing first.
    let rung = crate::datapath::sq_doorbell(hca, page, start, v, half as usize);
    // ctrl segment: opmod_idx_opcode (opmod 8 | wqe_index 16 | opcode 8), qpn_ds (qpn 24 |
    // ds 8, of which 6 bits; Linux include/linux/mlx5/qp.h `mlx5_wqe_ctrl_seg`).
    let ds = (v & 0x3f) as usize;
    let len = (ds * 16).div_ceil(64) * 64;
    let wqe_index = (v >> 40) as u16;
    match (rung, slot) {
        (Some(qpn), Some(i)) if len != 0 && len <= half as usize => {
            // The previous doorbell's record on this half is replaced in place (most
            // doorbells find one there): no move, no allocation. A buffer a copy used stays
            // for the next copy on this half; `have` and `checked` are set when one starts.
            let mut wqe = std::mem::take(&mut hca.objects.uars.burst_mut(i).wqe);
            let ran = read_ran(hca, qpn, wqe_index, len, &mut wqe);
            let b = hca.objects.uars.burst_mut(i);
            b.qpn = qpn;
            b.wqe_index = wqe_index;
            b.len = len;
            b.first = v.to_be_bytes();
            b.is_copy = false;
            b.ran = ran;
            b.wqe = wqe;
        }
        (Some(qpn), None) if len != 0 && len <= half as usize => {
            let mut wqe = hca.objects.uars.spare_buffer();
            let ran = read_ran(hca, qpn, wqe_index, len, &mut wqe);
            hca.objects.uars.push_burst(BfBurst {
                at,
                qpn,
                wqe_index,
                len,
                data: Vec::new(),
                first: v.to_be_bytes(),
                have: 1,
                checked: 0,
                is_copy: false,
                ran,
                wqe,
            });
        }
        (_, Some(_)) => {
            hca.objects.uars.take_burst(at);
        }
        (_, None) => {}
    }
    if let Some(qpn) = rung {
        crate::datapath::kick(hca, qpn);
    }
}

/// A copy on the half `at` torn by a new doorbell: its record goes, and its QP gets the
/// catastrophic error.
#[cold]
#[inline(never)]
fn bf_torn(hca: &mut Dp<'_>, at: (u32, u32), qpn: u32) {
    hca.objects.uars.take_burst(at);
    bf_error(
        hca,
        qpn,
        "BlueFlame copy torn: a new doorbell before its end",
    );
}

/// A later qword `v` of a BlueFlame copy: `pos` bytes into the half at `start`.
#[inline(never)]
fn bf_qword(hca: &mut Dp<'_>, page: u32, start: u32, pos: u32, v: u64) {
    let reg = start + pos;
    let uars = &mut hca.objects.uars;
    let Some(b) = uars.burst_at((page, start)) else {
        hca.trace(format_args!(
            "UAR {page}: BlueFlame qword at {reg:#x} without a doorbell on its half: ignored"
        ));
        return;
    };
    let i = b;
    let b = uars.burst(i);
    let p = pos as usize;
    if p >= b.len {
        let qpn = b.qpn;
        hca.objects.uars.take_burst((page, start));
        bf_error(hca, qpn, "BlueFlame copy longer than its WQE's ds");
        return;
    }
    if !b.is_copy {
        uars.start_copy(i);
    }
    let b = uars.burst_mut(i);
    b.data[p..p + 8].copy_from_slice(&v.to_be_bytes());
    b.have |= 1u128 << (p / 8);
    let block = p / 64;
    let mask = 0xffu128 << (block * 8);
    if b.have & mask != mask || b.checked & (1 << block) != 0 {
        return;
    }
    b.checked |= 1 << block;
    let (qpn, ran, done) = (b.qpn, b.ran, b.checked.count_ones() as usize == b.len / 64);
    let blk = block * 64..block * 64 + 64;
    // `wqe` holds `len` bytes only when the WQE was read.
    let same = ran == Ran::Read && b.data[blk.clone()] == b.wqe[blk];
    if done {
        hca.objects.uars.take_burst((page, start));
    }
    match ran {
        Ran::Read => {
            hca.objects.uars.count_bf_block();
            if !same {
                bf_error(
                    hca,
                    qpn,
                    "BlueFlame block differs from the WQE the device ran",
                );
            }
        }
        Ran::Earlier => {}
        Ran::Unreadable => {
            hca.objects.uars.count_bf_block();
            bf_error(hca, qpn, "BlueFlame copy for a WQE the device cannot read");
        }
    }
}

/// Reads QP `qpn`'s WQE at SQ counter `idx` (`len` bytes, wrapping in the ring) into `wqe`
/// when its doorbell rings, before it runs: what its BlueFlame copy, if one follows, is
/// compared with (see [`Ran`]). A WQE the device already took off the ring is not read.
fn read_ran(hca: &Dp<'_>, qpn: u32, idx: u16, len: usize, wqe: &mut Vec<u8>) -> Ran {
    let Some(q) = hca.objects.qps.get(qpn) else {
        return Ran::Unreadable;
    };
    let size = q.sq_size();
    if size == 0 {
        return Ran::Unreadable;
    }
    // The WQEBBs between the device's consumer counter and the doorbell record's counter
    // are still ahead of it; software announces at most the ring's size.
    if u32::from(idx.wrapping_sub(q.sq_next)) >= size {
        return Ran::Earlier;
    }
    wqe.clear();
    wqe.resize(len, 0);
    for (k, block) in wqe.chunks_exact_mut(64).enumerate() {
        let at = (u64::from(idx.wrapping_add(k as u16)) & u64::from(size - 1)) * 64;
        if q.buf.read(&**hca.mem, q.sq_offset + at, block).is_err() {
            return Ran::Unreadable;
        }
    }
    Ran::Read
}

/// A BlueFlame copy that is not the WQE in memory: a work queue catastrophic error on the QP
/// (WQ_CATAS_ERROR event, QP to ERR). Model choice, see the module documentation.
fn bf_error(hca: &mut Dp<'_>, qpn: u32, why: &str) {
    hca.objects.uars.count_bf_mismatch();
    hca.trace_note(format_args!(
        "QP {qpn:#x}: {why}: work queue catastrophic error"
    ));
    let mut data = [0u8; mlx5_prm::qp_events::BYTES];
    let _ = mlx5_prm::qp_events::TYPE.set(&mut data, mlx5_prm::event_queue_type::QP.into());
    let _ = mlx5_prm::qp_events::QPN_RQN_SQN.set(&mut data, qpn);
    hca.post_async_event(mlx5_prm::event::WQ_CATAS_ERROR, 0, &data);
    crate::datapath::enter_error(hca, qpn);
}

/// True for offsets of 64-bit doorbell registers: the CQ doorbell and the DB/BF area.
fn register64(offset: u32) -> bool {
    let reg = offset & !7;
    reg == CQ_DOORBELL || (BF_OFFSET..UAR_PAGE_SIZE as u32).contains(&reg)
}

/// Assembles a 64-bit register value from one 8-byte or two 4-byte writes.
fn combine(hca: &mut Dp<'_>, page: u32, offset: u32, bytes: &[u8]) -> Option<u64> {
    let reg = offset & !7;
    match (offset & 7, bytes.len()) {
        (0, 8) => {
            hca.objects.uars.forget_half((page, reg));
            Some(u64::from_be_bytes(bytes.try_into().ok()?))
        }
        (0, 4) => {
            hca.objects
                .uars
                .set_half((page, reg), [bytes[0], bytes[1], bytes[2], bytes[3]]);
            None
        }
        (4, 4) => {
            let Some(hi) = hca.objects.uars.take_half((page, reg)) else {
                hca.trace(format_args!(
                    "UAR {page}: low half of the register at {reg:#x} without its high half: ignored"
                ));
                return None;
            };
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&hi);
            b[4..].copy_from_slice(bytes);
            Some(u64::from_be_bytes(b))
        }
        _ => {
            hca.trace(format_args!(
                "UAR {page}: {}-byte write at {offset:#x} does not fit a 64-bit register: ignored",
                bytes.len()
            ));
            None
        }
    }
}

/// An EQ doorbell written through UAR `uar`: `value` = `(ci & 0xffffff) | eqn << 24`.
fn eq_doorbell(hca: &mut Dp<'_>, uar: u32, value: u32, arm: bool) {
    let eqn = (value >> 24) as u8;
    let ci = value & COUNTER_MASK;
    let Some(eq) = hca.events.eqs.get_mut(eqn) else {
        hca.trace(format_args!("EQ doorbell for unknown EQ {eqn}: ignored"));
        return;
    };
    if eq.uar != uar {
        let want = eq.uar;
        hca.trace(format_args!(
            "EQ {eqn} doorbell through UAR {uar}, its uar_page is {want}: ignored"
        ));
        return;
    }
    // The new consumer index may not pass the producer (model choice, see the module doc).
    let advance = ci.wrapping_sub(eq.cons) & COUNTER_MASK;
    if advance > eq.used() {
        eq.bad_doorbells = eq.bad_doorbells.wrapping_add(1);
        let (cons, prod) = (eq.cons, eq.prod);
        hca.trace(format_args!(
            "EQ {eqn} doorbell ci {ci:#x} past the producer {prod:#x} (consumer {cons:#x}): ignored"
        ));
        return;
    }
    eq.cons = ci;
    eq.irq_pending = false;
    if arm {
        eq.arms = eq.arms.wrapping_add(1);
        if eq.used() != 0 {
            // Unconsumed EQEs: the armed EQ fires at once.
            eq.irq_pending = true;
            eq.armed = false;
        } else {
            eq.armed = true;
        }
    }
    hca.events.update_intx();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::init_seg::HealthState;
    use crate::front::pci::Intx;
    use crate::hca::Hca;
    use crate::memory::RegionMemory;
    use crate::objects::uar::FIRST_UAR;
    use std::sync::Arc;

    #[test]
    fn halves_combine_high_dword_first() {
        let mut hca = Hca::new(
            Arc::new(RegionMemory::new()),
            Intx::new(),
            Arc::new(HealthState::new()),
        );
        let page = hca.dp().objects.uars.alloc().unwrap();
        assert_eq!(page, FIRST_UAR);
        let v = 0x1122_3344_5566_7788u64;
        assert_eq!(
            combine(&mut hca.dp(), page, 0x800, &v.to_be_bytes()),
            Some(v)
        );
        assert_eq!(
            combine(&mut hca.dp(), page, 0x20, &[0x11, 0x22, 0x33, 0x44]),
            None
        );
        assert_eq!(
            combine(&mut hca.dp(), page, 0x24, &[0x55, 0x66, 0x77, 0x88]),
            Some(v)
        );
        // A low half alone, and a write straddling two registers, are dropped.
        assert_eq!(combine(&mut hca.dp(), page, 0x24, &[0; 4]), None);
        assert_eq!(combine(&mut hca.dp(), page, 0x804, &[0; 8]), None);
        assert!(register64(0x20) && register64(0x900) && register64(0xff8));
        assert!(!register64(0x40) && !register64(0x28) && !register64(0x1000));
    }
}
