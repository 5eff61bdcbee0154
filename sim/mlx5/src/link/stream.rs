//! The stream link: QEMU's `-netdev stream` framing over a UNIX or TCP socket, and its listener.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{LinkError, Wait, LEN_PREFIX, MAX_FRAME_LEN, MAX_SEND_BACKLOG};

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
    fn raw_fd(&self) -> RawFd {
        match self {
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tcp(s) => s.as_raw_fd(),
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

    pub(super) fn is_up(&self) -> bool {
        self.sock.is_some()
    }

    /// What the link's next event is ([`super::Link::wait`]): a whole frame already read
    /// ([`Wait::Ready`]), else the socket, readable, and writable while a send backlog waits;
    /// nothing once the link is down.
    pub(super) fn wait(&self) -> Wait {
        let Some(sock) = &self.sock else {
            return Wait::Tick;
        };
        let avail = &self.rx[self.rx_start..];
        if avail.len() >= LEN_PREFIX {
            let len = u32::from_be_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
            // A bad length is ready too: the next receive reports it.
            if len == 0 || len > self.max_frame || avail.len() >= LEN_PREFIX + len {
                return Wait::Ready;
            }
        }
        Wait::Fd {
            fd: sock.raw_fd(),
            write: self.backlog() > 0,
        }
    }

    pub(super) fn down(&mut self) {
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

    pub(super) fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
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

    pub(super) fn recv(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
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

    pub(super) fn recv_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, LinkError> {
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

    pub(super) fn flush(&mut self, deadline: Instant) -> Result<bool, LinkError> {
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

    /// The listening socket's descriptor (readable when a peer waits to be accepted).
    pub(super) fn raw_fd(&self) -> RawFd {
        match &self.inner {
            ListenSock::Unix(l, _) => l.as_raw_fd(),
            ListenSock::Tcp(l) => l.as_raw_fd(),
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
