//! The port's link: Ethernet frames between the model and a peer, and everything else of the
//! wire's I/O. The protocol itself (codec, ICRC, RC transport) is [`crate::roce`]; the HCA's
//! port on top of this is [`crate::wire`].
//!
//! - [`Link`]: the frames' transport (below); [`FramePort`] on it: receive checks, counters,
//!   capture and faults ([`fault`]).
//! - [`pcap`]: classic pcap reader ([`pcap::PcapFile`]) and writer ([`pcap::PcapWriter`]).
//! - [`dump`]: the `mlx5-sim --decode-pcap` listing.
//!
//! # Framing (QEMU `-netdev stream`)
//!
//! On a stream socket (UNIX or TCP) every frame is a 4-byte **big-endian** length `N`, then
//! `N` bytes of Ethernet frame: destination MAC first, no FCS, no virtio-net header. That is
//! exactly what QEMU's stream netdev sends and expects: qemu net/stream_data.c
//! `net_stream_data_receive` (formerly net/stream.c `net_stream_receive`) writes
//! `uint32_t len = htonl(size)` and the buffer as one iovec pair, and its read side
//! `net_stream_data_send` feeds the bytes to net/net.c `net_fill_rstate` (state 0: 4 length
//! bytes, `ntohl`; no vnet-header length since the stream backend passes `vnet_hdr=false`;
//! state 2: the data). So the model can be plugged into a QEMU guest's virtio-net
//! (`-netdev stream,id=n,server=off,addr.type=unix,addr.path=P` against a [`StreamListener`],
//! or `server=on` against [`StreamLink::connect`]), into another model, or into the linuxpeer
//! relay. QEMU disables Nagle on TCP (stream_data.c `qio_channel_set_delay(ioc, false)`);
//! so does [`StreamLink`].
//!
//! Where QEMU is lenient the link is strict (model choice): QEMU accepts a length up to
//! `NET_BUFSIZE` (4096 + 65536, include/net/net.h) and drops the connection above it; the
//! link drops it above [`MAX_FRAME_LEN`] (16 KiB: a 9000-byte jumbo MTU plus every header, and
//! four times a 4096-MTU RoCE frame's 4.2 KB). QEMU delivers a zero-length frame; the link
//! drops the connection on one (no Ethernet frame is empty). A peer that closes the socket in
//! the middle of a frame drops the connection too. Every such error is a typed [`LinkError`],
//! the link is down afterwards, nothing panics.
//!
//! # Never wedged
//!
//! Reads are non-blocking ([`Link::recv`]) or bounded by a deadline ([`Link::recv_deadline`]).
//! Writes never block: [`Link::send`] appends to a bounded send backlog and writes what the
//! socket takes; a frame that does not fit the backlog is refused with
//! [`LinkError::Backlog`] (the frame is lost, as on a full transmit queue; RC retransmits it).
//! The backlog drains on every later call, or with [`Link::flush`] up to a deadline. A dead or
//! slow peer therefore costs frames, never a stuck caller.
//!
//! # Kinds
//!
//! - [`Link::Stream`]: the socket above.
//! - [`Link::Chan`]: one end of an in-process pair ([`Link::pair`]), for two HCAs in one
//!   process: frames move as `Vec`s, no copy, bounded queue.
//! - [`Link::Loopback`]: what is sent is received by the same end.
//! - [`Link::Server`]: a listener with QEMU's `server=on` behaviour ([`ServerLink`]): down
//!   until a peer connects, listening again after it leaves.
//!
//! [`FramePort`] sits on top: receive checks as hardware does, counters, capture and faults.

mod chan;
pub mod dump;
pub mod fault;
pub mod pcap;
mod port;
mod server;
mod stream;

pub use chan::{ChanLink, LoopbackLink};
pub use fault::{FaultEvents, FaultInjector, FaultSpec, FaultSpecError};
pub(crate) use port::count_eth_class;
pub use port::{
    check_rx, classify, FramePort, PcapTap, PortConfig, Received, Rx, RxDrop, RxPacket, RX_BUDGET,
};
pub use server::ServerLink;
pub use stream::{StreamAddr, StreamLink, StreamListener};

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Instant;

