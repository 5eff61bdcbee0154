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

use crate::datapath::vendor;
use crate::hca::Hca;
use crate::mr::{
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

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |x| u16::from_be_bytes([x[0], x[1]]))
}

/// The fixed part of a UMR WQE: ctrl segment (the key in `imm`), UMR ctrl segment, mkey
/// context segment, then `size - data_at` bytes of data (Linux ib/umr.c
/// `mlx5r_umr_post_send`; rdma-core qp.c `set_umr_*`). Shared by the key UMRs here and the
/// window UMRs of [`crate::mw`].
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

/// The translation of a UMR WQE, as big-endian MTT entries (`mlx5_ifc_mtt_bits`).
#[derive(Clone, Copy)]
struct Entries<'a>(&'a [u8]);

impl Entries<'_> {
    fn len(self) -> usize {
        self.0.len() / mkey::MTT_ENTRY_SIZE
    }

    /// Entry `i` as the key stores it. `mlx5_ifc_mtt_bits`: rd_en bit 0, wr_en bit 1; Linux
    /// sets both (`MLX5_IB_MTT_PRESENT`) on every entry it loads. Model choice: an entry
    /// loaded by UMR without them is not present.
    fn get(self, i: usize) -> MttEntry {
        let at = i * mkey::MTT_ENTRY_SIZE;
        let raw = self.0[at..at + mkey::MTT_ENTRY_SIZE]
            .try_into()
            .map_or(0, u64::from_be_bytes);
        MttEntry::new(
            raw & !0xff,
            raw & mkey::MTT_READ != 0,
            raw & mkey::MTT_WRITE != 0,
        )
    }
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

