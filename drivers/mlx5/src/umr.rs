//! UMR: modifying memory keys with WQEs instead of firmware commands.
//!
//! The driver owns one UMR QP per context, created on first use (Linux ib/umr.c
//! `mlx5r_umr_resource_init`: its own PD and CQ, a QP with fast registration enabled,
//! RST→INIT→RTR→RTS, `mlx5r_umr_qp_rst2rts`; here an RC QP with `qpc.fre` connected to
//! itself). A UMR is one WQE (ctrl + `mlx5_wqe_umr_ctrl_seg` + mkey segment + translation,
//! Linux `struct mlx5r_umr_wqe`) and one polled CQE (`mlx5r_umr_post_send_wait`).
//!
//! A translation goes inline in the WQE when it is small ([`INLINE_MAX_MTT`] entries;
//! `MLX5_UMR_INLINE`), else through a data segment pointing into the UMR staging region
//! (`mlx5r_umr_set_update_xlt_data_seg`), loaded in pieces of at most [`XLT_CHUNK_MTT`]
//! entries at increasing `xlt_offset` (`mlx5r_umr_update_mr_pas`, `mlx5r_umr_update_offset`);
//! the mkey fields (`mkey_mask`) go with the last piece (`mlx5r_umr_final_update_xlt`).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

use mlx5_prm::{mkc, mkey, wqe};

use crate::context::CtxInner;
use crate::cq::{CompletionQueue, WcStatus, WorkCompletion};
use crate::error::{Error, InvalidInput, Result};
use crate::hal::Hal;
use crate::mr::Access;
use crate::pd::ProtectionDomain;
use crate::qp::{ConnectOptions, QpCaps, QpOptions, QueuePair};
use crate::region::{MemoryRegion, MrInner};

pub use mlx5_prm::wqe::umr_ctrl_seg::mask as mkey_mask;

/// `flags` of the UMR ctrl segment (`MLX5_UMR_*`, Linux include/linux/mlx5/device.h).
pub mod flags {
    pub use mlx5_prm::wqe::umr_ctrl_seg::{
        FLAG_CHECK_FREE as CHECK_FREE, FLAG_CHECK_NOT_FREE as CHECK_NOT_FREE,
        FLAG_INLINE as INLINE, FLAG_TRANSLATION_OFFSET_EN as TRANSLATION_OFFSET_EN,
    };
}

/// Most MTT entries carried inline (one WQE of at most 4 basic blocks: ctrl 16 + umr ctrl 48
/// + mkey 64 + 128 bytes of entries).
pub const INLINE_MAX_MTT: usize = 16;

/// MTT entries per pointed-to piece (the staging region's size / 8).
pub const XLT_CHUNK_MTT: usize = 8192;

/// The mask that enables a free key with a translation, access and PD (Linux ib/umr.c
/// `mlx5r_umr_final_update_xlt` with `MLX5_IB_UPD_XLT_ENABLE`: `get_umr_enable_mr_mask`,
/// `get_umr_update_access_mask`, `get_umr_update_pd_mask`, `get_umr_update_translation_mask`).
pub const ENABLE_MASK: u64 = mkey_mask::KEY
    | mkey_mask::FREE
    | mkey_mask::LR
    | mkey_mask::LW
    | mkey_mask::RR
    | mkey_mask::RW
    | mkey_mask::A
    | mkey_mask::PD
    | mkey_mask::QPN
    | mkey_mask::LEN
    | mkey_mask::PAGE_SIZE
    | mkey_mask::START_ADDR;

/// The mask that revokes a key (Linux ib/umr.c `mlx5r_umr_revoke_mr`: PD and FREE).
pub const REVOKE_MASK: u64 = mkey_mask::PD | mkey_mask::FREE;

/// Most UMR WQEs rung with one doorbell ([`UmrRes::run_batch`]): the UMR QP's `max_send_wr`.
pub(crate) const BATCH_MAX: usize = 32;

/// What became of one UMR of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Completed successfully: the key changed.
    Done,
    /// Not executed, or refused by the device: the key is as it was.
    Unchanged,
    /// No completion before the deadline: the key's state is not known.
    Unknown,
}

/// How long one UMR may take before the driver gives up on its completion.
const UMR_TIMEOUT: Duration = Duration::from_secs(5);

/// The mkey segment fields a UMR may write (which of them count is `mask`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MkeySeg {
    /// `free`.
    pub free: bool,
    /// `pd`.
    pub pd: u32,
    /// `qpn` (0xffffff: any QP).
    pub qpn: u32,
    /// `mkey_7_0`.
    pub variant: u8,
    /// `lr`/`lw`/`rr`/`rw`/`a` (`lr` is always set, as Linux `mlx5r_umr_set_access_flags`).
    pub access: Access,
    /// `start_addr`.
    pub start: u64,
    /// `len`.
    pub len: u64,
    /// `log_page_size` (absolute).
    pub log_page_size: u32,
}

