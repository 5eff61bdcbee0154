//! Protection domains, and what they create: regions (by command, by UMR, in batches), queue pairs.

use super::*;

/// A key enabled from the mkey cache: `(key, size class, the region allocation parked with it)`.
type Cached<H> = (u32, u8, crate::umr::Parked<H>);

mod batch;
mod register;

/// The UMR that enables cached key `key` (checked not free) as a region of PD `pdn`: variant
/// `new`, `access`, `[iova, iova + len)`, translated by `mtt` (entries with their enables) in
/// pages of `page_shift`. One for every registration from the cache (one, general, batched).
#[allow(clippy::too_many_arguments)]
#[inline]
fn enable_umr(
    key: u32,
    pdn: u32,
    new: u32,
    access: Access,
    iova: u64,
    len: u64,
    page_shift: u32,
    mtt: &[u64],
) -> crate::umr::Umr<'_> {
    use crate::umr::{flags, MkeySeg, Umr, ENABLE_MASK};
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
        mtt,
        mtt_offset: 0,
    }
}

/// The registration from the mkey cache of the one-page, the general and (one region at a time)
/// the batched paths: a cached key with room for `entries` ([`take_cached`]) enabled by one UMR
/// ([`enable_umr`], [`run_enable`]) as a region of PD `pdn`: `access`, `[iova, iova + len)`,
/// translated by `entries` (page addresses) in pages of `page_shift`. `None` when no key fits
/// or the device refused the UMR (the key is back in the cache).
#[allow(clippy::too_many_arguments)]
// inline(always): UMR cache reg 1,419 vs 1,564 instructions per MR (reg_mr --instructions)
#[inline(always)]
fn enable_cached<H: Hal>(
    u: &mut crate::umr::UmrRes<H>,
    hal: &H,
    ctx: &CtxInner<H>,
    pdn: u32,
    access: Access,
    iova: u64,
    len: u64,
    page_shift: u32,
    entries: &[u64],
) -> Result<Option<Cached<H>>> {
    use crate::umr::INLINE_MAX_MTT;
    let Some((key, class, parked, new)) = take_cached(u, ctx, entries.len()) else {
        return Ok(None);
    };
    // The entries with their enables: on the stack when they go inline (a small region's one
    // or two pages in two slots, no 16-slot array to clear).
    let mut tiny = [0u64; 2];
    let mut small: [u64; INLINE_MAX_MTT];
    let big: Vec<u64>;
    let mtt: &[u64] = if entries.len() <= tiny.len() {
        let d = &mut tiny[..entries.len()];
        present(d, entries);
        d
    } else if entries.len() <= INLINE_MAX_MTT {
        small = [0; INLINE_MAX_MTT];
        let d = &mut small[..entries.len()];
        present(d, entries);
        d
    } else {
        big = entries
            .iter()
            .map(|e| e | mlx5_prm::mkey::MTT_PRESENT)
            .collect();
        &big
    };
    let umr = enable_umr(key, pdn, new, access, iova, len, page_shift, mtt);
    run_enable(u, hal, &umr, new, class, parked)
}

/// A key from the mkey cache with room for `n` entries, and the new variant it will be
/// enabled with: `(key, class, parked region allocation, new key)`. 32 random bits (the
/// cache's stream, under the UMR lock `u` implies): the pick among the free keys (high 16
/// bits, scaled to the class's length) and the variant's first two tries (low 16 bits).
// inline(always): UMR cache reg 1,419 vs 1,439 instructions per MR, batched 1,231 vs 1,254 (reg_mr
// --instructions)
#[inline(always)]
fn take_cached<H: Hal>(
    u: &mut crate::umr::UmrRes<H>,
    ctx: &CtxInner<H>,
    n: usize,
) -> Option<(u32, u8, crate::umr::Parked<H>, u32)> {
    let r = u.random32(ctx);
    let (key, class, parked) = u.take(n, r & 0xffff_0000)?;
    let new = fresh_variant16(ctx, key, r as u16);
    Some((key, class, parked, new))
}

/// Writes `entries` with their enables ([`mlx5_prm::mkey::MTT_PRESENT`]) into `d` (as many
/// as both hold).
#[inline]
fn present(d: &mut [u64], entries: &[u64]) {
    for (d, e) in d.iter_mut().zip(entries) {
        *d = e | mlx5_prm::mkey::MTT_PRESENT;
    }
}

