//! The out-of-band channel of the apps that swap their RDMA endpoints (`pingpong`, `perftest`,
//! `rdma-peer`), and what they share.
//!
//! Linux's rdma-core tools swap their endpoints over TCP, and so does the unikernel now: a
//! [`Channel`](crate::oob::Channel) (`Oob` in the unikernel) is one TCP connection of the node's IP stack
//! ([`crate::stack::Node`]) on the HCA's Ethernet queue. As server this side listens on the tool's port and takes the first connection; as
//! client it connects to the server's address (`peer=`), again and again until the server
//! listens (Linux boots under TCG after the unikernel). The tools' exchange formats live in the
//! apps, not here.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::time::Duration;

pub use channel::Channel;
#[cfg(target_os = "none")]
use kernel::println;

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// Bytes of a hex string (None if it is not one).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// How long the connection may take to come: as server, the unikernel waits for a Linux
/// client that boots under TCG after it, and as client for a Linux server that does; on a
/// loaded host that takes minutes (the launcher's run timeout still bounds the whole run).
pub const FIRST_WAIT: Duration = Duration::from_secs(600);

/// Which end of the exchange this side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Listens on the port and takes the first connection.
    Server,
    /// Connects to `server` on the port.
    Client {
        /// The server's IPv4 address (`peer=`).
        server: [u8; 4],
    },
}

impl Side {
    /// The client connects to `peer`, which it needs; the server needs none.
    pub fn new(client: bool, peer: Option<[u8; 4]>) -> Result<Side, OobError> {
        match (client, peer) {
            (false, _) => Ok(Side::Server),
            (true, Some(server)) => Ok(Side::Client { server }),
            (true, None) => Err(OobError::NoPeer),
        }
    }
}

/// Why the out-of-band exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OobError {
    /// This side is the client and the cmdline names no server (`peer=`).
    NoPeer,
    /// No connection came (server) or could be made (client) before [`FIRST_WAIT`]; the last
    /// error of the stack.
    NoConnection(net::NetError),
    /// Sending or receiving failed: `wanted` bytes asked for (0 when sending), the stack's
    /// error (a timeout names the call, the peer's close or reset is its own error).
    Stream {
        /// The bytes asked for.
        wanted: usize,
        /// What the stack said.
        err: net::NetError,
    },
    /// A line longer than the most asked for.
    LineTooLong {
        /// The most asked for.
        max: usize,
    },
    /// The peer's GID is not IPv4-mapped and the cmdline names no `peer=` to resolve instead.
    NoPeerAddress,
    /// The peer's address did not answer ARP (or the stack failed otherwise).
    Resolve {
        /// The address asked for.
        ip: [u8; 4],
        /// What the stack said.
        err: net::NetError,
    },
}

impl core::fmt::Display for OobError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ip = |a: &[u8; 4]| core::net::Ipv4Addr::from(*a);
        match self {
            OobError::NoPeer => write!(f, "as client, need peer=A.B.C.D (the server's address)"),
            OobError::NoConnection(e) => write!(f, "no TCP connection: {e:?}"),
            OobError::Stream { wanted: 0, err } => write!(f, "TCP send: {err:?}"),
            OobError::Stream { wanted, err } => write!(f, "TCP receive of {wanted} B: {err:?}"),
            OobError::LineTooLong { max } => write!(f, "a line longer than {max} B"),
            OobError::NoPeerAddress => write!(
                f,
                "the peer's GID is not an IPv4 one and there is no peer=A.B.C.D to resolve"
            ),
            OobError::Resolve { ip: a, err } => write!(f, "resolving {}: {err:?}", ip(a)),
        }
    }
}

/// The launcher's `role=` word names neither side: its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleError<'a>(pub &'a str);

impl core::fmt::Display for RoleError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "role={}: not server or client", self.0)
    }
}

