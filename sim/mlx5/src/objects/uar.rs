//! User Access Regions: ALLOC_UAR / DEALLOC_UAR and the doorbell registers in each UAR page.
//!
//! UAR index n is the 4 KiB page at BAR0 + n * 4096 (rdma-core mlx5_vfio.c `uar2iova`, Linux
//! uar.c:78 `uar2pfn`). Indexes start at
//! [`FIRST_UAR`] because pages 0..2 hold the initialization segment (`struct mlx5_init_seg` is
//! 8208 bytes, Linux device.h:576). Offsets inside a page (Linux doorbell.h:36-37, eq.c:37,
//! lib/eq.h:70): 0x20 CQ arm doorbell (64-bit), 0x40 EQ doorbell with re-arm, 0x48 EQ doorbell
//! without arm (32-bit), 0x800.. the DB/BlueFlame registers, `1 << log_bf_reg_size` bytes each
//! (two alternating halves).
//!
//! Values reach the handlers as the written bytes read big-endian: a 64-bit doorbell is the
//! two big-endian dwords software stored, high dword first. A 64-bit register written as two
//! 32-bit halves (lower address first, as a 32-bit host does) is delivered once both arrived.
//!
//! # BlueFlame
//! The DB/BF area holds 4 registers of `1 << log_bf_reg_size` bytes (512 on a ConnectX-5), each
//! made of two halves software alternates between (rdma-core providers/mlx5/mlx5.c: `bfs[].reg
//! = MLX5_BF_OFFSET + k * bf_reg_size`, `buf_size = bf_reg_size / 2`; qp.c `post_send_db`:
//! `bf->offset ^= bf->buf_size`). Software either stores the first 8 bytes of the last WQE's
//! ctrl segment at the start of a half (a doorbell), or copies the whole WQE there, in 64-byte
//! blocks (`mlx5_bf_copy`): the first 8 bytes are again the doorbell. The model rings the
//! doorbell on those first 8 bytes as before (it always executes the WQE from memory), collects
//! the rest of a BlueFlame copy, and compares every completed 64-byte block with the WQE in
//! memory. A copy that differs (a stale or torn BlueFlame write, e.g. write-combined stores
//! without the `sfence` of rdma-core `mmio_flush_writes`, or a copy started and abandoned for
//! a new doorbell on the same half) is what real hardware would execute as garbage; the model
//! turns it into a work queue catastrophic error (WQ_CATAS_ERROR event, QP to ERR) and counts
//! it ([`UarTable::bf_mismatches`]). Model choice: no source says how firmware reports it.

use std::collections::BTreeMap;

use crate::control::caps::Caps;
use std::sync::Arc;

use crate::control::result::CmdResult;
use crate::control::result::{fail, get, put};
use crate::control::syndrome;
use crate::datapath::Dp;
use crate::events::Events;
use crate::memory::GuestMemory;
use crate::objects::Objects;
use mlx5_prm::{alloc_uar_out, cmd_status, dealloc_uar_in};

/// First UAR index ALLOC_UAR hands out (pages 0..2 are the initialization segment).
pub const FIRST_UAR: u32 = 3;
/// Most UARs allocated at once (a model limit, well inside the 8192 pages of the 32 MiB BAR0).
pub const MAX_UARS: u32 = 1024;
/// Size of a UAR page.
pub const UAR_PAGE_SIZE: u64 = 4096;
/// CQ arm doorbell (`MLX5_CQ_DOORBELL`, Linux doorbell.h:37).
pub const CQ_DOORBELL: u32 = 0x20;
/// EQ doorbell, update CI and arm (`MLX5_EQ_DOORBEL_OFFSET`, Linux eq.c:37).
pub const EQ_DOORBELL_ARM: u32 = 0x40;
/// EQ doorbell, update CI only (doorbell + 2 dwords, Linux lib/eq.h:70).
pub const EQ_DOORBELL_NO_ARM: u32 = 0x48;
/// First DB/BlueFlame register (`MLX5_BF_OFFSET`, Linux doorbell.h:36).
pub const BF_OFFSET: u32 = 0x800;

/// A BlueFlame copy in progress in one half of a BF register.
#[derive(Debug)]
struct BfBurst {
    /// (UAR page, offset of the half).
    at: (u32, u32),
    qpn: u32,
    /// SQ WQEBB counter of the WQE (the doorbell's `wqe_index`).
    wqe_index: u16,
    /// Bytes the copy covers: the WQE's `ds` in 64-byte blocks.
    len: usize,
    /// The bytes so far (until a second qword arrives, a buffer an earlier copy on this half
    /// left, or none: most doorbells are only the first 8 bytes, and need no buffer).
    data: Vec<u8>,
    /// The doorbell's 8 bytes.
    first: [u8; 8],
    /// Bit i: qword i of `data` arrived (set when the copy starts, as `checked`).
    have: u128,
    /// Bit k: block k was compared with memory.
    checked: u32,
    /// More than the doorbell's 8 bytes arrived: this is a BlueFlame copy, not a doorbell.
    is_copy: bool,
}

