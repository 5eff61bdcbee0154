//! UMR (user-mode memory registration) WQEs: opcode `MLX5_OPCODE_UMR` (0x25) on a QP created
//! with `qpc.fre` (fast registration enable; Linux ib/qp.c `create_kernel_qp` sets it for every
//! kernel QP, the UMR QP of ib/umr.c `mlx5r_umr_resource_init` among them).
//!
//! Layout (Linux ib/umr.c `mlx5r_umr_post_send`, `struct mlx5r_umr_wqe`): ctrl segment whose
//! `imm` names the key to modify (`mlx5r_begin_wqe(..., cpu_to_be32(mkey), ...)`), then
//! `mlx5_wqe_umr_ctrl_seg` (48 bytes), then the mkey segment (an `mlx5_ifc_mkc_bits`, 64
//! bytes), then the translation: inline entries (`MLX5_UMR_INLINE`) or one data segment
//! pointing at them (`mlx5r_umr_set_update_xlt_data_seg`), `xlt_octowords` 16-byte units
//! written at `xlt_offset` octowords into the key's list (`MLX5_UMR_TRANSLATION_OFFSET_EN`;
//! `mlx5r_umr_update_offset`). `mkey_mask` says which mkey-segment fields are written
//! (`MLX5_MKEY_MASK_*`).
//!
//! The model applies a UMR atomically: every check runs against the key as it is and the
//! WQE's new values, and the key changes (in place, no copy) only when all pass. Checks:
//! - the QP has `fre` (model choice: a UMR on any other QP is a local QP operation error);
//! - the key exists, carries the variant the ctrl `imm` names, and was created with
//!   `umr_en` (model choice: otherwise a local protection error);
//! - `CHECK_FREE` ("fail if free") / `CHECK_NOT_FREE` ("fail if not free"), Linux umr.c
//!   `mlx5r_umr_set_update_xlt_ctrl_seg`;
//! - mask bits the model does not implement (relaxed ordering, BSF, signature, ...) are
//!   refused (model choice; Linux `umr_check_mkey_mask` refuses those it lacks caps for);
//! - a new PD must exist; the translation must fit in `translations_octword_size` (the
//!   room given at CREATE_MKEY); MTT entries must be aligned to the (new) page size;
//! - a key left enabled (not free) must have every page of `start..start+len` present.
//!
//! Translation updates are modelled for MTT keys (what Linux `mlx5r_umr_update_mr_pas`
//! loads); a UMR carrying translation for a KLMS or PA key is refused (model choice: not
//! modelled).

use mlx5_prm::{cqe, mkc, mkey, wqe};

use crate::be::{be16, be32, be64};
use crate::datapath::vendor;
use crate::datapath::Dp;
use crate::objects::mr::{
    Access, KeyUser, Mkey, MttEntry, Translation, ANY_QPN, MAX_MTT_PAGE_SHIFT, MIN_MTT_PAGE_SHIFT,
};

/// Vendor syndromes of failed UMR WQEs (the model's own, like [`crate::datapath::vendor`]).
pub mod umr_vendor {
    /// The QP was not created with `qpc.fre`.
    pub const NOT_FRE: u8 = 0x40;
    /// The WQE is shorter than its segments, or its sizes are inconsistent.
    pub const MALFORMED: u8 = 0x41;
    /// The key named in the ctrl `imm` does not exist or its variant differs.
    pub const BAD_KEY: u8 = 0x42;
    /// The key was not created with `umr_en`.
    pub const NOT_UMR_EN: u8 = 0x43;
    /// `CHECK_FREE` on a free key, or `CHECK_NOT_FREE` on a key in use.
    pub const FREE_STATE: u8 = 0x44;
    /// A mask bit the model does not implement.
    pub const UNSUPPORTED_MASK: u8 = 0x45;
    /// The new PD does not exist.
    pub const BAD_PD: u8 = 0x46;
    /// Translation past `translations_octword_size`, or a bad page size.
    pub const XLT_RANGE: u8 = 0x47;
    /// An MTT entry not aligned to the page size.
    pub const XLT_MISALIGNED: u8 = 0x48;
    /// The translation could not be read (pointer lkey refused, or DMA failure).
    pub const XLT_READ: u8 = 0x49;
    /// The key would be enabled with pages of its range not present.
    pub const XLT_INCOMPLETE: u8 = 0x4a;
    /// Translation for a key that is not MTT.
    pub const XLT_MODE: u8 = 0x4b;
}

