//! Memory regions: the handle, its translation, rereg, and the region table the lkey check reads.

use super::*;

impl<H: Hal> MrInner<H> {
    /// rereg of a cached key by one UMR (Linux ib/umr.c `mlx5r_umr_rereg_pd_access`: "fail
    /// if free", access and PD masks; with a new translation also start/len/page size and
    /// the entries, as `mlx5r_umr_update_mr_pas`). `Ok(false)`: the new translation does not
    /// fit the key (more than one MTT key, or above its size class), or the device refused
    /// the UMR (the key is unchanged); the caller falls back to create-then-destroy.
    pub(super) fn rereg_umr(
        &mut self,
        pd: &ProtectionDomain<H>,
        access: Access,
        translation: Option<(&[PhysChunk], u64)>,
    ) -> Result<bool> {
        use crate::umr::{flags, mkey_mask as mk, MkeySeg, Umr, CACHE_CLASSES};
        let Some(class) = self.pooled else {
            return Ok(false);
        };
        let ctx = self.pd.ctx.clone();
        let room = CACHE_CLASSES.get(class as usize).copied().unwrap_or(0) as usize;
        let (plan, iova, len) = match translation {
            Some((chunks, iova)) => {
                let (plan, len) = pd.plan_phys(chunks, iova, access)?;
                (plan, iova, len)
            }
            None => {
                mr::check_request(self.len, self.iova, access, ctx.caps.log_max_mrw_sz)?;
                (self.plan.clone(), self.iova, self.len)
            }
        };
        if !plan.segments.is_empty()
            || plan.tr.entries.len() > room
            || mr::relaxed_ordering(access, &ctx.caps) != (false, false)
        {
            return Ok(false);
        }
        let mut mask = mk::LR | mk::LW | mk::RR | mk::RW | mk::A | mk::PD;
        let mtt: Vec<u64> = if translation.is_some() {
            mask |= mk::START_ADDR | mk::LEN | mk::PAGE_SIZE;
            plan.tr
                .entries
                .iter()
                .map(|e| e | mlx5_prm::mkey::MTT_PRESENT)
                .collect()
        } else {
            Vec::new()
        };
        let umr = Umr {
            key: self.key,
            check: flags::CHECK_FREE,
            mask,
            seg: MkeySeg {
                free: false,
                pd: pd.inner.pdn,
                qpn: 0xff_ffff,
                variant: self.key as u8,
                access,
                start: iova,
                len,
                log_page_size: plan.tr.page_shift,
            },
            mtt: &mtt,
            mtt_offset: 0,
        };
        match ctx.umr_with(false, |u, hal| u.run(hal, &umr)) {
            Ok(Some(())) => {}
            Ok(None) | Err(Error::Umr { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
        self.pd = pd.inner.clone();
        self.access = access;
        self.iova = iova;
        self.len = len;
        self.plan = plan;
        if translation.is_some() {
            // The key no longer translates to the old memory (the UMR completed).
            self.buf = None;
        }
        ctx.mrs
            .write()
            .insert(MrInfo::new(self.key, iova, len, access));
        Ok(true)
    }

    pub(super) fn destroy(&mut self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let ctx = &self.pd.ctx;
        ctx.mrs.write().remove(self.key, self.pooled.is_some());
        let key = self.key;
        if let Some(class) = self.pooled {
            let revoked = ctx.umr_with(false, |u, hal| {
                u.run(hal, &revoke(key, u.pdn()))?;
                u.put(key, class, None);
                Ok(())
            });
            if let Ok(Some(())) = revoked {
                ctx.quarantine_key(key);
                return Ok(());
            }
            // No UMR QP any more, or the UMR failed: destroy the key by command.
            ctx.mrs.write().forget_slot(key);
        }
        self.destroy_by_command()
    }

    /// [`MrInner::destroy`] of a cached key whose handle was the only reference: the same
    /// revoking UMR, waited for, and the key goes back to the cache together with this
    /// allocation (its buffer and PD reference dropped once the revocation completed), for
    /// the key's next registration to overwrite in place ([`ProtectionDomain::wrap_cached`]).
    pub(super) fn destroy_cached(this: Arc<Self>, class: u8) -> Result<()> {
        if this.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let ctx = this.pd.ctx.clone();
        let key = this.key;
        ctx.mrs.write().remove(key, true);
        let mut slot = Some(this);
        let revoked = ctx.umr_with(false, |u, hal| {
            u.run(hal, &revoke(key, u.pdn()))?;
            // The revocation completed: nothing reaches the memory through the key any
            // more. The buffer and the region's PD reference are dropped after the UMR
            // lock is released.
            let mut spare = None;
            let parked = slot.take().and_then(|mut a| {
                let m = Arc::get_mut(&mut a)?;
                let pd = core::mem::replace(&mut m.pd, u.pd_arc().clone());
                spare = Some((pd, m.buf.take()));
                Some(a)
            });
            u.put(key, class, parked);
            Ok(spare)
        });
        if let Ok(Some(spare)) = revoked {
            drop(spare);
            ctx.quarantine_key(key);
            return Ok(());
        }
        // No UMR QP any more, or the UMR failed: destroy the key by command.
        ctx.mrs.write().forget_slot(key);
        match slot.as_mut().and_then(Arc::get_mut) {
            Some(m) => m.destroy_by_command(),
            // Not reached: the handle held the only reference, and the UMR did not take it.
            None => Ok(()),
        }
    }

    /// DESTROY_MKEY of the key, then of its inner keys; on an error the memory is held.
    fn destroy_by_command(&mut self) -> Result<()> {
        let ctx = &self.pd.ctx;
        let key = self.key;
        let mut r = ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, key));
        // The inner keys after the indirect key that names them.
        for &k in self.inner_keys.iter().rev() {
            let ri = ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, k));
            if r.is_ok() {
                r = ri;
            }
        }
        if r.is_err() {
            // The key may still exist and translate to the memory, whatever the error: keep
            // it, counted in the quarantine (freed only after a clean teardown).
            ctx.hold(self.buf.take());
        }
        ctx.quarantine_key(key);
        r
    }
}

