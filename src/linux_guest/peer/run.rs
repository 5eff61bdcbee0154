//! `--peer linux`: the unikernel with the emulated HCA against a Linux peer ([`run_linux_peer`]),
//! the Linux tool command mapped to the unikernel app ([`app_for`]) and the command line ([`cli`]).

use std::fs;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::relay::{tcp_pipe, uk_lines};
use super::{
    fmt_mac, Link, LinuxPeer, PeerOutcome, OOB_PORT, PEER_IP, PEER_MAC, SERVER_IP, UNIKERNEL_IP,
    UNIKERNEL_MAC,
};
use crate::linux_guest::{cache_dir, prepare_peer_image, skip, Skip};

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
    /// it names the launcher as its server: `$SERVER` ([`SERVER_IP`]).
    pub cmd: String,
    pub role: Role,
    /// `--peer-pcap`: the link, both directions (QEMU filter-dump on Linux's RoCE NIC).
    pub pcap: Option<PathBuf>,
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
    pub unikernel_output: String,
    pub wall: Duration,
}

impl PeerRunResult {
    /// Both sides succeeded.
    pub fn ok(&self) -> bool {
        self.linux.rc == Some(0) && self.unikernel == crate::Verdict::Exited(0)
    }
}

/// The unikernel app and its cmdline words for a Linux tool command: `ibv_rc_pingpong ...` ->
/// `pingpong ...`, `ib_write_bw ...` -> `perftest ib_write_bw ...`. The device, GID and server
/// words are the tool's own and stay; the apps ignore them.
pub fn app_for(cmd: &str) -> Result<(String, String), Skip> {
    let mut w = cmd.split_whitespace();
    let tool = w.next().ok_or_else(|| skip("--peer-cmd is empty"))?;
    let tool = tool.rsplit('/').next().unwrap_or(tool);
    // A server name (the launcher's address) is not for the app.
    let rest: Vec<&str> = w
        .filter(|x| !x.starts_with("10.0.2.") && *x != "$SERVER")
        .collect();
    let rest = rest.join(" ");
    match tool {
        "ibv_rc_pingpong" => Ok(("pingpong".into(), format!("pingpong {rest}"))),
        t if t.starts_with("ib_") && (t.ends_with("_bw") || t.ends_with("_lat")) => {
            Ok(("perftest".into(), format!("perftest {t} {rest}")))
        }
        t => Err(skip(format!(
            "no unikernel app plays the other side of {t} (ibv_rc_pingpong, ib_*_bw, ib_*_lat)"
        ))),
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released).
fn free_port() -> Result<u16, Skip> {
    // Ports handed out by this process: tests run peers in parallel, and a port released by
    // one run must not go to another before QEMU's hostfwd binds it.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..64 {
        let l =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| skip(format!("bind: {e}")))?;
        let port = l
            .local_addr()
            .map(|a| a.port())
            .map_err(|e| skip(format!("bind: {e}")))?;
        if !given.contains(&port) {
            given.push(port);
            return Ok(port);
        }
    }
    Err(skip("no free TCP port for the out-of-band exchange"))
}

