//! Memory keys: CREATE_MKEY / DESTROY_MKEY / QUERY_MKEY and the address translation the data
//! path uses for every lkey and rkey.
//!
//! An mkey is `mkey_index << 8 | mkc.mkey_7_0`: firmware picks the 24-bit index and returns it in
//! `create_mkey_out.mkey_index`, software picks the 8-bit variant (facts trap 5; rdma-core
//! providers/mlx5/mlx5_vfio.c `mlx5_vfio_reg_mr`: `lkey = key | mlx5_idx_to_mkey(mkey_index)`).
//! A key presented on the data path must match both parts.
//!
//! Three access modes are modelled: PA (the address *is* the bus address), MTT (a list of
//! 8-byte page addresses, page size `1 << mkc.log_page_size`, ABSOLUTE log2 — facts trap 1) and
//! KLMS (an indirect key: a list of 16-byte `mlx5_ifc_klm_bits` {byte_count, mkey, address},
//! entry `i` mapping the next `byte_count` bytes of the key's range onto `[address,
//! address + byte_count)` of the direct key `mkey`). An indirect key is created directly by
//! CREATE_MKEY with the list in `klm_pas_mtt`, one octoword per entry in
//! `translations_octword_size` / `translations_octword_actual_size` (UCX
//! src/uct/ib/mlx5/dv/ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm` and
//! `uct_ib_mlx5_devx_klm_entry_set`; Linux drivers/infiniband/hw/mlx5/mr.c `mlx5_ib_sg_to_klms`
//! fills the same entries through UMR).
//! [`PagedBuffer`] is the same idea for the `pas[]` lists of CQs and QPs, whose
//! `log_page_size` is RELATIVE to 4 KiB (facts trap 2).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_mkey_in, create_mkey_out, destroy_mkey_in, linux_layout, mkc,
    mkc_access_mode, mkey, pages, query_mkey_in, query_mkey_out,
};

use crate::cmd::{bad_param, err, field as get, CmdResult};
use crate::hca::Hca;
use crate::memory::{DmaError, GuestMemory};

/// Syndromes of the mkey commands. Real firmware syndromes are opaque 32-bit values that no
/// public source lists; these are the model's own, one per rejection reason, so a test (or a
/// driver log) can tell exactly which check fired. Range 0x5201_xxxx.
pub mod syndrome {
    /// The command input is shorter than the fixed part of its layout.
    pub const INPUT_TOO_SHORT: u32 = 0x5201_0001;
    /// `mkc.pd` names no allocated protection domain.
    pub const BAD_PD: u32 = 0x5201_0003;
    /// Access mode other than PA or MTT.
    pub const UNSUPPORTED_ACCESS_MODE: u32 = 0x5201_0004;
    /// `mkc.log_page_size` outside 12..=31 for an MTT key.
    pub const BAD_LOG_PAGE_SIZE: u32 = 0x5201_0005;
    /// `start_addr + len` wraps past 2^64.
    pub const LENGTH_OVERFLOW: u32 = 0x5201_0006;
    /// `translations_octword_size` / `_actual_size` do not cover the pages `start_addr..+len`
    /// spans.
    pub const MTT_TOO_FEW: u32 = 0x5201_0007;
    /// `translations_octword_actual_size` exceeds `translations_octword_size`.
    pub const MTT_ACTUAL_EXCEEDS_SIZE: u32 = 0x5201_0008;
    /// The input ends before the `translations_octword_actual_size` entries it announces.
    pub const MTT_INPUT_TRUNCATED: u32 = 0x5201_0009;
    /// An MTT entry is not aligned to the key's page size.
    pub const MTT_MISALIGNED: u32 = 0x5201_000a;
    /// KLMS key: `translations_octword_actual_size` above `1 << log_max_klm_list_size`.
    pub const KLM_LIST_TOO_LONG: u32 = 0x5201_0012;
    /// KLMS key: an entry's `byte_count` is 0 or above `MLX5_MAX_KLM_BYTE_COUNT` (2 GiB).
    pub const KLM_BAD_BYTE_COUNT: u32 = 0x5201_0013;
    /// KLMS key: the entries' byte counts do not cover `len`.
    pub const KLM_TOO_SHORT: u32 = 0x5201_0014;
    /// KLMS key with `length64`, or with a zero-length list.
    pub const KLM_BAD_LENGTH: u32 = 0x5201_0015;
    /// `1 << log_max_mkey` keys already exist.
    pub const TOO_MANY_MKEYS: u32 = 0x5201_000b;
    /// DESTROY/QUERY_MKEY of an index that is not allocated.
    pub const UNKNOWN_MKEY: u32 = 0x5201_000c;
    /// `length64` on a key that is not PA (an MTT list cannot cover 2^64 bytes).
    pub const LENGTH64_NOT_PA: u32 = 0x5201_000d;
    /// `len` above `1 << cmd_hca_cap.log_max_mrw_sz`.
    pub const LENGTH_ABOVE_CAP: u32 = 0x5201_000e;
    /// `mkey_umem_valid`: user memory objects are not modelled.
    pub const UMEM_UNSUPPORTED: u32 = 0x5201_000f;
    /// `mkc.qpn` is neither 0xffffff (any QP) nor an existing QP.
    pub const BAD_QPN: u32 = 0x5201_0010;
    /// `mkc.relaxed_ordering_write` / `_read` set while the device does not advertise
    /// `relaxed_ordering_write` / any `relaxed_ordering_read` capability (model choice: no
    /// source says what firmware does with an unadvertised bit; refused here).
    pub const RELAXED_ORDERING_UNSUPPORTED: u32 = 0x5201_0011;
}

/// `mkc.qpn` value meaning "usable from any QP" (rdma-core mlx5_vfio.c
/// `set_mkc_access_pd_addr_fields`: `DEVX_SET(mkc, mkc, qpn, 0xffffff)`).
pub const ANY_QPN: u32 = 0xff_ffff;

/// Smallest MTT page shift: the adapter page (`MLX5_ADAPTER_PAGE_SHIFT`).
pub const MIN_MTT_PAGE_SHIFT: u32 = pages::ADAPTER_PAGE_SHIFT;
/// Largest MTT page shift (`MLX5_MAX_PAGE_SHIFT = 31`, rdma-core providers/mlx5/mlx5_vfio.h:33;
/// also the largest value the 5-bit rdma-core `mkc.log_page_size` holds).
pub const MAX_MTT_PAGE_SHIFT: u32 = 31;

/// mkey indices below this are never handed out: index 1 is `MLX5_INVALID_LKEY` (0x100), the
/// key rdma-core writes to terminate a receive scatter list (rdma-core mlx5dv.h:1262).
const FIRST_INDEX: u32 = 0x10;

/// Access rights, as the `mkc` bits `lr`, `lw`, `rr`, `rw`, `a`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access(pub u8);