/// The mask bits the model implements.
const SUPPORTED_MASK: u64 = {
    use wqe::umr_ctrl_seg::mask::*;
    LEN | PAGE_SIZE | START_ADDR | PD | EN_RINVAL | KEY | QPN | LR | LW | RR | RW | A | FREE
};

pub(crate) type UmrErr = (u8, u8);

/// The fixed part of a UMR WQE: ctrl segment (the key in `imm`), UMR ctrl segment, mkey
/// context segment, then `size - data_at` bytes of data (Linux ib/umr.c
/// `mlx5r_umr_post_send`; rdma-core qp.c `set_umr_*`). Shared by the key UMRs here and the
/// window UMRs of [`crate::objects::mw`].
pub(crate) struct UmrHead<'a> {
    /// The mkey the WQE names (ctrl segment `imm`).
    pub key: u32,
    /// The UMR ctrl segment.
    pub u: &'a [u8],
    /// The mkey context segment.
    pub seg: &'a [u8],
    /// `umr_ctrl_seg.flags`.
    pub flags: u8,
    /// `umr_ctrl_seg.klm_octowords`.
    pub octowords: usize,
    /// `umr_ctrl_seg.mkey_mask`.
    pub mask: u64,
    /// Where the data starts, and the WQE's size from its `ds`.
    pub data_at: usize,
    pub size: usize,
}

/// Parses [`UmrHead`]; `None` when `ds` leaves no room for the three segments or overruns `raw`.
pub(crate) fn parse_head(raw: &[u8]) -> Option<UmrHead<'_>> {
    let ds = (raw.get(wqe::ctrl_seg::QPN_DS + 3).copied().unwrap_or(0) as u32 & wqe::CTRL_DS_MASK)
        as usize;
    let size = ds * wqe::SEND_WQE_DS;
    let umr_at = wqe::ctrl_seg::SIZE;
    let mkc_at = umr_at + wqe::umr_ctrl_seg::SIZE;
    let data_at = mkc_at + mkc::BYTES;
    if size < data_at || raw.len() < size {
        return None;
    }
    let u = &raw[umr_at..mkc_at];
    Some(UmrHead {
        key: be32(raw, wqe::ctrl_seg::IMM),
        u,
        seg: &raw[mkc_at..data_at],
        flags: u[wqe::umr_ctrl_seg::FLAGS],
        octowords: be16(u, wqe::umr_ctrl_seg::KLM_OCTOWORDS) as usize,
        mask: be64(u, wqe::umr_ctrl_seg::MKEY_MASK),
        data_at,
        size,
    })
}

/// `MLX5_GET` of a 1..=32-bit field of an mkey segment: inlined, so that with a constant
/// field the shape and bounds checks fold away (0 for a field that does not fit, which no
/// mkc field is).
#[inline(always)]
fn field(f: mlx5_prm::Field, seg: &[u8; mkc::BYTES]) -> u32 {
    f.get(seg).unwrap_or(0)
}

thread_local! {
    /// Staging for translations read by pointer, reused across WQEs (no allocation per UMR
    /// once it has grown to the largest piece).
    static XLT_SCRATCH: core::cell::Cell<Vec<u8>> = const { core::cell::Cell::new(Vec::new()) };
}

/// [`XLT_SCRATCH`] taken for one WQE, given back when dropped.
struct Scratch(Vec<u8>);