/// The launcher's `role=server|client` word (the last one wins): `Some(true)` for client.
pub fn cmdline_role(cmdline: &str) -> Result<Option<bool>, RoleError<'_>> {
    match cmdline
        .split_ascii_whitespace()
        .filter_map(|w| w.strip_prefix("role="))
        .next_back()
    {
        Some("client") => Ok(Some(true)),
        Some("server") => Ok(Some(false)),
        Some(r) => Err(RoleError(r)),
        None => Ok(None),
    }
}

/// The command line after the `key=value` words and the app's own name: the tool's argv.
pub fn tool_args<'a>(cmdline: &'a str, app: &str) -> Vec<&'a str> {
    cmdline
        .split_ascii_whitespace()
        .filter(|w| !w.contains('='))
        .skip_while(|w| *w == app)
        .collect()
}

/// The IPv4-mapped GID `::ffff:A.B.C.D` of a node's address.
pub fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    mlx5::hca::ipv4_mapped_gid(ip)
}

/// The tools' TCP port of the exchange, `-p` of both: rdma-core
/// libibverbs/examples/rc_pingpong.c `main` (`port = 18515`), perftest
/// src/perftest_parameters.h `DEF_PORT`. The server listens on it, the client connects to it
/// (rc_pingpong.c `pp_server_exch_dest` / `pp_client_exch_dest`, perftest
/// src/perftest_communication.c `ethernet_server_connect` / `ethernet_client_connect`).
pub const TOOL_PORT: u16 = 18515;

/// A TCP port number (1..=65535, decimal).
pub fn parse_port(s: &str) -> Option<u16> {
    s.parse().ok().filter(|&p| p != 0)
}

/// `n` as a decimal number, hex with `0x`, and with a `K`/`M` suffix.
pub fn parse_num(s: &str) -> Option<u64> {
    let (s, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1024),
        b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    let v = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        None => s.parse().ok()?,
    };
    v.checked_mul(mult)
}

/// The rdma-core MTU enum (`IBV_MTU_256` = 1 .. `IBV_MTU_4096` = 5) of a byte count.
pub fn mtu_enum(bytes: u64) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The driver's MTU of an rdma-core MTU enum ([`mtu_enum`]'s; 1024 for anything else).
pub fn mtu_of(e: u8) -> mlx5::Mtu {
    match e {
        1 => mlx5::Mtu::Mtu256,
        2 => mlx5::Mtu::Mtu512,
        4 => mlx5::Mtu::Mtu2048,
        5 => mlx5::Mtu::Mtu4096,
        _ => mlx5::Mtu::Mtu1024,
    }
}

/// The byte `i` of message `k` of a side's known pattern (`seed` tells the sides apart).
pub fn pattern(seed: u8, k: u64, i: usize) -> u8 {
    let x = (i as u64).wrapping_mul(31) ^ k.wrapping_mul(0x9e37_79b9) ^ (seed as u64) << 3;
    (x ^ (x >> 8) ^ (x >> 16)) as u8 | 1
}

/// Seconds since `t0`, as f64.
#[cfg(target_os = "none")]
pub fn secs(t0: kernel::time::Instant) -> f64 {
    t0.elapsed().as_secs_f64()
}

/// Gives the node its IPv4 identity: programs the IPv4-mapped RoCE v2 GID
/// ([`mlx5::Context::add_ipv4_gid`], SET_ROCE_ADDRESS) and returns its index (the
/// `sgid_index` to connect with).
pub fn ipv4_gid_index<H: mlx5::Hal>(dev: &mlx5::Context<H>, ip: [u8; 4]) -> mlx5::Result<u16> {
    dev.add_ipv4_gid(ip)
}