impl Access {
    /// Local read (`mkc.lr`): gathers for sends, writes, the source of anything leaving.
    pub const LOCAL_READ: Access = Access(1 << 0);
    /// Local write (`mkc.lw`): receive scatters, RDMA READ and atomic results.
    pub const LOCAL_WRITE: Access = Access(1 << 1);
    /// Remote read (`mkc.rr`): target of an incoming RDMA READ.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// Remote write (`mkc.rw`): target of an incoming RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(1 << 3);
    /// Remote atomic (`mkc.a`): target of an incoming atomic.
    pub const REMOTE_ATOMIC: Access = Access(1 << 4);

    /// Whether every right in `need` is in `self`.
    pub const fn contains(self, need: Access) -> bool {
        self.0 & need.0 == need.0
    }
    /// The union of two sets of rights.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
    /// Whether any local or remote *write* right is in the set.
    const fn writes(self) -> bool {
        self.0 & (Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0
    }
    /// Whether any read right is in the set (atomics read too).
    const fn reads(self) -> bool {
        self.0 & (Self::LOCAL_READ.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0) != 0
    }
}

/// Why a key could not be used for an access. The data path maps these onto CQE syndromes
/// (local protection error for lkeys, remote access error NAKs for rkeys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrFault {
    /// No key with this index.
    UnknownKey,
    /// The index exists but the low 8 bits differ from the key's `mkey_7_0`.
    VariantMismatch,
    /// The key is in the free state (`mkc.free`).
    Free,
    /// The key belongs to another protection domain than the QP.
    PdMismatch,
    /// The key is bound to another QP (`mkc.qpn`).
    QpMismatch,
    /// `va..va+len` is not inside `start_addr..start_addr+len` of the key.
    OutOfBounds,
    /// The key lacks an access right the operation needs.
    AccessDenied,
    /// `pg_access` key whose MTT entry lacks the read or write enable for a page touched.
    PageAccessDenied,
    /// An indirect (KLMS) key's entry names a key that is itself indirect (model choice: one
    /// level of indirection, `cmd_hca_cap.max_indirection` = 1).
    Indirection,
}

/// How a key maps addresses to bus addresses.
#[derive(Clone, Debug)]
pub(crate) enum Translation {
    /// Physical addressing: bus address = virtual address.
    Pa,
    /// Page list: entry `i` maps `[base + i * page, base + (i + 1) * page)` where
    /// `base = start_addr & !(page - 1)`.
    Mtt {
        page_shift: u32,
        /// Page bus addresses (aligned), with the per-page enables.
        entries: Vec<MttEntry>,
    },
    /// Indirect: entry `i` maps `[start + off_i, start + off_i + bcount_i)` onto
    /// `[va_i, va_i + bcount_i)` of key `key_i`, checked when used.
    Klm { entries: Vec<KlmEntry> },
}

/// One KLM entry (`mlx5_ifc_klm_bits`), with its offset inside the indirect key's range.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KlmEntry {
    /// Sum of the byte counts of the entries before this one.
    off: u64,
    bcount: u64,
    key: u32,
    va: u64,
}

/// The translation of an indirect key from `(byte_count, mkey, address)` entries, in order
/// (a window bound by UMR, [`crate::mw`]).
pub(crate) fn klm_translation(list: &[(u64, u32, u64)]) -> Translation {
    let mut off = 0u64;
    let entries = list
        .iter()
        .map(|&(bcount, key, va)| {
            let e = KlmEntry {
                off,
                bcount,
                key,
                va,
            };
            off += bcount;
            e
        })
        .collect();
    Translation::Klm { entries }
}

/// `MLX5_MAX_KLM_BYTE_COUNT` ([`mlx5_prm::klm::MAX_BYTE_COUNT`]): the largest
/// `klm.byte_count`.
pub const MAX_KLM_BYTE_COUNT: u64 = mlx5_prm::klm::MAX_BYTE_COUNT;

/// A page address (aligned, so its low bits are free) with the read enable in bit 0 and the
/// write enable in bit 1: 8 bytes per page, as the MTT itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MttEntry(pub(crate) u64);

impl MttEntry {
    pub(crate) fn new(addr: u64, read: bool, write: bool) -> MttEntry {
        MttEntry(addr | (write as u64) << 1 | read as u64)
    }
    pub(crate) fn addr(self) -> u64 {
        self.0 & !0xff
    }
    pub(crate) fn read(self) -> bool {
        self.0 & 1 != 0
    }
    pub(crate) fn write(self) -> bool {
        self.0 & 2 != 0
    }
}

/// One memory key.
#[derive(Clone, Debug)]
pub struct Mkey {
    /// 24-bit index (the key without its variant byte).
    pub index: u32,
    /// `mkc.mkey_7_0`.
    pub variant: u8,
    /// `mkc.pd`.
    pub pd: u32,
    /// `mkc.qpn` ([`ANY_QPN`] = any).
    pub qpn: u32,
    /// `mkc.lr/lw/rr/rw/a`.
    pub access: Access,
    /// `mkc.start_addr`.
    pub start: u64,
    /// Length in bytes; 2^64 for `length64`.
    pub len: u128,
    /// `mkc.free`.
    pub free: bool,
    /// `mkc.umr_en`: UMR WQEs may modify the key ([`crate::umr`]).
    pub umr_en: bool,
    /// `mkc.en_rinval`: the key may be invalidated remotely (SEND_WITH_INVALIDATE); Linux
    /// ib/mr.c `mlx5_ib_alloc_mw` sets it for type 2 memory windows ([`crate::mw`]).
    pub en_rinval: bool,
    /// `mkc.translations_octword_size` as created: the room for translation entries a UMR
    /// may load (two 8-byte MTT entries per octoword).
    pub xlt_octowords: u32,
    pub(crate) translation: Translation,
    /// The mkc as created (returned by QUERY_MKEY).
    pub(crate) mkc: [u8; mkc::BYTES],
}

impl Mkey {
    /// The full key (`index << 8 | variant`).
    pub fn key(&self) -> u32 {
        mkey::from_index(self.index, self.variant)
    }

    /// The bus ranges `(addr, len)` the key's bytes translate to (`start_addr..+len` through
    /// the MTT; `None` for a PA key).
    pub fn dma_ranges(&self) -> Option<Vec<(u64, u64)>> {
        let Translation::Mtt {
            page_shift,
            entries,
        } = &self.translation
        else {
            return None;
        };
        let pages: Vec<u64> = entries.iter().map(|e| e.addr()).collect();
        let off = self.start & ((1u64 << page_shift) - 1);
        let len = u64::try_from(self.len).unwrap_or(u64::MAX);
        Some(page_ranges(&pages, *page_shift, off, len))
    }

    /// `(log2 page size, page bus addresses)` of an MTT key; `None` for a PA key.
    pub fn mtt_pages(&self) -> Option<(u32, Vec<u64>)> {
        match &self.translation {
            Translation::Mtt {
                page_shift,
                entries,
            } => Some((*page_shift, entries.iter().map(|e| e.addr()).collect())),
            _ => None,
        }
    }