impl MkeySeg {
    fn bytes(&self) -> [u8; mkc::BYTES] {
        let mut b = [0u8; mkc::BYTES];
        self.write(&mut b);
        b
    }

    /// Writes the fields into a zeroed mkey segment `b` (in place in a WQE being built).
    #[inline(always)]
    fn write(&self, b: &mut [u8; mkc::BYTES]) {
        // `lr` and the four access bits: one table lookup into their dword (all five share
        // it, asserted where the table is built), or'ed into what the segment holds there.
        const AT: usize = mkc::LR.dword_index() * 4;
        if let Some(d) = b.get_mut(AT..AT + 4) {
            let old = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            let dw = old | ACCESS_DWORD[(self.access.0 & 0xf) as usize];
            d.copy_from_slice(&dw.to_be_bytes());
        }
        // One call per other field (constant offsets, inlined): this runs once per UMR.
        let _ = mkc::FREE.set(b, self.free as u32);
        let _ = mkc::PD.set(b, self.pd);
        let _ = mkc::QPN.set(b, self.qpn);
        let _ = mkc::MKEY_7_0.set(b, self.variant as u32);
        let _ = mkc::LOG_PAGE_SIZE.set(b, self.log_page_size);
        let _ = mkc::START_ADDR.set_u64(b, self.start);
        let _ = mkc::LEN.set_u64(b, self.len);
    }
}

/// The mkey segment dword of `lr`, `lw`, `rr`, `rw` and `a` (host order), by the access
/// flags' low four bits ([`Access::LOCAL_WRITE`] 1, [`Access::REMOTE_WRITE`] 2,
/// [`Access::REMOTE_READ`] 4, [`Access::REMOTE_ATOMIC`] 8): `lr` always set, as Linux
/// `mlx5r_umr_set_access_flags` does; each other bit from its flag. Built from the PRM field
/// positions (`access_dword_matches_the_fields`).
const ACCESS_DWORD: [u32; 16] = {
    const fn bit(f: mlx5_prm::Field, on: bool) -> u32 {
        (on as u32) << f.shift()
    }
    // The five fields are single bits of one dword.
    let dw = mkc::LR.dword_index();
    assert!(
        mkc::LW.dword_index() == dw
            && mkc::RR.dword_index() == dw
            && mkc::RW.dword_index() == dw
            && mkc::A.dword_index() == dw
            && mkc::LR.mask() == 1
            && mkc::LW.mask() == 1
            && mkc::RR.mask() == 1
            && mkc::RW.mask() == 1
            && mkc::A.mask() == 1
    );
    assert!(
        Access::LOCAL_WRITE.0 == 1
            && Access::REMOTE_WRITE.0 == 2
            && Access::REMOTE_READ.0 == 4
            && Access::REMOTE_ATOMIC.0 == 8
    );
    let mut t = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = bit(mkc::LR, true)
            | bit(mkc::LW, i & 1 != 0)
            | bit(mkc::RW, i & 2 != 0)
            | bit(mkc::RR, i & 4 != 0)
            | bit(mkc::A, i & 8 != 0);
        i += 1;
    }
    t
};

/// One key modification.
#[derive(Clone, Copy, Debug)]
pub struct Umr<'a> {
    /// The key (`imm` of the ctrl segment), with its current variant.
    pub key: u32,
    /// [`flags::CHECK_FREE`] / [`flags::CHECK_NOT_FREE`] or 0 (the translation flags are the
    /// driver's).
    pub check: u8,
    /// [`mkey_mask`] bits: which fields of `seg` are written.
    pub mask: u64,
    /// The fields.
    pub seg: MkeySeg,
    /// MTT entries (page bus addresses with [`mkey::MTT_PRESENT`]) written from entry
    /// `mtt_offset` on; `mtt_offset` must be even (entries go in 16-byte octowords).
    pub mtt: &'a [u64],
    /// The first entry written.
    pub mtt_offset: u64,
}

/// Size classes of the mkey cache: the MTT entries a pooled key has room for (64 KiB and
/// 512 KiB of 4 KiB pages, 2 MiB of 4 KiB pages). Linux keeps its cache by entry count too
/// (ib/mr.c `mlx5_mkey_cache_init`, `rb_key.ndescs`).
pub const CACHE_CLASSES: [u32; 3] = [16, 128, 512];

/// A region's state kept with its key while the key waits in the cache (Linux keeps its
/// per-mkey state with the cache entry too, ib/mr.c `mlx5_mr_cache_alloc` /
/// `mlx5_revoke_mr` -> `cache_ent_find_and_store`): the next registration of the key
/// overwrites it in place instead of allocating a new one. Dead: destroyed, no buffer, its
/// PD the UMR PD.
pub(crate) type Parked<H> = Option<Arc<MrInner<H>>>;

/// The mkey cache: free `umr_en` keys of the UMR PD, by size class, each with the region
/// allocation it last served (if it was deregistered with one to spare).
pub(crate) struct Pool<H: Hal> {
    classes: [Vec<(u32, Parked<H>)>; CACHE_CLASSES.len()],
}