/// Fault finding when a run failed: the port's RoCE traffic (QUERY_VPORT_COUNTER) and the
/// transport counters of the QP's Q counter set (QUERY_Q_COUNTER), the counters Linux's
/// `rdma statistic` shows for rxe on the other side.
#[cfg(target_os = "none")]
pub fn print_counters<H: mlx5::Hal>(
    app: &str,
    dev: &mlx5::Context<H>,
    set: Option<&mlx5::CounterSet<H>>,
) {
    match dev.query_vport_counters(false) {
        Ok(v) => println!(
            "{app}: port counters: tx_roce_packets={} tx_roce_bytes={} rx_roce_packets={} rx_roce_bytes={}",
            v.transmitted_ib_unicast.packets,
            v.transmitted_ib_unicast.octets,
            v.received_ib_unicast.packets,
            v.received_ib_unicast.octets
        ),
        Err(e) => println!("{app}: port counters: QUERY_VPORT_COUNTER failed: {e:?}"),
    }
    match set.map(|s| s.query(false)) {
        Some(Ok(q)) => println!(
            "{app}: QP counters: out_of_sequence={} duplicate_request={} packet_seq_err={} local_ack_timeout_err={} rnr_nak_retry_err={} req_transport_retries_exceeded={} req_rnr_retries_exceeded={}",
            q.out_of_sequence,
            q.duplicate_request,
            q.packet_seq_err,
            q.local_ack_timeout_err,
            q.rnr_nak_retry_err,
            q.req_transport_retries_exceeded,
            q.req_rnr_retries_exceeded
        ),
        Some(Err(e)) => println!("{app}: QP counters: QUERY_Q_COUNTER failed: {e:?}"),
        None => println!("{app}: QP counters: none (no Q counter set could be allocated)"),
    }
}

/// The TCP connection of the exchange.
mod channel {
    use alloc::vec::Vec;
    use core::net::Ipv4Addr;
    use core::time::Duration;

    use mlx5::{CompletionQueue, Hal, WorkCompletion};
    use net::{Clock, NetError, Nic, TcpConn};

    use super::{OobError, Side, FIRST_WAIT};
    use crate::stack::{gid_ipv4, Node};

    /// How long one connection attempt of the client may take before it tries again.
    const CONNECT_TRY: Duration = Duration::from_secs(5);
    /// How long the client waits after a refused attempt (the server does not listen yet).
    const CONNECT_PAUSE: Duration = Duration::from_millis(500);
    /// How long dropping the channel waits for its FIN to be acknowledged.
    const CLOSE_WAIT: Duration = Duration::from_secs(5);

    /// The exchange's TCP connection, and the node under it, which it keeps polled.
    pub struct Channel<N: Nic, C: Clock> {
        node: Node<N, C>,
        conn: Option<TcpConn>,
        /// Received and not yet taken (what a line read took beyond its line).
        rx: Vec<u8>,
        wait: Duration,
    }

    impl<N: Nic, C: Clock> Channel<N, C> {
        /// Connects as `side` on `port`: the server listens and takes the first connection,
        /// the client connects to the server, again until it listens; both for up to
        /// [`FIRST_WAIT`]. `wait`: the deadline of each send and receive after it.
        pub fn open(
            mut node: Node<N, C>,
            side: Side,
            port: u16,
            wait: Duration,
        ) -> Result<Self, OobError> {
            let until = node.deadline(FIRST_WAIT);
            let conn = match side {
                Side::Server => {
                    let s = node.stack();
                    let mut l = s.tcp_listen(port).map_err(OobError::NoConnection)?;
                    log::info!("oob: listening on TCP port {port}");
                    let c = s.tcp_accept(&mut l, until);
                    // Only one connection is taken (the tools' `listen(sockfd, 1)`).
                    let _ = s.tcp_unlisten(l);
                    c.map_err(OobError::NoConnection)?
                }
                Side::Client { server } => connect(&mut node, server, port, until)?,
            };
            if let Ok((ip, p)) = node.stack().tcp_remote(&conn) {
                log::info!("oob: connected with {ip}:{p} (TCP)");
            }
            Ok(Channel {
                node,
                conn: Some(conn),
                rx: Vec::new(),
                wait,
            })
        }

        /// The node under the channel.
        pub fn node(&mut self) -> &mut Node<N, C> {
            &mut self.node
        }

        /// Runs the stack if it is due ([`Node::tick`]): for the loops that wait on the HCA.
        #[inline]
        pub fn tick(&mut self) {
            self.node.tick();
        }