    /// `(byte_count, mkey, address)` of each KLM entry of an indirect key; `None` otherwise.
    pub fn klm_entries(&self) -> Option<Vec<(u64, u32, u64)>> {
        match &self.translation {
            Translation::Klm { entries } => {
                Some(entries.iter().map(|e| (e.bcount, e.key, e.va)).collect())
            }
            _ => None,
        }
    }

    /// The mkc as CREATE_MKEY gave it.
    pub fn mkc(&self) -> &[u8] {
        &self.mkc
    }
}

/// Who is using a key, for the PD / QP checks.
#[derive(Clone, Copy, Debug)]
pub struct KeyUser {
    /// The QP's protection domain.
    pub pd: u32,
    /// The QP's number.
    pub qpn: u32,
}

/// A checked range of a key, ready to be split into bus-contiguous pieces.
pub struct Resolved<'a> {
    mkey: &'a Mkey,
    va: u64,
    len: u64,
    /// The bus pieces of an indirect key's range, found through its inner keys.
    indirect: Vec<(u64, u64)>,
}

impl<'a> Resolved<'a> {
    /// Calls `f(bus_addr, len)` for each bus-contiguous piece of the range, in order.
    /// Adjacent MTT pages that are also adjacent on the bus are merged into one piece.
    pub fn for_each_piece<E>(
        &self,
        mut f: impl FnMut(u64, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.len == 0 {
            return Ok(());
        }
        match &self.mkey.translation {
            Translation::Pa => f(self.va, self.len as usize),
            Translation::Klm { .. } => {
                for &(a, l) in &self.indirect {
                    f(a, l as usize)?;
                }
                Ok(())
            }
            Translation::Mtt {
                page_shift,
                entries,
            } => {
                let page = 1u64 << page_shift;
                let base = self.mkey.start & !(page - 1);
                let off = self.va - base; // resolve() proved va >= start >= base
                                          // The first and last pages of the range (resolve() proved both are entries):
                                          // the first may start inside its page, every later one starts at its start.
                let first = (off >> page_shift) as usize;
                let last = ((off + (self.len - 1)) >> page_shift) as usize;
                let in_page = off & (page - 1);
                // The current run of bus-adjacent pages: (bus start, len).
                let mut s = entries[first].addr() + in_page;
                let mut l = (page - in_page).min(self.len);
                let mut left = self.len - l;
                // Every page but the last is whole; the last holds what is left.
                if last > first {
                    for e in &entries[first + 1..last] {
                        let bus = e.addr();
                        if s + l == bus {
                            l += page;
                        } else {
                            f(s, l as usize)?;
                            (s, l) = (bus, page);
                        }
                        left -= page;
                    }
                    let bus = entries[last].addr();
                    if s + l == bus {
                        l += left;
                    } else {
                        f(s, l as usize)?;
                        (s, l) = (bus, left);
                    }
                }
                f(s, l as usize)
            }
        }
    }

    /// The pieces as a vector (tests and diagnostics; the data path uses
    /// [`for_each_piece`](Self::for_each_piece)).
    pub fn pieces(&self) -> Vec<(u64, usize)> {
        let mut v = Vec::new();
        let _ = self.for_each_piece(|a, l| {
            v.push((a, l));
            Ok::<(), ()>(())
        });
        v
    }

    /// Reads the range into `buf` (whose length must equal the range's).
    pub fn read(&self, mem: &dyn GuestMemory, buf: &mut [u8]) -> Result<(), DmaError> {
        let mut done = 0usize;
        self.for_each_piece(|bus, n| {
            mem.read(bus, &mut buf[done..done + n])?;
            done += n;
            Ok(())
        })
    }

    /// Writes `buf` (whose length must equal the range's) to the range.
    pub fn write(&self, mem: &dyn GuestMemory, buf: &[u8]) -> Result<(), DmaError> {
        let mut done = 0usize;
        self.for_each_piece(|bus, n| {
            mem.write(bus, &buf[done..done + n])?;
            done += n;
            Ok(())
        })
    }
}

/// The bus ranges of `len` bytes starting `offset` bytes into `pages` (each `1 << shift`).
pub fn page_ranges(pages: &[u64], shift: u32, offset: u64, len: u64) -> Vec<(u64, u64)> {
    let ps = 1u64 << shift;
    let mut v = Vec::new();
    let (mut at, end) = (offset, offset.saturating_add(len));
    for (i, &p) in pages.iter().enumerate() {
        let page_lo = (i as u64) << shift;
        let page_hi = page_lo + ps;
        let lo = at.max(page_lo);
        let hi = end.min(page_hi);
        if lo < hi {
            v.push((p + (lo - page_lo), hi - lo));
            at = hi;
        }
        if at >= end {
            break;
        }
    }
    v
}

/// Hashes a key index for [`KeyMap`]: one multiplication (Fibonacci hashing; indices are
/// small sequential numbers, which SipHash would spend ~100 instructions on per lookup, and
/// every data-path key check is one lookup).
#[derive(Default, Clone, Copy)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0 ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The map under [`KeyMap`].
pub(crate) type KeyHashMap = HashMap<u32, Mkey, BuildHasherDefault<IndexHasher>>;

/// The source of [`KeyMap`] generations: each is handed out once in the process.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Live keys by index, and the table's generation: a number that changes with every access
/// that may change a key (every `&mut` one), taken from a process-wide counter, so no two
/// states of any key tables ever share one. A translation made under a generation is still
/// the one [`MkeyTable::resolve`] would make while the table has that generation (what the
/// data path's translation caches rely on). Reads go through `Deref`.
#[derive(Debug)]
pub(crate) struct KeyMap {
    map: KeyHashMap,
    generation: u64,
}

impl Default for KeyMap {
    fn default() -> KeyMap {
        KeyMap {
            map: KeyHashMap::default(),
            generation: next_generation(),
        }
    }
}

impl std::ops::Deref for KeyMap {
    type Target = KeyHashMap;
    fn deref(&self) -> &KeyHashMap {
        &self.map
    }
}

impl KeyMap {
    fn touch(&mut self) {
        self.generation = next_generation();
    }
    pub(crate) fn insert(&mut self, index: u32, m: Mkey) -> Option<Mkey> {
        self.touch();
        self.map.insert(index, m)
    }
    pub(crate) fn remove(&mut self, index: &u32) -> Option<Mkey> {
        self.touch();
        self.map.remove(index)
    }
    pub(crate) fn get_mut(&mut self, index: &u32) -> Option<&mut Mkey> {
        self.touch();
        self.map.get_mut(index)
    }
    pub(crate) fn values_mut(&mut self) -> std::collections::hash_map::ValuesMut<'_, u32, Mkey> {
        self.touch();
        self.map.values_mut()
    }
    pub(crate) fn clear(&mut self) {
        self.touch();
        self.map.clear();
    }
}

