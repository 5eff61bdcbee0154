//! Memory keys: CREATE_MKEY / DESTROY_MKEY in MTT mode, with the fewest translation entries.
//!
//! Sources: Linux ib/mr.c (`set_mkc_access_pd_addr_fields`, `reg_create`), rdma-core
//! mlx5_vfio.c `vfio_reg_mr`; facts traps 1 (absolute `log_page_size`), 5 (key = index << 8 |
//! variant), 6 (MTT entry format), 7 (`translations_octword_size`).
//!
//! Translation planning: the MR's virtual range `[iova, iova + len)` is made of physically
//! contiguous chunks. For a page size `2^s` the range is cut at `2^s`-aligned virtual
//! addresses; that works when every chunk has the same offset inside a page virtually and
//! physically, and chunks meet at page boundaries. Among the sizes that work (4 KiB .. 1 GiB)
//! the planner picks the one with the fewest entries (the smallest such size on a tie), so a
//! contiguous region becomes one entry and a list of 2 MiB huge pages one entry per page.

use alloc::vec::Vec;

use mlx5_prm::{
    create_mkey_in, create_mkey_out, destroy_mkey_in, destroy_mkey_out, mkc, mkc_access_mode, mkey,
    opcode,
};

use crate::cmd::{get, CmdBuf};
use crate::error::{InvalidInput, Result};
use crate::hal::Hal;
use crate::hca::Device;

/// Smallest translation page: 4 KiB (`MLX5_ADAPTER_PAGE_SHIFT`).
pub const MIN_PAGE_SHIFT: u32 = 12;
/// Largest translation page the planner uses: 1 GiB.
pub const MAX_PAGE_SHIFT: u32 = 30;
/// Most translation entries one registration may need (driver choice): 2^28 MTT entries
/// describe 1 TiB of scattered 4 KiB pages (2 GiB of list in the driver's memory while it is
/// sent, in 2^11 commands); larger regions of small pages are refused before anything is
/// allocated. Regions of larger pages need far fewer entries.
pub const MAX_MTT_ENTRIES: u64 = 1 << 28;
/// Most MTT entries one CREATE_MKEY carries (driver choice): 2^17 entries are a 1 MiB list, a
/// 2 Ki-block mailbox chain. A longer translation is split over several MTT mkeys joined by
/// one indirect KLM mkey (see [`KlmPlan`]), as UCX registers KSM/KLM keys by CREATE_MKEY
/// (src/uct/ib/mlx5/dv/ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm`). Linux instead loads long
/// lists by UMR (ib/umr.c `mlx5r_umr_update_xlt`), which needs a UMR QP this driver lacks.
pub const MAX_MTT_PER_MKEY: usize = 1 << 17;
/// `MLX5_MAX_KLM_BYTE_COUNT` ([`mlx5_prm::klm::MAX_BYTE_COUNT`]): the most bytes one KLM
/// entry maps; each inner MTT mkey of an indirect key covers at most this much.
pub const MAX_KLM_BYTE_COUNT: u64 = mlx5_prm::klm::MAX_BYTE_COUNT;

/// A physically contiguous piece of memory: bus address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysChunk {
    /// Bus (IOVA) address of the first byte.
    pub bus: u64,
    /// Length in bytes.
    pub len: u64,
}

/// How a region is translated: page shift and one bus address per page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Translation {
    /// log2 of the page size (absolute, facts trap 1).
    pub page_shift: u32,
    /// The page addresses, in virtual order.
    pub entries: Entries,
}

/// Entries held without a heap allocation ([`Entries`]): a small region's one or two pages.
const INLINE_ENTRIES: usize = 2;

/// A translation's page addresses: up to `INLINE_ENTRIES` (2) in place (a small region's
/// registration allocates nothing for them), more in a `Vec`. Reads as a `[u64]`.
#[derive(Clone)]
pub struct Entries(Repr);

#[derive(Clone)]
enum Repr {
    Inline { n: u8, e: [u64; INLINE_ENTRIES] },
    Heap(Vec<u64>),
}

impl Entries {
    /// Room for `n` entries.
    pub fn with_capacity(n: usize) -> Entries {
        if n <= INLINE_ENTRIES {
            Entries(Repr::Inline {
                n: 0,
                e: [0; INLINE_ENTRIES],
            })
        } else {
            Entries(Repr::Heap(Vec::with_capacity(n)))
        }
    }

    /// Appends `x` (moving to the heap past `INLINE_ENTRIES` (2)).
    pub fn push(&mut self, x: u64) {
        match &mut self.0 {
            Repr::Inline { n, e } => {
                if let Some(d) = e.get_mut(*n as usize) {
                    *d = x;
                    *n += 1;
                } else {
                    let mut v = Vec::with_capacity(INLINE_ENTRIES * 2);
                    v.extend_from_slice(e);
                    v.push(x);
                    self.0 = Repr::Heap(v);
                }
            }
            Repr::Heap(v) => v.push(x),
        }
    }
}

impl Default for Entries {
    fn default() -> Entries {
        Entries::with_capacity(0)
    }
}

impl core::ops::Deref for Entries {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        match &self.0 {
            Repr::Inline { n, e } => e.get(..*n as usize).unwrap_or(&[]),
            Repr::Heap(v) => v,
        }
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = &'a u64;
    type IntoIter = core::slice::Iter<'a, u64>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<u64>> for Entries {
    fn from(v: Vec<u64>) -> Entries {
        if v.len() <= INLINE_ENTRIES {
            v.into_iter().collect()
        } else {
            Entries(Repr::Heap(v))
        }
    }
}

