//! The HCA's port: where the RC transport's packets go and come from.
//!
//! Every RC QP runs through [`crate::roce::rc::RcQp`] ([`crate::datapath::rc`]): real PSNs, real
//! packet boundaries at the path MTU, real ACKs/NAKs and retransmissions. What differs between
//! the routes is only how a packet's bytes travel:
//!
//! - **A frame link** ([`Port::pair`], [`Port::listen`], [`Port::connect`], [`Port::serve`]):
//!   each packet is a complete RoCEv2 frame (Ethernet II, IPv4 or IPv6, UDP 4791, BTH and
//!   extension headers, payload, pad, ICRC) on a [`crate::link::FramePort`], which checks what
//!   it receives (MAC, decode, ICRC, ...), counts, captures (`--wire-pcap`) and injects faults
//!   (`--wire-fault`). Stream links use QEMU's `-netdev stream` framing (see
//!   [`crate::link`]).
//! - **Loopback** (the remote GID is one of this HCA's) and **a pair sharing one guest memory**
//!   ([`Port::pair_sharing_memory`]): the same packets (BTH, extension headers, PSNs), but the
//!   payload is not copied into a frame: it travels as a [`RefPayload`] naming the bus pieces
//!   the sender's keys resolved to, and the receiver moves it with one [`GuestMemory::copy`]
//!   straight into the destination (the transport's `RxPayload::Ref` / `TxPayload::src`
//!   design, roce/transport.rs; consecutive packets of one RDMA WRITE whose bytes follow on
//!   share one copy, datapath/rc `PendingMove`). No ICRC is computed: no frame exists. On
//!   the loopback queue the MIDDLE packets of one message that follow each other share one
//!   entry ([`RefPacket::more`]); the receiver still takes them packet by packet.
//! - **No link**: packets to a remote GID are lost (a cable to nowhere); RC retransmits them
//!   until `retry_count` runs out.
//!
//! A frame link also carries Ethernet traffic that is not RoCE: frames the Ethernet SQs send
//! (`Port::send_frame`), and frames that arrive and are not RoCEv2 ([`crate::link::classify`]),
//! which the port hands up whole (`Arrival::Eth`) to the vport's address filter and the NIC
//! receive flow tables (crate::datapath::steer). The other routes carry RC packets only.
//!
//! The port also keeps the model's clock ([`Port::now_ns`]): the one place the data path reads
//! time; the state machines get it passed in. It is the monotonic wall clock, unless a test
//! gives the port a [`VirtualClock`] ([`Port::set_clock`]) that it advances itself, so the RC
//! timers (retransmit, RNR) fire at the same points of a run however fast the host is.
//!
//! [`GuestMemory::copy`]: crate::memory::GuestMemory::copy

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::link::{
    FaultSpec, FramePort, Link, LinkError, PcapTap, PortConfig, Received, RxPacket as RxFrame,
    StreamAddr,
};
use crate::roce::counters::{Counter, PortCounters};

/// Packets an in-process shared-memory pair queues before refusing more (lost, as on a full
/// transmit queue; RC retransmits).
pub const MAX_QUEUED_PACKETS: usize = 8192;

mod packet;
pub use packet::{same_memory, DeliverError, PktExt, RefPacket, RefPayload};

enum PortLink {
    /// No link: remote packets are lost.
    None,
    /// Real frames.
    Frames(Box<FramePort>),
    /// An in-process pair of HCAs on one guest memory: packets by reference.
    Shared {
        tx: mpsc::SyncSender<RefPacket>,
        rx: mpsc::Receiver<RefPacket>,
    },
}

/// What arrived at the port.
pub(crate) enum Arrival {
    /// A checked RoCEv2 frame.
    Frame(RxFrame),
    /// A packet by reference.
    Ref(RefPacket),
    /// An Ethernet frame that is not RoCEv2 (frame links only), for the vport's address
    /// filter and NIC receive steering (crate::datapath::steer).
    Eth(Vec<u8>),
}