/// The mkey table.
#[derive(Default)]
pub struct MkeyTable {
    pub(crate) keys: KeyMap,
    /// Next index to try; indices are not reused until the 24-bit space wraps, so a stale key
    /// fails as unknown instead of silently hitting a new region.
    next: u32,
}

impl MkeyTable {
    /// Number of live keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key exists.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Every live key.
    pub fn iter(&self) -> impl Iterator<Item = &Mkey> {
        self.keys.values()
    }

    /// The key with this index, if any.
    pub fn by_index(&self, index: u32) -> Option<&Mkey> {
        self.keys.get(&index)
    }

    /// The table's generation ([`KeyMap`]): equal for two reads only if no key could have
    /// changed in between.
    pub(crate) fn generation(&self) -> u64 {
        self.keys.generation
    }

    /// Drops every key (HCA teardown).
    pub fn clear(&mut self) {
        self.keys.clear();
    }

    /// Whether some key belongs to protection domain `pd` (`mkc.pd`): DEALLOC_PD is busy.
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.keys.values().any(|k| k.pd == pd)
    }

    fn alloc_index(&mut self, limit: u32) -> Option<u32> {
        let space = limit.max(FIRST_INDEX + 1);
        for _ in 0..space {
            if self.next < FIRST_INDEX || self.next >= space {
                self.next = FIRST_INDEX;
            }
            let i = self.next;
            self.next += 1;
            if !self.keys.contains_key(&i) {
                return Some(i);
            }
        }
        None
    }

    /// Checks that `key` may be used by `user` for `need` on `va..va+len`, and returns the range
    /// ready to copy. Nothing is read or written.
    pub fn resolve(
        &self,
        key: u32,
        va: u64,
        len: u64,
        need: Access,
        user: KeyUser,
    ) -> Result<Resolved<'_>, MrFault> {
        let m = self
            .keys
            .get(&mkey::index(key))
            .ok_or(MrFault::UnknownKey)?;
        if m.variant != (key & 0xff) as u8 {
            return Err(MrFault::VariantMismatch);
        }
        if m.free {
            return Err(MrFault::Free);
        }
        if m.pd != user.pd {
            return Err(MrFault::PdMismatch);
        }
        if m.qpn != ANY_QPN && m.qpn != user.qpn {
            return Err(MrFault::QpMismatch);
        }
        if !m.access.contains(need) {
            return Err(MrFault::AccessDenied);
        }
        // Bounds in 128 bits: neither the request nor the key can wrap.
        let (va_w, end_w) = (va as u128, va as u128 + len as u128);
        let (start_w, key_end_w) = (m.start as u128, m.start as u128 + m.len);
        if va_w < start_w || end_w > key_end_w || end_w > 1u128 << 64 {
            return Err(MrFault::OutOfBounds);
        }
        let mut indirect = Vec::new();
        if let Translation::Klm { entries } = &m.translation {
            if len > 0 {
                indirect = self.resolve_klm(m, entries, va, len, need, user)?;
            }
        }
        if let Translation::Mtt {
            page_shift,
            entries,
        } = &m.translation
        {
            if len > 0 {
                let base = m.start & !((1u64 << page_shift) - 1);
                let first = ((va - base) >> page_shift) as usize;
                let last = ((va - base + len - 1) >> page_shift) as usize;
                let pages = entries.get(first..=last).ok_or(MrFault::OutOfBounds)?;
                // Every page must carry the enables `need` asks for: the enable bits all pages
                // share (an AND over them) must include those (the same as asking each page for
                // its read and write enables, in one pass without a branch per page).
                let want = need.reads() as u64 | (need.writes() as u64) << 1;
                if pages.iter().fold(!0u64, |all, e| all & e.0) & want != want {
                    return Err(MrFault::PageAccessDenied);
                }
            }
        }
        Ok(Resolved {
            mkey: m,
            va,
            len,
            indirect,
        })
    }

    /// The bus pieces of `[va, va + len)` of the indirect key `m` (whose own checks passed):
    /// each KLM entry touched sends its part to the inner key, which must exist, carry the
    /// variant named in the entry, not be free, belong to the same PD, be usable by the QP,
    /// be direct, and grant the LOCAL right matching the access (read or write; atomics both)
    /// over `[klm.address, klm.address + byte_count)`. Remote rights are checked on the
    /// indirect key only: Linux uses `pd->local_dma_lkey`-style local keys inside remotely
    /// accessible KLM keys (ib/mr.c `mlx5_ib_sg_to_klms`); requiring the local right and the
    /// same PD of the inner key is a model choice.
    fn resolve_klm(
        &self,
        m: &Mkey,
        entries: &[KlmEntry],
        va: u64,
        len: u64,
        need: Access,
        user: KeyUser,
    ) -> Result<Vec<(u64, u64)>, MrFault> {
        let mut inner_need = Access::default();
        if need.reads() {
            inner_need = inner_need.union(Access::LOCAL_READ);
        }
        if need.writes() {
            inner_need = inner_need.union(Access::LOCAL_WRITE);
        }
        let mut off = va - m.start; // resolve() proved va >= start
        let mut left = len;
        // First entry holding `off`: entries are sorted by `off`.
        let mut i = entries.partition_point(|e| e.off + e.bcount <= off);
        let mut out: Vec<(u64, u64)> = Vec::new();
        while left > 0 {
            let e = entries.get(i).ok_or(MrFault::OutOfBounds)?;
            let within = off - e.off;
            let n = (e.bcount - within).min(left);
            let inner = self
                .keys
                .get(&mkey::index(e.key))
                .ok_or(MrFault::UnknownKey)?;
            if matches!(inner.translation, Translation::Klm { .. }) {
                return Err(MrFault::Indirection);
            }
            let inner_va = e.va.checked_add(within).ok_or(MrFault::OutOfBounds)?;
            let inner_user = KeyUser {
                pd: m.pd,
                qpn: user.qpn,
            };
            let r = self.resolve(e.key, inner_va, n, inner_need, inner_user)?;
            r.for_each_piece(|a, l| {
                match out.last_mut() {
                    Some((s, pl)) if *s + *pl == a => *pl += l as u64,
                    _ => out.push((a, l as u64)),
                }
                Ok::<(), MrFault>(())
            })?;
            off += n;
            left -= n;
            i += 1;
        }
        Ok(out)
    }

    /// [`resolve`](Self::resolve) for any QP of protection domain `pd`, returning the bus
    /// pieces. The data path uses `resolve` directly to avoid the allocation.
    pub fn translate(
        &self,
        key: u32,
        va: u64,
        len: u64,
        need: Access,
        pd: u32,
    ) -> Result<Vec<(u64, usize)>, MrFault> {
        let user = KeyUser { pd, qpn: ANY_QPN };
        let m = self.keys.get(&mkey::index(key));
        // A key bound to one QP cannot be checked without that QP: use its own binding.
        let user = match m {
            Some(m) if m.qpn != ANY_QPN => KeyUser { qpn: m.qpn, ..user },
            _ => user,
        };
        Ok(self.resolve(key, va, len, need, user)?.pieces())
    }
}

