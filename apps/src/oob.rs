//! The out-of-band channel of the Linux-peer apps (`pingpong`, `perftest`), and what they share.
//!
//! Linux's rdma-core tools swap their endpoints over TCP. The unikernel has no TCP: the
//! launcher (`cargo run -- --peer linux`, src/linux_guest/peer.rs) holds the TCP connection and is a dumb
//! pipe to the serial console. Bytes the app sends go out as one line `peer: tcp HEX` (the
//! launcher writes them to the socket in one `write`, as the tools' single `read`s expect);
//! bytes the launcher received come in as lines `tcp HEX`. The tools' exchange formats live in
//! the apps, not here and not in the launcher.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::time::Duration;

#[cfg(target_os = "none")]
use kernel::console::{self, ReadLineError};
#[cfg(target_os = "none")]
use kernel::println;
#[cfg(target_os = "none")]
use kernel::time::Deadline;

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

/// The launcher's line for the end of the TCP connection.
pub const CLOSED_LINE: &str = "tcp-closed";

/// Why the out-of-band exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OobError {
    /// Nothing (or not enough) arrived before the deadline; `partial` bytes of a line were
    /// still arriving (kept by the console for the next read).
    Timeout {
        wanted: usize,
        got: usize,
        partial: usize,
    },
    /// A `tcp` line that is not hex (or not UTF-8).
    Garbled,
    /// The launcher reported that the peer closed the connection.
    Closed { wanted: usize, got: usize },
    /// A line that is neither `tcp HEX` nor `tcp-closed`, the only lines the launcher sends
    /// while it relays (src/linux_guest/peer.rs). Its first bytes (`head`, `len` long in all): whatever it
    /// is, it is not the peer's bytes, and a `tcp` line it may have mangled would shift the
    /// rest of the exchange, so the exchange stops here rather than skip it.
    Unexpected { len: usize, head: [u8; 16] },
    /// A line longer than the longest `tcp` line this side reads ([`LINE_LEN`]).
    TooLong { len: usize },
}

/// The longest input line read (the launcher's `tcp` lines carry 200 bytes: 404 characters).
pub const LINE_LEN: usize = 1024;

/// The received side of the byte stream: what the `tcp` lines carried and not yet taken.
#[derive(Default)]
pub struct RxStream {
    rx: Vec<u8>,
    heard: bool,
}

impl RxStream {
    /// Takes one input line: the bytes of `tcp HEX`; the end of the stream for `tcp-closed`
    /// (`wanted`: for the error); anything else is [`OobError::Unexpected`].
    pub fn take_line(&mut self, line: &[u8], wanted: usize) -> Result<(), OobError> {
        let l = core::str::from_utf8(line)
            .map_err(|_| OobError::Garbled)?
            .trim();
        if l == CLOSED_LINE {
            return Err(OobError::Closed {
                wanted,
                got: self.rx.len(),
            });
        }
        match l.strip_prefix(RECV_PREFIX) {
            Some(h) => {
                self.rx.extend(unhex(h.trim()).ok_or(OobError::Garbled)?);
                self.heard = true;
                Ok(())
            }
            None => {
                let mut head = [0u8; 16];
                let k = line.len().min(16);
                head[..k].copy_from_slice(&line[..k]);
                Err(OobError::Unexpected {
                    len: line.len(),
                    head,
                })
            }
        }
    }

    /// Bytes received and not taken.
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// True once a `tcp` line has come.
    pub fn heard(&self) -> bool {
        self.heard
    }

    /// The first `n` bytes, if they have come.
    pub fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        (self.rx.len() >= n).then(|| self.rx.drain(..n).collect())
    }
}

/// How long the first bytes may take: as server, the unikernel waits for a Linux client that
/// boots under TCG after it, which on a loaded host takes minutes (the launcher's run timeout
/// still bounds the whole run).
pub const FIRST_WAIT: Duration = Duration::from_secs(600);

/// The TCP byte stream, through the serial console.
#[cfg(target_os = "none")]
pub struct Oob {
    rx: RxStream,
    wait: Duration,
}

#[cfg(target_os = "none")]
impl Oob {
    /// `wait`: the deadline of each receive once the peer has been heard from; before that,
    /// at least [`FIRST_WAIT`].
    pub fn new(wait: Duration) -> Oob {
        Oob {
            rx: RxStream::default(),
            wait,
        }
    }

    /// Sends `b` (one TCP write).
    pub fn send(&mut self, b: &[u8]) {
        println!("{SEND_PREFIX}{}", hex(b));
    }

    /// Receives exactly `n` bytes.
    pub fn recv(&mut self, n: usize) -> Result<Vec<u8>, OobError> {
        let deadline = Deadline::after(if self.rx.heard() {
            self.wait
        } else {
            self.wait.max(FIRST_WAIT)
        });
        let mut line = [0u8; LINE_LEN];
        loop {
            if let Some(b) = self.rx.take(n) {
                return Ok(b);
            }
            let k = match console::read_line(&mut line, deadline) {
                Ok(k) => k,
                Err(ReadLineError::Timeout { pending }) => {
                    return Err(OobError::Timeout {
                        wanted: n,
                        got: self.rx.len(),
                        partial: pending,
                    })
                }
                Err(ReadLineError::TooLong { len }) => return Err(OobError::TooLong { len }),
            };
            if let Err(e) = self.rx.take_line(&line[..k], n) {
                if matches!(e, OobError::Unexpected { .. }) {
                    log::error!(
                        "oob: unexpected input line ({k} bytes), not `tcp HEX`: {:?}",
                        core::str::from_utf8(&line[..k.min(80)])
                    );
                }
                return Err(e);
            }
        }
    }
}

/// The launcher's `role=server|client` word (the last one wins): `Some(true)` for client.
pub fn cmdline_role(cmdline: &str) -> Result<Option<bool>, String> {
    match cmdline
        .split_ascii_whitespace()
        .filter_map(|w| w.strip_prefix("role="))
        .next_back()
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_lines_carry_the_bytes_and_tcp_closed_ends_the_stream() {
        let mut s = RxStream::default();
        s.take_line(b"tcp 6869", 3).unwrap();
        s.take_line(b"tcp 21\r", 3).unwrap();
        assert_eq!(s.take(3).as_deref(), Some(&b"hi!"[..]));
        assert_eq!(
            s.take_line(b"tcp-closed", 5),
            Err(OobError::Closed { wanted: 5, got: 0 })
        );
        assert_eq!(s.take_line(b"tcp 6", 1), Err(OobError::Garbled));
    }

    /// The old `Oob::recv` skipped such a line and went on reading: a `tcp` line mangled on
    /// the serial line vanished from the stream without a word.
    #[test]
    fn a_line_that_is_not_tcp_is_a_typed_error() {
        let mut s = RxStream::default();
        s.take_line(b"tcp 00", 2).unwrap();
        let e = s.take_line(b"cp 0102", 2).unwrap_err();
        let mut head = [0u8; 16];
        head[..7].copy_from_slice(b"cp 0102");
        assert_eq!(e, OobError::Unexpected { len: 7, head });
        assert_eq!(s.len(), 1, "what came before stays");
    }
}