impl<H: Hal> Default for Pool<H> {
    fn default() -> Self {
        Pool {
            classes: Default::default(),
        }
    }
}

impl<H: Hal> Pool<H> {
    /// [`UmrRes::take`].
    #[inline(always)]
    pub(crate) fn take(&mut self, entries: usize, random: u32) -> Option<(u32, u8, Parked<H>)> {
        // The smallest class that fits and has a key (a plain loop: with `entries` known,
        // as on the one-page path, it folds to the first class's emptiness test).
        let mut c = 0;
        let v = loop {
            let room = *CACHE_CLASSES.get(c)?;
            match self.classes.get_mut(c) {
                Some(v) if entries <= room as usize && !v.is_empty() => break v,
                _ => c += 1,
            }
        };
        let at = ((random as u64 * v.len() as u64) >> 32) as usize;
        // `swap_remove(at)`, written out so that it inlines: the last key fills the hole.
        let last = v.pop()?;
        let (key, parked) = match v.get_mut(at) {
            Some(slot) => core::mem::replace(slot, last),
            None => last,
        };
        Some((key, c as u8, parked))
    }
}

/// The context's UMR resources.
pub(crate) struct UmrRes<H: Hal> {
    pub(crate) pool: Pool<H>,
    qp: QueuePair<H>,
    cq: CompletionQueue<H>,
    /// Staging region for translations loaded by pointer.
    xlt: MemoryRegion<H>,
    _pd: ProtectionDomain<H>,
    next: u64,
    /// Random words for the cache's registrations, drawn under the UMR lock.
    rand: crate::rand::Stream,
}

impl<H: Hal> UmrRes<H> {
    pub(crate) fn new(ctx: &Arc<CtxInner<H>>) -> Result<Self> {
        let pd = ProtectionDomain::alloc_internal(ctx)?;
        let mut cq = crate::cq::create(ctx, 64, None)?;
        // Only this driver's plain UMRs complete on it (no BIND_MW or LOCAL_INV).
        cq.set_plain_umr();
        let caps = QpCaps {
            max_send_wr: BATCH_MAX as u32,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 1,
            // Room for the largest UMR WQE (ctrl 16 + umr ctrl 48 + mkey 64 + 16 inline
            // entries of 8 bytes = 256 bytes): the layout sizes WQEs by inline data.
            max_inline_data: 256,
        };
        let mut qp =
            crate::qp::create_fre(pd.inner_arc(), &cq, &cq, &caps, &QpOptions::default(), true)?;
        let me = qp.endpoint();
        qp.connect(&me, &ConnectOptions::default())?;
        let xlt = pd.alloc_mr(XLT_CHUNK_MTT * mkey::MTT_ENTRY_SIZE, Access::LOCAL_WRITE)?;
        Ok(UmrRes {
            pool: Pool::default(),
            qp,
            cq,
            xlt,
            _pd: pd,
            next: 0,
            rand: Default::default(),
        })
    }

    /// Posts one UMR WQE and waits for its completion. The CQ is looked at before the clock
    /// is read: the device usually completes a UMR before the poll (the deadline costs a
    /// clock read only when it has not).
    fn post_wait(&mut self, hal: &H, key: u32, body: &[u8]) -> Result<()> {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.qp.post_raw(id, wqe::opcode::UMR, key, body)?;
        self.wait_one(hal)
    }

    /// [`UmrRes::post_wait`] for inline UMR `u` (at most [`INLINE_MAX_MTT`] entries): its
    /// body is written straight into the send queue ([`inline_into`]), as rdma-core and Linux
    /// build WQEs in the ring, not built on the stack and copied.
    #[inline(always)]
    fn post_inline_wait(&mut self, hal: &H, u: &Umr<'_>) -> Result<()> {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        let f = wqe::fence::INITIATOR_SMALL | wqe::ctrl::CQ_UPDATE;
        let at = self.write_inline::<false>(id, u, f)?;
        self.qp.ring_send_now(at);
        self.wait_one(hal)
    }

    /// Writes inline UMR `u` as WR `id` with ctrl `fm_ce_se` `f`, its body straight into the
    /// send queue ([`inline_into`] writes every byte of it: nothing to clear first); returns
    /// the WQE's first block. `RESERVED` as for [`QueuePair::write_raw_body`].
    #[inline(always)]
    fn write_inline<const RESERVED: bool>(
        &mut self,
        id: u64,
        u: &Umr<'_>,
        f: u8,
    ) -> Result<*const u8> {
        self.qp.write_raw_body::<RESERVED>(
            id,
            wqe::opcode::UMR,
            u.key,
            inline_len(u),
            f,
            0,
            #[inline(always)]
            |b| inline_into(b, u),
        )
    }

