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
//! The model applies a UMR atomically: every check runs on a copy, and the key changes only
//! when all pass. Checks:
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

use crate::cmd::field as get;
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

type UmrErr = (u8, u8);

fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}

fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |x| u16::from_be_bytes([x[0], x[1]]))
}

/// Executes the UMR WQE `raw` (ctrl segment first, `ds * 16` bytes) posted on QP `qpn`.
/// `Ok` completes it successfully; `Err((cqe syndrome, vendor syndrome))` is an error CQE.
pub(crate) fn execute(hca: &mut Hca, qpn: u32, raw: &[u8]) -> Result<(), UmrErr> {
    let malformed = (cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::MALFORMED);
    let prot = |v: u8| (cqe::syndrome::LOCAL_PROT_ERR, v);
    let q = hca.qps.get(qpn).ok_or(malformed)?;
    if !q.fre {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::NOT_FRE));
    }
    let qp_pd = q.pd;
    let ds = (raw.get(wqe::ctrl_seg::QPN_DS + 3).copied().unwrap_or(0) as u32 & wqe::CTRL_DS_MASK)
        as usize;
    let size = ds * wqe::SEND_WQE_DS;
    let umr_at = wqe::ctrl_seg::SIZE;
    let mkc_at = umr_at + wqe::umr_ctrl_seg::SIZE;
    let data_at = mkc_at + mkc::BYTES;
    if size < data_at || raw.len() < size {
        return Err(malformed);
    }
    let key = be32(raw, wqe::ctrl_seg::IMM);
    let u = &raw[umr_at..mkc_at];
    let seg = &raw[mkc_at..data_at];
    let flags = u[wqe::umr_ctrl_seg::FLAGS];
    let octowords = be16(u, wqe::umr_ctrl_seg::KLM_OCTOWORDS) as u64;
    let mask = be64(u, wqe::umr_ctrl_seg::MKEY_MASK);
    let offset = if flags & wqe::umr_ctrl_seg::FLAG_TRANSLATION_OFFSET_EN != 0 {
        (be32(u, wqe::umr_ctrl_seg::XLT_OFFSET_47_16) as u64) << 16
            | be16(u, wqe::umr_ctrl_seg::TRANSLATION_OFFSET) as u64
    } else {
        0
    };
    if mask & !SUPPORTED_MASK != 0 {
        return Err((cqe::syndrome::LOCAL_QP_OP_ERR, umr_vendor::UNSUPPORTED_MASK));
    }
    let old = hca
        .mkeys
        .keys
        .get(&mkey::index(key))
        .ok_or(prot(umr_vendor::BAD_KEY))?;
    if old.variant != (key & 0xff) as u8 {
        return Err(prot(umr_vendor::BAD_KEY));
    }
    if !old.umr_en {
        return Err(prot(umr_vendor::NOT_UMR_EN));
    }
    match flags & wqe::umr_ctrl_seg::FLAG_CHECK_MASK {
        wqe::umr_ctrl_seg::FLAG_CHECK_FREE if old.free => return Err(prot(umr_vendor::FREE_STATE)),
        wqe::umr_ctrl_seg::FLAG_CHECK_NOT_FREE if !old.free => {
            return Err(prot(umr_vendor::FREE_STATE))
        }
        _ => {}
    }
    let mut m: Mkey = old.clone();

    // The translation, read before anything changes.
    let mut list: Vec<u8> = Vec::new();
    if octowords > 0 {
        let n = (octowords * 16) as usize;
        if flags & wqe::umr_ctrl_seg::FLAG_INLINE != 0 {
            list.extend_from_slice(raw.get(data_at..data_at + n).ok_or(malformed)?);
            if data_at + n > size {
                return Err(malformed);
            }
        } else {
            // One data segment: byte_count, lkey, addr; the lkey is checked for local read
            // in the UMR QP's PD.
            if size < data_at + wqe::data_seg::SIZE {
                return Err(malformed);
            }
            let bc = be32(raw, data_at + wqe::data_seg::BYTE_COUNT) as u64;
            let lkey = be32(raw, data_at + wqe::data_seg::LKEY);
            let addr = be64(raw, data_at + wqe::data_seg::ADDR);
            if bc < n as u64 {
                return Err(malformed);
            }
            list.resize(n, 0);
            let mem = hca.mem.clone();
            let user = KeyUser { pd: qp_pd, qpn };
            let r = hca
                .mkeys
                .resolve(lkey, addr, n as u64, Access::LOCAL_READ, user)
                .map_err(|_| prot(umr_vendor::XLT_READ))?;
            r.read(&*mem, &mut list)
                .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
        }
    }

    // The mkey segment's fields, as the mask selects them.
    use wqe::umr_ctrl_seg::mask;
    if mask & mask::PD != 0 {
        let pd = get(mkc::PD, seg);
        if !hca.pd_exists(pd) {
            return Err(prot(umr_vendor::BAD_PD));
        }
        m.pd = pd;
    }
    if mask & mask::QPN != 0 {
        let qpn = get(mkc::QPN, seg);
        if qpn != ANY_QPN && !hca.qps.contains(qpn) {
            return Err(prot(umr_vendor::BAD_PD));
        }
        m.qpn = qpn;
    }
    if mask & mask::KEY != 0 {
        m.variant = get(mkc::MKEY_7_0, seg) as u8;
    }
    for (bit, f, a) in [
        (mask::LR, mkc::LR, Access::LOCAL_READ),
        (mask::LW, mkc::LW, Access::LOCAL_WRITE),
        (mask::RR, mkc::RR, Access::REMOTE_READ),
        (mask::RW, mkc::RW, Access::REMOTE_WRITE),
        (mask::A, mkc::A, Access::REMOTE_ATOMIC),
    ] {
        if mask & bit != 0 {
            m.access = if get(f, seg) != 0 {
                m.access.union(a)
            } else {
                Access(m.access.0 & !a.0)
            };
        }
    }
    if mask & mask::START_ADDR != 0 {
        m.start = mkc::START_ADDR.get_u64(seg).unwrap_or(0);
    }
    if mask & mask::LEN != 0 {
        m.len = if get(mkc::LENGTH64, seg) != 0 {
            1u128 << 64
        } else {
            mkc::LEN.get_u64(seg).unwrap_or(0) as u128
        };
    }
    if m.start as u128 + m.len > 1u128 << 64 {
        return Err(prot(umr_vendor::XLT_RANGE));
    }
    if mask & mask::FREE != 0 {
        m.free = get(mkc::FREE, seg) != 0;
    }
    let new_shift = (mask & mask::PAGE_SIZE != 0).then(|| get(mkc::LOG_PAGE_SIZE, seg));
    let room = m.xlt_octowords as u64 * 2;
    match &mut m.translation {
        Translation::Mtt {
            page_shift,
            entries,
        } => {
            if let Some(s) = new_shift {
                if !(MIN_MTT_PAGE_SHIFT..=MAX_MTT_PAGE_SHIFT).contains(&s) {
                    return Err(prot(umr_vendor::XLT_RANGE));
                }
                *page_shift = s;
            }
            if !list.is_empty() {
                let first = offset * 2;
                let count = octowords * 2;
                if first + count > room.max(entries.len() as u64) {
                    return Err(prot(umr_vendor::XLT_RANGE));
                }
                for (i, c) in list.chunks_exact(mkey::MTT_ENTRY_SIZE).enumerate() {
                    let raw = u64::from_be_bytes(c.try_into().unwrap_or([0; 8]));
                    // mlx5_ifc_mtt_bits: rd_en bit 0, wr_en bit 1; Linux sets both
                    // (`MLX5_IB_MTT_PRESENT`) on every entry it loads. Model choice: an entry
                    // loaded by UMR without them is not present.
                    entries[(first as usize) + i] = MttEntry::new(
                        raw & !0xff,
                        raw & mkey::MTT_READ != 0,
                        raw & mkey::MTT_WRITE != 0,
                    );
                }
            }
            let page = 1u64 << *page_shift;
            if entries.iter().any(|e| e.addr() & (page - 1) != 0) {
                return Err(prot(umr_vendor::XLT_MISALIGNED));
            }
            if !m.free && m.len > 0 {
                let base = m.start as u128 >> *page_shift;
                let end = (m.start as u128 + m.len).div_ceil(page as u128);
                let n = (end - base) as usize;
                match entries.get(..n) {
                    Some(p) if p.iter().all(|e| e.read() || e.write()) => {}
                    _ => return Err(prot(umr_vendor::XLT_INCOMPLETE)),
                }
            }
        }
        _ if !list.is_empty() || new_shift.is_some() => {
            return Err(prot(umr_vendor::XLT_MODE));
        }
        _ => {}
    }
    let index = m.index;
    hca.mkeys.keys.insert(index, m);
    Ok(())
}
