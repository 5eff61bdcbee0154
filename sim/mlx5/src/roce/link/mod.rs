//! The port's link: Ethernet frames between the model and a peer.
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
//! [`Port`] sits on top: receive checks as hardware does, counters, capture and faults.

pub mod fault;
mod port;

pub use fault::{FaultEvents, FaultInjector, FaultSpec, FaultSpecError};
pub use port::{check_rx, PcapTap, Port, PortConfig, RxDrop, RxPacket, RX_BUDGET};

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// Where a stream link listens or connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamAddr {
    /// A UNIX socket path.
    Unix(PathBuf),
    /// A TCP address.
    Tcp(SocketAddr),
}

impl StreamAddr {
    /// `unix:PATH`, `tcp:HOST:PORT` (an IP address, e.g. `tcp:127.0.0.1:4791`), or a bare path.
    pub fn parse(s: &str) -> Result<StreamAddr, LinkError> {
        if let Some(a) = s.strip_prefix("tcp:") {
            return a
                .parse()
                .map(StreamAddr::Tcp)
                .map_err(|_| LinkError::Io(io::ErrorKind::InvalidInput));
        }
        let p = s.strip_prefix("unix:").unwrap_or(s);
        if p.is_empty() {
            return Err(LinkError::Io(io::ErrorKind::InvalidInput));
        }
        Ok(StreamAddr::Unix(PathBuf::from(p)))
    }
}

impl fmt::Display for StreamAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            StreamAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