    /// Polls the completion of the one UMR just posted, within [`UMR_TIMEOUT`]: one CQE
    /// ([`CompletionQueue::poll_one`]: the successful completion of the WQE the send queue
    /// expects next inline, anything else through the full parser, error CQEs included).
    /// The usual case, its own successful completion at once, takes no [`WorkCompletion`]
    /// ([`CompletionQueue::take_own_success`]); anything else goes to
    /// [`UmrRes::wait_one_wc`].
    #[inline(always)]
    fn wait_one(&mut self, hal: &H) -> Result<()> {
        if let Some(r) = self.cq.take_own_success() {
            r?;
            self.qp.release_completed();
            return Ok(());
        }
        self.wait_one_wc(hal)
    }

    /// [`UmrRes::wait_one`] through a [`WorkCompletion`]: error CQEs (status and syndrome),
    /// a completion not there yet, and whatever else the full parser decides.
    #[inline(never)]
    fn wait_one_wc(&mut self, hal: &H) -> Result<()> {
        let mut wc = WorkCompletion::default();
        if !self.cq.poll_one(&mut wc)? {
            self.wait_one_slow(hal, &mut wc)?;
        }
        self.qp.release_completed();
        match wc.status {
            WcStatus::Success => Ok(()),
            status => self.failed(status, wc.vendor_err),
        }
    }

    /// [`UmrRes::wait_one`] when the completion was not there at once: polls until it is, or
    /// [`UMR_TIMEOUT`] passed.
    #[cold]
    #[inline(never)]
    fn wait_one_slow(&mut self, hal: &H, wc: &mut WorkCompletion) -> Result<()> {
        let deadline = hal.now().saturating_add(UMR_TIMEOUT);
        loop {
            hal.relax();
            if self.cq.poll_one(wc)? {
                return Ok(());
            }
            if hal.now() >= deadline {
                return Err(Error::Timeout);
            }
        }
    }

    /// A UMR completed with an error: the QP goes back to RTS, and the error names the CQE's
    /// status and vendor syndrome.
    #[cold]
    #[inline(never)]
    fn failed(&mut self, status: WcStatus, vendor: u8) -> Result<()> {
        // Linux `mlx5r_umr_recover`: back to RTS for the next UMR.
        let _ = self.recover();
        Err(Error::Umr { status, vendor })
    }

    /// 32 random bits for a registration from the cache (the pick among the free keys and
    /// the variant's first tries): [`crate::rand::Stream`] under the UMR lock this holder
    /// implies, keyed from the context's generator.
    #[inline(always)]
    pub(crate) fn random32(&mut self, ctx: &CtxInner<H>) -> u32 {
        self.rand.next32(&ctx.rng, &ctx.hal)
    }

    /// The UMR PD's number (free pooled keys belong to it, as Linux cache keys belong to
    /// `umrc.pd`).
    pub(crate) fn pdn(&self) -> u32 {
        self._pd.pdn()
    }

    /// Adds `n` keys to each size class (CREATE_MKEY: free, `umr_en`, the class's room).
    pub(crate) fn fill(&mut self, n: usize) -> Result<()> {
        for (i, &room) in CACHE_CLASSES.iter().enumerate() {
            for _ in 0..n {
                let k = self._pd.alloc_umr_mkey(room)?;
                self.pool.classes[i].push((k, None));
            }
        }
        Ok(())
    }

    /// Keys in the cache.
    pub(crate) fn pooled(&self) -> usize {
        self.pool.classes.iter().map(Vec::len).sum()
    }

    /// Takes a key with room for `entries` MTT entries, chosen at random (by `random`, scaled
    /// to the class's length: its high bits count; the registration paths pass 16 random bits
    /// in the high half, a bias of at most length / 2^16) among the free keys of the smallest class that fits (ReDMArk: the index
    /// part of the next key is not the previous one's plus one). `(key, class, parked region
    /// allocation)`.
    #[inline(always)]
    pub(crate) fn take(&mut self, entries: usize, random: u32) -> Option<(u32, u8, Parked<H>)> {
        self.pool.take(entries, random)
    }

    /// Puts a free key back (with the region allocation it came with, if any).
    pub(crate) fn put(&mut self, key: u32, class: u8, parked: Parked<H>) {
        if let Some(v) = self.pool.classes.get_mut(class as usize) {
            v.push((key, parked));
        }
    }

    /// The UMR PD (a parked region allocation refers to it instead of its last PD).
    pub(crate) fn pd_arc(&self) -> &Arc<crate::pd::PdInner<H>> {
        self._pd.inner_arc()
    }

    fn recover(&mut self) -> Result<()> {
        self.qp.to_reset()?;
        let me = self.qp.endpoint();
        self.qp.connect(&me, &ConnectOptions::default())
    }

