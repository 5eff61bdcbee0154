//! [`Stack`]: smoltcp's interface and sockets over a [`Nic`], polled by the caller.

use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::sync::atomic::{AtomicU32, Ordering};

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::socket::{icmp, Socket};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, HardwareAddress, Icmpv4Packet, Icmpv4Repr, IpAddress, IpCidr, Ipv4Cidr,
};

use crate::arp::{self, Neighbours};
use crate::error::{ConfigError, NetError, Op};
use crate::nic::{Nic, NicDevice, NicStats};
use crate::Clock;

/// How often [`Stack::resolve`] repeats its ARP request: once a second, as Linux retransmits
/// an unanswered one (`net/ipv4/arp.c` `arp_tbl`: `RETRANS_TIME` of `1 * HZ`).
pub const ARP_RETRY_US: u64 = 1_000_000;

/// How many received frames one [`Stack::poll`] takes at most, so a flood of frames cannot
/// hold a caller that polls inside another wait.
pub const POLL_BUDGET: usize = 64;

/// The default of [`StackConfig::tx_burst`]: a connection sends up to 16 segments per
/// [`Stack::poll`] (with 1460-byte segments, about a third of a 64 KiB window), far below the
/// send queue of the driver's Ethernet queue, so a burst does not overrun it.
pub const TX_BURST: usize = 16;

/// The payload of the ICMP echo requests [`Stack::ping`] sends.
const PING_PAYLOAD: &[u8] = b"unikernel net ping";

/// The first port of the dynamic range (RFC 6335 section 6: 49152-65535), where
/// [`Stack::tcp_connect`] and [`Stack::udp_bind`] with port 0 take their local ports.
const EPHEMERAL_FIRST: u16 = 49152;

/// The largest TCP window, with the largest window scale (RFC 7323 section 2.3: a shift of
/// 14), which smoltcp's TCP socket takes as its largest receive buffer.
const TCP_MAX_WINDOW: usize = 1 << 30;

/// Numbers the stacks, so a handle names the stack that made it.
static NEXT_STACK_ID: AtomicU32 = AtomicU32::new(1);

/// What a [`Stack`] is: its address and the sizes of its socket buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackConfig {
    /// The interface's IPv4 address.
    pub ip: Ipv4Addr,
    /// The subnet's prefix length (24 for a /24).
    pub prefix_len: u8,
    /// The default gateway, for destinations outside the subnet.
    pub gateway: Option<Ipv4Addr>,
    /// The receive buffer of each TCP connection, in bytes.
    pub tcp_rx_buffer: usize,
    /// The send buffer of each TCP connection, in bytes.
    pub tcp_tx_buffer: usize,
    /// How many connections a [`crate::TcpListener`] keeps ready to accept at once.
    pub tcp_backlog: usize,
    /// How many datagrams each UDP socket buffers in each direction.
    pub udp_packets: usize,
    /// How many payload bytes each UDP socket buffers in each direction.
    pub udp_buffer: usize,
    /// How many egress passes one [`Stack::poll`] makes at most: smoltcp sends at most one
    /// segment per socket per pass (smoltcp `src/iface/interface/mod.rs`
    /// `Interface::socket_egress` calls each socket's `dispatch` once, and `dispatch` emits one
    /// packet), so this bounds the segments a connection sends per poll. Passes stop early
    /// once one sends nothing (or the NIC refuses a frame). 0 counts as 1.
    pub tx_burst: usize,
}

impl StackConfig {
    /// Address `ip/prefix_len`, no gateway, 64 KiB TCP buffers each way, a backlog of 4,
    /// 16 datagrams and 64 KiB of UDP payload each way, [`TX_BURST`] egress passes per poll.
    pub fn new(ip: Ipv4Addr, prefix_len: u8) -> Self {
        StackConfig {
            ip,
            prefix_len,
            gateway: None,
            tcp_rx_buffer: 64 * 1024,
            tcp_tx_buffer: 64 * 1024,
            tcp_backlog: 4,
            udp_packets: 16,
            udp_buffer: 64 * 1024,
            tx_burst: TX_BURST,
        }
    }
}

/// The IP stack over one NIC: an smoltcp `Interface` and its sockets, the neighbour table of
/// [`Stack::resolve`], and the clock its deadlines are read on.
pub struct Stack<N: Nic, C: Clock> {
    pub(crate) id: u32,
    pub(crate) dev: NicDevice<N>,
    pub(crate) iface: Interface,
    pub(crate) sockets: SocketSet<'static>,
    pub(crate) clock: C,
    pub(crate) cfg: StackConfig,
    cidr: Ipv4Cidr,
    /// The next local port to try for connections and unnamed UDP sockets.
    next_port: u16,
    /// Closed TCP sockets kept until their FIN handshake ends, and when they go anyway.
    pub(crate) lingering: Vec<(SocketHandle, u64)>,
    ping_seq: u16,
}

