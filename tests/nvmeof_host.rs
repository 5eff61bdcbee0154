//! NVMe over Fabrics on RDMA from a Linux host (nvme-rdma, nvme-cli, fio, e2fsprogs in the peer
//! image's NVMe layer: src/linux_guest/nvme/): one host script per scenario, run against a
//! target: the unikernel's `nvmf-target` (the tests `cargo test` runs), or Linux's own
//! `nvmet-rdma` over a memory-backed null_blk in a second Linux guest (the baseline and the proof
//! of the scripts: `#[ignore]`d, with the fio table, to keep `cargo test` within its time; run
//! them with `cargo test --test nvmeof_host -- --ignored`).
//!
//! Each test skips loudly (`SKIPPED: ...`) when QEMU or the image cannot be had. Two Linux
//! guests under TCG: a scenario takes one to several minutes; the runs take turns (one pair at
//! a time), so that a loaded host does not starve them all at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use unikernel::linux_guest::nvme::{self, Scenario, SUBSYS_NQN};
use unikernel::linux_guest::{self, peer};

/// One pair of guests at a time.
static TURN: Mutex<()> = Mutex::new(());

/// Who serves the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// Linux's nvmet-rdma in a second guest (10.0.0.1), nvme/nvmet-target.sh.
    LinuxNvmet,
    /// The unikernel's app `nvmf-target` with the emulated HCA (10.0.0.2).
    Unikernel,
}

impl Target {
    /// The host's command for scenario `s` (the scripts' target is their argument, default
    /// 10.0.0.1; the launcher puts the unikernel's address for `$SERVER`).
    fn host_cmd(self, s: Scenario) -> String {
        match self {
            Target::LinuxNvmet => s.script(),
            Target::Unikernel => format!("{} $SERVER", s.script()),
        }
    }
}

/// The unikernel's memory: the 1 GiB disk is one 1 GiB page, which a guest of 1 GiB (the peer
/// runs' default) does not have free.
const UNIKERNEL_MEMORY: &str = "3072M";

/// The unikernel's command line as the target (its address and peer come from the launcher).
const UNIKERNEL_CMDLINE: &str =
    "nvmf-target nqn=nqn.2026-12.io.example:ram serial=NVMEOF-RAM-0001 size=1G";

