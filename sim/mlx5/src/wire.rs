//! The port and the wire: how RC packets travel between QPs.
//!
//! The model does not build RoCE frames; a [`Packet`] carries what the RC transport needs
//! (destination and source GID and QPN, PSN, the IB operation, payload). One packet stands for
//! a whole message: `npkts` says how many MTU-sized packets (PSNs) it occupies on a real wire, so
//! PSN arithmetic matches the hardware's.
//!
//! A [`Port`] delivers a QP's packets:
//! - to its own inbox when the remote GID is one of the HCA's (loopback);
//! - otherwise over its link, if it has one: an in-process channel pair ([`Port::pair`], two
//!   HCAs in one process) or a UNIX stream socket to another process ([`Port::listen`],
//!   [`Port::connect`]); with no link the packet is lost, as on a cable to nowhere.
//!
//! A request's payload (and a READ response's) normally stays in the sender's guest memory as a
//! [`MemPayload`] — the bus pieces its keys resolved to — and the receiver moves it straight into
//! the destination with [`GuestMemory::copy`]: one copy instead of a gather into a buffer and a
//! scatter out of it. That needs both ends to share one guest memory, which loopback always does
//! and an in-process pair does when built with [`Port::pair_sharing_memory`]. Everything else
//! (a pair with separate memories, the socket) gets the bytes read into the packet as it leaves
//! the port.
//!
//! Socket framing (little-endian, version 1): `u32 length` of what follows, then a 120-byte
//! header — `u8 version, u8 op, u8 flags, u8 nak, u32 dst_qpn, u32 src_qpn, u32 psn,
//! u32 npkts, u32 imm, u32 rkey, u32 len, u64 raddr, u64 swap_add, u64 compare, u64 orig,
//! [u8; 16] dst_gid, [u8; 16] src_gid`, 24 reserved bytes — then the payload. Frames larger
//! than [`MAX_FRAME`] or with a bad version drop the connection.

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use crate::memory::{DmaError, GuestMemory};

/// NAK codes of an RC responder (IB AETH syndromes, as the rxe responder uses them: Linux
/// drivers/infiniband/sw/rxe/rxe_resp.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nak {
    /// PSN sequence error: the responder expected an earlier PSN (class B).
    PsnSequence,
    /// Receiver not ready: no receive WQE; retry after the timer (`min_rnr_nak` encoding).
    Rnr {
        /// The responder's `min_rnr_nak` (IB RNR timer encoding).
        timer: u8,
    },
    /// Invalid request (class C): unsupported or disabled operation, length, alignment.
    InvalidRequest,
    /// Remote access error (class C): rkey, bounds or permission.
    RemoteAccess,
    /// Remote operational error: the responder could not complete (e.g. bad receive WQE).
    RemoteOperational,
}

/// The IB operation a packet carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// SEND / SEND with immediate.
    Send {
        /// Immediate (as it travels: the WQE's big-endian bytes read as one u32).
        imm: Option<u32>,
        /// Solicited event requested.
        solicited: bool,
    },
    /// RDMA WRITE / WRITE with immediate.
    Write {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate.
        imm: Option<u32>,
        /// Solicited event requested.
        solicited: bool,
    },
    /// RDMA READ request.
    ReadRequest {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes to read.
        len: u32,
    },
    /// Atomic request (compare-and-swap or fetch-and-add) on 8 bytes.
    Atomic {
        /// Remote address (must be 8-byte aligned).
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Fetch-and-add (else compare-and-swap).
        fetch_add: bool,
        /// Swap value or addend.
        swap_add: u64,
        /// Compare value.
        compare: u64,
    },
    /// Acknowledges every request up to and including `psn`.
    Ack,
    /// Negative acknowledgement of the request at `psn`.
    Nak(Nak),
    /// RDMA READ response (payload) for the request at `psn`.
    ReadResponse,
    /// Atomic response for the request at `psn`: the original remote value.
    AtomicResponse {
        /// The 8 bytes that were at the remote address, as they were in memory.
        orig: [u8; 8],
    },
}

