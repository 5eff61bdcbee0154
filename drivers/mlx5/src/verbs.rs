//! The verbs API: [`Context`], [`ProtectionDomain`], [`MemoryRegion`], [`CompletionQueue`],
//! [`QueuePair`] (RC), shaped after libibverbs and safe by default.
//!
//! Ownership: every object holds an `Arc` of its parents (a QP keeps its PD, CQs and the
//! context alive), so handles can be dropped in any order; the device objects are destroyed
//! when the last reference goes. The context tears the function down when it goes.
//!
//! Buffers: a [`MemoryRegion`] owns its DMA memory and is read and written by copy
//! ([`MemoryRegion::read`], [`MemoryRegion::write`]), never through a Rust reference, since the
//! NIC (or a remote peer with REMOTE_WRITE) may write it at any time. A QP keeps a reference
//! to each region its outstanding work requests name (one per region, stamped per WR, not one
//! per WR) until they completed, and to each region bound to it with
//! [`QueuePair::bind_mr`], so a region cannot be deregistered and freed under an in-flight
//! operation ([`MemoryRegion::dereg`] reports [`Error::Busy`]; dropping the handle defers the
//! DESTROY_MKEY to the last reference).
//!
//! Three posting layers: [`QueuePair::post_send`] / [`QueuePair::post_recv`] take [`Sge`]s
//! that borrow regions (checked: same context, inside the region, local write where the
//! device writes); [`QueuePair::post_write`] / [`QueuePair::post_read`] take slices of a
//! region bound to the QP ([`BoundMr`]: a pre-validated handle, so a post is a handle check,
//! a bounds check and the WQE); [`QueuePair::post_send_raw`] / [`QueuePair::post_recv_raw`]
//! are `unsafe` and take addresses and keys (still checked against this context's live
//! regions).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use mlx5_prm::wqe;

use crate::caps::Caps;
use crate::cmd::CmdBuf;
use crate::eq::AsyncEvent;
use crate::error::{Error, InvalidInput, Refused, Result};
use crate::hal::{DmaMem, Hal};
use crate::hca::{self, Config, Device};
use crate::mr::{self, Access, Klm, KlmPlan, MkeyParams, PhysChunk, Xlt};
use crate::qp::{Data, RawSge, WqShared, MAX_SGE};
use crate::rand::Rng;
use crate::uar::Uar;

pub use crate::cq::{
    CompletionChannel, CompletionQueue, CqEvent, WcOpcode, WcStatus, WorkCompletion,
};
pub use crate::eq::AsyncEvent as Event;
pub use crate::hca::Config as ContextConfig;
pub use crate::mr::Access as AccessFlags;
pub use crate::qp::{
    BoundMr, BoundSge, ConnectOptions, Mtu, PostError, QpAttr, QpCaps, QpEndpoint, QpOptions,
    QueuePair, RawData, RawRecvWr, RawSendWr, Remote, SendFlags, SendOp,
};

/// A live MR as the lkey check sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MrInfo {
    iova: u64,
    len: u64,
    access: Access,
}

/// Shared context state.
pub(crate) struct CtxInner<H: Hal> {
    pub(crate) hal: H,
    dev: spin::Mutex<Device<H>>,
    pub(crate) caps: Caps,
    pub(crate) uar: Uar,
    pub(crate) eqn: u8,
    tdn: u32,
    pub(crate) mac: [u8; 6],
    fw: (u16, u16, u16),
    gid0: spin::Mutex<[u8; 16]>,
    rng: Rng,
    pub(crate) mrs: spin::RwLock<BTreeMap<u32, MrInfo>>,
    recent_keys: spin::Mutex<VecDeque<u32>>,
    /// Set (after `fatal_syndrome`) once the device is dead: the one flag every post and poll
    /// reads, without a lock.
    dead: AtomicBool,
    /// The health syndrome, valid once `dead` is set.
    fatal_syndrome: core::sync::atomic::AtomicU8,
    /// The send state of every QP of this context, whose gates `set_dead` closes (the post
    /// fast path checks its gate only, see `WqShared::sq_last`).
    send_gates: spin::Mutex<Vec<Weak<WqShared>>>,
    /// [`crate::eq::EventQueue::peek_word`] of the EQ (0: none), refreshed whenever the
    /// device lock is released: CQ polls check the next EQE's owner byte without the lock.
    eq_peek: core::sync::atomic::AtomicUsize,
    closed: AtomicBool,
    /// The driver's UMR QP ([`crate::umr`]), created on first use.
    umr: spin::Mutex<Option<crate::umr::UmrRes<H>>>,
    /// Set when the [`Context`] handle goes: no UMR QP is created after that (it would hold
    /// the context alive).
    umr_off: AtomicBool,
}

impl<H: Hal> CtxInner<H> {
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
    pub(crate) fn register_send_gate(&self, q: &Arc<WqShared>) {
        let mut v = self.send_gates.lock();
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(q));
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
    /// paths set (`with_dev`, `poll_events_locked`). The error is built in place: a call here
    /// would make every caller save registers on its fast path.
    #[inline(always)]
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
    pub(crate) fn key_is_recent(&self, key: u32) -> bool {
        self.recent_keys.lock().contains(&key)
    }

    /// Records a destroyed key (see [`CtxInner::key_is_recent`]).
    pub(crate) fn quarantine_key(&self, key: u32) {
        let mut q = self.recent_keys.lock();
        if q.len() == mr::QUARANTINE {
            q.pop_front();
        }
        q.push_back(key);
    }

    pub(crate) fn random(&self) -> u64 {
        self.rng.next(&self.hal)
    }

    /// Runs one UMR on the context's UMR QP, creating it on first use.
    pub(crate) fn umr(self: &Arc<Self>, u: &crate::umr::Umr<'_>) -> Result<()> {
        self.umr_with(true, |r, hal| r.run(hal, u))?
            .ok_or(Error::Closed)
    }

    /// Runs `f` on the UMR resources; with `create`, creates them first if needed. `None`
    /// when there are none (not created yet, or the context handle is gone).
    pub(crate) fn umr_with<T>(
        self: &Arc<Self>,
        create: bool,
        f: impl FnOnce(&mut crate::umr::UmrRes<H>, &H) -> Result<T>,
    ) -> Result<Option<T>> {
        self.check_alive()?;
        let mut g = self.umr.lock();
        if g.is_none() {
            if !create || self.umr_off.load(Ordering::Acquire) {
                return Ok(None);
            }
            *g = Some(crate::umr::UmrRes::new(self)?);
        }
        match g.as_mut() {
            Some(r) => f(r, &self.hal).map(Some),
            None => Ok(None),
        }
    }

