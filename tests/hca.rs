//! The emulated ConnectX-5 attached to a QEMU guest through QEMU's x-pci-proxy-dev (KVM only:
//! QEMU 10.0's proxy device crashes under TCG, see shared notes).

use std::time::Duration;
use unikernel::{kvm_usable, run, Accel, Hca, Machine, Options, Verdict};

fn kvm_or_skip(test: &str) -> bool {
    if kvm_usable() {
        return true;
    }
    eprintln!("SKIPPED {test}: /dev/kvm is missing or unusable; the HCA proxy device needs KVM");
    false
}

fn hca_opts(machine: Machine, app: &str) -> Options {
    Options {
        accel: Accel::Kvm,
        machine,
        hca: Some(Hca::Sim),
        app: Some(app.into()),
        timeout: Duration::from_secs(240),
        echo: false,
        ..Options::default()
    }
}

fn check_guest_sees_the_hca(machine: Machine) {
    let r = run(&hca_opts(machine, "hca-info")).unwrap_or_else(|e| panic!("could not boot: {e}"));
    let out = &r.output;
    assert_eq!(r.verdict, Verdict::Exited(0), "{out}");
    let pci = out
        .lines()
        .find(|l| l.starts_with("pci ") && l.contains(" 15b3:1017 "))
        .unwrap_or_else(|| panic!("the PCI scan does not show 15b3:1017:\n{out}"));
    assert!(pci.contains("class=020700"), "{pci}");
    assert!(
        pci.contains("bars=0:mem32@0x") && pci.ends_with("/32M"),
        "{pci}"
    );
    let hca = out
        .lines()
        .find(|l| l.starts_with("hca: "))
        .unwrap_or_else(|| panic!("no hca line:\n{out}"));
    assert!(
        hca.ends_with("15b3:1017 fw_rev=16.35.2000 cmdif_rev=5"),
        "{hca}"
    );
}

#[test]
fn guest_pci_scan_shows_the_emulated_hca_q35() {
    if kvm_or_skip("guest_pci_scan_shows_the_emulated_hca_q35") {
        check_guest_sees_the_hca(Machine::Q35);
    }
}

#[test]
fn guest_pci_scan_shows_the_emulated_hca_pc() {
    if kvm_or_skip("guest_pci_scan_shows_the_emulated_hca_pc") {
        check_guest_sees_the_hca(Machine::Pc);
    }
}

#[test]
fn hca_sim_under_tcg_is_refused_with_a_reason() {
    let o = Options {
        accel: Accel::Tcg,
        ..hca_opts(Machine::Q35, "hca-info")
    };
    match run(&o) {
        Err(e) => assert!(e.to_string().contains("needs KVM"), "{e}"),
        Ok(r) => panic!("booted under TCG with the proxy device: {:?}", r.verdict),
    }
}

/// `cargo run`'s default under KVM: the emulated HCA and the RDMA app, which checks every
/// opcode and error case, prints the perftest-style table, and exits 0.
/// The README's example application: one RDMA WRITE between two loopback QPs, read back.
#[test]
fn readme_example_app_writes_and_reads_back() {
    if !kvm_or_skip("readme_example_app_writes_and_reads_back") {
        return;
    }
    let r = run(&hca_opts(Machine::Q35, "hello-rdma"))
        .unwrap_or_else(|e| panic!("could not boot: {e}"));
    let out = &r.output;
    assert_eq!(r.verdict, Verdict::Exited(0), "{out}");
    assert!(
        out.lines().any(|l| l == "hello-rdma: Ok(true)"),
        "no `hello-rdma: Ok(true)` line:\n{out}"
    );
}