impl FromIterator<u64> for Entries {
    fn from_iter<I: IntoIterator<Item = u64>>(it: I) -> Entries {
        let it = it.into_iter();
        let mut e = Entries::with_capacity(it.size_hint().0);
        for x in it {
            e.push(x);
        }
        e
    }
}

impl core::fmt::Debug for Entries {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Entries {
    fn eq(&self, o: &Entries) -> bool {
        **self == **o
    }
}

impl Eq for Entries {}

impl PartialEq<Vec<u64>> for Entries {
    fn eq(&self, o: &Vec<u64>) -> bool {
        **self == **o
    }
}

fn count_at(chunks: &[PhysChunk], iova: u64, s: u32) -> Option<u64> {
    let ps = 1u64 << s;
    let mask = ps - 1;
    let mut v = iova;
    let mut n = 0u64;
    let last = chunks.len().checked_sub(1)?;
    for (i, c) in chunks.iter().enumerate() {
        if c.len == 0 {
            return None;
        }
        // The chunk must not wrap the bus address space.
        c.bus.checked_add(c.len)?;
        // Same offset inside the page, virtually and physically.
        if (v & mask) != (c.bus & mask) {
            return None;
        }
        let end = v.checked_add(c.len)?;
        // Interior boundaries must be page boundaries.
        if i > 0 && v & mask != 0 {
            return None;
        }
        if i < last && end & mask != 0 {
            return None;
        }
        n = n.checked_add(end.div_ceil(ps) - (v >> s))?;
        v = end;
    }
    Some(n)
}

/// One KLM entry (`struct mlx5_ifc_klm_bits`: be32 byte_count, be32 mkey, be64 address;
/// rdma-core / DPDK mlx5_prm.h, Linux include/linux/mlx5/qp.h `struct mlx5_klm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Klm {
    /// Bytes of the indirect key's range this entry maps.
    pub byte_count: u32,
    /// The inner (direct) key.
    pub mkey: u32,
    /// Where in the inner key's address space they start.
    pub address: u64,
}

/// How a registration is laid out on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KlmPlan {
    /// The page translation, of the virtual range starting at `mtt_va`.
    pub tr: Translation,
    /// Virtual address of the region's first byte in the MTT keys' address space: the IOVA
    /// itself when the chunks' page offsets match it, else the first chunk's bus address
    /// (the indirect key then maps the IOVA onto it).
    pub mtt_va: u64,
    /// Inner MTT keys: `(va, len, first entry, entry count)`; empty for a direct MTT key.
    pub segments: Vec<(u64, u64, usize, usize)>,
}

/// Plans a registration of `chunks` at `iova`: one MTT key when the pages' offsets match the
/// IOVA and the list fits one command; otherwise MTT keys of at most
/// `min(MAX_MTT_PER_MKEY, MAX_KLM_BYTE_COUNT / page)` entries under one KLM key of at most
/// `1 << log_max_klm` entries.
pub fn plan_reg(chunks: &[PhysChunk], iova: u64, log_max_klm: u8) -> Result<KlmPlan> {
    // One chunk whose page offset matches the IOVA (every small registration): one MTT key,
    // as below, without the general path's second plan and segment walk.
    if let [c] = chunks {
        if let Ok(tr) = plan_one(c, iova) {
            if tr.entries.len() <= MAX_MTT_PER_MKEY {
                return Ok(KlmPlan {
                    tr,
                    mtt_va: iova,
                    segments: Vec::new(),
                });
            }
        }
    }
    let (tr, mtt_va) = match plan(chunks, iova) {
        Ok(t) => (t, iova),
        Err(e) => {
            // Same pages at the first chunk's own address: the IOVA's page offset no longer
            // matters, the KLM entry's `address` absorbs the difference.
            let v = chunks.first().map(|c| c.bus).ok_or(e)?;
            match plan(chunks, v) {
                Ok(t) => (t, v),
                Err(_) => return Err(e),
            }
        }
    };
    let total = chunks.iter().map(|c| c.len).sum::<u64>(); // checked by the caller
    if mtt_va == iova && tr.entries.len() <= MAX_MTT_PER_MKEY {
        return Ok(KlmPlan {
            tr,
            mtt_va,
            segments: Vec::new(),
        });
    }
    let ps = 1u64 << tr.page_shift;
    let per = (MAX_KLM_BYTE_COUNT >> tr.page_shift).clamp(1, MAX_MTT_PER_MKEY as u64) as usize;
    let base = mtt_va & !(ps - 1);
    let end = mtt_va + total; // plan() proved no wrap
    let mut segments = Vec::new();
    let mut first = 0usize;
    while first < tr.entries.len() {
        let count = per.min(tr.entries.len() - first);
        let lo = (base + first as u64 * ps).max(mtt_va);
        let hi = (base + (first + count) as u64 * ps).min(end);
        segments.push((lo, hi - lo, first, count));
        first += count;
    }
    let max = if log_max_klm >= 63 {
        u64::MAX
    } else {
        1u64 << log_max_klm
    };
    if segments.len() as u64 > max {
        return Err(InvalidInput::TooManyTranslations {
            entries: tr.entries.len() as u64,
            max: max.saturating_mul(per as u64),
        }
        .into());
    }
    Ok(KlmPlan {
        tr,
        mtt_va,
        segments,
    })
}