impl<N: Nic, C: Clock> Stack<N, C> {
    /// A stack with address `cfg.ip/cfg.prefix_len` over `nic`, its MAC `nic.mac()`.
    pub fn new(nic: N, clock: C, cfg: &StackConfig) -> Result<Self, NetError> {
        let mac = EthernetAddress(nic.mac());
        check_config(&nic, cfg)?;
        let cidr = Ipv4Cidr::new(cfg.ip, cfg.prefix_len);
        let now = clock.now_us();
        let mut dev = NicDevice::new(nic, Neighbours::new(cidr));
        let mut config = Config::new(HardwareAddress::Ethernet(mac));
        // smoltcp draws TCP initial sequence numbers and its own ports from this seed: make it
        // differ between hosts (MAC) and boots (clock).
        let mac_bits = mac.0.iter().fold(0u64, |a, &b| a << 8 | b as u64);
        config.random_seed = mac_bits ^ now.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
        let mut iface = Interface::new(config, &mut dev, instant(now));
        iface.update_ip_addrs(|addrs| {
            // One address; the vector holds at least one (smoltcp `IFACE_MAX_ADDR_COUNT`).
            let _ = addrs.push(IpCidr::Ipv4(cidr));
        });
        if let Some(gw) = cfg.gateway {
            // The table is empty: adding the one default route cannot overflow it.
            let _ = iface.routes_mut().add_default_ipv4_route(gw);
        }
        let span = u64::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        Ok(Stack {
            id: NEXT_STACK_ID.fetch_add(1, Ordering::Relaxed),
            dev,
            iface,
            sockets: SocketSet::new(Vec::new()),
            clock,
            cfg: cfg.clone(),
            cidr,
            next_port: EPHEMERAL_FIRST + ((config_seed(mac_bits, now) % span) as u16),
            lingering: Vec::new(),
            ping_seq: 0,
        })
    }

