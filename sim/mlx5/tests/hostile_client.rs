//! A hostile client of `mlx5-sim --listen`, as a separate process would be: the server must
//! survive it and serve the next client (issue 7, "hostile input and a failing device").

mod common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::*;

const BAR0: u64 = 0xe000_0000;
const GPA: u64 = 0x10_0000;
const MIB: u64 = 1 << 20;

/// True once the server closed `sock`: a request gets EOF (or a reset) instead of a RET.
fn closed_by_server(sock: &UnixStream) -> bool {
    let mut hdr = [0u8; 16];
    hdr[0..4].copy_from_slice(&PCI_CFGREAD.to_le_bytes());
    hdr[8..16].copy_from_slice(&12u64.to_le_bytes());
    let mut msg = hdr.to_vec();
    msg.extend_from_slice(&[0u8; 12]);
    // SAFETY: sends a live buffer; MSG_NOSIGNAL turns a closed peer into EPIPE.
    let n = unsafe {
        libc::send(
            sock.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return true;
    }
    let mut reply = [0u8; 24];
    match (&*sock).read_exact(&mut reply) {
        Ok(()) => false,
        Err(_) => true,
    }
}

/// The attack: share a memfd as guest RAM (SYNC_SYSMEM), point the command queue into it,
/// truncate the memfd, ring the command doorbell. The device's read of the command entry
/// touches a page past the new end of the file. Before the fix the server died of SIGBUS.
#[test]
fn truncated_guest_ram_does_not_kill_the_server() {
    let dir = std::env::temp_dir().join(format!("mlx5-sim-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hca.sock");
    let _ = std::fs::remove_file(&path);
    let args = [
        std::ffi::OsStr::new("--listen"),
        path.as_os_str(),
        "--init-delay-ms".as_ref(),
        "0".as_ref(),
    ];
    let mut sim = Sim::spawn(&args, true);

    let a = sim.connect(&path);
    let ram = memfd("hostile-ram", MIB);
    sync_sysmem(&a, &[(GPA, MIB, 0, ram.as_raw_fd())]);
    cfg_write(&a, 0x10, BAR0 as u32, 4);
    cfg_write(&a, 0x04, 0x0006, 2); // memory decoding, bus master
    let t0 = Instant::now();
    while u32::from_be(bar_read(&a, BAR0 + 0x1fc, 4) as u32) >> 31 == 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "initializing never cleared"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // Command queue at GPA (cmdq_addr_h = 0, cmdq_addr_l_sz = low address bits).
    bar_write(&a, BAR0 + 0x10, u64::from(0u32.to_be()), 4);
    bar_write(&a, BAR0 + 0x14, u64::from((GPA as u32).to_be()), 4);
    ram.set_len(0).unwrap();
    // cmd_dbell: slot 0.
    bar_write(&a, BAR0 + 0x18, u64::from(1u32.to_be()), 4);

    // The server notices the fault (on this request or a later one, if a device thread did
    // the read) and drops this client. The deadline only bounds a hang.
    let t0 = Instant::now();
    while !closed_by_server(&a) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the server kept serving a client whose guest RAM faulted"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        sim.0.try_wait().unwrap().is_none(),
        "mlx5-sim died: {:?}",
        sim.0.try_wait()
    );

    // The next client gets a freshly reset function with working DMA.
    let b = sim.connect(&path);
    assert_eq!(cfg_read(&b, 0x00, 4), 0x1017_15b3);
    assert_eq!(
        cfg_read(&b, 0x10, 4),
        0,
        "BAR0 unprogrammed for the new client"
    );
    let ram2 = memfd("honest-ram", MIB);
    sync_sysmem(&b, &[(GPA, MIB, 0, ram2.as_raw_fd())]);
    cfg_write(&b, 0x10, BAR0 as u32, 4);
    cfg_write(&b, 0x04, 0x0006, 2);
    assert_eq!(
        u32::from_be(bar_read(&b, BAR0 + 4, 4) as u32) >> 16,
        5,
        "cmdif rev"
    );
    drop(b);
    assert!(
        sim.0.try_wait().unwrap().is_none(),
        "mlx5-sim still serving"
    );
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
}