#[test]
fn default_run_is_the_rdma_app_and_it_passes() {
    if !kvm_or_skip("default_run_is_the_rdma_app_and_it_passes") {
        return;
    }
    let o = Options {
        accel: Accel::Kvm,
        timeout: Duration::from_secs(600),
        echo: false,
        ..Options::default()
    };
    let r = run(&o).unwrap_or_else(|e| panic!("could not boot: {e}"));
    let out = &r.output;
    assert_eq!(r.verdict, Verdict::Exited(0), "{out}");
    for op in [
        "RDMA_WRITE 4 KiB: ok",
        "RDMA_WRITE_WITH_IMM: ok",
        "RDMA_READ 4 KiB: ok",
        "SEND 1500 B: ok",
        "SEND_WITH_IMM 1500 B: ok",
        "SEND inline: ok",
        "ATOMIC_CMP_AND_SWP: ok",
        "ATOMIC_FETCH_AND_ADD: ok",
        "out-of-bounds RDMA_WRITE gets REM_ACCESS_ERR and writes nothing: ok",
        "RDMA_WRITE with an rkey of another PD is refused: ok",
        "memory window bound over part of a region by BIND_MW: new rkey, BIND_MW completion: ok",
        "RDMA_WRITE and RDMA_READ through the window's rkey: ok",
        "access outside the window gets REM_ACCESS_ERR and writes nothing: ok",
        "after LOCAL_INV the window's old rkey gets REM_ACCESS_ERR: ok",
    ] {
        assert!(
            out.lines().any(|l| l == format!("rdma: {op}")),
            "missing '{op}':\n{out}"
        );
    }
    // The default 3 GiB guest has one whole 1 GiB page: one MTT entry, one command.
    let reg = out
        .lines()
        .find(|l| l.starts_with("rdma: reg_mr "))
        .expect("no reg_mr line");
    assert!(
        reg.starts_with("rdma: reg_mr 1024 MiB of Size1G pages")
            && reg.contains(": 1 MTT entries (page 2^30), 1 commands"),
        "{reg}"
    );
    for table in ["RDMA_Write BW", "RDMA_Read BW", "RDMA_Write Latency"] {
        assert!(out.contains(table), "no {table} table:\n{out}");
    }
    assert!(out.contains("rdma: teardown ok, pages reclaimed"), "{out}");
    assert!(out.contains(" checks passed, 0 failed"), "{out}");
}

