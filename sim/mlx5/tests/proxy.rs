//! Round trips over QEMU's multi-process proxy protocol: the server runs on one end of a
//! socketpair in a thread; the test speaks the protocol on the other end exactly as QEMU does.

mod common;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;

use common::*;
use mlx5_sim::memory::GuestMemory;
use mlx5_sim::{Intx, MappedMemory, Mlx5Function, ProxyError, ProxyServer};

type Served = (ProxyServer<Mlx5Function>, Result<(), ProxyError>);

struct Harness {
    qemu: UnixStream,
    server: JoinHandle<Served>,
    mem: Arc<MappedMemory>,
    intx: Intx,
}

fn start() -> Harness {
    let (qemu, dev) = UnixStream::pair().unwrap();
    let mut server = ProxyServer::new(Mlx5Function::new());
    server.set_trace(std::env::var_os("MLX5_SIM_TRACE").is_some());
    // Test hooks: the guest memory and INTx line as the device model sees them.
    let mem = server.memory();
    let intx = server.intx();
    let server = std::thread::spawn(move || {
        let r = server.serve(&dev);
        (server, r)
    });
    Harness {
        qemu,
        server,
        mem,
        intx,
    }
}

/// A shared mapping of the test's own memfd (what QEMU's guest RAM is).
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(f: &std::fs::File, len: usize) -> Map {
        // SAFETY: a fresh shared mapping of a memfd of at least `len` bytes; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Map { ptr: p.cast(), len }
    }
    fn read(&self, off: usize, n: usize) -> Vec<u8> {
        assert!(off + n <= self.len);
        // SAFETY: in bounds of the live mapping (checked above).
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), n).to_vec() }
    }
    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds of the live mapping (checked above); `data` is a distinct buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping created in new, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

const MIB: u64 = 1 << 20;
const BAR0: u64 = 0xfe00_0000;

