//! Server side of QEMU's multi-process PCI proxy protocol (`-device x-pci-proxy-dev,fd=N`).
//!
//! Wire format (QEMU include/hw/remote/mpqemu-link.h, hw/remote/mpqemu-link.c; host byte order,
//! which is little-endian on every machine QEMU runs this on here):
//! - a 16-byte header `{ i32 cmd; 4 bytes padding; u64 size }` (`MPQEMU_MSG_HDR_SIZE` =
//!   offsetof(MPQemuMsg, data)), then `size` payload bytes, at most the size of the data union
//!   (192: `SyncSysmemMsg`);
//! - file descriptors ride as `SCM_RIGHTS` on the sendmsg that carries the header, at most 8
//!   (`REMOTE_MAX_FDS`).
//!
//! | cmd | name          | payload                                            | fds | reply |
//! |-----|---------------|----------------------------------------------------|-----|-------|
//! | 0   | SYNC_SYSMEM   | u64 gpas\[8\]; u64 sizes\[8\]; i64 offsets\[8\]     | 1 per section | none |
//! | 1   | RET           | u64 (device -> QEMU)                                | 0   | -     |
//! | 2   | PCI_CFGWRITE  | u32 addr; u32 val; i32 len                          | 0   | RET   |
//! | 3   | PCI_CFGREAD   | u32 addr; u32 val; i32 len                          | 0   | RET value |
//! | 4   | BAR_WRITE     | u64 addr; u64 val; u32 size; u8 memory; 3 pad       | 0   | RET   |
//! | 5   | BAR_READ      | same                                                | 0   | RET value |
//! | 6   | SET_IRQFD     | none                                                | 2 (irq, resample) | none |
//! | 7   | DEVICE_RESET  | none                                                | 0   | RET   |
//!
//! BAR accesses carry the absolute bus address (QEMU sends `mr->addr + addr`); the function's
//! configuration space decodes it to (BAR, offset).

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::front::pci::{drain_eventfd, AddressSpace, Intx, PciFunction};
use crate::memory::{MappedMemory, MemSection};

/// Size of the message header.
pub const HEADER_SIZE: usize = 16;
/// Largest payload (sizeof the MPQemuMsg data union = sizeof(SyncSysmemMsg)).
pub const MAX_PAYLOAD: usize = 192;
/// Most descriptors one message carries (REMOTE_MAX_FDS).
pub const MAX_FDS: usize = 8;

pub const CMD_SYNC_SYSMEM: i32 = 0;
pub const CMD_RET: i32 = 1;
pub const CMD_PCI_CFGWRITE: i32 = 2;
pub const CMD_PCI_CFGREAD: i32 = 3;
pub const CMD_BAR_WRITE: i32 = 4;
pub const CMD_BAR_READ: i32 = 5;
pub const CMD_SET_IRQFD: i32 = 6;
pub const CMD_DEVICE_RESET: i32 = 7;

/// Payload sizes.
const PCI_CONF_DATA_SIZE: usize = 12;
const BAR_ACCESS_SIZE: usize = 24;
const SYNC_SYSMEM_SIZE: usize = 192;

/// Room for this many descriptors in the control buffer: more than MAX_FDS, so that an excess
/// is seen (and closed) rather than silently truncated.
const CMSG_FDS: usize = 2 * MAX_FDS;

fn cmd_name(cmd: i32) -> &'static str {
    match cmd {
        CMD_SYNC_SYSMEM => "SYNC_SYSMEM",
        CMD_RET => "RET",
        CMD_PCI_CFGWRITE => "PCI_CFGWRITE",
        CMD_PCI_CFGREAD => "PCI_CFGREAD",
        CMD_BAR_WRITE => "BAR_WRITE",
        CMD_BAR_READ => "BAR_READ",
        CMD_SET_IRQFD => "SET_IRQFD",
        CMD_DEVICE_RESET => "DEVICE_RESET",
        _ => "unknown",
    }
}

/// Why a connection ended other than by a clean EOF.
#[derive(Debug)]
pub enum ProxyError {
    /// The socket failed.
    Io(io::Error),
    /// The peer sent something that is not a valid message.
    Malformed(String),
    /// The guest memory the peer shared shrank under the device (its file was truncated after
    /// SYNC_SYSMEM): a DMA access faulted, was caught ([`crate::memory::sigbus`]) and failed.
    /// The device cannot trust that memory any more; the connection is dropped.
    GuestMemoryLost,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Io(e) => write!(f, "socket error: {e}"),
            ProxyError::Malformed(m) => write!(f, "malformed message: {m}"),
            ProxyError::GuestMemoryLost => f.write_str(
                "guest memory shrank under the device (DMA fault caught): device error, client dropped",
            ),
        }
    }
}