    /// Executes `u`: the translation in pieces, the mkey fields with the last piece. The WQE
    /// is built on the stack and the entries staged in place: no allocation per UMR. Inlined
    /// into its callers for an inline translation (the registration paths' one WQE), so that
    /// `u` never needs to exist in memory; a longer one goes through [`UmrRes::run_xlt`].
    #[inline(always)]
    pub(crate) fn run(&mut self, hal: &H, u: &Umr<'_>) -> Result<()> {
        if !u.mtt_offset.is_multiple_of(2) {
            return Err(InvalidInput::OutOfRange.into());
        }
        if u.check & !(flags::CHECK_FREE | flags::CHECK_NOT_FREE) != 0 {
            return Err(InvalidInput::OutOfRange.into());
        }
        if u.mtt.len() <= INLINE_MAX_MTT {
            return self.post_inline_wait(hal, u);
        }
        self.run_xlt(hal, u)
    }

    /// [`UmrRes::run`] of a translation too long to go inline: staged, in pieces.
    #[inline(never)]
    fn run_xlt(&mut self, hal: &H, u: &Umr<'_>) -> Result<()> {
        let seg = u.seg.bytes();
        let mut body = Body::new();
        let mut done = 0usize;
        while done < u.mtt.len() {
            let n = (u.mtt.len() - done).min(XLT_CHUNK_MTT);
            let last = done + n == u.mtt.len();
            let bytes = self.stage(&u.mtt[done..done + n])?;
            let mask = if last { u.mask } else { 0 };
            body.clear();
            header(
                &mut body,
                u.check,
                n,
                u.mtt_offset + done as u64,
                mask,
                &seg,
            );
            // The data segment (Linux `mlx5r_umr_set_update_xlt_data_seg`).
            body.push(&(bytes as u32).to_be_bytes());
            body.push(&self.xlt.lkey().to_be_bytes());
            body.push(&self.xlt.addr().to_be_bytes());
            self.post_wait(hal, u.key, body.bytes())?;
            done += n;
        }
        Ok(())
    }

    /// Runs inline UMRs ([`INLINE_MAX_MTT`] entries at most each) with one doorbell per
    /// [`BATCH_MAX`] WQEs, and polls their completions: `out[i]` says what became of
    /// `umr(i)`. A UMR completed with an error leaves its key as it was, and the WQEs
    /// after it on the QP are flushed without executing (the QP went to the error state;
    /// IBTA: work requests after an error complete in error), so their keys are unchanged
    /// too; the QP is then recovered as after a single failed UMR. A completion that never
    /// comes leaves its key [`Outcome::Unknown`].
    ///
    /// The UMRs are `umr(0)`, ..., `umr(count - 1)`, each built as its WQE is written (inlined
    /// into the caller, so that the fields it fixes fold into the WQE writes), never gathered
    /// in an array.
    #[inline(always)]
    pub(crate) fn run_batch<'a>(
        &mut self,
        hal: &H,
        count: usize,
        umr: impl Fn(usize) -> Umr<'a>,
        out: &mut [Outcome],
    ) {
        let count = count.min(out.len());
        out.fill(Outcome::Unchanged);
        let mut at = 0;
        while at < count {
            let n = (count - at).min(BATCH_MAX);
            let base = self.next;
            let mut posted = 0usize;
            let mut last = core::ptr::null();
            // The QP's state and room for the whole group, once (nothing posted otherwise:
            // every key unchanged).
            if self.qp.check_can_send().is_err() || self.qp.reserve_sq(n).is_err() {
                return;
            }
            for j in at..at + n {
                let u = &umr(j);
                if !u.mtt_offset.is_multiple_of(2)
                    || u.check & !(flags::CHECK_FREE | flags::CHECK_NOT_FREE) != 0
                    || u.mtt.len() > INLINE_MAX_MTT
                {
                    break;
                }
                let id = self.next;
                // Only the batch's last WQE asks for a completion: it covers every earlier one
                // (completions come in SQ order; rdma-core's selective signaling,
                // `IBV_SEND_SIGNALED` with `sq_sig_all = 0`). A WR that fails completes in
                // error whether it was signaled or not (ibv_poll_cq, as rdmamojo.com
                // 2013/02/15 documents it: "signaled Send Requests and Send Requests that
                // ended with an error will generate a Work Completion"; a completion also
                // covers the unsignaled WRs before it; the model's `rcpath::retire_local`
                // writes the error CQE of a failed WQE regardless of its CQ_UPDATE), naming
                // the WQE that failed.
                let mut f = wqe::fence::INITIATOR_SMALL;
                if posted + 1 == n {
                    f |= wqe::ctrl::CQ_UPDATE;
                }
                // The body written straight into the send queue ([`inline_into`]).
                match self.write_inline::<true>(id, u, f) {
                    Ok(p) => last = p,
                    Err(_) => break, // not posted: unchanged
                }
                self.next = self.next.wrapping_add(1);
                posted += 1;
            }
            if posted == 0 {
                return;
            }
            if posted < n {
                // The last WQE written asks for the completion after all (the next one was
                // not written).
                self.qp.set_cq_update(last);
            }
            self.qp.ring_send(last, None);
            // Completions in posting order (one SQ): the last WQE's covers the batch; an
            // error completion names the WQE that failed (the ones before it executed).
            let mut wc = [WorkCompletion::default(); BATCH_MAX];
            let mut seen = 0usize;
            let mut failed = false;
            let mut deadline = None;
            while seen < posted && !failed {
                let Ok(got) = self.cq.poll(&mut wc[..BATCH_MAX.min(posted - seen)]) else {
                    // The device is gone: the keys without a completion are not known.
                    for o in &mut out[at + seen..at + posted] {
                        *o = Outcome::Unknown;
                    }
                    return;
                };
                for w in &wc[..got] {
                    let k = w.wr_id.wrapping_sub(base) as usize;
                    if k >= posted || k < seen {
                        continue;
                    }
                    // Every WQE before `k` completed successfully.
                    for o in &mut out[at + seen..at + k] {
                        *o = Outcome::Done;
                    }
                    if w.status == WcStatus::Success {
                        out[at + k] = Outcome::Done;
                    } else {
                        // This one and every later one did not execute.
                        failed = true;
                    }
                    seen = k + 1;
                }
                if got == 0 {
                    let d = *deadline.get_or_insert_with(|| hal.now().saturating_add(UMR_TIMEOUT));
                    if hal.now() >= d {
                        for o in &mut out[at + seen..at + posted] {
                            *o = Outcome::Unknown;
                        }
                        return;
                    }
                    hal.relax();
                }
            }
            self.qp.release_completed();
            if failed {
                // Linux `mlx5r_umr_recover`: back to RTS for the next UMR.
                if self.recover().is_err() {
                    return;
                }
            }
            if posted < n {
                return; // the rest was not posted: unchanged
            }
            at += n;
        }
    }

    /// Writes `mtt` big-endian into the staging region from its start, padded with a zero
    /// entry to whole octowords; returns the bytes written.
    fn stage(&self, mtt: &[u64]) -> Result<usize> {
        const STEP: usize = 128;
        let mut tmp = [0u8; STEP * mkey::MTT_ENTRY_SIZE];
        let mut off = 0usize;
        for part in mtt.chunks(STEP) {
            for (d, e) in tmp.chunks_exact_mut(mkey::MTT_ENTRY_SIZE).zip(part) {
                d.copy_from_slice(&e.to_be_bytes());
            }
            let n = part.len() * mkey::MTT_ENTRY_SIZE;
            self.xlt.write(off as u64, &tmp[..n])?;
            off += n;
        }
        if !mtt.len().is_multiple_of(2) {
            self.xlt.write(off as u64, &[0; mkey::MTT_ENTRY_SIZE])?;
            off += mkey::MTT_ENTRY_SIZE;
        }
        Ok(off)
    }
}