impl Op {
    /// Whether this is a request (travels requester → responder).
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Op::Send { .. } | Op::Write { .. } | Op::ReadRequest { .. } | Op::Atomic { .. }
        )
    }
}

/// A payload still in the sender's guest memory.
#[derive(Clone)]
pub struct MemPayload {
    /// The memory the pieces are in.
    pub mem: Arc<dyn GuestMemory>,
    /// Bus-contiguous `(address, length)` pieces, in payload order; checked to be guest memory
    /// when the packet was built.
    pub pieces: Vec<(u64, usize)>,
}

impl std::fmt::Debug for MemPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPayload")
            .field("pieces", &self.pieces)
            .finish_non_exhaustive()
    }
}

/// Which side of a payload move failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliverError {
    /// The payload's bytes could not be read (its memory went away after the sender checked
    /// it, or the packet is shorter than the move asked for): the packet is as good as
    /// corrupted in transit.
    Source(DmaError),
    /// The destination is not guest memory.
    Destination(DmaError),
}

/// Whether two handles are the same guest memory (data pointers only: the vtable half of a
/// `dyn` pointer is not unique).
pub fn same_memory(a: &Arc<dyn GuestMemory>, b: &Arc<dyn GuestMemory>) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const u8, Arc::as_ptr(b) as *const u8)
}

/// One message on the wire.
#[derive(Clone, Debug)]
pub struct Packet {
    /// Destination GID.
    pub dst_gid: [u8; 16],
    /// Source GID.
    pub src_gid: [u8; 16],
    /// Destination QPN.
    pub dst_qpn: u32,
    /// Source QPN.
    pub src_qpn: u32,
    /// PSN of the first packet of the message (requests) or the PSN answered (responses).
    pub psn: u32,
    /// PSNs the message occupies.
    pub npkts: u32,
    /// Operation.
    pub op: Op,
    /// Payload buffer; only the first `len` bytes are the payload (the buffer is recycled
    /// without being zeroed again).
    pub data: Vec<u8>,
    /// Payload length.
    pub len: usize,
    /// The payload, when it is still in the sender's guest memory (`data` is then unused).
    pub mem_payload: Option<MemPayload>,
}

impl Packet {
    /// A packet without payload.
    pub fn new(dst_qpn: u32, src_qpn: u32, psn: u32, op: Op) -> Packet {
        Packet {
            dst_gid: [0; 16],
            src_gid: [0; 16],
            dst_qpn,
            src_qpn,
            psn,
            npkts: 1,
            op,
            data: Vec::new(),
            len: 0,
            mem_payload: None,
        }
    }

    /// The payload bytes carried in `data` (empty while the payload is still in memory, see
    /// [`Packet::deliver`]).
    pub fn payload(&self) -> &[u8] {
        self.data.get(..self.len).unwrap_or(&[])
    }

    /// Moves payload bytes `[off, off + n)` to bus address `dst` of `mem`: one
    /// [`GuestMemory::copy`] per source piece when the payload lies in `mem`, else a write of
    /// the bytes (read from the sender's memory first if they are still there).
    pub fn deliver(
        &self,
        off: usize,
        mem: &Arc<dyn GuestMemory>,
        dst: u64,
        n: usize,
    ) -> Result<(), DeliverError> {
        let short = DeliverError::Source(DmaError { addr: 0, len: n });
        let end = off.checked_add(n).filter(|&e| e <= self.len).ok_or(short)?;
        let Some(mp) = &self.mem_payload else {
            let bytes = self.data.get(off..end).ok_or(short)?;
            return mem.write(dst, bytes).map_err(DeliverError::Destination);
        };
        let same = same_memory(&mp.mem, mem);
        let mut bounce = Vec::new();
        let mut at = 0usize; // payload offset of the current piece
        let mut moved = 0usize;
        for &(bus, len) in &mp.pieces {
            let (lo, hi) = (at.max(off), (at + len).min(end));
            at += len;
            if lo >= hi {
                if at >= end {
                    break;
                }
                continue;
            }
            let (src, k) = (bus + (lo - (at - len)) as u64, hi - lo);
            let to = dst + moved as u64;
            if same {
                mem.copy(src, to, k).map_err(|e| {
                    if e.addr == src {
                        DeliverError::Source(e)
                    } else {
                        DeliverError::Destination(e)
                    }
                })?;
            } else {
                bounce.resize(k, 0);
                mp.mem
                    .read(src, &mut bounce)
                    .map_err(DeliverError::Source)?;
                mem.write(to, &bounce).map_err(DeliverError::Destination)?;
            }
            moved += k;
        }
        if moved == n {
            Ok(())
        } else {
            Err(short) // the pieces hold fewer bytes than `len` says
        }
    }
}

