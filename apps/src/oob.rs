//! The out-of-band channel of the Linux-peer apps (`pingpong`, `perftest`), and what they share.
//!
//! Linux's rdma-core tools swap their endpoints over TCP. The unikernel has no TCP: the
//! launcher (`cargo run -- --peer linux`, src/peer.rs) holds the TCP connection and is a dumb
//! pipe to the serial console. Bytes the app sends go out as one line `peer: tcp HEX` (the
//! launcher writes them to the socket in one `write`, as the tools' single `read`s expect);
//! bytes the launcher received come in as lines `tcp HEX`. The tools' exchange formats live in
//! the apps, not here and not in the launcher.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::time::Duration;

use kernel::time::Deadline;
use kernel::{console, println};

/// The serial prefix of bytes to send (the launcher's `RELAY_PREFIX` + `tcp `).
pub const SEND_PREFIX: &str = "peer: tcp ";
/// The serial prefix of received bytes.
pub const RECV_PREFIX: &str = "tcp ";

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

/// Why the out-of-band exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OobError {
    /// Nothing (or not enough) arrived before the deadline.
    Timeout { wanted: usize, got: usize },
    /// A `tcp` line that is not hex.
    Garbled,
    /// The launcher reported that the peer closed the connection.
    Closed { wanted: usize, got: usize },
}

/// How long the first bytes may take: as server, the unikernel waits for a Linux client that
/// boots under TCG after it, which on a loaded host takes minutes (the launcher's run timeout
/// still bounds the whole run).
pub const FIRST_WAIT: Duration = Duration::from_secs(600);

/// The TCP byte stream, through the serial console.
pub struct Oob {
    rx: Vec<u8>,
    wait: Duration,
    heard: bool,
}

impl Oob {
    /// `wait`: the deadline of each receive once the peer has been heard from; before that,
    /// at least [`FIRST_WAIT`].
    pub fn new(wait: Duration) -> Oob {
        Oob { rx: Vec::new(), wait, heard: false }
    }

    /// Sends `b` (one TCP write).
    pub fn send(&mut self, b: &[u8]) {
        println!("{SEND_PREFIX}{}", hex(b));
    }

    /// Receives exactly `n` bytes.
    pub fn recv(&mut self, n: usize) -> Result<Vec<u8>, OobError> {
        let deadline = Deadline::after(if self.heard { self.wait } else { self.wait.max(FIRST_WAIT) });
        let mut line = [0u8; 1024];
        while self.rx.len() < n {
            let Some(k) = console::read_line(&mut line, deadline) else {
                return Err(OobError::Timeout { wanted: n, got: self.rx.len() });
            };
            let l = core::str::from_utf8(&line[..k]).map_err(|_| OobError::Garbled)?.trim();
            if l == "tcp-closed" {
                return Err(OobError::Closed { wanted: n, got: self.rx.len() });
            }
            if let Some(h) = l.strip_prefix(RECV_PREFIX) {
                self.rx.extend(unhex(h.trim()).ok_or(OobError::Garbled)?);
                self.heard = true;
            }
        }
        Ok(self.rx.drain(..n).collect())
    }
}

/// The launcher's `role=server|client` word (the last one wins): `Some(true)` for client.
pub fn cmdline_role(cmdline: &str) -> Result<Option<bool>, String> {
    match cmdline.split_ascii_whitespace().filter_map(|w| w.strip_prefix("role=")).next_back() {
        Some("client") => Ok(Some(true)),
        Some("server") => Ok(Some(false)),
        Some(r) => Err(alloc::format!("role={r}: not server or client")),
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

/// `ip=A.B.C.D[/LEN]` of the cmdline.
pub fn cmdline_ipv4(cmdline: &str) -> Option<[u8; 4]> {
    let v = cmdline
        .split_ascii_whitespace()
        .filter_map(|w| w.strip_prefix("ip="))
        .next_back()?;
    let a: core::net::Ipv4Addr = v.split('/').next()?.parse().ok()?;
    Some(a.octets())
}

/// The IPv4-mapped GID `::ffff:A.B.C.D` of a node's address.
pub fn ipv4_gid(ip: [u8; 4]) -> [u8; 16] {
    mlx5::hca::ipv4_mapped_gid(ip)
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

/// The byte `i` of message `k` of a side's known pattern (`seed` tells the sides apart).
pub fn pattern(seed: u8, k: u64, i: usize) -> u8 {
    let x = (i as u64).wrapping_mul(31) ^ k.wrapping_mul(0x9e37_79b9) ^ (seed as u64) << 3;
    (x ^ (x >> 8) ^ (x >> 16)) as u8 | 1
}

/// Seconds since `t0`, as f64.
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
pub fn print_counters<H: mlx5::Hal>(app: &str, dev: &mlx5::Context<H>, set: Option<&mlx5::CounterSet<H>>) {
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
