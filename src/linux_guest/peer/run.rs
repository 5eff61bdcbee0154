//! `--peer linux`: the unikernel with the emulated HCA against a Linux peer ([`run_linux_peer`]),
//! the Linux command mapped to the unikernel app ([`app_for`]) and the command line ([`cli`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{
    fmt_mac, Link, LinuxPeer, PeerOutcome, Serving, PEER_IP, PEER_MAC, UNIKERNEL_IP, UNIKERNEL_MAC,
};
use crate::linux_guest::{skip, Skip};

/// Which side Linux plays (`--peer-role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// What `--peer linux` runs.
#[derive(Clone, Debug)]
pub struct PeerRun {
    /// The command Linux runs (`--peer-cmd`), e.g. `ib_write_bw -d rxe0 -x $GID -F`. As a client
    /// it names the unikernel as its server: `$SERVER` ([`UNIKERNEL_IP`]).
    pub cmd: String,
    pub role: Role,
    /// `--peer-pcap`: the link, both directions (QEMU filter-dump on Linux's NIC).
    pub pcap: Option<PathBuf>,
    /// `--peer-neigh`: static neighbour entries on both sides (Linux's permanent entry for the
    /// unikernel, the app's `neigh=` for Linux: its QP's MAC, not asked by ARP).
    pub static_neigh: bool,
    /// The unikernel's options: `--cmdline` (the app's, e.g. `pingpong -s 4096`; derived from
    /// the peer command when empty), `--app` (derived likewise), the HCA's extra arguments.
    pub unikernel: crate::Options,
    /// For the whole run.
    pub timeout: Duration,
}

/// How a `--peer linux` run ended.
#[derive(Debug)]
pub struct PeerRunResult {
    pub linux: PeerOutcome,
    pub unikernel: crate::Verdict,
    /// The unikernel ran a service ([`is_service`]) that was still serving when Linux's command
    /// had ended, and the launcher stopped it (its verdict is then `TimedOut`).
    pub service_stopped: bool,
    pub unikernel_output: String,
    pub wall: Duration,
}

impl PeerRunResult {
    /// Both sides succeeded: Linux's command exited 0, and the unikernel's app exited 0 or was
    /// a service still serving when Linux was done.
    pub fn ok(&self) -> bool {
        self.linux.rc == Some(0)
            && (self.unikernel == crate::Verdict::Exited(0) || self.service_stopped)
    }
}

/// Unikernel apps that serve until they are stopped: `netd` (ARP, ping, a TCP echo) and
/// `nvmf-target` (the NVMe-oF storage appliance).
const SERVICES: [&str; 2] = ["netd", "nvmf-target"];

/// Whether `app` serves until stopped (the launcher stops it once Linux's command ended).
pub fn is_service(app: &str) -> bool {
    SERVICES.contains(&app)
}

/// The unikernel app and its cmdline words for a Linux command: `ibv_rc_pingpong ...` ->
/// `pingpong ...`, `ibv_ud_pingpong ...` -> `ud-pingpong ...`, `ib_write_bw ...` (with or
/// without `-R`) -> `perftest ib_write_bw ...`, `ping ...` and `nc ...` -> `netd`. The device,
/// GID and server words are the tool's own and stay; the apps ignore them. `$SERVER` (or the
/// unikernel's address) is not for the app.
///
/// The rdma_cm examples get the command line of their other side: `rping` with `-s` and `-c`
/// swapped (`-a` names the server in both roles, `$SERVER` becomes the unikernel's address);
/// `ucmatose` and `udaddy` without `-s ADDR` (cmatose.c and udaddy.c: the server address makes
/// the client; the unikernel serves).
pub fn app_for(cmd: &str) -> Result<(String, String), Skip> {
    let mut w = cmd.split_whitespace();
    let tool = w.next().ok_or_else(|| skip("--peer-cmd is empty"))?;
    let tool = tool.rsplit('/').next().unwrap_or(tool);
    let words: Vec<&str> = w.collect();
    let rest: Vec<&str> = words
        .iter()
        .copied()
        .filter(|x| *x != "$SERVER" && *x != UNIKERNEL_IP)
        .collect();
    let rest = rest.join(" ");
    match tool {
        "ibv_rc_pingpong" => Ok(("pingpong".into(), format!("pingpong {rest}"))),
        "ibv_ud_pingpong" => Ok(("ud-pingpong".into(), format!("ud-pingpong {rest}"))),
        t if t.starts_with("ib_") && (t.ends_with("_bw") || t.ends_with("_lat")) => {
            Ok(("perftest".into(), format!("perftest {t} {rest}")))
        }
        "rping" => {
            let swapped: Vec<&str> = words
                .iter()
                .map(|x| match *x {
                    "-s" => "-c",
                    "-c" => "-s",
                    "$SERVER" => UNIKERNEL_IP,
                    x => x,
                })
                .collect();
            Ok(("rping".into(), format!("rping {}", swapped.join(" "))))
        }
        "ucmatose" | "udaddy" => {
            let mut kept = Vec::new();
            let mut it = words.iter().copied();
            while let Some(x) = it.next() {
                if x == "-s" {
                    it.next();
                } else {
                    kept.push(x);
                }
            }
            Ok((tool.into(), format!("{tool} {}", kept.join(" "))))
        }
        "ping" | "nc" => Ok(("netd".into(), "netd".into())),
        t => Err(skip(format!(
            "no unikernel app plays the other side of {t} (ibv_rc_pingpong, ibv_ud_pingpong, \
             ib_*_bw, ib_*_lat, rping, ucmatose, udaddy, ping, nc)"
        ))),
    }
}

