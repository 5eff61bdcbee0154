//! [`ProtectionDomain::reg_mr_batch`]: several regions at once, from the mkey cache (UMR WQEs, one
//! doorbell per group) and by command (several CREATE_MKEY slots, one doorbell).

use super::*;

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
    #[inline]
    fn entries<'a>(&'a self, g: &'a [KlmPlan]) -> &'a [u64] {
        match self {
            Planned::One { entry, .. } => core::slice::from_ref(entry),
            Planned::Plan { at, .. } => g.get(*at).map_or(&[], |p| &p.tr.entries[..]),
        }
    }

    /// One direct key (no inner keys).
    #[inline]
    fn direct(&self, g: &[KlmPlan]) -> bool {
        match self {
            Planned::One { .. } => true,
            Planned::Plan { at, .. } => g.get(*at).is_some_and(|p| p.segments.is_empty()),
        }
    }

    #[inline]
    fn len(&self) -> u64 {
        match self {
            Planned::One { len, .. } | Planned::Plan { len, .. } => *len,
        }
    }

    #[inline]
    fn page_shift(&self, g: &[KlmPlan]) -> u32 {
        match self {
            Planned::One { page_shift, .. } => *page_shift,
            Planned::Plan { at, .. } => g.get(*at).map_or(0, |p| p.tr.page_shift),
        }
    }
}

impl<H: Hal> ProtectionDomain<H> {
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
            match self.one_page_of(chunks, iova, access) {
                Err(e) => {
                    plans.push(None);
                    out.push(Err(e));
                    continue;
                }
                Ok(Some((page_shift, entry, len))) => {
                    plans.push(Some(Planned::One {
                        page_shift,
                        entry,
                        len,
                    }));
                    out.push(Err(Error::Internal));
                    continue;
                }
                Ok(None) => {}
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
        use crate::umr::{Outcome, BATCH_MAX, INLINE_MAX_MTT};
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
                    let Some((key, class, pk, new)) = take_cached(u, ctx, entries.len()) else {
                        continue;
                    };
                    let at = k * INLINE_MAX_MTT;
                    // Always there (at most INLINE_MAX_MTT entries, k < BATCH_MAX).
                    let Some(slots) = mtt.get_mut(at..at + entries.len()) else {
                        back.push((key, class, pk));
                        continue;
                    };
                    present(slots, entries);
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
                    let mtt = &mtt[at..at + n];
                    enable_umr(key, pdn, new, access, iova, len, page_shift, mtt)
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
}