/// The UMR that revokes cached key `key` (Linux ib/umr.c `mlx5r_umr_revoke_mr`: free, and
/// the UMR PD `umr_pdn`), waited for by the caller: once it completed, no access through the
/// key succeeds.
fn revoke(key: u32, umr_pdn: u32) -> crate::umr::Umr<'static> {
    use crate::umr::{MkeySeg, Umr, REVOKE_MASK};
    Umr {
        key,
        check: 0,
        mask: REVOKE_MASK,
        seg: MkeySeg {
            free: true,
            pd: umr_pdn,
            qpn: 0xff_ffff,
            variant: key as u8,
            ..MkeySeg::default()
        },
        mtt: &[],
        mtt_offset: 0,
    }
}

impl<H: Hal> Drop for MrInner<H> {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// What [`MemoryRegion::rereg`] changes; `None` keeps the current value.
pub struct Rereg<'a, H: Hal> {
    /// New chunks and IOVA (`IBV_REREG_MR_CHANGE_TRANSLATION`).
    pub translation: Option<(&'a [PhysChunk], u64)>,
    /// New protection domain (`IBV_REREG_MR_CHANGE_PD`).
    pub pd: Option<&'a ProtectionDomain<H>>,
    /// New access flags (`IBV_REREG_MR_CHANGE_ACCESS`).
    pub access: Option<Access>,
}

impl<H: Hal> Default for Rereg<'_, H> {
    fn default() -> Self {
        Rereg {
            translation: None,
            pd: None,
            access: None,
        }
    }
}

/// How a region is translated ([`MemoryRegion::translation_info`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MrTranslation {
    /// log2 of the page size: the largest the chunks allow (12 ..= 30).
    pub page_shift: u32,
    /// MTT entries, over all keys.
    pub mtt_entries: usize,
    /// MTT keys holding them (1 for a direct key).
    pub mtt_keys: usize,
    /// Entries of the indirect KLM key joining them (0: direct MTT key, no KLM).
    pub klm_entries: usize,
}

