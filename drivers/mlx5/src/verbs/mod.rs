//! The verbs API: [`Context`], [`ProtectionDomain`], [`MemoryRegion`], [`CompletionQueue`],
//! [`QueuePair`] (RC, UD, the GSI QP), [`AddressHandle`], shaped after libibverbs and safe by
//! default.
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

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use mlx5_prm::wqe;

use crate::caps::Caps;
use crate::cmd::CmdBuf;
use crate::context::{fresh_variant16, CtxInner, MrInfo, UmrHost};
use crate::eq::AsyncEvent;
use crate::error::{Error, InvalidInput, Refused, Result};
use crate::eth::{EthConfig, EthQueue};
use crate::hal::{DmaMem, Hal};
use crate::hca::{self, Config};
use crate::mr::{self, Access, Klm, KlmPlan, MkeyParams, PhysChunk, Xlt};
use crate::qp::{Data, RawSge, MAX_SGE};
use crate::umr::UmrRes;

pub use crate::ah::{AddressHandle, AhAttr};
pub use crate::cq::{
    CompletionChannel, CompletionQueue, CqEvent, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
pub use crate::eq::AsyncEvent as Event;
pub use crate::hca::Config as ContextConfig;
pub use crate::mr::Access as AccessFlags;
pub(crate) use crate::pd::PdInner;
pub use crate::pd::ProtectionDomain;
pub use crate::qp::{
    grh_ipv4_source, BoundMr, BoundSge, ConnectOptions, Mtu, PostError, QpAttr, QpCaps, QpEndpoint,
    QpOptions, QueuePair, RawData, RawRecvWr, RawSendWr, Remote, SendFlags, SendOp, UdDest,
    GRH_BYTES, GSI_QKEY, GSI_QPN,
};
pub use crate::region::MemoryRegion;
pub(crate) use crate::region::MrInner;

/// The context's UMR resources are the UMR code's (see [`UmrHost`]).
impl<H: Hal> UmrHost for H {
    type Umr = UmrRes<H>;
}

/// The context's UMR QP, in the layer above the UMR code.
impl<H: Hal> CtxInner<H> {
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
        f: impl FnOnce(&mut UmrRes<H>, &H) -> Result<T>,
    ) -> Result<Option<T>> {
        self.check_alive()?;
        let mut g = self.umr.lock();
        if g.is_none() {
            if !create || self.umr_off.load(Ordering::Acquire) {
                return Ok(None);
            }
            *g = Some(UmrRes::new(self)?);
        }
        match g.as_mut() {
            Some(r) => f(r, &self.hal).map(Some),
            None => Ok(None),
        }
    }

    /// [`CtxInner::umr_with`] without creating, and without waiting when the UMR state is
    /// busy (`None`): the registration path, which runs inside the UMR QP's own creation (its
    /// staging region) and falls back to commands.
    // inline(always): UMR cache reg 1,419 vs 1,595 instructions per MR (reg_mr --instructions)
    #[inline(always)]
    pub(crate) fn umr_try_with<T>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut UmrRes<H>, &H) -> Result<T>,
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
    pub(crate) fn umr_shutdown(&self) {
        self.umr_off.store(true, Ordering::Release);
        let r = self.umr.lock().take();
        drop(r);
    }
}

/// An opened HCA function.
pub struct Context<H: Hal> {
    inner: Arc<CtxInner<H>>,
}

impl<H: Hal> Context<H> {
    /// Brings the function up with `cfg` (see [`crate::hca`]).
    pub fn open(hal: H, cfg: Config) -> Result<Self> {
        Ok(Context {
            inner: Arc::new(CtxInner::open(hal, &cfg)?),
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
                let r = inner.close();
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

    /// Opens an Ethernet queue on the function's NIC vport: raw frames to and from the
    /// port's MAC, broadcast and the IPv6 all-nodes and solicited-node groups of its
    /// link-local address ([`crate::eth`]: the objects Linux mlx5e makes for a channel).
    /// Refused with [`Error::Unsupported`] when the port is not Ethernet or lacks the NIC
    /// offloads and receive steering mlx5e needs.
    pub fn open_eth(&self, cfg: &EthConfig) -> Result<EthQueue<H>> {
        crate::eth::open(&self.inner, cfg)
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

impl<H: Hal> Drop for Context<H> {
    fn drop(&mut self) {
        self.inner.umr_shutdown();
    }
}

/// wqe constants re-exported for users building raw WRs.
pub mod consts {
    pub use super::wqe::ATOMIC_SIZE;
}

mod counters;
mod device;
mod pd;
mod post;
mod region;

pub use device::*;
pub use post::*;
pub use region::*;