        /// Sends `b` and waits until the peer has acknowledged it. The bytes leave in one
        /// segment when they fit one (the tools `read` each message in one call).
        pub fn send(&mut self, b: &[u8]) -> Result<(), OobError> {
            let deadline = self.node.deadline(self.wait);
            let err = |err| OobError::Stream { wanted: 0, err };
            let conn = self.conn.as_ref().ok_or(err(NetError::Closed))?;
            self.node
                .stack()
                .tcp_send_all(conn, b, deadline)
                .map_err(err)
        }

        /// Receives exactly `n` bytes, all within the channel's wait (one deadline for the
        /// whole call, however the peer splits them).
        pub fn recv(&mut self, n: usize) -> Result<Vec<u8>, OobError> {
            let deadline = self.node.deadline(self.wait);
            while self.rx.len() < n {
                self.fill(n, deadline)?;
            }
            Ok(self.rx.drain(..n).collect())
        }

        /// Receives one line, up to `\n` (not included), of at most `max` bytes, within the
        /// channel's wait (one deadline for the whole call, however the peer splits it).
        pub fn recv_line(&mut self, max: usize) -> Result<Vec<u8>, OobError> {
            let deadline = self.node.deadline(self.wait);
            loop {
                if let Some(i) = self.rx.iter().position(|&b| b == b'\n') {
                    if i > max {
                        return Err(OobError::LineTooLong { max });
                    }
                    let mut line: Vec<u8> = self.rx.drain(..=i).collect();
                    line.pop();
                    return Ok(line);
                }
                if self.rx.len() > max {
                    return Err(OobError::LineTooLong { max });
                }
                self.fill(max + 1, deadline)?;
            }
        }

        /// Receives what has come (at least a byte, by `deadline`) into `rx`; `wanted` names
        /// the read for the error.
        fn fill(&mut self, wanted: usize, deadline: u64) -> Result<(), OobError> {
            let err = |err| OobError::Stream { wanted, err };
            let conn = self.conn.as_ref().ok_or(err(NetError::Closed))?;
            let mut buf = [0u8; 1024];
            match self.node.stack().tcp_recv(conn, &mut buf, deadline) {
                // The peer closed its side before the bytes asked for came.
                Ok(0) => Err(err(NetError::Closed)),
                Ok(k) => {
                    self.rx.extend_from_slice(&buf[..k]);
                    Ok(())
                }
                Err(e) => Err(err(e)),
            }
        }

        /// The peer's MAC for a RoCE address vector: by ARP for the IPv4 address of its
        /// `gid` (IPv4-mapped, as RoCE v2 GIDs of IPv4 addresses are), else of `peer=`.
        pub fn peer_mac(&mut self, gid: &[u8; 16]) -> Result<[u8; 6], OobError> {
            let ip = gid_ipv4(gid)
                .or(self.node.args().peer)
                .ok_or(OobError::NoPeerAddress)?;
            let mac = self
                .node
                .resolve(ip, self.wait)
                .map_err(|err| OobError::Resolve { ip, err })?;
            log::info!(
                "oob: peer {} is at {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                Ipv4Addr::from(ip),
                mac[0],
                mac[1],
                mac[2],
                mac[3],
                mac[4],
                mac[5]
            );
            Ok(mac)
        }

        /// Polls `cq` until `n` completions came or `wait` passed, the stack kept polled
        /// meanwhile ([`crate::stack::poll_cq_with`] with [`Channel::tick`]).
        pub fn poll_cq<H: Hal>(
            &mut self,
            cq: &mut CompletionQueue<H>,
            n: usize,
            wait: Duration,
        ) -> Result<Vec<WorkCompletion>, mlx5::Error> {
            let deadline = self.node.deadline(wait);
            crate::stack::poll_cq_with(self, cq, n, deadline, |s| s.node.now_us(), |s| s.tick())
        }
    }

    impl<N: Nic, C: Clock> Drop for Channel<N, C> {
        /// Closes the connection: our FIN, acknowledged within five seconds or not.
        fn drop(&mut self) {
            if let Some(c) = self.conn.take() {
                let deadline = self.node.deadline(CLOSE_WAIT);
                let _ = self.node.stack().tcp_close(c, deadline);
            }
        }
    }

