//! The context layer: the state an opened function shares with every object made on it
//! ([`CtxInner`]: the device lock, capabilities, the UAR, the dead-device flag), the live
//! regions by key for the lkey check ([`MrTable`]), and key variants. Objects (CQs, QPs, UMR,
//! counters, windows) sit on it; the verbs API wraps it in [`crate::Context`].

use alloc::boxed::Box;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::caps::Caps;
use crate::cmd::CmdBuf;
use crate::error::{Error, Result};
use crate::hal::Hal;
use crate::hca::{self, Config, Device};
use crate::mr::{self, Access};
use crate::rand::Rng;
use crate::uar::Uar;

/// A live MR as the lkey check sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MrInfo {
    /// The full key (the table is by key index).
    key: u32,
    /// False once the region is gone but its key stays with the driver (a key back in the
    /// mkey cache keeps its slot, so that its next registration overwrites it in place).
    live: bool,
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
}

impl MrInfo {
    /// An empty slot (no key: key 0 is never looked up live).
    const EMPTY: MrInfo = MrInfo {
        key: 0,
        live: false,
        iova: 0,
        len: 0,
        access: Access::NONE,
    };

    pub(crate) fn new(key: u32, iova: u64, len: u64, access: Access) -> MrInfo {
        MrInfo {
            key,
            live: true,
            iova,
            len,
            access,
        }
    }
}

/// Slots per page of [`MrTable`].
const MR_PAGE: usize = 256;

/// The live regions by key index (`key >> 8`), for the raw layer's lkey check: a two-level
/// table (pages of [`MR_PAGE`] slots, allocated when a key index first lands in them), so a
/// lookup, an insert and a removal are two indexed loads (firmware hands out mkey indices in
/// sequence, so the keys of a context share a few pages). A slot whose region is gone is
/// marked so (`live` false) and refuses its key.
#[derive(Default)]
pub(crate) struct MrTable(Vec<Option<Box<[MrInfo; MR_PAGE]>>>);

impl MrTable {
    #[inline]
    fn slot(&self, index: u32) -> Option<&MrInfo> {
        let i = index as usize;
        self.0.get(i / MR_PAGE)?.as_ref()?.get(i % MR_PAGE)
    }

    #[inline]
    fn slot_mut(&mut self, index: u32) -> Option<&mut MrInfo> {
        let i = index as usize;
        self.0.get_mut(i / MR_PAGE)?.as_mut()?.get_mut(i % MR_PAGE)
    }

    /// The live region whose key is `key`.
    #[inline]
    pub(crate) fn get(&self, key: u32) -> Option<&MrInfo> {
        self.slot(key >> 8).filter(|m| m.key == key && m.live)
    }

    /// Records a region (replacing what its key's index held): in place when the key's page
    /// exists (every key but a context's first in each 256 indices).
    #[inline]
    pub(crate) fn insert(&mut self, m: MrInfo) {
        match self.slot_mut(m.key >> 8) {
            Some(e) => *e = m,
            None => self.insert_new_page(m),
        }
    }

    /// [`MrTable::insert`] of a key whose page is not there yet.
    #[inline(never)]
    fn insert_new_page(&mut self, m: MrInfo) {
        let i = (m.key >> 8) as usize;
        let page = i / MR_PAGE;
        if self.0.len() <= page {
            self.0.resize_with(page + 1, || None);
        }
        if let Some(p) = self.0.get_mut(page) {
            let p = p.get_or_insert_with(|| Box::new([MrInfo::EMPTY; MR_PAGE]));
            if let Some(e) = p.get_mut(i % MR_PAGE) {
                *e = m;
            }
        }
    }

    /// Forgets the region of `key` (its slot refuses the key from now on); with `keep_slot`
    /// (a key going back to the mkey cache) its slot stays its key's, marked gone.
    pub(crate) fn remove(&mut self, key: u32, keep_slot: bool) {
        if let Some(e) = self.slot_mut(key >> 8).filter(|e| e.key == key) {
            if keep_slot {
                e.live = false;
            } else {
                *e = MrInfo::EMPTY;
            }
        }
    }