    /// Our MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.dev.nic().mac()
    }

    /// Our IPv4 address.
    pub fn ip(&self) -> Ipv4Addr {
        self.cfg.ip
    }

    /// The configuration the stack was made with.
    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// The clock's time now, in microseconds (to compute deadlines).
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// The counters of the device under the stack.
    pub fn stats(&self) -> NicStats<N::Error> {
        self.dev.stats
    }

    /// How many sockets the stack holds: listeners' backlogs, connections (closing ones
    /// until they are let go of), UDP sockets. For leak checks.
    pub fn open_sockets(&self) -> usize {
        self.sockets.iter().count()
    }

    /// The NIC (its own counters, its MTU).
    pub fn nic(&self) -> &N {
        self.dev.nic()
    }

    /// Ends the stack and gives back the NIC (open connections vanish without a RST).
    pub fn into_nic(self) -> N {
        self.dev.into_nic()
    }

    /// Runs the stack once: takes up to [`POLL_BUDGET`] received frames (answering ARP and
    /// ping, feeding the sockets), sends what the sockets have to send (up to
    /// [`StackConfig::tx_burst`] segments per connection), runs the TCP timers, and lets go of
    /// closed sockets whose time is up. Call it often while waiting for anything else.
    pub fn poll(&mut self) {
        let now = self.clock.now_us();
        let t = instant(now);
        for _ in 0..POLL_BUDGET {
            let r = self
                .iface
                .poll_ingress_single(t, &mut self.dev, &mut self.sockets);
            if r == smoltcp::iface::PollIngressSingleResult::None {
                break;
            }
        }
        for _ in 0..self.cfg.tx_burst.max(1) {
            let r = self.iface.poll_egress(t, &mut self.dev, &mut self.sockets);
            if r == smoltcp::iface::PollResult::None {
                break;
            }
        }
        self.reap(now);
    }

    /// Polls until `ready` gives an answer or the clock passes `deadline`
    /// ([`NetError::Timeout`] of `op`). Every blocking call of the stack waits through here.
    pub(crate) fn wait<T>(
        &mut self,
        deadline: u64,
        op: Op,
        mut ready: impl FnMut(&mut Self) -> Option<Result<T, NetError>>,
    ) -> Result<T, NetError> {
        loop {
            self.poll();
            if let Some(r) = ready(self) {
                return r;
            }
            if self.clock.now_us() >= deadline {
                return Err(NetError::Timeout(op));
            }
            self.clock.relax();
        }
    }

    /// Adds a static neighbour: [`Stack::resolve`] answers `ip` with `mac` at once, and ARP
    /// never replaces it. smoltcp's own cache learns it too, from an ARP reply the stack
    /// hands it as if received (once: smoltcp forgets it after its entry lifetime, a minute,
    /// and then asks by ARP).
    pub fn add_neighbour(&mut self, ip: Ipv4Addr, mac: [u8; 6]) {
        self.dev.neighbours.insert_static(ip, mac);
        let (own_mac, own) = (self.mac(), self.cfg.ip);
        self.dev.inject(arp::reply(mac, ip, own_mac, own));
    }

    /// The MAC of `ip` if the neighbour table holds it now (static or learned); never waits.
    pub fn neighbour(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        self.dev.neighbours.lookup(ip)
    }

    /// The MAC to send to for `ip` if known now, as [`Stack::resolve`] would answer it (the
    /// neighbour's own inside the subnet, the gateway's outside it, ours for our address);
    /// never waits, never asks (see [`Stack::solicit`]).
    pub fn next_hop_mac(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        let hop = self.next_hop(ip).ok()?;
        if hop == self.cfg.ip {
            return Some(self.mac());
        }
        self.dev.neighbours.lookup(hop)
    }

    /// The next hop toward `ip`: itself inside the subnet, else the gateway.
    pub(crate) fn next_hop(&self, ip: Ipv4Addr) -> Result<Ipv4Addr, NetError> {
        if self.cidr.contains_addr(&ip) {
            return Ok(ip);
        }
        self.cfg.gateway.ok_or(NetError::NoRoute { ip })
    }

    /// The MAC to send to for `ip`: the neighbour's own inside the subnet, the gateway's
    /// outside it. Known (static or learned) -> at once; else asks by ARP, again every
    /// [`ARP_RETRY_US`], until a reply or `deadline` ([`NetError::ArpTimeout`]). Our own
    /// address answers our own MAC.
    pub fn resolve(&mut self, ip: Ipv4Addr, deadline: u64) -> Result<[u8; 6], NetError> {
        let hop = self.next_hop(ip)?;
        let mut next_request = 0;
        loop {
            self.poll();
            if let Some(mac) = self.next_hop_mac(hop) {
                return Ok(mac);
            }
            let now = self.clock.now_us();
            if now >= deadline {
                return Err(NetError::ArpTimeout { ip: hop });
            }
            if now >= next_request {
                // A refused request (queue full) is counted in the stats; the next turn
                // asks again.
                self.send_arp_request(hop);
                next_request = now.saturating_add(ARP_RETRY_US);
            }
            self.clock.relax();
        }
    }

    /// Asks for the MAC of `ip` (of the gateway outside the subnet) with one ARP request and
    /// returns at once; the reply lands in the neighbour table ([`Stack::neighbour`]) during a
    /// later [`Stack::poll`]. For callers that wait in a loop of their own (rdma_cm's address
    /// resolution) and repeat the request themselves, every [`ARP_RETRY_US`]. A destination
    /// without a route, our own address and a neighbour already known send nothing.
    pub fn solicit(&mut self, ip: Ipv4Addr) {
        if let (Ok(hop), None) = (self.next_hop(ip), self.next_hop_mac(ip)) {
            self.send_arp_request(hop);
        }
    }

    /// One ARP request for `hop`, broadcast; a refused one (queue full) is counted in the
    /// stats.
    fn send_arp_request(&mut self, hop: Ipv4Addr) {
        let (mac, own) = (self.mac(), self.cfg.ip);
        let _ = self
            .dev
            .send_with(arp::request_len(), |buf| arp::request(buf, mac, own, hop));
    }

    /// Sends one ICMP echo request to `ip` and waits for its reply: the round trip in
    /// microseconds. [`NetError::ArpTimeout`] if the next hop never answered ARP,
    /// [`NetError::Timeout`] of [`Op::Ping`] if it did but no reply came.
    pub fn ping(&mut self, ip: Ipv4Addr, deadline: u64) -> Result<u64, NetError> {
        let hop = self.next_hop(ip)?;
        self.ping_seq = self.ping_seq.wrapping_add(1);
        // The identifier tells our replies from other pings': the stack's id, the sequence
        // number tells this ping from the earlier ones.
        let (ident, seq_no) = (self.id as u16, self.ping_seq);
        let mut sock = icmp::Socket::new(
            icmp::PacketBuffer::new(
                alloc::vec![icmp::PacketMetadata::EMPTY; 1],
                alloc::vec![0; 256],
            ),
            icmp::PacketBuffer::new(
                alloc::vec![icmp::PacketMetadata::EMPTY; 1],
                alloc::vec![0; 256],
            ),
        );
        // A fresh socket binds to any identifier.
        let _ = sock.bind(icmp::Endpoint::Ident(ident));
        let request = Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data: PING_PAYLOAD,
        };
        let caps = ChecksumCapabilities::default();
        // The buffer holds 256 bytes; the request is a few dozen: it fits.
        if let Ok(buf) = sock.send(request.buffer_len(), IpAddress::Ipv4(ip)) {
            request.emit(&mut Icmpv4Packet::new_unchecked(buf), &caps);
        }
        let h = self.sockets.add(sock);
        let start = self.clock.now_us();
        let r = self.wait(deadline, Op::Ping, |s| {
            let sock = s.sockets.get_mut::<icmp::Socket>(h);
            while let Ok((payload, from)) = sock.recv() {
                let Ok(pkt) = Icmpv4Packet::new_checked(payload) else {
                    continue;
                };
                if let Ok(Icmpv4Repr::EchoReply {
                    ident: i,
                    seq_no: n,
                    ..
                }) = Icmpv4Repr::parse(&pkt, &caps)
                {
                    if from == IpAddress::Ipv4(ip) && i == ident && n == seq_no {
                        return Some(Ok(s.clock.now_us().saturating_sub(start)));
                    }
                }
            }
            None
        });
        self.sockets.remove(h);
        match r {
            Err(NetError::Timeout(_)) if self.neighbour(hop).is_none() => {
                Err(NetError::ArpTimeout { ip: hop })
            }
            r => r,
        }
    }

    /// Takes a local port from the dynamic range that no socket of ours holds.
    pub(crate) fn ephemeral_port(&mut self) -> Result<u16, NetError> {
        for _ in EPHEMERAL_FIRST..=u16::MAX {
            let p = self.next_port;
            self.next_port = p.checked_add(1).unwrap_or(EPHEMERAL_FIRST);
            if !self.port_in_use(p, true) && !self.port_in_use(p, false) {
                return Ok(p);
            }
        }
        Err(NetError::NoFreePort)
    }

    /// Whether a socket of ours holds local `port`: TCP (listening or connected) if `tcp`,
    /// else UDP.
    pub(crate) fn port_in_use(&self, port: u16, tcp: bool) -> bool {
        self.sockets.iter().any(|(_, s)| match s {
            Socket::Tcp(t) if tcp => {
                (t.is_listening() && t.listen_endpoint().port == port)
                    || t.local_endpoint().is_some_and(|e| e.port == port)
            }
            Socket::Udp(u) if !tcp => u.is_open() && u.endpoint().port == port,
            _ => false,
        })
    }

    /// Checks that `handle_stack` is this stack's id.
    pub(crate) fn own(&self, handle_stack: u32) -> Result<(), NetError> {
        if handle_stack == self.id {
            Ok(())
        } else {
            Err(NetError::ForeignHandle)
        }
    }
}