/// Largest frame the link carries (either way): 16 KiB.
pub const MAX_FRAME_LEN: usize = 16 * 1024;
/// Bytes of send backlog a stream link keeps before refusing frames (4 MiB).
pub const MAX_SEND_BACKLOG: usize = 4 << 20;
/// Frames an in-process pair or a loopback link queues before refusing frames.
pub const MAX_QUEUED_FRAMES: usize = 8192;
/// The length prefix of the stream framing.
pub const LEN_PREFIX: usize = 4;

/// Why a link operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// The link is down (shut down, or dropped after an earlier error).
    Down,
    /// The peer closed the connection at a frame boundary (the link is down now).
    Closed,
    /// The peer sent a length of 0 (connection dropped).
    ZeroLength,
    /// The peer sent a length above the maximum (connection dropped).
    Oversized {
        /// The length received.
        len: u32,
        /// The link's maximum.
        max: usize,
    },
    /// The peer closed the connection inside a frame (connection dropped).
    Truncated {
        /// Bytes of the frame (length prefix included) received.
        have: usize,
        /// Bytes the frame needed (4 when even the length was cut).
        need: usize,
    },
    /// A socket error (connection dropped).
    Io(io::ErrorKind),
    /// The frame given to send is empty or longer than [`MAX_FRAME_LEN`]; nothing was sent,
    /// the link stays up.
    BadFrameLength(usize),
    /// The send backlog (or the in-process queue) is full: this frame was not sent, the link
    /// stays up.
    Backlog,
    /// No peer connected or accepted before the deadline.
    Timeout,
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LinkError::Down => f.write_str("link is down"),
            LinkError::Closed => f.write_str("peer closed the link"),
            LinkError::ZeroLength => f.write_str("peer sent a zero frame length"),
            LinkError::Oversized { len, max } => {
                write!(f, "peer sent frame length {len}, maximum {max}")
            }
            LinkError::Truncated { have, need } => {
                write!(f, "peer closed the link after {have} of {need} frame bytes")
            }
            LinkError::Io(k) => write!(f, "link socket error: {k}"),
            LinkError::BadFrameLength(n) => {
                write!(f, "frame of {n} bytes (want 1..={MAX_FRAME_LEN})")
            }
            LinkError::Backlog => f.write_str("send backlog full: frame not sent"),
            LinkError::Timeout => f.write_str("no peer before the deadline"),
        }
    }
}

impl std::error::Error for LinkError {}

impl LinkError {
    /// Whether the link is down after this error (as opposed to one refused frame).
    pub fn is_fatal(&self) -> bool {
        !matches!(
            self,
            LinkError::BadFrameLength(_) | LinkError::Backlog | LinkError::Timeout
        )
    }
}

/// What a thread that serves a link waits for before it looks at the link again
/// ([`Link::wait`]): a device thread waits on the descriptor, so that a frame is taken when it
/// arrives rather than at the next tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A frame (or a framing error) is ready now: look again at once.
    Ready,
    /// The link's socket: it becomes readable when bytes or a peer arrive, writable (when
    /// `write`) when the send backlog can drain.
    Fd {
        /// The socket (or, with no peer yet, the listener).
        fd: RawFd,
        /// A send backlog waits for room in the socket.
        write: bool,
    },
    /// No descriptor to wait on (an in-process link, or a link that is down): look again
    /// after a tick.
    Tick,
}

/// A port's link.
#[derive(Debug)]
pub enum Link {
    /// A stream socket with QEMU's framing.
    Stream(StreamLink),
    /// One end of an in-process pair.
    Chan(ChanLink),
    /// Loopback.
    Loopback(LoopbackLink),
    /// A listener and its current peer.
    Server(ServerLink),
}

