//! A Linux soft-RoCE (rdma_rxe) peer (src/linux_guest.rs `prepare_peer_image`, src/peer.rs).
//!
//! - `peer_image_builds`: the image holds rdma-core's tools and the rxe provider.
//! Each test skips loudly (`SKIPPED: ...`) when QEMU or the peer image cannot be had.

use unikernel::linux_guest::{self, peer};

#[test]
fn peer_image_builds() {
    let img = match linux_guest::prepare_peer_image() {
        Ok(i) => i,
        Err(s) => {
            eprintln!("SKIPPED: peer_image_builds: {s}");
            return;
        }
    };
    let data = std::fs::read(&img.initrd).unwrap();
    for name in ["usr/bin/ibv_rc_pingpong\0", "usr/bin/ib_write_bw\0", "etc/libibverbs.d/rxe.driver\0", "lib/modules/rdma_rxe.ko\0"] {
        assert!(data.windows(name.len()).any(|w| w == name.as_bytes()), "{name} missing from the peer image");
    }
}

/// Two Linux peers joined by one stream link pass `ibv_rc_pingpong`: the image and the
/// harness work, and the figures are the baseline for the unikernel runs.
#[test]
fn two_linux_peers_pass_rc_pingpong() {
    const T: &str = "two_linux_peers_pass_rc_pingpong";
    let img = match linux_guest::prepare_peer_image() {
        Ok(i) => i,
        Err(s) => {
            eprintln!("SKIPPED: {T}: {s}");
            return;
        }
    };
    let work = linux_guest::cache_dir().join("runs").join("linux_pair");
    let (a, b) = match peer::run_linux_pair(
        &img,
        &work,
        "ibv_rc_pingpong -d rxe0 -g $GID -n 20 -s 4096",
        "ibv_rc_pingpong -d rxe0 -g $GID -n 20 -s 4096 10.0.0.1",
        Some(work.join("link.pcap")),
        false,
    ) {
        Ok(r) => r,
        Err(s) => {
            eprintln!("SKIPPED: {T}: {s}");
            return;
        }
    };
    let ok = |o: &peer::PeerOutcome| o.rc == Some(0) && o.output().contains("iters in");
    if !ok(&a) || !ok(&b) {
        eprintln!("==== A (server) ====\n{}\n==== B (client) ====\n{}", a.console, b.console);
        panic!("{T}: rc A={:?} B={:?}", a.rc, b.rc);
    }
    eprintln!("A: {}B: {}", a.output(), b.output());
    assert_eq!(a.marker("GID_INDEX").as_deref(), Some("1"), "rxe's IPv4 GID is at index 1");
}
