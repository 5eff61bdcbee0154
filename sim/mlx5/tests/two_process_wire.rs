//! Two `mlx5-sim` processes joined by `--wire-listen` / `--wire-connect`, each serving QEMU's
//! proxy protocol on its own `--listen` socket: what two QEMU guests with one emulated HCA each
//! would see. The test is QEMU for both: one memfd of guest RAM per device (SYNC_SYSMEM), BAR0
//! programmed and decoded through config space, both HCAs brought up with raw commands through
//! BAR writes (tests/raw over [`ProxyDev`]), an RC QP on each connected across the wire, then an
//! RDMA WRITE, a SEND and an RDMA READ from A, with the bytes read back from the memfds.

mod common;
#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use std::cell::Cell;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use common::*;
use dp::*;
use mlx5_prm::{cqe, wqe};
use mlx5_sim::memory::MemSection;
use mlx5_sim::{GuestMemory, MappedMemory};
use raw::Device;

/// Where the test (as firmware) places BAR0.
const BAR0: u64 = 0xfe00_0000;
/// Guest RAM: one memfd section at 1 GiB.
const RAM_GPA: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 64 << 20;
/// Unused bytes left after every DMA allocation, so an overrun is not another buffer.
const GUARD: u64 = 4096;

/// One emulated HCA as its QEMU guest sees it: BAR0 through the proxy socket, guest RAM as a
/// memfd the device process maps too.
struct ProxyDev {
    sock: UnixStream,
    /// The guest RAM file (what QEMU's memory-backend-memfd is).
    ram: File,
    /// The guest's own view of its RAM.
    view: MappedMemory,
    /// Bump allocator over the RAM.
    next: Cell<u64>,
}

impl ProxyDev {
    /// Does what QEMU and the guest firmware do: SYNC_SYSMEM, BAR sizing, BAR0 address and
    /// memory decoding + bus mastering.
    fn attach(sock: UnixStream, name: &str) -> ProxyDev {
        let ram = memfd(name, RAM_SIZE);
        sync_sysmem(&sock, &[(RAM_GPA, RAM_SIZE, 0, ram.as_raw_fd())]);
        assert_eq!(cfg_read(&sock, 0x00, 4), 0x1017_15b3, "ConnectX-5 IDs");
        assert_eq!(qemu_probe_bars(&sock), vec![(0, 32 << 20, true)]);
        cfg_write(&sock, 0x10, BAR0 as u32, 4);
        cfg_write(&sock, 0x04, 0x0006, 2);
        let view = MappedMemory::new();
        view.replace(vec![MemSection {
            gpa: RAM_GPA,
            size: RAM_SIZE,
            offset: 0,
            fd: OwnedFd::from(ram.try_clone().unwrap()),
        }])
        .unwrap();
        ProxyDev {
            sock,
            ram,
            view,
            next: Cell::new(RAM_GPA + 0x10_0000),
        }
    }

    /// `n` bytes at bus address `bus`, read from the memfd itself (no mapping involved).
    fn memfd_read(&self, bus: u64, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.ram.read_exact_at(&mut v, bus - RAM_GPA).unwrap();
        v
    }
}

