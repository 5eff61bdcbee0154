//! Memory windows, types 1 and 2: ALLOC / DEALLOC (CREATE_MKEY / DESTROY_MKEY), bind by a
//! UMR WQE on the application's QP, invalidation by LOCAL_INV and by a peer's SEND with
//! invalidate.
//!
//! Sources:
//! - alloc: Linux ib/mr.c `mlx5_ib_alloc_mw`: CREATE_MKEY of a free key (`mkc.free`),
//!   `umr_en`, `lr`, access mode KLMS, `qpn` 0xffffff, `translations_octword_size` =
//!   `roundup(num_klms, 4)` (4 for the one KLM a bind carries), `en_rinval` for type 2;
//!   dealloc: `mlx5_ib_dealloc_mw`, DESTROY_MKEY. The variant is random (ReDMArk), not
//!   `mlx5_ib_create_mkey`'s counter.
//! - bind: rdma-core providers/mlx5/qp.c `_mlx5_post_send` for IBV_WR_BIND_MW (`set_bind_wr`,
//!   `set_umr_control_seg`, `set_umr_mkey_seg`, `set_umr_data_seg`): opcode UMR, ctrl `imm` =
//!   the window's current rkey, the UMR ctrl segment, the mkey context (new variant, access,
//!   start, length; `qpn` = the QP for type 2, 0xffffff for type 1) and one KLM entry naming
//!   the MR's lkey, padded to 64 bytes. The bind verb of type 1 windows posts the same WQE
//!   (rdma-core qp.c `mlx5_bind_mw`; libibverbs `ibv_bind_mw` takes type 1 only).
//! - rkey: a new variant with every bind (rdma-core `mlx5_bind_mw` uses `ibv_inc_rkey`; here
//!   a random one, never the current one nor a recently destroyed key: ReDMArk).
//! - LOCAL_INV: a UMR too (rdma-core qp.c: IBV_WR_LOCAL_INV is `set_bind_wr` with an empty
//!   bind of type 2): CHECK_QPN, mask FREE | KEY | QPN, mkey context free with `qpn`
//!   0xffffff. rdma-core writes variant 0 under the KEY mask; this driver writes the window's
//!   current variant, so that a window invalidated locally or by a peer (which leaves the
//!   variant) has the same key afterwards, the one the next bind names in its ctrl `imm`.
//! - completions: rdma-core cq.c `handle_good_req` takes a UMR's opcode from `wr_data[idx]`
//!   saved at post time (IBV_WC_BIND_MW / IBV_WC_LOCAL_INV); here `wq::SqSlot`'s
//!   `wc_op`.
//!
//! The driver refuses before posting what verbs refuses (libibverbs `ibv_bind_mw`, rdma-core
//! `mlx5_bind_mw` / `set_bind_wr`, rxe rxe_mw.c `rxe_check_bind_mw` for the IB spec rules):
//! the wrong window type for the verb, a window / region / QP of different PDs (C10-72), a
//! region without [`Access::MW_BIND`] (C10-73, which no mkc field carries, so only the driver
//! can check it), remote write or atomic over a region without local write (C10-74), a range
//! outside the region (C10-75), a zero-length type 2 bind (o10-37.2.40), zero-based type 1
//! binds, lengths above 2^31 (one KLM entry, rdma-core `set_bind_wr`). What depends on the
//! window's state on the device (a type 2 window already bound, a window bound through
//! another QP, one invalidated by a peer) is the device's to refuse: the WQE completes with
//! `IBV_WC_MW_BIND_ERR` and the QP goes to the error state.

use alloc::sync::Arc;

use mlx5_prm::{create_mkey_in, create_mkey_out, mkc, mkey, wqe};

use crate::error::{Error, InvalidInput, Result};
use crate::hal::Hal;
use crate::mr::{self, Access, MkeyParams, Xlt};
use crate::pd::{PdInner, ProtectionDomain};
use crate::qp::{umr_ctrl, QueuePair, SendFlags, LOCAL_INV_DS, WC_OP_BIND};
use crate::region::{MemoryRegion, MrInner};

/// Memory window type (`enum ibv_mw_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwType {
    /// Type 1: bound with the bind verb ([`QueuePair::bind_mw`]), usable through any QP of
    /// its PD, rebound at will, never invalidated by LOCAL_INV or SEND with invalidate.
    Type1,
    /// Type 2 (2B): bound with a BIND_MW work request ([`QueuePair::post_bind_mw`]) to the QP
    /// that posts it, remote access only through that QP, invalidated by LOCAL_INV or a
    /// peer's SEND with invalidate before it is bound again.
    Type2,
}