/// The largest page shift (at most [`MAX_PAGE_SHIFT`]) at which `chunks` at `iova` can be
/// translated, `None` when not even 4 KiB works or a chunk is empty or wraps.
fn max_shift(chunks: &[PhysChunk], iova: u64) -> Option<u32> {
    let last = chunks.len().checked_sub(1)?;
    let mut v = iova;
    let mut m = 0u64;
    for (i, c) in chunks.iter().enumerate() {
        if c.len == 0 {
            return None;
        }
        c.bus.checked_add(c.len)?;
        let end = v.checked_add(c.len)?;
        m |= v ^ c.bus;
        if i > 0 {
            m |= v;
        }
        if i < last {
            m |= end;
        }
        v = end;
    }
    let s = m.trailing_zeros().min(MAX_PAGE_SHIFT);
    (s >= MIN_PAGE_SHIFT).then_some(s)
}

/// Plans the translation of `[iova, iova + total)` made of `chunks` in order.
pub fn plan(chunks: &[PhysChunk], iova: u64) -> Result<Translation> {
    // The page sizes that work are 4 KiB up to a largest one (each condition of `count_at`
    // at size 2^s holds at every smaller size), and a larger working size never needs more
    // entries. So: find the largest working size in one pass (as Linux
    // ib_umem_find_best_pgsz ORs the VA/PA differences and interior boundaries into one
    // mask), then the smallest size with its count by bisection ("the smallest page size
    // that results in the minimum number of required pages", ib_umem_find_best_pgsz).
    if let [c] = chunks {
        return plan_one(c, iova);
    }
    let smax = max_shift(chunks, iova).ok_or(InvalidInput::PageList)?;
    let Some(nmax) = count_at(chunks, iova, smax) else {
        return Err(InvalidInput::PageList.into());
    };
    let (mut lo, mut hi) = (MIN_PAGE_SHIFT, smax);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match count_at(chunks, iova, mid) {
            Some(n) if n == nmax => hi = mid,
            _ => lo = mid + 1,
        }
    }
    let (n, s) = (nmax, lo);
    // Bounded before anything is allocated for the list.
    if n > MAX_MTT_ENTRIES {
        return Err(InvalidInput::TooManyTranslations {
            entries: n,
            max: MAX_MTT_ENTRIES,
        }
        .into());
    }
    let ps = 1u64 << s;
    let mut entries = Entries::with_capacity(n as usize);
    let mut v = iova;
    for c in chunks {
        let end = v + c.len;
        // Physical address of the page holding v.
        let mut p = c.bus - (v & (ps - 1));
        let mut page = v >> s;
        while page < end.div_ceil(ps) {
            entries.push(p);
            // Past the last page this may wrap (a chunk ending in the top page); unused then.
            p = p.wrapping_add(ps);
            page += 1;
        }
        v = end;
    }
    Ok(Translation {
        page_shift: s,
        entries,
    })
}

