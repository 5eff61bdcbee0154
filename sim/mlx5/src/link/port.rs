//! [`FramePort`], a port's frame end on a [`Link`]: receive checks as hardware makes them,
//! counters, capture, faults.
//!
//! # Receive checks
//!
//! [`check_rx`] judges every frame taken off the link, in this order; a frame that fails is
//! dropped silently and counted under its [`RxDrop`] reason (hardware sends nothing back for
//! any of them):
//!
//! 1. shorter than an Ethernet header: [`RxDrop::Malformed`];
//! 2. destination MAC neither the port's nor a group (multicast/broadcast, I/G bit set):
//!    [`RxDrop::WrongDstMac`] — the MAC filter of any NIC;
//! 3. not RoCEv2 (ARP, IPv6 ND, TCP, UDP to another port, ...): [`RxDrop::NotRoce`]. These
//!    are Ethernet traffic, not a RoCE frame: [`classify`] hands them on
//!    ([`Rx::Eth`], [`FramePort::recv_any`]) to the HCA's Ethernet receive path (vport address
//!    filter, NIC receive steering: crate::datapath::steer), whatever their destination MAC
//!    (the vport filter judges it, promiscuous modes included). [`FramePort::recv`], for a
//!    port with no Ethernet receiver, drops them: counted as [`RxDrop::NotRoce`] and in the
//!    `received_eth_*` classes (to the port's MAC or a group), or as [`RxDrop::WrongDstMac`];
//! 4. claims RoCEv2 but does not decode ([`crate::roce::decode`]): [`RxDrop::Malformed`];
//! 5. destination IP not one of the port's addresses (when the port has any; multicast IPs
//!    pass): [`RxDrop::WrongDstIp`] — rxe_recv.c `rxe_chk_dgid`;
//! 6. UDP checksum non-zero and wrong: [`RxDrop::UdpChecksum`]. A zero checksum means "none"
//!    (RFC 768; Annex A17 lets RoCEv2 senders send 0, rxe always does). A non-zero one is
//!    verified, as Linux does for rxe: net/ipv4/udp.c and net/ipv6/udp.c
//!    `udp*_queue_rcv_one_skb` run `udp_lib_checksum_complete` ("Verify checksum before
//!    giving to encap") before the tunnel's `encap_rcv` (rxe_net.c `rxe_udp_encap_recv`) and
//!    drop the packet on a mismatch. Zero is accepted over IPv6 too: rxe_net.c
//!    `rxe_setup_udp_tunnel` leaves `udp_port_cfg.use_udp6_rx_checksums` 0, so
//!    `udp_sock_create6` lets zero-checksum IPv6 datagrams in;
//! 7. ICRC wrong: [`RxDrop::Icrc`] (IBTA A17.4.1; PPCNT `rx_icrc_encapsulated`);
//! 8. BTH TVer not 0: [`RxDrop::BadTver`] — rxe_recv.c `hdr_check`;
//! 9. DestQP 0 (RoCE has no QP0): [`RxDrop::Qp0`] — rxe_recv.c `hdr_check`.
//!
//! rxe checks TVer and the QPN (`hdr_check`) before the ICRC (`rxe_icrc_check`); the model
//! checks the ICRC first (model choice: no field of a frame with a bad ICRC is trusted). A
//! frame failing both is dropped either way; only the counter it lands in differs.
//! Everything else (QP lookup, state, P_Key, PSN) is the transport's.
//!
//! # Capture and faults
//!
//! The tap ([`PcapTap`]) records the wire as the port sees it: every frame the port puts on
//! the link (after the fault injector: dropped frames are absent, duplicates twice,
//! corruptions as corrupted) and every frame it takes off (before the checks). Faults are
//! applied on send ([`super::fault`]).

use std::io::{self, Write};
use std::net::IpAddr;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::fault::{FaultInjector, FaultSpec};
use super::pcap::PcapWriter;
use super::{Link, LinkError};
use crate::roce::counters::{Counter, PortCounters};
use crate::roce::{decode, DecodeError, Frame, IpHdr, RoceHeaders};
use crate::roce::{ETH_HDR_LEN, IPV6_HDR_LEN, IP_PROTO_UDP};