/// Runs scenario `s` from the Linux host against `target`; the host's output, or None after a
/// loud SKIPPED. Panics with both consoles when the scenario fails.
fn run(test: &str, target: Target, s: Scenario) -> Option<String> {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let img = match linux_guest::prepare_nvme_image() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("SKIPPED: {test}: {e}");
            return None;
        }
    };
    let work = linux_guest::cache_dir().join("runs").join(test);
    let cmd = target.host_cmd(s);
    // The link's capture of the basic scenario (under 1 MB); fio's and the file system's run
    // to 25-190 MB.
    let pcap = (s == Scenario::Basic).then(|| work.join("link.pcap"));
    // The pair makes its directory; the unikernel's run keeps its own, so the capture's is
    // made here (QEMU cannot open the file otherwise).
    if let Err(e) = std::fs::create_dir_all(&work) {
        eprintln!("SKIPPED: {test}: {}: {e}", work.display());
        return None;
    }
    let (server, host) = match target {
        Target::LinuxNvmet => match peer::run_linux_pair_within(
            &img,
            &work,
            nvme::TARGET_SCRIPT,
            &cmd,
            pcap,
            false,
            Duration::from_secs(1200),
        ) {
            Ok((a, b)) => (a.console, b),
            Err(e) => {
                eprintln!("SKIPPED: {test}: {e}");
                return None;
            }
        },
        Target::Unikernel => {
            // Needs the app (Part N3) and the launcher's `--peer linux` on the NVMe image.
            if !unikernel::workspace_root()
                .join("apps/src/bin/nvmf-target.rs")
                .exists()
            {
                eprintln!(
                    "SKIPPED: {test}: no unikernel app nvmf-target yet (would run `{UNIKERNEL_CMDLINE}` against `{cmd}`)"
                );
                return None;
            }
            let o = unikernel::Options {
                app: Some("nvmf-target".into()),
                cmdline: UNIKERNEL_CMDLINE.into(),
                memory: UNIKERNEL_MEMORY.into(),
                ..Default::default()
            };
            let r = match peer::run_linux_peer(&peer::PeerRun {
                cmd,
                role: peer::Role::Client,
                pcap,
                static_neigh: false,
                unikernel: o,
                timeout: Duration::from_secs(1200),
            }) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("SKIPPED: {test}: {e}");
                    return None;
                }
            };
            (r.unikernel_output, r.linux)
        }
    };
    let out = host.output();
    if host.rc != Some(0) || !nvme::passed(&out, s) {
        eprintln!(
            "==== target ====\n{server}\n==== host ====\n{}",
            host.console
        );
        panic!(
            "{test}: rc {:?} (timed out: {}), last result: {:?}",
            host.rc,
            host.timed_out,
            out.lines().rev().find(|l| l.starts_with("RESULT "))
        );
    }
    if (target, s) == (Target::Unikernel, Scenario::Basic) {
        assert_state_back(test, &server, false);
    }
    eprintln!(
        "{test}: passed in {:.0} s:\n{}",
        host.wall.as_secs_f64(),
        out.lines()
            .filter(|l| l.starts_with("RESULT "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Some(out)
}

/// The namespace as both targets serve it: 1 GiB of 512-byte blocks, its serial, one
/// discovery entry for the subsystem besides the discovery subsystem's own.
fn assert_connected(test: &str, out: &str) {
    let f = |k: &str| nvme::field(out, "connect", k);
    assert_eq!(f("bytes").as_deref(), Some("1073741824"), "{test}: size");
    assert_eq!(f("lba").as_deref(), Some("512"), "{test}: block size");
    assert_eq!(
        f("serial").as_deref(),
        Some("NVMEOF-RAM-0001"),
        "{test}: serial"
    );
    assert_eq!(
        nvme::field(out, "discover", "listed").as_deref(),
        Some("1"),
        "{test}: {SUBSYS_NQN} in the discovery log"
    );
    // One RC QP per queue while connected (the admin queue's and each I/O queue's).
    assert_eq!(f("rc_qps"), f("queues"), "{test}: RC QPs while connected");
    // Every disconnect left no controller and no RC QP behind.
    let n = nvme::values(out, "disconnect", "s").len();
    assert!(n > 0, "{test}: no disconnect");
    for k in ["ctrls", "rc_qps"] {
        assert_eq!(
            nvme::values(out, "disconnect", k),
            vec!["0"; n],
            "{test}: {k} left after a disconnect"
        );
    }
}

#[test]
fn nvme_image_builds() {
    let img = match linux_guest::prepare_nvme_image() {
        Ok(i) => i,
        Err(s) => {
            eprintln!("SKIPPED: nvme_image_builds: {s}");
            return;
        }
    };
    let names = linux_guest::Initramfs::names(&img.initrd).unwrap();
    for name in [
        "usr/bin/nvme",
        "usr/bin/fio",
        "usr/bin/mkfs.ext4",
        "usr/bin/fsck.ext4",
        "usr/bin/loadmod",
        "usr/bin/nvme-basic.sh",
        "usr/lib/x86_64-linux-gnu/libnvme.so.1",
        "lib/modules/nvme-rdma.ko",
        "lib/modules/nvmet-rdma.ko",
        "lib/modules/null_blk.ko",
        "lib/modules/ext4.ko",
        "lib/modules/order.nvme-rdma",
        "etc/nvme/hostnqn",
        // The peer image's own, before the layer.
        "usr/bin/ibv_rc_pingpong",
        "lib/modules/rdma_rxe.ko",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from the NVMe image"
        );
    }
}

/// discover, connect, 4 KiB and 128 KiB O_DIRECT writes read back byte-exact, disconnect leaves
/// nothing behind, a second connect reads the first one's data.
#[test]
#[ignore = "the same scenario against Linux nvmet-rdma: it proves the host script, not the unikernel (a TCG Linux target costs minutes); run with --ignored"]
fn linux_nvmet_basic() {
    basic("linux_nvmet_basic", Target::LinuxNvmet);
}

/// The basic scenario against the unikernel's `nvmf-target`.
#[test]
fn unikernel_basic() {
    basic("unikernel_basic", Target::Unikernel);
}

fn basic(t: &str, target: Target) {
    let Some(out) = run(t, target, Scenario::Basic) else {
        return;
    };
    assert_basic(t, &out);
}

/// The basic scenario's checks on the host's output.
fn assert_basic(t: &str, out: &str) {
    assert_connected(t, out);
    for step in ["io", "reconnect"] {
        assert_eq!(
            nvme::values(out, step, "equal"),
            ["1", "1"],
            "{t}: {step}: 4 KiB and 128 KiB equal"
        );
    }
}

/// mkfs.ext4, mount, files, unmount, reconnect, fsck clean, mount, the checksums equal.
#[test]
#[ignore = "the same scenario against Linux nvmet-rdma: it proves the host script, not the unikernel (a TCG Linux target costs minutes); run with --ignored"]
fn linux_nvmet_filesystem() {
    filesystem("linux_nvmet_filesystem", Target::LinuxNvmet);
}

/// The file system scenario against the unikernel's `nvmf-target`.
#[test]
fn unikernel_filesystem() {
    filesystem("unikernel_filesystem", Target::Unikernel);
}

fn filesystem(t: &str, target: Target) {
    let Some(out) = run(t, target, Scenario::Fs) else {
        return;
    };
    assert_connected(t, &out);
    assert_eq!(nvme::field(&out, "fsck", "rc").as_deref(), Some("0"));
    assert_eq!(nvme::field(&out, "checksums", "bad").as_deref(), Some("0"));
    assert_eq!(
        nvme::field(&out, "checksums", "files"),
        nvme::field(&out, "files", "n"),
        "{t}: every file checked"
    );
}

/// fio --verify from three jobs over the host's I/O queues (default, read and poll).
#[test]
#[ignore = "the same scenario against Linux nvmet-rdma: it proves the host script, not the unikernel (a TCG Linux target costs minutes); run with --ignored"]
fn linux_nvmet_fio_verify() {
    fio_verify("linux_nvmet_fio_verify", Target::LinuxNvmet);
}

/// fio --verify with several I/O queues against the unikernel's `nvmf-target`.
#[test]
fn unikernel_fio_verify() {
    fio_verify("unikernel_fio_verify", Target::Unikernel);
}

fn fio_verify(t: &str, target: Target) {
    let Some(out) = run(t, target, Scenario::FioVerify) else {
        return;
    };
    assert_connected(t, &out);
    let queues: u32 = nvme::field(&out, "fio-verify", "queues")
        .and_then(|q| q.parse().ok())
        .unwrap_or(0);
    assert!(
        queues >= 3,
        "{t}: the admin queue and at least two I/O queues, got {queues}"
    );
    assert_eq!(
        nvme::values(&out, "fio-verify", "job"),
        ["aio0", "aio1", "poll"],
        "{t}: three fio jobs"
    );
    for (k, v) in [
        ("error", "0"),
        ("written_kib", "16384"),
        ("read_kib", "16384"),
    ] {
        assert_eq!(
            nvme::values(&out, "fio-verify", k),
            [v, v, v],
            "{t}: {k} of each job"
        );
    }
}

/// fio's figures (4 KiB random read and write at QD1 and QD32, 128 KiB sequential) against
/// Linux's nvmet and the unikernel's target in the same run, as one table with the ratio, and
/// fio's mean latency per job on both (QD1's is one I/O's round trip).
#[test]
#[ignore = "a benchmark (two TCG Linux guests per target, minutes): figures, not a pass/fail check; run with --ignored, docs/storage-appliance.md"]
fn fio_table_unikernel_vs_linux_nvmet() {
    const T: &str = "fio_table_unikernel_vs_linux_nvmet";
    let Some(linux) = run(T, Target::LinuxNvmet, Scenario::FioPerf) else {
        return;
    };
    assert_connected(T, &linux);
    let l = nvme::fio_figures(&linux);
    assert_eq!(l.len(), 6, "{T}: six fio jobs: {l:?}");
    assert!(l.iter().all(|f| f.iops > 0.0 && f.bw_kib > 0.0), "{l:?}");
    let u = run(
        &format!("{T}_unikernel"),
        Target::Unikernel,
        Scenario::FioPerf,
    )
    .map(|o| nvme::fio_figures(&o))
    .unwrap_or_default();
    let lat = |v: &[nvme::FioFigure], job: &str| {
        v.iter()
            .find(|f| f.job == job)
            .map_or("-".into(), |f| format!("{:.0}", f.lat_us))
    };
    let mut lats = format!(
        "{:<18} {:>16} {:>16}\n",
        "fio job", "unikernel µs", "Linux nvmet µs"
    );
    for f in &l {
        lats.push_str(&format!(
            "{:<18} {:>16} {:>16}\n",
            f.job,
            lat(&u, &f.job),
            lat(&l, &f.job)
        ));
    }
    eprintln!(
        "{T}:\n{}\nmean latency (fio's lat, submission to completion):\n{lats}",
        nvme::fio_table(&u, &l)
    );
}

/// A host killed mid-I/O: its controller is freed after the keep-alive timeout (the target's
/// log says so, and no RC QP is left at the end), and a new host's connection works (the basic
/// scenario, from a second guest on the same link). Linux's target; the unikernel's arm is
/// `unikernel_host_killed_mid_io`.
#[test]
#[ignore = "Linux nvmet-rdma's behaviour, the reference for the unikernel's arm (unikernel_host_killed_mid_io); three TCG Linux guests; run with --ignored"]
fn linux_nvmet_host_killed_mid_io() {
    const T: &str = "linux_nvmet_host_killed_mid_io";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let img = match linux_guest::prepare_nvme_image() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("SKIPPED: {T}: {e}");
            return;
        }
    };
    let work = linux_guest::cache_dir().join("runs").join(T);
    std::fs::create_dir_all(&work).unwrap();
    let sock = work.join("link.sock");
    let _ = std::fs::remove_file(&sock);
    let target = peer::LinuxPeer {
        link: peer::Link::Listen(sock.clone()),
        ip: format!("{}/24", peer::PEER_IP),
        mac: peer::PEER_MAC,
        neigh: None,
        cmd: nvme::TARGET_SCRIPT.into(),
        wait_ping: None,
        delay: None,
        pcap: Some(work.join("link.pcap")),
        timeout: Duration::from_secs(1500),
    };
    let host = |cmd: &str| peer::LinuxPeer {
        link: peer::Link::Connect(sock.clone()),
        ip: format!("{}/24", peer::UNIKERNEL_IP),
        mac: peer::UNIKERNEL_MAC,
        cmd: cmd.into(),
        wait_ping: Some(peer::PEER_IP.into()),
        delay: Some(1),
        pcap: None,
        timeout: Duration::from_secs(900),
        ..target.clone()
    };
    let a = match target.spawn(&img, "A| ", false) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("SKIPPED: {T}: {e}");
            return;
        }
    };
    let mut b1 = host(nvme::KILLED_HOST_SCRIPT)
        .spawn(&img, "B1| ", false)
        .expect("first host");
    let t0 = Instant::now();
    while !b1.saw("RESULT io-running") && !b1.saw("RESULT fail") {
        assert!(
            t0.elapsed() < Duration::from_secs(900),
            "{T}: the first host never got its I/O going"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    let b1 = b1.kill();
    assert!(
        b1.output().contains("RESULT io-running"),
        "{T}: first host:\n{}",
        b1.console
    );
    let b2 = host(&Scenario::Basic.script())
        .spawn(&img, "B2| ", false)
        .expect("second host")
        .finish();
    let a = a.finish();
    let out = b2.output();
    if b2.rc != Some(0) || !nvme::passed(&out, Scenario::Basic) {
        eprintln!(
            "==== target ====\n{}\n==== second host ====\n{}",
            a.console, b2.console
        );
        panic!("{T}: the second host failed: rc {:?}", b2.rc);
    }
    assert_connected(T, &out);
    let log = a.output();
    assert!(
        log.contains("keep-alive timer (5 seconds) expired"),
        "{T}: the target never timed the first host's controller out:\n{log}"
    );
    assert!(
        log.contains("rdma qps after: 0"),
        "{T}: RC QPs left on the target:\n{log}"
    );
    eprintln!(
        "{T}: the target:\n{}",
        log.lines()
            .filter(|l| l.contains("nvmet: ")
                || l.contains("nvmet_rdma: ")
                || (l.starts_with("TARGET: ") && !l.starts_with("TARGET: dmesg")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// One line of the appliance's log about a queue (apps/src/nvmf.rs `line`): `nvmf-target:
/// connect from IP: queue Q of controller C, SUBSYSTEM, host NQN` or `nvmf-target: disconnect
/// from IP: queue Q[ of controller C], WHY`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct QueueLine {
    connect: bool,
    ip: String,
    qid: u16,
    cntlid: Option<u16>,
    /// What follows the controller: the subsystem and host, or why it ended.
    rest: String,
}

/// The appliance's `state:` lines of `log` (connections, controllers, QPs, memory regions),
/// in order: the first is its baseline, printed before it serves.
fn state_lines(log: &str) -> Vec<[usize; 4]> {
    log.lines()
        .filter_map(|l| {
            let l = &l[l.find("nvmf-target: state: ")? + "nvmf-target: state: ".len()..];
            let n: Vec<usize> = l
                .split(", ")
                .filter_map(|w| w.split(' ').next()?.parse().ok())
                .collect();
            n.try_into().ok()
        })
        .collect()
}

/// After the disconnects the target is back at its baseline: no connection, controller, QP or
/// memory region of a queue left. Not `strict`: the QPs of the last disconnects may still be
/// in rdma_cm's TIMEWAIT when the run ends (the basic scenario stops the target when its host
/// is done), so only the other figures must be back.
fn assert_state_back(t: &str, log: &str, strict: bool) {
    let states = state_lines(log);
    let (Some(base), Some(last)) = (states.first(), states.last()) else {
        panic!("{t}: no state line:\n{log}");
    };
    assert_eq!(base[..2], [0, 0], "{t}: baseline {base:?}:\n{log}");
    assert!(
        states.len() > 1,
        "{t}: no state line after a disconnect:\n{log}"
    );
    if strict {
        assert_eq!(last, base, "{t}: state left after the disconnects:\n{log}");
        return;
    }
    assert_eq!(
        [last[0], last[1], last[3]],
        [base[0], base[1], base[3]],
        "{t}: connections, controllers or regions left at the end:\n{log}"
    );
}

/// The appliance's queue lines of `log`, in order.
fn queue_lines(log: &str) -> Vec<QueueLine> {
    log.lines()
        .filter_map(|l| {
            let l = &l[l.find("nvmf-target: ")? + "nvmf-target: ".len()..];
            let (kind, l) = l.split_once(" from ")?;
            let connect = match kind {
                "connect" => true,
                "disconnect" => false,
                _ => return None,
            };
            let (ip, l) = l.split_once(": queue ")?;
            let (head, rest) = l.split_once(", ")?;
            let (qid, cntlid) = match head.split_once(" of controller ") {
                Some((q, c)) => (q, Some(c.parse().ok()?)),
                None => (head, None),
            };
            Some(QueueLine {
                connect,
                ip: ip.into(),
                qid: qid.parse().ok()?,
                cntlid,
                rest: rest.trim_end().into(),
            })
        })
        .collect()
}

/// Why the appliance says a queue ended when the core tore its controller down (apps/src/nvmf.rs
/// `line`, nvmf-rdma's `Why::Controller`).
const CONTROLLER_GONE: &str = "controller gone (keep-alive timeout or fatal error)";

/// Waits until `done` holds for the target's console (polled every 200 ms); fails the test,
/// with that console, once `limit` has passed since `since` (`what` says what was still so)
/// or the target has ended.
fn wait_until(
    t: &str,
    uk: &mut peer::Serving,
    since: Instant,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&str) -> bool,
) {
    while !done(uk.console()) {
        assert!(
            since.elapsed() < limit,
            "{t}: {what} after {} s:\n{}",
            limit.as_secs(),
            uk.console()
        );
        assert!(
            uk.try_wait().is_none(),
            "{t}: the target ended:\n{}",
            uk.console()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The unikernel's arm of `linux_nvmet_host_killed_mid_io`: one `nvmf-target`, two Linux hosts
/// one after the other on its wire. The first connects and writes with fio until its guest is
/// killed; the target tears every queue of that host's controller down after the keep-alive
/// timeout (its log says so for each queue) with no host left to disconnect them; only then
/// does the second host boot, and it passes the basic scenario on the same wire, the same
/// address and the same host NQN. At the end no queue is left on the target.
#[test]
fn unikernel_host_killed_mid_io() {
    const T: &str = "unikernel_host_killed_mid_io";
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let work = linux_guest::cache_dir().join("runs").join(T);
    if let Err(e) = std::fs::create_dir_all(&work) {
        eprintln!("SKIPPED: {T}: {}: {e}", work.display());
        return;
    }
    let host = |cmd: String, pcap: &str| peer::PeerRun {
        cmd,
        role: peer::Role::Client,
        pcap: Some(work.join(pcap)),
        static_neigh: false,
        unikernel: unikernel::Options {
            app: Some("nvmf-target".into()),
            cmdline: UNIKERNEL_CMDLINE.into(),
            memory: UNIKERNEL_MEMORY.into(),
            ..Default::default()
        },
        timeout: Duration::from_secs(900),
    };
    let first = host(
        format!("{} $SERVER", nvme::KILLED_HOST_SCRIPT),
        "host1.pcap",
    );
    let mut uk = match peer::Serving::start(&first) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIPPED: {T}: {e}");
            return;
        }
    };
    let t0 = Instant::now();
    let mut b1 = uk.join(&first, "B1| ").expect("first host");
    let limit = Duration::from_secs(900);
    wait_until(
        T,
        &mut uk,
        t0,
        limit,
        "the first host's I/O not going",
        |_| b1.saw("RESULT io-running") || b1.saw("RESULT fail"),
    );
    let running = t0.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    let b1 = b1.kill();
    let killed = Instant::now();
    let out1 = b1.output();
    assert!(
        out1.contains("RESULT io-running"),
        "{T}: first host:\n{}\n==== target ====\n{}",
        b1.console,
        uk.console()
    );
    let cntlid: u16 = nvme::field(&out1, "connect", "cntlid")
        .and_then(|c| c.parse().ok())
        .expect("the first host's controller ID");
    let queues: usize = nvme::field(&out1, "connect", "queues")
        .and_then(|q| q.parse().ok())
        .expect("the first host's queue count");

    // Every queue of the first host's controller is torn down by the target alone.
    // From its first queue's connect on (a discovery controller before it may have had the
    // same ID).
    let of_first = |l: &QueueLine| l.ip == peer::PEER_IP && l.cntlid == Some(cntlid);
    let limit = Duration::from_secs(120);
    let what = format!("controller {cntlid}'s queues still there after its host was killed");
    wait_until(T, &mut uk, killed, limit, &what, |log| {
        let mut lines = queue_lines(log);
        let from = lines
            .iter()
            .position(|l| l.connect && of_first(l) && l.rest.starts_with(SUBSYS_NQN))
            .unwrap_or(lines.len());
        let lines = lines.split_off(from);
        let connected: Vec<u16> = lines
            .iter()
            .filter(|l| l.connect && of_first(l))
            .map(|l| l.qid)
            .collect();
        let ended: Vec<&QueueLine> = lines.iter().filter(|l| !l.connect && of_first(l)).collect();
        assert_eq!(
            connected.len(),
            queues,
            "{T}: the target's connects of controller {cntlid} (the host has {queues} queues):\n{log}"
        );
        if let Some(l) = ended.iter().find(|l| l.rest != CONTROLLER_GONE) {
            panic!("{T}: {l:?} ended otherwise than by its controller's teardown:\n{log}");
        }
        connected.iter().all(|q| ended.iter().any(|l| l.qid == *q))
    });
    let freed = killed.elapsed();
    let before_second = queue_lines(uk.console()).len();

    let second = host(
        format!("{} $SERVER", Scenario::Basic.script()),
        "host2.pcap",
    );
    let b2 = uk.join(&second, "B2| ").expect("second host").finish();
    let out = b2.output();
    if b2.rc != Some(0) || !nvme::passed(&out, Scenario::Basic) {
        panic!(
            "{T}: the second host failed: rc {:?} (timed out: {}), last result: {:?}\n==== target ====\n{}\n==== second host ====\n{}",
            b2.rc,
            b2.timed_out,
            out.lines().rev().find(|l| l.starts_with("RESULT ")),
            uk.console(),
            b2.console
        );
    }
    assert_basic(T, &out);
    assert!(
        uk.try_wait().is_none(),
        "{T}: the target ended:\n{}",
        uk.console()
    );
    // Every QP and region of both hosts' queues gone (the QPs once out of TIMEWAIT).
    let what = "the target's state back at its baseline";
    let limit = Duration::from_secs(120);
    wait_until(T, &mut uk, Instant::now(), limit, what, |log| {
        let s = state_lines(log);
        s.len() > 1 && s.first() == s.last()
    });
    let log = uk.finish();
    assert_state_back(T, &log, true);
    let lines = queue_lines(&log);
    // The second host's queues all came after the first controller's teardown, and every queue
    // the target had (both hosts', discovery's too) ended: none is left.
    assert!(
        lines[before_second..].iter().any(|l| l.connect),
        "{T}: no connect from the second host:\n{log}"
    );
    for c in lines.iter().filter(|l| l.connect) {
        let n = |connect: bool| {
            lines
                .iter()
                .filter(|d| {
                    d.connect == connect && (&d.ip, d.qid, d.cntlid) == (&c.ip, c.qid, c.cntlid)
                })
                .count()
        };
        assert_eq!(
            n(true),
            n(false),
            "{T}: queue {} of controller {:?} left on the target:\n{log}",
            c.qid,
            c.cntlid
        );
    }
    eprintln!(
        "{T}: the first host's I/O ran {:.0} s after its boot; controller {cntlid}'s {queues} queues freed {:.1} s after its host was killed; the second host passed in {:.0} s; the target:\n{}",
        running.as_secs_f64(),
        freed.as_secs_f64(),
        b2.wall.as_secs_f64(),
        log.lines()
            .filter(|l| l.contains("nvmf-target: "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
