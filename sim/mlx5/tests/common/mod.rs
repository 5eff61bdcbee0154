//! The QEMU side of the multi-process proxy protocol, written from QEMU's structures
//! (include/hw/remote/mpqemu-link.h: MPQemuMsg header = { int cmd; size_t size } = 16 bytes,
//! PciConfDataMsg = { u32 addr; u32 val; int len }, BarAccessMsg = { hwaddr addr; u64 val;
//! unsigned size; bool memory } = 24 bytes, SyncSysmemMsg = { hwaddr gpas[8]; u64 sizes[8];
//! off_t offsets[8] }) independently of the server's code.
#![allow(dead_code)]

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SYNC_SYSMEM: i32 = 0;
pub const RET: i32 = 1;
pub const PCI_CFGWRITE: i32 = 2;
pub const PCI_CFGREAD: i32 = 3;
pub const BAR_WRITE: i32 = 4;
pub const BAR_READ: i32 = 5;
pub const SET_IRQFD: i32 = 6;
pub const DEVICE_RESET: i32 = 7;

/// Sends one message the way QEMU's mpqemu_msg_send does: header and payload in one sendmsg,
/// descriptors as SCM_RIGHTS on it.
pub fn send_msg(sock: &UnixStream, cmd: i32, payload: &[u8], fds: &[RawFd]) {
    let mut hdr = [0u8; 16];
    hdr[0..4].copy_from_slice(&cmd.to_le_bytes());
    hdr[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    send_raw(sock, &hdr, payload, fds);
}

/// Sends a header and payload as given (for malformed messages), with descriptors.
pub fn send_raw(sock: &UnixStream, hdr: &[u8], payload: &[u8], fds: &[RawFd]) {
    let mut iov = [
        libc::iovec {
            iov_base: hdr.as_ptr() as *mut _,
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: payload.as_ptr() as *mut _,
            iov_len: payload.len(),
        },
    ];
    let mut cbuf = [0u64; 16];
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: msghdr is plain data (all-zero valid); iov entries point at live slices that
    // sendmsg only reads; the control buffer is large enough for up to 8 descriptors
    // (CMSG_SPACE(32) = 48 <= 128) and is filled through the libc CMSG macros.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = if payload.is_empty() { 1 } else { 2 };
        if !fds.is_empty() {
            assert!(fds.len() <= 8);
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes as u32) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    assert_eq!(
        n as usize,
        hdr.len() + payload.len(),
        "sendmsg: {}",
        std::io::Error::last_os_error()
    );
}

/// Receives a RET the way mpqemu_msg_send_and_await_reply does; returns its u64.
pub fn recv_ret(sock: &UnixStream) -> u64 {
    let mut hdr = [0u8; 16];
    (&*sock).read_exact(&mut hdr).expect("RET header");
    let cmd = i32::from_le_bytes(hdr[0..4].try_into().unwrap());
    let size = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
    assert_eq!(cmd, RET, "reply is not RET");
    assert!(size <= 192);
    let mut data = [0u8; 8];
    (&*sock)
        .read_exact(&mut data[..size as usize])
        .expect("RET payload");
    u64::from_le_bytes(data)
}

fn conf(addr: u32, val: u32, len: i32) -> [u8; 12] {
    let mut p = [0u8; 12];
    p[0..4].copy_from_slice(&addr.to_le_bytes());
    p[4..8].copy_from_slice(&val.to_le_bytes());
    p[8..12].copy_from_slice(&len.to_le_bytes());
    p
}

pub fn cfg_read(sock: &UnixStream, addr: u32, len: i32) -> u32 {
    send_msg(sock, PCI_CFGREAD, &conf(addr, 0, len), &[]);
    recv_ret(sock) as u32
}

pub fn cfg_write(sock: &UnixStream, addr: u32, val: u32, len: i32) {
    send_msg(sock, PCI_CFGWRITE, &conf(addr, val, len), &[]);
    recv_ret(sock);
}

fn bar(addr: u64, val: u64, size: u32) -> [u8; 24] {
    let mut p = [0u8; 24];
    p[0..8].copy_from_slice(&addr.to_le_bytes());
    p[8..16].copy_from_slice(&val.to_le_bytes());
    p[16..20].copy_from_slice(&size.to_le_bytes());
    p[20] = 1; // memory
    p
}

pub fn bar_read(sock: &UnixStream, addr: u64, size: u32) -> u64 {
    send_msg(sock, BAR_READ, &bar(addr, 0, size), &[]);
    recv_ret(sock)
}

pub fn bar_write(sock: &UnixStream, addr: u64, val: u64, size: u32) {
    send_msg(sock, BAR_WRITE, &bar(addr, val, size), &[]);
    recv_ret(sock);
}

/// SYNC_SYSMEM with up to 8 (gpa, size, offset, fd) sections.
pub fn sync_sysmem(sock: &UnixStream, sections: &[(u64, u64, i64, RawFd)]) {
    let mut p = [0u8; 192];
    for (i, &(gpa, size, off, _)) in sections.iter().enumerate() {
        p[i * 8..i * 8 + 8].copy_from_slice(&gpa.to_le_bytes());
        p[64 + i * 8..64 + i * 8 + 8].copy_from_slice(&size.to_le_bytes());
        p[128 + i * 8..128 + i * 8 + 8].copy_from_slice(&off.to_le_bytes());
    }
    let fds: Vec<RawFd> = sections.iter().map(|s| s.3).collect();
    send_msg(sock, SYNC_SYSMEM, &p, &fds);
}

/// QEMU's probe_pci_info BAR loop: returns (index, size, memory) of every BAR it registers.
pub fn qemu_probe_bars(sock: &UnixStream) -> Vec<(u32, u32, bool)> {
    let mut out = Vec::new();
    for i in 0..7u32 {
        let off = 0x10 + 4 * i;
        let orig = cfg_read(sock, off, 4);
        cfg_write(sock, off, 0xffff_ffff, 4);
        let new = cfg_read(sock, off, 4);
        let size = (!(new & 0xffff_fff0)).wrapping_add(1);
        cfg_write(sock, off, orig, 4);
        if size != 0 {
            out.push((i, size, new & 1 == 0));
        }
    }
    out
}

pub fn memfd(name: &str, size: u64) -> File {
    let cname = std::ffi::CString::new(name).unwrap();
    // SAFETY: cname is a valid NUL-terminated string; the result is checked.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(size).unwrap();
    f
}

/// A non-blocking eventfd, as QEMU's event_notifier_init makes them.
pub fn eventfd() -> File {
    // SAFETY: plain syscall wrapper; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh descriptor nobody else owns.
    File::from(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads an eventfd's counter, 0 if not signalled.
pub fn eventfd_count(f: &File) -> u64 {
    let mut b = [0u8; 8];
    match (&*f).read(&mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => 0,
    }
}

/// Waits up to `ms` for an eventfd to be signalled; returns its counter.
pub fn eventfd_wait(f: &File, ms: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    loop {
        let n = eventfd_count(f);
        if n != 0 || std::time::Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// An `mlx5-sim` process (this package's binary), killed when dropped.
pub struct Sim(pub Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Sim {
    /// Starts `mlx5-sim` with `args`, stdin closed; `quiet` drops its stderr.
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(args: &[S], quiet: bool) -> Sim {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mlx5-sim"));
        cmd.args(args).stdin(Stdio::null());
        if quiet {
            cmd.stderr(Stdio::null());
        }
        Sim(cmd.spawn().expect("spawn mlx5-sim"))
    }

    /// Connects to the process's `--listen` socket `path`, waiting up to 20 s for it to
    /// appear; panics if the process exits first.
    pub fn connect(&mut self, path: &Path) -> UnixStream {
        self.try_connect(path)
            .unwrap_or_else(|| panic!("mlx5-sim exited before listening on {}", path.display()))
    }

    /// [`Sim::connect`], but `None` if the process exits before it listens.
    pub fn try_connect(&mut self, path: &Path) -> Option<UnixStream> {
        let t0 = Instant::now();
        loop {
            match UnixStream::connect(path) {
                Ok(s) => return Some(s),
                Err(e) => {
                    if self.0.try_wait().unwrap().is_some() {
                        return None;
                    }
                    assert!(
                        t0.elapsed() < Duration::from_secs(20),
                        "cannot connect to {}: {e}",
                        path.display()
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}