/// Executes the UMR WQE `raw` (ctrl segment first, `ds * 16` bytes) posted on QP `qpn`.
/// `Ok` completes it successfully; `Err((cqe syndrome, vendor syndrome))` is an error CQE.
///
/// Every check runs against the key as it is and the WQE's new values; the key is written
/// (in place) only once all have passed, so a refused UMR leaves it unchanged.
///
/// The QP is the caller's, looked up already: `fre` and `qp_pd` are its `qpc.fre` and PD
/// (the send queue loop holds them; the QP is not looked up a second time).
pub(crate) fn execute_on(
    hca: &mut Hca,
    qpn: u32,
    fre: bool,
    qp_pd: u32,
    raw: &[u8],
) -> Result<(), UmrErr> {
    let malformed = (cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED);
    let prot = |v: u8| (cqe::syndrome::LOCAL_PROT_ERR, v);
    if !fre {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::NOT_FRE));
    }
    let UmrHead {
        key,
        u,
        seg,
        flags,
        octowords,
        mask,
        data_at,
        size,
    } = parse_head(raw).ok_or(malformed)?;
    let octowords = octowords as u64;
    let offset = if flags & wqe::umr_ctrl_seg::FLAG_TRANSLATION_OFFSET_EN != 0 {
        (be32(u, wqe::umr_ctrl_seg::XLT_OFFSET_47_16) as u64) << 16
            | be16(u, wqe::umr_ctrl_seg::TRANSLATION_OFFSET) as u64
    } else {
        0
    };
    if mask & !SUPPORTED_MASK != 0 {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::UNSUPPORTED_MASK));
    }
    let index = mkey::index(key);
    let n = (octowords * 16) as usize;
    let inline = flags & wqe::umr_ctrl_seg::FLAG_INLINE != 0;

    // A translation by pointer is read before anything changes (the key checks first).
    let mut scratch = None;
    if n > 0 && !inline {
        check_key(hca.mkeys.keys.get(&index), key, flags)?;
        // One data segment: byte_count, lkey, addr; the lkey is checked for local read in
        // the UMR QP's PD.
        if size < data_at + wqe::data_seg::SIZE {
            return Err(malformed);
        }
        let bc = be32(raw, data_at + wqe::data_seg::BYTE_COUNT) as u64;
        let lkey = be32(raw, data_at + wqe::data_seg::LKEY);
        let addr = be64(raw, data_at + wqe::data_seg::ADDR);
        if bc < n as u64 {
            return Err(malformed);
        }
        let mut s = Scratch::take();
        s.0.clear();
        s.0.resize(n, 0);
        let user = KeyUser { pd: qp_pd, qpn };
        let r = hca
            .mkeys
            .resolve(lkey, addr, n as u64, Access::LOCAL_READ, user)
            .map_err(|_| prot(umr_vendor::XLT_READ))?;
        r.read(&*hca.mem, &mut s.0)
            .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
        scratch = Some(s);
    }

    // The mkey segment's fields, read with constant offsets (the segment is 64 bytes).
    let seg: &[u8; mkc::BYTES] = seg.try_into().map_err(|_| malformed)?;
    let get = field;

    // The key, validated and changed in place. The PD and QP tables are other fields of
    // `hca`, borrowed beside it.
    let old = hca.mkeys.keys.get_mut(&index);
    check_key(old.as_deref(), key, flags)?;
    let Some(m) = old else {
        return Err(prot(umr_vendor::BAD_KEY));
    };
    let list = if n == 0 {
        Entries(&[])
    } else if let Some(s) = &scratch {
        Entries(&s.0[..n])
    } else {
        if data_at + n > size {
            return Err(malformed);
        }
        Entries(raw.get(data_at..data_at + n).ok_or(malformed)?)
    };

    // The mkey segment's fields, as the mask selects them.
    use wqe::umr_ctrl_seg::mask;
    let pd = if mask & mask::PD != 0 {
        let pd = get(mkc::PD, seg);
        if !hca.pds.contains(pd) {
            return Err(prot(umr_vendor::BAD_PD));
        }
        pd
    } else {
        m.pd
    };
    let new_qpn = if mask & mask::QPN != 0 {
        let qpn = get(mkc::QPN, seg);
        if qpn != ANY_QPN && !hca.qps.contains(qpn) {
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
    let mut access = m.access;
    for (bit, f, a) in [
        (mask::LR, mkc::LR, Access::LOCAL_READ),
        (mask::LW, mkc::LW, Access::LOCAL_WRITE),
        (mask::RR, mkc::RR, Access::REMOTE_READ),
        (mask::RW, mkc::RW, Access::REMOTE_WRITE),
        (mask::A, mkc::A, Access::REMOTE_ATOMIC),
    ] {
        if mask & bit != 0 {
            access = if get(f, seg) != 0 {
                access.union(a)
            } else {
                Access(access.0 & !a.0)
            };
        }
    }
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
            // Entries `first..first + count` are replaced by `list`.
            let first = (offset * 2) as usize;
            let count = list.len();
            if list.len() > 0 && (first + count) as u64 > room.max(entries.len() as u64) {
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
            // The kept entries of `r` as a slice (plain slice loops below: the iterator
            // chains they replace were not inlined, and cost more than the checks).
            let kept = |r: core::ops::Range<usize>| {
                let lo = r.start.min(n_entries);
                lo..r.end.min(n_entries).max(lo)
            };
            // The kept entries are aligned to the current page size: CREATE_MKEY refuses a
            // misaligned entry (the room beyond is zero) and every UMR leaves them all aligned
            // (this check). So they need a look only when the page size grows.
            let kept_bad = shift > *page_shift
                && (entries[kept(0..first)].iter().any(|&e| misaligned(e))
                    || entries[kept(written.end..n_entries)]
                        .iter()
                        .any(|&e| misaligned(e)));
            let mut list_bad = false;
            for i in 0..count {
                list_bad |= misaligned(list.get(i));
            }
            if kept_bad || list_bad {
                return Err(prot(umr_vendor::XLT_MISALIGNED));
            }
            // A key left enabled has every page of `start..start + len` present.
            if !free && len > 0 {
                let base = start as u128 >> shift;
                let end = (start as u128 + len).div_ceil(page as u128);
                let pages = (end - base) as usize;
                let present = |e: MttEntry| e.read() || e.write();
                let mut list_present = true;
                for i in 0..count.min(pages.saturating_sub(first)) {
                    list_present &= present(list.get(i));
                }
                let incomplete = pages > entries.len()
                    || !entries[kept(0..first.min(pages))]
                        .iter()
                        .all(|&e| present(e))
                    || !entries[kept(written.end..pages)]
                        .iter()
                        .all(|&e| present(e))
                    || !list_present;
                if incomplete {
                    return Err(prot(umr_vendor::XLT_INCOMPLETE));
                }
            }
            // Every check passed: the key changes.
            for i in written {
                entries[i] = list.get(i - first);
            }
            *page_shift = shift;
        }
        _ if list.len() > 0 || new_shift.is_some() => {
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