/// A clock that only moves when told to: nanoseconds, shared by every clone (one per HCA, or
/// one for several HCAs). A port given one ([`Port::set_clock`]) reads it instead of the wall
/// clock at each device event, so a test decides when timers expire: deterministic on any
/// host and build.
#[derive(Clone, Debug, Default)]
pub struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// A clock at 0 ns.
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    /// The clock's reading (ns).
    pub fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Moves the clock `ns` forward (saturating).
    pub fn advance(&self, ns: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(ns))
            });
    }

    /// Moves the clock to `ns` if that is later (it never goes back).
    pub fn advance_to(&self, ns: u64) {
        self.0.fetch_max(ns, Ordering::Relaxed);
    }
}

/// The HCA's port: the loopback queue, the link to the outside, the counters and the clock.
pub struct Port {
    link: PortLink,
    /// Loopback packets waiting to be processed by this HCA.
    pub(crate) loopq: VecDeque<RefPacket>,
    /// QPs whose send queue should be looked at again.
    pub(crate) kicks: VecDeque<u32>,
    /// Spare loopback queue: the engine takes the queued packets as a whole and puts this in
    /// their place (kept, so the data path neither allocates nor moves packets to batch them).
    pub(crate) batch: VecDeque<RefPacket>,
    counters: Arc<PortCounters>,
    epoch: Instant,
    /// The clock [`Port::tick`] reads instead of the wall clock (tests, the fuzzer).
    virt: Option<VirtualClock>,
    /// The clock's reading for the device event being processed ([`Port::tick`]).
    now: u64,
    /// Fault spec to apply once a frame link exists.
    faults: Option<FaultSpec>,
    /// Packets lost without a link, or whose payload memory went away.
    pub dropped: u64,
    /// The frame port's destination addresses follow the GID table ([`Port::set_ips`]);
    /// false for a port just put in place, which the next wire poll brings up to date.
    ips_synced: bool,
}

impl Default for Port {
    fn default() -> Port {
        Port {
            link: PortLink::None,
            loopq: VecDeque::new(),
            kicks: VecDeque::new(),
            batch: VecDeque::new(),
            counters: Arc::new(PortCounters::new()),
            epoch: Instant::now(),
            virt: None,
            now: 0,
            faults: None,
            dropped: 0,
            ips_synced: false,
        }
    }
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.link {
            PortLink::None => "none",
            PortLink::Frames(_) => "frames",
            PortLink::Shared { .. } => "shared-memory pair",
        };
        f.debug_struct("Port")
            .field("link", &kind)
            .field("loopq", &self.loopq.len())
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// A MAC the port uses until the HCA tells it its own ([`Port::set_mac`]).
const UNSET_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0];

/// The destination addresses a port with an empty GID table accepts: only `::`, which no
/// frame is sent to, so every RoCE frame is dropped (and counted `rx_drop_wrong_dst_ip`).
/// [`PortConfig`] reads an empty list as "any address"; the HCA's port never has one.
fn no_gids() -> Vec<std::net::IpAddr> {
    vec![std::net::Ipv6Addr::UNSPECIFIED.into()]
}

/// The identity a frame port starts with: no MAC yet, no GIDs.
fn unset_config() -> PortConfig {
    PortConfig {
        mac: UNSET_MAC,
        ips: no_gids(),
    }
}

impl Port {
    /// A port carrying real frames on `link`.
    pub fn on_link(link: Link) -> Port {
        let mut p = Port::default();
        let fp = FramePort::new(link, unset_config()).with_counters(p.counters.clone());
        p.link = PortLink::Frames(Box::new(fp));
        p
    }

    /// Two ports joined by an in-process link carrying real frames (two HCAs in one process).
    pub fn pair() -> (Port, Port) {
        let (a, b) = Link::pair();
        (Port::on_link(a), Port::on_link(b))
    }

    /// Two ports for two HCAs that DMA into the same guest memory: packets (real PSNs, ACKs,
    /// packet boundaries) cross by reference and payloads land with one copy. If the HCAs turn
    /// out not to share memory, the receiver reads the bytes from the sender's memory. Only
    /// RC packets cross: a frame (a UD or GSI datagram, an Ethernet frame) is dropped and
    /// counted as `tx_drop_link` ([`Port::pair`] carries those).
    pub fn pair_sharing_memory() -> (Port, Port) {
        let (ta, rb) = mpsc::sync_channel(MAX_QUEUED_PACKETS);
        let (tb, ra) = mpsc::sync_channel(MAX_QUEUED_PACKETS);
        let mk = |tx, rx| Port {
            link: PortLink::Shared { tx, rx },
            ..Port::default()
        };
        (mk(ta, ra), mk(tb, rb))
    }