/// [`plan`] of one chunk (the common small registration), without the general walk: the
/// same conditions, sizes and entries (`one_chunk_plan_matches_the_general_walk`).
fn plan_one(c: &PhysChunk, iova: u64) -> Result<Translation> {
    if c.len == 0 || c.bus.checked_add(c.len).is_none() {
        return Err(InvalidInput::PageList.into());
    }
    let end = iova.checked_add(c.len).ok_or(InvalidInput::PageList)?;
    // Same offset inside the page, virtually and physically (`max_shift` of one chunk).
    let smax = (iova ^ c.bus).trailing_zeros().min(MAX_PAGE_SHIFT);
    if smax < MIN_PAGE_SHIFT {
        return Err(InvalidInput::PageList.into());
    }
    // `count_at` of one chunk.
    let count = |s: u32| end.div_ceil(1u64 << s) - (iova >> s);
    let nmax = count(smax);
    if nmax == 1 {
        // One page (every small registration): the smallest size whose page holds both the
        // first and the last byte, i.e. above the highest bit in which their addresses differ
        // (at most `smax`, whose single page holds them); the same size the bisection below
        // finds (`one_chunk_plan_matches_the_general_walk`).
        let differ = iova ^ (end - 1);
        let s = (u64::BITS - differ.leading_zeros()).max(MIN_PAGE_SHIFT);
        let first = c.bus - (iova & ((1u64 << s) - 1));
        let mut entries = Entries::with_capacity(1);
        entries.push(first);
        return Ok(Translation {
            page_shift: s,
            entries,
        });
    }
    let (mut lo, mut hi) = (MIN_PAGE_SHIFT, smax);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if count(mid) == nmax {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    if nmax > MAX_MTT_ENTRIES {
        return Err(InvalidInput::TooManyTranslations {
            entries: nmax,
            max: MAX_MTT_ENTRIES,
        }
        .into());
    }
    let ps = 1u64 << lo;
    let first = c.bus - (iova & (ps - 1));
    // Past the last page this may wrap (a chunk ending in the top page); unused then.
    let entries = (0..nmax).map(|i| first.wrapping_add(i * ps)).collect();
    Ok(Translation {
        page_shift: lo,
        entries,
    })
}

/// Verbs access flags (`IBV_ACCESS_*` values, libibverbs verbs.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(2);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// `IBV_ACCESS_MW_BIND` (libibverbs verbs.h; Linux `IB_ACCESS_MW_BIND`): memory windows
    /// may be bound to the region (IB spec C10-73, rxe rxe_mw.c `rxe_check_bind_mw`). No mkc
    /// field carries it (Linux ib/mr.c `set_mkc_access_pd_addr_fields` does not map it): the
    /// driver checks it when a window is bound ([`crate::mw`]).
    pub const MW_BIND: Access = Access(1 << 4);
    /// `IBV_ACCESS_ZERO_BASED` (libibverbs verbs.h): a window bound with it is addressed from 0
    /// (rdma-core qp.c `set_umr_mkey_seg`: `start_addr = 0`). Window access only; a region
    /// registered with it is refused.
    pub const ZERO_BASED: Access = Access(1 << 5);
    /// `IBV_ACCESS_RELAXED_ORDERING` (= `IBV_ACCESS_OPTIONAL_FIRST`, 1 << 20): the device may
    /// reorder its PCIe writes / reads of the region. Optional: set in the mkey where the
    /// device supports it, ignored where it does not.
    pub const RELAXED_ORDERING: Access = Access(1 << 20);
    /// `IBV_ACCESS_OPTIONAL_RANGE` (libibverbs verbs.h: bits 20..29): flags a device may
    /// lack; libibverbs and the kernel mask them instead of failing the registration
    /// (`ibv_reg_mr` routes them to `ibv_reg_mr_iova2`; ib_core `IB_ACCESS_OPTIONAL`).
    pub const OPTIONAL_RANGE: Access = Access(0x3ff0_0000);
    /// Every mandatory access right.
    pub const ALL: Access = Access(15);
    /// No access beyond local read.
    pub const NONE: Access = Access(0);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }

    /// The verbs rule (Linux include/rdma/ib_verbs.h `ib_check_mr_access`): remote write and
    /// remote atomic need local write; unknown bits are refused, except the optional ones
    /// ([`Access::OPTIONAL_RANGE`]), which a device may ignore.
    pub fn validate(self) -> Result<()> {
        if self.0 & !(Access::ALL.0 | Access::MW_BIND.0 | Access::OPTIONAL_RANGE.0) != 0 {
            return Err(InvalidInput::AccessFlags.into());
        }
        if (self.contains(Access::REMOTE_WRITE) || self.contains(Access::REMOTE_ATOMIC))
            && !self.contains(Access::LOCAL_WRITE)
        {
            return Err(InvalidInput::AccessFlags.into());
        }
        Ok(())
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// What CREATE_MKEY needs.
pub(crate) struct MkeyParams<'a> {
    pub pdn: u32,
    pub iova: u64,
    pub len: u64,
    pub access: Access,
    pub variant: u8,
    pub pg_access: bool,
    /// `mkc.relaxed_ordering_write` / `_read` (already reduced to what the caps allow).
    pub ro_write: bool,
    pub ro_read: bool,
    pub xlt: Xlt<'a>,
    /// `mkc.umr_en`: UMR WQEs may modify the key ([`crate::umr`]).
    pub umr_en: bool,
    /// `mkc.free`: created disabled (a UMR enables it).
    pub free: bool,
    /// Room for translation entries, in octowords, when above what `xlt` carries (a key UMR
    /// loads later; Linux ib/mr.c `set_cache_mkc`).
    pub xlt_room: u32,
}