/// Largest frame accepted from a socket: a 2 GiB message plus the header.
pub const MAX_FRAME: usize = (1 << 31) + HEADER_LEN;
/// Header bytes after the length word.
pub const HEADER_LEN: usize = 120;
const VERSION: u8 = 1;

/// Recycled payload buffers kept per port.
const POOL_MAX: usize = 8;

/// A socket link to another process.
struct SocketLink {
    listener: Option<UnixListener>,
    stream: Option<UnixStream>,
    /// Bytes received and not yet parsed.
    rbuf: Vec<u8>,
    /// Bytes queued for sending (`wbuf[wpos..]` still to go).
    wbuf: Vec<u8>,
    wpos: usize,
    path: PathBuf,
}

enum Link {
    Channel {
        tx: mpsc::Sender<Packet>,
        rx: mpsc::Receiver<Packet>,
        /// Both HCAs DMA into the same guest memory: payloads may stay in it.
        shared_memory: bool,
    },
    Socket(Box<SocketLink>),
}

/// The HCA's port: the inbox of packets to process and the link to the outside.
#[derive(Default)]
pub struct Port {
    /// Packets waiting to be processed by this HCA (loopback, and arrivals from the link).
    pub(crate) inbox: VecDeque<Packet>,
    /// QPs whose send queue should be looked at again (after a response freed it up).
    pub(crate) kicks: VecDeque<u32>,
    link: Option<Link>,
    pool: Vec<Vec<u8>>,
    /// Packets sent out of the link.
    pub sent: u64,
    /// Packets received from the link.
    pub received: u64,
    /// Packets lost: no link, peer gone, or a malformed frame.
    pub dropped: u64,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("inbox", &self.inbox.len())
            .field("linked", &self.link.is_some())
            .field("sent", &self.sent)
            .field("received", &self.received)
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl Port {
    /// Two ports joined by an in-process wire (two HCAs in one process).
    pub fn pair() -> (Port, Port) {
        Self::channel_pair(false)
    }

    /// [`Port::pair`] for two HCAs that DMA into the same guest memory (two NICs in one host
    /// joined by a cable): payloads cross as references to that memory and land with one copy.
    /// If the HCAs turn out not to share memory, the receiver still reads the bytes from the
    /// sender's memory, with two copies.
    pub fn pair_sharing_memory() -> (Port, Port) {
        Self::channel_pair(true)
    }

    fn channel_pair(shared_memory: bool) -> (Port, Port) {
        let (tx_a, rx_b) = mpsc::channel();
        let (tx_b, rx_a) = mpsc::channel();
        let port = |tx, rx| Port {
            link: Some(Link::Channel {
                tx,
                rx,
                shared_memory,
            }),
            ..Port::default()
        };
        (port(tx_a, rx_a), port(tx_b, rx_b))
    }

    /// A port that listens on a UNIX stream socket at `path` (replacing a stale socket file)
    /// and takes the first process that connects as its peer.
    pub fn listen(path: &Path) -> io::Result<Port> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if meta.file_type().is_socket() {
                std::fs::remove_file(path)?;
            }
        }
        let l = UnixListener::bind(path)?;
        l.set_nonblocking(true)?;
        Ok(Port {
            link: Some(Link::Socket(Box::new(SocketLink {
                listener: Some(l),
                stream: None,
                rbuf: Vec::new(),
                wbuf: Vec::new(),
                wpos: 0,
                path: path.to_owned(),
            }))),
            ..Port::default()
        })
    }

    /// A port connected to the process listening at `path`.
    pub fn connect(path: &Path) -> io::Result<Port> {
        let s = UnixStream::connect(path)?;
        Ok(Port {
            link: Some(Link::Socket(Box::new(SocketLink {
                listener: None,
                stream: Some(s),
                rbuf: Vec::new(),
                wbuf: Vec::new(),
                wpos: 0,
                path: path.to_owned(),
            }))),
            ..Port::default()
        })
    }

    /// Drops queued work (device reset); the link itself survives, as a cable does.
    pub fn reset_state(&mut self) {
        self.inbox.clear();
        self.kicks.clear();
    }

    /// Whether the port has a link (channel or socket) to another HCA.
    pub fn is_linked(&self) -> bool {
        self.link.is_some()
    }

    /// Whether a socket link has a connected peer (always true for a channel link).
    pub fn peer_connected(&self) -> bool {
        match &self.link {
            Some(Link::Channel { .. }) => true,
            Some(Link::Socket(s)) => s.stream.is_some(),
            None => false,
        }
    }

    /// A payload buffer of at least `len` initialized bytes (recycled when possible).
    pub(crate) fn take_buf(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        if v.len() < len {
            v.resize(len, 0);
        }
        v
    }

    /// Returns a payload buffer to the pool.
    pub(crate) fn give_buf(&mut self, v: Vec<u8>) {
        if self.pool.len() < POOL_MAX && v.capacity() > 0 {
            self.pool.push(v);
        }
    }

    /// Reads a payload still in memory into the packet's `data`. False if the memory went
    /// away since the sender checked it (the packet is then lost, like a corrupted one).
    fn materialize(&mut self, pkt: &mut Packet) -> bool {
        let Some(mp) = pkt.mem_payload.take() else {
            return true;
        };
        let mut buf = self.take_buf(pkt.len);
        let mut at = 0usize;
        for &(bus, n) in &mp.pieces {
            let Some(dst) = buf.get_mut(at..at + n) else {
                self.give_buf(buf);
                return false;
            };
            if mp.mem.read(bus, dst).is_err() {
                self.give_buf(buf);
                return false;
            }
            at += n;
        }
        pkt.data = buf;
        at == pkt.len
    }

    /// Sends a packet: into the inbox when `local`, else out of the link.
    pub(crate) fn send(&mut self, mut pkt: Packet, local: bool) {
        if local {
            self.inbox.push_back(pkt);
            return;
        }
        let keeps_memory = matches!(
            self.link,
            Some(Link::Channel {
                shared_memory: true,
                ..
            })
        );
        if self.link.is_some() && !keeps_memory && !self.materialize(&mut pkt) {
            self.dropped += 1;
            self.give_buf(pkt.data);
            return;
        }
        match &mut self.link {
            None => {
                self.dropped += 1;
                self.give_buf(pkt.data);
            }
            Some(Link::Channel { tx, .. }) => match tx.send(pkt) {
                Ok(()) => self.sent += 1,
                Err(e) => {
                    self.dropped += 1;
                    let pkt = e.0;
                    self.give_buf(pkt.data);
                }
            },
            Some(Link::Socket(s)) => {
                if s.stream.is_none() {
                    self.dropped += 1;
                    let data = pkt.data;
                    self.give_buf(data);
                    return;
                }
                encode(&pkt, &mut s.wbuf);
                self.sent += 1;
                let data = pkt.data;
                let ok = flush(s);
                if !ok {
                    self.dropped += 1;
                }
                self.give_buf(data);
            }
        }
    }

    /// Moves everything that arrived on the link into the inbox. Never blocks.
    pub(crate) fn receive(&mut self) {
        let mut arrived = 0u64;
        let mut bad = 0u64;
        match &mut self.link {
            None => {}
            Some(Link::Channel { rx, .. }) => {
                while let Ok(p) = rx.try_recv() {
                    self.inbox.push_back(p);
                    arrived += 1;
                }
            }
            Some(Link::Socket(s)) => {
                if s.stream.is_none() {
                    if let Some(l) = &s.listener {
                        if let Ok((st, _)) = l.accept() {
                            s.stream = Some(st);
                        }
                    }
                }
                flush(s);
                if let Some(st) = &s.stream {
                    let mut closed = false;
                    let mut chunk = [0u8; 64 * 1024];
                    loop {
                        match recv_nowait(st, &mut chunk) {
                            Ok(0) => {
                                closed = true;
                                break;
                            }
                            Ok(n) => s.rbuf.extend_from_slice(&chunk[..n]),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            Err(_) => {
                                closed = true;
                                break;
                            }
                        }
                    }
                    // Parse whole frames.
                    let mut at = 0usize;
                    loop {
                        match decode(&s.rbuf[at..]) {
                            Decoded::Frame(p, used) => {
                                self.inbox.push_back(p);
                                arrived += 1;
                                at += used;
                            }
                            Decoded::Incomplete => break,
                            Decoded::Bad => {
                                bad += 1;
                                closed = true;
                                at = s.rbuf.len();
                                break;
                            }
                        }
                    }
                    s.rbuf.drain(..at);
                    if closed {
                        s.stream = None;
                        s.rbuf.clear();
                        s.wbuf.clear();
                        s.wpos = 0;
                    }
                }
            }
        }
        self.received += arrived;
        self.dropped += bad;
    }
}