    /// Listens on `addr` (`unix:PATH`, a bare path, or `tcp:IP:PORT`) as QEMU's `server=on`:
    /// the link is down until a peer connects, and listens again when it leaves.
    pub fn serve(addr: &str) -> Result<Port, LinkError> {
        let a = StreamAddr::parse(addr)?;
        if let StreamAddr::Unix(p) = &a {
            remove_stale_socket(p);
        }
        Link::serve(&a).map(Port::on_link)
    }

    /// Same as [`Port::serve`] (the name the old options used).
    pub fn listen(addr: impl AsRef<std::path::Path>) -> Result<Port, LinkError> {
        Port::serve(&addr.as_ref().to_string_lossy())
    }

    /// Connects to `addr`, retrying for up to 10 s.
    pub fn connect(addr: impl AsRef<std::path::Path>) -> Result<Port, LinkError> {
        let a = StreamAddr::parse(&addr.as_ref().to_string_lossy())?;
        Link::connect(&a, Instant::now() + Duration::from_secs(10)).map(Port::on_link)
    }

    /// Captures every frame, both directions (frame links only; returns false otherwise).
    pub fn set_pcap(&mut self, tap: PcapTap) -> bool {
        match &mut self.link {
            PortLink::Frames(p) => {
                let fp =
                    std::mem::replace(p.as_mut(), FramePort::new(Link::loopback(), unset_config()));
                **p = fp.with_tap(tap);
                true
            }
            _ => false,
        }
    }

    /// Injects wire faults on send (frame links; remembered until one exists).
    pub fn set_faults(&mut self, spec: FaultSpec) {
        if let PortLink::Frames(p) = &mut self.link {
            p.set_faults(spec);
        } else {
            self.faults = Some(spec);
        }
    }

    /// The port counters.
    pub fn counters(&self) -> &Arc<PortCounters> {
        &self.counters
    }

    /// Nanoseconds on the model's clock (monotonic), as read by the last [`Port::tick`]: time
    /// stands still while the device processes one event (a doorbell, a wire poll), as the
    /// transport's state machines expect of a clock passed in.
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Reads the clock (at the start of each device event): the wall clock, or the virtual
    /// clock given by [`Port::set_clock`].
    pub fn tick(&mut self) {
        let t = match &self.virt {
            None => self.epoch.elapsed().as_nanos() as u64,
            Some(v) => v.now_ns(),
        };
        self.now = self.now.max(t);
    }

    /// Runs the port's clock on `clock` from now on (`None`: the wall clock again). The
    /// reading never goes back: a clock behind the last reading holds it until it passes it.
    /// The clock survives a device reset, as the link does.
    pub fn set_clock(&mut self, clock: Option<VirtualClock>) {
        self.virt = clock;
    }

    /// The virtual clock the port runs on, if any.
    pub fn clock(&self) -> Option<&VirtualClock> {
        self.virt.as_ref()
    }

    /// Tells the port its MAC (and the IP addresses of its GIDs, when known).
    pub(crate) fn set_mac(&mut self, mac: [u8; 6]) {
        if let PortLink::Frames(p) = &mut self.link {
            if p.config().mac != mac {
                let mut cfg = p.config().clone();
                cfg.mac = mac;
                p.set_config(cfg);
            }
        }
    }

    /// Tells the port the IP addresses of its RoCE v2 GIDs (after SET_ROCE_ADDRESS): RoCE
    /// frames to any other destination are dropped and counted, as hardware drops a frame
    /// whose destination GID is not in its GID table (rxe does the same: rxe_recv.c
    /// `rxe_chk_dgid`). Frame links only: packets by reference carry no destination address.
    pub(crate) fn set_ips(&mut self, ips: Vec<std::net::IpAddr>) {
        self.ips_synced = true;
        if let PortLink::Frames(p) = &mut self.link {
            let ips = if ips.is_empty() { no_gids() } else { ips };
            if p.config().ips != ips {
                let mut cfg = p.config().clone();
                cfg.ips = ips;
                p.set_config(cfg);
            }
        }
    }