/// Why [`check_rx`] dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxDrop {
    /// Destination MAC not the port's and not a group address.
    WrongDstMac([u8; 6]),
    /// Not a RoCEv2 frame.
    NotRoce {
        /// The EtherType.
        ethertype: u16,
    },
    /// Shorter than an Ethernet header (`None`) or a RoCEv2 frame that does not decode.
    Malformed(Option<DecodeError>),
    /// Destination IP not the port's.
    WrongDstIp(IpAddr),
    /// Non-zero UDP checksum that is wrong.
    UdpChecksum {
        /// As received.
        found: u16,
    },
    /// Bad ICRC.
    Icrc {
        /// As received.
        found: u32,
        /// As computed.
        expected: u32,
    },
    /// BTH TVer not 0.
    BadTver(u8),
    /// DestQP 0.
    Qp0,
}

impl RxDrop {
    /// The counter this drop is counted in.
    pub fn counter(&self) -> Counter {
        match self {
            RxDrop::WrongDstMac(_) => Counter::RxDropWrongDstMac,
            RxDrop::NotRoce { .. } => Counter::RxDropNotRoce,
            RxDrop::Malformed(_) => Counter::RxDropMalformed,
            RxDrop::WrongDstIp(_) => Counter::RxDropWrongDstIp,
            RxDrop::UdpChecksum { .. } => Counter::RxDropUdpChecksum,
            RxDrop::Icrc { .. } => Counter::RxIcrcErrors,
            RxDrop::BadTver(_) => Counter::RxDropBadTver,
            RxDrop::Qp0 => Counter::RxDropQp0,
        }
    }
}

/// The port's identity, for the receive checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// The port's MAC.
    pub mac: [u8; 6],
    /// The port's IP addresses (its RoCE v2 GIDs). Empty: any destination IP is accepted
    /// (until the GID table is wired to the port).
    pub ips: Vec<IpAddr>,
}

impl PortConfig {
    /// A port with `mac` that accepts any destination IP.
    pub fn new(mac: [u8; 6]) -> PortConfig {
        PortConfig {
            mac,
            ips: Vec::new(),
        }
    }
}

/// A received RoCEv2 frame that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxPacket {
    /// The decoded headers.
    pub hdrs: RoceHeaders,
    /// Where the payload (without pad) lies in `bytes`.
    pub payload: Range<usize>,
    /// The whole frame.
    pub bytes: Vec<u8>,
}

impl RxPacket {
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.bytes[self.payload.clone()]
    }
}

fn is_group(mac: &[u8]) -> bool {
    mac[0] & 1 != 0
}

fn ip_is_group(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
        IpAddr::V6(a) => a.is_multicast(),
    }
}