#[derive(Debug)]
enum Sock {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Sock {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.read(b),
            Sock::Tcp(s) => s.read(b),
        }
    }
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Unix(s) => s.write(b),
            Sock::Tcp(s) => s.write(b),
        }
    }
    fn set_nonblocking(&self, nb: bool) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_nonblocking(nb),
            Sock::Tcp(s) => s.set_nonblocking(nb),
        }
    }
    fn set_read_timeout(&self, d: Duration) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_read_timeout(Some(d)),
            Sock::Tcp(s) => s.set_read_timeout(Some(d)),
        }
    }
    fn set_write_timeout(&self, d: Duration) -> io::Result<()> {
        match self {
            Sock::Unix(s) => s.set_write_timeout(Some(d)),
            Sock::Tcp(s) => s.set_write_timeout(Some(d)),
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

fn would_block(k: io::ErrorKind) -> bool {
    matches!(k, io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Shortest blocking wait (a zero socket timeout means "forever" to the OS).
const MIN_WAIT: Duration = Duration::from_millis(1);
/// Longest single blocking read while a send backlog waits to drain.
const BACKLOG_SLICE: Duration = Duration::from_millis(2);
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A stream socket carrying length-prefixed frames.
#[derive(Debug)]
pub struct StreamLink {
    sock: Option<Sock>,
    rx: Vec<u8>,
    rx_start: usize,
    tx: Vec<u8>,
    tx_start: usize,
    max_frame: usize,
    max_backlog: usize,
}

impl StreamLink {
    fn from_sock(sock: Sock) -> Result<StreamLink, LinkError> {
        sock.set_nonblocking(true)
            .map_err(|e| LinkError::Io(e.kind()))?;
        if let Sock::Tcp(t) = &sock {
            t.set_nodelay(true).map_err(|e| LinkError::Io(e.kind()))?;
        }
        Ok(StreamLink {
            sock: Some(sock),
            rx: Vec::with_capacity(READ_CHUNK),
            rx_start: 0,
            tx: Vec::new(),
            tx_start: 0,
            max_frame: MAX_FRAME_LEN,
            max_backlog: MAX_SEND_BACKLOG,
        })
    }

    /// A link over a connected UNIX stream socket (e.g. one end of `UnixStream::pair`).
    pub fn from_unix(s: UnixStream) -> Result<StreamLink, LinkError> {
        StreamLink::from_sock(Sock::Unix(s))
    }

    /// A link over a connected TCP socket.
    pub fn from_tcp(s: TcpStream) -> Result<StreamLink, LinkError> {
        StreamLink::from_sock(Sock::Tcp(s))
    }

    /// Connects to `addr`, retrying until `deadline` while nobody listens (as QEMU's
    /// `reconnect-ms` does).
    pub fn connect(addr: &StreamAddr, deadline: Instant) -> Result<StreamLink, LinkError> {
        loop {
            let r = match addr {
                StreamAddr::Unix(p) => UnixStream::connect(p).map(Sock::Unix),
                StreamAddr::Tcp(a) => {
                    let left = deadline
                        .saturating_duration_since(Instant::now())
                        .max(MIN_WAIT);
                    TcpStream::connect_timeout(a, left).map(Sock::Tcp)
                }
            };
            match r {
                Ok(s) => return StreamLink::from_sock(s),
                Err(e) => {
                    let retry = matches!(
                        e.kind(),
                        io::ErrorKind::NotFound
                            | io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::WouldBlock
                    );
                    if !retry {
                        return Err(LinkError::Io(e.kind()));
                    }
                    if Instant::now() >= deadline {
                        return Err(LinkError::Timeout);
                    }
                    std::thread::sleep(MIN_WAIT * 2);
                }
            }
        }
    }

    /// Sets the largest frame accepted and sent (at most [`MAX_FRAME_LEN`]; model choice, so
    /// tests can exercise the check with small frames).
    pub fn set_max_frame(&mut self, n: usize) {
        self.max_frame = n.clamp(1, MAX_FRAME_LEN);
    }

    /// Sets the send backlog limit in bytes.
    pub fn set_max_backlog(&mut self, n: usize) {
        self.max_backlog = n;
    }

    /// Bytes waiting to be written.
    pub fn backlog(&self) -> usize {
        self.tx.len() - self.tx_start
    }

    fn is_up(&self) -> bool {
        self.sock.is_some()
    }

    fn down(&mut self) {
        if let Some(s) = self.sock.take() {
            s.shutdown();
        }
        self.rx.clear();
        self.rx_start = 0;
        self.tx.clear();
        self.tx_start = 0;
    }

    fn fail<T>(&mut self, e: LinkError) -> Result<T, LinkError> {
        self.down();
        Err(e)
    }

    /// One complete frame from the receive buffer, if there is one.
    fn parse(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        let avail = &self.rx[self.rx_start..];
        if avail.len() < LEN_PREFIX {
            return Ok(None);
        }
        let len = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]);
        if len == 0 {
            return self.fail(LinkError::ZeroLength);
        }
        if len as usize > self.max_frame {
            return self.fail(LinkError::Oversized {
                len,
                max: self.max_frame,
            });
        }
        let end = LEN_PREFIX + len as usize;
        if avail.len() < end {
            return Ok(None);
        }
        let frame = avail[LEN_PREFIX..end].to_vec();
        self.rx_start += end;
        if self.rx_start == self.rx.len() {
            self.rx.clear();
            self.rx_start = 0;
        } else if self.rx_start >= READ_CHUNK {
            self.rx.drain(..self.rx_start);
            self.rx_start = 0;
        }
        Ok(Some(frame))
    }

    /// Reads once: non-blocking (`wait` None) or blocking up to `wait`. Ok(false) when no
    /// bytes came.
    fn fill(&mut self, wait: Option<Duration>) -> Result<bool, LinkError> {
        let Some(sock) = self.sock.as_mut() else {
            return Err(LinkError::Down);
        };
        let old = self.rx.len();
        self.rx.resize(old + READ_CHUNK, 0);
        let r = match wait {
            None => sock.read(&mut self.rx[old..]),
            Some(d) => {
                let r = sock
                    .set_nonblocking(false)
                    .and_then(|_| sock.set_read_timeout(d.max(MIN_WAIT)))
                    .and_then(|_| sock.read(&mut self.rx[old..]));
                let back = sock.set_nonblocking(true);
                r.and_then(|n| back.map(|_| n))
            }
        };
        match r {
            Ok(0) => {
                self.rx.truncate(old);
                let have = old - self.rx_start;
                if have == 0 {
                    return self.fail(LinkError::Closed);
                }
                let need = if have < LEN_PREFIX {
                    LEN_PREFIX
                } else {
                    let a = &self.rx[self.rx_start..];
                    LEN_PREFIX + u32::from_be_bytes([a[0], a[1], a[2], a[3]]) as usize
                };
                self.fail(LinkError::Truncated { have, need })
            }
            Ok(n) => {
                self.rx.truncate(old + n);
                Ok(true)
            }
            Err(e) => {
                self.rx.truncate(old);
                if would_block(e.kind()) || e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    self.fail(LinkError::Io(e.kind()))
                }
            }
        }
    }

    /// Writes as much of the backlog as the socket takes: non-blocking (`until` None) or
    /// blocking until `until` at the latest.
    fn push(&mut self, until: Option<Instant>) -> Result<(), LinkError> {
        while self.tx_start < self.tx.len() {
            let wait = match until {
                None => None,
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        None
                    } else {
                        Some(left)
                    }
                }
            };
            let Some(sock) = self.sock.as_mut() else {
                return Err(LinkError::Down);
            };
            let r = match wait {
                None => sock.write(&self.tx[self.tx_start..]),
                Some(d) => {
                    let r = sock
                        .set_nonblocking(false)
                        .and_then(|_| sock.set_write_timeout(d.max(MIN_WAIT)))
                        .and_then(|_| sock.write(&self.tx[self.tx_start..]));
                    let back = sock.set_nonblocking(true);
                    r.and_then(|n| back.map(|_| n))
                }
            };
            match r {
                Ok(0) => return self.fail(LinkError::Io(io::ErrorKind::WriteZero)),
                Ok(n) => self.tx_start += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if would_block(e.kind()) => {
                    if wait.is_none() {
                        break;
                    }
                }
                Err(e) => return self.fail(LinkError::Io(e.kind())),
            }
        }
        if self.tx_start == self.tx.len() {
            self.tx.clear();
            self.tx_start = 0;
        } else if self.tx_start >= self.max_backlog / 2 {
            self.tx.drain(..self.tx_start);
            self.tx_start = 0;
        }
        Ok(())
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        if !self.is_up() {
            return Err(LinkError::Down);
        }
        if frame.is_empty() || frame.len() > self.max_frame {
            return Err(LinkError::BadFrameLength(frame.len()));
        }
        let need = LEN_PREFIX + frame.len();
        if self.backlog() + need > self.max_backlog {
            self.push(None)?;
            if self.backlog() + need > self.max_backlog {
                return Err(LinkError::Backlog);
            }
        }
        self.tx
            .extend_from_slice(&(frame.len() as u32).to_be_bytes());
        self.tx.extend_from_slice(frame);
        self.push(None)
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        if !self.is_up() {
            return Err(LinkError::Down);
        }
        if self.backlog() > 0 {
            self.push(None)?;
        }
        // Each pass either returns or reads at least one byte more; a frame is at most
        // max_frame + 4 bytes, so the loop ends within a few reads.
        loop {
            if let Some(f) = self.parse()? {
                return Ok(Some(f));
            }
            if !self.fill(None)? {
                return Ok(None);
            }
        }
    }

    fn recv_deadline(&mut self, deadline: Instant) -> Result<Option<Vec<u8>>, LinkError> {
        loop {
            if let Some(f) = self.recv()? {
                return Ok(Some(f));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let wait = if self.backlog() > 0 {
                left.min(BACKLOG_SLICE)
            } else {
                left
            };
            self.fill(Some(wait))?;
        }
    }

    fn flush(&mut self, deadline: Instant) -> Result<bool, LinkError> {
        if !self.is_up() {
            return Err(LinkError::Down);
        }
        self.push(Some(deadline))?;
        Ok(self.backlog() == 0)
    }
}