    /// [`CtxInner::umr_with`] without creating, and without waiting when the UMR state is
    /// busy (`None`): the registration path, which runs inside the UMR QP's own creation (its
    /// staging region) and falls back to commands.
    pub(crate) fn umr_try_with<T>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut crate::umr::UmrRes<H>, &H) -> Result<T>,
    ) -> Result<Option<T>> {
        self.check_alive()?;
        let Some(mut g) = self.umr.try_lock() else {
            return Ok(None);
        };
        match g.as_mut() {
            Some(r) => f(r, &self.hal).map(Some),
            None => Ok(None),
        }
    }

    /// Destroys the UMR QP (and its CQ, PD, staging region), which hold the context.
    fn umr_shutdown(&self) {
        self.umr_off.store(true, Ordering::Release);
        let r = self.umr.lock().take();
        drop(r);
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

/// An opened HCA function.
pub struct Context<H: Hal> {
    inner: Arc<CtxInner<H>>,
}

impl<H: Hal> Context<H> {
    /// Brings the function up with `cfg` (see [`crate::hca`]).
    pub fn open(hal: H, cfg: Config) -> Result<Self> {
        let o = hca::open(&hal, &cfg)?;
        let rng = Rng::new(&hal);
        let gid0 = if cfg.default_gid && o.caps.roce {
            hca::link_local_gid(o.mac)
        } else {
            [0; 16]
        };
        let eq_peek = o.dev.eq.as_ref().map_or(0, |q| q.peek_word());
        Ok(Context {
            inner: Arc::new(CtxInner {
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
                mrs: spin::RwLock::new(BTreeMap::new()),
                recent_keys: spin::Mutex::new(VecDeque::new()),
                dead: AtomicBool::new(false),
                fatal_syndrome: core::sync::atomic::AtomicU8::new(0),
                send_gates: spin::Mutex::new(Vec::new()),
                eq_peek: core::sync::atomic::AtomicUsize::new(eq_peek),
                closed: AtomicBool::new(false),
                umr: spin::Mutex::new(None),
                umr_off: AtomicBool::new(false),
            }),
        })
    }

    /// Tears the function down now. Refused with [`Error::Busy`] while other objects (PDs,
    /// CQs, channels, ...) still hold the context: the context comes back with the error,
    /// untouched. When the teardown itself fails, the context comes back too, closed (it is
    /// not torn down again on drop).
    pub fn close(self) -> core::result::Result<(), Refused<Self>> {
        let inner = self.inner.clone();
        drop(self); // the UMR QP goes first (see `Drop for Context`)
        match Arc::try_unwrap(inner) {
            Ok(mut inner) => {
                inner.closed.store(true, Ordering::Release);
                let (uar, tdn) = (inner.uar, inner.tdn);
                let r = hca::close(&inner.hal, inner.dev.get_mut(), uar, tdn);
                r.map_err(|error| Refused {
                    object: Context {
                        inner: Arc::new(inner),
                    },
                    error,
                })
            }
            Err(inner) => Err(Refused {
                object: Context { inner },
                error: Error::Busy,
            }),
        }
    }

    /// DMA buffers (and their bytes) set aside because the device may still write them: a
    /// create or destroy whose reply was garbled or never came. They are freed only after a
    /// clean teardown; while any are held the function [`needs_reset`](Self::needs_reset).
    pub fn quarantined(&self) -> (usize, usize) {
        let d = self.inner.dev.lock();
        let (n, b) = d.quarantine.stats();
        let (pn, pb) = d.pages.quarantined();
        (n + pn, b.saturating_add(pb))
    }

    /// True once memory has been quarantined: the device's view of the driver's objects is
    /// unknown, and only a teardown or function-level reset makes it known again.
    pub fn needs_reset(&self) -> bool {
        self.quarantined().0 > 0
    }

    /// Runs one UMR WQE on the context's UMR QP (created on first use) and waits for its
    /// completion: the key named in `u` must have been created with `umr_en`
    /// ([`crate::umr`]). A failed UMR returns [`Error::Umr`] with the CQE's status and vendor
    /// syndrome, and leaves the key unchanged.
    pub fn post_umr(&self, u: &crate::umr::Umr<'_>) -> Result<()> {
        self.inner.umr(u)
    }

    /// Fills the mkey cache: `per_class` free `umr_en` keys for each of
    /// [`crate::umr::CACHE_CLASSES`] (CREATE_MKEY commands, now). Afterwards a registration
    /// whose translation is one MTT key of at most 512 entries takes a key from the cache and
    /// is one UMR WQE and one CQE, no command; deregistration revokes it by UMR (complete
    /// before `dereg` returns) and returns it to the cache. Keys are handed out in random
    /// order, with a new variant on every reuse (ReDMArk).
    pub fn enable_mkey_cache(&self, per_class: usize) -> Result<()> {
        self.inner
            .umr_with(true, |r, _| r.fill(per_class))?
            .ok_or(Error::Closed)
    }

    /// Free keys in the mkey cache.
    pub fn mkey_cache_len(&self) -> usize {
        self.inner
            .umr_with(false, |r, _| Ok(r.pooled()))
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// The HAL.
    pub fn hal(&self) -> &H {
        &self.inner.hal
    }
    /// The capabilities in force.
    pub fn caps(&self) -> &Caps {
        &self.inner.caps
    }
    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.inner.mac
    }
    /// Firmware version (major, minor, subminor).
    pub fn fw_version(&self) -> (u16, u16, u16) {
        self.inner.fw
    }
    /// Commands handed to the device since bring-up started.
    pub fn commands_sent(&self) -> u64 {
        self.inner.dev.lock().cmd.sent
    }
    /// Command doorbell (`cmd_dbell`) writes so far: one per command, or one per batch of
    /// commands ([`ProtectionDomain::reg_mr_batch`]).
    pub fn command_doorbells(&self) -> u64 {
        self.inner.dev.lock().cmd.rung
    }
    /// Firmware pages the device holds.
    pub fn pages_held(&self) -> usize {
        self.inner.dev.lock().pages_given()
    }
    /// 64 random bits (hardware source or the seeded fallback).
    pub fn random_u64(&self) -> u64 {
        self.inner.random()
    }

    /// Services the event queue: page requests are satisfied, other events queued for
    /// [`Context::take_events`]. Returns the number of EQEs processed.
    pub fn poll_events(&self) -> Result<usize> {
        let inner = &self.inner;
        inner.with_dev(|d| {
            d.cmd.check_health(&inner.hal)?;
            d.service_events(&inner.hal, false)
        })
    }

    /// The asynchronous events seen so far (oldest first), emptying the log.
    pub fn take_events(&self) -> Vec<AsyncEvent> {
        let mut d = self.inner.dev.lock();
        match d.eq.as_mut() {
            Some(q) => q.events.drain(..).collect(),
            None => Vec::new(),
        }
    }

    /// Refuses a GID index beyond the port's table ([`Caps::gid_table_len`]) before any
    /// command (Linux core/cache.c `rdma_query_gid` / `rdma_get_gid_attr`: an index at or
    /// beyond the table's size is -EINVAL).
    fn check_gid_index(&self, index: u16) -> Result<()> {
        if u32::from(index) >= self.inner.caps.gid_table_len() {
            return Err(InvalidInput::GidIndex.into());
        }
        Ok(())
    }

    /// QUERY_ROCE_ADDRESS: `(gid, mac, roce_version)` at `index` (below
    /// [`PortAttr::gid_tbl_len`], else [`InvalidInput::GidIndex`]).
    pub fn query_gid(&self, index: u16) -> Result<([u8; 16], [u8; 6], u8)> {
        self.check_gid_index(index)?;
        let inner = &self.inner;
        inner.with_dev(|d| d.query_roce_address(&inner.hal, index))
    }

    /// SET_ROCE_ADDRESS: programs a RoCE v2 GID (use [`hca::ipv4_mapped_gid`] for an IPv4
    /// address, [`hca::link_local_gid`] for the MAC-derived one). The index must be below
    /// [`PortAttr::gid_tbl_len`] ([`InvalidInput::GidIndex`] otherwise). An all-zero GID
    /// clears the entry, as Linux deletes one (core/lib/gid.c `mlx5_core_roce_gid_set` with no
    /// GID writes zeros).
    pub fn set_gid(&self, index: u16, gid: [u8; 16]) -> Result<()> {
        self.check_gid_index(index)?;
        let inner = &self.inner;
        let mac = inner.mac;
        inner.with_dev(|d| d.set_roce_address(&inner.hal, index, gid, mac))?;
        if index == 0 {
            *inner.gid0.lock() = gid;
        }
        Ok(())
    }

    /// Gives the node the IPv4 address `ip`: programs its RoCE v2 GID (IPv4-mapped,
    /// [`hca::ipv4_mapped_gid`]) with SET_ROCE_ADDRESS and returns the GID index, to be used as
    /// [`ConnectOptions::sgid_index`]. As Linux does when an address is added to the netdev
    /// (drivers/infiniband/core/roce_gid_mgmt.c `update_gid_ip` → cache.c
    /// `__ib_cache_gid_add`): an entry that already holds the GID is reused, otherwise the
    /// first empty entry (an all-zero GID) takes it. A full table is
    /// [`InvalidInput::GidTableFull`]; 0.0.0.0, multicast and broadcast addresses are
    /// [`InvalidInput::BadIpv4`]. Index 0 stays the default (MAC-derived) GID.
    pub fn add_ipv4_gid(&self, ip: [u8; 4]) -> Result<u16> {
        if ip == [0; 4] || ip == [255; 4] || (224..=239).contains(&ip[0]) {
            return Err(InvalidInput::BadIpv4(ip).into());
        }
        let gid = hca::ipv4_mapped_gid(ip);
        let len = u16::try_from(self.inner.caps.gid_table_len()).unwrap_or(u16::MAX);
        let mut free = None;
        for index in 0..len {
            let (g, _, version) = self.query_gid(index)?;
            if g == gid && version == hca::ROCE_VERSION_2 as u8 {
                return Ok(index);
            }
            // Index 0 is the default GID's even while it is unset.
            if g == [0; 16] && free.is_none() && index != 0 {
                free = Some(index);
            }
        }
        let index = free.ok_or(InvalidInput::GidTableFull)?;
        self.set_gid(index, gid)?;
        Ok(index)
    }

    /// The shared context state (for the crate's object modules).
    pub(crate) fn inner_arc(&self) -> &Arc<CtxInner<H>> {
        &self.inner
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain<H>> {
        let inner = &self.inner;
        let pdn = inner.with_dev(|d| d.alloc_pd(&inner.hal))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: inner.clone(),
                pdn,
            }),
        })
    }

    /// Creates a completion queue of at least `entries` entries (refused before any command
    /// when the device cannot hold that many).
    pub fn create_cq(&self, entries: u32) -> Result<CompletionQueue<H>> {
        crate::cq::create(&self.inner, entries, None)
    }

    /// Creates a completion channel (`ibv_create_comp_channel`).
    pub fn create_comp_channel(&self) -> CompletionChannel<H> {
        CompletionChannel::new(&self.inner)
    }

    /// Creates a completion queue whose completion events go to `channel` (`ibv_create_cq`
    /// with a channel); arm it with [`CompletionQueue::req_notify_cq`].
    pub fn create_cq_with_channel(
        &self,
        entries: u32,
        channel: &CompletionChannel<H>,
    ) -> Result<CompletionQueue<H>> {
        crate::cq::create(&self.inner, entries, Some(channel))
    }

    /// The device's limits, as `ibv_query_device` reports them: computed from the
    /// capabilities read at bring-up the way Linux ib/main.c `mlx5_ib_query_device` does,
    /// except that every limit this driver enforces below the device's is reported as the
    /// driver's (SGEs per WR, the largest region). No command is sent.
    pub fn query_device(&self) -> DeviceAttr {
        device_attr(&self.inner.caps, self.inner.fw)
    }

    /// Port `port` (1, the only one), as `ibv_query_port` reports it for an Ethernet (RoCE)
    /// port (Linux ib/main.c `mlx5_query_port_roce`): state from QUERY_VPORT_STATE, active
    /// MTU from the vport's MTU (QUERY_NIC_VPORT_CONTEXT), GID table length from the RoCE
    /// caps. Port numbers other than 1 are refused before any command.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let caps = &self.inner.caps;
        // One port per function (num_ports); ports count from 1 (Linux core/device.c
        // `rdma_is_port_valid`).
        if port != 1 {
            return Err(InvalidInput::Port(port).into());
        }
        let inner = &self.inner;
        let (state, hw_mtu) = inner.with_dev(|d| {
            let s = d.query_vport_state(&inner.hal)?;
            let m = d.query_vport_mtu(&inner.hal)?;
            Ok((s, m))
        })?;
        Ok(port_attr(caps, state, hw_mtu))
    }
}