/// Two guests, each with its own emulated HCA, the two HCAs joined by a wire (a UNIX socket
/// between the two mlx5-sim processes). The apps find each other by ARP and swap endpoints over
/// TCP on that wire (their own IP stacks), then the client runs every RC opcode across the wire
/// with messages longer than the MTU, as `cargo run -- --pair` does.
#[test]
fn two_guests_do_rdma_over_the_wire() {
    if !kvm_or_skip("two_guests_do_rdma_over_the_wire") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("unikernel-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The `--pair` run: rdma-peer server (10.0.0.1) and client (10.0.0.2), their HCAs joined by
    // a wire of RoCEv2 frames, every RC opcode across it.
    let base = Options {
        timeout: Duration::from_secs(300),
        ..hca_opts(Machine::Q35, "rdma-peer")
    };
    let (server, client) = unikernel::pair_options(&base, &dir);
    let (rs, rc) =
        unikernel::run_pair(&server, &client).unwrap_or_else(|e| panic!("could not boot: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        rs.verdict,
        Verdict::Exited(0),
        "server:\n{}\nclient:\n{}",
        rs.output,
        rc.output
    );
    assert_eq!(
        rc.verdict,
        Verdict::Exited(0),
        "client:\n{}\nserver:\n{}",
        rc.output,
        rs.output
    );
    assert!(
        rs.output
            .contains("peer: ip 10.0.0.1/24 is RoCE v2 GID index 1"),
        "{}",
        rs.output
    );
    assert!(rs.output.contains(
        "peer: server received RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM of 5000 B, served RDMA_READ, CMP_AND_SWAP, FETCH_AND_ADD: ok"
    ));
    assert!(rc.output.contains(
        "peer: client ran RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, RDMA_READ of 5000 B and CMP_AND_SWAP, FETCH_AND_ADD across the wire: ok"
    ));
}

/// The `--pair` run over a faulty wire (`--wire-fault` on both HCAs: drops, reordering and
/// corrupted frames): RC recovers and every byte still checks out on both guests.
#[test]
fn two_guests_do_rdma_over_a_faulty_wire() {
    if !kvm_or_skip("two_guests_do_rdma_over_a_faulty_wire") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("unikernel-wire-f-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = Options {
        timeout: Duration::from_secs(300),
        hca_args: vec![
            "--wire-fault".into(),
            "drop=0.1,reorder=0.1,corrupt=0.05,seed=7".into(),
        ],
        ..hca_opts(Machine::Q35, "rdma-peer")
    };
    let (server, client) = unikernel::pair_options(&base, &dir);
    assert!(server.hca_args.iter().any(|a| a == "--wire-fault"));
    assert!(client.hca_args.iter().any(|a| a == "--wire-fault"));
    let (rs, rc) =
        unikernel::run_pair(&server, &client).unwrap_or_else(|e| panic!("could not boot: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        rs.verdict,
        Verdict::Exited(0),
        "server:\n{}\nclient:\n{}",
        rs.output,
        rc.output
    );
    assert_eq!(
        rc.verdict,
        Verdict::Exited(0),
        "client:\n{}\nserver:\n{}",
        rc.output,
        rs.output
    );
    assert!(rc.output.contains("across the wire: ok"), "{}", rc.output);
}

/// A counter from a `stress: counters SIDE q: name=value ...` line of `out`.
fn stress_counter(out: &str, side: &str, name: &str) -> u64 {
    let prefix = format!("stress: counters {side} q: ");
    let line = out
        .lines()
        .find_map(|l| l.split_once(&prefix).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no {side} counters line in:\n{out}"));
    line.split_whitespace()
        .find_map(|kv| {
            kv.strip_prefix(name)?
                .strip_prefix('=')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {name} in {line:?}"))
}

/// The two-guest fault run (`rdma-peer` with `mode=stress`): 10,000 RDMA WRITEs of mixed sizes
/// (1 B to 16 KiB, many longer than the 1024-byte path MTU), a checked RDMA READ and an atomic
/// after every batch, across 1% drop, 1% reorder and 0.1% corruption on both HCAs' wires. It
/// ends byte-exact (the client's model against a full read-back and the server's checksum)
/// with zero error completions, and the Q counter sets the guests read through the driver
/// (ALLOC_Q_COUNTER, QUERY_Q_COUNTER) show the faults: the client's QP retried (sequence NAKs
/// or ACK timeouts) and the server's saw out-of-sequence requests.
#[test]
fn two_guests_push_10000_writes_over_a_faulty_wire_and_count_the_faults() {
    if !kvm_or_skip("two_guests_push_10000_writes_over_a_faulty_wire_and_count_the_faults") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("unikernel-wire-s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = Options {
        timeout: Duration::from_secs(400),
        cmdline: "mode=stress".into(),
        hca_args: vec![
            "--wire-fault".into(),
            "drop=0.01,reorder=0.01,corrupt=0.001,seed=8".into(),
        ],
        ..hca_opts(Machine::Q35, "rdma-peer")
    };
    let (server, client) = unikernel::pair_options(&base, &dir);
    assert!(client.cmdline.contains("mode=stress"), "{}", client.cmdline);
    let (rs, rc) =
        unikernel::run_pair(&server, &client).unwrap_or_else(|e| panic!("could not boot: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        rs.verdict,
        Verdict::Exited(0),
        "server:\n{}\nclient:\n{}",
        rs.output,
        rc.output
    );
    assert_eq!(
        rc.verdict,
        Verdict::Exited(0),
        "client:\n{}\nserver:\n{}",
        rc.output,
        rs.output
    );
    assert!(
        rc.output.contains("stress: 10000 RDMA WRITEs,")
            && rc.output.contains("0 error completions, region byte-exact"),
        "{}",
        rc.output
    );
    for l in rc
        .output
        .lines()
        .chain(rs.output.lines())
        .filter(|l| l.contains("stress: "))
    {
        println!("{l}");
    }
    println!(
        "wall time: client {:?}, server {:?}",
        rc.wall_time, rs.wall_time
    );
    let retries = stress_counter(&rc.output, "client", "packet_seq_err")
        + stress_counter(&rc.output, "client", "local_ack_timeout_err");
    assert!(retries > 0, "the client's QP never retried:\n{}", rc.output);
    assert!(
        stress_counter(&rs.output, "server", "out_of_sequence") > 0,
        "no out-of-sequence request:\n{}",
        rs.output
    );
    assert_eq!(
        stress_counter(&rc.output, "client", "req_transport_retries_exceeded"),
        0
    );
}