    /// Empties the slot of key index `key >> 8` if no live region holds it (a cached key
    /// destroyed).
    pub(crate) fn forget_slot(&mut self, key: u32) {
        if let Some(e) = self.slot_mut(key >> 8).filter(|e| !e.live) {
            *e = MrInfo::EMPTY;
        }
    }

    /// Slots held by a key (live, or a cached key's kept slot).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.0
            .iter()
            .flatten()
            .map(|p| p.iter().filter(|e| e.live || e.key != 0).count())
            .sum()
    }
}

/// Shared context state.
pub(crate) struct CtxInner<H: Hal> {
    pub(crate) hal: H,
    pub(crate) dev: spin::Mutex<Device<H>>,
    pub(crate) caps: Caps,
    pub(crate) uar: Uar,
    pub(crate) eqn: u8,
    tdn: u32,
    pub(crate) mac: [u8; 6],
    pub(crate) fw: (u16, u16, u16),
    pub(crate) gid0: spin::Mutex<[u8; 16]>,
    pub(crate) rng: Rng,
    pub(crate) mrs: spin::RwLock<MrTable>,
    pub(crate) recent_keys: spin::Mutex<mr::RecentKeys>,
    /// Set (after `fatal_syndrome`) once the device is dead: the one flag every post and poll
    /// reads, without a lock.
    dead: AtomicBool,
    /// The health syndrome, valid once `dead` is set.
    fatal_syndrome: core::sync::atomic::AtomicU8,
    /// The send state of every QP of this context, whose gates `set_dead` closes (the post
    /// fast path checks its gate only, see `WqShared::sq_last`).
    send_gates: spin::Mutex<Vec<Weak<dyn SendGate>>>,
    /// [`crate::eq::EventQueue::peek_word`] of the EQ (0: none), refreshed whenever the
    /// device lock is released: CQ polls check the next EQE's owner byte without the lock.
    eq_peek: core::sync::atomic::AtomicUsize,
    closed: AtomicBool,
    /// The driver's UMR QP ([`crate::umr`]), created on first use: of the type [`UmrHost`]
    /// names.
    pub(crate) umr: spin::Mutex<Option<<H as UmrHost>::Umr>>,
    /// Set when the [`crate::Context`] handle goes: no UMR QP is created after that (it would hold
    /// the context alive).
    pub(crate) umr_off: AtomicBool,
    /// An Ethernet queue is open ([`crate::eth`]): the vport's address lists and the root of
    /// its receive steering are that queue's, so there is one at a time.
    pub(crate) eth_open: AtomicBool,
    /// The context has its GSI QP ([`crate::qp`]'s GSI module): one QP1 per port.
    pub(crate) gsi_open: AtomicBool,
}

/// The type of a context's UMR resources, named by the layer that owns them: the UMR QP is
/// built from a QP, a CQ, a PD and a region, which sit above the context, so the context holds
/// it without naming it (the one implementation, for every HAL, is in [`crate::verbs`]).
pub(crate) trait UmrHost {
    /// The UMR resources (`crate::umr::UmrRes`).
    type Umr: Send;
}

/// What a dead device closes: a QP's send gate (`wq::WqShared`, which sits above the
/// context, implements it).
pub(crate) trait SendGate: Send + Sync {
    /// Closes the gate: every later post fails.
    fn close_gate(&self);
}

impl<H: Hal> CtxInner<H> {
    /// Brings the function up with `cfg` (see [`crate::hca`]).
    pub(crate) fn open(hal: H, cfg: &Config) -> Result<Self> {
        let o = hca::open(&hal, cfg)?;
        let rng = Rng::new(&hal);
        let gid0 = if cfg.default_gid && o.caps.roce {
            hca::link_local_gid(o.mac)
        } else {
            [0; 16]
        };
        let eq_peek = o.dev.eq.as_ref().map_or(0, |q| q.peek_word());
        Ok(CtxInner {
            hal,
            dev: spin::Mutex::new(o.dev),
            caps: o.caps,
            uar: o.uar,
            eqn: o.eqn,
            tdn: o.tdn,
            mac: o.mac,
            fw: o.fw,
            gid0: spin::Mutex::new(gid0),
            rng,
            mrs: spin::RwLock::new(MrTable::default()),
            recent_keys: spin::Mutex::new(mr::RecentKeys::default()),
            dead: AtomicBool::new(false),
            fatal_syndrome: core::sync::atomic::AtomicU8::new(0),
            send_gates: spin::Mutex::new(Vec::new()),
            eq_peek: core::sync::atomic::AtomicUsize::new(eq_peek),
            closed: AtomicBool::new(false),
            umr: spin::Mutex::new(None),
            umr_off: AtomicBool::new(false),
            eth_open: AtomicBool::new(false),
            gsi_open: AtomicBool::new(false),
        })
    }