impl Scratch {
    fn take() -> Scratch {
        Scratch(XLT_SCRATCH.with(|c| c.take()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let v = core::mem::take(&mut self.0);
        XLT_SCRATCH.with(|c| c.set(v));
    }
}

/// The key checks made before anything is read: the key exists with the variant the ctrl
/// `imm` names, has `umr_en`, and passes the free-state check of `flags`.
fn check_key(m: Option<&Mkey>, key: u32, flags: u8) -> Result<(), UmrErr> {
    let prot = |v: u8| (cqe::syndrome::LOCAL_PROT_ERR, v);
    let m = m.ok_or(prot(umr_vendor::BAD_KEY))?;
    if m.variant != (key & 0xff) as u8 {
        return Err(prot(umr_vendor::BAD_KEY));
    }
    if !m.umr_en {
        return Err(prot(umr_vendor::NOT_UMR_EN));
    }
    match flags & wqe::umr_ctrl_seg::FLAG_CHECK_MASK {
        wqe::umr_ctrl_seg::FLAG_CHECK_FREE if m.free => Err(prot(umr_vendor::FREE_STATE)),
        wqe::umr_ctrl_seg::FLAG_CHECK_NOT_FREE if !m.free => Err(prot(umr_vendor::FREE_STATE)),
        _ => Ok(()),
    }
}

/// Executes the UMR WQE `raw` (ctrl segment first, `ds * 16` bytes) posted on QP `qpn`: a
/// window operation ([`crate::datapath::mw::execute`]) when the key it names is a memory window, else a
/// key update. `Ok` completes it successfully; `Err((cqe syndrome, vendor syndrome))` is an
/// error CQE.
///
/// Every check runs against the key as it is and the WQE's new values; the key is written
/// (in place) only once all have passed, so a refused UMR leaves it unchanged.
///
/// The QP is the caller's, looked up already: `fre` and `qp_pd` are its `qpc.fre` and PD
/// (the send queue loop holds them; the QP is not looked up a second time). The key is looked
/// up once, for the dispatch and the update both (a translation by pointer, read through
/// another key first, looks it up again).
///
/// Inlined into the send queue loop, its one caller on the data path (with the key update
/// it inlines in turn, the UMR's fields stay in registers from the fetch to the CQE).
#[inline(always)]
pub(crate) fn execute(
    hca: &mut Dp<'_>,
    qpn: u32,
    fre: bool,
    qp_pd: u32,
    raw: &[u8],
) -> Result<(), UmrErr> {
    let malformed = (cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED);
    let index = mkey::index(be32(raw, wqe::ctrl_seg::IMM));
    let m = hca.objects.mkeys.keys.get_mut(&index);
    if m.as_deref().is_some_and(crate::objects::mw::is_window) {
        return crate::datapath::mw::execute(hca, qpn, raw);
    }
    if !fre {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::NOT_FRE));
    }
    let h = parse_head(raw).ok_or(malformed)?;
    let offset = if h.flags & wqe::umr_ctrl_seg::FLAG_TRANSLATION_OFFSET_EN != 0 {
        (be32(h.u, wqe::umr_ctrl_seg::XLT_OFFSET_47_16) as u64) << 16
            | be16(h.u, wqe::umr_ctrl_seg::TRANSLATION_OFFSET) as u64
    } else {
        0
    };
    if h.mask & !SUPPORTED_MASK != 0 {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::UNSUPPORTED_MASK));
    }
    let n = h.octowords * 16;
    if n > 0 && h.flags & wqe::umr_ctrl_seg::FLAG_INLINE == 0 {
        // (Parses the head again: the head stays in registers here.)
        return by_pointer(hca, qpn, qp_pd, offset, raw);
    }
    check_key(m.as_deref(), h.key, h.flags)?;
    let Some(m) = m else {
        return Err((cqe::syndrome::LOCAL_PROT_ERR, umr_vendor::BAD_KEY));
    };
    if h.data_at + n > h.size {
        return Err(malformed);
    }
    let list = raw.get(h.data_at..h.data_at + n).ok_or(malformed)?;
    apply(m, &hca.objects.pds, &hca.objects.qps, &h, offset, list)
}

/// [`execute`] of a UMR whose `n = octowords * 16` bytes of translation are read by pointer:
/// one data segment (byte_count, lkey, addr) whose lkey is checked for local read in the UMR
/// QP's PD. The key checks come first, then the read, then the update.
#[cold]
#[inline(never)]
fn by_pointer(
    hca: &mut Dp<'_>,
    qpn: u32,
    qp_pd: u32,
    offset: u64,
    raw: &[u8],
) -> Result<(), UmrErr> {
    let malformed = (cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED);
    let h = &parse_head(raw).ok_or(malformed)?;
    let prot = |v: u8| (cqe::syndrome::LOCAL_PROT_ERR, v);
    let index = mkey::index(h.key);
    let n = h.octowords * 16;
    check_key(hca.objects.mkeys.keys.get(&index), h.key, h.flags)?;
    if h.size < h.data_at + wqe::data_seg::SIZE {
        return Err(malformed);
    }
    let bc = be32(raw, h.data_at + wqe::data_seg::BYTE_COUNT) as u64;
    let lkey = be32(raw, h.data_at + wqe::data_seg::LKEY);
    let addr = be64(raw, h.data_at + wqe::data_seg::ADDR);
    if bc < n as u64 {
        return Err(malformed);
    }
    let mut s = Scratch::take();
    s.0.clear();
    s.0.resize(n, 0);
    let user = KeyUser { pd: qp_pd, qpn };
    let r = hca
        .objects
        .mkeys
        .resolve(lkey, addr, n as u64, Access::LOCAL_READ, user)
        .map_err(|_| prot(umr_vendor::XLT_READ))?;
    r.read(&**hca.mem, &mut s.0)
        .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
    let m = hca.objects.mkeys.keys.get_mut(&index);
    check_key(m.as_deref(), h.key, h.flags)?;
    let Some(m) = m else {
        return Err(prot(umr_vendor::BAD_KEY));
    };
    apply(m, &hca.objects.pds, &hca.objects.qps, h, offset, &s.0[..n])
}