/// The segments of one UMR WQE after its ctrl segment, built on the stack (at most 4 basic
/// blocks less the ctrl segment).
struct Body {
    b: [u8; BODY_MAX],
    len: usize,
}

/// umr ctrl 48 + mkey 64 + [`INLINE_MAX_MTT`] entries of 8 bytes.
const BODY_MAX: usize =
    wqe::umr_ctrl_seg::SIZE + mkc::BYTES + INLINE_MAX_MTT * mkey::MTT_ENTRY_SIZE;

impl Body {
    fn new() -> Body {
        Body {
            b: [0; BODY_MAX],
            len: 0,
        }
    }
    fn clear(&mut self) {
        self.b[..self.len].fill(0);
        self.len = 0;
    }
    /// Appends `x` (the callers stay within [`BODY_MAX`]).
    fn push(&mut self, x: &[u8]) {
        self.b[self.len..self.len + x.len()].copy_from_slice(x);
        self.len += x.len();
    }
    fn bytes(&self) -> &[u8] {
        &self.b[..self.len]
    }
}

/// Bytes of inline UMR `u`'s body: UMR ctrl segment, mkey segment and its entries (at most
/// [`INLINE_MAX_MTT`]), padded to whole octowords.
#[inline(always)]
fn inline_len(u: &Umr<'_>) -> usize {
    let n = u.mtt.len().min(INLINE_MAX_MTT);
    (wqe::umr_ctrl_seg::SIZE + mkc::BYTES + n * mkey::MTT_ENTRY_SIZE)
        .next_multiple_of(wqe::SEND_WQE_DS)
}