/// A listening stream socket; [`StreamListener::accept`] gives a [`StreamLink`] per peer
/// (QEMU's `server=on` takes one connection at a time; so does a port).
#[derive(Debug)]
pub struct StreamListener {
    inner: ListenSock,
}

#[derive(Debug)]
enum ListenSock {
    Unix(UnixListener, PathBuf),
    Tcp(TcpListener),
}

impl StreamListener {
    /// Listens on `addr`. A UNIX path left behind by a dead listener (connecting to it is
    /// refused) is replaced; a live one is an error (`AddrInUse`).
    pub fn bind(addr: &StreamAddr) -> Result<StreamListener, LinkError> {
        let io = |e: io::Error| LinkError::Io(e.kind());
        let inner = match addr {
            StreamAddr::Unix(p) => {
                let l = match UnixListener::bind(p) {
                    Ok(l) => l,
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                        if UnixStream::connect(p).is_ok() {
                            return Err(LinkError::Io(io::ErrorKind::AddrInUse));
                        }
                        std::fs::remove_file(p).map_err(io)?;
                        UnixListener::bind(p).map_err(io)?
                    }
                    Err(e) => return Err(io(e)),
                };
                l.set_nonblocking(true).map_err(io)?;
                ListenSock::Unix(l, p.clone())
            }
            StreamAddr::Tcp(a) => {
                let l = TcpListener::bind(a).map_err(io)?;
                l.set_nonblocking(true).map_err(io)?;
                ListenSock::Tcp(l)
            }
        };
        Ok(StreamListener { inner })
    }

    /// The address peers connect to (the bound port for `tcp:...:0`).
    pub fn local_addr(&self) -> Result<StreamAddr, LinkError> {
        match &self.inner {
            ListenSock::Unix(_, p) => Ok(StreamAddr::Unix(p.clone())),
            ListenSock::Tcp(l) => l
                .local_addr()
                .map(StreamAddr::Tcp)
                .map_err(|e| LinkError::Io(e.kind())),
        }
    }

    /// A connected peer, if one is waiting.
    pub fn try_accept(&self) -> Result<Option<StreamLink>, LinkError> {
        let r = match &self.inner {
            ListenSock::Unix(l, _) => l.accept().map(|(s, _)| Sock::Unix(s)),
            ListenSock::Tcp(l) => l.accept().map(|(s, _)| Sock::Tcp(s)),
        };
        match r {
            Ok(s) => StreamLink::from_sock(s).map(Some),
            Err(e) if would_block(e.kind()) || e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(LinkError::Io(e.kind())),
        }
    }

    /// Waits for a peer until `deadline` ([`LinkError::Timeout`] then).
    pub fn accept(&self, deadline: Instant) -> Result<StreamLink, LinkError> {
        loop {
            if let Some(l) = self.try_accept()? {
                return Ok(l);
            }
            if Instant::now() >= deadline {
                return Err(LinkError::Timeout);
            }
            std::thread::sleep(MIN_WAIT * 2);
        }
    }
}

