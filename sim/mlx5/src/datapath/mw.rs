//! Memory-window bind and invalidate by UMR WQE: the window operation of a UMR that names a
//! window (see [`crate::objects::mw`] for the window model, its table and its commands).

use mlx5_prm::{cqe, mkc, mkey, wqe};

use crate::be::{be16, be32, be64};
use crate::control::result::get;
use crate::datapath::umr::{parse_head, UmrErr, UmrHead};
use crate::datapath::Dp;
use crate::objects::mr::{Access, Translation, ANY_QPN};
use crate::objects::mw::{mw_vendor, window_type};

/// The mask bits of the window WQEs (rdma-core qp.c `set_umr_control_seg`).
const WINDOW_MASK: u64 = {
    use wqe::umr_ctrl_seg::mask::*;
    FREE | KEY | QPN | LEN | START_ADDR | LW | RR | RW | A
};

/// The flags of the window WQEs (rdma-core qp.c `set_umr_control_seg`): inline translation,
/// translation offset (always 0), the free check rdma-core calls `CHECK_FREE` (`1 << 5`, the
/// bit Linux device.h names `MLX5_UMR_CHECK_NOT_FREE`: "fail if not free") and CHECK_QPN.
const WINDOW_FLAGS: u8 = wqe::umr_ctrl_seg::FLAG_INLINE
    | wqe::umr_ctrl_seg::FLAG_TRANSLATION_OFFSET_EN
    | wqe::umr_ctrl_seg::FLAG_CHECK_NOT_FREE
    | wqe::umr_ctrl_seg::FLAG_CHECK_QPN;