impl std::error::Error for ProxyError {}

impl From<io::Error> for ProxyError {
    fn from(e: io::Error) -> Self {
        ProxyError::Io(e)
    }
}

fn malformed(m: impl Into<String>) -> ProxyError {
    ProxyError::Malformed(m.into())
}

/// One received message.
struct Message {
    cmd: i32,
    payload: [u8; MAX_PAYLOAD],
    size: usize,
    fds: Vec<OwnedFd>,
}

impl Message {
    fn u32_at(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.payload[off..off + 4].try_into().unwrap_or_default())
    }
    fn u64_at(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.payload[off..off + 8].try_into().unwrap_or_default())
    }
}

// ---------------------------------------------------------------------------------------------
// Socket primitives
// ---------------------------------------------------------------------------------------------

/// Waits until `fds` (socket first) has something to read. Returns the revents of each.
fn poll_in(fds: &[RawFd]) -> io::Result<[bool; 2]> {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 2];
    for (i, &fd) in fds.iter().take(2).enumerate() {
        p[i] = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
    }
    let n = fds.len().min(2);
    loop {
        // SAFETY: p is a live array of n initialised pollfd structs; poll only writes revents.
        let r = unsafe { libc::poll(p.as_mut_ptr(), n as libc::nfds_t, -1) };
        if r >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // Hang-up and errors count as readable: the next read reports them.
    Ok([p[0].revents != 0, n > 1 && p[1].revents != 0])
}

/// Receives the 16-byte header and any descriptors sent with it. `Ok(None)` on EOF before the
/// first byte.
/// A header and the descriptors that came with it.
type Header = ([u8; HEADER_SIZE], Vec<OwnedFd>);

fn recv_header(sock: &UnixStream) -> Result<Option<Header>, ProxyError> {
    let mut hdr = [0u8; HEADER_SIZE];
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut got = 0usize;
    let mut truncated = false;
    while got < HEADER_SIZE {
        // 8-byte aligned control buffer with room for CMSG_FDS descriptors.
        let mut cbuf = [0u64; 2 + CMSG_FDS / 2 + 2];
        let mut iov = libc::iovec {
            iov_base: hdr[got..].as_mut_ptr().cast(),
            iov_len: HEADER_SIZE - got,
        };
        let n;
        let mut received: Vec<RawFd> = Vec::new();
        let flags;
        // SAFETY: msghdr is a plain C struct for which all-zero is valid; iov points into `hdr`
        // past the bytes already received and cbuf is a live, aligned buffer of the length given;
        // the kernel writes at most those lengths. Control messages are walked with the libc
        // CMSG macros within msg_controllen, and each SCM_RIGHTS payload is read unaligned.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
            n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            flags = msg.msg_flags;
            if n >= 0 {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                        let data = libc::CMSG_DATA(c);
                        let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                        let count = bytes / std::mem::size_of::<RawFd>();
                        for i in 0..count {
                            let p = data.add(i * std::mem::size_of::<RawFd>()) as *const RawFd;
                            received.push(std::ptr::read_unaligned(p));
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
        }
        for fd in received {
            // SAFETY: the kernel just installed this descriptor in our table for us (SCM_RIGHTS);
            // nothing else owns it.
            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    poll_in(&[sock.as_raw_fd()])?;
                    continue;
                }
                _ => return Err(e.into()),
            }
        }
        if flags & libc::MSG_CTRUNC != 0 {
            truncated = true;
        }
        if n == 0 {
            return if got == 0 && fds.is_empty() {
                Ok(None)
            } else {
                Err(malformed(format!("EOF after {got} header bytes")))
            };
        }
        got += n as usize;
    }
    if truncated {
        return Err(malformed(
            "descriptors truncated (more than the control buffer holds)",
        ));
    }
    Ok(Some((hdr, fds)))
}