    /// Whether [`Port::set_ips`] has run since the port was put in place.
    pub(crate) fn ips_synced(&self) -> bool {
        self.ips_synced
    }

    /// Drops queued work (device reset); the link itself survives, as a cable does. The GID
    /// table is gone with the reset, so the port accepts no destination until it is
    /// programmed again.
    pub fn reset_state(&mut self) {
        self.loopq.clear();
        self.kicks.clear();
        self.set_ips(Vec::new());
    }

    /// Whether the port has a link to another HCA.
    pub fn is_linked(&self) -> bool {
        !matches!(self.link, PortLink::None)
    }

    /// Whether the port passes payloads by reference (no frames) for remote packets.
    pub(crate) fn by_ref(&self) -> bool {
        matches!(self.link, PortLink::Shared { .. })
    }

    /// Whether a socket link has a connected peer (always true for in-process links).
    pub fn peer_connected(&self) -> bool {
        match &self.link {
            PortLink::None => false,
            PortLink::Shared { .. } => true,
            PortLink::Frames(p) => p.link().is_up(),
        }
    }

    /// What a device thread waits for before this port has something new: loopback packets
    /// or kicked send queues are ready now, else the link's socket ([`crate::link::Wait`]); a
    /// port with no link or an in-process one has no descriptor (a tick).
    pub fn wait(&self) -> crate::link::Wait {
        if !self.loopq.is_empty() || !self.kicks.is_empty() {
            return crate::link::Wait::Ready;
        }
        match &self.link {
            PortLink::Frames(p) => p.wait(),
            PortLink::None | PortLink::Shared { .. } => crate::link::Wait::Tick,
        }
    }

    /// Sends a frame on the link.
    pub(crate) fn send_frame(&mut self, frame: Vec<u8>) {
        match &mut self.link {
            PortLink::Frames(p) => {
                if let Some(f) = self.faults.take() {
                    p.set_faults(f);
                }
                let _ = p.send(frame);
            }
            _ => {
                self.counters.bump(Counter::TxDropLink);
                self.dropped += 1;
            }
        }
    }

    /// Sends a packet by reference to the peer (shared-memory pair).
    pub(crate) fn send_ref(&mut self, pkt: RefPacket) {
        match &mut self.link {
            PortLink::Shared { tx, .. } => {
                let len = pkt.payload.len() as u64;
                if tx.try_send(pkt).is_ok() {
                    self.counters.bump(Counter::TxFrames);
                    self.counters.add(Counter::TxBytes, len);
                } else {
                    self.counters.bump(Counter::TxDropLink);
                    self.dropped += 1;
                }
            }
            _ => {
                self.counters.bump(Counter::TxDropLink);
                self.dropped += 1;
            }
        }
    }

    /// The next arrival from the link, if any. Never blocks.
    pub(crate) fn recv(&mut self) -> Option<Arrival> {
        match &mut self.link {
            PortLink::None => None,
            PortLink::Frames(p) => p.recv_any().ok().flatten().map(|r| match r {
                Received::Roce(f) => Arrival::Frame(f),
                Received::Eth(f) => Arrival::Eth(f),
            }),
            PortLink::Shared { rx, .. } => {
                let pkt = rx.try_recv().ok()?;
                self.counters.bump(Counter::RxFrames);
                self.counters
                    .add(Counter::RxBytes, pkt.payload.len() as u64);
                Some(Arrival::Ref(pkt))
            }
        }
    }

    /// Releases frames the fault injector holds and flushes the capture and the link (a
    /// device shutting down).
    pub fn shutdown(&mut self) {
        if let PortLink::Frames(p) = &mut self.link {
            p.shutdown(Instant::now() + Duration::from_secs(1));
        }
    }
}

