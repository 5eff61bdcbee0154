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
//! the rest of a BlueFlame copy, and compares every completed 64-byte block with the WQE the
//! device runs: its bytes as read from the send ring when the doorbell rang, before it ran
//! (software may not rewrite a WQE before its completion, so these are the bytes the device
//! takes, then or later). Not the ring slot when the block arrives: with a device thread the
//! rest of a copy can arrive after its WQE completed and software legitimately reused the slot.
//! A copy of a WQE an earlier doorbell already took off the ring (its doorbell record announced
//! it) is not compared: the model no longer has the bytes that ran. A copy that differs (a stale or torn BlueFlame write, e.g. write-combined stores
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
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::eq::EqTable;
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
pub(crate) struct BfBurst {
    /// (UAR page, offset of the half).
    pub(crate) at: (u32, u32),
    pub(crate) qpn: u32,
    /// SQ WQEBB counter of the WQE (the doorbell's `wqe_index`).
    pub(crate) wqe_index: u16,
    /// Bytes the copy covers: the WQE's `ds` in 64-byte blocks.
    pub(crate) len: usize,
    /// The bytes so far (until a second qword arrives, a buffer an earlier copy on this half
    /// left, or none: most doorbells are only the first 8 bytes, and need no buffer).
    pub(crate) data: Vec<u8>,
    /// The doorbell's 8 bytes.
    pub(crate) first: [u8; 8],
    /// Bit i: qword i of `data` arrived (set when the copy starts, as `checked`).
    pub(crate) have: u128,
    /// Bit k: block k was compared with memory.
    pub(crate) checked: u32,
    /// More than the doorbell's 8 bytes arrived: this is a BlueFlame copy, not a doorbell.
    pub(crate) is_copy: bool,
    /// What the copy is compared with: the WQE as the device takes it off the ring.
    pub(crate) ran: Ran,
    /// The WQE's `len` bytes when `ran` is [`Ran::Read`] (a buffer kept like `data`).
    pub(crate) wqe: Vec<u8>,
}

/// The WQE a BlueFlame copy is compared with, read from the send ring when its doorbell rang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// Still ahead of the device then: its bytes (`BfBurst::wqe`) are the ones the device
    /// runs, now or later (software may not rewrite a WQE before its completion).
    Read,
    /// Already taken off the ring through an earlier doorbell (whose doorbell record
    /// announced it): it may have completed and its slot been reused since, so the copy is
    /// not compared.
    Earlier,
    /// The ring could not be read (no send queue, or not guest memory).
    Unreadable,
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
    /// Index of the BlueFlame copy arriving at `at` (UAR page, offset of the half), if any.
    #[inline]
    pub(crate) fn burst_at(&self, at: (u32, u32)) -> Option<usize> {
        self.bursts.iter().position(|b| b.at == at)
    }

    /// Removes the copy arriving at `at`, keeping its buffer.
    pub(crate) fn take_burst(&mut self, at: (u32, u32)) -> Option<BfBurst> {
        let i = self.burst_at(at)?;
        let mut b = self.bursts.swap_remove(i);
        self.keep_buffer(std::mem::take(&mut b.data));
        self.keep_buffer(std::mem::take(&mut b.wqe));
        Some(b)
    }

    /// The BlueFlame copy at index `i` (from [`UarTable::burst_at`]).
    #[inline]
    pub(crate) fn burst(&self, i: usize) -> &BfBurst {
        &self.bursts[i]
    }

    /// The BlueFlame copy at index `i`, to update.
    #[inline]
    pub(crate) fn burst_mut(&mut self, i: usize) -> &mut BfBurst {
        &mut self.bursts[i]
    }

    /// Records a new BlueFlame copy (or doorbell) on its half.
    #[inline]
    pub(crate) fn push_burst(&mut self, b: BfBurst) {
        self.bursts.push(b);
    }

    /// Turns the record at `i` from a doorbell into a BlueFlame copy: a buffer of its length
    /// (the one an earlier copy on this half left, else a spare) holding the doorbell's 8 bytes.
    pub(crate) fn start_copy(&mut self, i: usize) {
        let b = &mut self.bursts[i];
        b.is_copy = true;
        b.have = 1;
        b.checked = 0;
        if b.data.capacity() == 0 {
            b.data = self.spare.pop().unwrap_or_default();
        }
        b.data.clear();
        b.data.resize(b.len, 0);
        b.data[..8].copy_from_slice(&b.first);
    }

    /// A buffer a finished copy left, or a new one.
    pub(crate) fn spare_buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// Drops a first half waiting at `at` (page, register), if any (a full 8-byte store).
    #[inline]
    pub(crate) fn forget_half(&mut self, at: (u32, u32)) {
        if !self.halves.is_empty() {
            self.halves.remove(&at);
        }
    }

    /// Keeps the first 4 bytes of a 64-bit register at `at` until its second half arrives.
    pub(crate) fn set_half(&mut self, at: (u32, u32), hi: [u8; 4]) {
        self.halves.insert(at, hi);
    }

    /// The first half waiting at `at`, taken.
    pub(crate) fn take_half(&mut self, at: (u32, u32)) -> Option<[u8; 4]> {
        self.halves.remove(&at)
    }

    /// Counts a BlueFlame copy found to differ from memory (or torn).
    pub(crate) fn count_bf_mismatch(&mut self) {
        self.bf_mismatches += 1;
    }

    /// Counts a 64-byte BlueFlame block compared with memory.
    #[inline]
    pub(crate) fn count_bf_block(&mut self) {
        self.bf_blocks_checked += 1;
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

    pub(crate) fn alloc(&mut self) -> Option<u32> {
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
    eqs: &mut EqTable,
    _intx: &mut Intx,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let idx = get(input, dealloc_uar_in::UAR);
    if !objects.uars.contains(idx) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::UAR_UNKNOWN);
    }
    // Refused while an EQ, CQ or QP context names the page (`uar_page`): see `control::syndrome`.
    if eqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY);
    }
    if objects.cqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_CQ);
    }
    if objects.qps.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_QP);
    }
    if objects.sqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_SQ);
    }
    objects.uars.free(idx);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
