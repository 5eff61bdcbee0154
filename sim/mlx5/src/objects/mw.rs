//! Memory windows: binding, local invalidation and remote invalidation of window keys.
//!
//! Firmware has no window object of its own. Linux ib/mr.c `mlx5_ib_alloc_mw` makes a window
//! with CREATE_MKEY: a free key (`mkc.free`), `umr_en`, access mode KLMS, `lr`, `qpn` 0xffffff,
//! `translations_octword_size` for the KLM entries a bind may load, and `en_rinval` for type
//! 2. A window is bound, unbound and invalidated with UMR WQEs posted on an ordinary QP
//! (rdma-core providers/mlx5/qp.c `_mlx5_post_send` for IBV_WR_BIND_MW / IBV_WR_LOCAL_INV,
//! `set_bind_wr`): ctrl `imm` = the window's current key, then the UMR ctrl segment, the mkey
//! segment and, for a bind, the KLM entries inline (`set_umr_data_seg`: one entry naming the
//! MR's lkey, padded to 64 bytes):
//!
//! | WQE | umr flags | mkey_mask | mkey segment |
//! |---|---|---|---|
//! | bind, type 1 | INLINE, TRANSLATION_OFFSET | FREE, KEY, LEN, START_ADDR, LW, RR, RW, A | free 0, qpn 0xffffff, new variant, access, start, len |
//! | bind, type 2 | + `1 << 5` (rdma-core `CHECK_FREE`: fail unless free) | + QPN | qpn = the posting QP |
//! | unbind, type 1 (zero length) | INLINE, TRANSLATION_OFFSET | FREE, KEY | free 1 |
//! | LOCAL_INV (type 2) | + CHECK_QPN | FREE, KEY, QPN | free 1, qpn 0xffffff |
//!
//! The model therefore treats a UMR WQE whose target key is a KLMS key with `umr_en` as a
//! window operation (`umr::execute` dispatches it to `datapath::mw::execute`); such a key is a window, of type 2
//! when `en_rinval` is set. Unlike other UMRs ([`crate::datapath::umr`], which need `qpc.fre`), window UMRs run on any RC QP:
//! Linux creates user QPs without `fre` (ib/qp.c sets it only in `create_kernel_qp`), and
//! rdma-core binds windows on them.
//!
//! Checks (IB spec compliance statements as rxe drivers/infiniband/sw/rxe/rxe_mw.c cites
//! them; where neither source says what firmware does, "model choice"):
//! - the window exists and its variant is the one the ctrl `imm` names (model choice, as
//!   [`crate::datapath::umr`]);
//! - the posting QP's PD is the window's (C10-72 for type 2; model choice for type 1 too);
//! - only the mask bits and flags above (model choice: anything else is refused);
//! - bind: the window's new range is described by KLM entries inline, covering exactly
//!   `len` bytes (model choice), within the room `translations_octword_size` gave it; each
//!   entry names a live, direct (not KLMS) key of the window's PD (model choice: same PD as
//!   the window) whose range holds `[address, address + byte_count)` (C10-75); remote write
//!   or atomic on the window needs local write on the MR (C10-74; local write on the window
//!   too, model choice);
//! - type 2 bind: the window must be free (o10-37.2.30: a bound type 2 window is invalidated
//!   before it is bound again), whatever the WQE's free check says (model choice), and the
//!   new `qpn` must be the posting QP (model choice: rdma-core writes it; a type 2B window
//!   belongs to one QP) — remote access then works only through that QP (`mkc.qpn`);
//! - type 1 bind: the new `qpn` must be 0xffffff (model choice);
//! - unbind / invalidate (free = 1): no translation (model choice); a type 2 window only with
//!   CHECK_QPN (model choice: o10-37.2.40, a type 2 window is not invalidated by a zero-length
//!   bind), and CHECK_QPN fails unless the window's `qpn` is the posting QP — so LOCAL_INV of a
//!   type 1 window (`qpn` 0xffffff, o10-37.2.26), of a window bound through another QP, or of
//!   a window already invalid is refused.
//!
//! `IB_ACCESS_MW_BIND` on the MR (C10-73) has no mkc field (Linux ib/mr.c
//! `set_mkc_access_pd_addr_fields` does not map it; rdma-core checks it in software, qp.c
//! `set_bind_wr` under MW_DEBUG): the driver enforces it, the model cannot see it.
//!
//! A refused window UMR completes with `MLX5_CQE_SYNDROME_MW_BIND_ERR` (rxe rxe_req.c
//! completes failed binds and local invalidations with IB_WC_MW_BIND_ERR) and changes nothing;
//! a malformed one with a local QP operation error.
//!
//! Remote invalidation (`remote_invalidate`, the responder's SEND_WITH_INVALIDATE): the key
//! must exist with the variant named, have `en_rinval` (so type 1 windows cannot be: o10-37.2.26),
//! be valid (not free), belong to the responder QP's PD, and be bound to that QP when bound to
//! one (rxe `rxe_invalidate_mw`; the QP check is a model choice, as C10-72 for binds).
//!
//! DESTROY_QP of the QP a type 2 window is bound to leaves the window bound, naming no QP
//! (`qp_destroyed`): rxe's bound window holds a reference to its QP object
//! (`rxe_do_bind_mw`: `mw->qp = qp`) until it is invalidated or deallocated, and
//! `rxe_lookup_mw` compares that object (`mw->qp != qp`), so no other QP gets access, not even
//! one that later has the same QPN (Linux hw/mlx5 and the PRM say nothing of it; model choice
//! for the rest: the window can then only be destroyed, since LOCAL_INV's CHECK_QPN and remote
//! invalidation both need the bound QP, where rxe's `rxe_check_invalidate_mw` does not look).