/// KLM entries a window has room for (Linux `mlx5_ib_alloc_mw`: `roundup(1, 4)`).
const WINDOW_KLMS: u32 = 4;
/// Most bytes one window maps (one KLM entry, `MLX5_MAX_KLM_BYTE_COUNT`; rdma-core
/// `set_bind_wr` refuses more with EOPNOTSUPP).
pub const MAX_WINDOW_LEN: u64 = mr::MAX_KLM_BYTE_COUNT;

/// Bytes of KLM data a bind carries (one entry padded to 64, rdma-core `set_umr_data_seg`).
const KLM_DATA: usize = 64;

/// A memory window (`ibv_mw`).
pub struct MemoryWindow<H: Hal> {
    pd: Arc<PdInner<H>>,
    ty: MwType,
    /// The key as the driver last set it (the variant changes with each bind).
    key: u32,
    /// The region of the last bind, kept registered (its dereg is [`Error::Busy`]) until the
    /// window is bound again, unbound by the bind verb, or deallocated.
    bound: Option<Arc<MrInner<H>>>,
    destroyed: bool,
}

/// What a bind maps (`ibv_mw_bind_info`).
pub struct MwBind<'a, H: Hal> {
    /// The region the window opens onto (registered with [`Access::MW_BIND`]).
    pub mr: &'a MemoryRegion<H>,
    /// First byte, in the region's address space ([`MemoryRegion::addr`] based).
    pub addr: u64,
    /// Bytes (1 ..= [`MAX_WINDOW_LEN`]).
    pub len: u64,
    /// Rights the window grants: [`Access::REMOTE_READ`], [`Access::REMOTE_WRITE`],
    /// [`Access::REMOTE_ATOMIC`], [`Access::LOCAL_WRITE`], and [`Access::ZERO_BASED`] (type
    /// 2 only: the window is addressed from 0). May be narrower than the region's.
    pub access: Access,
}

impl<H: Hal> ProtectionDomain<H> {
    /// Allocates a memory window of type `ty` in this PD (`ibv_alloc_mw`): CREATE_MKEY of a
    /// free KLMS key (Linux ib/mr.c `mlx5_ib_alloc_mw`), `en_rinval` for type 2, a random
    /// variant. It maps nothing until bound.
    pub fn alloc_mw(&self, ty: MwType) -> Result<MemoryWindow<H>> {
        let pd = self.inner_arc();
        let ctx = &pd.ctx;
        ctx.check_alive()?;
        let p = MkeyParams {
            pdn: pd.pdn,
            iova: 0,
            len: 0,
            access: Access::NONE,
            variant: (ctx.random() & 0xff) as u8,
            pg_access: false,
            ro_write: false,
            ro_read: false,
            xlt: Xlt::Klm(&[]),
            umr_en: true,
            free: true,
            xlt_room: WINDOW_KLMS,
        };
        let mut c = mr::mkey_cmd(&p)?;
        let m = |f: mlx5_prm::Field| f.within(create_mkey_in::MEMORY_KEY_MKEY_ENTRY);
        c.set(m(mkc::EN_RINVAL), (ty == MwType::Type2) as u32);
        let mut out = [0u8; create_mkey_out::BYTES];
        ctx.exec(&c, &mut out)?;
        Ok(MemoryWindow {
            pd: pd.clone(),
            ty,
            key: mr::mkey_from_out(&out, p.variant),
            bound: None,
            destroyed: false,
        })
    }
}

impl<H: Hal> MemoryWindow<H> {
    /// The window's rkey as last bound (`ibv_mw.rkey`): a new one after each bind.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn
    }

    /// Whether the window holds a region from its last bind (see [`MemoryWindow`]).
    pub fn holds_region(&self) -> bool {
        self.bound.is_some()
    }

    /// Deallocates the window (`ibv_dealloc_mw`: DESTROY_MKEY, Linux `mlx5_ib_dealloc_mw`),
    /// bound or not; its rkey then names nothing. The region of its last bind is released
    /// once the key is gone.
    pub fn dealloc(mut self) -> Result<()> {
        self.destroy()
    }

    fn destroy(&mut self) -> Result<()> {
        if core::mem::replace(&mut self.destroyed, true) {
            return Ok(());
        }
        let ctx = &self.pd.ctx;
        let key = self.key;
        let r = ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, key));
        if r.is_err() {
            // The window may live on and translate to the region: keep the region (and
            // its memory) for good.
            if let Some(m) = self.bound.take() {
                core::mem::forget(m);
            }
        }
        ctx.quarantine_key(key);
        r
    }

    /// A new variant for the next bind: random, not the current one, and not a key retired
    /// recently (ReDMArk: an rkey a peer may still hold must not come back at once; every
    /// rkey a bind replaces is retired, as destroyed keys are).
    fn next_key(&self) -> u32 {
        let ctx = &self.pd.ctx;
        crate::context::fresh_variant(ctx, self.key, ctx.random() as u32)
    }
}