/// `2^log` as a u32, saturating (a capability field read from the device is never trusted
/// to be in range).
fn pow2(log: u8) -> u32 {
    if log >= 32 {
        u32::MAX
    } else {
        1u32 << log
    }
}

/// Atomic support, `ibv_atomic_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`.
    None,
    /// `IBV_ATOMIC_HCA`: atomic only between QPs of this HCA's ports.
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic with respect to every other access.
    Glob,
}

/// [`Context::query_device`]: the fields of `struct ibv_device_attr` this driver has a value
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version (major, minor, subminor), `fw_ver`.
    pub fw_ver: (u16, u16, u16),
    /// Largest memory region in bytes (`1 << log_max_mrw_sz`; the driver refuses more).
    pub max_mr_size: u64,
    /// Page sizes the device translates: every power of two from `1 << log_pg_sz` up
    /// (Linux: `~(min_page_size - 1)`).
    pub page_size_cap: u64,
    /// `1 << log_max_qp`.
    pub max_qp: u32,
    /// `1 << log_max_qp_sz`.
    pub max_qp_wr: u32,
    /// SGEs per send WR: Linux's `(min(max_wqe_sz_sq, 512) - ctrl - raddr) / 16`, at most the
    /// driver's [`crate::qp::MAX_SGE`].
    pub max_send_sge: u32,
    /// SGEs per receive WR: `max_wqe_sz_rq / 16`, at most [`crate::qp::MAX_SGE`].
    pub max_recv_sge: u32,
    /// `min(max_send_sge, max_recv_sge)` (the old `max_sge`).
    pub max_sge: u32,
    /// `1 << log_max_cq`.
    pub max_cq: u32,
    /// `(1 << log_max_cq_sz) - 1`.
    pub max_cqe: u32,
    /// `1 << log_max_mkey`.
    pub max_mr: u32,
    /// `1 << log_max_pd`.
    pub max_pd: u32,
    /// `1 << log_max_ra_req_qp`: outstanding RDMA READ / atomics a QP may receive.
    pub max_qp_rd_atom: u32,
    /// `1 << log_max_ra_res_qp`: outstanding RDMA READ / atomics a QP may initiate.
    pub max_qp_init_rd_atom: u32,
    /// `max_qp_rd_atom * max_qp`.
    pub max_res_rd_atom: u64,
    /// Atomic support (Linux ib/main.c `get_atomic_caps`).
    pub atomic_cap: AtomicCap,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `num_ports`.
    pub phys_port_cnt: u8,
    /// `device_frequency_khz` (Linux reports it as `hca_core_clock`).
    pub hca_core_clock_khz: u32,
}