/// The update of key `m` (checked by [`check_key`]) by the UMR `h`, whose translation, if any,
/// is `list` (big-endian MTT entries, `mlx5_ifc_mtt_bits`) to be written `offset` octowords
/// into the key's list. Checks everything first; changes `m` only when all passed. Inlined
/// into [`execute`] (the header it reads stays in registers there).
#[inline(always)]
fn apply(
    m: &mut Mkey,
    pds: &crate::objects::pd::PdTable,
    qps: &crate::objects::qp::QpTable,
    h: &UmrHead<'_>,
    offset: u64,
    list: &[u8],
) -> Result<(), UmrErr> {
    let prot = |v: u8| (cqe::syndrome::LOCAL_PROT_ERR, v);
    let malformed = (cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED);
    // The mkey segment's fields, read with constant offsets (the segment is 64 bytes).
    let seg: &[u8; mkc::BYTES] = h.seg.try_into().map_err(|_| malformed)?;
    let get = field;
    let mask = h.mask;

    // The mkey segment's fields, as the mask selects them.
    use wqe::umr_ctrl_seg::mask;
    let pd = if mask & mask::PD != 0 {
        let pd = get(mkc::PD, seg);
        if !pds.contains(pd) {
            return Err(prot(umr_vendor::BAD_PD));
        }
        pd
    } else {
        m.pd
    };
    let new_qpn = if mask & mask::QPN != 0 {
        let qpn = get(mkc::QPN, seg);
        if qpn != ANY_QPN && !qps.contains(qpn) {
            return Err(prot(umr_vendor::BAD_PD));
        }
        qpn
    } else {
        m.qpn
    };
    let variant = if mask & mask::KEY != 0 {
        get(mkc::MKEY_7_0, seg) as u8
    } else {
        m.variant
    };
    // The access bits: mask bits LR, LW, RR, RW, A are consecutive, in the order of the
    // `Access` bits (checked at compile time below); the selected ones take the segment's.
    const _: () = assert!(
        mask::LW == mask::LR << 1
            && mask::RR == mask::LR << 2
            && mask::RW == mask::LR << 3
            && mask::A == mask::LR << 4
            && Access::LOCAL_READ.0 == 1
            && Access::LOCAL_WRITE.0 == 2
            && Access::REMOTE_READ.0 == 4
            && Access::REMOTE_WRITE.0 == 8
            && Access::REMOTE_ATOMIC.0 == 16
    );
    let sel = ((mask / mask::LR) & 0x1f) as u8;
    let access = if sel != 0 {
        let seg_bits = (get(mkc::LR, seg) != 0) as u8
            | ((get(mkc::LW, seg) != 0) as u8) << 1
            | ((get(mkc::RR, seg) != 0) as u8) << 2
            | ((get(mkc::RW, seg) != 0) as u8) << 3
            | ((get(mkc::A, seg) != 0) as u8) << 4;
        Access((m.access.0 & !sel) | (seg_bits & sel))
    } else {
        m.access
    };
    let start = if mask & mask::START_ADDR != 0 {
        mkc::START_ADDR.get64(seg).unwrap_or(0)
    } else {
        m.start
    };
    let len = if mask & mask::LEN != 0 {
        if get(mkc::LENGTH64, seg) != 0 {
            1u128 << 64
        } else {
            mkc::LEN.get64(seg).unwrap_or(0) as u128
        }
    } else {
        m.len
    };
    if start as u128 + len > 1u128 << 64 {
        return Err(prot(umr_vendor::XLT_RANGE));
    }
    let free = if mask & mask::FREE != 0 {
        get(mkc::FREE, seg) != 0
    } else {
        m.free
    };
    let new_shift = (mask & mask::PAGE_SIZE != 0).then(|| get(mkc::LOG_PAGE_SIZE, seg));
    let room = m.xlt_octowords as u64 * 2;
    match &mut m.translation {
        Translation::Mtt {
            page_shift,
            entries,
        } => {
            let shift = match new_shift {
                Some(s) if !(MIN_MTT_PAGE_SHIFT..=MAX_MTT_PAGE_SHIFT).contains(&s) => {
                    return Err(prot(umr_vendor::XLT_RANGE));
                }
                Some(s) => s,
                None => *page_shift,
            };
            // Entries `first..first + count` are replaced by `list`'s (whole entries: the
            // list is whole octowords).
            let (ents, _) = list.as_chunks::<{ mkey::MTT_ENTRY_SIZE }>();
            let first = (offset * 2) as usize;
            let count = ents.len();
            if count > 0 && (first + count) as u64 > room.max(entries.len() as u64) {
                return Err(prot(umr_vendor::XLT_RANGE));
            }
            let written = first..first + count;
            // Every entry of the key as it would be (the kept ones and `list`), aligned to
            // the (new) page size.
            let page = 1u64 << shift;
            let misaligned = |e: MttEntry| e.addr() & (page - 1) != 0;
            // The kept entries of `r` (clamped to the key: with no `list`, `first` may lie
            // past its end, and then every entry is kept).
            let n_entries = entries.len();
            let kept = |r: core::ops::Range<usize>| {
                let lo = r.start.min(n_entries);
                lo..r.end.min(n_entries).max(lo)
            };
            // A key left enabled has every page of `start..start + len` present: `pages`
            // entries from the first (0 when the key is left free or empty).
            let pages = if !free && len > 0 {
                // The last byte: `start + len <= 2^64` (checked above), so it fits.
                let last = start + (len - 1) as u64;
                ((last >> shift) - (start >> shift) + 1) as usize
            } else {
                0
            };
            // `list` in one pass: the union of its page addresses (an address misaligned to
            // the page size leaves low bits in it), and whether one of its first
            // `pages - first` entries (those inside the range) is not present. Model choice:
            // an entry loaded by UMR without rd_en and wr_en (`MLX5_IB_MTT_PRESENT`, which
            // Linux sets on every entry it loads) is not present.
            let need = pages.saturating_sub(first).min(count);
            let addrs = ents.iter().fold(0, |a, e| a | u64::from_be_bytes(*e)) & !0xff;
            let absent = ents[..need]
                .iter()
                .any(|e| u64::from_be_bytes(*e) & mkey::MTT_PRESENT == 0);
            // The kept entries are aligned to the current page size: CREATE_MKEY refuses a
            // misaligned entry (the room beyond is zero) and every UMR leaves them all aligned
            // (this check). So they need a look only when the page size grows.
            let kept_bad = shift > *page_shift
                && (entries[kept(0..first)].iter().any(|&e| misaligned(e))
                    || entries[kept(written.end..n_entries)]
                        .iter()
                        .any(|&e| misaligned(e)));
            if kept_bad || addrs & (page - 1) != 0 {
                return Err(prot(umr_vendor::XLT_MISALIGNED));
            }
            if pages > 0 {
                let present = |e: &MttEntry| e.read() || e.write();
                let incomplete = pages > entries.len()
                    || !entries[kept(0..first.min(pages))].iter().all(present)
                    || !entries[kept(written.end..pages)].iter().all(present)
                    || absent;
                if incomplete {
                    return Err(prot(umr_vendor::XLT_INCOMPLETE));
                }
            }
            // Every check passed: the key changes.
            for (slot, e) in entries[written].iter_mut().zip(ents) {
                let raw = u64::from_be_bytes(*e);
                *slot = MttEntry::new(
                    raw & !0xff,
                    raw & mkey::MTT_READ != 0,
                    raw & mkey::MTT_WRITE != 0,
                );
            }
            *page_shift = shift;
        }
        _ if !list.is_empty() || new_shift.is_some() => {
            return Err(prot(umr_vendor::XLT_MODE));
        }
        _ => {}
    }
    m.pd = pd;
    m.qpn = new_qpn;
    m.variant = variant;
    m.access = access;
    m.start = start;
    m.len = len;
    m.free = free;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::init_seg::HealthState;
    use crate::front::pci::Intx;
    use crate::hca::Hca;
    use crate::memory::RegionMemory;
    use std::sync::Arc;
    use wqe::umr_ctrl_seg::mask as mk;

    const INDEX: u32 = 0x40;
    const VARIANT: u8 = 0x11;
    const KEY: u32 = INDEX << 8 | VARIANT as u32;
    const QPN: u32 = 0x99;

    /// An HCA with one PD (returned) and a free, UMR-enabled MTT key of 4 entries' room.
    fn hca_with_key() -> (Hca, u32) {
        let mut hca = Hca::new(
            Arc::new(RegionMemory::new()),
            Intx::new(),
            Arc::new(HealthState::new()),
        );
        let mut out = [0u8; mlx5_prm::alloc_pd_out::BYTES];
        let dp = hca.dp();
        crate::objects::pd::cmd_alloc_pd(&dp.control.caps, dp.objects, &[], &mut out).unwrap();
        let pd = mlx5_prm::alloc_pd_out::PD.get(&out).unwrap();
        let m = Mkey {
            index: INDEX,
            variant: VARIANT,
            pd,
            qpn: ANY_QPN,
            access: Access::LOCAL_READ.union(Access::REMOTE_WRITE),
            start: 0,
            len: 0,
            free: true,
            umr_en: true,
            en_rinval: false,
            xlt_octowords: 2,
            translation: Translation::Mtt {
                page_shift: 12,
                entries: vec![MttEntry(0); 4],
            },
            mkc: [0; mkc::BYTES],
        };
        hca.dp().objects.mkeys.keys.insert(INDEX, m);
        (hca, pd)
    }

    /// An inline UMR WQE on key [`KEY`]: mkey `mask`, segment fields from `seg`, `entries`
    /// (raw big-endian MTT words, padded to whole octowords).
    fn umr_wqe(mask: u64, seg: impl Fn(&mut [u8]), entries: &[u64]) -> Vec<u8> {
        let oct = entries.len().div_ceil(2);
        let size = 128 + oct * 16;
        let mut w = vec![0u8; size];
        w[3] = wqe::opcode::UMR;
        w[4..8].copy_from_slice(&(QPN << 8 | (size / 16) as u32).to_be_bytes());
        w[12..16].copy_from_slice(&KEY.to_be_bytes());
        let u = &mut w[16..64];
        u[0] = wqe::umr_ctrl_seg::FLAG_INLINE;
        u[4..6].copy_from_slice(&(oct as u16).to_be_bytes());
        u[8..16].copy_from_slice(&mask.to_be_bytes());
        seg(&mut w[64..128]);
        for (i, e) in entries.iter().enumerate() {
            w[128 + i * 8..136 + i * 8].copy_from_slice(&e.to_be_bytes());
        }
        w
    }

    fn key(hca: &Hca) -> &Mkey {
        hca.mkeys().by_index(INDEX).unwrap()
    }

    fn enable(pd: u32, start: u64, len: u64) -> impl Fn(&mut [u8]) {
        move |s: &mut [u8]| {
            mkc::PD.set(s, pd).unwrap();
            mkc::START_ADDR.set64(s, start).unwrap();
            mkc::LEN.set64(s, len).unwrap();
            mkc::LOG_PAGE_SIZE.set(s, 12).unwrap();
            mkc::MKEY_7_0.set(s, VARIANT as u32).unwrap();
        }
    }

    const ENABLE: u64 = mk::FREE | mk::PD | mk::START_ADDR | mk::LEN | mk::PAGE_SIZE | mk::KEY;
    const P: u64 = mkey::MTT_PRESENT;

    #[test]
    fn access_mask_changes_only_the_selected_rights() {
        let (mut hca, pd) = hca_with_key();
        // LW and RW selected: LW set, RW cleared; LR and the rest kept.
        let w = umr_wqe(
            ENABLE | mk::LW | mk::RW,
            |s| {
                enable(pd, 0x1000, 0x1000)(s);
                mkc::LW.set(s, 1).unwrap();
                mkc::RR.set(s, 1).unwrap(); // not selected: ignored
            },
            &[0x5000 | P],
        );
        assert_eq!(execute(&mut hca.dp(), QPN, true, pd, &w), Ok(()));
        let m = key(&hca);
        assert_eq!(m.access, Access::LOCAL_READ.union(Access::LOCAL_WRITE));
        assert!(!m.free);
        assert_eq!((m.start, m.len), (0x1000, 0x1000));
    }

    #[test]
    fn each_translation_entry_is_checked_and_a_refused_umr_changes_nothing() {
        let prot = |v| Err((cqe::syndrome::LOCAL_PROT_ERR, v));
        let (mut hca, pd) = hca_with_key();
        let before = format!("{:?}", key(&hca));
        // The second entry misaligned to 4 KiB (the first is fine).
        let w = umr_wqe(ENABLE, enable(pd, 0, 0x2000), &[0x5000 | P, 0x6800 | P]);
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &w),
            prot(umr_vendor::XLT_MISALIGNED)
        );
        // The second entry, inside the range, not present.
        let w = umr_wqe(ENABLE, enable(pd, 0, 0x2000), &[0x5000 | P, 0x6000]);
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &w),
            prot(umr_vendor::XLT_INCOMPLETE)
        );
        // The range reaching a third page nothing loads.
        let w = umr_wqe(ENABLE, enable(pd, 0, 0x2001), &[0x5000 | P, 0x6000 | P]);
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &w),
            prot(umr_vendor::XLT_INCOMPLETE)
        );
        // More entries than the key's room (2 octowords = 4 entries).
        let w = umr_wqe(ENABLE, enable(pd, 0, 0x1000), &[0x5000 | P; 6]);
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &w),
            prot(umr_vendor::XLT_RANGE)
        );
        assert_eq!(format!("{:?}", key(&hca)), before);
        // An entry past the range may be absent.
        let w = umr_wqe(ENABLE, enable(pd, 0, 0x1000), &[0x5000 | P, 0x6000]);
        assert_eq!(execute(&mut hca.dp(), QPN, true, pd, &w), Ok(()));
        let Translation::Mtt { entries, .. } = &key(&hca).translation else {
            panic!("not MTT");
        };
        assert!(entries[0].read() && entries[0].write() && entries[0].addr() == 0x5000);
        assert!(!entries[1].read() && !entries[1].write());
    }

    #[test]
    fn malformed_and_misdirected_umrs_keep_their_syndromes() {
        let (mut hca, pd) = hca_with_key();
        let ok = umr_wqe(ENABLE, enable(pd, 0, 0x1000), &[0x5000 | P]);
        // Not a fast-registration QP (checked before the WQE is parsed).
        assert_eq!(
            execute(&mut hca.dp(), QPN, false, pd, &ok[..16]),
            Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::NOT_FRE))
        );
        // `ds` shorter than the three segments.
        let mut short = ok.clone();
        short[7] = 4;
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &short),
            Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED))
        );
        // Inline entries past the WQE's end.
        let mut over = ok.clone();
        over[16 + 4..16 + 6].copy_from_slice(&2u16.to_be_bytes());
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &over),
            Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED))
        );
        // A mask bit the model does not implement.
        let bsf = umr_wqe(ENABLE | 1 << 2, enable(pd, 0, 0x1000), &[0x5000 | P]);
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &bsf),
            Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::UNSUPPORTED_MASK))
        );
        // Another variant of the key.
        let mut other = ok.clone();
        other[15] ^= 1;
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &other),
            Err((cqe::syndrome::LOCAL_PROT_ERR, umr_vendor::BAD_KEY))
        );
        // A PD that does not exist.
        let bad_pd = umr_wqe(ENABLE, enable(pd + 1, 0, 0x1000), &[0x5000 | P]);
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &bad_pd),
            Err((cqe::syndrome::LOCAL_PROT_ERR, umr_vendor::BAD_PD))
        );
        assert!(key(&hca).free);
        // A translation for a key that is not MTT.
        if let Some(m) = hca.dp().objects.mkeys.keys.get_mut(&INDEX) {
            m.translation = Translation::Pa;
        }
        assert_eq!(
            execute(&mut hca.dp(), QPN, true, pd, &ok),
            Err((cqe::syndrome::LOCAL_PROT_ERR, umr_vendor::XLT_MODE))
        );
        // The well-formed one passes on the MTT key.
        if let Some(m) = hca.dp().objects.mkeys.keys.get_mut(&INDEX) {
            m.translation = Translation::Mtt {
                page_shift: 12,
                entries: vec![MttEntry(0); 4],
            };
        }
        assert_eq!(execute(&mut hca.dp(), QPN, true, pd, &ok), Ok(()));
    }
}