/// Runs `umr`, which enables the cached key it names (taken from the cache with `class` and
/// `parked`) as key `new`: `Some` of the region's key, or `None` when the device refused the
/// UMR (the key is unchanged, as the model applies a UMR whole or not at all, and back in the
/// cache). Any other error: the key's state is unknown, and it leaves the cache (destroyed
/// with the PD).
// inline(always): UMR cache reg 1,419 vs 1,554 instructions per MR (reg_mr --instructions)
#[inline(always)]
fn run_enable<H: Hal>(
    u: &mut crate::umr::UmrRes<H>,
    hal: &H,
    umr: &crate::umr::Umr<'_>,
    new: u32,
    class: u8,
    parked: crate::umr::Parked<H>,
) -> Result<Option<Cached<H>>> {
    match u.run(hal, umr) {
        Ok(()) => Ok(Some((new, class, parked))),
        Err(Error::Umr { .. }) | Err(Error::Invalid(_)) => {
            u.put(umr.key, class, parked);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl<H: Hal> ProtectionDomain<H> {
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
        self.alloc_mr_with(len, access, true)
    }

    /// As [`ProtectionDomain::alloc_mr`] without zeroing the memory first (a memset of a
    /// large region holds its owner for as long as it takes): the bytes are whatever the
    /// memory held, earlier users' data included. Only for an owner that never lets a byte
    /// be read, locally or by a peer, before it wrote it (a thin disk).
    pub fn alloc_mr_unzeroed(&self, len: usize, access: Access) -> Result<MemoryRegion<H>> {
        self.alloc_mr_with(len, access, false)
    }

    fn alloc_mr_with(&self, len: usize, access: Access, zeroed: bool) -> Result<MemoryRegion<H>> {
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
        let buf = if zeroed {
            DmaMem::alloc(&ctx.hal, len, align)?
        } else {
            DmaMem::alloc_unzeroed(&ctx.hal, len, align)?
        };
        let chunks = [PhysChunk {
            bus: buf.bus(),
            len: len as u64,
        }];
        let plan = mr::plan_reg(&chunks, buf.bus(), ctx.caps.log_max_klm_list_size)?;
        let iova = buf.bus();
        self.register(iova, len as u64, access, plan, Some(buf))
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

    /// Creates an address handle for datagrams to `attr` (`ibv_create_ah`): the mlx5
    /// address vector, built once ([`crate::ah`]). A source GID index beyond the port's table
    /// is [`InvalidInput::GidIndex`], an all-zero GID or MAC [`InvalidInput::RemoteAddress`].
    /// No command: mlx5 address handles live in the WQEs.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        let ctx = &self.inner.ctx;
        ctx.check_alive()?;
        AddressHandle::new(&ctx.caps, attr)
    }

    /// Creates a UD QP with Q_Key `qkey` whose completions go to `send_cq` / `recv_cq`, and
    /// moves it to RTS (RESET->INIT with P_Key index 0, port 1 and the Q_Key, ->RTR, ->RTS
    /// with a random send PSN: [`QueuePair::activate_datagram`]). It sends with
    /// [`QueuePair::post_ud_send`]; its receive buffers need [`crate::GRH_BYTES`] in front of
    /// the largest datagram.
    pub fn create_ud_qp(
        &self,
        send_cq: &CompletionQueue<H>,
        recv_cq: &CompletionQueue<H>,
        caps: &QpCaps,
        qkey: u32,
    ) -> Result<QueuePair<H>> {
        let s = crate::qp::Service::Ud;
        crate::qp::create_datagram(&self.inner, (send_cq, recv_cq), caps, s, qkey)
    }

    /// Creates the context's GSI QP (the one the wire reaches as QPN 1: `qpc.st` QP1, as Linux
    /// hw/mlx5/gsi.c makes it) with Q_Key [`crate::GSI_QKEY`], in RTS, sending as a UD QP
    /// does. One per context: a second one is refused with [`InvalidInput::GsiExists`] while
    /// the first lives.
    pub fn create_gsi_qp(
        &self,
        send_cq: &CompletionQueue<H>,
        recv_cq: &CompletionQueue<H>,
        caps: &QpCaps,
    ) -> Result<QueuePair<H>> {
        let s = crate::qp::Service::Gsi;
        crate::qp::create_datagram(&self.inner, (send_cq, recv_cq), caps, s, GSI_QKEY)
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