impl<H: Hal> MemoryRegion<H> {
    pub(super) fn get(&self) -> Result<&Arc<MrInner<H>>> {
        self.inner.as_ref().ok_or(Error::Closed)
    }
    /// The shared state, `None` after dereg.
    pub(crate) fn inner_arc(&self) -> Option<&Arc<MrInner<H>>> {
        self.inner.as_ref()
    }
    /// Local key (0 after dereg).
    pub fn lkey(&self) -> u32 {
        self.inner.as_ref().map_or(0, |m| m.key)
    }
    /// Remote key (the same key).
    pub fn rkey(&self) -> u32 {
        self.lkey()
    }
    /// First address of the region's address space.
    pub fn addr(&self) -> u64 {
        self.inner.as_ref().map_or(0, |m| m.iova)
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.inner.as_ref().map_or(0, |m| m.len)
    }
    /// True after dereg or for an empty region (never registered).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Access flags.
    pub fn access(&self) -> Access {
        self.inner.as_ref().map_or(Access::NONE, |m| m.access)
    }
    /// `(translation entries, log2 page size)` the registration used: MTT entries over
    /// all its keys, and the page size, the largest the chunks allow.
    pub fn translation(&self) -> (usize, u32) {
        let t = self.translation_info();
        (t.mtt_entries, t.page_shift)
    }
    /// How the region is translated on the device (zeros after dereg).
    pub fn translation_info(&self) -> MrTranslation {
        self.inner
            .as_ref()
            .map_or(MrTranslation::default(), |m| MrTranslation {
                page_shift: m.plan.tr.page_shift,
                mtt_entries: m.plan.tr.entries.len(),
                mtt_keys: m.plan.segments.len().max(1),
                klm_entries: m.plan.segments.len(),
            })
    }
    /// Copies `src` into the region at `offset` (regions that own their memory only).
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let m = self.get()?;
        let buf = m.buf.as_ref().ok_or(Error::Unsupported)?;
        let off = usize::try_from(offset).map_err(|_| InvalidInput::OutOfRange)?;
        buf.write(off, src)
            .map_err(|_| InvalidInput::OutOfRange.into())
    }
    /// Copies from the region at `offset` into `dst` (regions that own their memory only).
    /// Read what the device wrote after its completion was polled: the poll's read barrier
    /// orders the CQE before these plain loads, as an ibverbs application reads its buffers.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let m = self.get()?;
        let buf = m.buf.as_ref().ok_or(Error::Unsupported)?;
        let off = usize::try_from(offset).map_err(|_| InvalidInput::OutOfRange)?;
        buf.read(off, dst)
            .map_err(|_| InvalidInput::OutOfRange.into())
    }
    /// The `len` bytes at `offset` in place, with no copy (regions that own their memory
    /// only): a received message handed to its consumer where it landed, as Linux
    /// nvmet-rdma executes a command from its receive buffer and reposts that receive with
    /// the response (drivers/nvme/target/rdma.c `nvmet_rdma_queue_response`). Read after the
    /// completion was polled: the poll's read barrier orders it first, as for
    /// [`MemoryRegion::read`].
    ///
    /// # Safety
    /// The device does not write `[offset, offset + len)` while the slice lives (no receive
    /// or remote access covering it is outstanding), and nothing writes it meanwhile
    /// ([`MemoryRegion::write`]).
    pub unsafe fn bytes(&self, offset: u64, len: usize) -> Result<&[u8]> {
        let buf = self.get()?.buf.as_ref().ok_or(Error::Unsupported)?;
        let off = usize::try_from(offset).map_err(|_| InvalidInput::OutOfRange)?;
        // SAFETY: the caller keeps the device and other writers off the range for the
        // slice's life; `bytes` checks that it lies inside the buffer.
        unsafe { buf.bytes(off, len) }.map_err(|_| InvalidInput::OutOfRange.into())
    }
    /// The memory the region owns (regions that own their memory only), for in-place views.
    pub(crate) fn mem(&self) -> Result<&DmaMem<H::Dma>> {
        self.get()?.buf.as_ref().ok_or(Error::Unsupported)
    }
    /// One byte of the region at `offset`, read volatile: for polling a byte the peer's RDMA
    /// WRITE changes with no local completion (perftest `run_iter_lat_write` polls the last
    /// byte of its buffer). Regions that own their memory only.
    pub fn read_volatile_u8(&self, offset: u64) -> Result<u8> {
        let m = self.get()?;
        let buf = m.buf.as_ref().ok_or(Error::Unsupported)?;
        let off = usize::try_from(offset).map_err(|_| InvalidInput::OutOfRange)?;
        buf.read_u8(off)
            .map_err(|_| InvalidInput::OutOfRange.into())
    }
    /// A scatter/gather element over `[offset, offset + len)` of this region.
    pub fn sge(&self, offset: u64, len: u32) -> Sge<'_, H> {
        Sge {
            mr: self,
            offset,
            len,
        }
    }
    /// Re-registers the region (`ibv_rereg_mr`): a new translation (`IBV_REREG_MR_CHANGE_TRANSLATION`:
    /// new chunks at a new IOVA), a new PD (`_CHANGE_PD`) and/or new access flags
    /// (`_CHANGE_ACCESS`), each alone or together; what is not changed is kept.
    ///
    /// Without UMR this is create-then-destroy: new keys are created first, then the old
    /// ones destroyed, so **the lkey and rkey change** (as `ibv_rereg_mr` allows: it returns
    /// the new keys in the MR). A region that owns its memory ([`ProtectionDomain::alloc_mr`])
    /// keeps it when the translation is not changed, and frees it when it is.
    ///
    /// Failure, as the ibv_rereg_mr(3) man page has it: an input error, a device error
    /// creating the new keys, or [`Error::Busy`] (WRs in flight) leaves the MR exactly as it
    /// was (`IBV_REREG_MR_ERR_INPUT`: old MR valid). An error destroying the OLD keys is
    /// returned after the region was re-registered: the MR holds the new keys and is valid;
    /// the old keys' memory is quarantined, and a region that owned its memory can no longer
    /// [`read`](MemoryRegion::read) / [`write`](MemoryRegion::write) it.
    ///
    /// # Safety
    /// With a new translation: as [`ProtectionDomain::reg_phys`] for the new chunks.
    pub unsafe fn rereg(&mut self, change: Rereg<'_, H>) -> Result<()> {
        if change.translation.is_none() && change.pd.is_none() && change.access.is_none() {
            return Err(InvalidInput::NothingToChange.into());
        }
        let Some(arc) = self.inner.take() else {
            return Err(Error::Closed);
        };
        let mut old = match Arc::try_unwrap(arc) {
            Ok(m) => m,
            Err(arc) => {
                self.inner = Some(arc);
                return Err(Error::Busy);
            }
        };
        let pd = match change.pd {
            Some(p) => ProtectionDomain {
                inner: p.inner.clone(),
            },
            None => ProtectionDomain {
                inner: old.pd.clone(),
            },
        };
        // Another context's PD cannot hold this region.
        if !Arc::ptr_eq(&pd.inner.ctx, &old.pd.ctx) {
            self.inner = Some(Arc::new(old));
            return Err(InvalidInput::ForeignObject.into());
        }
        let access = change.access.unwrap_or(old.access);
        // A key from the mkey cache is changed in place by one UMR: lkey and rkey stay.
        if old.pooled.is_some() {
            match old.rereg_umr(&pd, access, change.translation) {
                Ok(true) => {
                    self.inner = Some(Arc::new(old));
                    return Ok(());
                }
                Ok(false) => {} // not possible by UMR: create-then-destroy below
                Err(e) => {
                    self.inner = Some(Arc::new(old));
                    return Err(e);
                }
            }
        }
        let created = match change.translation {
            Some((chunks, iova)) => pd
                .plan_phys(chunks, iova, access)
                .and_then(|(plan, len)| pd.register(iova, len, access, plan, None)),
            None => mr::check_request(old.len, old.iova, access, pd.inner.ctx.caps.log_max_mrw_sz)
                .and_then(|()| pd.register(old.iova, old.len, access, old.plan.clone(), None)),
        };
        let mut new = match created {
            Ok(m) => m,
            Err(e) => {
                self.inner = Some(Arc::new(old));
                return Err(e);
            }
        };
        let r = old.destroy();
        if r.is_ok() && change.translation.is_none() {
            // The same memory: the buffer moves to the new keys.
            if let Some(n) = new.inner.as_mut().and_then(Arc::get_mut) {
                n.buf = old.buf.take();
            }
        }
        drop(old); // frees a buffer the new translation no longer uses
        *self = MemoryRegion {
            inner: new.inner.take(),
        };
        r
    }

    /// Deregisters now. Deregistering twice is harmless; fails with [`Error::Busy`] (and
    /// stays registered) while posted WRs still reference the region or a QP has it bound
    /// ([`QueuePair::bind_mr`]).
    pub fn dereg(&mut self) -> Result<()> {
        let Some(mut arc) = self.inner.take() else {
            return Ok(());
        };
        // Only reference (no Weak references to regions exist).
        let Some(m) = Arc::get_mut(&mut arc) else {
            self.inner = Some(arc);
            return Err(Error::Busy);
        };
        match m.pooled {
            Some(class) => MrInner::destroy_cached(arc, class),
            None => m.destroy(),
        }
    }
}

impl<H: Hal> Drop for MemoryRegion<H> {
    /// A dropped handle deregisters as [`MemoryRegion::dereg`] does when it holds the only
    /// reference (a cached key keeps its allocation); otherwise the last in-flight holder
    /// destroys the region when it lets go (`Drop` of the region state).
    fn drop(&mut self) {
        if self.inner.as_ref().is_some_and(|m| m.pooled.is_some()) {
            let _ = self.dereg();
        }
    }
}