/// `cargo run -- --peer linux`: Linux (TCG) with rxe on one end of a RoCEv2 link, the unikernel
/// (KVM) with the emulated HCA on the other, the tools' TCP exchange piped through the
/// launcher. Prints both sides' output (`linux| `, `unikernel| `) when `echo`.
pub fn run_linux_peer(run: &PeerRun) -> Result<PeerRunResult, Skip> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let t0 = Instant::now();
    let echo = run.unikernel.echo;
    let image = {
        let _step = crate::progress::Step::start("preparing the Linux peer image");
        prepare_peer_image()?
    };
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let work = cache_dir()
        .join("runs")
        .join(format!("peer-{}-{n}", std::process::id()));
    fs::create_dir_all(&work).map_err(|e| skip(format!("{}: {e}", work.display())))?;
    let wire = work.join("wire.sock");
    let _ = fs::remove_file(&wire);

    // The unikernel: its app, role and identity; its HCA listens on the link.
    let (app, args) = if run.unikernel.cmdline.trim().is_empty() || run.unikernel.app.is_none() {
        let (a, c) = app_for(&run.cmd)?;
        let c = if run.unikernel.cmdline.trim().is_empty() {
            c
        } else {
            run.unikernel.cmdline.clone()
        };
        (run.unikernel.app.clone().unwrap_or(a), c)
    } else {
        (
            run.unikernel.app.clone().unwrap_or_default(),
            run.unikernel.cmdline.clone(),
        )
    };
    let uk_role = match run.role {
        Role::Server => "client",
        Role::Client => "server",
    };
    let mut hca_args = run.unikernel.hca_args.clone();
    hca_args.extend([
        "--wire-listen".into(),
        format!("unix:{}", wire.display()),
        "--mac".into(),
        fmt_mac(&UNIKERNEL_MAC),
    ]);
    let opts = crate::Options {
        app: Some(app),
        cmdline: format!(
            "{args} role={uk_role} ip={UNIKERNEL_IP}/24 mac={} peer_mac={}",
            fmt_mac(&UNIKERNEL_MAC),
            fmt_mac(&PEER_MAC)
        ),
        hca: Some(crate::Hca::Sim),
        hca_args,
        memory: if run.unikernel.memory == crate::Options::default().memory {
            "1G".into()
        } else {
            run.unikernel.memory.clone()
        },
        timeout: run.timeout,
        ..run.unikernel.clone()
    };
    let mut prepared = crate::prepare(&opts).map_err(|e| skip(format!("the unikernel: {e}")))?;

    // The TCP exchange: Linux listens behind hostfwd, or connects to $SERVER:18515, which
    // guestfwd hands to the launcher's listener.
    // Linux as client: the launcher's listener holds its port from the start (no window in
    // which another run could take it); as server: QEMU's hostfwd binds a port given once.
    let (port, listener) = match run.role {
        Role::Client => {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0))
                .map_err(|e| skip(format!("listen on 127.0.0.1: {e}")))?;
            l.set_nonblocking(true)
                .map_err(|e| skip(format!("listener: {e}")))?;
            let port = l
                .local_addr()
                .map(|a| a.port())
                .map_err(|e| skip(format!("listener: {e}")))?;
            (port, Some(l))
        }
        Role::Server => (free_port()?, None),
    };
    let user_net = match run.role {
        Role::Server => format!("hostfwd=tcp:127.0.0.1:{port}-:{OOB_PORT}"),
        Role::Client => format!("guestfwd=tcp:{SERVER_IP}:{OOB_PORT}-tcp:127.0.0.1:{port}"),
    };
    let linux = LinuxPeer {
        link: Link::Connect(wire.clone()),
        ip: format!("{PEER_IP}/24"),
        mac: PEER_MAC,
        neigh: Some((UNIKERNEL_IP.into(), UNIKERNEL_MAC)),
        cmd: run.cmd.replace("$SERVER", SERVER_IP),
        wait_ping: None,
        delay: None,
        user_net: Some(user_net),
        pcap: run.pcap.clone(),
        timeout: run.timeout,
    };

    // The unikernel first: its HCA's listener must exist before Linux's QEMU connects.
    let mut uk = prepared
        .cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| skip(format!("starting QEMU for the unikernel: {e}")))?;
    let to_uk = Arc::new(Mutex::new(uk.stdin.take()));
    let uk_ready = Arc::new(AtomicBool::new(false));
    let (tx_tcp, rx_tcp) = mpsc::channel::<Vec<u8>>();
    let (tx_out, rx_out) = mpsc::channel::<String>();
    let readers = vec![
        uk_lines(
            uk.stdout.take().expect("piped"),
            tx_out.clone(),
            Some((tx_tcp, uk_ready.clone())),
            echo,
        ),
        uk_lines(uk.stderr.take().expect("piped"), tx_out.clone(), None, echo),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    while !wire.exists() {
        if Instant::now() > deadline || uk.try_wait().ok().flatten().is_some() {
            let _ = uk.kill();
            let _ = uk.wait();
            let out: String = rx_out.try_iter().collect();
            return Err(skip(format!(
                "the emulated HCA never listened on {} (an mlx5-sim without RoCEv2 frames?):\n{out}",
                wire.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let pipe = {
        let (stop, to_uk, log, ready) = (
            stop.clone(),
            to_uk.clone(),
            tx_out.clone(),
            uk_ready.clone(),
        );
        let role = run.role;
        std::thread::spawn(move || tcp_pipe(role, port, listener, rx_tcp, to_uk, ready, stop, log))
    };
    let lx = match linux.spawn(&image, "linux| ", echo) {
        Ok(l) => l,
        Err(e) => {
            let _ = uk.kill();
            let _ = uk.wait();
            stop.store(true, Ordering::Relaxed);
            let _ = pipe.join();
            return Err(e);
        }
    };
    // Wait for the unikernel; once it is done, Linux gets a grace period to finish.
    let waiting = crate::progress::Step::start("waiting for Linux (TCG) and the unikernel");
    let uk_deadline = Instant::now() + run.timeout;
    let mut mut_lx = lx;
    let mut linux_gone: Option<Instant> = None;
    let status = loop {
        if let Ok(Some(st)) = uk.try_wait() {
            break Some(st);
        }
        // Linux ended (or its QEMU failed): the unikernel gets a few seconds, then is stopped.
        if linux_gone.is_none() && mut_lx.child.try_wait().ok().flatten().is_some() {
            linux_gone = Some(Instant::now());
        }
        let gone_long = linux_gone.is_some_and(|t| t.elapsed() > Duration::from_secs(5));
        if Instant::now() >= uk_deadline || gone_long {
            let _ = uk.kill();
            let _ = uk.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for r in readers {
        let _ = r.join();
    }
    // Linux prints its counters and powers off by itself once its command ends.
    let mut lx = mut_lx;
    let uk_ok =
        status.is_some_and(|st| crate::decode_exit(st, "app: exit=0") == crate::Verdict::Exited(0));
    lx.timeout = lx.start.elapsed() + Duration::from_secs(if uk_ok { 60 } else { 4 });
    let linux_out = lx.finish();
    drop(waiting);
    stop.store(true, Ordering::Relaxed);
    let _ = pipe.join();
    prepared.cleanup();
    let uk_out: String = rx_out.try_iter().collect();
    let verdict = match status {
        Some(st) => crate::decode_exit(st, &uk_out),
        None => crate::Verdict::TimedOut,
    };
    Ok(PeerRunResult {
        linux: linux_out,
        unikernel: verdict,
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
                v => format!("{v:?}"),
            };
            eprintln!(
                "launcher: Linux {linux}; unikernel {uk}; {:.1} s: {}",
                r.wall.as_secs_f64(),
                if r.ok() { "PASSED" } else { "FAILED" }
            );
            if r.ok() {
                0
            } else if r.unikernel != crate::Verdict::Exited(0) {
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