    /// Tears the function down now (a context whose handle held the only reference); it is
    /// not torn down again on drop, whatever the result.
    pub(crate) fn close(&mut self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        let (uar, tdn) = (self.uar, self.tdn);
        hca::close(&self.hal, self.dev.get_mut(), uar, tdn)
    }

    /// The context's transport domain (ALLOC_TRANSPORT_DOMAIN at bring-up), which the
    /// Ethernet queue's TIS and TIR name ([`crate::eth`]).
    pub(crate) fn tdn(&self) -> u32 {
        self.tdn
    }

    /// Runs `f` with the device locked.
    pub(crate) fn with_dev<T>(&self, f: impl FnOnce(&mut Device<H>) -> Result<T>) -> Result<T> {
        let mut d = self.dev.lock();
        let r = f(&mut d);
        if let Some(s) = d.cmd.fatal {
            self.set_dead(s);
        }
        self.refresh_eq_peek(&d);
        r
    }

    /// Records the dead device for the lock-free checks (command, health and event paths)
    /// and closes every QP's send gate.
    fn set_dead(&self, syndrome: u8) {
        self.fatal_syndrome.store(syndrome, Ordering::Relaxed);
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        // Pairs with the fence in `QueuePair::refresh_limit`.
        core::sync::atomic::fence(Ordering::SeqCst);
        for q in self.send_gates.lock().iter().filter_map(Weak::upgrade) {
            q.close_gate();
        }
    }

    /// Lists a new QP's send state for `set_dead` (forgetting destroyed ones).
    pub(crate) fn register_send_gate<G: SendGate + 'static>(&self, q: &Arc<G>) {
        let mut v = self.send_gates.lock();
        v.retain(|w| w.strong_count() > 0);
        let w: Weak<dyn SendGate> = Arc::<G>::downgrade(q);
        v.push(w);
    }

    fn refresh_eq_peek(&self, d: &Device<H>) {
        let w = d.eq.as_ref().map_or(0, |q| q.peek_word());
        self.eq_peek.store(w, Ordering::Relaxed);
    }

    /// Releases the DMA memory of a create or destroy that failed with `e`: freed when the
    /// device cannot hold it, quarantined when it may (see [`Error::device_may_hold`]).
    pub(crate) fn release_after(
        &self,
        e: &Error,
        mems: impl IntoIterator<Item = crate::hal::DmaMem<H::Dma>>,
    ) {
        self.dev.lock().release_after(e, mems);
    }

    /// Quarantines `mems` unconditionally: a destroy failed, so the device object that
    /// references them still exists, whatever the error was.
    pub(crate) fn hold(&self, mems: impl IntoIterator<Item = crate::hal::DmaMem<H::Dma>>) {
        self.dev.lock().hold(mems);
    }

    /// Executes one command.
    pub(crate) fn exec(&self, c: &CmdBuf, out: &mut [u8]) -> Result<()> {
        self.with_dev(|d| d.exec(&self.hal, c, out))
    }

    /// The hot paths' dead-device check: one load of the flag the command, health and event
    /// paths set (`with_dev`, `poll_events_locked`); a dead device's error carries the fatal
    /// syndrome.
    #[inline]
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.dead.load(Ordering::Relaxed) {
            // Pairs with `set_dead`: the syndrome was stored before the flag.
            core::sync::atomic::fence(Ordering::Acquire);
            let syndrome = self.fatal_syndrome.load(Ordering::Relaxed);
            return Err(Error::DeviceFatal { syndrome });
        }
        Ok(())
    }

    /// Whether `key` was destroyed recently (ReDMArk: such a key is not handed out again).
    #[inline]
    pub(crate) fn key_is_recent(&self, key: u32) -> bool {
        self.recent_keys.lock().contains(key)
    }

    /// Records a destroyed key (see [`CtxInner::key_is_recent`]).
    pub(crate) fn quarantine_key(&self, key: u32) {
        self.recent_keys.lock().push(key);
    }

    pub(crate) fn random(&self) -> u64 {
        self.rng.next(&self.hal)
    }

    pub(crate) fn gid0(&self) -> [u8; 16] {
        *self.gid0.lock()
    }

    /// One owner-bit read of the next EQE, without the device lock; services the EQ only
    /// when something is there (and nobody else holds the lock).
    #[inline]
    pub(crate) fn poll_events_cheap(&self) -> Result<()> {
        let w = self.eq_peek.load(Ordering::Relaxed);
        if w == 0 {
            return Ok(());
        }
        // SAFETY: `w & !1` is the address of an EQE inside the EQ buffer, which lives as long
        // as the device state this context owns (the EQ is destroyed only when the context
        // is, and no CQ outlives its context); volatile: the device writes it. A stale value
        // still names a byte of that buffer.
        let owner = unsafe {
            core::ptr::read_volatile(((w & !1) + mlx5_prm::eq::EQE_SIZE - 1) as *const u8)
        };
        if (owner & 1) as usize != w & 1 {
            return Ok(());
        }
        self.poll_events_locked()
    }

    #[cold]
    fn poll_events_locked(&self) -> Result<()> {
        if let Some(mut d) = self.dev.try_lock() {
            let r = if d.eq.as_ref().is_some_and(|q| q.peek_ready()) {
                d.service_events(&self.hal, false).map(|_| ())
            } else {
                Ok(())
            };
            if let Some(s) = d.cmd.fatal {
                self.set_dead(s);
            }
            self.refresh_eq_peek(&d);
            r?;
        }
        Ok(())
    }
}