/// Whether the Linux command connects with rdma_cm (`rping`, `ucmatose`, `udaddy`, a perftest
/// tool with `-R`): CM MADs on QP 1 and no TCP exchange on the link.
pub fn uses_rdma_cm(cmd: &str) -> bool {
    let mut w = cmd.split_whitespace();
    let tool = w.next().unwrap_or_default();
    let tool = tool.rsplit('/').next().unwrap_or(tool);
    matches!(tool, "rping" | "ucmatose" | "udaddy")
        || (tool.starts_with("ib_") && w.any(|x| x == "-R" || x == "--rdma_cm"))
}

/// The unikernel's app and its whole cmdline: the app's words (from `--cmdline`, else from
/// [`app_for`]), its role, address and peer (`role=... ip=10.0.0.2/24 peer=10.0.0.1`), and
/// with `--peer-neigh` its static neighbour (`neigh=10.0.0.1,MAC`).
pub fn unikernel_cmdline(run: &PeerRun) -> Result<(String, String), Skip> {
    let o = &run.unikernel;
    let (app, args) = if o.cmdline.trim().is_empty() || o.app.is_none() {
        let (a, c) = app_for(&run.cmd)?;
        let c = if o.cmdline.trim().is_empty() {
            c
        } else {
            o.cmdline.clone()
        };
        (o.app.clone().unwrap_or(a), c)
    } else {
        (o.app.clone().unwrap_or_default(), o.cmdline.clone())
    };
    let uk_role = match run.role {
        Role::Server if is_service(&app) => {
            return Err(skip(format!(
                "{app} only serves: Linux must be the client (--peer-role client)"
            )))
        }
        Role::Server => "client",
        Role::Client => "server",
    };
    let mut cmdline = format!("{args} role={uk_role} ip={UNIKERNEL_IP}/24 peer={PEER_IP}");
    if run.static_neigh {
        cmdline.push_str(&format!(" neigh={PEER_IP},{}", fmt_mac(&PEER_MAC)));
    }
    Ok((app, cmdline))
}

/// Linux's side of a run: its one NIC on the HCA's wire socket; as a client it waits until the
/// unikernel answers ping (its app listens before its stack answers anything), and it has a
/// permanent neighbour entry for the unikernel only with `--peer-neigh`.
pub fn linux_side(run: &PeerRun, wire: PathBuf) -> LinuxPeer {
    LinuxPeer {
        link: Link::Connect(wire),
        ip: format!("{PEER_IP}/24"),
        mac: PEER_MAC,
        neigh: run
            .static_neigh
            .then(|| (UNIKERNEL_IP.to_string(), UNIKERNEL_MAC)),
        cmd: run.cmd.replace("$SERVER", UNIKERNEL_IP),
        wait_ping: (run.role == Role::Client).then(|| UNIKERNEL_IP.to_string()),
        delay: None,
        pcap: run.pcap.clone(),
        timeout: run.timeout,
    }
}

/// How long the unikernel may run on once Linux has powered off: a service is stopped at once;
/// after Linux's command succeeded the app may still be checking its data, closing its TCP
/// connection (its FIN is never acknowledged by a Linux that is gone, so the close waits out its
/// deadline) and tearing down: 30 s; after a failure, 5 s.
fn unikernel_grace(service: bool, linux_ok: bool) -> Duration {
    Duration::from_secs(match (service, linux_ok) {
        (true, _) => 1,
        (false, true) => 30,
        (false, false) => 5,
    })
}