/// `MLX5_ATOMIC_OPS_CMP_SWAP | MLX5_ATOMIC_OPS_FETCH_ADD` (Linux include/linux/mlx5/driver.h).
const ATOMIC_OPS_CMP_SWAP_FETCH_ADD: u16 = 0x3;
/// `MLX5_ATOMIC_SIZE_QP_8BYTES` = 1 << 3 (Linux include/linux/mlx5/mlx5_ifc.h).
const ATOMIC_SIZE_QP_8BYTES: u16 = 1 << 3;

fn device_attr(c: &Caps, fw: (u16, u16, u16)) -> DeviceAttr {
    use mlx5_prm::wqe::{ctrl_seg, data_seg, raddr_seg};
    // Linux mlx5_ib_query_device: max_rq_sg / max_sq_sg from the WQE sizes.
    let max_rq_sg = u32::from(c.max_wqe_sz_rq) / data_seg::SIZE as u32;
    let max_sq_desc = u32::from(c.max_wqe_sz_sq).min(512);
    let max_sq_sg = max_sq_desc.saturating_sub((ctrl_seg::SIZE + raddr_seg::SIZE) as u32)
        / data_seg::SIZE as u32;
    let max_send_sge = max_sq_sg.min(MAX_SGE as u32);
    let max_recv_sge = max_rq_sg.min(MAX_SGE as u32);
    // Linux get_atomic_caps: 8-byte CAS and FAA, QP atomics of 8 bytes, host-endian
    // responses in force: IB_ATOMIC_HCA; otherwise none.
    let atomic_cap = if c.atomic
        && c.atomic_operations & ATOMIC_OPS_CMP_SWAP_FETCH_ADD == ATOMIC_OPS_CMP_SWAP_FETCH_ADD
        && c.atomic_size_qp & ATOMIC_SIZE_QP_8BYTES != 0
        && c.atomic_req_8b_endianness_mode != 0
    {
        AtomicCap::Hca
    } else {
        AtomicCap::None
    };
    let max_qp = pow2(c.log_max_qp);
    let max_qp_rd_atom = pow2(c.log_max_ra_req_qp);
    let min_page = if c.log_pg_sz >= 64 {
        0
    } else {
        1u64 << c.log_pg_sz
    };
    DeviceAttr {
        fw_ver: fw,
        max_mr_size: c.max_mr_size(),
        page_size_cap: !(min_page.wrapping_sub(1)),
        max_qp,
        max_qp_wr: pow2(c.log_max_qp_sz),
        max_send_sge,
        max_recv_sge,
        max_sge: max_send_sge.min(max_recv_sge),
        max_cq: pow2(c.log_max_cq),
        max_cqe: pow2(c.log_max_cq_sz).saturating_sub(1),
        max_mr: pow2(c.log_max_mkey),
        max_pd: pow2(c.log_max_pd),
        max_qp_rd_atom,
        max_qp_init_rd_atom: pow2(c.log_max_ra_res_qp),
        max_res_rd_atom: u64::from(max_qp_rd_atom) * u64::from(max_qp),
        atomic_cap,
        local_ca_ack_delay: c.local_ca_ack_delay,
        phys_port_cnt: c.num_ports,
        hca_core_clock_khz: c.device_frequency_khz,
    }
}

/// The port's state, `ibv_port_state` (the two a RoCE port reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_ACTIVE`.
    Active,
}

/// The port's link layer, `IBV_LINK_LAYER_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_INFINIBAND`.
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (RoCE).
    Ethernet,
}

/// [`Context::query_port`]: the fields of `struct ibv_port_attr` a RoCE port has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Active when the vport is up.
    pub state: PortState,
    /// Largest MTU: 4096 (Linux `mlx5_query_port_roce`: `IB_MTU_4096`).
    pub max_mtu: Mtu,
    /// The MTU the Ethernet MTU leaves room for (Linux `iboe_get_mtu`), `None` when the
    /// Ethernet MTU is too small for the smallest RoCE MTU.
    pub active_mtu: Option<Mtu>,
    /// The vport's hardware MTU in bytes (Ethernet frame without preamble).
    pub hw_mtu: u16,
    /// GID table entries ([`Caps::gid_table_len`]).
    pub gid_tbl_len: u32,
    /// Largest message, `1 << log_max_msg`.
    pub max_msg_sz: u32,
    /// P_Key table entries: 1 on Ethernet.
    pub pkey_tbl_len: u16,
    /// Ethernet for a RoCE port.
    pub link_layer: LinkLayer,
}

/// Linux `iboe_get_mtu` (include/rdma/ib_addr.h): the Ethernet payload MTU minus the RoCE
/// headers (GRH 40, UDP 8, BTH 12, XRC ext 4, AtomicETH 28, ICRC 4: 96 bytes), rounded down
/// to an IB MTU.
fn iboe_mtu(eth_mtu: u32) -> Option<Mtu> {
    let m = eth_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    Some(match m {
        4096.. => Mtu::Mtu4096,
        2048.. => Mtu::Mtu2048,
        1024.. => Mtu::Mtu1024,
        512.. => Mtu::Mtu512,
        256.. => Mtu::Mtu256,
        _ => return None,
    })
}