/// Words of the allocation bitmap: a bit for every index below `FIRST_UAR + MAX_UARS`.
const USED_WORDS: usize = (FIRST_UAR + MAX_UARS).div_ceil(64) as usize;

/// Allocated UARs and half-written 64-bit doorbells.
#[derive(Debug, Default)]
pub struct UarTable {
    /// Bit `i % 64` of word `i / 64`: UAR `i` is allocated (every doorbell asks: one load, not
    /// a tree walk).
    used: [u64; USED_WORDS],
    /// Number of allocated UARs.
    count: u32,
    /// (page, 8-byte aligned offset) -> first 4 bytes of a 64-bit register written in halves.
    halves: BTreeMap<(u32, u32), [u8; 4]>,
    /// The BlueFlame copies arriving, one per (page, BF register half) at most (a short list:
    /// searched linearly, and no allocation per doorbell once it has grown).
    bursts: Vec<BfBurst>,
    /// Buffers of finished copies, for the next ones.
    spare: Vec<Vec<u8>>,
    bf_mismatches: u64,
    bf_blocks_checked: u64,
}

impl UarTable {
    fn burst_at(&self, at: (u32, u32)) -> Option<usize> {
        self.bursts.iter().position(|b| b.at == at)
    }

    /// Removes the copy arriving at `at`, keeping its buffer.
    fn take_burst(&mut self, at: (u32, u32)) -> Option<BfBurst> {
        let i = self.burst_at(at)?;
        let mut b = self.bursts.swap_remove(i);
        self.keep_buffer(std::mem::take(&mut b.data));
        Some(b)
    }

    /// Keeps a finished copy's buffer for the next copies (a few at most).
    #[inline]
    fn keep_buffer(&mut self, data: Vec<u8>) {
        if data.capacity() > 0 && self.spare.len() < 8 {
            self.spare.push(data);
        }
    }

    /// True if `index` is allocated.
    #[inline]
    pub fn contains(&self, index: u32) -> bool {
        self.used
            .get((index / 64) as usize)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }

    /// Number of allocated UARs.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True if none is allocated.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn alloc(&mut self) -> Option<u32> {
        if self.count >= MAX_UARS {
            return None;
        }
        let idx = (FIRST_UAR..FIRST_UAR + MAX_UARS).find(|&i| !self.contains(i))?;
        self.used[(idx / 64) as usize] |= 1 << (idx % 64);
        self.count += 1;
        Some(idx)
    }

    fn free(&mut self, index: u32) -> bool {
        self.halves.retain(|(p, _), _| *p != index);
        self.bursts.retain(|b| b.at.0 != index);
        if !self.contains(index) {
            return false;
        }
        self.used[(index / 64) as usize] &= !(1 << (index % 64));
        self.count -= 1;
        true
    }

    /// BlueFlame copies found to differ from the WQE in memory (or torn) so far.
    pub fn bf_mismatches(&self) -> u64 {
        self.bf_mismatches
    }

    /// 64-byte BlueFlame blocks compared with memory (and found equal or not) so far.
    pub fn bf_blocks_checked(&self) -> u64 {
        self.bf_blocks_checked
    }
}

/// ALLOC_UAR (0x802).
pub(crate) fn cmd_alloc_uar(
    _caps: &Caps,
    objects: &mut Objects,
    _input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let Some(idx) = objects.uars.alloc() else {
        return fail(cmd_status::LIM_ERR, syndrome::UAR_EXHAUSTED);
    };
    put(out, alloc_uar_out::UAR, idx);
    Ok(())
}