/// CREATE_MKEY (opcode 0x200): validates the mkc and the translation list, allocates an index
/// and returns it in `create_mkey_out.mkey_index` (the usable key is `index << 8 | mkey_7_0`).
pub fn create_mkey(hca: &mut Hca, input: &[u8], output: &mut [u8]) -> CmdResult {
    let ctx = create_mkey_in::MEMORY_KEY_MKEY_ENTRY
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    if get(create_mkey_in::MKEY_UMEM_VALID, input) != 0 {
        return Err(bad_param(syndrome::UMEM_UNSUPPORTED));
    }
    let mode = (get(mkc::ACCESS_MODE_4_2, ctx) << 2) | get(mkc::ACCESS_MODE_1_0, ctx);
    let pd = get(mkc::PD, ctx);
    if !hca.pd_exists(pd) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_PD));
    }
    let qpn = get(mkc::QPN, ctx);
    if qpn != ANY_QPN && !hca.qps.contains(qpn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_QPN));
    }
    let start = mkc::START_ADDR.get_u64(ctx).unwrap_or(0);
    let length64 = get(mkc::LENGTH64, ctx) != 0;
    let len: u128 = if length64 {
        1u128 << 64
    } else {
        mkc::LEN.get_u64(ctx).unwrap_or(0) as u128
    };
    if start as u128 + len > 1u128 << 64 {
        return Err(bad_param(syndrome::LENGTH_OVERFLOW));
    }
    // Relaxed ordering only where advertised (Linux ib/mr.c set_mkc_access_pd_addr_fields
    // sets the bits only under the caps; model choice: refuse them otherwise).
    if get(mkc::RELAXED_ORDERING_WRITE, ctx) != 0
        && hca.cap(cmd_hca_cap::RELAXED_ORDERING_WRITE) == 0
    {
        return Err(bad_param(syndrome::RELAXED_ORDERING_UNSUPPORTED));
    }
    if get(mkc::RELAXED_ORDERING_READ, ctx) != 0
        && hca.cap(linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ) == 0
        && hca.cap(linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED) == 0
    {
        return Err(bad_param(syndrome::RELAXED_ORDERING_UNSUPPORTED));
    }
    if !length64 {
        let log_max = hca.cap(cmd_hca_cap::LOG_MAX_MRW_SZ);
        if log_max != 0 && log_max < 64 && len > 1u128 << log_max {
            return Err(err(cmd_status::LIM_ERR, syndrome::LENGTH_ABOVE_CAP));
        }
    }

    let translation = match mode as u8 {
        mkc_access_mode::PA => Translation::Pa,
        mkc_access_mode::MTT => {
            if length64 {
                return Err(bad_param(syndrome::LENGTH64_NOT_PA));
            }
            let page_shift = get(mkc::LOG_PAGE_SIZE, ctx); // absolute (facts trap 1)
            if !(MIN_MTT_PAGE_SHIFT..=MAX_MTT_PAGE_SHIFT).contains(&page_shift) {
                return Err(bad_param(syndrome::BAD_LOG_PAGE_SIZE));
            }
            let page = 1u128 << page_shift;
            let first = start as u128 >> page_shift;
            let end = (start as u128 + len).div_ceil(page);
            let npages = (end - first) as u64;
            let size = get(mkc::TRANSLATIONS_OCTWORD_SIZE, ctx) as u64;
            let actual = get(create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, input) as u64;
            if actual > size {
                return Err(bad_param(syndrome::MTT_ACTUAL_EXCEEDS_SIZE));
            }
            // Two 8-byte MTTs per octoword (facts trap 7).
            if actual * 2 < npages {
                return Err(bad_param(syndrome::MTT_TOO_FEW));
            }
            let list = &input[create_mkey_in::BYTES..];
            if (list.len() as u64) < npages * mkey::MTT_ENTRY_SIZE as u64
                || (list.len() as u64) < actual * mkey::OCTOWORD_SIZE as u64
            {
                return Err(err(
                    cmd_status::BAD_INP_LEN_ERR,
                    syndrome::MTT_INPUT_TRUNCATED,
                ));
            }
            let pg_access = get(create_mkey_in::PG_ACCESS, input) != 0;
            let umr_en = get(mkc::UMR_EN, ctx) != 0;
            // A UMR-enabled key has room for `translations_octword_size` octowords that UMR
            // WQEs fill later (Linux ib/mr.c `set_cache_mkc`: a free key, `umr_en`, and the
            // size only); entries not loaded yet are not present.
            let room = if umr_en {
                (size * 2).max(npages)
            } else {
                npages
            };
            if umr_en && room > 1 << 24 {
                return Err(bad_param(syndrome::MTT_TOO_FEW));
            }
            let mut entries = Vec::with_capacity(room as usize);
            for chunk in list.chunks_exact(8).take(npages as usize) {
                let raw = u64::from_be_bytes(chunk.try_into().unwrap_or([0; 8]));
                // mlx5_ifc_mtt_bits: ptag above bit 8, wr_en bit 1, rd_en bit 0; the enables
                // count only with pg_access (facts trap 6).
                let addr = raw & !0xff;
                if addr & (page as u64 - 1) != 0 {
                    return Err(bad_param(syndrome::MTT_MISALIGNED));
                }
                entries.push(MttEntry::new(
                    addr,
                    !pg_access || raw & mkey::MTT_READ != 0,
                    !pg_access || raw & mkey::MTT_WRITE != 0,
                ));
            }
            entries.resize(room as usize, MttEntry(0));
            Translation::Mtt {
                page_shift,
                entries,
            }
        }
        mkc_access_mode::KLMS => {
            // A free `umr_en` key may be created empty: its list is loaded later by UMR
            // (Linux ib/mr.c `mlx5_ib_alloc_mw`: free, umr_en, KLMS, `translations_octword_size`
            // only, no list and no length; [`crate::mw`]).
            let empty_ok = get(mkc::FREE, ctx) != 0 && get(mkc::UMR_EN, ctx) != 0;
            if length64 || (len == 0 && !empty_ok) {
                return Err(bad_param(syndrome::KLM_BAD_LENGTH));
            }
            // One octoword per 16-byte entry (UCX ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm`
            // sets both sizes to the entry count).
            let size = get(mkc::TRANSLATIONS_OCTWORD_SIZE, ctx) as u64;
            let actual = get(create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, input) as u64;
            if actual > size {
                return Err(bad_param(syndrome::MTT_ACTUAL_EXCEEDS_SIZE));
            }
            if actual == 0 && !(empty_ok && len == 0 && size > 0) {
                return Err(bad_param(syndrome::KLM_BAD_LENGTH));
            }
            let log_max = hca.cap(cmd_hca_cap::LOG_MAX_KLM_LIST_SIZE);
            if size.max(actual) > 1u64 << log_max.min(63) {
                return Err(bad_param(syndrome::KLM_LIST_TOO_LONG));
            }
            let list = &input[create_mkey_in::BYTES..];
            if (list.len() as u64) < actual * mkey::KLM_ENTRY_SIZE as u64 {
                return Err(err(
                    cmd_status::BAD_INP_LEN_ERR,
                    syndrome::MTT_INPUT_TRUNCATED,
                ));
            }
            let mut entries = Vec::with_capacity(actual as usize);
            let mut off = 0u64;
            for e in list
                .chunks_exact(mkey::KLM_ENTRY_SIZE)
                .take(actual as usize)
            {
                let be32 = |o: usize| u32::from_be_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]);
                let bcount = u64::from(be32(mkey::KLM_BCOUNT));
                // Model choice: a zero byte count is refused (no source says what it means).
                if bcount == 0 || bcount > MAX_KLM_BYTE_COUNT {
                    return Err(bad_param(syndrome::KLM_BAD_BYTE_COUNT));
                }
                let va = u64::from_be_bytes(
                    e[mkey::KLM_VA..mkey::KLM_VA + 8]
                        .try_into()
                        .unwrap_or([0; 8]),
                );
                entries.push(KlmEntry {
                    off,
                    bcount,
                    key: be32(mkey::KLM_KEY),
                    va,
                });
                off += bcount; // at most 2^16 entries of at most 2^31 bytes
            }
            if (off as u128) < len {
                return Err(bad_param(syndrome::KLM_TOO_SHORT));
            }
            Translation::Klm { entries }
        }
        _ => return Err(bad_param(syndrome::UNSUPPORTED_ACCESS_MODE)),
    };

    let log_max_mkey = hca.cap(cmd_hca_cap::LOG_MAX_MKEY).min(24);
    let limit = 1u32 << log_max_mkey;
    if hca.mkeys.keys.len() as u64 >= limit as u64 {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_MKEYS));
    }
    let index = hca
        .mkeys
        .alloc_index(limit)
        .ok_or(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_MKEYS))?;
    let mut access = Access::default();
    for (f, a) in [
        (mkc::LR, Access::LOCAL_READ),
        (mkc::LW, Access::LOCAL_WRITE),
        (mkc::RR, Access::REMOTE_READ),
        (mkc::RW, Access::REMOTE_WRITE),
        (mkc::A, Access::REMOTE_ATOMIC),
    ] {
        if get(f, ctx) != 0 {
            access = access.union(a);
        }
    }
    let mut saved = [0u8; mkc::BYTES];
    saved.copy_from_slice(&ctx[..mkc::BYTES]);
    let m = Mkey {
        index,
        variant: get(mkc::MKEY_7_0, ctx) as u8,
        pd,
        qpn,
        access,
        start,
        len,
        free: get(mkc::FREE, ctx) != 0,
        umr_en: get(mkc::UMR_EN, ctx) != 0,
        en_rinval: get(mkc::EN_RINVAL, ctx) != 0,
        xlt_octowords: get(mkc::TRANSLATIONS_OCTWORD_SIZE, ctx),
        translation,
        mkc: saved,
    };
    hca.mkeys.keys.insert(index, m);
    let _ = create_mkey_out::MKEY_INDEX.set(output, index);
    Ok(())
}