impl Drop for SocketLink {
    fn drop(&mut self) {
        if self.listener.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `recv(MSG_DONTWAIT)`: a non-blocking read without changing the descriptor's mode (which
/// the file description shares with any clone).
fn recv_nowait(s: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is a valid writable slice of buf.len() bytes for the duration of the call;
    // the descriptor is owned by `s` and open.
    let n = unsafe {
        libc::recv(
            s.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `send(MSG_DONTWAIT | MSG_NOSIGNAL)`.
fn send_nowait(s: &UnixStream, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is a valid readable slice for the duration of the call; the descriptor is
    // owned by `s` and open.
    let n = unsafe {
        libc::send(
            s.as_raw_fd(),
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Writes as much of the queued output as the socket takes. False if the peer is gone.
fn flush(s: &mut SocketLink) -> bool {
    let Some(st) = &s.stream else {
        s.wbuf.clear();
        s.wpos = 0;
        return false;
    };
    while s.wpos < s.wbuf.len() {
        match send_nowait(st, &s.wbuf[s.wpos..]) {
            Ok(n) => s.wpos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                s.stream = None;
                s.wbuf.clear();
                s.wpos = 0;
                return false;
            }
        }
    }
    s.wbuf.clear();
    s.wpos = 0;
    true
}

const OP_SEND: u8 = 1;
const OP_WRITE: u8 = 2;
const OP_READ_REQ: u8 = 3;
const OP_ATOMIC: u8 = 4;
const OP_ACK: u8 = 5;
const OP_NAK: u8 = 6;
const OP_READ_RESP: u8 = 7;
const OP_ATOMIC_RESP: u8 = 8;

const F_IMM: u8 = 1;
const F_SOLICITED: u8 = 2;
const F_FETCH_ADD: u8 = 4;

const NAK_SEQ: u8 = 1;
const NAK_RNR: u8 = 2;
const NAK_INV: u8 = 3;
const NAK_ACCESS: u8 = 4;
const NAK_OP: u8 = 5;

/// Appends the socket frame of `p` to `out` (format in the module documentation).
pub fn encode(p: &Packet, out: &mut Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    let (op, mut flags, mut nak);
    flags = 0u8;
    nak = 0u8;
    let (mut imm, mut rkey, mut len) = (0u32, 0u32, 0u32);
    let (mut raddr, mut swap_add, mut compare, mut orig) = (0u64, 0u64, 0u64, [0u8; 8]);
    let set_imm = |i: Option<u32>, flags: &mut u8, imm: &mut u32| {
        if let Some(v) = i {
            *flags |= F_IMM;
            *imm = v;
        }
    };
    match p.op {
        Op::Send { imm: i, solicited } => {
            op = OP_SEND;
            set_imm(i, &mut flags, &mut imm);
            if solicited {
                flags |= F_SOLICITED;
            }
        }
        Op::Write {
            raddr: a,
            rkey: k,
            imm: i,
            solicited,
        } => {
            op = OP_WRITE;
            raddr = a;
            rkey = k;
            set_imm(i, &mut flags, &mut imm);
            if solicited {
                flags |= F_SOLICITED;
            }
        }
        Op::ReadRequest {
            raddr: a,
            rkey: k,
            len: l,
        } => {
            op = OP_READ_REQ;
            raddr = a;
            rkey = k;
            len = l;
        }
        Op::Atomic {
            raddr: a,
            rkey: k,
            fetch_add,
            swap_add: s,
            compare: c,
        } => {
            op = OP_ATOMIC;
            raddr = a;
            rkey = k;
            swap_add = s;
            compare = c;
            if fetch_add {
                flags |= F_FETCH_ADD;
            }
        }
        Op::Ack => op = OP_ACK,
        Op::Nak(n) => {
            op = OP_NAK;
            match n {
                Nak::PsnSequence => nak = NAK_SEQ,
                Nak::Rnr { timer } => {
                    nak = NAK_RNR;
                    imm = timer as u32;
                }
                Nak::InvalidRequest => nak = NAK_INV,
                Nak::RemoteAccess => nak = NAK_ACCESS,
                Nak::RemoteOperational => nak = NAK_OP,
            }
        }
        Op::ReadResponse => op = OP_READ_RESP,
        Op::AtomicResponse { orig: o } => {
            op = OP_ATOMIC_RESP;
            orig = o;
        }
    }
    h[0] = VERSION;
    h[1] = op;
    h[2] = flags;
    h[3] = nak;
    let mut at = 4;
    for v in [p.dst_qpn, p.src_qpn, p.psn, p.npkts, imm, rkey, len] {
        h[at..at + 4].copy_from_slice(&v.to_le_bytes());
        at += 4;
    }
    for v in [raddr, swap_add, compare] {
        h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        at += 8;
    }
    h[at..at + 8].copy_from_slice(&orig);
    at += 8;
    h[at..at + 16].copy_from_slice(&p.dst_gid);
    at += 16;
    h[at..at + 16].copy_from_slice(&p.src_gid);
    let total = (HEADER_LEN + p.len) as u32;
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(p.payload());
}

/// Result of [`decode`].
#[derive(Debug)]
pub enum Decoded {
    /// A whole frame: the packet and the bytes it used.
    Frame(Packet, usize),
    /// More bytes needed.
    Incomplete,
    /// Not a valid frame (bad length, version, opcode or NAK code).
    Bad,
}

/// Parses one socket frame from the start of `b`.
pub fn decode(b: &[u8]) -> Decoded {
    if b.len() < 4 {
        return Decoded::Incomplete;
    }
    let total = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if !(HEADER_LEN..=MAX_FRAME).contains(&total) {
        return Decoded::Bad;
    }
    if b.len() < 4 + total {
        return Decoded::Incomplete;
    }
    let h = &b[4..4 + HEADER_LEN];
    if h[0] != VERSION {
        return Decoded::Bad;
    }
    let u32at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64at = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(x)
    };
    let (flags, nak) = (h[2], h[3]);
    let (dst_qpn, src_qpn, psn, npkts) = (u32at(4), u32at(8), u32at(12), u32at(16));
    let (imm, rkey, len) = (u32at(20), u32at(24), u32at(28));
    let (raddr, swap_add, compare) = (u64at(32), u64at(40), u64at(48));
    let mut orig = [0u8; 8];
    orig.copy_from_slice(&h[56..64]);
    let mut dst_gid = [0u8; 16];
    dst_gid.copy_from_slice(&h[64..80]);
    let mut src_gid = [0u8; 16];
    src_gid.copy_from_slice(&h[80..96]);
    let imm_opt = (flags & F_IMM != 0).then_some(imm);
    let solicited = flags & F_SOLICITED != 0;
    let op = match h[1] {
        OP_SEND => Op::Send {
            imm: imm_opt,
            solicited,
        },
        OP_WRITE => Op::Write {
            raddr,
            rkey,
            imm: imm_opt,
            solicited,
        },
        OP_READ_REQ => Op::ReadRequest { raddr, rkey, len },
        OP_ATOMIC => Op::Atomic {
            raddr,
            rkey,
            fetch_add: flags & F_FETCH_ADD != 0,
            swap_add,
            compare,
        },
        OP_ACK => Op::Ack,
        OP_NAK => Op::Nak(match nak {
            NAK_SEQ => Nak::PsnSequence,
            NAK_RNR => Nak::Rnr {
                timer: (imm & 0x1f) as u8,
            },
            NAK_INV => Nak::InvalidRequest,
            NAK_ACCESS => Nak::RemoteAccess,
            NAK_OP => Nak::RemoteOperational,
            _ => return Decoded::Bad,
        }),
        OP_READ_RESP => Op::ReadResponse,
        OP_ATOMIC_RESP => Op::AtomicResponse { orig },
        _ => return Decoded::Bad,
    };
    let payload = &b[4 + HEADER_LEN..4 + total];
    Decoded::Frame(
        Packet {
            dst_gid,
            src_gid,
            dst_qpn: dst_qpn & 0xff_ffff,
            src_qpn: src_qpn & 0xff_ffff,
            psn: psn & 0xff_ffff,
            npkts,
            op,
            data: payload.to_vec(),
            len: payload.len(),
            mem_payload: None,
        },
        4 + total,
    )
}

/// Handles the binary's wire options: `--wire-listen PATH` and `--wire-connect PATH`.
/// Returns `None` if `flag` is not a wire option, else the port or why it could not be made.
pub fn port_from_args(flag: &str, value: &str) -> Option<Result<Port, String>> {
    let path = Path::new(value);
    match flag {
        "--wire-listen" => {
            Some(Port::listen(path).map_err(|e| format!("--wire-listen {value}: {e}")))
        }
        "--wire-connect" => {
            Some(Port::connect(path).map_err(|e| format!("--wire-connect {value}: {e}")))
        }
        _ => None,
    }
}

/// Usage text for the wire options.
pub const WIRE_USAGE: &str = "  --wire-listen PATH   join another mlx5-sim: listen on a UNIX socket for it\n  --wire-connect PATH  join another mlx5-sim: connect to its --wire-listen socket\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(op: Op, payload: &[u8]) -> Packet {
        let mut p = Packet::new(0x123, 0x456, 0xabcdef, op);
        p.dst_gid = [1; 16];
        p.src_gid = [2; 16];
        p.npkts = 3;
        p.data = payload.to_vec();
        p.len = payload.len();
        p
    }

    #[test]
    fn frames_round_trip() {
        let ops = [
            Op::Send {
                imm: Some(0x11223344),
                solicited: true,
            },
            Op::Write {
                raddr: 0x1_0000_0010,
                rkey: 0x2201,
                imm: None,
                solicited: false,
            },
            Op::ReadRequest {
                raddr: 7,
                rkey: 8,
                len: 9,
            },
            Op::Atomic {
                raddr: 0x40,
                rkey: 3,
                fetch_add: true,
                swap_add: 5,
                compare: 6,
            },
            Op::Ack,
            Op::Nak(Nak::Rnr { timer: 12 }),
            Op::Nak(Nak::RemoteAccess),
            Op::ReadResponse,
            Op::AtomicResponse {
                orig: [1, 2, 3, 4, 5, 6, 7, 8],
            },
        ];
        let mut bytes = Vec::new();
        for op in ops {
            encode(&sample(op, b"payload!"), &mut bytes);
        }
        let mut at = 0;
        for op in ops {
            // Truncated frames are incomplete, not bad.
            assert!(matches!(decode(&bytes[at..at + 10]), Decoded::Incomplete));
            match decode(&bytes[at..]) {
                Decoded::Frame(p, used) => {
                    assert_eq!(p.op, op);
                    assert_eq!(p.payload(), b"payload!");
                    assert_eq!(
                        (p.dst_qpn, p.src_qpn, p.psn, p.npkts),
                        (0x123, 0x456, 0xabcdef, 3)
                    );
                    assert_eq!((p.dst_gid, p.src_gid), ([1; 16], [2; 16]));
                    at += used;
                }
                _ => panic!("frame expected"),
            }
        }
        assert_eq!(at, bytes.len());
        // A frame with a bad length or version is refused.
        assert!(matches!(decode(&[1, 0, 0, 0]), Decoded::Bad));
        let mut bad = bytes.clone();
        bad[4] = 9;
        assert!(matches!(decode(&bad), Decoded::Bad));
    }

    #[test]
    fn memory_payload_delivers_any_slice() {
        use crate::memory::RegionMemory;
        let src = Arc::new(RegionMemory::new());
        let other = Arc::new(RegionMemory::with_base(1 << 40));
        // A 3-piece payload: 5 bytes, 7 bytes, 4 bytes from three allocations.
        let bytes: Vec<u8> = (1..=16).collect();
        let mut pieces = Vec::new();
        let mut at = 0;
        for n in [5usize, 7, 4] {
            let a = src.alloc(n, 1).unwrap();
            src.write(a, &bytes[at..at + n]).unwrap();
            pieces.push((a, n));
            at += n;
        }
        let mut p = Packet::new(1, 2, 3, Op::ReadResponse);
        p.len = 16;
        let mem: Arc<dyn GuestMemory> = src.clone();
        p.mem_payload = Some(MemPayload { mem, pieces });
        // Into the payload's own memory (GuestMemory::copy) and into another one.
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
                }
            }
            // Past the payload, or into memory that is not there.
            assert!(matches!(
                p.deliver(10, &dst_mem, dst, 7),
                Err(DeliverError::Source(_))
            ));
            assert!(matches!(
                p.deliver(0, &dst_mem, 0x10, 4),
                Err(DeliverError::Destination(_))
            ));
        }
        // A payload in `data` delivers the same way.
        let q = sample(Op::Ack, &bytes);
        let dst_mem: Arc<dyn GuestMemory> = other.clone();
        let dst = other.alloc(16, 1).unwrap();
        q.deliver(3, &dst_mem, dst, 9).unwrap();
        let mut got = [0u8; 9];
        other.read(dst, &mut got).unwrap();
        assert_eq!(&got, &bytes[3..12]);
        // Materialised for the wire: the bytes are read into the packet.
        let mut port = Port::default();
        assert!(port.materialize(&mut p));
        assert!(p.mem_payload.is_none());
        assert_eq!(p.payload(), &bytes[..]);
    }

    #[test]
    fn channel_pair_delivers_in_order() {
        let (mut a, mut b) = Port::pair();
        for psn in 0..5 {
            a.send(sample(Op::Ack, &[]), false);
            let _ = psn;
        }
        b.receive();
        assert_eq!(b.inbox.len(), 5);
        assert_eq!(a.sent, 5);
        // Loopback goes to the own inbox.
        a.send(sample(Op::Ack, &[]), true);
        assert_eq!(a.inbox.len(), 1);
        // Unlinked ports drop.
        let mut c = Port::default();
        c.send(sample(Op::Ack, &[]), false);
        assert_eq!(c.dropped, 1);
    }

    #[test]
    fn socket_link_between_two_ports() {
        let dir = std::env::temp_dir().join(format!("mlx5-wire-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("w.sock");
        let mut a = Port::listen(&path).unwrap();
        let mut b = Port::connect(&path).unwrap();
        assert!(!a.peer_connected());
        a.receive(); // accepts
        assert!(a.peer_connected());
        let big = vec![0x5au8; 300_000];
        b.send(sample(Op::ReadResponse, &big), false);
        let mut got = None;
        for _ in 0..10_000 {
            b.receive(); // flushes b's queued output
            a.receive();
            if let Some(p) = a.inbox.pop_front() {
                got = Some(p);
                break;
            }
            std::thread::yield_now();
        }
        let p = got.expect("frame arrives");
        assert_eq!(p.payload().len(), big.len());
        assert!(p.payload().iter().all(|&x| x == 0x5a));
        drop(a);
        assert!(!path.exists());
    }
}
