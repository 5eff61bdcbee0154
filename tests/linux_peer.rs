//! A Linux soft-RoCE (rdma_rxe) peer (src/linux_guest.rs `prepare_peer_image`, src/peer.rs):
//! rdma-core's own tools in Linux (TCG) against the unikernel apps `pingpong` and `perftest`
//! (KVM) over RoCEv2 frames, both roles; two Linux peers alone as the baseline.
//!
//! Each test skips loudly (`SKIPPED: ...`) when QEMU, KVM or the peer image cannot be had.

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

/// Runs `cmd` in Linux against the unikernel app that plays the other side; None after a loud
/// SKIPPED when QEMU, KVM or the peer image cannot be had.
fn against_unikernel(test: &str, cmd: &str, role: peer::Role) -> Option<peer::PeerRunResult> {
    against_unikernel_within(test, cmd, role, 150)
}

fn against_unikernel_within(test: &str, cmd: &str, role: peer::Role, secs: u64) -> Option<peer::PeerRunResult> {
    if !unikernel::kvm_usable() {
        eprintln!("SKIPPED: {test}: /dev/kvm is not usable (the unikernel with the emulated HCA needs KVM)");
        return None;
    }
    let pcap = linux_guest::cache_dir().join("runs").join(format!("{test}.pcap"));
    let run = peer::PeerRun {
        cmd: cmd.into(),
        role,
        pcap: Some(pcap.clone()),
        unikernel: unikernel::Options { echo: false, ..unikernel::Options::default() },
        timeout: std::time::Duration::from_secs(secs),
    };
    match peer::run_linux_peer(&run) {
        Ok(r) => {
            if !r.ok() {
                eprintln!(
                    "==== Linux ====\n{}\n==== unikernel ====\n{}\n==== pcap: {} ====",
                    r.linux.console,
                    r.unikernel_output,
                    pcap.display()
                );
                panic!("{test}: Linux rc {:?}, unikernel {:?}", r.linux.rc, r.unikernel);
            }
            check_pcap(test, &pcap);
            eprintln!(
                "{test}: {:.1} s\n---- Linux ----\n{}---- unikernel ----\n{}",
                r.wall.as_secs_f64(),
                r.linux.output(),
                r.unikernel_output
                    .lines()
                    .filter(|l| !l.starts_with("peer: tcp") && !l.starts_with("[") && !l.starts_with("pci ") && !l.starts_with("qemu-system"))
                    .fold(String::new(), |s, l| s + l + "\n")
            );
            Some(r)
        }
        Err(s) => {
            eprintln!("SKIPPED: {test}: {s}");
            None
        }
    }
}

/// The project's own decoder (`mlx5-sim --decode-pcap`) reads every frame of the run's capture:
/// every RoCE frame decodes and its ICRC is right (what rxe checks before it takes a frame).
fn check_pcap(test: &str, pcap: &std::path::Path) {
    let sim = unikernel::build_hca_sim().expect("mlx5-sim");
    let out = std::process::Command::new(sim).arg("--decode-pcap").arg(pcap).output().expect("mlx5-sim --decode-pcap");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().last().unwrap_or_default().to_string();
    assert!(out.status.success(), "{test}: {} fails to decode:\n{summary}", pcap.display());
    assert!(summary.contains("(0 bad ICRC), 0 not decodable"), "{test}: {summary}");
    eprintln!("{test}: capture: {summary}");
}

fn pingpong(test: &str, size: u32, role: peer::Role) {
    let server = if role == peer::Role::Client { " $SERVER" } else { "" };
    let cmd = format!("ibv_rc_pingpong -d rxe0 -g $GID -n 100 -s {size}{server}");
    // 64 KiB messages take minutes here: see the unikernel's "where the time goes" line.
    let secs = if size > 4096 { 900 } else { 150 };
    if let Some(r) = against_unikernel_within(test, &cmd, role, secs) {
        assert!(r.linux.output().contains("100 iters in"), "{test}: Linux printed no result");
        assert!(r.unikernel_output.contains("every byte of 100 messages checked: ok"));
    }
}

#[test]
fn rc_pingpong_linux_server_4096() {
    pingpong("rc_pingpong_linux_server_4096", 4096, peer::Role::Server);
}

#[test]
fn rc_pingpong_linux_client_4096() {
    pingpong("rc_pingpong_linux_client_4096", 4096, peer::Role::Client);
}