#[test]
fn qemu_round_trip() {
    let h = start();
    let q = &h.qemu;

    // --- Realize: SYNC_SYSMEM (memory listener), SET_IRQFD, then probe_pci_info. ---
    // Guest RAM: one 4 MiB memfd. Sections as QEMU's listener sends them: low RAM at gpa 0
    // (2 MiB from file offset 0) and, adjacent to it, the next 1 MiB; plus a section high up
    // mapping the last MiB of the file. The same memfd is sent once per section.
    let ram = memfd("guest-ram", 4 * MIB);
    let fd = ram.as_raw_fd();
    sync_sysmem(
        q,
        &[
            (0, 2 * MIB, 0, fd),
            (2 * MIB, MIB, 2 * MIB as i64, fd),
            (0x1_0000_0000, MIB, 3 * MIB as i64, fd),
        ],
    );
    let irq = eventfd();
    let resample = eventfd();
    send_msg(q, SET_IRQFD, &[], &[irq.as_raw_fd(), resample.as_raw_fd()]);

    assert_eq!(cfg_read(q, 0x00, 2), 0x15b3, "vendor");
    assert_eq!(cfg_read(q, 0x02, 2), 0x1017, "device");
    assert_eq!(cfg_read(q, 0x0a, 2), 0x0207, "class: network / InfiniBand");
    assert_eq!(cfg_read(q, 0x2e, 2), 0x0008, "subsystem");
    assert_eq!(cfg_read(q, 0x08, 4), 0x0207_0000, "class code and revision");
    // BAR sizing as QEMU does it: only BAR0, 32 MiB memory.
    assert_eq!(qemu_probe_bars(q), vec![(0, 32 << 20, true)]);

    // --- The device sees guest RAM through MappedMemory (the SYNC_SYSMEM was processed before
    // the config reads that were answered). ---
    assert_eq!(
        h.mem.sections(),
        vec![(0, 2 * MIB), (2 * MIB, MIB), (0x1_0000_0000, MIB)]
    );
    let map = Map::new(&ram, (4 * MIB) as usize);
    map.write(0x1000, b"guest wrote this");
    let mut buf = [0u8; 16];
    h.mem.read(0x1000, &mut buf).unwrap();
    assert_eq!(&buf, b"guest wrote this");
    h.mem.write(0x2000, b"device DMA").unwrap();
    assert_eq!(map.read(0x2000, 10), b"device DMA");
    // Across the boundary of the two adjacent sections.
    h.mem
        .write_u64_be(2 * MIB - 4, 0x0102_0304_0506_0708)
        .unwrap();
    assert_eq!(
        map.read((2 * MIB - 4) as usize, 8),
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
    // The high section maps file offset 3 MiB.
    map.write((3 * MIB + 8) as usize, &[0xaa, 0xbb]);
    let mut two = [0u8; 2];
    h.mem.read(0x1_0000_0008, &mut two).unwrap();
    assert_eq!(two, [0xaa, 0xbb]);
    // Outside guest RAM: a typed error, no crash.
    assert!(h.mem.read(3 * MIB - 1, &mut two).is_err());
    assert!(h.mem.read(0x1_0000_0000 + MIB - 1, &mut two).is_err());

    // --- Firmware programs BAR0 and enables memory decoding and bus mastering. ---
    cfg_write(q, 0x10, BAR0 as u32, 4);
    cfg_write(q, 0x04, 0x0006, 2);
    assert_eq!(cfg_read(q, 0x10, 4), BAR0 as u32);

    // --- Init segment through BAR_READ at absolute addresses (values as the CPU loads them;
    // the registers are big-endian). ---
    let fw_rev = u32::from_be(bar_read(q, BAR0, 4) as u32);
    assert_eq!(fw_rev & 0xffff, 16, "fw major");
    assert_eq!(fw_rev >> 16, 35, "fw minor");
    let cmdif = u32::from_be(bar_read(q, BAR0 + 4, 4) as u32);
    assert_eq!(cmdif >> 16, 5, "cmdif revision");
    let l_sz = u32::from_be(bar_read(q, BAR0 + 0x14, 4) as u32);
    assert_eq!((l_sz >> 4) & 0xf, 5, "log_cmdq_size");
    assert_eq!(l_sz & 0xf, 6, "log_cmdq_stride");
    assert_eq!(bar_read(q, BAR0 + 0x17, 1), 0x56);
    // initializing clears after the (50 ms) init delay, then the health counter moves.
    let t0 = std::time::Instant::now();
    while u32::from_be(bar_read(q, BAR0 + 0x1fc, 4) as u32) >> 31 == 1 {
        assert!(t0.elapsed().as_secs() < 5, "initializing never cleared");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let h1 = u32::from_be(bar_read(q, BAR0 + 0x1010, 4) as u32) & 0xff_ffff;
    std::thread::sleep(std::time::Duration::from_millis(5));
    let h2 = u32::from_be(bar_read(q, BAR0 + 0x1010, 4) as u32) & 0xff_ffff;
    assert_ne!(h1, h2, "health counter moves");
    // Writes: the command queue address as Linux writes it (iowrite32be: CPU value swapped).
    bar_write(q, BAR0 + 0x10, u64::from(0u32.to_be()), 4);
    bar_write(q, BAR0 + 0x14, u64::from(0x0012_3000u32.to_be()), 4);
    assert_eq!(
        u32::from_be(bar_read(q, BAR0 + 0x14, 4) as u32),
        0x0012_3056
    );
    // Outside BAR0: all ones, and the server keeps going.
    assert_eq!(bar_read(q, BAR0 + (32 << 20), 4), u64::MAX);
    assert_eq!(bar_read(q, 0x1000, 4), u64::MAX);

    // --- INTx through the irqfd, and re-assertion on resample (EOI) while still high. ---
    assert_eq!(eventfd_count(&irq), 0);
    h.intx.raise();
    assert_eq!(eventfd_wait(&irq, 1000), 1);
    (&resample).write_all(&1u64.to_ne_bytes()).unwrap(); // KVM signals the EOI
    assert_eq!(
        eventfd_wait(&irq, 2000),
        1,
        "still asserted: re-signalled after resample"
    );
    h.intx.lower();
    (&resample).write_all(&1u64.to_ne_bytes()).unwrap();
    // A round trip makes sure the resample was seen before checking nothing was signalled.
    assert_eq!(cfg_read(q, 0x00, 2), 0x15b3);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(eventfd_count(&irq), 0);

    // --- Unknown command without descriptors: RET 0, connection stays up. ---
    send_msg(q, 42, &[1, 2, 3], &[]);
    assert_eq!(recv_ret(q), 0);

    // --- DEVICE_RESET: RET, config space and init segment back to power-on. ---
    send_msg(q, DEVICE_RESET, &[], &[]);
    recv_ret(q);
    assert_eq!(cfg_read(q, 0x10, 4), 0, "BAR0 unprogrammed after reset");
    assert_eq!(cfg_read(q, 0x04, 2), 0, "decoding off after reset");
    assert_eq!(bar_read(q, BAR0, 4), u64::MAX, "BAR0 no longer decoded");
    cfg_write(q, 0x10, BAR0 as u32, 4);
    cfg_write(q, 0x04, 0x0002, 2);
    assert_eq!(
        u32::from_be(bar_read(q, BAR0 + 0x1fc, 4) as u32) >> 31,
        1,
        "initializing again"
    );
    assert_eq!(
        u32::from_be(bar_read(q, BAR0 + 0x14, 4) as u32),
        0x56,
        "cmdq address cleared"
    );

    // --- A second SYNC_SYSMEM replaces the mappings wholesale. ---
    sync_sysmem(q, &[(0x10_0000, MIB, 0, fd)]);
    assert_eq!(cfg_read(q, 0x00, 2), 0x15b3);
    assert_eq!(h.mem.sections(), vec![(0x10_0000, MIB)]);
    assert!(h.mem.read(0x1000, &mut buf).is_err());
    h.mem.read(0x10_1000, &mut buf).unwrap();
    assert_eq!(&buf, b"guest wrote this");

    // --- QEMU quits: EOF ends the connection cleanly and drops the guest memory. ---
    drop(h.qemu);
    let (server, r) = h.server.join().unwrap();
    assert!(r.is_ok(), "clean EOF: {r:?}");
    assert!(server.memory().sections().is_empty());
    assert!(!server.intx().connected());
}

#[test]
fn malformed_payload_size_closes_the_connection() {
    let h = start();
    let mut hdr = [0u8; 16];
    hdr[0..4].copy_from_slice(&PCI_CFGREAD.to_le_bytes());
    hdr[8..16].copy_from_slice(&1000u64.to_le_bytes());
    send_raw(&h.qemu, &hdr, &[], &[]);
    let (_, r) = h.server.join().unwrap();
    assert!(matches!(r, Err(ProxyError::Malformed(_))), "{r:?}");
}

#[test]
fn malformed_config_message_closes_the_connection() {
    let h = start();
    assert_eq!(cfg_read(&h.qemu, 0, 2), 0x15b3);
    // A config read with a 4-byte payload instead of 12.
    send_msg(&h.qemu, PCI_CFGREAD, &[0; 4], &[]);
    let (_, r) = h.server.join().unwrap();
    assert!(matches!(r, Err(ProxyError::Malformed(_))), "{r:?}");
}

#[test]
fn set_irqfd_with_one_descriptor_is_malformed() {
    let h = start();
    let e = eventfd();
    send_msg(&h.qemu, SET_IRQFD, &[], &[e.as_raw_fd()]);
    let (_, r) = h.server.join().unwrap();
    assert!(matches!(r, Err(ProxyError::Malformed(_))), "{r:?}");
}

#[test]
fn eof_inside_a_message_is_an_error_not_a_crash() {
    let h = start();
    let mut hdr = [0u8; 16];
    hdr[0..4].copy_from_slice(&PCI_CFGREAD.to_le_bytes());
    hdr[8..16].copy_from_slice(&12u64.to_le_bytes());
    send_raw(&h.qemu, &hdr, &[0; 5], &[]); // 5 of 12 payload bytes
    drop(h.qemu);
    let (_, r) = h.server.join().unwrap();
    assert!(matches!(r, Err(ProxyError::Malformed(_))), "{r:?}");
}

#[test]
fn bad_sysmem_section_is_logged_and_memory_left_empty() {
    let h = start();
    let ram = memfd("small", MIB);
    // Section extends past the end of the file: refused (it would SIGBUS), nothing mapped.
    sync_sysmem(&h.qemu, &[(0, 2 * MIB, 0, ram.as_raw_fd())]);
    assert_eq!(cfg_read(&h.qemu, 0x02, 2), 0x1017);
    assert!(h.mem.sections().is_empty());
    let mut b = [0u8; 4];
    assert!(h.mem.read(0, &mut b).is_err());
    drop(h.qemu);
    let (_, r) = h.server.join().unwrap();
    assert!(r.is_ok());
}

#[test]
fn bad_access_sizes_and_config_ranges() {
    let h = start();
    let q = &h.qemu;
    cfg_write(q, 0x10, BAR0 as u32, 4);
    cfg_write(q, 0x04, 0x0002, 2);
    // BAR access of 3 bytes: refused with all ones (as QEMU's own remote does).
    assert_eq!(bar_read(q, BAR0, 3), u64::MAX);
    // 1, 2, 8-byte reads work.
    assert_eq!(bar_read(q, BAR0 + 5, 1), 0x05);
    assert_eq!(bar_read(q, BAR0 + 4, 2), 0x0500);
    assert_eq!(
        bar_read(q, BAR0, 8).to_le_bytes()[..6],
        [0x00, 0x23, 0x00, 0x10, 0x00, 0x05]
    );
    // Config space beyond 256 bytes: reads 0, writes ignored.
    assert_eq!(cfg_read(q, 0x100, 4), 0);
    cfg_write(q, 0x100, 0xffff_ffff, 4);
    assert_eq!(cfg_read(q, 0xffc, 4), 0);
    assert_eq!(cfg_read(q, 0x00, -1), 0);
    drop(h.qemu);
    assert!(h.server.join().unwrap().1.is_ok());
}

/// Issue 7 (hostile input 3): a client's *blocking* interrupt eventfd whose counter is full
/// used to block the device's INTx write with the line's lock held; on disconnect `serve`
/// waited for that lock forever and no later client was served. The eventfd is now made
/// non-blocking and written without the lock.
#[test]
fn full_blocking_irqfd_does_not_wedge_the_server() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::mpsc;
    use std::time::Duration;
    let h = start();
    // SAFETY: eventfd returns a new descriptor (or -1, checked) that we own from here on.
    let fd = unsafe { libc::eventfd(0, 0) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    let irq = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    (&irq).write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap(); // full: the next write blocks
    let resample = eventfd();
    send_msg(
        &h.qemu,
        SET_IRQFD,
        &[],
        &[irq.as_raw_fd(), resample.as_raw_fd()],
    );
    assert_eq!(cfg_read(&h.qemu, 0, 2), 0x15b3, "SET_IRQFD processed");
    // The device raises INTx (its own thread, as the device thread would).
    let (tx, rx) = mpsc::channel();
    let line = h.intx.clone();
    std::thread::spawn(move || {
        line.raise();
        let _ = tx.send(());
    });
    // Deadlines bound a hang; nothing is asserted about how long anything takes.
    assert!(
        rx.recv_timeout(Duration::from_secs(30)).is_ok(),
        "raising INTx blocked on the client's full eventfd"
    );
    drop(h.qemu);
    let (tx, rx) = mpsc::channel();
    let server = h.server;
    std::thread::spawn(move || {
        let _ = tx.send(server.join());
    });
    let (mut server, r) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serve() did not return after the client left")
        .unwrap();
    assert!(r.is_ok(), "{r:?}");
    // The next client is served.
    let (qemu, dev) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || server.serve(&dev));
    assert_eq!(cfg_read(&qemu, 0, 4), 0x1017_15b3);
    drop(qemu);
    assert!(t.join().unwrap().is_ok());
}