/// Ones'-complement sum (RFC 1071) of `parts`, each of even length except the last.
fn ones_sum(parts: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    for p in parts {
        let mut c = p.chunks_exact(2);
        for w in &mut c {
            sum += u16::from_be_bytes([w[0], w[1]]) as u64;
        }
        if let [b] = c.remainder() {
            sum += (*b as u64) << 8;
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Whether the UDP checksum of the datagram at `ip..` (IP header first) is right: the sum over
/// the pseudo-header (RFC 768 for IPv4, RFC 8200 §8.1 for IPv6) and the UDP segment is 0xffff.
fn udp_checksum_ok(frame: &[u8], ip_at: usize, ip: &IpHdr) -> bool {
    let (udp_at, pseudo_addrs): (usize, Vec<u8>) = match ip {
        IpHdr::V4(h) => (
            ip_at + (frame[ip_at] as usize & 0xf) * 4,
            [h.src.octets(), h.dst.octets()].concat(),
        ),
        IpHdr::V6(h) => (
            ip_at + IPV6_HDR_LEN,
            [h.src.octets(), h.dst.octets()].concat(),
        ),
    };
    let Some(len_bytes) = frame.get(udp_at + 4..udp_at + 6) else {
        return false;
    };
    let ulen = u16::from_be_bytes([len_bytes[0], len_bytes[1]]) as usize;
    let Some(seg) = frame.get(udp_at..udp_at + ulen) else {
        return false;
    };
    let tail = [0, 0, 0, IP_PROTO_UDP];
    let len32 = (ulen as u32).to_be_bytes();
    let sum = match ip {
        IpHdr::V4(_) => ones_sum(&[&pseudo_addrs, &[0, IP_PROTO_UDP], &len_bytes[..2], seg]),
        IpHdr::V6(_) => ones_sum(&[&pseudo_addrs, &len32, &tail, seg]),
    };
    sum == 0xffff
}

/// Judges one received frame (see the module documentation for the checks and their order).
pub fn check_rx(frame: &[u8], cfg: &PortConfig) -> Result<(RoceHeaders, Range<usize>), RxDrop> {
    if frame.len() < ETH_HDR_LEN {
        return Err(RxDrop::Malformed(None));
    }
    if !is_group(frame) && frame[..6] != cfg.mac {
        let mut m = [0u8; 6];
        m.copy_from_slice(&frame[..6]);
        return Err(RxDrop::WrongDstMac(m));
    }
    let f = match decode(frame) {
        Ok(Frame::Roce(f)) => f,
        Ok(Frame::Other(o)) => {
            return Err(RxDrop::NotRoce {
                ethertype: o.ethertype,
            })
        }
        Err(e) => return Err(RxDrop::Malformed(Some(e))),
    };
    let h = f.hdrs;
    let dst = h.ip.dst();
    if !cfg.ips.is_empty() && !ip_is_group(&dst) && !cfg.ips.contains(&dst) {
        return Err(RxDrop::WrongDstIp(dst));
    }
    let ip_at = super::l3_offset(frame).unwrap_or(ETH_HDR_LEN);
    if h.udp.checksum != 0 && !udp_checksum_ok(frame, ip_at, &h.ip) {
        return Err(RxDrop::UdpChecksum {
            found: h.udp.checksum,
        });
    }
    if !f.icrc_ok() {
        return Err(RxDrop::Icrc {
            found: f.icrc,
            expected: f.icrc_computed,
        });
    }
    if h.bth.tver != 0 {
        return Err(RxDrop::BadTver(h.bth.tver));
    }
    if h.bth.dest_qp == 0 {
        return Err(RxDrop::Qp0);
    }
    // The payload borrows from `frame`: its offset is the distance between the two pointers.
    let start = f.payload.as_ptr() as usize - frame.as_ptr() as usize;
    Ok((h, start..start + f.payload.len()))
}

/// What [`classify`] makes of a frame that is not dropped.
// RoCE frames are the common case on the data path: boxing their headers would cost an
// allocation per packet to shrink the rare `Eth` (as roce::Frame does).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rx {
    /// A RoCEv2 frame for this port that passed every check: its headers and where its
    /// payload lies ([`check_rx`]).
    Roce(RoceHeaders, Range<usize>),
    /// An Ethernet frame that is not RoCEv2 (ARP, IP, any EtherType), to any destination MAC:
    /// the vport's address filter and the NIC receive steering judge it.
    Eth,
}

/// Judges one received frame as the HCA's port does: [`check_rx`], except that a frame that
/// is not RoCEv2 ([`RxDrop::NotRoce`], or a frame to another unicast MAC that decodes as
/// something other than RoCEv2) is Ethernet traffic ([`Rx::Eth`]) rather than a drop. A
/// frame to another MAC that claims to be RoCEv2, or does not decode at all, is still
/// [`RxDrop::WrongDstMac`], as before.
pub fn classify(frame: &[u8], cfg: &PortConfig) -> Result<Rx, RxDrop> {
    match check_rx(frame, cfg) {
        Ok((h, payload)) => Ok(Rx::Roce(h, payload)),
        Err(RxDrop::NotRoce { .. }) => Ok(Rx::Eth),
        Err(RxDrop::WrongDstMac(_)) if matches!(decode(frame), Ok(Frame::Other(_))) => Ok(Rx::Eth),
        Err(d) => Err(d),
    }
}

/// Counts a non-RoCE frame (at least an Ethernet header) the vport takes in its
/// `received_eth_*` class ([`Counter::eth_class`]): packets and octets.
pub(crate) fn count_eth_class(counters: &PortCounters, frame: &[u8]) {
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&frame[..6]);
    let (packets, octets) = Counter::eth_class(&dst, true);
    counters.bump(packets);
    counters.add(octets, frame.len() as u64);
}

/// What [`FramePort::recv_any`] passes on.
// As [`Rx`]: RoCE packets are the common case, not boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// A RoCEv2 frame that passed every check.
    Roce(RxPacket),
    /// An Ethernet frame that is not RoCEv2 ([`Rx::Eth`]), whole.
    Eth(Vec<u8>),
}