/// `cargo run -- --peer linux`: Linux (TCG) with rxe on one end of the link, the unikernel
/// (KVM) with the emulated HCA on the other; the two find each other by ARP and the tools swap
/// their endpoints over TCP on that link, as between two hosts. Prints both sides' output
/// (`linux| `, `unikernel| `) when `echo`.
pub fn run_linux_peer(run: &PeerRun) -> Result<PeerRunResult, Skip> {
    let t0 = Instant::now();
    let mut uk = Serving::start(run)?;
    let service = is_service(&uk.app);
    let mut lx = uk.join(run, "linux| ")?;
    // Wait for the unikernel; once it is done, Linux gets a grace period to finish.
    let waiting = crate::progress::Step::start("waiting for Linux (TCG) and the unikernel");
    let uk_deadline = Instant::now() + run.timeout;
    let mut linux_gone: Option<Instant> = None;
    let mut service_stopped = false;
    let status = loop {
        if let Some(st) = uk.try_wait() {
            break Some(st);
        }
        // Linux ended (or its QEMU failed): the unikernel gets a while to finish, then is
        // stopped (a service at once: it serves until stopped).
        if linux_gone.is_none() && lx.child.try_wait().ok().flatten().is_some() {
            linux_gone = Some(Instant::now());
        }
        let grace = unikernel_grace(service, lx.saw("PEER: CMD_EXIT rc=0 "));
        let gone_long = linux_gone.is_some_and(|t| t.elapsed() > grace);
        if Instant::now() >= uk_deadline || gone_long {
            uk.kill();
            service_stopped = service && gone_long;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Linux prints its counters and powers off by itself once its command ends.
    let uk_ok = service_stopped
        || status
            .is_some_and(|st| crate::decode_exit(st, "app: exit=0") == crate::Verdict::Exited(0));
    lx.timeout = lx.start.elapsed() + Duration::from_secs(if uk_ok { 60 } else { 4 });
    let linux_out = lx.finish();
    drop(waiting);
    let uk_out = uk.finish();
    let verdict = match status {
        Some(st) => crate::decode_exit(st, &uk_out),
        None => crate::Verdict::TimedOut,
    };
    Ok(PeerRunResult {
        linux: linux_out,
        unikernel: verdict,
        service_stopped,
        unikernel_output: uk_out,
        wall: t0.elapsed(),
    })
}

/// `cargo run -- --peer linux --peer-cmd CMD [--peer-role R] [--peer-pcap FILE]`: runs it,
/// prints both sides' output (as it comes, unless `-q`) and one verdict; the exit status is 0
/// only when both sides succeeded.
pub fn cli(o: &crate::Options) -> i32 {
    let run = PeerRun {
        cmd: o.peer_cmd.clone().unwrap_or_default(),
        role: if o.peer_client {
            Role::Client
        } else {
            Role::Server
        },
        pcap: o.peer_pcap.clone(),
        static_neigh: o.peer_neigh,
        unikernel: o.clone(),
        timeout: o.timeout,
    };
    match run_linux_peer(&run) {
        Ok(r) => {
            if !o.echo {
                println!(
                    "==== Linux ====\n{}==== unikernel ====\n{}",
                    r.linux.output(),
                    r.unikernel_output
                );
            }
            let linux = match (r.linux.rc, r.linux.timed_out) {
                (Some(0), _) => "ok".to_string(),
                (Some(rc), _) => format!("its command exited with {rc}"),
                (None, true) => "timed out".into(),
                (None, false) => "ended before its command did".into(),
            };
            let uk = match &r.unikernel {
                crate::Verdict::Exited(0) => "ok".to_string(),
                _ if r.service_stopped => "served until stopped".to_string(),
                v => format!("{v:?}"),
            };
            eprintln!(
                "launcher: Linux {linux}; unikernel {uk}; {:.1} s: {}",
                r.wall.as_secs_f64(),
                if r.ok() { "PASSED" } else { "FAILED" }
            );
            if r.ok() {
                0
            } else if r.unikernel != crate::Verdict::Exited(0) && !r.service_stopped {
                r.unikernel.exit_status().max(1)
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("launcher: --peer linux: {e}");
            crate::status::USAGE
        }
    }
}
