//! Protection domains, and what they create: regions (by command, by UMR, in batches), queue pairs.

use super::*;

/// How many new keys [`ProtectionDomain::avoid_recent`] takes before it settles for a recent one. With
/// a recent share `r` of an index's variants, all tries collide with odds `r^(AVOID_TRIES+1)`:
/// below 1e-39 at r = 1/16 and 1e-10 at r = 1/2.
const AVOID_TRIES: u32 = 32;

/// A key enabled from the mkey cache: `(key, size class, the region allocation parked with it)`.
type Cached<H> = (u32, u8, crate::umr::Parked<H>);

/// A region of [`ProtectionDomain::reg_mr_batch`] planned and not registered yet, as one
/// direct key. Small (a region's entry is copied around as the batch moves on): a general
/// plan lives in the batch's side list.
#[derive(Clone, Copy)]
enum Planned {
    /// One page translates it ([`mr::one_page`]); its general plan is
    /// [`KlmPlan::one_page`], built only when it goes by command.
    One {
        page_shift: u32,
        entry: u64,
        len: u64,
    },
    /// The general plan `generals[at]` (no inner keys) and the length.
    Plan { at: usize, len: u64 },
}

impl Planned {
    /// The translation's entries (`g`: the batch's general plans).
    #[inline(always)]
    fn entries<'a>(&'a self, g: &'a [KlmPlan]) -> &'a [u64] {
        match self {
            Planned::One { entry, .. } => core::slice::from_ref(entry),
            Planned::Plan { at, .. } => g.get(*at).map_or(&[], |p| &p.tr.entries[..]),
        }
    }

    /// One direct key (no inner keys).
    #[inline(always)]
    fn direct(&self, g: &[KlmPlan]) -> bool {
        match self {
            Planned::One { .. } => true,
            Planned::Plan { at, .. } => g.get(*at).is_some_and(|p| p.segments.is_empty()),
        }
    }

    #[inline(always)]
    fn len(&self) -> u64 {
        match self {
            Planned::One { len, .. } | Planned::Plan { len, .. } => *len,
        }
    }

    #[inline(always)]
    fn page_shift(&self, g: &[KlmPlan]) -> u32 {
        match self {
            Planned::One { page_shift, .. } => *page_shift,
            Planned::Plan { at, .. } => g.get(*at).map_or(0, |p| p.tr.page_shift),
        }
    }
}

/// Protection domain state shared with its MRs and QPs.
pub(crate) struct PdInner<H: Hal> {
    pub(crate) ctx: Arc<CtxInner<H>>,
    pub(crate) pdn: u32,
}

impl<H: Hal> Drop for PdInner<H> {
    fn drop(&mut self) {
        let ctx = &self.ctx;
        let pdn = self.pdn;
        let _ = ctx.with_dev(|d| d.dealloc_pd(&ctx.hal, pdn));
    }
}

/// A protection domain.
pub struct ProtectionDomain<H: Hal> {
    pub(super) inner: Arc<PdInner<H>>,
}

impl<H: Hal> ProtectionDomain<H> {
    /// A PD of the driver's own (the UMR QP's).
    pub(crate) fn alloc_internal(ctx: &Arc<CtxInner<H>>) -> Result<Self> {
        let pdn = ctx.with_dev(|d| d.alloc_pd(&ctx.hal))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                pdn,
            }),
        })
    }

    pub(crate) fn inner_arc(&self) -> &Arc<PdInner<H>> {
        &self.inner
    }

    /// Creates a free MTT key with `mkc.umr_en`, room for `mtt_room` translation entries and
    /// a random variant, in this PD: a key that only UMR WQEs ([`Context::post_umr`]) enable
    /// and load (Linux ib/mr.c `set_cache_mkc`: `free`, `umr_en`, the translation size, no
    /// entries). Destroy it with [`ProtectionDomain::destroy_umr_mkey`].
    pub fn alloc_umr_mkey(&self, mtt_room: u32) -> Result<u32> {
        let ctx = &self.inner.ctx;
        ctx.check_alive()?;
        if mtt_room == 0 || mtt_room as usize > mr::MAX_MTT_PER_MKEY {
            return Err(InvalidInput::OutOfRange.into());
        }
        let p = MkeyParams {
            pdn: self.inner.pdn,
            iova: 0,
            len: 0,
            access: Access::NONE,
            variant: (ctx.random() & 0xff) as u8,
            pg_access: false,
            ro_write: false,
            ro_read: false,
            xlt: Xlt::Mtt {
                page_shift: mr::MIN_PAGE_SHIFT,
                entries: &[],
            },
            umr_en: true,
            free: true,
            xlt_room: mtt_room.div_ceil(2),
        };
        ctx.with_dev(|d| d.create_mkey(&ctx.hal, &p))
    }

    /// Destroys a key of [`ProtectionDomain::alloc_umr_mkey`] (DESTROY_MKEY).
    pub fn destroy_umr_mkey(&self, key: u32) -> Result<()> {
        let ctx = &self.inner.ctx;
        // A cached key's slot in the region table (kept while it waited in the cache).
        ctx.mrs.write().forget_slot(key);
        ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, key))
    }
}