/// A second draw from the seed, for the first ephemeral port.
fn config_seed(mac_bits: u64, now: u64) -> u64 {
    (mac_bits.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ now).rotate_right(17)
}

/// smoltcp's time from the clock's microseconds.
pub(crate) fn instant(us: u64) -> Instant {
    Instant::from_micros(us.min(i64::MAX as u64) as i64)
}

/// The configurations smoltcp would panic on or that cannot work.
fn check_config<N: Nic>(nic: &N, cfg: &StackConfig) -> Result<(), ConfigError> {
    let mac = nic.mac();
    if !EthernetAddress(mac).is_unicast() {
        return Err(ConfigError::Mac(mac));
    }
    // RFC 791: every host takes datagrams of 576 bytes; an Ethernet header on top.
    if nic.mtu() < 576 + 14 {
        return Err(ConfigError::Mtu(nic.mtu()));
    }
    for len in [cfg.tcp_rx_buffer, cfg.tcp_tx_buffer] {
        if len == 0 || len > TCP_MAX_WINDOW {
            return Err(ConfigError::TcpBuffer(len));
        }
    }
    if cfg.prefix_len > 32 {
        return Err(ConfigError::Prefix(cfg.prefix_len));
    }
    let unicast = |ip: Ipv4Addr| !(ip.is_broadcast() || ip.is_multicast() || ip.is_unspecified());
    if !unicast(cfg.ip) {
        return Err(ConfigError::Address(cfg.ip));
    }
    if let Some(gw) = cfg.gateway {
        let cidr = Ipv4Cidr::new(cfg.ip, cfg.prefix_len);
        if !unicast(gw) || !cidr.contains_addr(&gw) || gw == cfg.ip {
            return Err(ConfigError::Gateway(gw));
        }
    }
    Ok(())
}