impl Drop for StreamListener {
    fn drop(&mut self) {
        if let ListenSock::Unix(_, p) = &self.inner {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// One end of an in-process pair.
#[derive(Debug)]
pub struct ChanLink {
    tx: Option<mpsc::SyncSender<Vec<u8>>>,
    rx: mpsc::Receiver<Vec<u8>>,
}

impl ChanLink {
    fn send(&mut self, frame: Vec<u8>) -> Result<(), LinkError> {
        let Some(tx) = &self.tx else {
            return Err(LinkError::Down);
        };
        match tx.try_send(frame) {
            Ok(()) => Ok(()),
            Err(mpsc::TrySendError::Full(_)) => Err(LinkError::Backlog),
            Err(mpsc::TrySendError::Disconnected(_)) => {
                self.tx = None;
                Err(LinkError::Closed)
            }
        }
    }

    fn recv(&mut self, deadline: Option<Instant>) -> Result<Option<Vec<u8>>, LinkError> {
        if self.tx.is_none() {
            return Err(LinkError::Down);
        }
        let r = match deadline {
            None => self
                .rx
                .try_recv()
                .map_err(|e| e == mpsc::TryRecvError::Disconnected),
            Some(d) => self
                .rx
                .recv_timeout(d.saturating_duration_since(Instant::now()))
                .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected),
        };
        match r {
            Ok(f) => Ok(Some(f)),
            Err(false) => Ok(None),
            Err(true) => {
                self.tx = None;
                Err(LinkError::Closed)
            }
        }
    }
}

/// A link that receives what it sends.
#[derive(Debug, Default)]
pub struct LoopbackLink {
    q: VecDeque<Vec<u8>>,
    down: bool,
}

/// A listening stream link with QEMU `server=on` semantics: down until a peer connects, one
/// peer at a time, back to listening when that peer goes away (net/stream_data.c
/// `net_stream_data_send` re-arms the listener on end of connection and sets `link_down`).
/// Frames sent while no peer is connected are refused with [`LinkError::Down`].
#[derive(Debug)]
pub struct ServerLink {
    listener: StreamListener,
    conn: Option<StreamLink>,
    closed: bool,
    max_frame: usize,
    max_backlog: usize,
}

impl ServerLink {
    /// Listens on `addr` (no peer yet).
    pub fn bind(addr: &StreamAddr) -> Result<ServerLink, LinkError> {
        Ok(ServerLink {
            listener: StreamListener::bind(addr)?,
            conn: None,
            closed: false,
            max_frame: MAX_FRAME_LEN,
            max_backlog: MAX_SEND_BACKLOG,
        })
    }

    /// Where peers connect.
    pub fn local_addr(&self) -> Result<StreamAddr, LinkError> {
        self.listener.local_addr()
    }

    /// Whether a peer is connected now.
    pub fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Sets the largest frame for this and later connections ([`StreamLink::set_max_frame`]).
    pub fn set_max_frame(&mut self, n: usize) {
        self.max_frame = n.clamp(1, MAX_FRAME_LEN);
        if let Some(c) = &mut self.conn {
            c.set_max_frame(n);
        }
    }

    fn adopt(&mut self, mut c: StreamLink) {
        c.set_max_frame(self.max_frame);
        c.set_max_backlog(self.max_backlog);
        self.conn = Some(c);
    }

    /// Takes a waiting peer if there is none.
    fn poll_accept(&mut self) -> Result<(), LinkError> {
        if self.closed {
            return Err(LinkError::Down);
        }
        if self.conn.is_none() {
            if let Some(c) = self.listener.try_accept()? {
                self.adopt(c);
            }
        }
        Ok(())
    }

    /// Forgets the connection after a fatal error (the error still goes to the caller, once).
    fn check<T>(&mut self, r: Result<T, LinkError>) -> Result<T, LinkError> {
        if let Err(e) = &r {
            if e.is_fatal() {
                self.conn = None;
            }
        }
        r
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        self.poll_accept()?;
        let r = match &mut self.conn {
            Some(c) => c.send(frame),
            None => return Err(LinkError::Down),
        };
        self.check(r)
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        self.poll_accept()?;
        let r = match &mut self.conn {
            Some(c) => c.recv(),
            None => return Ok(None),
        };
        self.check(r)
    }

    fn recv_deadline(&mut self, deadline: Instant) -> Result<Option<Vec<u8>>, LinkError> {
        self.poll_accept()?;
        if self.conn.is_none() {
            match self.listener.accept(deadline) {
                Ok(c) => self.adopt(c),
                Err(LinkError::Timeout) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let r = match &mut self.conn {
            Some(c) => c.recv_deadline(deadline),
            None => return Ok(None),
        };
        self.check(r)
    }
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
    if et == super::ETHERTYPE_VLAN {
        (f.len() >= super::ETH_HDR_LEN + super::VLAN_TAG_LEN)
            .then_some(super::ETH_HDR_LEN + super::VLAN_TAG_LEN)
    } else {
        Some(super::ETH_HDR_LEN)
    }
}

/// Offset of the BTH when `f` is IPv4 or IPv6 + UDP to port 4791, by the headers alone (no
/// decode, no ICRC): for counters and the fault injector.
pub(crate) fn roce_bth_offset(f: &[u8]) -> Option<usize> {
    use super::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPV4_HDR_LEN, IPV6_HDR_LEN, IP_PROTO_UDP};
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
    (be16(udp + 2)? == super::ROCEV2_UDP_PORT).then_some(udp + super::UDP_HDR_LEN)
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
