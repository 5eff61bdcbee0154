//! Registration of regions one at a time: the one-page path through the mkey cache, the general
//! path (cache or commands), and the steps both share (parameters, ReDMArk key avoidance, wrapping).

use super::*;

/// How many new keys [`ProtectionDomain::avoid_recent`] takes before it settles for a recent one. With
/// a recent share `r` of an index's variants, all tries collide with odds `r^(AVOID_TRIES+1)`:
/// below 1e-39 at r = 1/16 and 1e-10 at r = 1/2.
const AVOID_TRIES: u32 = 32;

impl<H: Hal> ProtectionDomain<H> {
    /// Registers caller-owned physical memory: `chunks` (each physically contiguous) form
    /// the region `[iova, iova + total)` in order. Physically contiguous memory becomes one
    /// entry, huge pages one entry each (see [`mr::plan`]); the largest page size the chunks
    /// allow is used ([`MemoryRegion::translation_info`]). Any size and page mix: a list too
    /// long for one command, or an `iova` whose page offset differs from the first chunk's,
    /// becomes MTT keys under one indirect KLM key ([`mr::plan_reg`]). Neither the chunks
    /// nor `iova` need page alignment: the key covers exactly the region's bytes.
    ///
    /// # Safety
    /// The chunks must stay valid DMA memory, not used for anything else the NIC must not
    /// touch, until the region is deregistered and every WR using it has completed.
    pub unsafe fn reg_phys(
        &self,
        chunks: &[PhysChunk],
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion<H>> {
        // One page without relaxed ordering: the one-page path; anything else the general.
        if let Some((page_shift, entry, len)) = self.one_page_of(chunks, iova, access)? {
            if mr::relaxed_ordering(access, &self.inner.ctx.caps) == (false, false) {
                return self.reg_one_page(len, iova, access, page_shift, entry);
            }
        }
        self.reg_phys_general(chunks, iova, access)
    }

    /// A region of one chunk that one page translates ([`mr::one_page`]): `plan_phys`'s
    /// checks (one chunk: its length is the total), then `(page_shift, entry, len)`; `None`
    /// for a region of several chunks or pages (the general planner's).
    #[inline]
    pub(super) fn one_page_of(
        &self,
        chunks: &[PhysChunk],
        iova: u64,
        access: Access,
    ) -> Result<Option<(u32, u64, u64)>> {
        let [c] = chunks else { return Ok(None) };
        mr::check_request(c.len, iova, access, self.inner.ctx.caps.log_max_mrw_sz)?;
        Ok(mr::one_page(c, iova).map(|(page_shift, entry)| (page_shift, entry, c.len)))
    }

    /// [`ProtectionDomain::reg_phys`] of anything [`ProtectionDomain::reg_one_page`] does not
    /// take: the general planner, then the cache or commands.
    #[inline(never)]
    fn reg_phys_general(
        &self,
        chunks: &[PhysChunk],
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion<H>> {
        let plan = self.plan_phys(chunks, iova, access)?;
        self.register(iova, plan.1, access, plan.0, None)
    }

    /// [`ProtectionDomain::reg_phys`] of `len` bytes of one chunk that one page translates (every small
    /// registration) without relaxed ordering, once `plan_phys`'s checks passed, from the
    /// mkey cache: the same plan ([`mr::one_page`] gave `page_shift` and `entry`,
    /// `one_page_is_the_plan_of_one_entry`) and the same registration from the cache as
    /// [`ProtectionDomain::reg_pooled`] ([`ProtectionDomain::reg_cached`]), without building
    /// the general plan first; the plan is written into the region allocation parked with
    /// the key. A cache that cannot serve it (none, busy, no key left, or the device
    /// refused the UMR: the key is back in the cache) registers by command, as the general
    /// path then does.
    #[inline]
    fn reg_one_page(
        &self,
        len: u64,
        iova: u64,
        access: Access,
        page_shift: u32,
        entry: u64,
    ) -> Result<MemoryRegion<H>> {
        let r = self.reg_cached(iova, len, access, page_shift, &[entry]);
        match r {
            Ok(Some((key, class, parked))) => {
                Ok(self
                    .wrap_cached_one_page(parked, key, class, iova, len, access, page_shift, entry))
            }
            Ok(_) => self.reg_one_page_cmd(iova, len, access, page_shift, entry),
            Err(e) => Err(e),
        }
    }

    /// [`ProtectionDomain::reg_one_page`] by command: no cache, or it could not serve.
    #[inline(never)]
    fn reg_one_page_cmd(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        page_shift: u32,
        entry: u64,
    ) -> Result<MemoryRegion<H>> {
        let plan = KlmPlan::one_page(page_shift, entry, iova);
        self.register_cmd(iova, len, access, plan, None)
    }

    /// [`ProtectionDomain::reg_phys`] under its verbs name: the region's address space starts
    /// at the `iova` the application chooses (`ibv_reg_mr_iova2`), whatever the chunks' bus
    /// addresses and page offsets.
    ///
    /// # Safety
    /// As [`ProtectionDomain::reg_phys`].
    pub unsafe fn reg_phys_iova(
        &self,
        chunks: &[PhysChunk],
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion<H>> {
        // SAFETY: the caller upholds reg_phys's contract.
        unsafe { self.reg_phys(chunks, iova, access) }
    }

    pub(in crate::verbs) fn plan_phys(
        &self,
        chunks: &[PhysChunk],
        iova: u64,
        access: Access,
    ) -> Result<(KlmPlan, u64)> {
        let total = chunks.iter().try_fold(0u64, |a, c| a.checked_add(c.len));
        let Some(total) = total else {
            return Err(InvalidInput::LengthOverflow.into());
        };
        let caps = &self.inner.ctx.caps;
        mr::check_request(total, iova, access, caps.log_max_mrw_sz)?;
        Ok((
            mr::plan_reg(chunks, iova, caps.log_max_klm_list_size)?,
            total,
        ))
    }

    pub(in crate::verbs) fn params<'a>(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        _plan: &KlmPlan,
        xlt: Xlt<'a>,
    ) -> MkeyParams<'a> {
        let ctx = &self.inner.ctx;
        let (ro_write, ro_read) = mr::relaxed_ordering(access, &ctx.caps);
        MkeyParams {
            pdn: self.inner.pdn,
            iova,
            len,
            access,
            variant: (ctx.random() & 0xff) as u8,
            pg_access: ctx.caps.pg,
            ro_write,
            ro_read,
            xlt,
            umr_en: false,
            free: false,
            xlt_room: 0,
        }
    }

    /// Destroys `keys` (inner keys of a failed or torn-down registration); false when one
    /// may live on (its memory must then be held).
    pub(in crate::verbs) fn destroy_keys(&self, keys: &[u32]) -> bool {
        let ctx = &self.inner.ctx;
        let mut all = true;
        for &k in keys.iter().rev() {
            if ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, k)).is_err() {
                all = false;
            }
        }
        all
    }

    /// A registration by command that failed with `e` before its key was made: its inner
    /// keys `inner` destroyed, and `buf` freed once the device provably gave it back
    /// ([`CtxInner::release_after`]) or held for good when an inner key may live on.
    fn undo_inner(&self, inner: &[u32], e: &Error, buf: Option<DmaMem<H::Dma>>) {
        let ctx = &self.inner.ctx;
        if self.destroy_keys(inner) {
            ctx.release_after(e, buf);
        } else {
            ctx.hold(buf);
        }
    }

    /// Registers the planned region `plan` (`len` bytes at `iova`, translation memory `buf`
    /// if the plan needed one): from the mkey cache by one UMR when a pooled key fits, else
    /// by commands ([`ProtectionDomain::register_cmd`]).
    pub(in crate::verbs) fn register(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        plan: KlmPlan,
        buf: Option<DmaMem<H::Dma>>,
    ) -> Result<MemoryRegion<H>> {
        if let Some((key, class, parked)) = self.reg_pooled(iova, len, access, &plan)? {
            return Ok(self.wrap_cached(parked, key, class, iova, len, access, plan, buf));
        }
        self.register_cmd(iova, len, access, plan, buf)
    }

    /// [`ProtectionDomain::register`] by commands (CREATE_MKEY; inner MTT keys first for an
    /// indirect key).
    pub(in crate::verbs) fn register_cmd(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        plan: KlmPlan,
        buf: Option<DmaMem<H::Dma>>,
    ) -> Result<MemoryRegion<H>> {
        let ctx = &self.inner.ctx;
        let hal = &ctx.hal;
        let mut buf = buf;
        // Inner MTT keys first: local rights only (LR, and LW when the region is writable),
        // so that only the indirect key is usable remotely.
        let mut inner = Vec::with_capacity(plan.segments.len());
        let mut klms = Vec::with_capacity(plan.segments.len());
        for &(va, slen, first, count) in &plan.segments {
            let p = self.params(
                va,
                slen,
                Access(access.0 & (Access::LOCAL_WRITE.0 | Access::RELAXED_ORDERING.0)),
                &plan,
                Xlt::Mtt {
                    page_shift: plan.tr.page_shift,
                    entries: &plan.tr.entries[first..first + count],
                },
            );
            match ctx.with_dev(|d| d.create_mkey(hal, &p)) {
                Ok(k) => {
                    inner.push(k);
                    klms.push(Klm {
                        byte_count: slen as u32, // at most MAX_KLM_BYTE_COUNT (plan_reg)
                        mkey: k,
                        address: va,
                    });
                }
                Err(e) => {
                    self.undo_inner(&inner, &e, buf);
                    return Err(e);
                }
            }
        }
        let xlt = if plan.segments.is_empty() {
            Xlt::Mtt {
                page_shift: plan.tr.page_shift,
                entries: &plan.tr.entries,
            }
        } else {
            Xlt::Klm(&klms)
        };
        let mut params = self.params(iova, len, access, &plan, xlt);
        let key = match ctx.with_dev(|d| d.create_mkey(hal, &params)) {
            Ok(k) => k,
            Err(e) => {
                // A garbled or lost reply: the key may exist and translate to `buf`.
                self.undo_inner(&inner, &e, buf);
                return Err(e);
            }
        };
        let key = match self.avoid_recent(key, &mut params, &mut buf) {
            Ok(k) => k,
            Err(e) => {
                // `buf` is already freed or held; inner keys under a key that may live on
                // are destroyed so that it translates nothing.
                self.destroy_keys(&inner);
                return Err(e);
            }
        };
        Ok(self.wrap(key, inner, iova, len, access, plan, buf))
    }

    /// A registration from the mkey cache: one UMR WQE enabling a cached key with the
    /// region's translation, access and PD, and a new random variant. `None` (nothing done)
    /// when the region needs more than one MTT key or relaxed ordering, or the cache has no
    /// key that fits; a UMR refused with an error CQE returns the key to the cache and
    /// `None`, and the caller registers by command.
    pub(in crate::verbs) fn reg_pooled(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        plan: &KlmPlan,
    ) -> Result<Option<Cached<H>>> {
        use crate::umr::CACHE_CLASSES;
        let ctx = &self.inner.ctx;
        let entries = &plan.tr.entries;
        let max = CACHE_CLASSES[CACHE_CLASSES.len() - 1] as usize;
        if !plan.segments.is_empty()
            || entries.len() > max
            || mr::relaxed_ordering(access, &ctx.caps) != (false, false)
        {
            return Ok(None);
        }
        self.reg_cached(iova, len, access, plan.tr.page_shift, entries)
    }

    /// A registration from the mkey cache ([`enable_cached`]) of `len` bytes at `iova`
    /// translated by `entries` in pages of `page_shift`: `None` when the cache cannot serve
    /// it (none, busy, no key that fits, or the device refused the UMR).
    // inline(always): UMR cache reg 1,419 vs 1,570 instructions per MR (reg_mr --instructions)
    #[inline(always)]
    fn reg_cached(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        page_shift: u32,
        entries: &[u64],
    ) -> Result<Option<Cached<H>>> {
        let ctx = &self.inner.ctx;
        let pdn = self.inner.pdn;
        let r = ctx.umr_try_with(
            // inline(always): UMR cache reg 1,417 vs 1,582 instructions per MR (reg_mr
            // --instructions)
            #[inline(always)]
            |u, hal| enable_cached(u, hal, ctx, pdn, access, iova, len, page_shift, entries),
        )?;
        Ok(r.flatten())
    }

    /// ReDMArk: a key must not reappear right after it was destroyed. If the firmware reused
    /// the index and the random variant matched, take a new key first, then drop the
    /// collision. Up to [`AVOID_TRIES`] new keys: each collides with the odds of its index's
    /// share of recent variants (1/16 on a device with 16 usable indices; four tries left a
    /// recent key about once in 1.4 million registrations there), so a recent key comes
    /// back only when no index has fresh variants left.
    pub(in crate::verbs) fn avoid_recent(
        &self,
        key: u32,
        params: &mut MkeyParams<'_>,
        buf: &mut Option<DmaMem<H::Dma>>,
    ) -> Result<u32> {
        let ctx = &self.inner.ctx;
        let hal = &ctx.hal;
        let mut key = key;
        let mut tries = 0;
        while ctx.recent_keys.lock().contains(key) && tries < AVOID_TRIES {
            params.variant = params.variant.wrapping_add(1 + (ctx.random() % 255) as u8);
            let k2 = ctx.with_dev(|d| d.create_mkey(hal, params));
            // The collision goes either way; while it lives, it translates to `buf` too.
            let old = ctx.with_dev(|d| d.destroy_mkey(hal, key));
            match (k2, old) {
                (Ok(k2), Ok(())) => key = k2,
                (Ok(k2), Err(e)) => {
                    // The old key lives on: `buf` can never be freed; drop the new key too.
                    let _ = ctx.with_dev(|d| d.destroy_mkey(hal, k2));
                    ctx.hold(buf.take());
                    return Err(e);
                }
                (Err(e), Ok(())) => {
                    ctx.release_after(&e, buf.take());
                    return Err(e);
                }
                (Err(e), Err(_)) => {
                    ctx.hold(buf.take());
                    return Err(e);
                }
            }
            tries += 1;
        }
        Ok(key)
    }

    #[allow(clippy::too_many_arguments)]
    pub(in crate::verbs) fn wrap(
        &self,
        key: u32,
        inner_keys: Vec<u32>,
        iova: u64,
        len: u64,
        access: Access,
        plan: KlmPlan,
        buf: Option<DmaMem<H::Dma>>,
    ) -> MemoryRegion<H> {
        self.inner
            .ctx
            .mrs
            .write()
            .insert(MrInfo::new(key, iova, len, access));
        MemoryRegion {
            inner: Some(Arc::new(MrInner {
                pd: self.inner.clone(),
                key,
                key_be: key.to_be(),
                iova,
                len,
                access,
                inner_keys,
                plan,
                buf,
                destroyed: AtomicBool::new(false),
                pooled: None,
            })),
        }
    }

    /// [`ProtectionDomain::wrap`] for a key from the mkey cache (size class `class`): the
    /// region allocation the key was parked with, if any, is overwritten in place (no
    /// allocation; its old translation list is dropped).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(in crate::verbs) fn wrap_cached(
        &self,
        parked: crate::umr::Parked<H>,
        key: u32,
        class: u8,
        iova: u64,
        len: u64,
        access: Access,
        plan: KlmPlan,
        buf: Option<DmaMem<H::Dma>>,
    ) -> MemoryRegion<H> {
        if let Some(mut arc) = parked {
            if let Some(m) = Arc::get_mut(&mut arc) {
                self.refill(m, key, class, iova, len, access);
                m.plan = plan;
                m.buf = buf;
                return MemoryRegion { inner: Some(arc) };
            }
        }
        let mut m = self.wrap(key, Vec::new(), iova, len, access, plan, buf);
        if let Some(i) = m.inner.as_mut().and_then(Arc::get_mut) {
            i.pooled = Some(class);
        }
        m
    }

    /// [`ProtectionDomain::wrap_cached`] of a one-page region ([`KlmPlan::one_page`]): the
    /// plan is written field by field into the parked allocation (no plan built apart and
    /// moved in).
    #[allow(clippy::too_many_arguments)]
    // inline(always): UMR cache reg 1,419 vs 1,436 instructions per MR, batched 1,231 vs 1,247
    // (reg_mr --instructions)
    #[inline(always)]
    pub(super) fn wrap_cached_one_page(
        &self,
        parked: crate::umr::Parked<H>,
        key: u32,
        class: u8,
        iova: u64,
        len: u64,
        access: Access,
        page_shift: u32,
        entry: u64,
    ) -> MemoryRegion<H> {
        if let Some(mut arc) = parked {
            if let Some(m) = Arc::get_mut(&mut arc) {
                self.refill(m, key, class, iova, len, access);
                m.plan.tr.page_shift = page_shift;
                m.plan.tr.entries.set_one(entry);
                m.plan.mtt_va = iova;
                m.plan.segments.clear();
                if m.buf.is_some() {
                    m.buf = None;
                }
                return MemoryRegion { inner: Some(arc) };
            }
        }
        let plan = KlmPlan::one_page(page_shift, entry, iova);
        self.wrap_cached(None, key, class, iova, len, access, plan, None)
    }

    /// A parked region allocation `m` (of a key from the mkey cache, size class `class`)
    /// made region `key` of `[iova, iova + len)` with `access` in this PD, and the key
    /// entered in the region table: everything but its plan and buffer, which the caller
    /// writes ([`ProtectionDomain::wrap_cached`], [`ProtectionDomain::wrap_cached_one_page`]).
    #[inline]
    fn refill(&self, m: &mut MrInner<H>, key: u32, class: u8, iova: u64, len: u64, access: Access) {
        self.inner
            .ctx
            .mrs
            .write()
            .insert(MrInfo::new(key, iova, len, access));
        // The UMR PD's reference goes (it is never the last one: the UMR state holds that
        // PD).
        m.pd = self.inner.clone();
        m.key = key;
        m.key_be = key.to_be();
        m.iova = iova;
        m.len = len;
        m.access = access;
        m.inner_keys.clear();
        *m.destroyed.get_mut() = false;
        m.pooled = Some(class);
    }
}