impl Link {
    /// Two connected in-process ends.
    pub fn pair() -> (Link, Link) {
        let (ta, rb) = mpsc::sync_channel(MAX_QUEUED_FRAMES);
        let (tb, ra) = mpsc::sync_channel(MAX_QUEUED_FRAMES);
        (
            Link::Chan(ChanLink {
                tx: Some(ta),
                rx: ra,
            }),
            Link::Chan(ChanLink {
                tx: Some(tb),
                rx: rb,
            }),
        )
    }

    /// A loopback link.
    pub fn loopback() -> Link {
        Link::Loopback(LoopbackLink::default())
    }

    /// Two stream links joined by a UNIX socket pair (the real framing, in one process).
    pub fn socket_pair() -> Result<(Link, Link), LinkError> {
        let (a, b) = UnixStream::pair().map_err(|e| LinkError::Io(e.kind()))?;
        Ok((
            Link::Stream(StreamLink::from_unix(a)?),
            Link::Stream(StreamLink::from_unix(b)?),
        ))
    }

    /// Listens on `addr` as QEMU's `server=on` does: the link is down until a peer connects,
    /// and listens again when it leaves ([`ServerLink`]). Returns at once.
    pub fn serve(addr: &StreamAddr) -> Result<Link, LinkError> {
        ServerLink::bind(addr).map(Link::Server)
    }

    /// Listens on `addr` for one peer until `deadline`.
    pub fn listen(addr: &StreamAddr, deadline: Instant) -> Result<Link, LinkError> {
        let l = StreamListener::bind(addr)?;
        l.accept(deadline).map(Link::Stream)
    }

    /// Connects to `addr`, retrying until `deadline`.
    pub fn connect(addr: &StreamAddr, deadline: Instant) -> Result<Link, LinkError> {
        StreamLink::connect(addr, deadline).map(Link::Stream)
    }

    /// Sends one Ethernet frame (destination MAC first, no FCS). Never blocks.
    pub fn send(&mut self, frame: Vec<u8>) -> Result<(), LinkError> {
        if frame.is_empty() || frame.len() > MAX_FRAME_LEN {
            return Err(LinkError::BadFrameLength(frame.len()));
        }
        match self {
            Link::Stream(s) => s.send(&frame),
            Link::Server(s) => s.send(&frame),
            Link::Chan(c) => c.send(frame),
            Link::Loopback(l) => {
                if l.down {
                    Err(LinkError::Down)
                } else if l.q.len() >= MAX_QUEUED_FRAMES {
                    Err(LinkError::Backlog)
                } else {
                    l.q.push_back(frame);
                    Ok(())
                }
            }
        }
    }

    /// The next received frame, if one is complete now. Never blocks.
    pub fn recv(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        match self {
            Link::Stream(s) => s.recv(),
            Link::Server(s) => s.recv(),
            Link::Chan(c) => c.recv(None),
            Link::Loopback(l) => {
                if l.down {
                    Err(LinkError::Down)
                } else {
                    Ok(l.q.pop_front())
                }
            }
        }
    }

    /// The next received frame, waiting for one until `deadline`.
    pub fn recv_deadline(&mut self, deadline: Instant) -> Result<Option<Vec<u8>>, LinkError> {
        match self {
            Link::Stream(s) => s.recv_deadline(deadline),
            Link::Server(s) => s.recv_deadline(deadline),
            Link::Chan(c) => c.recv(Some(deadline)),
            Link::Loopback(_) => self.recv(),
        }
    }

    /// Writes the send backlog until it is empty (true) or `deadline` passes (false).
    pub fn flush(&mut self, deadline: Instant) -> Result<bool, LinkError> {
        match self {
            Link::Stream(s) => s.flush(deadline),
            Link::Server(s) => match &mut s.conn {
                Some(c) => {
                    let r = c.flush(deadline);
                    s.check(r)
                }
                None => Ok(true),
            },
            Link::Chan(_) | Link::Loopback(_) => Ok(true),
        }
    }