/// DESTROY_MKEY (opcode 0x202): takes `mkey_index = mkey >> 8`.
pub fn destroy_mkey(hca: &mut Hca, input: &[u8], _output: &mut [u8]) -> CmdResult {
    let index = get(destroy_mkey_in::MKEY_INDEX, input);
    match hca.mkeys.keys.remove(&index) {
        Some(_) => Ok(()),
        None => Err(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_MKEY)),
    }
}

/// QUERY_MKEY (opcode 0x201): returns the mkc (with the current `free` state) and the first
/// two translation entries.
pub fn query_mkey(hca: &mut Hca, input: &[u8], output: &mut [u8]) -> CmdResult {
    let index = get(query_mkey_in::MKEY_INDEX, input);
    let m = hca
        .mkeys
        .keys
        .get(&index)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_MKEY))?;
    let mut ctx = m.mkc;
    let _ = mkc::FREE.set(&mut ctx, m.free as u32);
    let _ = query_mkey_out::MEMORY_KEY_MKEY_ENTRY.write_bytes(output, &ctx);
    if let Translation::Mtt { entries, .. } = &m.translation {
        let mut pas = [0u8; 16];
        for (i, e) in entries.iter().take(2).enumerate() {
            let raw = e.addr() | (e.write() as u64) << 1 | e.read() as u64;
            pas[i * 8..i * 8 + 8].copy_from_slice(&raw.to_be_bytes());
        }
        let _ = query_mkey_out::BSF0_KLM0_PAS_MTT0_1.write_bytes(output, &pas);
    }
    // An indirect key: its first two KLM entries (`bsf0_klm0_pas_mtt0_1`,
    // `bsf1_klm1_pas_mtt2_3`), each as `mlx5_ifc_klm_bits`.
    if let Translation::Klm { entries } = &m.translation {
        for (e, f) in entries.iter().zip([
            query_mkey_out::BSF0_KLM0_PAS_MTT0_1,
            query_mkey_out::BSF1_KLM1_PAS_MTT2_3,
        ]) {
            let mut k = [0u8; mkey::KLM_ENTRY_SIZE];
            k[mkey::KLM_BCOUNT..mkey::KLM_BCOUNT + 4]
                .copy_from_slice(&(e.bcount as u32).to_be_bytes());
            k[mkey::KLM_KEY..mkey::KLM_KEY + 4].copy_from_slice(&e.key.to_be_bytes());
            k[mkey::KLM_VA..mkey::KLM_VA + 8].copy_from_slice(&e.va.to_be_bytes());
            let _ = f.write_bytes(output, &k);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PagedBuffer: the pas[] list of a CQ or QP buffer
// ---------------------------------------------------------------------------------------------

/// Why a `pas[]` description was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasError {
    /// `log_page_size` makes a page larger than 2^31 bytes (outside the 5-bit field's sane use).
    BadPageSize,
    /// Fewer `pas[]` entries than the buffer needs.
    TooFewPages,
    /// A page address is not aligned to the page size.
    Misaligned,
}

/// A queue buffer described by page addresses (`pas[]` of CREATE_CQ / CREATE_QP), with the
/// `log_page_size` RELATIVE to 4 KiB (facts trap 2) and a quantized `page_offset` in units of
/// `page_size / 64` (facts trap 3).
#[derive(Clone, Debug, Default)]
pub struct PagedBuffer {
    pages: Vec<u64>,
    page_shift: u32,
    /// Byte offset of the buffer start inside the first page.
    offset: u64,
    /// Buffer length in bytes.
    len: u64,
}

impl PagedBuffer {
    /// Parses `npas` 8-byte big-endian page addresses from `pas` (the bytes after the command's
    /// fixed part) for a buffer of `len` bytes.
    pub fn new(
        pas: &[u8],
        log_page_size_rel: u32,
        page_offset: u32,
        len: u64,
    ) -> Result<PagedBuffer, PasError> {
        let page_shift = log_page_size_rel + pages::ADAPTER_PAGE_SHIFT;
        if page_shift > MAX_MTT_PAGE_SHIFT {
            return Err(PasError::BadPageSize);
        }
        let page = 1u64 << page_shift;
        let offset = page_offset as u64 * (page / 64);
        let needed = (offset + len).div_ceil(page) as usize;
        if pas.len() / 8 < needed {
            return Err(PasError::TooFewPages);
        }
        let mut pages = Vec::with_capacity(needed);
        for c in pas.chunks_exact(8).take(needed) {
            let a = u64::from_be_bytes(c.try_into().unwrap_or([0; 8]));
            if a & (page - 1) != 0 {
                return Err(PasError::Misaligned);
            }
            pages.push(a);
        }
        Ok(PagedBuffer {
            pages,
            page_shift,
            offset,
            len,
        })
    }

    /// Buffer length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// log2 of the page size.
    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// The bus ranges `(addr, len)` the buffer's bytes occupy.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        page_ranges(&self.pages, self.page_shift, self.offset, self.len)
    }

    /// Page addresses, for QUERY commands.
    pub fn pas(&self) -> &[u64] {
        &self.pages
    }

    /// Calls `f(bus, buf_offset, len)` for the pieces of `[off, off + len)` (inside the buffer).
    fn pieces<E>(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(u64, usize, usize) -> Result<(), E>,
        oob: E,
    ) -> Result<(), E> {
        if off.checked_add(len as u64).is_none_or(|e| e > self.len) {
            return Err(oob);
        }
        let page = 1u64 << self.page_shift;
        let mut pos = self.offset + off;
        let mut done = 0usize;
        while done < len {
            let idx = (pos >> self.page_shift) as usize;
            let in_page = pos & (page - 1);
            let n = ((page - in_page) as usize).min(len - done);
            f(self.pages[idx] + in_page, done, n)?;
            pos += n as u64;
            done += n;
        }
        Ok(())
    }

    /// The bus address of `[off, off + len)` when that range is inside the buffer and inside
    /// one of its pages (so one bus range holds it), else `None`.
    pub(crate) fn bus_in_page(&self, off: u64, len: usize) -> Option<u64> {
        let end = off.checked_add(len as u64).filter(|&e| e <= self.len)?;
        let page = 1u64 << self.page_shift;
        let pos = self.offset.checked_add(off)?;
        let in_page = pos & (page - 1);
        if in_page + (end - off) > page {
            return None;
        }
        let base = *self.pages.get((pos >> self.page_shift) as usize)?;
        Some(base + in_page)
    }

    /// Reads `buf.len()` bytes at byte offset `off` of the buffer.
    pub fn read(&self, mem: &dyn GuestMemory, off: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let oob = DmaError {
            addr: off,
            len: buf.len(),
        };
        self.pieces(
            off,
            buf.len(),
            |bus, at, n| mem.read(bus, &mut buf[at..at + n]),
            oob,
        )
    }

    /// Writes `buf` at byte offset `off` of the buffer.
    pub fn write(&self, mem: &dyn GuestMemory, off: u64, buf: &[u8]) -> Result<(), DmaError> {
        let oob = DmaError {
            addr: off,
            len: buf.len(),
        };
        self.pieces(
            off,
            buf.len(),
            |bus, at, n| mem.write(bus, &buf[at..at + n]),
            oob,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(m: Mkey) -> MkeyTable {
        let mut t = MkeyTable::default();
        t.keys.insert(m.index, m);
        t
    }

    fn mtt_key(start: u64, len: u128, shift: u32, pages: &[u64], access: Access) -> Mkey {
        Mkey {
            index: 0x20,
            variant: 0x5a,
            pd: 3,
            qpn: ANY_QPN,
            access,
            start,
            len,
            free: false,
            umr_en: false,
            en_rinval: false,
            xlt_octowords: 0,
            translation: Translation::Mtt {
                page_shift: shift,
                entries: pages
                    .iter()
                    .map(|&addr| MttEntry::new(addr, true, true))
                    .collect(),
            },
            mkc: [0; mkc::BYTES],
        }
    }

    const USER: KeyUser = KeyUser { pd: 3, qpn: 7 };
    const KEY: u32 = 0x20 << 8 | 0x5a;

    #[test]
    fn mtt_translation_merges_contiguous_pages() {
        let lr = Access::LOCAL_READ;
        // start in the middle of the first 4 KiB page; pages 1 and 2 contiguous on the bus.
        let t = table_with(mtt_key(
            0x7000_0800,
            3 * 4096,
            12,
            &[0x10_0000, 0x20_0000, 0x20_1000, 0x30_0000],
            lr,
        ));
        let p = t.translate(KEY, 0x7000_0f00, 0x1200, lr, 3).unwrap();
        assert_eq!(p, vec![(0x10_0f00, 0x100), (0x20_0000, 0x1100)]);
        let p = t.translate(KEY, 0x7000_2000, 0x1800, lr, 3).unwrap();
        assert_eq!(p, vec![(0x20_1000, 0x1000), (0x30_0000, 0x800)]);
        // Last byte of the key is fine, one past is not.
        assert!(t.translate(KEY, 0x7000_37ff, 1, lr, 3).is_ok());
        assert_eq!(
            t.translate(KEY, 0x7000_37ff, 2, lr, 3),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(KEY, 0x7000_07ff, 1, lr, 3),
            Err(MrFault::OutOfBounds)
        );
        // Wrap-around never passes.
        assert_eq!(
            t.translate(KEY, u64::MAX, 2, lr, 3),
            Err(MrFault::OutOfBounds)
        );
    }

    /// The pieces of every range of a paged key (page boundaries, one byte, whole key, runs
    /// of bus-adjacent pages broken and not) are those of a page-by-page walk.
    #[test]
    fn mtt_pieces_match_a_page_by_page_walk() {
        let lr = Access::LOCAL_READ;
        let pages = [
            0x10_0000, 0x10_1000, 0x30_0000, 0x30_1000, 0x30_2000, 0x5000,
        ];
        let start = 0x7000_0800u64;
        let t = table_with(mtt_key(start, 6 * 4096 - 0x800, 12, &pages, lr));
        let walk = |va: u64, len: u64| {
            let mut v: Vec<(u64, usize)> = Vec::new();
            for a in va..va + len {
                let off = a - (start & !0xfff);
                let bus = pages[(off >> 12) as usize] + (off & 0xfff);
                match v.last_mut() {
                    Some((s, l)) if *s + *l as u64 == bus => *l += 1,
                    _ => v.push((bus, 1)),
                }
            }
            v
        };
        let end = start + 6 * 4096 - 0x800;
        let mut vas = vec![start, start + 1, end - 1];
        for p in 1..6u64 {
            let b = (start & !0xfff) + p * 4096;
            vas.extend([b - 1, b, b + 1]);
        }
        for &va in &vas {
            for len in [1u64, 2, 0x7ff, 0x800, 0xfff, 0x1000, 0x1001, 0x2000, 0x3801] {
                if va + len > end {
                    continue;
                }
                let got = t.translate(KEY, va, len, lr, 3).unwrap();
                assert_eq!(got, walk(va, len), "va {va:#x} len {len:#x}");
            }
        }
        let all = t.translate(KEY, start, end - start, lr, 3).unwrap();
        assert_eq!(
            all,
            vec![(0x10_0800, 0x1800), (0x30_0000, 0x3000), (0x5000, 0x1000)]
        );
    }

    /// The per-page read and write enables of an MTT (UMR can clear them page by page): a
    /// range is refused exactly when one of its pages lacks an enable the access needs.
    #[test]
    fn mtt_page_enables_refuse_exactly_the_pages_without_them() {
        let all = Access::LOCAL_READ
            .union(Access::LOCAL_WRITE)
            .union(Access::REMOTE_READ)
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_ATOMIC);
        let mut m = mtt_key(
            0x7000_0000,
            4 * 4096,
            12,
            &[0x1000, 0x2000, 0x3000, 0x4000],
            all,
        );
        // Page 1 without read, page 2 without write, page 3 without either.
        let enables = [(true, true), (false, true), (true, false), (false, false)];
        if let Translation::Mtt { entries, .. } = &mut m.translation {
            for (e, &(r, w)) in entries.iter_mut().zip(&enables) {
                *e = MttEntry::new(e.addr(), r, w);
            }
        }
        let t = table_with(m);
        let needs = [
            Access::LOCAL_READ,
            Access::LOCAL_WRITE,
            Access::REMOTE_READ,
            Access::REMOTE_WRITE,
            Access::REMOTE_ATOMIC,
        ];
        for first in 0..4u64 {
            for last in first..4u64 {
                let va = 0x7000_0000 + first * 4096 + 8;
                let len = (last - first) * 4096 + 8;
                for need in needs {
                    let ok = (first..=last).all(|p| {
                        let (r, w) = enables[p as usize];
                        (!need.reads() || r) && (!need.writes() || w)
                    });
                    let got = t.translate(KEY, va, len, need, 3);
                    if ok {
                        assert!(got.is_ok(), "pages {first}..={last} {need:?}: {got:?}");
                    } else {
                        assert_eq!(
                            got,
                            Err(MrFault::PageAccessDenied),
                            "pages {first}..={last} {need:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn key_checks() {
        let t = table_with(mtt_key(
            0x1000,
            4096,
            12,
            &[0x5000],
            Access::LOCAL_READ.union(Access::REMOTE_READ),
        ));
        let ok = t.resolve(KEY, 0x1000, 16, Access::REMOTE_READ, USER);
        assert!(ok.is_ok());
        assert_eq!(
            t.resolve(KEY ^ 1, 0x1000, 16, Access::LOCAL_READ, USER)
                .err(),
            Some(MrFault::VariantMismatch)
        );
        assert_eq!(
            t.resolve(KEY + 0x100, 0x1000, 16, Access::LOCAL_READ, USER)
                .err(),
            Some(MrFault::UnknownKey)
        );
        assert_eq!(
            t.resolve(KEY, 0x1000, 16, Access::REMOTE_WRITE, USER).err(),
            Some(MrFault::AccessDenied)
        );
        assert_eq!(
            t.resolve(KEY, 0x1000, 16, Access::LOCAL_WRITE, USER).err(),
            Some(MrFault::AccessDenied)
        );
        let other_pd = KeyUser { pd: 4, qpn: 7 };
        assert_eq!(
            t.resolve(KEY, 0x1000, 16, Access::LOCAL_READ, other_pd)
                .err(),
            Some(MrFault::PdMismatch)
        );
    }

    #[test]
    fn pa_key_and_length64() {
        let mut m = mtt_key(0, 1 << 64, 12, &[], Access::LOCAL_READ);
        m.translation = Translation::Pa;
        let t = table_with(m);
        assert_eq!(
            t.translate(KEY, 0xffff_ffff_ffff_f000, 0x1000, Access::LOCAL_READ, 3),
            Ok(vec![(0xffff_ffff_ffff_f000, 0x1000)])
        );
        assert_eq!(
            t.translate(KEY, 0xffff_ffff_ffff_f001, 0x1000, Access::LOCAL_READ, 3),
            Err(MrFault::OutOfBounds)
        );
    }

    #[test]
    fn paged_buffer_offsets() {
        let mut pas = Vec::new();
        for a in [0x1000u64, 0x9000, 0x3000] {
            pas.extend_from_slice(&a.to_be_bytes());
        }
        // page_offset 32 of 4 KiB pages = 2048 bytes into the first page.
        let b = PagedBuffer::new(&pas, 0, 32, 8192).unwrap();
        let mem = crate::memory::RegionMemory::with_base(0x100000);
        mem.insert(0x1000, &[0u8; 4096]).unwrap();
        mem.insert(0x9000, &[0u8; 4096]).unwrap();
        mem.insert(0x3000, &[0u8; 4096]).unwrap();
        b.write(&mem, 2040, &[7u8; 16]).unwrap();
        assert_eq!(mem.read_u64_be(0x1ff8).unwrap(), 0x0707_0707_0707_0707);
        assert_eq!(mem.read_u64_be(0x9000).unwrap(), 0x0707_0707_0707_0707);
        assert!(b.write(&mem, 8190, &[0u8; 4]).is_err());
        assert_eq!(
            PagedBuffer::new(&pas[..16], 0, 32, 8192).err(),
            Some(PasError::TooFewPages)
        );
    }

    /// The key table's generation changes with every access that may change a key, stays
    /// with reads, and no two tables (nor two states of one) share one.
    #[test]
    fn key_table_generation_moves_with_every_change() {
        let mut t = MkeyTable::default();
        let other = MkeyTable::default();
        let g0 = t.generation();
        assert_ne!(g0, other.generation());
        t.keys.insert(
            0x20,
            mtt_key(0x1000, 0x1000, 12, &[0x5000], Access::LOCAL_READ),
        );
        let g1 = t.generation();
        assert_ne!(g1, g0);
        let _ = t.resolve(KEY, 0x1000, 16, Access::LOCAL_READ, USER);
        let _ = t.by_index(0x20);
        assert_eq!(t.generation(), g1, "reads leave it");
        let _ = t.keys.get_mut(&0x20);
        let g2 = t.generation();
        assert_ne!(g2, g1);
        t.keys.values_mut().for_each(|_| ());
        let g3 = t.generation();
        assert_ne!(g3, g2);
        t.keys.remove(&0x20);
        let g4 = t.generation();
        assert_ne!(g4, g3);
        t.clear();
        assert!(![g0, g1, g2, g3, g4, other.generation()].contains(&t.generation()));
    }
}