    /// The client's connection to `server:port`: attempts of [`CONNECT_TRY`] each, again
    /// after a refusal (nothing listens yet) or a timeout (the server's host is not up yet),
    /// until `until`.
    fn connect<N: Nic, C: Clock>(
        node: &mut Node<N, C>,
        server: [u8; 4],
        port: u16,
        until: u64,
    ) -> Result<TcpConn, OobError> {
        let ip = Ipv4Addr::from(server);
        let mut tries = 0u32;
        loop {
            let d = node.deadline(CONNECT_TRY).min(until);
            let e = match node.stack().tcp_connect(ip, port, d) {
                Ok(c) => return Ok(c),
                Err(
                    e @ (NetError::Refused | NetError::Timeout(_) | NetError::ArpTimeout { .. }),
                ) => e,
                Err(e) => return Err(OobError::NoConnection(e)),
            };
            let pause = node.deadline(CONNECT_PAUSE);
            if pause >= until {
                return Err(OobError::NoConnection(e));
            }
            tries += 1;
            if tries == 1 || tries.is_multiple_of(20) {
                log::info!("oob: {ip}:{port} not there yet ({e:?}); trying again");
            }
            while node.stack().now_us() < pause {
                node.poll();
                core::hint::spin_loop();
            }
        }
    }
}