    /// What to wait for before the link has something new ([`Wait`]). The descriptor stays
    /// the link's while the link is not changed; a wait on it must be bounded (a tick), since
    /// the link may be replaced or shut down meanwhile.
    pub fn wait(&self) -> Wait {
        match self {
            Link::Stream(s) => s.wait(),
            Link::Server(s) => s.wait(),
            Link::Loopback(l) if !l.q.is_empty() => Wait::Ready,
            Link::Chan(_) | Link::Loopback(_) => Wait::Tick,
        }
    }

    /// Whether the link is up (a stream still connected, a pair end not shut down).
    pub fn is_up(&self) -> bool {
        match self {
            Link::Stream(s) => s.is_up(),
            Link::Server(s) => s.conn.is_some(),
            Link::Chan(c) => c.tx.is_some(),
            Link::Loopback(l) => !l.down,
        }
    }

    /// Takes the link down: the socket is shut down (the peer reads end of stream), a pair
    /// end stops sending (the peer reads [`LinkError::Closed`] once the queue is empty).
    pub fn shutdown(&mut self) {
        match self {
            Link::Stream(s) => s.down(),
            Link::Server(s) => {
                if let Some(mut c) = s.conn.take() {
                    c.down();
                }
                s.closed = true;
            }
            Link::Chan(c) => c.tx = None,
            Link::Loopback(l) => {
                l.down = true;
                l.q.clear();
            }
        }
    }

    /// The stream link, for its settings.
    pub fn as_stream_mut(&mut self) -> Option<&mut StreamLink> {
        match self {
            Link::Stream(s) => Some(s),
            Link::Server(s) => s.conn.as_mut(),
            _ => None,
        }
    }
}

/// Offset of the IP header (after the Ethernet header and an 802.1Q tag), `None` when the
/// frame is too short to have an EtherType.
pub(crate) fn l3_offset(f: &[u8]) -> Option<usize> {
    let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    if et == crate::roce::ETHERTYPE_VLAN {
        (f.len() >= crate::roce::ETH_HDR_LEN + crate::roce::VLAN_TAG_LEN)
            .then_some(crate::roce::ETH_HDR_LEN + crate::roce::VLAN_TAG_LEN)
    } else {
        Some(crate::roce::ETH_HDR_LEN)
    }
}

/// Offset of the BTH when `f` is IPv4 or IPv6 + UDP to port 4791, by the headers alone (no
/// decode, no ICRC): for counters and the fault injector.
pub(crate) fn roce_bth_offset(f: &[u8]) -> Option<usize> {
    use crate::roce::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPV4_HDR_LEN, IPV6_HDR_LEN, IP_PROTO_UDP};
    let be16 = |at: usize| Some(u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]));
    let l3 = l3_offset(f)?;
    let udp = match be16(l3 - 2)? {
        ETHERTYPE_IPV4 if *f.get(l3 + 9)? == IP_PROTO_UDP => {
            let hl = (*f.get(l3)? as usize & 0xf) * 4;
            (hl >= IPV4_HDR_LEN).then_some(l3 + hl)?
        }
        ETHERTYPE_IPV6 if *f.get(l3 + 6)? == IP_PROTO_UDP => l3 + IPV6_HDR_LEN,
        _ => return None,
    };
    (be16(udp + 2)? == crate::roce::ROCEV2_UDP_PORT).then_some(udp + crate::roce::UDP_HDR_LEN)
}

/// Splits a byte string in the stream framing into its frames (for tests and tools), or
/// gives the first framing error.
pub fn read_framed(bytes: &[u8], max: usize) -> Result<Vec<&[u8]>, LinkError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < LEN_PREFIX {
            return Err(LinkError::Truncated {
                have: rest.len(),
                need: LEN_PREFIX,
            });
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        if len == 0 {
            return Err(LinkError::ZeroLength);
        }
        if len as usize > max {
            return Err(LinkError::Oversized { len, max });
        }
        let end = LEN_PREFIX + len as usize;
        if rest.len() < end {
            return Err(LinkError::Truncated {
                have: rest.len(),
                need: end,
            });
        }
        out.push(&rest[LEN_PREFIX..end]);
        at += end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