/// A pcap capture shared by whoever holds a clone (both directions of a port, or several
/// ports writing one file). Classic pcap, microsecond timestamps, link type Ethernet.
#[derive(Clone)]
pub struct PcapTap {
    w: Arc<Mutex<PcapWriter<Box<dyn Write + Send>>>>,
}

impl std::fmt::Debug for PcapTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PcapTap")
    }
}

impl PcapTap {
    /// Captures into `out`.
    pub fn new(out: impl Write + Send + 'static) -> io::Result<PcapTap> {
        let w = PcapWriter::new(Box::new(out) as Box<dyn Write + Send>, false)?;
        Ok(PcapTap {
            w: Arc::new(Mutex::new(w)),
        })
    }

    /// Captures into a new file at `path` (buffered; [`PcapTap::flush`] or dropping the last
    /// clone writes it out).
    pub fn create(path: &Path) -> io::Result<PcapTap> {
        PcapTap::new(io::BufWriter::new(std::fs::File::create(path)?))
    }

    /// Records `frame` now.
    pub fn write(&self, frame: &[u8]) -> io::Result<()> {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        w.write_frame(ts, frame)
    }

    /// Flushes the file.
    pub fn flush(&self) -> io::Result<()> {
        self.w.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

/// Frames [`FramePort::recv`] looks at per call before returning (so a flood of junk cannot keep
/// the caller inside).
pub const RX_BUDGET: usize = 64;

/// The frame end of a port: a [`Link`] plus the receive checks, counters, an optional capture
/// and an optional fault injector. (The HCA's port, which also carries packets by reference
/// and keeps the clock, is [`crate::wire::Port`]; it puts its frames on one of these.)
#[derive(Debug)]
pub struct FramePort {
    link: Link,
    cfg: PortConfig,
    counters: Arc<PortCounters>,
    faults: Option<FaultInjector>,
    tap: Option<PcapTap>,
}

impl FramePort {
    /// A port on `link` with identity `cfg`, fresh counters, no capture, no faults.
    pub fn new(link: Link, cfg: PortConfig) -> FramePort {
        FramePort {
            link,
            cfg,
            counters: Arc::new(PortCounters::new()),
            faults: None,
            tap: None,
        }
    }

    /// Uses `counters` (e.g. shared with the command interface) instead of fresh ones.
    pub fn with_counters(mut self, counters: Arc<PortCounters>) -> FramePort {
        self.counters = counters;
        self
    }

    /// Captures both directions into `tap`.
    pub fn with_tap(mut self, tap: PcapTap) -> FramePort {
        self.tap = Some(tap);
        self
    }

    /// Injects `spec`'s faults on send (a spec that does nothing removes the injector).
    pub fn with_faults(mut self, spec: FaultSpec) -> FramePort {
        self.set_faults(spec);
        self
    }

    /// Replaces the fault injector (held frames of the old one are sent first).
    pub fn set_faults(&mut self, spec: FaultSpec) {
        self.release_held();
        self.faults = spec.is_active().then(|| FaultInjector::new(spec));
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<PortCounters> {
        &self.counters
    }

    /// The identity.
    pub fn config(&self) -> &PortConfig {
        &self.cfg
    }

    /// Changes the identity (e.g. when the driver programs a GID).
    pub fn set_config(&mut self, cfg: PortConfig) {
        self.cfg = cfg;
    }

    /// The link.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// What to wait for before the link has something new ([`Link::wait`]).
    pub fn wait(&self) -> super::Wait {
        self.link.wait()
    }

    /// The link, to change its settings.
    pub fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }

    /// Replaces the link (e.g. after a listener accepted a new peer); counters, capture and
    /// faults stay.
    pub fn set_link(&mut self, link: Link) {
        self.link = link;
    }

    fn count_link_error(&self, e: &LinkError) {
        let c = match e {
            LinkError::ZeroLength => Counter::LinkZeroLength,
            LinkError::Oversized { .. } => Counter::LinkOversized,
            LinkError::Truncated { .. } => Counter::LinkTruncated,
            LinkError::Io(_) => Counter::LinkIoErrors,
            LinkError::Closed => Counter::LinkClosed,
            _ => return,
        };
        self.counters.bump(c);
    }

    /// Puts one frame on the wire: the tap and the counters see it, the link carries it.
    fn transmit(&mut self, frame: Vec<u8>) -> Result<(), LinkError> {
        let len = frame.len() as u64;
        let roce = super::roce_bth_offset(&frame).is_some();
        let group = frame.first().is_some_and(|b| b & 1 != 0);
        // The capture shows what went on the wire: keep a copy only while capturing.
        let copy = self.tap.is_some().then(|| frame.clone());
        match self.link.send(frame) {
            Ok(()) => {
                let c = &self.counters;
                if let (Some(t), Some(f)) = (&self.tap, copy) {
                    if t.write(&f).is_err() {
                        c.bump(Counter::PcapErrors);
                    }
                }
                c.bump(Counter::TxFrames);
                c.add(Counter::TxBytes, len);
                if roce {
                    let (f, b) = if group {
                        (
                            Counter::TxRoceMulticastFrames,
                            Counter::TxRoceMulticastBytes,
                        )
                    } else {
                        (Counter::TxRoceUnicastFrames, Counter::TxRoceUnicastBytes)
                    };
                    c.bump(f);
                    c.add(b, len);
                }
                Ok(())
            }
            Err(e) => {
                self.counters.bump(Counter::TxDropLink);
                self.count_link_error(&e);
                Err(e)
            }
        }
    }

    /// Sends one frame (Ethernet header to ICRC). The fault injector, if any, may drop,
    /// corrupt, duplicate or hold it; a dropped frame is `Ok` (the wire lost it). A link error
    /// is returned after the frame is counted in [`Counter::TxDropLink`]; the transport may
    /// treat it as a lost frame. Never blocks.
    pub fn send(&mut self, frame: Vec<u8>) -> Result<(), LinkError> {
        let Some(mut inj) = self.faults.take() else {
            return self.transmit(frame);
        };
        let mut out = Vec::new();
        let ev = inj.apply(frame, |f| out.push(f));
        self.faults = Some(inj);
        let c = &self.counters;
        for (hit, ctr) in [
            (ev.dropped, Counter::FaultDropped),
            (ev.corrupted, Counter::FaultCorrupted),
            (ev.duplicated, Counter::FaultDuplicated),
            (ev.reordered, Counter::FaultReordered),
        ] {
            if hit {
                c.bump(ctr);
            }
        }
        let mut first_err = Ok(());
        for f in out {
            if let Err(e) = self.transmit(f) {
                if first_err.is_ok() {
                    first_err = Err(e);
                }
            }
        }
        first_err
    }

    /// Sends the frames the fault injector holds back.
    pub fn release_held(&mut self) {
        if let Some(mut inj) = self.faults.take() {
            let mut out = Vec::new();
            inj.flush(|f| out.push(f));
            self.faults = Some(inj);
            for f in out {
                let _ = self.transmit(f);
            }
        }
    }

    /// Frames held back by the fault injector.
    pub fn held(&self) -> usize {
        self.faults.as_ref().map_or(0, |f| f.held())
    }

    /// Counts a received frame and judges it ([`classify`]).
    fn judge(&self, frame: Vec<u8>) -> Option<Received> {
        let c = &self.counters;
        let len = frame.len() as u64;
        c.bump(Counter::RxFrames);
        c.add(Counter::RxBytes, len);
        if let Some(t) = &self.tap {
            if t.write(&frame).is_err() {
                c.bump(Counter::PcapErrors);
            }
        }
        match classify(&frame, &self.cfg) {
            Ok(Rx::Eth) => Some(Received::Eth(frame)),
            Ok(Rx::Roce(hdrs, payload)) => {
                let (f, b) = if is_group(&frame) {
                    (
                        Counter::RxRoceMulticastFrames,
                        Counter::RxRoceMulticastBytes,
                    )
                } else {
                    (Counter::RxRoceUnicastFrames, Counter::RxRoceUnicastBytes)
                };
                c.bump(f);
                c.add(b, len);
                Some(Received::Roce(RxPacket {
                    hdrs,
                    payload,
                    bytes: frame,
                }))
            }
            Err(d) => {
                c.bump(d.counter());
                None
            }
        }
    }

    /// [`FramePort::judge`] for a port with no Ethernet receiver: a frame that is not RoCEv2
    /// is dropped, counted as [`RxDrop::WrongDstMac`] when it is to another unicast MAC, else
    /// as [`RxDrop::NotRoce`] and in its `received_eth_*` class.
    fn judge_roce(&self, frame: Vec<u8>) -> Option<RxPacket> {
        match self.judge(frame)? {
            Received::Roce(p) => Some(p),
            Received::Eth(f) => {
                let c = &self.counters;
                if !is_group(&f) && f[..6] != self.cfg.mac {
                    c.bump(Counter::RxDropWrongDstMac);
                } else {
                    c.bump(Counter::RxDropNotRoce);
                    count_eth_class(c, &f);
                }
                None
            }
        }
    }

    /// The next frame for this port, if one is there now: a RoCEv2 frame that passed the
    /// checks, or an Ethernet frame that is not RoCEv2 ([`classify`]). Frames failing a check
    /// are counted and skipped (at most [`RX_BUDGET`] frames per call). A link error is
    /// counted and returned; the link is down afterwards if [`LinkError::is_fatal`]. Never
    /// blocks.
    pub fn recv_any(&mut self) -> Result<Option<Received>, LinkError> {
        self.recv_with(Self::judge)
    }

    /// The next RoCEv2 frame for this port that passed the checks, if one is there now: as
    /// [`FramePort::recv_any`], for a port with no Ethernet receiver (frames that are not
    /// RoCEv2 are dropped and counted).
    pub fn recv(&mut self) -> Result<Option<RxPacket>, LinkError> {
        self.recv_with(Self::judge_roce)
    }

    fn recv_with<T>(
        &mut self,
        judge: impl Fn(&Self, Vec<u8>) -> Option<T>,
    ) -> Result<Option<T>, LinkError> {
        for _ in 0..RX_BUDGET {
            match self.link.recv() {
                Ok(Some(f)) => {
                    if let Some(p) = judge(self, f) {
                        return Ok(Some(p));
                    }
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.count_link_error(&e);
                    return Err(e);
                }
            }
        }
        Ok(None)
    }

    /// Like [`FramePort::recv`], waiting until `deadline` for a frame that passes.
    pub fn recv_deadline(&mut self, deadline: Instant) -> Result<Option<RxPacket>, LinkError> {
        loop {
            match self.link.recv_deadline(deadline) {
                Ok(Some(f)) => {
                    if let Some(p) = self.judge_roce(f) {
                        return Ok(Some(p));
                    }
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.count_link_error(&e);
                    return Err(e);
                }
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// Writes the link's send backlog until `deadline`; true when it is empty.
    pub fn flush(&mut self, deadline: Instant) -> Result<bool, LinkError> {
        self.link.flush(deadline)
    }

    /// Releases held frames, flushes the link (until `deadline`) and the capture, and takes
    /// the link down.
    pub fn shutdown(&mut self, deadline: Instant) {
        self.release_held();
        let _ = self.link.flush(deadline);
        if let Some(t) = &self.tap {
            if t.flush().is_err() {
                self.counters.bump(Counter::PcapErrors);
            }
        }
        self.link.shutdown();
    }
}