fn remove_stale_socket(path: &std::path::Path) {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Handles the binary's wire options: `--wire-listen ADDR` and `--wire-connect ADDR` (`ADDR`
/// a UNIX socket path, `unix:PATH` or `tcp:IP:PORT`). Returns `None` if `flag` is not a wire
/// option, else the port or why it could not be made.
pub fn port_from_args(flag: &str, value: &str) -> Option<Result<Port, String>> {
    match flag {
        "--wire-listen" => {
            Some(Port::serve(value).map_err(|e| format!("--wire-listen {value}: {e}")))
        }
        "--wire-connect" => {
            Some(Port::connect(value).map_err(|e| format!("--wire-connect {value}: {e}")))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{GuestMemory, RegionMemory};

    #[test]
    fn memory_payload_delivers_any_slice() {
        let src = Arc::new(RegionMemory::new());
        let other = Arc::new(RegionMemory::with_base(1 << 40));
        let bytes: Vec<u8> = (1..=16).collect();
        let mut pieces = Vec::new();
        let mut at = 0;
        for n in [5usize, 7, 4] {
            let a = src.alloc(n, 1).unwrap();
            src.write(a, &bytes[at..at + n]).unwrap();
            pieces.push((a, n));
            at += n;
        }
        let mem: Arc<dyn GuestMemory> = src.clone();
        let p = RefPayload::Mem { mem, pieces };
        for rm in [src.clone(), other.clone()] {
            let dst_mem: Arc<dyn GuestMemory> = rm.clone();
            let dst = rm.alloc(16, 1).unwrap();
            for off in 0..16 {
                for n in 0..=16 - off {
                    rm.write(dst, &[0; 16]).unwrap();
                    p.deliver(off, &dst_mem, dst, n).unwrap();
                    let mut got = [0u8; 16];
                    rm.read(dst, &mut got).unwrap();
                    assert_eq!(&got[..n], &bytes[off..off + n], "off {off} n {n}");
                    assert!(got[n..].iter().all(|&b| b == 0));
                    let mut r = vec![0u8; n];
                    p.read_into(off, &mut r).unwrap();
                    assert_eq!(&r[..], &bytes[off..off + n]);
                }
            }
            assert!(matches!(
                p.deliver(10, &dst_mem, dst, 7),
                Err(DeliverError::Source(_))
            ));
            assert!(matches!(
                p.deliver(0, &dst_mem, 0x10, 4),
                Err(DeliverError::Destination(_))
            ));
        }
    }
}

#[cfg(test)]
mod eth_tests {
    use super::*;

    /// A frame link hands a frame that is not RoCEv2 up as Ethernet traffic, whatever its
    /// destination; a shared-memory pair carries no frames at all.
    #[test]
    fn a_frame_link_passes_ethernet_frames_up() {
        let (mut a, mut b) = Port::pair();
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        let mut other = arp.clone();
        other[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x33]);
        a.send_frame(arp.clone());
        a.send_frame(other.clone());
        for want in [arp, other] {
            match b.recv() {
                Some(Arrival::Eth(f)) => assert_eq!(f, want),
                _ => panic!("expected an Ethernet frame"),
            }
        }
        assert!(b.recv().is_none());
        let (mut s, _t) = Port::pair_sharing_memory();
        s.send_frame(vec![0xff; 60]);
        assert_eq!(s.counters().get(Counter::TxDropLink), 1);
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    /// A port on a virtual clock reads it at each tick and nothing else: time stands still
    /// between advances however long the host takes, every clone moves together, and the
    /// reading never goes back.
    #[test]
    fn a_virtual_clock_moves_only_when_advanced() {
        let clock = VirtualClock::new();
        let (mut a, mut b) = Port::pair_sharing_memory();
        a.set_clock(Some(clock.clone()));
        b.set_clock(Some(clock.clone()));
        a.tick();
        std::thread::sleep(Duration::from_millis(2));
        a.tick();
        assert_eq!(a.now_ns(), 0, "the wall clock moved, the port's did not");
        clock.advance(4_000);
        a.tick();
        b.tick();
        assert_eq!((a.now_ns(), b.now_ns()), (4_000, 4_000));
        clock.advance_to(1_000);
        assert_eq!(clock.now_ns(), 4_000, "advance_to never goes back");
        // A clock behind the port's last reading holds it.
        b.set_clock(Some(VirtualClock::new()));
        b.tick();
        assert_eq!(b.now_ns(), 4_000);
        // Back on the wall clock (the port's epoch is older than 2 ms).
        a.set_clock(None);
        a.tick();
        assert!(a.now_ns() >= 2_000_000);
        assert!(a.clock().is_none() && b.clock().is_some());
    }
}