impl<H: Hal> Drop for MemoryWindow<H> {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// What one bind WQE does, checked.
struct Checked<H: Hal> {
    mr: Option<Arc<MrInner<H>>>,
    body: [u8; wqe::umr_ctrl_seg::SIZE + mkc::BYTES + KLM_DATA],
    len: usize,
    new_key: u32,
}

impl<H: Hal> QueuePair<H> {
    /// Posts a BIND_MW work request for type 2 window `mw` (`IBV_WR_BIND_MW`): the window
    /// opens `bind` of its region to remote access through this QP, with a new rkey, which
    /// is returned (and is [`MemoryWindow::rkey`] from now on). The window must be free on
    /// the device (allocated, or invalidated since its last bind); the completion is
    /// [`crate::WcOpcode::BindMw`] (when signaled), or `MwBindErr` if the device refuses.
    /// The QP needs [`crate::QpOptions::mw_bind`].
    pub fn post_bind_mw(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow<H>,
        bind: &MwBind<'_, H>,
        flags: SendFlags,
    ) -> Result<u32> {
        if mw.ty != MwType::Type2 {
            return Err(InvalidInput::MwType.into());
        }
        self.bind_any(wr_id, mw, Some(bind), flags)
    }

    /// The bind verb for type 1 window `mw` (`ibv_bind_mw`; rdma-core qp.c `mlx5_bind_mw`
    /// posts the same WQE on this QP): binds `bind`, or with `None` (or a zero length)
    /// unbinds. A type 1 window may be bound again while bound. Returns the new rkey; the
    /// completion ([`crate::WcOpcode::BindMw`]) comes on this QP's send CQ with `wr_id`.
    pub fn bind_mw(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow<H>,
        bind: Option<&MwBind<'_, H>>,
        flags: SendFlags,
    ) -> Result<u32> {
        if mw.ty != MwType::Type1 {
            return Err(InvalidInput::MwType.into());
        }
        self.bind_any(wr_id, mw, bind, flags)
    }

    fn bind_any(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow<H>,
        bind: Option<&MwBind<'_, H>>,
        flags: SendFlags,
    ) -> Result<u32> {
        let c = self.check_bind(mw, bind)?;
        let body = &c.body[..c.len];
        let f = self.umr_wr_fm_ce_se(flags);
        let opc = mlx5_prm::wqe::opcode::UMR;
        let at = self.write_raw(wr_id, opc, mw.key, body.len(), f, WC_OP_BIND, |b| {
            b.copy_from_slice(body)
        })?;
        self.ring_send(at, None);
        self.ctx_arc().quarantine_key(mw.key);
        mw.key = c.new_key;
        // The previous region goes only now: the new bind is posted behind everything that
        // could still use the window.
        mw.bound = c.mr;
        Ok(c.new_key)
    }