impl<H: Hal> Drop for CtxInner<H> {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let d = self.dev.get_mut();
            let _ = hca::close(&self.hal, d, self.uar, self.tdn);
        }
    }
}

/// A new variant for key `key` (a cached key handed out again, or a type-2 window's next
/// bind): not its last one, nor any recently destroyed key (ReDMArk). The first four tries take
/// the bytes of `bits` (random bits the caller drew, unused elsewhere), the next four a new
/// draw; when all eight hit recent keys, the first fresh variant from a random start. Only if
/// every other variant of the index is recent does it settle for the next one.
pub(crate) fn fresh_variant<H: Hal>(ctx: &CtxInner<H>, key: u32, bits: u32) -> u32 {
    pick_variant(key, bits, 4, || ctx.random(), |k| ctx.key_is_recent(k))
}

/// [`fresh_variant`] with only 16 random bits from the caller (`bits`, its low two bytes):
/// two tries from them, then a new draw.
/// The first try is made here (nearly always the one taken: a recent key or the
/// key's own variant are the exceptions); [`pick_variant`] repeats it and goes on, so the
/// pick is the same.
#[inline]
pub(crate) fn fresh_variant16<H: Hal>(ctx: &CtxInner<H>, key: u32, bits: u16) -> u32 {
    let k = (key & !0xff) | (bits & 0xff) as u32;
    if k != key && !ctx.key_is_recent(k) {
        return k;
    }
    pick_variant(
        key,
        bits as u32,
        2,
        || ctx.random(),
        |k| ctx.key_is_recent(k),
    )
}

/// [`fresh_variant`] with its random source and its recent-key test passed in.
/// The first `from_bits` tries (at most 4) take the bytes of `bits`.
#[inline(never)]
fn pick_variant(
    key: u32,
    bits: u32,
    from_bits: usize,
    mut random: impl FnMut() -> u64,
    is_recent: impl Fn(u32) -> bool,
) -> u32 {
    let base = key & !0xff;
    let fresh = |k: u32| k != key && !is_recent(k);
    let mut r = bits as u64;
    for i in 0..8 {
        if i == from_bits.min(4) {
            r = random();
        }
        let k = base | (r & 0xff) as u32;
        r >>= 8;
        if fresh(k) {
            return k;
        }
    }
    let start = random() as u32;
    (0..256u32)
        .map(|i| base | (start.wrapping_add(i) & 0xff))
        .find(|&k| fresh(k))
        .unwrap_or(base | (key.wrapping_add(1) & 0xff))
}