/// DEALLOC_UAR (0x803).
pub(crate) fn cmd_dealloc_uar(
    _caps: &Caps,
    objects: &mut Objects,
    events: &mut Events,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let idx = get(input, dealloc_uar_in::UAR);
    if !objects.uars.contains(idx) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::UAR_UNKNOWN);
    }
    // Refused while an EQ, CQ or QP context names the page (`uar_page`): see `control::syndrome`.
    if events.eqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY);
    }
    if objects.cqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_CQ);
    }
    if objects.qps.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_QP);
    }
    objects.uars.free(idx);
    Ok(())
}

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
            if !hca.objects.uars.halves.is_empty() {
                hca.objects.uars.halves.remove(&(page, offset));
            }
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
            crate::objects::eq::doorbell(hca, page, v, offset == EQ_DOORBELL_ARM);
        }
        _ if register64(offset) => {
            if let Some(v) = combine(hca, page, offset, bytes) {
                let reg = offset & !7;
                if reg == CQ_DOORBELL {
                    crate::objects::cq::arm_doorbell(hca, v);
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
        let old = &hca.objects.uars.bursts[i];
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
    let uars = &mut hca.objects.uars;
    match (rung, slot) {
        (Some(qpn), Some(i)) if len != 0 && len <= half as usize => {
            // The previous doorbell's record on this half is replaced in place (most
            // doorbells find one there): no move, no allocation. A buffer a copy used stays
            // for the next copy on this half; `have` and `checked` are set when one starts.
            let b = &mut uars.bursts[i];
            b.qpn = qpn;
            b.wqe_index = (v >> 40) as u16;
            b.len = len;
            b.first = v.to_be_bytes();
            b.is_copy = false;
        }
        (Some(qpn), None) if len != 0 && len <= half as usize => {
            uars.bursts.push(BfBurst {
                at,
                qpn,
                wqe_index: (v >> 40) as u16,
                len,
                data: Vec::new(),
                first: v.to_be_bytes(),
                have: 1,
                checked: 0,
                is_copy: false,
            });
        }
        (_, Some(_)) => {
            uars.take_burst(at);
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
    let b = &mut uars.bursts[b];
    let p = pos as usize;
    if p >= b.len {
        let qpn = b.qpn;
        hca.objects.uars.take_burst((page, start));
        bf_error(hca, qpn, "BlueFlame copy longer than its WQE's ds");
        return;
    }
    if !b.is_copy {
        b.is_copy = true;
        b.have = 1;
        b.checked = 0;
        // The buffer an earlier copy on this half left, else a spare.
        if b.data.capacity() == 0 {
            b.data = uars.spare.pop().unwrap_or_default();
        }
        b.data.clear();
        b.data.resize(b.len, 0);
        b.data[..8].copy_from_slice(&b.first);
    }
    b.data[p..p + 8].copy_from_slice(&v.to_be_bytes());
    b.have |= 1u128 << (p / 8);
    let block = p / 64;
    let mask = 0xffu128 << (block * 8);
    if b.have & mask != mask || b.checked & (1 << block) != 0 {
        return;
    }
    b.checked |= 1 << block;
    let (qpn, idx, done) = (
        b.qpn,
        b.wqe_index,
        b.checked.count_ones() as usize == b.len / 64,
    );
    let mut bf = [0u8; 64];
    bf.copy_from_slice(&b.data[block * 64..block * 64 + 64]);
    if done {
        hca.objects.uars.take_burst((page, start));
    }
    hca.objects.uars.bf_blocks_checked += 1;
    match wqe_block(hca, qpn, idx.wrapping_add(block as u16)) {
        Some(mem) if mem == bf => {}
        Some(_) => bf_error(hca, qpn, "BlueFlame block differs from the WQE in memory"),
        None => bf_error(hca, qpn, "BlueFlame copy for a WQE the device cannot read"),
    }
}

/// SQ basic block `counter` (wrapping in the ring) of QP `qpn`, read from guest memory.
fn wqe_block(hca: &Dp<'_>, qpn: u32, counter: u16) -> Option<[u8; 64]> {
    let q = hca.objects.qps.get(qpn)?;
    let size = q.sq_size();
    if size == 0 {
        return None;
    }
    let at = (u64::from(counter) & u64::from(size - 1)) * 64;
    let mut b = [0u8; 64];
    q.buf.read(&**hca.mem, q.sq_offset + at, &mut b).ok()?;
    Some(b)
}

/// A BlueFlame copy that is not the WQE in memory: a work queue catastrophic error on the QP
/// (WQ_CATAS_ERROR event, QP to ERR). Model choice, see the module documentation.
fn bf_error(hca: &mut Dp<'_>, qpn: u32, why: &str) {
    hca.objects.uars.bf_mismatches += 1;
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
            if !hca.objects.uars.halves.is_empty() {
                hca.objects.uars.halves.remove(&(page, reg));
            }
            Some(u64::from_be_bytes(bytes.try_into().ok()?))
        }
        (0, 4) => {
            hca.objects
                .uars
                .halves
                .insert((page, reg), [bytes[0], bytes[1], bytes[2], bytes[3]]);
            None
        }
        (4, 4) => {
            let Some(hi) = hca.objects.uars.halves.remove(&(page, reg)) else {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::init_seg::HealthState;
    use crate::front::pci::Intx;
    use crate::hca::Hca;
    use crate::memory::RegionMemory;
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

    #[test]
    fn uar_indexes_are_handed_out_lowest_first_and_freed_once() {
        let mut t = UarTable::default();
        assert!(t.is_empty() && !t.contains(FIRST_UAR));
        assert_eq!(
            (t.alloc(), t.alloc(), t.alloc()),
            (Some(3), Some(4), Some(5))
        );
        assert!(t.contains(4) && t.len() == 3);
        assert!(t.free(4));
        assert!(!t.free(4), "a second free of the same index");
        assert!(!t.contains(4) && t.len() == 2);
        assert_eq!(t.alloc(), Some(4));
        // Up to MAX_UARS at once, the last one index FIRST_UAR + MAX_UARS - 1.
        let mut last = 0;
        while let Some(i) = t.alloc() {
            last = i;
        }
        assert_eq!((t.len() as u32, last), (MAX_UARS, FIRST_UAR + MAX_UARS - 1));
        assert!(!t.contains(FIRST_UAR + MAX_UARS) && !t.contains(u32::MAX));
        assert!(!t.free(FIRST_UAR + MAX_UARS) && !t.free(u32::MAX));
    }
}
