//! SYNC_SYSMEM replaces the mappings and closes the old descriptors; the end of a connection
//! closes everything. Alone in its binary so that counting this process's descriptors is exact.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use common::*;
use mlx5_sim::{Mlx5Function, ProxyServer};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn mapped_regions_of(fd_target: &str) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.contains(fd_target)).count()
}

#[test]
fn sync_sysmem_closes_old_descriptors() {
    let (qemu, dev) = UnixStream::pair().unwrap();
    let mut server = ProxyServer::new(Mlx5Function::new());
    let t = std::thread::spawn(move || server.serve(&dev).is_ok());

    let ram = memfd("leak-check-ram", 1 << 20);
    let fd = ram.as_raw_fd();
    let irq = eventfd();
    let resample = eventfd();
    let base = open_fds();

    // Each SYNC_SYSMEM carries 3 descriptors; after each, only the latest 3 stay open.
    for round in 0..10u64 {
        sync_sysmem(
            &qemu,
            &[
                (0, 0x1000, 0, fd),
                (0x1000, 0x1000, 0x1000, fd),
                (0x10_0000 * (round + 1), 0x1000, 0x2000, fd),
            ],
        );
        assert_eq!(cfg_read(&qemu, 0, 2), 0x15b3); // the SYNC_SYSMEM has been handled
        assert_eq!(open_fds(), base + 3, "round {round}");
        assert_eq!(
            mapped_regions_of("memfd:leak-check-ram"),
            3,
            "round {round}"
        );
    }
    // SET_IRQFD twice: the first pair is closed when the second arrives.
    send_msg(
        &qemu,
        SET_IRQFD,
        &[],
        &[irq.as_raw_fd(), resample.as_raw_fd()],
    );
    send_msg(
        &qemu,
        SET_IRQFD,
        &[],
        &[irq.as_raw_fd(), resample.as_raw_fd()],
    );
    assert_eq!(cfg_read(&qemu, 0, 2), 0x15b3);
    assert_eq!(open_fds(), base + 3 + 2);

    drop(qemu);
    assert!(t.join().unwrap());
    // The server's end of the socketpair was dropped with its thread; our end too.
    assert_eq!(open_fds(), base - 2);
    assert_eq!(mapped_regions_of("memfd:leak-check-ram"), 0);
}