fn port_attr(c: &Caps, state: u8, hw_mtu: u16) -> PortAttr {
    // The vport's MTU counts the Ethernet header, a VLAN tag and the FCS; the netdev MTU
    // Linux hands to iboe_get_mtu does not (en.h MLX5E_HW2SW_MTU: ETH_HLEN 14 + VLAN_HLEN 4
    // + ETH_FCS_LEN 4).
    let sw_mtu = u32::from(hw_mtu).saturating_sub(14 + 4 + 4);
    PortAttr {
        state: if state == hca::VPORT_STATE_UP {
            PortState::Active
        } else {
            PortState::Down
        },
        max_mtu: Mtu::Mtu4096,
        active_mtu: iboe_mtu(sw_mtu),
        hw_mtu,
        gid_tbl_len: c.gid_table_len(),
        max_msg_sz: pow2(c.log_max_msg),
        pkey_tbl_len: 1,
        link_layer: if c.port_type == mlx5_prm::hca_cap::port_type::ETH {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        },
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
    inner: Arc<PdInner<H>>,
}

impl<H: Hal> Drop for Context<H> {
    fn drop(&mut self) {
        self.inner.umr_shutdown();
    }
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
        let plan = self.plan_phys(chunks, iova, access)?;
        self.register(iova, plan.1, access, plan.0, None)
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

    fn plan_phys(&self, chunks: &[PhysChunk], iova: u64, access: Access) -> Result<(KlmPlan, u64)> {
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
    /// write ([`crate::hca::Device::exec_batch`]); regions that need an indirect key are
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
        let mut out: Vec<Option<Result<MemoryRegion<H>>>> = Vec::with_capacity(regions.len());
        let mut plans = Vec::with_capacity(regions.len());
        for &(chunks, iova, access) in regions {
            match self.plan_phys(chunks, iova, access) {
                Ok(p) if p.0.segments.is_empty() => {
                    plans.push(Some(p));
                    out.push(None);
                }
                Ok(p) => {
                    plans.push(None);
                    out.push(Some(self.register(iova, p.1, access, p.0, None)));
                }
                Err(e) => {
                    plans.push(None);
                    out.push(Some(Err(e)));
                }
            }
        }
        if let Err(e) = ctx.check_alive() {
            return out
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Err(e)))
                .collect();
        }
        // From the mkey cache first (UMR WQEs, one doorbell per batch); the rest by command.
        let want: Vec<(usize, &KlmPlan, u64)> = plans
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|(plan, len)| (i, plan, *len)))
            .collect();
        let pooled = if want.is_empty() {
            Vec::new()
        } else {
            self.reg_pooled_batch(regions, &want)
        };
        drop(want);
        for (i, r) in pooled {
            let Some((plan, len)) = plans[i].take() else {
                continue;
            };
            let (_, iova, access) = regions[i];
            out[i] = Some(r.map(|(key, class)| {
                let mut m = self.wrap(key, Vec::new(), iova, len, access, plan, None);
                if let Some(inner) = m.inner.as_mut().and_then(Arc::get_mut) {
                    inner.pooled = Some(class);
                }
                m
            }));
        }
        // One command per direct region.
        let mut cmds = Vec::new();
        let mut who = Vec::new();
        let mut params = Vec::new();
        for (i, p) in plans.iter().enumerate() {
            let Some((plan, len)) = p else { continue };
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
                Err(e) => out[i] = Some(Err(e)),
            }
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
            let Some((plan, len)) = plans[i].clone() else {
                continue;
            };
            let (_, iova, access) = regions[i];
            out[i] = Some(match r {
                Err(e) => Err(e),
                Ok(o) => {
                    let key = mr::mkey_from_out(&o, params[k].variant);
                    let mut buf = None;
                    self.avoid_recent(key, &mut params[k], &mut buf)
                        .map(|key| self.wrap(key, Vec::new(), iova, len, access, plan, buf))
                }
            });
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Err(Error::Internal)))
            .collect()
    }

    fn params<'a>(
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
    fn destroy_keys(&self, keys: &[u32]) -> bool {
        let ctx = &self.inner.ctx;
        let mut all = true;
        for &k in keys.iter().rev() {
            if ctx.with_dev(|d| d.destroy_mkey(&ctx.hal, k)).is_err() {
                all = false;
            }
        }
        all
    }

    fn register(
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
        if let Some((key, class)) = self.reg_pooled(iova, len, access, &plan)? {
            let mut m = self.wrap(key, Vec::new(), iova, len, access, plan, buf);
            if let Some(i) = m.inner.as_mut().and_then(Arc::get_mut) {
                i.pooled = Some(class);
            }
            return Ok(m);
        }
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
    fn reg_pooled(
        &self,
        iova: u64,
        len: u64,
        access: Access,
        plan: &KlmPlan,
    ) -> Result<Option<(u32, u8)>> {
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
            let Some((key, class)) = u.take(entries.len()) else {
                return Ok(None);
            };
            let new = fresh_variant(ctx, key);
            // The entries with their enables: on the stack when they go inline.
            let mut small = [0u64; crate::umr::INLINE_MAX_MTT];
            let big: Vec<u64>;
            let mtt: &[u64] = if entries.len() <= small.len() {
                for (d, e) in small.iter_mut().zip(entries) {
                    *d = e | mlx5_prm::mkey::MTT_PRESENT;
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
                Ok(()) => Ok(Some((new, class))),
                Err(Error::Umr { .. }) | Err(Error::Invalid(_)) => {
                    // The key is unchanged (the model applies a UMR whole or not at all).
                    u.put(key, class);
                    Ok(None)
                }
                // Its state is unknown: the key leaves the cache (destroyed with the PD).
                Err(e) => Err(e),
            }
        })?;
        Ok(r.flatten())
    }

    /// [`ProtectionDomain::reg_pooled`] for several regions at once (`reg_mr_batch`): one
    /// UMR WQE each, rung with one doorbell per [`crate::umr::BATCH_MAX`]. `(region index,
    /// plan, len)` in; the regions registered from the cache out, as `(index, key, class)`.
    /// A region the cache cannot serve (no key of its class, a translation too long to go
    /// inline, relaxed ordering) or whose UMR the device refused is left to the caller (its
    /// key went back to the cache); a region whose UMR never completed gets the error.
    fn reg_pooled_batch(
        &self,
        regions: &[(&[PhysChunk], u64, Access)],
        want: &[(usize, &KlmPlan, u64)],
    ) -> Vec<(usize, Result<(u32, u8)>)> {
        use crate::umr::{flags, MkeySeg, Outcome, Umr, ENABLE_MASK, INLINE_MAX_MTT};
        let ctx = &self.inner.ctx;
        let pdn = self.inner.pdn;
        let r = ctx.umr_try_with(|u, hal| {
            // The entries with their enables, INLINE_MAX_MTT slots per region.
            let mut mtt = Vec::with_capacity(want.len() * INLINE_MAX_MTT);
            let mut taken = Vec::with_capacity(want.len());
            for &(i, plan, len) in want {
                let entries = &plan.tr.entries;
                let access = regions[i].2;
                if !plan.segments.is_empty()
                    || entries.len() > INLINE_MAX_MTT
                    || mr::relaxed_ordering(access, &ctx.caps) != (false, false)
                {
                    continue;
                }
                let Some((key, class)) = u.take(entries.len()) else {
                    continue;
                };
                let at = mtt.len();
                mtt.extend(entries.iter().map(|e| e | mlx5_prm::mkey::MTT_PRESENT));
                taken.push((i, plan, len, key, class, fresh_variant(ctx, key), at));
            }
            let umrs: Vec<Umr<'_>> = taken
                .iter()
                .map(|&(i, plan, len, key, _, new, at)| Umr {
                    key,
                    check: flags::CHECK_NOT_FREE,
                    mask: ENABLE_MASK,
                    seg: MkeySeg {
                        free: false,
                        pd: pdn,
                        qpn: 0xff_ffff,
                        variant: new as u8,
                        access: regions[i].2,
                        start: regions[i].1,
                        len,
                        log_page_size: plan.tr.page_shift,
                    },
                    mtt: &mtt[at..at + plan.tr.entries.len()],
                    mtt_offset: 0,
                })
                .collect();
            let mut out = alloc::vec![Outcome::Unknown; umrs.len()];
            u.run_batch(hal, &umrs, &mut out);
            let mut done = Vec::with_capacity(taken.len());
            for (t, o) in taken.iter().zip(out) {
                let &(i, _, _, key, class, new, _) = t;
                match o {
                    Outcome::Done => done.push((i, Ok((new, class)))),
                    // The key is unchanged (the model applies a UMR whole or not at all).
                    Outcome::Unchanged => u.put(key, class),
                    // Its state is unknown: the key leaves the cache (destroyed with the PD).
                    Outcome::Unknown => done.push((i, Err(Error::Timeout))),
                }
            }
            Ok(done)
        });
        match r {
            Ok(Some(v)) => v,
            _ => Vec::new(),
        }
    }

    /// ReDMArk: a key must not reappear right after it was destroyed. If the firmware reused
    /// the index and the random variant matched, take a new key first, then drop the
    /// collision.
    fn avoid_recent(
        &self,
        key: u32,
        params: &mut MkeyParams<'_>,
        buf: &mut Option<DmaMem<H::Dma>>,
    ) -> Result<u32> {
        let ctx = &self.inner.ctx;
        let hal = &ctx.hal;
        let mut key = key;
        let mut tries = 0;
        while ctx.recent_keys.lock().contains(&key) && tries < 4 {
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
    fn wrap(
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
            .insert(key, MrInfo { iova, len, access });
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

/// A new variant for cached key `key` being handed out: not its last one, nor any recently
/// destroyed key (ReDMArk).
fn fresh_variant<H: Hal>(ctx: &CtxInner<H>, key: u32) -> u32 {
    for _ in 0..8 {
        let v = (ctx.random() & 0xff) as u32;
        let k = (key & !0xff) | v;
        if k != key && !ctx.recent_keys.lock().contains(&k) {
            return k;
        }
    }
    (key & !0xff) | ((key + 1) & 0xff)
}

/// MR state, kept alive by the handle and by in-flight WRs.
pub(crate) struct MrInner<H: Hal> {
    pub(crate) pd: Arc<PdInner<H>>,
    pub(crate) key: u32,
    /// `key` as a data segment holds it (`key.to_be()`).
    pub(crate) key_be: u32,
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    /// The MTT keys under an indirect key (empty for a direct MTT key).
    inner_keys: Vec<u32>,
    plan: KlmPlan,
    buf: Option<DmaMem<H::Dma>>,
    destroyed: AtomicBool,
    /// The key came from the mkey cache (its size class): dereg revokes it by UMR and
    /// returns it ([`crate::umr`]).
    pooled: Option<u8>,
}

impl<H: Hal> MrInner<H> {
    /// Whether the region is an indirect (KLM) key over MTT keys.
    pub(crate) fn is_indirect(&self) -> bool {
        !self.inner_keys.is_empty()
    }

    /// rereg of a cached key by one UMR (Linux ib/umr.c `mlx5r_umr_rereg_pd_access`: "fail
    /// if free", access and PD masks; with a new translation also start/len/page size and
    /// the entries, as `mlx5r_umr_update_mr_pas`). `Ok(false)`: the new translation does not
    /// fit the key (more than one MTT key, or above its size class), or the device refused
    /// the UMR (the key is unchanged); the caller falls back to create-then-destroy.
    fn rereg_umr(
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
            .insert(self.key, MrInfo { iova, len, access });
        Ok(true)
    }

    fn destroy(&mut self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let ctx = &self.pd.ctx;
        ctx.mrs.write().remove(&self.key);
        let key = self.key;
        if let Some(class) = self.pooled {
            // Revoke by UMR (Linux ib/umr.c `mlx5r_umr_revoke_mr`), waited for: once it
            // completed, no access through the key succeeds. Then back to the cache.
            use crate::umr::{MkeySeg, Umr, REVOKE_MASK};
            let revoked = ctx.umr_with(false, |u, hal| {
                let umr = Umr {
                    key,
                    check: 0,
                    mask: REVOKE_MASK,
                    seg: MkeySeg {
                        free: true,
                        pd: u.pdn(),
                        qpn: 0xff_ffff,
                        variant: key as u8,
                        ..MkeySeg::default()
                    },
                    mtt: &[],
                    mtt_offset: 0,
                };
                u.run(hal, &umr)?;
                u.put(key, class);
                Ok(())
            });
            if let Ok(Some(())) = revoked {
                let mut q = ctx.recent_keys.lock();
                if q.len() == mr::QUARANTINE {
                    q.pop_front();
                }
                q.push_back(key);
                return Ok(());
            }
            // No UMR QP any more, or the UMR failed: destroy the key by command.
        }
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
        let mut q = ctx.recent_keys.lock();
        if q.len() == mr::QUARANTINE {
            q.pop_front();
        }
        q.push_back(key);
        r
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

/// A registered memory region.
pub struct MemoryRegion<H: Hal> {
    inner: Option<Arc<MrInner<H>>>,
}

impl<H: Hal> MemoryRegion<H> {
    fn get(&self) -> Result<&Arc<MrInner<H>>> {
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
    /// One byte of the region at `offset`, read volatile: for polling a byte the peer's RDMA
    /// WRITE changes with no local completion (perftest `run_iter_lat_write` polls the last
    /// byte of its buffer). Regions that own their memory only.
    pub fn read_volatile_u8(&self, offset: u64) -> Result<u8> {
        let m = self.get()?;
        let buf = m.buf.as_ref().ok_or(Error::Unsupported)?;
        let off = usize::try_from(offset).map_err(|_| InvalidInput::OutOfRange)?;
        buf.read_u8(off).map_err(|_| InvalidInput::OutOfRange.into())
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
        let Some(arc) = self.inner.take() else {
            return Ok(());
        };
        match Arc::try_unwrap(arc) {
            Ok(mut m) => m.destroy(),
            Err(arc) => {
                self.inner = Some(arc);
                Err(Error::Busy)
            }
        }
    }
}

/// A scatter/gather element borrowing a region.
pub struct Sge<'a, H: Hal> {
    /// The region.
    pub mr: &'a MemoryRegion<H>,
    /// Offset inside the region.
    pub offset: u64,
    /// Length.
    pub len: u32,
}

/// Local data of a send work request.
pub enum SendData<'a, H: Hal> {
    /// Gather list.
    Sges(&'a [Sge<'a, H>]),
    /// Inline bytes.
    Inline(&'a [u8]),
}

/// A send work request.
pub struct SendWr<'a, H: Hal> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Local data.
    pub data: SendData<'a, H>,
    /// Flags.
    pub flags: SendFlags,
}

/// A receive work request.
pub struct RecvWr<'a, H: Hal> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: &'a [Sge<'a, H>],
}

/// Checks one raw SGE against the live MRs (raw layer).
pub(crate) fn check_lkey(mrs: &BTreeMap<u32, MrInfo>, g: &RawSge, write: bool) -> Result<()> {
    if g.len == 0 {
        return Ok(());
    }
    let m = mrs.get(&g.lkey).ok_or(InvalidInput::BadLkey(g.lkey))?;
    let end = g
        .addr
        .checked_add(g.len as u64)
        .ok_or(InvalidInput::OutOfRange)?;
    if g.addr < m.iova || end > m.iova + m.len {
        return Err(InvalidInput::OutOfRange.into());
    }
    if write && !m.access.contains(Access::LOCAL_WRITE) {
        return Err(InvalidInput::LocalAccess.into());
    }
    Ok(())
}

/// Converted SGEs and the regions they reference, on the stack and left uninitialised past
/// `n` (converting is on the hot path; zeroing 30 entries is not).
struct SgeBuf<'b, H: Hal> {
    raw: [core::mem::MaybeUninit<RawSge>; MAX_SGE],
    refs: [core::mem::MaybeUninit<&'b Arc<MrInner<H>>>; MAX_SGE],
    n: usize,
}

impl<'b, H: Hal> SgeBuf<'b, H> {
    #[inline(always)]
    fn new() -> Self {
        SgeBuf {
            raw: [const { core::mem::MaybeUninit::uninit() }; MAX_SGE],
            refs: [const { core::mem::MaybeUninit::uninit() }; MAX_SGE],
            n: 0,
        }
    }
    #[inline(always)]
    fn raw(&self) -> &[RawSge] {
        // SAFETY: entries 0..n were written by `convert` (n <= MAX_SGE).
        unsafe { core::slice::from_raw_parts(self.raw.as_ptr() as *const RawSge, self.n) }
    }
    #[inline(always)]
    fn refs(&self) -> &[&'b Arc<MrInner<H>>] {
        // SAFETY: as in `raw`.
        unsafe {
            core::slice::from_raw_parts(self.refs.as_ptr() as *const &'b Arc<MrInner<H>>, self.n)
        }
    }

    /// Converts borrowed SGEs to raw ones, checking context, bounds and access.
    #[inline]
    fn convert(&mut self, ctx: *const CtxInner<H>, sges: &[Sge<'b, H>], write: bool) -> Result<()> {
        if sges.len() > MAX_SGE {
            return Err(InvalidInput::TooManySge {
                given: sges.len(),
                max: MAX_SGE,
            }
            .into());
        }
        self.n = 0;
        for (i, s) in sges.iter().enumerate() {
            let m = s.mr.inner.as_ref().ok_or(InvalidInput::BadLkey(0))?;
            if !core::ptr::eq(Arc::as_ptr(&m.pd.ctx), ctx) {
                return Err(InvalidInput::ForeignObject.into());
            }
            match s.offset.checked_add(s.len as u64) {
                Some(end) if end <= m.len => {}
                _ => return Err(InvalidInput::OutOfRange.into()),
            }
            if write && !m.access.contains(Access::LOCAL_WRITE) {
                return Err(InvalidInput::LocalAccess.into());
            }
            self.raw[i].write(RawSge {
                addr: m.iova + s.offset,
                len: s.len,
                lkey: m.key,
            });
            self.refs[i].write(m);
            self.n = i + 1;
        }
        Ok(())
    }
}

/// A region's identity for `QueuePair::post_one_sge_last`: `Arc::as_ptr` of its state, or,
/// after dereg, the address 16, which is never a region's. (`Arc::as_ptr` is the allocation
/// plus 16, and the empty `Option` is a null allocation pointer: one add covers both.)
#[inline(always)]
pub(crate) fn region_id<H: Hal>(mr: &MemoryRegion<H>) -> *const () {
    mr.inner
        .as_ref()
        .map_or(core::ptr::without_provenance(16), |m| {
            Arc::as_ptr(m) as *const ()
        })
}

/// The arguments of a one-SGE RDMA WRITE / READ on its way out of line.
struct OneSge<'a, H: Hal> {
    opc: u8,
    wr_id: u64,
    flags: SendFlags,
    mr: &'a MemoryRegion<H>,
    offset: u64,
    len: u32,
    remote: Remote,
}

fn writes_local(op: &SendOp) -> bool {
    matches!(
        op,
        SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
    )
}

impl<H: Hal> QueuePair<H> {
    /// Posts send work requests (any number, ONE doorbell). Every request is checked before
    /// anything is written: QP state (RTS), SGE count, inline size, regions (same context,
    /// inside bounds, LOCAL_WRITE for RDMA READ / atomic targets), 8-byte atomic buffers,
    /// room in the send queue. The regions stay referenced until the WQE completes (the QP
    /// binds each region once and stamps the binding per WR: no reference counting per WR).
    ///
    /// Inlined so that a call site with one RDMA WRITE or READ of one SGE compiles to the
    /// one-block path of [`QueuePair::post_write`] plus the region checks; anything else
    /// goes to the general code out of line.
    #[inline(always)]
    pub fn post_send(&mut self, wrs: &[SendWr<'_, H>]) -> Result<()> {
        if let [wr] = wrs {
            if let SendData::Sges([s]) = wr.data {
                match wr.op {
                    SendOp::Write { remote, imm: None } => {
                        return self.post_one_sge(wqe::opcode::RDMA_WRITE, wr, s, remote);
                    }
                    SendOp::Read { remote } => {
                        return self.post_one_sge(wqe::opcode::RDMA_READ, wr, s, remote);
                    }
                    _ => {}
                }
            }
            return self.post_send_one(wr);
        }
        self.post_send_batch(wrs)
    }

    /// One RDMA WRITE / READ with one SGE: the region checks, then the one-block path. The
    /// common case (the region of the previous generic post, nothing to sweep) inline, the
    /// rest out of line and in tail position, so the common case saves no registers.
    #[inline(always)]
    fn post_one_sge(
        &mut self,
        opc: u8,
        wr: &SendWr<'_, H>,
        s: &Sge<'_, H>,
        remote: Remote,
    ) -> Result<()> {
        let id = region_id(s.mr);
        let r = self.post_one_sge_last(opc, wr.wr_id, id, s.offset, s.len, remote, wr.flags);
        if let Some(r) = r {
            return r;
        }
        // Built here, so that only this path stores them.
        let a = OneSge {
            opc,
            wr_id: wr.wr_id,
            flags: wr.flags,
            mr: s.mr,
            offset: s.offset,
            len: s.len,
            remote,
        };
        self.post_one_sge_slow(&a)
    }

    /// [`QueuePair::post_one_sge`] out of line: every check again, then the general path.
    #[cold]
    #[inline(never)]
    fn post_one_sge_slow(&mut self, a: &OneSge<'_, H>) -> Result<()> {
        let m = a.mr.inner.as_ref().ok_or(InvalidInput::BadLkey(0))?;
        match a.offset.checked_add(a.len as u64) {
            Some(end) if end <= m.len => {}
            _ => return Err(InvalidInput::OutOfRange.into()),
        }
        if a.opc == wqe::opcode::RDMA_READ && !m.access.contains(Access::LOCAL_WRITE) {
            return Err(InvalidInput::LocalAccess.into());
        }
        self.post_one_sge_mr(a.opc, a.wr_id, m, a.offset, a.len, a.remote, a.flags)
    }

    /// Posts a list of send work requests as [`QueuePair::post_send`] does, and names the
    /// one refused ([`PostError::index`], like `bad_wr`). Nothing of the list is posted
    /// then.
    pub fn post_send_list(&mut self, wrs: &[SendWr<'_, H>]) -> core::result::Result<(), PostError> {
        if wrs.len() == 1 {
            return self
                .post_send(wrs)
                .map_err(|error| PostError { index: 0, error });
        }
        self.post_send_batch_at(wrs)
    }

    /// Any number of WRs but one: checked all, then written, one doorbell.
    #[inline(never)]
    fn post_send_batch(&mut self, wrs: &[SendWr<'_, H>]) -> Result<()> {
        self.post_send_batch_at(wrs).map_err(|e| e.error)
    }

    /// [`QueuePair::post_send_batch`], telling which WR failed.
    fn post_send_batch_at(&mut self, wrs: &[SendWr<'_, H>]) -> core::result::Result<(), PostError> {
        let ctx = Arc::as_ptr(&self.ctx);
        let mut sg = SgeBuf::new();
        for (index, wr) in wrs.iter().enumerate() {
            let at = |error| PostError { index, error };
            let data = match wr.data {
                SendData::Sges(s) => {
                    sg.convert(ctx, s, writes_local(&wr.op)).map_err(at)?;
                    Data::Sges(sg.raw())
                }
                SendData::Inline(b) => Data::Inline(b),
            };
            self.check_send(&wr.op, data).map_err(at)?;
        }
        if wrs.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.reserve_sq(wrs.len()) {
            let index = self.sq_room_count();
            return Err(PostError { index, error });
        }
        let mut last = core::ptr::null();
        for (index, wr) in wrs.iter().enumerate() {
            // Checked above; a failure here would be a driver bug, reported with its index.
            let at = |error| PostError { index, error };
            let data = match wr.data {
                SendData::Sges(s) => {
                    sg.convert(ctx, s, writes_local(&wr.op)).map_err(at)?;
                    Data::Sges(sg.raw())
                }
                SendData::Inline(b) => {
                    sg.n = 0;
                    Data::Inline(b)
                }
            };
            let bbs = self.check_send(&wr.op, data).map_err(at)?;
            for m in sg.refs() {
                let i = self.binding_for(m);
                self.stamp_sq(i);
            }
            last = self.write_send(wr.wr_id, &wr.op, wr.flags, data, bbs).0;
        }
        self.ring_send(last, None);
        Ok(())
    }

    /// One WR of any shape: converted and checked once, written, one doorbell.
    #[inline(never)]
    fn post_send_one(&mut self, wr: &SendWr<'_, H>) -> Result<()> {
        let mut sg = SgeBuf::new();
        let data = match wr.data {
            SendData::Sges(s) => {
                sg.convert(Arc::as_ptr(&self.ctx), s, writes_local(&wr.op))?;
                Data::Sges(sg.raw())
            }
            SendData::Inline(b) => Data::Inline(b),
        };
        let bbs = self.check_send(&wr.op, data)?;
        self.reserve_sq(1)?;
        for m in sg.refs() {
            let i = self.binding_for(m);
            self.stamp_sq(i);
        }
        let (last, in_place) = self.write_send(wr.wr_id, &wr.op, wr.flags, data, bbs);
        self.ring_send(last, Some((bbs, in_place)));
        Ok(())
    }

    /// Posts receive work requests (checked as [`QueuePair::post_send`]; receive buffers
    /// need LOCAL_WRITE). The doorbell record is updated once.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_, H>]) -> Result<()> {
        self.post_recv_list(wrs).map_err(|e| e.error)
    }

    /// [`QueuePair::post_recv`], naming the refused WR ([`PostError::index`], like
    /// `bad_wr`). Nothing of the list is posted then.
    pub fn post_recv_list(&mut self, wrs: &[RecvWr<'_, H>]) -> core::result::Result<(), PostError> {
        let ctx = Arc::as_ptr(&self.ctx);
        let mut sg = SgeBuf::new();
        // Device and state first, even for an empty list.
        self.check_recv(0, 0)
            .map_err(|error| PostError { index: 0, error })?;
        for (index, w) in wrs.iter().enumerate() {
            let at = |error| PostError { index, error };
            sg.convert(ctx, w.sges, true).map_err(at)?;
            self.check_recv(0, w.sges.len()).map_err(at)?;
        }
        if self.rq_room() < wrs.len() {
            let index = self.rq_room();
            let error = InvalidInput::QueueFull.into();
            return Err(PostError { index, error });
        }
        for (index, w) in wrs.iter().enumerate() {
            sg.convert(ctx, w.sges, true)
                .map_err(|error| PostError { index, error })?;
            for m in sg.refs() {
                let i = self.binding_for(m);
                self.stamp_rq(i);
            }
            self.write_recv(w.wr_id, sg.raw());
        }
        if !wrs.is_empty() {
            self.ring_rq();
        }
        Ok(())
    }
}

/// wqe constants re-exported for users building raw WRs.
pub mod consts {
    pub use super::wqe::ATOMIC_SIZE;
}

macro_rules! copy_impls {
    ($($t:ident),*) => {$(
        impl<'a, H: Hal> Clone for $t<'a, H> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<'a, H: Hal> Copy for $t<'a, H> {}
    )*};
}
copy_impls!(Sge, SendData, SendWr, RecvWr);