/// The translation a CREATE_MKEY carries.
#[derive(Clone, Copy)]
pub(crate) enum Xlt<'a> {
    /// MTT mode: log2 page size and page addresses.
    Mtt { page_shift: u32, entries: &'a [u64] },
    /// KLMS mode: the inner keys.
    Klm(&'a [Klm]),
}

/// The relaxed-ordering bits of an mkey for `access` on a device with `caps` (Linux ib/mr.c
/// `set_mkc_access_pd_addr_fields`): write when `relaxed_ordering_write`; read when
/// `relaxed_ordering_read`, or `relaxed_ordering_read_pci_enabled` with PCIe relaxed
/// ordering on, which the HAL does not report, so that half is never used. Without the flag,
/// or without the caps, neither bit: the optional flag is dropped, not refused.
pub(crate) fn relaxed_ordering(access: Access, caps: &crate::caps::Caps) -> (bool, bool) {
    if !access.contains(Access::RELAXED_ORDERING) {
        return (false, false);
    }
    (caps.relaxed_ordering_write, caps.relaxed_ordering_read)
}

/// The CREATE_MKEY command for `p` (MTT: Linux ib/mr.c `reg_create` /
/// `set_mkc_access_pd_addr_fields`; KLMS: one octoword per entry in both sizes, UCX
/// ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm`, entries as `uct_ib_mlx5_devx_klm_entry_set`).
pub(crate) fn mkey_cmd(p: &MkeyParams<'_>) -> Result<CmdBuf> {
    let m = |f: mlx5_prm::Field| f.within(create_mkey_in::MEMORY_KEY_MKEY_ENTRY);
    let base = create_mkey_in::KLM_PAS_MTT.byte_offset();
    let (mode, list_bytes, oct) = match p.xlt {
        Xlt::Mtt { entries, .. } => {
            let n = entries.len();
            if n > MAX_MTT_PER_MKEY {
                return Err(InvalidInput::TooManyTranslations {
                    entries: n as u64,
                    max: MAX_MTT_PER_MKEY as u64,
                }
                .into());
            }
            let padded = n + (n & 1); // even count (facts trap 7)
            (
                mkc_access_mode::MTT,
                padded * mkey::MTT_ENTRY_SIZE,
                mkey::mtt_octowords(n as u32),
            )
        }
        Xlt::Klm(k) => (
            mkc_access_mode::KLMS,
            k.len() * mkey::KLM_ENTRY_SIZE,
            k.len() as u32,
        ),
    };
    let mut c = CmdBuf::new(opcode::CREATE_MKEY, 0, base + list_bytes);
    c.set(
        create_mkey_in::PG_ACCESS,
        (p.pg_access && matches!(p.xlt, Xlt::Mtt { .. })) as u32,
    )
    .set(m(mkc::ACCESS_MODE_1_0), mkc_access_mode::bits_1_0(mode))
    .set(m(mkc::ACCESS_MODE_4_2), mkc_access_mode::bits_4_2(mode))
    .set(m(mkc::A), p.access.contains(Access::REMOTE_ATOMIC) as u32)
    .set(m(mkc::RW), p.access.contains(Access::REMOTE_WRITE) as u32)
    .set(m(mkc::RR), p.access.contains(Access::REMOTE_READ) as u32)
    .set(m(mkc::LW), p.access.contains(Access::LOCAL_WRITE) as u32)
    .set(m(mkc::LR), 1)
    .set(m(mkc::RELAXED_ORDERING_WRITE), p.ro_write as u32)
    .set(m(mkc::RELAXED_ORDERING_READ), p.ro_read as u32)
    // Not bound to a QP (Linux mr.c set_mkc_access_pd_addr_fields: qpn 0xffffff).
    .set(m(mkc::QPN), 0xff_ffff)
    .set(m(mkc::MKEY_7_0), p.variant.into())
    .set(m(mkc::PD), p.pdn)
    .set64(m(mkc::START_ADDR), p.iova)
    .set64(m(mkc::LEN), p.len)
    .set(m(mkc::UMR_EN), p.umr_en as u32)
    .set(m(mkc::FREE), p.free as u32)
    .set(m(mkc::TRANSLATIONS_OCTWORD_SIZE), oct.max(p.xlt_room))
    .set(create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, oct);
    match p.xlt {
        Xlt::Mtt {
            page_shift,
            entries,
        } => {
            c.set(m(mkc::LOG_PAGE_SIZE), page_shift);
            let flags = if p.pg_access { mkey::MTT_PRESENT } else { 0 };
            // Written straight into the buffer (this loop runs 2^17 times per command).
            for (dst, e) in c.buf[base..]
                .chunks_exact_mut(mkey::MTT_ENTRY_SIZE)
                .zip(entries)
            {
                dst.copy_from_slice(&(e | flags).to_be_bytes());
            }
        }
        Xlt::Klm(k) => {
            for (i, e) in k.iter().enumerate() {
                let at = base + i * mkey::KLM_ENTRY_SIZE;
                c.buf[at + mkey::KLM_BCOUNT..at + mkey::KLM_BCOUNT + 4]
                    .copy_from_slice(&e.byte_count.to_be_bytes());
                c.buf[at + mkey::KLM_KEY..at + mkey::KLM_KEY + 4]
                    .copy_from_slice(&e.mkey.to_be_bytes());
                c.put64(at + mkey::KLM_VA, e.address);
            }
        }
    }
    Ok(c)
}

/// The key a CREATE_MKEY output names.
pub(crate) fn mkey_from_out(out: &[u8], variant: u8) -> u32 {
    mkey::from_index(get(out, create_mkey_out::MKEY_INDEX), variant)
}

impl<H: Hal> Device<H> {
    /// CREATE_MKEY: returns the key `index << 8 | variant`.
    pub(crate) fn create_mkey(&mut self, hal: &H, p: &MkeyParams<'_>) -> Result<u32> {
        let c = mkey_cmd(p)?;
        let mut out = [0u8; create_mkey_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        Ok(mkey_from_out(&out, p.variant))
    }

    /// DESTROY_MKEY (takes `mkey >> 8`).
    pub(crate) fn destroy_mkey(&mut self, hal: &H, key: u32) -> Result<()> {
        let mut c = CmdBuf::new(opcode::DESTROY_MKEY, 0, destroy_mkey_in::BYTES);
        c.set(destroy_mkey_in::MKEY_INDEX, mkey::index(key));
        let mut out = [0u8; destroy_mkey_out::BYTES];
        self.exec(hal, &c, &mut out)
    }
}

/// Checks a registration request before anything is sent or allocated: access flags, a
/// non-zero length, no wrap of `iova + len`, and the device's largest region
/// (`1 << log_max_mrw_sz`, the limit CREATE_MKEY enforces; 64 or more: no limit).
pub(crate) fn check_request(len: u64, iova: u64, access: Access, log_max_mrw_sz: u8) -> Result<()> {
    access.validate()?;
    if len == 0 {
        return Err(InvalidInput::ZeroLength.into());
    }
    if iova.checked_add(len).is_none() {
        return Err(InvalidInput::LengthOverflow.into());
    }
    if log_max_mrw_sz < 64 {
        let max = 1u64 << log_max_mrw_sz;
        if len > max {
            return Err(InvalidInput::MrTooLarge { len, max }.into());
        }
    }
    Ok(())
}

/// A recently destroyed key that must not come back at once (ReDMArk: keys are not recycled
/// right after dereg).
pub(crate) const QUARANTINE: usize = 256;

/// Buckets of [`RecentKeys`]' counting filter.
const RECENT_BUCKETS: usize = 4096;

/// The last [`QUARANTINE`] destroyed keys, oldest first out, with a counting filter in
/// front of them: `contains` is one bucket read for a key that is not there (nearly every
/// key asked about; at most 256 of the 4096 buckets are non-zero), and a scan of the ring
/// only when its bucket is in use. Same answers as a scan of the ring every time
/// (`recent_keys_filter_matches_a_scan`).
pub(crate) struct RecentKeys {
    ring: [u32; QUARANTINE],
    /// Entries in `ring` (the first `len` slots until it fills, then all of them).
    len: usize,
    /// The slot the next key goes to (the oldest key once the ring is full).
    next: usize,
    /// How many keys of `ring` fall in each bucket (at most [`QUARANTINE`]).
    counts: [u16; RECENT_BUCKETS],
}

impl Default for RecentKeys {
    fn default() -> Self {
        RecentKeys {
            ring: [0; QUARANTINE],
            len: 0,
            next: 0,
            counts: [0; RECENT_BUCKETS],
        }
    }
}

impl RecentKeys {
    #[inline(always)]
    fn bucket(key: u32) -> usize {
        // Fibonacci hashing: the top 12 bits of key * 2^32 / phi.
        (key.wrapping_mul(0x9e37_79b9) >> 20) as usize
    }

    /// Whether `key` is one of the last [`QUARANTINE`] keys pushed.
    #[inline]
    pub(crate) fn contains(&self, key: u32) -> bool {
        self.counts[Self::bucket(key)] != 0 && self.ring[..self.len].contains(&key)
    }

    /// Records `key`, forgetting the oldest key once [`QUARANTINE`] are held.
    pub(crate) fn push(&mut self, key: u32) {
        if self.len == QUARANTINE {
            let old = self.ring[self.next];
            let b = &mut self.counts[Self::bucket(old)];
            *b = b.saturating_sub(1);
        } else {
            self.len += 1;
        }
        self.ring[self.next] = key;
        self.counts[Self::bucket(key)] += 1;
        self.next = (self.next + 1) % QUARANTINE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Entries` holds one or two pages in place and moves to the heap with the third,
    /// keeping order; it reads, compares and clones as the list it holds.
    #[test]
    fn entries_inline_then_heap() {
        let mut e = Entries::with_capacity(0);
        assert!(e.is_empty());
        for (i, x) in [0x1000u64, 0x3000, 0x2000, 0x9000].into_iter().enumerate() {
            e.push(x);
            assert_eq!(e.len(), i + 1);
            assert_eq!(matches!(e.0, Repr::Inline { .. }), i < INLINE_ENTRIES);
        }
        assert_eq!(e, alloc::vec![0x1000, 0x3000, 0x2000, 0x9000]);
        assert_eq!(e.clone(), e);
        let one: Entries = alloc::vec![7u64].into();
        assert!(matches!(one.0, Repr::Inline { n: 1, .. }));
        assert_eq!(&one[..], &[7]);
        let many: Entries = (0..5u64).collect();
        assert_eq!(many.iter().sum::<u64>(), 10);
        assert_ne!(many, Entries::default());
    }

    /// The general walk of `plan`, without the one-chunk shortcut.
    fn plan_walk(chunks: &[PhysChunk], iova: u64) -> Result<Translation> {
        let smax = max_shift(chunks, iova).ok_or(InvalidInput::PageList)?;
        let nmax = count_at(chunks, iova, smax).ok_or(InvalidInput::PageList)?;
        let s = (MIN_PAGE_SHIFT..=smax)
            .find(|&s| count_at(chunks, iova, s) == Some(nmax))
            .ok_or(InvalidInput::PageList)?;
        let ps = 1u64 << s;
        let c = chunks[0];
        let first = c.bus - (iova & (ps - 1));
        Ok(Translation {
            page_shift: s,
            entries: (0..nmax).map(|i| first.wrapping_add(i * ps)).collect(),
        })
    }

    /// One chunk: the shortcut gives what the general walk gives (page size, entries, and
    /// the refusals), over offsets, lengths and IOVAs around page and huge-page edges.
    #[test]
    fn one_chunk_plan_matches_the_general_walk() {
        let offs = [0u64, 1, 0x123, 0xfff, 0x1000, 0x1_f000, 0x20_0000, 0x1f_ffff, 0x4000_0000];
        let lens = [1u64, 0xfff, 0x1000, 0x1001, 0x2_0000, 0x20_0000, 0x20_0001, 0x4000_0000];
        for bus_off in offs {
            for iova_off in offs {
                for len in lens {
                    let c = [PhysChunk {
                        bus: 0x8000_0000 + bus_off,
                        len,
                    }];
                    let iova = 0x7f00_0000_0000 + iova_off;
                    let fast = plan(&c, iova);
                    let walk = plan_walk(&c, iova);
                    match (&fast, &walk) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "{bus_off:#x} {iova_off:#x} {len:#x}"),
                        (Err(_), Err(_)) => {}
                        _ => panic!("{bus_off:#x} {iova_off:#x} {len:#x}: {fast:?} vs {walk:?}"),
                    }
                }
            }
        }
        let empty = [PhysChunk { bus: 0x1000, len: 0 }];
        assert!(plan(&empty, 0x1000).is_err());
        let wraps = [PhysChunk {
            bus: u64::MAX - 0xfff,
            len: 0x2000,
        }];
        assert!(plan(&wraps, 0x1000).is_err());
    }

    /// The counting filter answers as a scan of the last QUARANTINE keys does, across
    /// wrap-around and with keys that share buckets.
    #[test]
    fn recent_keys_filter_matches_a_scan() {
        let mut r = RecentKeys::default();
        let mut all = Vec::new();
        let mut x = 0x1234_5678u32;
        for i in 0..3000u32 {
            // Every third key repeats an older one; the others are pseudo-random.
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let k = if i % 3 == 0 && !all.is_empty() {
                all[(x as usize) % all.len()]
            } else {
                x >> 4
            };
            r.push(k);
            all.push(k);
            let window = &all[all.len().saturating_sub(QUARANTINE)..];
            for probe in [k, k ^ 1, x, all[(x as usize >> 7) % all.len()]] {
                assert_eq!(r.contains(probe), window.contains(&probe), "key {probe:#x}");
            }
        }
    }

    #[test]
    fn contiguous_region_is_one_entry() {
        let t = plan(
            &[PhysChunk {
                bus: 0x4020_0000,
                len: 2 << 20,
            }],
            0x4020_0000,
        )
        .unwrap();
        assert_eq!(t.entries, alloc::vec![0x4020_0000]);
        assert_eq!(t.page_shift, 21);
        let t = plan(
            &[PhysChunk {
                bus: 0x1_0000_0000,
                len: 64 << 20,
            }],
            0x1_0000_0000,
        )
        .unwrap();
        assert_eq!(t.entries.len(), 1);
        assert_eq!(t.page_shift, 26);
        let t = plan(
            &[PhysChunk {
                bus: 0x4000_0000,
                len: 1 << 30,
            }],
            0x4000_0000,
        )
        .unwrap();
        assert_eq!((t.entries.len(), t.page_shift), (1, 30));
        // 4 GiB contiguous: four 1 GiB entries.
        let t = plan(
            &[PhysChunk {
                bus: 0x1_0000_0000,
                len: 4 << 30,
            }],
            0x1_0000_0000,
        )
        .unwrap();
        assert_eq!((t.entries.len(), t.page_shift), (4, 30));
    }

    #[test]
    fn huge_pages_are_one_entry_each() {
        let pages: Vec<PhysChunk> = [0x8000_0000u64, 0x4000_0000, 0x1_2340_0000]
            .iter()
            .map(|&b| PhysChunk {
                bus: b,
                len: 2 << 20,
            })
            .collect();
        let t = plan(&pages, 0x7f00_0000_0000).unwrap();
        assert_eq!(t.page_shift, 21);
        assert_eq!(
            t.entries,
            alloc::vec![0x8000_0000, 0x4000_0000, 0x1_2340_0000]
        );
    }

    #[test]
    fn small_pages_and_offsets() {
        // Two 4 KiB pages, scattered, region starting 0x100 into the first.
        let t = plan(
            &[
                PhysChunk {
                    bus: 0x5100,
                    len: 0xf00,
                },
                PhysChunk {
                    bus: 0x9000,
                    len: 0x800,
                },
            ],
            0x1100,
        )
        .unwrap();
        assert_eq!(t.page_shift, 12);
        assert_eq!(t.entries, alloc::vec![0x5000, 0x9000]);
        // Mismatched offsets cannot be translated.
        assert!(plan(
            &[PhysChunk {
                bus: 0x5100,
                len: 0x100
            }],
            0x1200
        )
        .is_err());
        // A chunk boundary inside a page cannot either.
        assert!(plan(
            &[
                PhysChunk {
                    bus: 0x5000,
                    len: 0x800
                },
                PhysChunk {
                    bus: 0x9800,
                    len: 0x800
                }
            ],
            0
        )
        .is_err());
    }

    #[test]
    fn absurd_plans_are_refused_before_allocating() {
        // A 2^62-byte chunk in 4 KiB pages would be a 2^50-entry list: refused, not allocated.
        let r = plan(
            &[PhysChunk {
                bus: 0x1000,
                len: 1 << 62,
            }],
            0x1000,
        );
        assert!(
            matches!(
                r,
                Err(crate::Error::Invalid(
                    InvalidInput::TooManyTranslations { .. }
                ))
            ),
            "{r:?}"
        );
        // A chunk in the top pages of the bus address space: planned without overflow.
        let t = plan(
            &[PhysChunk {
                bus: u64::MAX - 0x17ff,
                len: 0x1100,
            }],
            0x1800,
        )
        .unwrap();
        assert_eq!(t.entries, alloc::vec![u64::MAX - 0x1fff, u64::MAX - 0xfff]);
        // A chunk that wraps the bus address space cannot be translated.
        assert!(plan(
            &[PhysChunk {
                bus: u64::MAX - 0xfff,
                len: 0x2000,
            }],
            0
        )
        .is_err());
    }

    /// The one-pass planner picks what trying every page size picks (fewest entries, the
    /// smallest size on a tie), on random layouts of mixed page sizes and offsets.
    #[test]
    fn planner_matches_trying_every_size() {
        let brute = |c: &[PhysChunk], iova: u64| {
            let mut best: Option<(u64, u32)> = None;
            for s in MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT {
                if let Some(n) = count_at(c, iova, s) {
                    if best.is_none_or(|(bn, _)| n < bn) {
                        best = Some((n, s));
                    }
                }
            }
            best
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..800 {
            let n = 1 + (rnd() % 5) as usize;
            let mut chunks = Vec::new();
            for _ in 0..n {
                let shift = [12u64, 16, 21, 30][(rnd() % 4) as usize];
                let pages = 1 + rnd() % 3;
                let bus = (rnd() % (1 << 40)) & !((1 << shift) - 1);
                chunks.push(PhysChunk {
                    bus,
                    len: pages << shift,
                });
            }
            // Sometimes an unaligned head or tail.
            if rnd() % 3 == 0 {
                let off = rnd() % chunks[0].len.min(4096);
                chunks[0].bus += off;
                chunks[0].len -= off;
            }
            if rnd() % 3 == 0 {
                let l = chunks.len() - 1;
                let cut = rnd() % chunks[l].len.min(4096);
                chunks[l].len -= cut;
            }
            let iova = match rnd() % 3 {
                0 => chunks[0].bus,
                1 => (rnd() % (1 << 45)) & !((1 << 30) - 1) | (chunks[0].bus & ((1 << 30) - 1)),
                _ => rnd() % (1 << 45),
            };
            let got = plan(&chunks, iova)
                .ok()
                .map(|t| (t.entries.len() as u64, t.page_shift));
            assert_eq!(got, brute(&chunks, iova), "{chunks:x?} at {iova:#x}");
        }
    }

    #[test]
    fn long_lists_and_odd_iovas_become_klm_segments() {
        // Fits one command at a matching IOVA: direct.
        let c: Vec<PhysChunk> = (0..MAX_MTT_PER_MKEY as u64)
            .map(|i| PhysChunk {
                bus: (i * 2 + 1) << 12,
                len: 4096,
            })
            .collect();
        let p = plan_reg(&c, 0x10_0000, 16).unwrap();
        assert!(p.segments.is_empty());
        assert_eq!(p.mtt_va, 0x10_0000);
        // One page more: two MTT keys, split at a page boundary, covering the region exactly.
        let mut c2 = c.clone();
        c2.push(PhysChunk {
            bus: 1 << 40,
            len: 0x800,
        });
        let p = plan_reg(&c2, 0x10_0000, 16).unwrap();
        let ps = 4096u64;
        assert_eq!(
            p.segments,
            alloc::vec![
                (0x10_0000, MAX_MTT_PER_MKEY as u64 * ps, 0, MAX_MTT_PER_MKEY),
                (
                    0x10_0000 + MAX_MTT_PER_MKEY as u64 * ps,
                    0x800,
                    MAX_MTT_PER_MKEY,
                    1
                ),
            ]
        );
        // More segments than 1 << log_max_klm_list_size: refused before anything is sent.
        assert!(matches!(
            plan_reg(&c2, 0x10_0000, 0),
            Err(crate::Error::Invalid(
                InvalidInput::TooManyTranslations { .. }
            ))
        ));
        // 1 GiB pages at an IOVA with another page offset: planned at the memory's own
        // address, and no KLM entry above 2 GiB (two 1 GiB pages each).
        let g: Vec<PhysChunk> = (0..5u64)
            .map(|i| PhysChunk {
                bus: (8 + 2 * i) << 30,
                len: 1 << 30,
            })
            .collect();
        let p = plan_reg(&g, 0x1234, 16).unwrap();
        assert_eq!((p.mtt_va, p.tr.page_shift), (8 << 30, 30));
        let lens: Vec<u64> = p.segments.iter().map(|s| s.1).collect();
        assert_eq!(lens, alloc::vec![2 << 30, 2 << 30, 1 << 30]);
        assert!(lens.iter().all(|&l| l <= MAX_KLM_BYTE_COUNT));
        // A layout no IOVA fixes (a chunk boundary inside a page) stays an error.
        let bad = [
            PhysChunk {
                bus: 0x1000,
                len: 0x800,
            },
            PhysChunk {
                bus: 0x3800,
                len: 0x800,
            },
        ];
        assert_eq!(
            plan_reg(&bad, 0x1000, 16),
            Err(InvalidInput::PageList.into())
        );
    }

    #[test]
    fn access_rules() {
        assert!(Access::REMOTE_WRITE.validate().is_err());
        assert!(Access::REMOTE_ATOMIC.validate().is_err());
        assert!((Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .validate()
            .is_ok());
        assert!(Access::REMOTE_READ.validate().is_ok());
        assert!(Access(0x100).validate().is_err());
        // Optional flags pass (a device that lacks them ignores them); bits above the
        // optional range do not.
        assert!((Access::LOCAL_WRITE | Access::RELAXED_ORDERING)
            .validate()
            .is_ok());
        assert!(Access(1 << 29).validate().is_ok());
        assert!(Access(1 << 30).validate().is_err());
        assert_eq!(check_request(1 << 20, 0, Access::NONE, 20), Ok(()));
        assert_eq!(
            check_request((1 << 20) + 1, 0, Access::NONE, 20),
            Err(InvalidInput::MrTooLarge {
                len: (1 << 20) + 1,
                max: 1 << 20
            }
            .into())
        );
        assert_eq!(check_request(u64::MAX, 0, Access::NONE, 64), Ok(()));
        assert_eq!(
            check_request(0, 0, Access::NONE, 0),
            Err(InvalidInput::ZeroLength.into())
        );
        assert_eq!(
            check_request(16, u64::MAX - 4, Access::NONE, 0),
            Err(InvalidInput::LengthOverflow.into())
        );
    }
}