    fn check_bind(&self, mw: &MemoryWindow<H>, bind: Option<&MwBind<'_, H>>) -> Result<Checked<H>> {
        use wqe::umr_ctrl_seg::{mask as mk, *};
        let ctx = self.ctx_arc();
        ctx.check_alive()?;
        if !Arc::ptr_eq(&mw.pd.ctx, ctx) || mw.destroyed {
            return Err(InvalidInput::ForeignObject.into());
        }
        // rdma-core qp.c `_mlx5_post_send` builds bind WQEs for RC and UC only.
        if self.is_datagram() {
            return Err(InvalidInput::ServiceType.into());
        }
        // C10-72 (type 2); the same PD for type 1 too (driver choice, as the model).
        if !Arc::ptr_eq(self.pd_arc(), &mw.pd) {
            return Err(InvalidInput::PdMismatch.into());
        }
        let qp_bbs = self.max_wqe_bbs();
        let bind = bind.filter(|b| b.len != 0);
        let new_key = mw.next_key();
        let mut body = [0u8; SIZE + mkc::BYTES + KLM_DATA];
        let Some(b) = bind else {
            if mw.ty == MwType::Type2 {
                // o10-37.2.40: a type 2 window is invalidated, not bound to nothing.
                return Err(InvalidInput::ZeroLength.into());
            }
            if wqe::wqebbs(LOCAL_INV_DS) > qp_bbs {
                return Err(InvalidInput::NoMwRoom.into());
            }
            // Unbind of a type 1 window (rdma-core `set_bind_wr` with length 0).
            body[..SIZE].copy_from_slice(&umr_ctrl(
                FLAG_INLINE | FLAG_TRANSLATION_OFFSET_EN,
                0,
                mk::FREE | mk::KEY,
            ));
            let seg = &mut body[SIZE..SIZE + mkc::BYTES];
            let _ = mkc::FREE.set(seg, 1);
            let _ = mkc::QPN.set(seg, 0xff_ffff);
            let _ = mkc::MKEY_7_0.set(seg, new_key & 0xff);
            return Ok(Checked {
                mr: None,
                body,
                len: SIZE + mkc::BYTES,
                new_key,
            });
        };
        let m = b.mr.inner_arc().ok_or(InvalidInput::BadLkey(0))?;
        if !Arc::ptr_eq(&m.pd.ctx, ctx) {
            return Err(InvalidInput::ForeignObject.into());
        }
        if !Arc::ptr_eq(&m.pd, &mw.pd) {
            return Err(InvalidInput::PdMismatch.into());
        }
        let allowed = Access::REMOTE_READ.0
            | Access::REMOTE_WRITE.0
            | Access::REMOTE_ATOMIC.0
            | Access::LOCAL_WRITE.0
            | Access::ZERO_BASED.0;
        let a = b.access;
        if a.0 & !allowed != 0 || (mw.ty == MwType::Type1 && a.contains(Access::ZERO_BASED)) {
            return Err(InvalidInput::MwAccess.into());
        }
        if !m.access.contains(Access::MW_BIND) {
            return Err(InvalidInput::MwBindNotAllowed.into());
        }
        let writes = Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0 | Access::LOCAL_WRITE.0;
        if a.0 & writes != 0 && !m.access.contains(Access::LOCAL_WRITE) {
            return Err(InvalidInput::MwAccess.into());
        }
        let end = b.addr.checked_add(b.len).ok_or(InvalidInput::OutOfRange)?;
        if b.addr < m.iova || end > m.iova + m.len {
            return Err(InvalidInput::OutOfRange.into());
        }
        if b.len > MAX_WINDOW_LEN {
            return Err(InvalidInput::LengthOverflow.into());
        }
        if m.is_indirect() {
            // One KLM entry names one direct key (rdma-core `mlx5_bind_mw`: ENOTSUP for
            // other MR types).
            return Err(Error::Unsupported);
        }
        let ds = LOCAL_INV_DS + (KLM_DATA / wqe::SEND_WQE_DS) as u32;
        if wqe::wqebbs(ds) > qp_bbs {
            return Err(InvalidInput::NoMwRoom.into());
        }
        let type2 = mw.ty == MwType::Type2;
        let mut flags = FLAG_INLINE | FLAG_TRANSLATION_OFFSET_EN;
        let mut mask =
            mk::FREE | mk::KEY | mk::LEN | mk::START_ADDR | mk::LW | mk::RR | mk::RW | mk::A;
        if type2 {
            // rdma-core `MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE` (1 << 5, Linux device.h
            // `MLX5_UMR_CHECK_NOT_FREE`): fail unless the window is free.
            flags |= FLAG_CHECK_NOT_FREE;
            mask |= mk::QPN;
        }
        // `get_klm_octo(1)`: one entry rounded up to 4 octowords.
        body[..SIZE].copy_from_slice(&umr_ctrl(flags, 4, mask));
        let seg = &mut body[SIZE..SIZE + mkc::BYTES];
        let qpn = if type2 { self.qpn() } else { 0xff_ffff };
        let _ = mkc::QPN.set(seg, qpn);
        let _ = mkc::MKEY_7_0.set(seg, new_key & 0xff);
        let _ = mkc::LW.set(seg, a.contains(Access::LOCAL_WRITE) as u32);
        let _ = mkc::RR.set(seg, a.contains(Access::REMOTE_READ) as u32);
        let _ = mkc::RW.set(seg, a.contains(Access::REMOTE_WRITE) as u32);
        let _ = mkc::A.set(seg, a.contains(Access::REMOTE_ATOMIC) as u32);
        let start = if a.contains(Access::ZERO_BASED) {
            0
        } else {
            b.addr
        };
        let _ = mkc::START_ADDR.set_u64(seg, start);
        let _ = mkc::LEN.set_u64(seg, b.len);
        let k = SIZE + mkc::BYTES;
        body[k + mkey::KLM_BCOUNT..k + mkey::KLM_BCOUNT + 4]
            .copy_from_slice(&(b.len as u32).to_be_bytes());
        body[k + mkey::KLM_KEY..k + mkey::KLM_KEY + 4].copy_from_slice(&m.key.to_be_bytes());
        body[k + mkey::KLM_VA..k + mkey::KLM_VA + 8].copy_from_slice(&b.addr.to_be_bytes());
        Ok(Checked {
            mr: Some(m.clone()),
            body,
            len: k + KLM_DATA,
            new_key,
        })
    }
}