#[cfg(test)]
mod variant_tests {
    use super::pick_variant;

    /// Eight draws that all name recent keys, and the next variant (the old fallback) recent
    /// too: the pick is the one fresh variant left, not a recent key.
    #[test]
    fn a_fresh_variant_is_found_past_eight_recent_draws() {
        let key = 0x1234_5610;
        let fresh_one = 0x1234_5677;
        let recent = |k: u32| k != fresh_one;
        // Draws: 0x11 x4 from `bits`, 0x22 x4 from the second draw, then the scan's start.
        let mut draws = [0x2222_2222u64, 0x80].into_iter();
        let k = pick_variant(key, 0x1111_1111, 4, || draws.next().unwrap(), recent);
        assert_eq!(k, fresh_one);
    }

    /// With 16 bits from the caller, two tries take its bytes and the third a new draw (not
    /// a zero byte past the 16 bits).
    #[test]
    fn sixteen_bits_give_two_tries_then_a_draw() {
        let key = 0x1234_5610;
        let recent = |k: u32| k == 0x1234_5611 || k == 0x1234_5622;
        let mut draws = [0x0000_0033u64].into_iter();
        let k = pick_variant(key, 0x2211, 2, || draws.next().unwrap(), recent);
        assert_eq!(k, 0x1234_5633);
    }

    /// Only when every other variant of the index is recent does it settle for the next one.
    #[test]
    fn the_next_variant_only_when_none_is_fresh() {
        let key = 0x1234_56ff;
        let k = pick_variant(key, 0, 4, || 0, |_| true);
        assert_eq!(k, 0x1234_5600);
    }

    /// A fresh first draw is taken as is, and the key's own variant never is.
    #[test]
    fn first_fresh_draw_wins_and_never_the_same_key() {
        let key = 0x1234_5642;
        assert_eq!(
            pick_variant(key, 0x0000_0043, 4, || 0, |_| false),
            0x1234_5643
        );
        assert_eq!(
            pick_variant(key, 0x0000_4342, 4, || 0, |_| false),
            0x1234_5643
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The region table by key index: a cached key's slot survives its dereg (marked gone,
    /// its lkey refused) and is overwritten by its next registration under a new variant;
    /// the old variant stays refused; a plain key's slot goes with it.
    #[test]
    fn region_table_refuses_gone_and_stale_keys() {
        let mut t = MrTable::default();
        let a = 0x1234_56aa;
        t.insert(MrInfo::new(a, 0x1000, 4096, Access::ALL));
        assert!(t.get(a).is_some());
        t.remove(a, true);
        assert!(t.get(a).is_none(), "gone, slot kept");
        let b = 0x1234_5677; // the same index, a new variant
        t.insert(MrInfo::new(b, 0x2000, 4096, Access::NONE));
        assert!(t.get(a).is_none(), "the old variant");
        assert_eq!(t.get(b).map(|m| m.iova), Some(0x2000));
        t.remove(a, false);
        assert!(
            t.get(b).is_some(),
            "removing a stale key leaves the live one"
        );
        t.forget_slot(b);
        assert!(t.get(b).is_some(), "a live slot is not forgotten");
        t.remove(b, true);
        t.forget_slot(b);
        assert_eq!(t.held(), 0);
        let c = 0x42_01;
        t.insert(MrInfo::new(c, 0, 1, Access::NONE));
        t.remove(c, false);
        assert_eq!(t.held(), 0);
        assert!(t.get(c).is_none());
        // The highest key index, and its neighbours in and out of its page.
        let far = 0xffff_ff12;
        t.insert(MrInfo::new(far, 0x3000, 64, Access::ALL));
        assert_eq!(t.get(far).map(|m| m.len), Some(64));
        assert!(t.get(far ^ 0x100).is_none() && t.get(far - 0x1_0000).is_none());
        assert!(t.get(0).is_none(), "key 0 in an empty slot");
    }
}