/// Writes inline UMR `u`'s body into `b` ([`inline_len`] bytes), every byte of it (the send
/// queue slot is not cleared first): UMR ctrl segment, mkey segment and the entries, each
/// segment built whole in registers and stored once, and a zero entry padding an odd count
/// to a whole octoword.
#[inline(always)]
fn inline_into(b: &mut [u8], u: &Umr<'_>) {
    const MKC_AT: usize = wqe::umr_ctrl_seg::SIZE;
    const XLT_AT: usize = MKC_AT + mkc::BYTES;
    let n = u.mtt.len().min(INLINE_MAX_MTT);
    if let Some(c) = b.first_chunk_mut::<MKC_AT>() {
        let mut seg = [0u8; MKC_AT];
        umr_ctrl(&mut seg, u.check | flags::INLINE, n, u.mtt_offset, u.mask);
        *c = seg;
    }
    if let Some(d) = b
        .get_mut(MKC_AT..)
        .and_then(|s| s.first_chunk_mut::<{ mkc::BYTES }>())
    {
        let mut seg = [0u8; mkc::BYTES];
        u.seg.write(&mut seg);
        *d = seg;
    }
    if let Some(x) = b.get_mut(XLT_AT..) {
        let mut e = u.mtt[..n].iter();
        for d in x.chunks_exact_mut(mkey::MTT_ENTRY_SIZE) {
            let v = e.next().copied().unwrap_or(0);
            d.copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// Appends `mlx5_wqe_umr_ctrl_seg` + mkey segment for `entries` MTT entries at entry `offset`
/// to an empty `b`.
fn header(b: &mut Body, flags: u8, entries: usize, offset: u64, mask: u64, seg: &[u8; mkc::BYTES]) {
    let mut c = [0u8; wqe::umr_ctrl_seg::SIZE];
    umr_ctrl(&mut c, flags, entries, offset, mask);
    b.push(&c);
    b.push(seg);
}

/// Writes `mlx5_wqe_umr_ctrl_seg` for `entries` MTT entries at entry `offset` into the zeroed
/// `c` (Linux ib/umr.c `mlx5r_umr_set_update_xlt_ctrl_seg`).
#[inline(always)]
fn umr_ctrl(
    c: &mut [u8; wqe::umr_ctrl_seg::SIZE],
    flags: u8,
    entries: usize,
    offset: u64,
    mask: u64,
) {
    let oct = entries.div_ceil(2) as u16; // two 8-byte entries per octoword
    let oct_off = offset / 2;
    let mut f = flags;
    if entries > 0 {
        f |= flags::TRANSLATION_OFFSET_EN;
        let at = wqe::umr_ctrl_seg::TRANSLATION_OFFSET;
        c[at..at + 2].copy_from_slice(&((oct_off & 0xffff) as u16).to_be_bytes());
        let at = wqe::umr_ctrl_seg::XLT_OFFSET_47_16;
        c[at..at + 4].copy_from_slice(&((oct_off >> 16) as u32).to_be_bytes());
    }
    c[wqe::umr_ctrl_seg::FLAGS] = f;
    let at = wqe::umr_ctrl_seg::KLM_OCTOWORDS;
    c[at..at + 2].copy_from_slice(&oct.to_be_bytes());
    let at = wqe::umr_ctrl_seg::MKEY_MASK;
    c[at..at + 8].copy_from_slice(&mask.to_be_bytes());
}

impl<H: Hal> Drop for UmrRes<H> {
    fn drop(&mut self) {
        // Free pooled keys are destroyed with the UMR PD; keys lent to live regions are
        // destroyed by their regions (DESTROY_MKEY once the UMR QP is gone).
        for v in &mut self.pool.classes {
            for (k, _parked) in v.drain(..) {
                let _ = self._pd.destroy_umr_mkey(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`MkeySeg::write`]'s access dword from [`ACCESS_DWORD`] gives the bytes that setting
    /// `lr`, `lw`, `rr`, `rw` and `a` field by field gives, for every combination of the
    /// four flags (and the other flags ignored), with the other fields set as well.
    #[test]
    fn access_dword_matches_the_fields() {
        for bits in 0..64u32 {
            let a = Access(
                (bits & 0xf)
                    | if bits & 0x10 != 0 {
                        Access::MW_BIND.0
                    } else {
                        0
                    },
            );
            let seg = MkeySeg {
                free: bits & 0x20 != 0,
                pd: 0x12_3456,
                qpn: 0xff_ffff,
                variant: 0xa5,
                access: a,
                start: 0x7f00_1234_5000,
                len: 0x1000,
                log_page_size: 12,
            };
            let mut want = [0u8; mkc::BYTES];
            let w = &mut want;
            let _ = mkc::FREE.set(w, seg.free as u32);
            let _ = mkc::PD.set(w, seg.pd);
            let _ = mkc::QPN.set(w, seg.qpn);
            let _ = mkc::MKEY_7_0.set(w, seg.variant as u32);
            let _ = mkc::LR.set(w, 1);
            let _ = mkc::LW.set(w, a.contains(Access::LOCAL_WRITE) as u32);
            let _ = mkc::RR.set(w, a.contains(Access::REMOTE_READ) as u32);
            let _ = mkc::RW.set(w, a.contains(Access::REMOTE_WRITE) as u32);
            let _ = mkc::A.set(w, a.contains(Access::REMOTE_ATOMIC) as u32);
            let _ = mkc::LOG_PAGE_SIZE.set(w, seg.log_page_size);
            let _ = mkc::START_ADDR.set_u64(w, seg.start);
            let _ = mkc::LEN.set_u64(w, seg.len);
            assert_eq!(seg.bytes(), want, "access {:#x}, free {}", a.0, seg.free);
        }
    }

    /// [`Pool::take`]: the smallest class that fits and has a key, the key at
    /// `(random * len) >> 32` of it, the last key moved into its place (as `swap_remove`),
    /// and nothing when no class fits.
    #[test]
    fn pool_take_picks_by_random_from_the_smallest_fitting_class() {
        type H = crate::test_hal::TestHal;
        let mut p = Pool::<H>::default();
        p.classes[1] = (0..4u32).map(|k| (0x100 + k, None)).collect();
        p.classes[2] = (0..3u32).map(|k| (0x200 + k, None)).collect();
        // Class 0 is empty: a one-entry region takes class 1; random 2^31 of 4 keys: index 2.
        let (k, c, _) = p.take(1, 1 << 31).unwrap();
        assert_eq!((k, c), (0x102, 1));
        let keys = |v: &Vec<(u32, Parked<H>)>| v.iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(
            keys(&p.classes[1]),
            [0x100, 0x101, 0x103],
            "the last key filled the hole"
        );
        // The last index (random just under 2^32) takes the last key.
        let (k, _, _) = p.take(1, u32::MAX).unwrap();
        assert_eq!(k, 0x103);
        assert_eq!(keys(&p.classes[1]), [0x100, 0x101]);
        // Too many entries for class 1: class 2.
        let (k, c, _) = p.take(CACHE_CLASSES[1] as usize + 1, 0).unwrap();
        assert_eq!((k, c), (0x200, 2));
        assert_eq!(keys(&p.classes[2]), [0x202, 0x201]);
        // More than the largest class holds: none.
        assert!(p.take(CACHE_CLASSES[2] as usize + 1, 0).is_none());
        p.classes[1].clear();
        p.classes[2].clear();
        assert!(p.take(1, 0).is_none(), "every class empty");
    }
    use crate::test_hal::{open, pair, wait};

    /// The body [`inline_into`] writes in place (into the send queue) is the one the segment
    /// builders give: UMR ctrl segment with the INLINE flag, mkey segment, the entries, and a
    /// zero entry padding an odd count to a whole octoword; [`inline_len`] is its length.
    #[test]
    fn inline_body_written_in_place_matches_the_segment_builders() {
        let seg = MkeySeg {
            pd: 5,
            qpn: 0xff_ffff,
            variant: 0x42,
            start: 0x1000,
            len: 3 * 4096,
            log_page_size: 12,
            ..MkeySeg::default()
        };
        let entries = [
            0x10_0000u64 | mkey::MTT_PRESENT,
            0x20_0000 | mkey::MTT_PRESENT,
            0x30_0000 | mkey::MTT_PRESENT,
        ];
        for n in 1..=3 {
            let u = Umr {
                key: 0x1234_5642,
                check: flags::CHECK_NOT_FREE,
                mask: ENABLE_MASK,
                seg,
                mtt: &entries[..n],
                mtt_offset: 0,
            };
            let mut want = Body::new();
            header(
                &mut want,
                flags::CHECK_NOT_FREE | flags::INLINE,
                n,
                0,
                ENABLE_MASK,
                &seg.bytes(),
            );
            for e in &entries[..n] {
                want.push(&e.to_be_bytes());
            }
            if n % 2 == 1 {
                want.push(&[0; 8]);
            }
            assert_eq!(inline_len(&u), want.bytes().len(), "{n} entries");
            // Over a slot's old bytes: every byte is written, padding included.
            let mut got = [0xa5u8; BODY_MAX];
            inline_into(&mut got[..inline_len(&u)], &u);
            assert_eq!(&got[..inline_len(&u)], want.bytes(), "{n} entries");
        }
    }

    /// A UMR WQE on a QP created without `qpc.fre` completes with a local QP operation
    /// error and changes nothing.
    #[test]
    fn umr_on_a_qp_without_fre_is_refused() {
        let (sim, ctx) = open();
        let caps = QpCaps {
            max_inline_data: 256,
            ..QpCaps::default()
        };
        let mut p = pair(&ctx, caps);
        let key = p.pd.alloc_umr_mkey(2).expect("key");
        let seg = MkeySeg {
            pd: p.pd.pdn(),
            qpn: 0xff_ffff,
            variant: key as u8,
            start: 0x1000,
            len: 4096,
            log_page_size: 12,
            ..MkeySeg::default()
        };
        let mut body = Body::new();
        header(
            &mut body,
            flags::CHECK_NOT_FREE | flags::INLINE,
            2,
            0,
            ENABLE_MASK,
            &seg.bytes(),
        );
        body.push(&(0x10_0000u64 | mkey::MTT_PRESENT).to_be_bytes());
        body.push(&[0; 8]);
        p.a.post_raw(7, wqe::opcode::UMR, key, body.bytes())
            .expect("post");
        let w = wait(&mut p.cq_a, 1);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].status, WcStatus::LocQpOpErr);
        assert_eq!(w[0].vendor_err, mlx5_sim::umr::umr_vendor::NOT_FRE);
        sim.with_hca(|h| assert!(h.mkeys.by_index(key >> 8).expect("key").free));
    }
}