/// The exchange of the unikernel's apps: on the HCA's Ethernet queue, the kernel's clock.
#[cfg(target_os = "none")]
pub type Oob = Channel<crate::stack::KernelNic, crate::stack::KernelClock>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_needs_the_servers_address() {
        assert_eq!(Side::new(false, None), Ok(Side::Server));
        assert_eq!(Side::new(false, Some([10, 0, 0, 1])), Ok(Side::Server));
        assert_eq!(
            Side::new(true, Some([10, 0, 0, 1])),
            Ok(Side::Client {
                server: [10, 0, 0, 1]
            })
        );
        assert_eq!(Side::new(true, None), Err(OobError::NoPeer));
    }

    /// The channel between two nodes on an in-memory link, each in its own thread.
    mod over_a_link {
        use std::time::Duration;

        use net::NetError;

        use super::super::*;
        use crate::testnet::{idle, nodes, MAC_A, MAC_B};

        const WAIT: Duration = Duration::from_secs(10);

        #[test]
        fn a_client_reaches_a_server_that_listens_late_and_both_ways_carry_bytes_and_lines() {
            let (mut a, b) = nodes("ip=10.0.0.1/24", "ip=10.0.0.2/24 peer=10.0.0.1");
            let link_local = {
                let mut g = [0u8; 16];
                g[..2].copy_from_slice(&[0xfe, 0x80]);
                g
            };
            let (server, client) = std::thread::scope(|sc| {
                let server = sc.spawn(move || {
                    // Up, but not listening yet: the client's first SYN is refused.
                    idle(&mut a, 300);
                    let mut ch = Channel::open(a, Side::Server, TOOL_PORT, WAIT).unwrap();
                    let m = ch.recv(52).unwrap();
                    ch.send(&[0x5a; 52]).unwrap();
                    let lines = [ch.recv_line(64).unwrap(), ch.recv_line(64).unwrap()];
                    // The client's GID names its address; a link-local GID names nobody
                    // and this side has no peer=.
                    let mac = ch.peer_mac(&mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]));
                    let none = ch.peer_mac(&link_local);
                    ch.send(b"bye\n").unwrap();
                    (m, lines, mac, none)
                });
                let client = sc.spawn(move || {
                    let side = Side::new(true, b.args().peer).unwrap();
                    let mut ch = Channel::open(b, side, TOOL_PORT, WAIT).unwrap();
                    ch.send(&[0xa5; 52]).unwrap();
                    let m = ch.recv(52).unwrap();
                    // Two lines, the second split over two sends.
                    ch.send(b"endpoint qpn=11\nready").unwrap();
                    ch.send(b" now\n").unwrap();
                    let by_gid = ch.peer_mac(&mlx5::hca::ipv4_mapped_gid([10, 0, 0, 1]));
                    // Not IPv4-mapped: peer= is resolved instead.
                    let by_peer = ch.peer_mac(&link_local);
                    let bye = ch.recv_line(64).unwrap();
                    (m, by_gid, by_peer, bye)
                });
                (server.join().unwrap(), client.join().unwrap())
            });
            assert_eq!(server.0, [0xa5; 52]);
            assert_eq!(server.1[0], b"endpoint qpn=11");
            assert_eq!(server.1[1], b"ready now");
            assert_eq!(server.2, Ok(MAC_B));
            assert_eq!(server.3, Err(OobError::NoPeerAddress));
            assert_eq!(client.0, [0x5a; 52]);
            assert_eq!(client.1, Ok(MAC_A));
            assert_eq!(client.2, Ok(MAC_A));
            assert_eq!(client.3, b"bye");
        }

        #[test]
        fn the_peers_close_ends_a_receive_and_a_long_line_is_refused() {
            let (a, b) = nodes("ip=10.0.0.1/24", "ip=10.0.0.2/24 peer=10.0.0.1");
            let (long, closed) = std::thread::scope(|sc| {
                let server = sc.spawn(move || {
                    let mut ch = Channel::open(a, Side::Server, 7000, WAIT).unwrap();
                    let long = ch.recv_line(8);
                    // What is left of the long line, then the peer's FIN.
                    let closed = ch.recv(100);
                    (long, closed)
                });
                let side = Side::Client {
                    server: [10, 0, 0, 1],
                };
                let mut ch = Channel::open(b, side, 7000, WAIT).unwrap();
                ch.send(b"a line longer than eight\n").unwrap();
                drop(ch);
                server.join().unwrap()
            });
            assert_eq!(long, Err(OobError::LineTooLong { max: 8 }));
            assert_eq!(
                closed,
                Err(OobError::Stream {
                    wanted: 100,
                    err: NetError::Closed
                })
            );
        }

        /// A peer that sends one byte at a time, each well within the wait, holds a `recv`
        /// or a `recv_line` no longer than the wait in all.
        #[test]
        fn a_trickling_peer_holds_a_receive_no_longer_than_the_wait() {
            use std::sync::atomic::{AtomicBool, Ordering};
            use std::time::Instant;

            use net::Op;

            // A byte every 300 ms: 16 of them take 4.8 s, over three times the wait.
            let short = Duration::from_millis(1500);
            let (a, b) = nodes("ip=10.0.0.1/24", "ip=10.0.0.2/24 peer=10.0.0.1");
            let done = AtomicBool::new(false);
            let (bytes, line) = std::thread::scope(|sc| {
                let server = sc.spawn(|| {
                    let mut ch = Channel::open(a, Side::Server, 7001, short).unwrap();
                    let t = Instant::now();
                    let bytes = (ch.recv(16), t.elapsed());
                    let t = Instant::now();
                    let line = (ch.recv_line(64), t.elapsed());
                    done.store(true, Ordering::Release);
                    (bytes, line)
                });
                let side = Side::Client {
                    server: [10, 0, 0, 1],
                };
                let mut ch = Channel::open(b, side, 7001, WAIT).unwrap();
                while !done.load(Ordering::Acquire) {
                    ch.send(b"x").unwrap();
                    idle(ch.node(), 300);
                }
                server.join().unwrap()
            });
            let timeout = |wanted| {
                Err(OobError::Stream {
                    wanted,
                    err: NetError::Timeout(Op::Recv),
                })
            };
            assert_eq!(bytes.0, timeout(16));
            assert_eq!(line.0, timeout(65));
            assert!(bytes.1 < short * 2, "recv took {:?}", bytes.1);
            assert!(line.1 < short * 2, "recv_line took {:?}", line.1);
        }
    }

    #[test]
    fn hex_goes_both_ways() {
        assert_eq!(hex(&[0, 0xab, 7]), "00ab07");
        assert_eq!(unhex("00ab07"), Some(alloc::vec![0, 0xab, 7]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }
}