impl<H: Hal> ProtectionDomain<H> {
    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn
    }

    /// Allocates `len` bytes of DMA memory and registers them: one contiguous buffer, so one
    /// translation entry. The region's address space is the buffer's bus address.
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<MemoryRegion<H>> {
        let ctx = &self.inner.ctx;
        let len64 = u64::try_from(len).map_err(|_| InvalidInput::LengthOverflow)?;
        // The region's addresses are bus addresses from 0 up: `iova + len` is checked for
        // the largest one a buffer of this size can have.
        mr::check_request(len64, 0, access, ctx.caps.log_max_mrw_sz)?;
        // Aligned to its size rounded up to a power of two, between 4 KiB and 1 GiB, so that
        // it is one translation entry; no rounding above 1 GiB (where next_power_of_two
        // would overflow for lengths above 2^63).
        const MAX_ALIGN: usize = 1 << mr::MAX_PAGE_SHIFT;
        let align = if len >= MAX_ALIGN {
            MAX_ALIGN
        } else {
            len.next_power_of_two().max(4096)
        };
        let buf = DmaMem::alloc(&ctx.hal, len, align)?;
        let chunks = [PhysChunk {
            bus: buf.bus(),
            len: len as u64,
        }];
        let plan = mr::plan_reg(&chunks, buf.bus(), ctx.caps.log_max_klm_list_size)?;
        let iova = buf.bus();
        self.register(iova, len as u64, access, plan, Some(buf))
    }

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
        if let [c] = chunks {
            let ctx = &self.inner.ctx;
            // `plan_phys`'s checks (one chunk: its length is the total), first as there.
            mr::check_request(c.len, iova, access, ctx.caps.log_max_mrw_sz)?;
            // One page without relaxed ordering: the lean path; anything else the general.
            if let Some((page_shift, entry)) = mr::one_page(c, iova) {
                if mr::relaxed_ordering(access, &ctx.caps) == (false, false) {
                    return self.reg_one_page(c, iova, access, page_shift, entry);
                }
            }
        }
        self.reg_phys_general(chunks, iova, access)
    }

    /// [`ProtectionDomain::reg_phys`] of anything [`ProtectionDomain::reg_one_page`] does not
    /// take: the general planner, then the cache or commands. Out of line, so that the
    /// one-page path's frame holds only what it needs.
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

    /// [`ProtectionDomain::reg_phys`] of one chunk that one page translates (every small
    /// registration) without relaxed ordering, once `plan_phys`'s checks passed, from the
    /// mkey cache: the same plan ([`mr::one_page`] gave `page_shift` and `entry`,
    /// `one_page_is_the_plan_of_one_entry`) and the same UMR as
    /// [`ProtectionDomain::reg_pooled`], without building the general plan first and moving
    /// it through the general path; the plan is written into the region allocation parked
    /// with the key. A cache that cannot serve it (none, busy, no key left, or the device
    /// refused the UMR: the key is back in the cache) registers by command, as the general
    /// path then does.
    #[inline(always)]
    fn reg_one_page(
        &self,
        c: &PhysChunk,
        iova: u64,
        access: Access,
        page_shift: u32,
        entry: u64,
    ) -> Result<MemoryRegion<H>> {
        use crate::umr::{flags, MkeySeg, Umr, ENABLE_MASK};
        let ctx = &self.inner.ctx;
        let len = c.len;
        let pdn = self.inner.pdn;
        let r = ctx.umr_try_with(
            #[inline(always)]
            |u, hal| {
                // 32 random bits, as in `reg_pooled`.
                let r = u.random32(ctx);
                let Some((key, class, parked)) = u.take(1, r & 0xffff_0000) else {
                    return Ok(None);
                };
                let new = fresh_variant16(ctx, key, r as u16);
                let mtt = [entry | mlx5_prm::mkey::MTT_PRESENT];
                let umr = Umr {
                    key,
                    check: flags::CHECK_NOT_FREE,
                    mask: ENABLE_MASK,
                    seg: MkeySeg {
                        free: false,
                        pd: pdn,
                        qpn: 0xff_ffff,
                        variant: new as u8,
                        access,
                        start: iova,
                        len,
                        log_page_size: page_shift,
                    },
                    mtt: &mtt,
                    mtt_offset: 0,
                };
                match u.run(hal, &umr) {
                    Ok(()) => Ok(Some((new, class, parked))),
                    Err(Error::Umr { .. }) | Err(Error::Invalid(_)) => {
                        // The key is unchanged (the model applies a UMR whole or not at all).
                        u.put(key, class, parked);
                        Ok(None)
                    }
                    // Its state is unknown: the key leaves the cache (destroyed with the PD).
                    Err(e) => Err(e),
                }
            },
        );
        match r {
            Ok(Some(Some((key, class, parked)))) => {
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

    pub(super) fn plan_phys(
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

    /// Registers several regions of caller-owned memory at once. With the mkey cache
    /// ([`Context::enable_mkey_cache`]), the regions it can serve take one UMR WQE each, rung
    /// with one doorbell per 32 WQEs and no command; the CREATE_MKEY commands of the other
    /// regions that take one key go into several command slots rung with one doorbell
    /// write (`hca::Device::exec_batch`); regions that need an indirect key are
    /// registered one by one. One result per region, in order.
    ///
    /// # Safety
    /// As [`ProtectionDomain::reg_phys`], for every region.
    pub unsafe fn reg_mr_batch(
        &self,
        regions: &[(&[PhysChunk], u64, Access)],
    ) -> Vec<Result<MemoryRegion<H>>> {
        let ctx = &self.inner.ctx;
        let hal = &ctx.hal;
        // One result per region, in order; `Error::Internal` stands for a region not yet
        // decided (and is what one that nothing decided would get).
        let mut out: Vec<Result<MemoryRegion<H>>> = Vec::with_capacity(regions.len());
        let mut plans: Vec<Option<Planned>> = Vec::with_capacity(regions.len());
        // The general plans `Planned::Plan` names.
        let mut generals: Vec<KlmPlan> = Vec::new();
        for &(chunks, iova, access) in regions {
            // A region one page translates: `plan_phys`'s checks, and its plan as
            // `mr::one_page` (the general plan built only if it goes by command).
            if let [c] = chunks {
                if let Err(e) = mr::check_request(c.len, iova, access, ctx.caps.log_max_mrw_sz) {
                    plans.push(None);
                    out.push(Err(e));
                    continue;
                }
                if let Some((page_shift, entry)) = mr::one_page(c, iova) {
                    plans.push(Some(Planned::One {
                        page_shift,
                        entry,
                        len: c.len,
                    }));
                    out.push(Err(Error::Internal));
                    continue;
                }
            }
            match self.plan_phys(chunks, iova, access) {
                Ok(p) if p.0.segments.is_empty() => {
                    plans.push(Some(Planned::Plan {
                        at: generals.len(),
                        len: p.1,
                    }));
                    generals.push(p.0);
                    out.push(Err(Error::Internal));
                }
                Ok(p) => {
                    plans.push(None);
                    out.push(self.register(iova, p.1, access, p.0, None));
                }
                Err(e) => {
                    plans.push(None);
                    out.push(Err(e));
                }
            }
        }
        if let Err(e) = ctx.check_alive() {
            for (o, p) in out.iter_mut().zip(&plans) {
                if p.is_some() {
                    *o = Err(e);
                }
            }
            return out;
        }
        // From the mkey cache first (UMR WQEs, one doorbell per group); the rest by command.
        if plans.iter().any(Option::is_some) {
            self.reg_pooled_batch(regions, &mut plans, &mut generals, &mut out);
        }
        // One command per direct region left.
        let mut left = false;
        for (p, r) in plans.iter_mut().zip(regions) {
            match *p {
                Some(Planned::One {
                    page_shift,
                    entry,
                    len,
                }) => {
                    *p = Some(Planned::Plan {
                        at: generals.len(),
                        len,
                    });
                    generals.push(KlmPlan::one_page(page_shift, entry, r.1));
                    left = true;
                }
                Some(Planned::Plan { .. }) => left = true,
                None => {}
            }
        }
        if !left {
            return out;
        }
        let mut cmds = Vec::new();
        let mut who = Vec::new();
        let mut params = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            let Some(Planned::Plan { at, len }) = p else {
                continue;
            };
            let Some(plan) = generals.get(*at) else {
                continue;
            };
            let (_, iova, access) = regions[i];
            let prm = self.params(
                iova,
                *len,
                access,
                plan,
                Xlt::Mtt {
                    page_shift: plan.tr.page_shift,
                    entries: &plan.tr.entries,
                },
            );
            match mr::mkey_cmd(&prm) {
                Ok(c) => {
                    cmds.push(c);
                    who.push(i);
                    params.push(prm);
                }
                Err(e) => out[i] = Err(e),
            }
        }
        if cmds.is_empty() {
            return out;
        }
        let refs: Vec<(&CmdBuf, usize)> = cmds
            .iter()
            .map(|c| (c, mlx5_prm::create_mkey_out::BYTES))
            .collect();
        let results = ctx
            .with_dev(|d| Ok(d.exec_batch(hal, &refs)))
            .unwrap_or_default();
        for (k, r) in results.into_iter().enumerate() {
            let i = who[k];
            // A copy: `params` borrows the planned entries.
            let Some(Planned::Plan { at, len }) = plans[i] else {
                continue;
            };
            let Some(plan) = generals.get(at).cloned() else {
                continue;
            };
            let (_, iova, access) = regions[i];
            out[i] = match r {
                Err(e) => Err(e),
                Ok(o) => {
                    let key = mr::mkey_from_out(&o, params[k].variant);
                    let mut buf = None;
                    self.avoid_recent(key, &mut params[k], &mut buf)
                        .map(|key| self.wrap(key, Vec::new(), iova, len, access, plan, buf))
                }
            };
        }
        out
    }

    pub(super) fn params<'a>(
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
    pub(super) fn destroy_keys(&self, keys: &[u32]) -> bool {
        let ctx = &self.inner.ctx;
        let mut all = true;
        for &k in keys.iter().rev() {
            if ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, k)).is_err() {
                all = false;
            }
        }
        all
    }

    pub(super) fn register(
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
    pub(super) fn register_cmd(
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
                    if self.destroy_keys(&inner) {
                        ctx.release_after(&e, buf);
                    } else {
                        ctx.hold(buf.take());
                    }
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
                if self.destroy_keys(&inner) {
                    ctx.release_after(&e, buf);
                } else {
                    ctx.hold(buf.take());
                }
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
    pub(super) fn reg_pooled(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        plan: &KlmPlan,
    ) -> Result<Option<Cached<H>>> {
        use crate::umr::{flags, MkeySeg, Umr, CACHE_CLASSES, ENABLE_MASK};
        let ctx = &self.inner.ctx;
        let entries = &plan.tr.entries;
        let max = CACHE_CLASSES[CACHE_CLASSES.len() - 1] as usize;
        if !plan.segments.is_empty()
            || entries.len() > max
            || mr::relaxed_ordering(access, &ctx.caps) != (false, false)
        {
            return Ok(None);
        }
        let pdn = self.inner.pdn;
        let r = ctx.umr_try_with(|u, hal| {
            // 32 random bits (the cache's stream, under the UMR lock): the pick among the free
            // keys (high 16 bits, scaled to the class's length) and the variant's first two
            // tries (low 16 bits).
            let r = u.random32(ctx);
            let Some((key, class, parked)) = u.take(entries.len(), r & 0xffff_0000) else {
                return Ok(None);
            };
            let new = fresh_variant16(ctx, key, r as u16);
            // The entries with their enables: on the stack when they go inline (a small
            // region's one or two pages in two slots, no 16-slot array to clear).
            use mlx5_prm::mkey::MTT_PRESENT;
            let tiny: [u64; 2];
            let mut small: [u64; crate::umr::INLINE_MAX_MTT];
            let big: Vec<u64>;
            let mtt: &[u64] = if let [a] = entries[..] {
                tiny = [a | MTT_PRESENT, 0];
                &tiny[..1]
            } else if let [a, b] = entries[..] {
                tiny = [a | MTT_PRESENT, b | MTT_PRESENT];
                &tiny[..]
            } else if entries.len() <= crate::umr::INLINE_MAX_MTT {
                small = [0; crate::umr::INLINE_MAX_MTT];
                for (d, e) in small.iter_mut().zip(entries) {
                    *d = e | MTT_PRESENT;
                }
                &small[..entries.len()]
            } else {
                big = entries
                    .iter()
                    .map(|e| e | mlx5_prm::mkey::MTT_PRESENT)
                    .collect();
                &big
            };
            let umr = Umr {
                key,
                check: flags::CHECK_NOT_FREE,
                mask: ENABLE_MASK,
                seg: MkeySeg {
                    free: false,
                    pd: pdn,
                    qpn: 0xff_ffff,
                    variant: new as u8,
                    access,
                    start: iova,
                    len,
                    log_page_size: plan.tr.page_shift,
                },
                mtt,
                mtt_offset: 0,
            };
            match u.run(hal, &umr) {
                Ok(()) => Ok(Some((new, class, parked))),
                Err(Error::Umr { .. }) | Err(Error::Invalid(_)) => {
                    // The key is unchanged (the model applies a UMR whole or not at all).
                    u.put(key, class, parked);
                    Ok(None)
                }
                // Its state is unknown: the key leaves the cache (destroyed with the PD).
                Err(e) => Err(e),
            }
        })?;
        Ok(r.flatten())
    }

    /// [`ProtectionDomain::reg_pooled`] for several regions at once (`reg_mr_batch`): every
    /// planned region the cache can serve (a direct key of at most [`INLINE_MAX_MTT`]
    /// entries, no relaxed ordering, a free key of its class) takes one UMR WQE, in groups of
    /// [`crate::umr::BATCH_MAX`] rung with one doorbell each ([`crate::umr::UmrRes::run_batch`]:
    /// only a group's last WQE asks for a completion). A region registered so gets its region
    /// in `out` and leaves `plans`; one whose UMR never completed gets [`Error::Timeout`] (its
    /// key's state is unknown: it leaves the cache) and leaves `plans`; the others (not
    /// served, or whose UMR the device refused or flushed: the key went back to the cache)
    /// stay in `plans`, for commands.
    ///
    /// [`INLINE_MAX_MTT`]: crate::umr::INLINE_MAX_MTT
    fn reg_pooled_batch(
        &self,
        regions: &[(&[PhysChunk], u64, Access)],
        plans: &mut [Option<Planned>],
        generals: &mut [KlmPlan],
        out: &mut [Result<MemoryRegion<H>>],
    ) {
        use crate::umr::{flags, MkeySeg, Outcome, Umr, BATCH_MAX, ENABLE_MASK, INLINE_MAX_MTT};
        let ctx = &self.inner.ctx;
        let pdn = self.inner.pdn;
        let plans_ro: &[Option<Planned>] = plans;
        let gen_ro: &[KlmPlan] = generals;
        let r = ctx.umr_try_with(|u, hal| {
            // What became of each UMR: `(region, its key or the error)`.
            let mut done: Vec<(usize, Result<Cached<H>>)> = Vec::with_capacity(plans_ro.len());
            let mut back: Vec<Cached<H>> = Vec::new();
            // The entries with their enables, INLINE_MAX_MTT slots per WQE of a group.
            let mut mtt = [0u64; BATCH_MAX * INLINE_MAX_MTT];
            let mut next = 0usize;
            loop {
                // `(region, key taken, class, new key, first entry slot, entries)`.
                let mut taken = [(0usize, 0u32, 0u8, 0u32, 0usize, 0usize); BATCH_MAX];
                let mut parked: [crate::umr::Parked<H>; BATCH_MAX] = core::array::from_fn(|_| None);
                let mut k = 0usize;
                while k < BATCH_MAX && next < plans_ro.len() {
                    let i = next;
                    next += 1;
                    let Some(p) = &plans_ro[i] else { continue };
                    let entries = p.entries(gen_ro);
                    if !p.direct(gen_ro)
                        || entries.len() > INLINE_MAX_MTT
                        || mr::relaxed_ordering(regions[i].2, &ctx.caps) != (false, false)
                    {
                        continue;
                    }
                    // 32 random bits, as in `reg_pooled`.
                    let r = u.random32(ctx);
                    let Some((key, class, pk)) = u.take(entries.len(), r & 0xffff_0000) else {
                        continue;
                    };
                    let at = k * INLINE_MAX_MTT;
                    // Always there (at most INLINE_MAX_MTT entries, k < BATCH_MAX).
                    let Some(slots) = mtt.get_mut(at..at + entries.len()) else {
                        back.push((key, class, pk));
                        continue;
                    };
                    if let ([d], [e]) = (&mut *slots, entries) {
                        // One page (nearly every small region): no loop.
                        *d = e | mlx5_prm::mkey::MTT_PRESENT;
                    } else {
                        for (d, e) in slots.iter_mut().zip(entries) {
                            *d = e | mlx5_prm::mkey::MTT_PRESENT;
                        }
                    }
                    let new = fresh_variant16(ctx, key, r as u16);
                    taken[k] = (i, key, class, new, at, entries.len());
                    parked[k] = pk;
                    k += 1;
                }
                if k == 0 {
                    break;
                }
                let umr = |&(i, key, _, new, at, n): &(usize, u32, u8, u32, usize, usize)| {
                    let (_, iova, access) = regions[i];
                    let (len, page_shift) = match &plans_ro[i] {
                        Some(p) => (p.len(), p.page_shift(gen_ro)),
                        None => (0, 0), // never: `taken` names planned regions only
                    };
                    Umr {
                        key,
                        check: flags::CHECK_NOT_FREE,
                        mask: ENABLE_MASK,
                        seg: MkeySeg {
                            free: false,
                            pd: pdn,
                            qpn: 0xff_ffff,
                            variant: new as u8,
                            access,
                            start: iova,
                            len,
                            log_page_size: page_shift,
                        },
                        mtt: &mtt[at..at + n],
                        mtt_offset: 0,
                    }
                };
                let mut outcome = [Outcome::Unknown; BATCH_MAX];
                u.run_batch(hal, k, |j| umr(&taken[j]), &mut outcome[..k]);
                let mut lost = false;
                for ((t, o), pk) in taken[..k].iter().zip(&outcome[..k]).zip(&mut parked) {
                    let (i, key, class, new, _, _) = *t;
                    match o {
                        Outcome::Done => done.push((i, Ok((new, class, pk.take())))),
                        // The key is unchanged (the model applies a UMR whole or not at all);
                        // back to the cache after the batch (a refused key is not taken
                        // again by a later group).
                        Outcome::Unchanged => back.push((key, class, pk.take())),
                        // Its state is unknown: the key leaves the cache (destroyed with the
                        // PD).
                        Outcome::Unknown => {
                            lost = true;
                            done.push((i, Err(Error::Timeout)));
                        }
                    }
                }
                if lost {
                    break; // the UMR QP stopped answering: the rest go by command
                }
            }
            for (key, class, pk) in back {
                u.put(key, class, pk);
            }
            Ok(done)
        });
        let Ok(Some(done)) = r else { return };
        for (i, r) in done {
            let (Some(p), Some(o)) = (plans[i].take(), out.get_mut(i)) else {
                continue;
            };
            let (_, iova, access) = regions[i];
            *o = match (r, p) {
                (Err(e), _) => Err(e),
                (
                    Ok((key, class, parked)),
                    Planned::One {
                        page_shift,
                        entry,
                        len,
                    },
                ) => Ok(self.wrap_cached_one_page(
                    parked, key, class, iova, len, access, page_shift, entry,
                )),
                (Ok((key, class, parked)), Planned::Plan { at, len }) => match generals.get_mut(at)
                {
                    // Moved out, a placeholder left: the region has left `plans`, nothing
                    // reads its general plan again.
                    Some(g) => {
                        let plan = core::mem::replace(g, KlmPlan::one_page(0, 0, 0));
                        Ok(self.wrap_cached(parked, key, class, iova, len, access, plan, None))
                    }
                    // Never: a region served from the cache has its plan (`direct`).
                    None => Err(Error::Internal),
                },
            };
        }
    }

    /// ReDMArk: a key must not reappear right after it was destroyed. If the firmware reused
    /// the index and the random variant matched, take a new key first, then drop the
    /// collision. Up to [`AVOID_TRIES`] new keys: each collides with the odds of its index's
    /// share of recent variants (1/16 on a device with 16 usable indices; four tries left a
    /// recent key about once in 1.4 million registrations there), so a recent key comes
    /// back only when no index has fresh variants left.
    pub(super) fn avoid_recent(
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
    pub(super) fn wrap(
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
    #[inline(always)]
    pub(super) fn wrap_cached(
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
                self.inner
                    .ctx
                    .mrs
                    .write()
                    .insert(MrInfo::new(key, iova, len, access));
                // The UMR PD's reference goes (it is never the last one: the UMR state
                // holds that PD).
                m.pd = self.inner.clone();
                m.key = key;
                m.key_be = key.to_be();
                m.iova = iova;
                m.len = len;
                m.access = access;
                m.inner_keys.clear();
                m.plan = plan;
                m.buf = buf;
                *m.destroyed.get_mut() = false;
                m.pooled = Some(class);
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
    #[inline(always)]
    fn wrap_cached_one_page(
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
                self.inner
                    .ctx
                    .mrs
                    .write()
                    .insert(MrInfo::new(key, iova, len, access));
                // The UMR PD's reference goes (never the last one, as in `wrap_cached`).
                m.pd = self.inner.clone();
                m.key = key;
                m.key_be = key.to_be();
                m.iova = iova;
                m.len = len;
                m.access = access;
                m.inner_keys.clear();
                m.plan.tr.page_shift = page_shift;
                m.plan.tr.entries.set_one(entry);
                m.plan.mtt_va = iova;
                m.plan.segments.clear();
                if m.buf.is_some() {
                    m.buf = None;
                }
                *m.destroyed.get_mut() = false;
                m.pooled = Some(class);
                return MemoryRegion { inner: Some(arc) };
            }
        }
        let plan = KlmPlan::one_page(page_shift, entry, iova);
        self.wrap_cached(None, key, class, iova, len, access, plan, None)
    }

    /// Creates an RC QP whose completions go to `send_cq` / `recv_cq`.
    pub fn create_qp(
        &self,
        send_cq: &CompletionQueue<H>,
        recv_cq: &CompletionQueue<H>,
        caps: &QpCaps,
    ) -> Result<QueuePair<H>> {
        crate::qp::create(&self.inner, send_cq, recv_cq, caps, &QpOptions::default())
    }

    /// [`ProtectionDomain::create_qp`] with options ([`QpOptions::sq_sig_all`]).
    pub fn create_qp_with(
        &self,
        send_cq: &CompletionQueue<H>,
        recv_cq: &CompletionQueue<H>,
        caps: &QpCaps,
        opts: &QpOptions,
    ) -> Result<QueuePair<H>> {
        crate::qp::create(&self.inner, send_cq, recv_cq, caps, opts)
    }
}