/// Two Linux peers run a perftest tool (`PEER_PAIR_TOOL`, default ib_write_bw) over the link;
/// the capture keeps their TCP exchange. A manual aid, ignored by default.
#[test]
#[ignore]
fn two_linux_peers_perftest_capture() {
    let tool = std::env::var("PEER_PAIR_TOOL").unwrap_or_else(|_| "ib_write_bw".into());
    let img = linux_guest::prepare_peer_image().expect("peer image");
    let work = linux_guest::cache_dir().join("runs").join(format!("linux_pair_{}", tool.replace(' ', "_")));
    let (a, b) = peer::run_linux_pair(
        &img,
        &work,
        &format!("{tool} -d rxe0 -x $GID -F -n 5"),
        &format!("{tool} -d rxe0 -x $GID -F -n 5 10.0.0.1"),
        Some(work.join("link.pcap")),
        false,
    )
    .expect("pair");
    eprintln!("A: {}\nB: {}\npcap {}", a.console, b.console, work.join("link.pcap").display());
}

fn perftest(test: &str, tool: &str, size: u32, role: peer::Role) {
    let server = if role == peer::Role::Client { " $SERVER" } else { "" };
    let cmd = format!("{tool} -d rxe0 -x $GID -F -s {size} -n 100{server}");
    if let Some(r) = against_unikernel(test, &cmd, role) {
        let out = r.linux.output();
        assert!(out.contains("BW average[MB/sec]"), "{test}: Linux printed no table");
        assert!(r.unikernel_output.contains("BW average[MB/sec]"), "{test}: the unikernel printed no table");
        assert!(r.unikernel_output.contains("perftest: ") && r.unikernel_output.contains(": ok"));
    }
}

#[test]
fn ib_write_bw_linux_server_65536() {
    perftest("ib_write_bw_linux_server_65536", "ib_write_bw", 65536, peer::Role::Server);
}

#[test]
fn ib_write_bw_linux_client_65536() {
    perftest("ib_write_bw_linux_client_65536", "ib_write_bw", 65536, peer::Role::Client);
}

#[test]
fn ib_read_bw_linux_server_65536() {
    perftest("ib_read_bw_linux_server_65536", "ib_read_bw", 65536, peer::Role::Server);
}

#[test]
fn ib_read_bw_linux_client_65536() {
    perftest("ib_read_bw_linux_client_65536", "ib_read_bw", 65536, peer::Role::Client);
}

#[test]
fn ib_send_bw_linux_server_65536() {
    perftest("ib_send_bw_linux_server_65536", "ib_send_bw", 65536, peer::Role::Server);
}

#[test]
fn ib_send_bw_linux_client_65536() {
    perftest("ib_send_bw_linux_client_65536", "ib_send_bw", 65536, peer::Role::Client);
}

#[test]
fn rc_pingpong_linux_server_1() {
    pingpong("rc_pingpong_linux_server_1", 1, peer::Role::Server);
}

#[test]
fn rc_pingpong_linux_client_1() {
    pingpong("rc_pingpong_linux_client_1", 1, peer::Role::Client);
}

#[test]
fn rc_pingpong_linux_server_65536() {
    pingpong("rc_pingpong_linux_server_65536", 65536, peer::Role::Server);
}

#[test]
fn rc_pingpong_linux_client_65536() {
    pingpong("rc_pingpong_linux_client_65536", 65536, peer::Role::Client);
}

#[test]
fn ib_write_bw_linux_server_64() {
    perftest("ib_write_bw_linux_server_64", "ib_write_bw", 64, peer::Role::Server);
}

#[test]
fn ib_write_bw_linux_client_64() {
    perftest("ib_write_bw_linux_client_64", "ib_write_bw", 64, peer::Role::Client);
}

#[test]
fn ib_read_bw_linux_server_64() {
    perftest("ib_read_bw_linux_server_64", "ib_read_bw", 64, peer::Role::Server);
}

#[test]
fn ib_read_bw_linux_client_64() {
    perftest("ib_read_bw_linux_client_64", "ib_read_bw", 64, peer::Role::Client);
}

#[test]
fn ib_send_bw_linux_server_64() {
    perftest("ib_send_bw_linux_server_64", "ib_send_bw", 64, peer::Role::Server);
}

#[test]
fn ib_send_bw_linux_client_64() {
    perftest("ib_send_bw_linux_client_64", "ib_send_bw", 64, peer::Role::Client);
}