impl Device for ProxyDev {
    fn mem(&self) -> &dyn GuestMemory {
        &self.view
    }
    fn alloc(&self, size: usize, align: usize) -> u64 {
        let a = align.max(1) as u64;
        let at = (self.next.get() + a - 1) & !(a - 1);
        let end = at + size as u64;
        assert!(
            end + GUARD <= RAM_GPA + RAM_SIZE,
            "test guest RAM exhausted"
        );
        self.next.set(end + GUARD);
        at
    }
    fn read32(&self, offset: u64) -> u32 {
        bar_read(&self.sock, BAR0 + offset, 4) as u32
    }
    fn write32(&self, offset: u64, value: u32) {
        bar_write(&self.sock, BAR0 + offset, value.into(), 4)
    }
    fn write64(&self, offset: u64, value: u64) {
        bar_write(&self.sock, BAR0 + offset, value, 8)
    }
    fn settle(&self) -> bool {
        // The device process works on its own thread: the driver polls ownership bits.
        false
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn two_qemu_guests_talk_over_the_wire() {
    two_sims("unix", false);
}

/// The same over TCP (`--wire-listen tcp:127.0.0.1:PORT`), with A capturing its wire
/// (`--wire-pcap`): the capture holds both directions and every ICRC in it is good.
#[test]
fn two_sims_over_tcp_with_a_capture() {
    two_sims("tcp", true);
}

/// A TCP port that was free a moment ago (the sim binds it again at once; another process
/// may take it in between, so A is started again on a new one if it exits).
fn free_port_addr() -> std::ffi::OsString {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("tcp:127.0.0.1:{port}").into()
}

fn two_sims(tag: &str, tcp: bool) {
    let dir =
        TempDir(std::env::temp_dir().join(format!("mlx5-2proc-{}-{tag}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (a_sock, b_sock, wire) = (
        dir.0.join("a.sock"),
        dir.0.join("b.sock"),
        dir.0.join("wire.sock"),
    );
    let pcap = dir.0.join("a.pcap");

    // A listens for the wire before it listens for QEMU, so once A's QEMU socket answers, B
    // can connect its wire. Over TCP A exits if its port was taken: a few tries.
    let mut tries = 0;
    let (mut sim_a, qa, wire) = loop {
        let wire: std::ffi::OsString = if tcp {
            free_port_addr()
        } else {
            wire.clone().into_os_string()
        };
        let mut a_args: Vec<&std::ffi::OsStr> = vec![
            "--listen".as_ref(),
            a_sock.as_os_str(),
            "--wire-listen".as_ref(),
            &wire,
            "--mac".as_ref(),
            "02:00:00:00:00:0a".as_ref(),
        ];
        if tcp {
            a_args.extend(["--wire-pcap".as_ref(), pcap.as_os_str()]);
        }
        let mut sim_a = Sim::spawn(&a_args, false);
        tries += 1;
        match sim_a.try_connect(&a_sock) {
            Some(qa) => break (sim_a, qa, wire),
            None if tcp && tries < 5 => continue,
            None => panic!("mlx5-sim A exited before listening"),
        }
    };
    let mut sim_b = Sim::spawn(
        &[
            "--listen".as_ref(),
            b_sock.as_os_str(),
            "--wire-connect".as_ref(),
            &wire,
            "--mac".as_ref(),
            "02:00:00:00:00:0b".as_ref(),
        ],
        false,
    );
    let qb = sim_b.connect(&b_sock);

    // Bring-up, UAR, EQ, PD, roce_en and GID ::ffff:10.0.0.1 / .2, all through BAR writes.
    let mut ea = Env::new(ProxyDev::attach(qa, "guest-a-ram"), 1);
    let mut eb = Env::new(ProxyDev::attach(qb, "guest-b-ram"), 2);
    assert_eq!(ea.mac, [2, 0, 0, 0, 0, 0x0a]);
    assert_eq!(eb.mac, [2, 0, 0, 0, 0, 0x0b]);

    let w = wire_pair(&mut ea, &mut eb, 6, 14);
    let (mut a, mut b, mut a_scq, mut b_rcq) = (w.a, w.b, w.a_scq, w.b_rcq);

    let a_buf = ea.alloc(64 * 1024);
    let b_buf = eb.alloc(64 * 1024);
    let a_key = ea.mkey(a_buf, 64 * 1024, LR | LW);
    let b_key = eb.mkey(b_buf, 64 * 1024, LR | LW | RR | RW);
    let data = pattern(20_000, 9);
    ea.write(a_buf, &data);

    // RDMA WRITE A -> B: the bytes land in B's memfd.
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_WRITE,
        wqe::ctrl::CQ_UPDATE,
        0,
        &[&raddr_seg(b_buf + 100, b_key), &dseg(20_000, a_key, a_buf)],
    );
    let c = ea.wait_cq(&mut a_scq, &[]);
    assert_eq!(
        (c.opcode(), c.wqe_opcode(), c.byte_cnt()),
        (cqe::opcode::REQ, wqe::opcode::RDMA_WRITE, 20_000)
    );
    assert_eq!(eb.raw.dev.memfd_read(b_buf + 100, 20_000), data);
    assert_eq!(eb.raw.dev.memfd_read(b_buf, 100), vec![0; 100]);

    // SEND with immediate A -> B into a posted receive.
    eb.post_recv(&mut b, &[(4096, b_key, b_buf + 32 * 1024)]);
    ea.post_send(
        &mut a,
        wqe::opcode::SEND_IMM,
        wqe::ctrl::CQ_UPDATE,
        0x1234_5678,
        &[&dseg(3000, a_key, a_buf + 5000)],
    );
    let r = eb.wait_cq(&mut b_rcq, &[]);
    assert_eq!(
        (r.opcode(), r.byte_cnt(), r.imm(), r.remote_qpn()),
        (cqe::opcode::RESP_SEND_IMM, 3000, 0x1234_5678, a.qpn)
    );
    assert_eq!(
        eb.raw.dev.memfd_read(b_buf + 32 * 1024, 3000),
        data[5000..8000]
    );
    let c = ea.wait_cq(&mut a_scq, &[]);
    assert_eq!(
        (c.opcode(), c.wqe_opcode()),
        (cqe::opcode::REQ, wqe::opcode::SEND_IMM)
    );

    // RDMA READ back from B into A: the response crosses the wire the other way.
    ea.post_send(
        &mut a,
        wqe::opcode::RDMA_READ,
        wqe::ctrl::CQ_UPDATE,
        0,
        &[
            &raddr_seg(b_buf + 32 * 1024, b_key),
            &dseg(3000, a_key, a_buf + 40_000),
        ],
    );
    let c = ea.wait_cq(&mut a_scq, &[]);
    assert_eq!(
        (c.wqe_opcode(), c.byte_cnt()),
        (wqe::opcode::RDMA_READ, 3000)
    );
    assert_eq!(
        ea.raw.dev.memfd_read(a_buf + 40_000, 3000),
        data[5000..8000]
    );

    // Both processes are still serving.
    assert!(sim_a.0.try_wait().unwrap().is_none());
    assert!(sim_b.0.try_wait().unwrap().is_none());

    if tcp {
        // A's capture (written unbuffered as frames pass): WRITE, SEND and READ packets and
        // their ACKs / responses, every ICRC good.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlx5-sim"))
            .arg("--decode-pcap")
            .arg(&pcap)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        for op in [
            "RC_RDMA_WRITE_FIRST",
            "RC_SEND_LAST_WITH_IMMEDIATE",
            "RC_RDMA_READ_REQUEST",
            "RC_RDMA_READ_RESPONSE_LAST",
            "RC_ACKNOWLEDGE",
            "10.0.0.1 > 10.0.0.2",
            "10.0.0.2 > 10.0.0.1",
        ] {
            assert!(text.contains(op), "{op} missing:\n{text}");
        }
        assert!(!text.contains("icrc=bad"), "{text}");
    }
}