/// Reads exactly `buf.len()` bytes.
fn recv_exact(sock: &UnixStream, buf: &mut [u8]) -> Result<(), ProxyError> {
    let mut got = 0;
    while got < buf.len() {
        match (&*sock).read(&mut buf[got..]) {
            Ok(0) => {
                return Err(malformed(format!(
                    "EOF after {got} of {} payload bytes",
                    buf.len()
                )))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                poll_in(&[sock.as_raw_fd()])?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Receives one message. `Ok(None)` on a clean EOF.
fn recv_message(sock: &UnixStream) -> Result<Option<Message>, ProxyError> {
    let Some((hdr, fds)) = recv_header(sock)? else {
        return Ok(None);
    };
    let cmd = i32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let size = u64::from_le_bytes(hdr[8..16].try_into().unwrap_or_default());
    if size > MAX_PAYLOAD as u64 {
        return Err(malformed(format!(
            "cmd {cmd}: payload size {size} > {MAX_PAYLOAD}"
        )));
    }
    if fds.len() > MAX_FDS {
        return Err(malformed(format!(
            "cmd {cmd}: {} descriptors > {MAX_FDS}",
            fds.len()
        )));
    }
    let size = size as usize;
    let mut msg = Message {
        cmd,
        payload: [0; MAX_PAYLOAD],
        size,
        fds,
    };
    recv_exact(sock, &mut msg.payload[..size])?;
    Ok(Some(msg))
}

/// Sends `RET` carrying `value`.
fn send_ret(sock: &UnixStream, value: u64) -> io::Result<()> {
    let mut buf = [0u8; HEADER_SIZE + 8];
    buf[0..4].copy_from_slice(&CMD_RET.to_le_bytes());
    buf[8..16].copy_from_slice(&8u64.to_le_bytes());
    buf[16..24].copy_from_slice(&value.to_le_bytes());
    let mut sent = 0;
    while sent < buf.len() {
        // SAFETY: the pointer and length describe the unsent tail of `buf`, a live local array.
        // MSG_NOSIGNAL: a vanished peer is an EPIPE error, not a SIGPIPE.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                buf[sent..].as_ptr().cast(),
                buf.len() - sent,
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    let mut p = libc::pollfd {
                        fd: sock.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    // SAFETY: one live pollfd; poll only writes its revents.
                    unsafe { libc::poll(&mut p, 1, -1) };
                    continue;
                }
                _ => return Err(e),
            }
        }
        sent += n as usize;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

/// Messages the server answered (the model's own figures: each BAR access is one exit of the
/// guest and one round trip on the socket).
#[derive(Debug, Default)]
pub struct ProxyCounts {
    /// BAR_WRITE messages (doorbells, command doorbells, initialization segment writes).
    pub bar_writes: AtomicU64,
    /// BAR_READ messages.
    pub bar_reads: AtomicU64,
    /// Of the writes: send doorbells and BlueFlame stores (a UAR page's 0x800..0x1000).
    pub send_doorbells: AtomicU64,
    /// Of the writes: CQ arm doorbells (a UAR page's `CQ_DOORBELL`).
    pub cq_doorbells: AtomicU64,
    /// Of the writes: EQ doorbells (`EQ_DOORBELL_ARM`, `EQ_DOORBELL_NO_ARM`).
    pub eq_doorbells: AtomicU64,
}

impl ProxyCounts {
    /// Counts a write at BAR0 offset `off` by the UAR register it lands on.
    fn uar_write(&self, off: u64) {
        use crate::objects::uar::{
            CQ_DOORBELL, EQ_DOORBELL_ARM, EQ_DOORBELL_NO_ARM, UAR_PAGE_SIZE,
        };
        if off < crate::front::device::UAR_BASE {
            return;
        }
        let reg = (off % UAR_PAGE_SIZE) as u32;
        let n = match reg {
            CQ_DOORBELL => &self.cq_doorbells,
            EQ_DOORBELL_ARM | EQ_DOORBELL_NO_ARM => &self.eq_doorbells,
            r if r >= 0x800 => &self.send_doorbells,
            _ => return,
        };
        n.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves one [`PciFunction`] to QEMU over the proxy protocol.
///
/// Owns the guest memory mapping ([`MappedMemory`], replaced on every SYNC_SYSMEM) and the INTx
/// line ([`Intx`], wired on SET_IRQFD), and hands both to the function at construction.
/// One connection at a time; when a connection ends the mappings and eventfds are dropped and the
/// function is reset, ready for the next QEMU.
pub struct ProxyServer<F: PciFunction> {
    function: F,
    memory: Arc<MappedMemory>,
    intx: Intx,
    /// The resample eventfd of the current SET_IRQFD, watched alongside the socket.
    resample: Option<File>,
    trace: bool,
    counts: Arc<ProxyCounts>,
}

impl<F: PciFunction> ProxyServer<F> {
    /// A server for `function`, with no memory mapped and no interrupt wired yet.
    pub fn new(mut function: F) -> Self {
        let memory = Arc::new(MappedMemory::new());
        let intx = Intx::new();
        function.set_guest_memory(memory.clone());
        function.set_intx(intx.clone());
        ProxyServer {
            function,
            memory,
            intx,
            resample: None,
            trace: false,
            counts: Arc::default(),
        }
    }

    /// The messages answered so far (readable from any thread).
    pub fn counts(&self) -> Arc<ProxyCounts> {
        self.counts.clone()
    }

    /// Logs every message to stderr when on.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// The guest memory as the function sees it (mapped from SYNC_SYSMEM). Usable from any
    /// thread, e.g. by a test checking DMA through the mapping.
    pub fn memory(&self) -> Arc<MappedMemory> {
        self.memory.clone()
    }

    /// The function's INTx line.
    pub fn intx(&self) -> Intx {
        self.intx.clone()
    }

    pub fn function(&self) -> &F {
        &self.function
    }

    pub fn function_mut(&mut self) -> &mut F {
        &mut self.function
    }

    /// Serves one connection until QEMU closes it (`Ok`) or the connection breaks or carries a
    /// malformed message (`Err`, after which the caller drops the socket). Either way the guest
    /// memory is unmapped, the eventfds closed and the function reset on return.
    pub fn serve(&mut self, sock: &UnixStream) -> Result<(), ProxyError> {
        let r = self.serve_loop(sock);
        self.memory.clear();
        self.intx.disconnect();
        self.resample = None;
        self.function.reset();
        r
    }

    fn serve_loop(&mut self, sock: &UnixStream) -> Result<(), ProxyError> {
        loop {
            if let Some(rs) = &self.resample {
                let [sock_ready, resample_ready] = poll_in(&[sock.as_raw_fd(), rs.as_raw_fd()])?;
                if resample_ready {
                    drain_eventfd(rs)?;
                    self.intx.resample();
                }
                if !sock_ready {
                    continue;
                }
            }
            let Some(msg) = recv_message(sock)? else {
                return Ok(());
            };
            self.handle(sock, msg)?;
            // A DMA access (by this message, or by the device thread since the last one) hit
            // a page the peer truncated away: a device error, and the end of this client.
            if self.memory.poisoned() {
                return Err(ProxyError::GuestMemoryLost);
            }
        }
    }

    fn trace(&self, args: fmt::Arguments<'_>) {
        if self.trace {
            eprintln!("mlx5-sim: {args}");
        }
    }

    fn expect(msg: &Message, size: usize, nfds: usize) -> Result<(), ProxyError> {
        if msg.size != size || msg.fds.len() != nfds {
            return Err(malformed(format!(
                "{} with {} payload bytes and {} descriptors (expected {size} and {nfds})",
                cmd_name(msg.cmd),
                msg.size,
                msg.fds.len()
            )));
        }
        Ok(())
    }

    fn handle(&mut self, sock: &UnixStream, mut msg: Message) -> Result<(), ProxyError> {
        match msg.cmd {
            CMD_SYNC_SYSMEM => {
                Self::expect(&msg, SYNC_SYSMEM_SIZE, msg.fds.len())?;
                let fds = std::mem::take(&mut msg.fds);
                let mut sections = Vec::with_capacity(fds.len());
                for (i, fd) in fds.into_iter().enumerate() {
                    let gpa = msg.u64_at(i * 8);
                    let size = msg.u64_at(64 + i * 8);
                    let offset = msg.u64_at(128 + i * 8); // off_t: negative shows as huge
                    self.trace(format_args!(
                        "<- SYNC_SYSMEM [{i}] gpa={gpa:#x} size={size:#x} offset={offset:#x}"
                    ));
                    sections.push(MemSection {
                        gpa,
                        size,
                        offset,
                        fd,
                    });
                }
                if sections.is_empty() {
                    self.trace(format_args!("<- SYNC_SYSMEM with no sections"));
                }
                if let Err(e) = self.memory.replace(sections) {
                    eprintln!("mlx5-sim: SYNC_SYSMEM: {e}; guest memory is now unmapped");
                }
            }
            CMD_RET => {
                eprintln!(
                    "mlx5-sim: unexpected RET from QEMU ({} bytes), ignored",
                    msg.size
                );
            }
            CMD_PCI_CFGWRITE | CMD_PCI_CFGREAD => {
                Self::expect(&msg, PCI_CONF_DATA_SIZE, 0)?;
                let addr = msg.u32_at(0);
                let val = msg.u32_at(4);
                let len = msg.u32_at(8); // int len; a negative one is out of range like any other
                if msg.cmd == CMD_PCI_CFGWRITE {
                    self.trace(format_args!(
                        "<- CFGWRITE off={addr:#x} len={len} val={val:#x}"
                    ));
                    self.function.config_write(addr, val, len);
                    send_ret(sock, 0)?;
                } else {
                    let v = self.function.config_read(addr, len);
                    self.trace(format_args!("<- CFGREAD off={addr:#x} len={len} -> {v:#x}"));
                    send_ret(sock, u64::from(v))?;
                }
            }
            CMD_BAR_WRITE | CMD_BAR_READ => {
                Self::expect(&msg, BAR_ACCESS_SIZE, 0)?;
                let addr = msg.u64_at(0);
                let val = msg.u64_at(8);
                let size = msg.u32_at(16);
                let space = if msg.payload[20] != 0 {
                    AddressSpace::Memory
                } else {
                    AddressSpace::Io
                };
                let write = msg.cmd == CMD_BAR_WRITE;
                let ret = self.bar_access(write, space, addr, val, size);
                send_ret(sock, ret)?;
            }
            CMD_SET_IRQFD => {
                Self::expect(&msg, 0, 2)?;
                let mut fds = std::mem::take(&mut msg.fds).into_iter();
                let (irq, resample) = match (fds.next(), fds.next()) {
                    (Some(a), Some(b)) => (File::from(a), File::from(b)),
                    _ => return Err(malformed("SET_IRQFD without two descriptors")),
                };
                self.trace(format_args!(
                    "<- SET_IRQFD irq fd {} resample fd {}",
                    irq.as_raw_fd(),
                    resample.as_raw_fd()
                ));
                // Both descriptors are the peer's: never let a read or write of them block
                // the server (the resample one is drained after poll, a race another reader
                // of it could win).
                crate::front::pci::set_nonblocking(&resample)
                    .map_err(|e| malformed(format!("SET_IRQFD resample descriptor: {e}")))?;
                self.intx.set_irqfd(Some(irq));
                self.resample = Some(resample);
            }
            CMD_DEVICE_RESET => {
                Self::expect(&msg, 0, 0)?;
                self.trace(format_args!("<- DEVICE_RESET"));
                self.function.reset();
                send_ret(sock, 0)?;
            }
            other => {
                // QEMU sends the fd-carrying messages (SYNC_SYSMEM, SET_IRQFD) without waiting,
                // and awaits a RET for every other one. Follow that rule for commands this
                // server does not know, so an unknown request cannot hang a vCPU.
                let reply = msg.fds.is_empty();
                eprintln!(
                    "mlx5-sim: unknown command {other} ({} payload bytes, {} descriptors): {}",
                    msg.size,
                    msg.fds.len(),
                    if reply { "replying RET 0" } else { "ignored" }
                );
                if reply {
                    send_ret(sock, 0)?;
                }
            }
        }
        Ok(())
    }

    fn bar_access(
        &mut self,
        write: bool,
        space: AddressSpace,
        addr: u64,
        val: u64,
        size: u32,
    ) -> u64 {
        let name = if write { "BAR_WRITE" } else { "BAR_READ" };
        let n = if write {
            &self.counts.bar_writes
        } else {
            &self.counts.bar_reads
        };
        n.fetch_add(1, Ordering::Relaxed);
        if !matches!(size, 1 | 2 | 4 | 8) {
            eprintln!("mlx5-sim: {name} addr={addr:#x} with size {size}: refused");
            return u64::MAX;
        }
        let Some((bar, off)) = self
            .function
            .decode_bar_address(space, addr, u64::from(size))
        else {
            eprintln!("mlx5-sim: {name} {space:?} addr={addr:#x} size={size}: no BAR decodes it");
            return u64::MAX;
        };
        let mask = if size == 8 {
            u64::MAX
        } else {
            (1u64 << (size * 8)) - 1
        };
        if write {
            self.trace(format_args!(
                "<- BAR_WRITE bar{bar}+{off:#x} size={size} val={:#x}",
                val & mask
            ));
            if bar == 0 {
                self.counts.uar_write(off);
            }
            self.function.bar_write(bar, off, val & mask, size);
            0
        } else {
            let v = self.function.bar_read(bar, off, size) & mask;
            self.trace(format_args!(
                "<- BAR_READ bar{bar}+{off:#x} size={size} -> {v:#x}"
            ));
            v
        }
    }
}