/// Executes the window UMR WQE `raw` (ctrl segment first, `ds * 16` bytes) posted on QP
/// `qpn`. `Ok` completes it successfully; `Err((cqe syndrome, vendor syndrome))` is an error
/// CQE. The window changes only when every check passed.
pub(crate) fn execute(hca: &mut Dp<'_>, qpn: u32, raw: &[u8]) -> Result<(), UmrErr> {
    let malformed = (cqe::syndrome::LOCAL_QP_OP_ERR, mw_vendor::MALFORMED);
    let fail = |v: u8| (cqe::syndrome::MW_BIND_ERR, v);
    let q = hca.objects.qps.get(qpn).ok_or(malformed)?;
    let qp_pd = q.pd;
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
    let offset = (be32(u, wqe::umr_ctrl_seg::XLT_OFFSET_47_16) as u64) << 16
        | be16(u, wqe::umr_ctrl_seg::TRANSLATION_OFFSET) as u64;
    let w = hca
        .objects
        .mkeys
        .keys
        .get(&mkey::index(key))
        .ok_or(fail(mw_vendor::BAD_WINDOW))?;
    let Some(ty) = window_type(w) else {
        return Err(fail(mw_vendor::BAD_WINDOW));
    };
    if w.variant != key as u8 {
        return Err(fail(mw_vendor::BAD_WINDOW));
    }
    if w.pd != qp_pd {
        return Err(fail(mw_vendor::PD_MISMATCH));
    }
    // Model choice: only what rdma-core's window WQEs carry; FREE always among them.
    if mask & !WINDOW_MASK != 0
        || mask & wqe::umr_ctrl_seg::mask::FREE == 0
        || flags & !WINDOW_FLAGS != 0
        || offset != 0
    {
        return Err(fail(mw_vendor::UNSUPPORTED));
    }
    if flags & wqe::umr_ctrl_seg::FLAG_CHECK_NOT_FREE != 0 && !w.free {
        return Err(fail(mw_vendor::NOT_FREE));
    }
    if flags & wqe::umr_ctrl_seg::FLAG_CHECK_QPN != 0 && w.qpn != qpn {
        return Err(fail(mw_vendor::QPN_CHECK));
    }
    use wqe::umr_ctrl_seg::mask as mk;
    let mut m = w.clone();
    if mask & mk::KEY != 0 {
        m.variant = get(seg, mkc::MKEY_7_0) as u8;
    }
    let new_qpn = (mask & mk::QPN != 0).then(|| get(seg, mkc::QPN));
    if get(seg, mkc::FREE) != 0 {
        // Unbind / invalidate.
        if octowords != 0 {
            return Err(fail(mw_vendor::UNSUPPORTED));
        }
        if ty == 2 && flags & wqe::umr_ctrl_seg::FLAG_CHECK_QPN == 0 {
            return Err(fail(mw_vendor::TYPE2_UNBIND));
        }
        if let Some(n) = new_qpn {
            if n != ANY_QPN {
                return Err(fail(mw_vendor::BAD_QPN));
            }
            m.qpn = n;
        }
        m.free = true;
        m.len = 0;
        m.translation = Translation::Klm {
            entries: Vec::new(),
        };
        hca.objects.mkeys.keys.insert(m.index, m);
        return Ok(());
    }

    // Bind.
    if ty == 2 && !w.free {
        return Err(fail(mw_vendor::NOT_FREE));
    }
    match (ty, new_qpn) {
        (2, Some(n)) if n == qpn => m.qpn = n,
        (1, None) => {}
        (1, Some(ANY_QPN)) => m.qpn = ANY_QPN,
        _ => return Err(fail(mw_vendor::BAD_QPN)),
    }
    if mask & mk::LEN == 0 || flags & wqe::umr_ctrl_seg::FLAG_INLINE == 0 || octowords == 0 {
        return Err(fail(mw_vendor::UNSUPPORTED));
    }
    if octowords > m.xlt_octowords as usize {
        return Err(fail(mw_vendor::BOUNDS));
    }
    let list = raw
        .get(data_at..data_at + octowords * mkey::OCTOWORD_SIZE)
        .filter(|_| data_at + octowords * mkey::OCTOWORD_SIZE <= size)
        .ok_or(malformed)?;
    if get(seg, mkc::LENGTH64) != 0 {
        return Err(fail(mw_vendor::BOUNDS));
    }
    let len = mkc::LEN.get_u64(seg).unwrap_or(0);
    let start = if mask & mk::START_ADDR != 0 {
        mkc::START_ADDR.get_u64(seg).unwrap_or(0)
    } else {
        m.start
    };
    if len == 0 || start.checked_add(len).is_none() {
        return Err(fail(mw_vendor::BOUNDS));
    }
    let mut access = m.access;
    for (bit, f, a) in [
        (mk::LW, mkc::LW, Access::LOCAL_WRITE),
        (mk::RR, mkc::RR, Access::REMOTE_READ),
        (mk::RW, mkc::RW, Access::REMOTE_WRITE),
        (mk::A, mkc::A, Access::REMOTE_ATOMIC),
    ] {
        if mask & bit != 0 {
            access = if get(seg, f) != 0 {
                access.union(a)
            } else {
                Access(access.0 & !a.0)
            };
        }
    }
    let needs_lw = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);
    // The KLM entries: non-empty ones first, then zero padding (rdma-core pads its one entry
    // to 64 bytes); together exactly `len` bytes (model choice).
    let mut entries: Vec<(u64, u32, u64)> = Vec::new();
    let mut total = 0u64;
    let mut padding = false;
    for e in list.chunks_exact(mkey::KLM_ENTRY_SIZE) {
        let bc = be32(e, mkey::KLM_BCOUNT) as u64;
        if bc == 0 {
            if e.iter().any(|&b| b != 0) {
                return Err(fail(mw_vendor::BOUNDS));
            }
            padding = true;
            continue;
        }
        if padding || bc > crate::objects::mr::MAX_KLM_BYTE_COUNT {
            return Err(fail(mw_vendor::BOUNDS));
        }
        let mr_key = be32(e, mkey::KLM_KEY);
        let addr = be64(e, mkey::KLM_VA);
        let mr = hca
            .objects
            .mkeys
            .keys
            .get(&mkey::index(mr_key))
            .ok_or(fail(mw_vendor::BAD_MR))?;
        if mr.variant != mr_key as u8
            || mr.free
            || matches!(mr.translation, Translation::Klm { .. })
        {
            return Err(fail(mw_vendor::BAD_MR));
        }
        if mr.pd != m.pd {
            return Err(fail(mw_vendor::MR_PD));
        }
        let end = addr as u128 + bc as u128;
        if (addr as u128) < mr.start as u128 || end > mr.start as u128 + mr.len {
            return Err(fail(mw_vendor::BOUNDS));
        }
        if access.0 & needs_lw.0 != 0 && !mr.access.contains(Access::LOCAL_WRITE) {
            return Err(fail(mw_vendor::ACCESS));
        }
        entries.push((bc, mr_key, addr));
        total += bc; // at most 2^16 entries of at most 2^31 bytes
    }
    if total != len {
        return Err(fail(mw_vendor::BOUNDS));
    }
    m.access = access;
    m.start = start;
    m.len = len as u128;
    m.free = false;
    m.translation = crate::objects::mr::klm_translation(&entries);
    hca.objects.mkeys.keys.insert(m.index, m);
    Ok(())
}