use mlx5_prm::mkey;

use crate::objects::mr::{Mkey, Translation, ANY_QPN};
use crate::objects::Objects;

/// Vendor syndromes of refused window UMRs (the model's own, like
/// [`crate::datapath::umr::umr_vendor`]).
pub mod mw_vendor {
    /// The WQE is shorter than its segments, or its translation is not inline.
    pub const MALFORMED: u8 = 0x50;
    /// The ctrl `imm` names no window, or another variant.
    pub const BAD_WINDOW: u8 = 0x51;
    /// The posting QP's PD is not the window's.
    pub const PD_MISMATCH: u8 = 0x52;
    /// A mask bit or flag a window UMR does not use.
    pub const UNSUPPORTED: u8 = 0x53;
    /// Binding a type 2 window that is bound (not free), or a free check that failed.
    pub const NOT_FREE: u8 = 0x54;
    /// The new `qpn` is not the posting QP (type 2) or not 0xffffff (type 1).
    pub const BAD_QPN: u8 = 0x55;
    /// A KLM entry names no live key, another variant, a free key, or an indirect key.
    pub const BAD_MR: u8 = 0x56;
    /// The MR belongs to another PD than the window.
    pub const MR_PD: u8 = 0x57;
    /// A KLM entry reaches outside its MR, the entries do not cover the window's length, or
    /// they exceed the window's room.
    pub const BOUNDS: u8 = 0x58;
    /// Remote write / atomic (or local write) on a window over an MR without local write.
    pub const ACCESS: u8 = 0x59;
    /// CHECK_QPN failed: the window is not bound to the posting QP (another QP's window, a
    /// type 1 window, or one already invalid).
    pub const QPN_CHECK: u8 = 0x5a;
    /// A type 2 window freed without CHECK_QPN (a zero-length bind).
    pub const TYPE2_UNBIND: u8 = 0x5b;
}

/// Whether `m` is a memory window: a KLMS key with `umr_en` (see the module documentation).
pub fn is_window(m: &Mkey) -> bool {
    m.umr_en && matches!(m.translation, Translation::Klm { .. })
}

/// The window type of `m` (1 or 2), `None` when `m` is not a window.
pub fn window_type(m: &Mkey) -> Option<u8> {
    is_window(m).then_some(if m.en_rinval { 2 } else { 1 })
}

/// The `qpn` of a key whose QP was destroyed: outside the 24-bit QPN space, so it equals no
/// QP's number and is not [`ANY_QPN`] (model-internal; QUERY_MKEY returns the mkc as created).
pub const DEAD_QPN: u32 = 1 << 24;

/// DESTROY_QP of `qpn`: every key bound to it (a bound type 2 window, or a key created with
/// that `mkc.qpn`) stays as it is but names [`DEAD_QPN`], so it grants access through no QP,
/// including a later one that reuses the QPN (see the module documentation: rxe
/// `rxe_lookup_mw`; model choice for keys other than windows, which rxe does not bind to QPs).
pub(crate) fn qp_destroyed(objects: &mut Objects, qpn: u32) {
    for m in objects.mkeys.keys.values_mut() {
        if m.qpn == qpn {
            m.qpn = DEAD_QPN;
        }
    }
}

/// The responder's SEND_WITH_INVALIDATE on QP `qpn`: invalidates `rkey` (see the module
/// documentation), or refuses (the responder then NAKs with invalid request).
pub(crate) fn remote_invalidate(
    objects: &mut crate::objects::Objects,
    qpn: u32,
    rkey: u32,
) -> Result<(), ()> {
    let pd = objects.qps.get(qpn).ok_or(())?.pd;
    let m = objects.mkeys.keys.get_mut(&mkey::index(rkey)).ok_or(())?;
    if m.variant != rkey as u8
        || !m.en_rinval
        || m.free
        || m.pd != pd
        || (m.qpn != ANY_QPN && m.qpn != qpn)
    {
        return Err(());
    }
    m.free = true;
    if is_window(m) {
        m.len = 0;
        m.translation = Translation::Klm {
            entries: Vec::new(),
        };
        // The window belongs to no QP any more (as after LOCAL_INV: rdma-core writes qpn
        // 0xffffff then).
        m.qpn = ANY_QPN;
    }
    Ok(())
}
