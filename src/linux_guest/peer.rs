//! The Linux RDMA peer (the launcher's `--peer linux`, tests/linux_peer.rs): a Linux soft-RoCE
//! (rdma_rxe) peer against the unikernel.
//!
//! - [`LinuxPeer`]: boots the peer image ([`super::prepare_peer_image`]) under TCG with its
//!   RoCE NIC (eth0, virtio-net) on a QEMU `-netdev stream` socket and, optionally, a second
//!   NIC (eth1) on QEMU user networking for the tools' out-of-band TCP exchange.
//! - [`run_linux_peer`] (the launcher's `--peer linux`): the peer, the unikernel with the
//!   emulated HCA whose port is plugged into the peer's stream socket, and a dumb pipe between
//!   the peer's TCP exchange and the unikernel's serial console.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{skip, stock_qemu, PeerImage, Skip};

/// The peer's RoCE MAC when the caller names none.
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The peer's RoCE address when the caller names none.
pub const PEER_IP: &str = "10.0.0.1";
/// The unikernel's RoCE address and MAC (its `ip=` / `mac=`).
pub const UNIKERNEL_IP: &str = "10.0.0.2";
pub const UNIKERNEL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// The TCP port of rc_pingpong and perftest (both default to 18515).
pub const OOB_PORT: u16 = 18515;
/// eth1's address on QEMU user networking.
pub const USER_NET_IP: &str = "10.0.2.15/24";
/// The server address of a Linux client (`$SERVER` in `--peer-cmd`): a `guestfwd` to the
/// launcher's listener. (QEMU refuses a guest forward on the host alias 10.0.2.2: "Conflicting
/// host:port in guest forwarding rule".)
pub const SERVER_IP: &str = "10.0.2.100";

pub fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Which end of the stream link QEMU plays.
#[derive(Clone, Debug)]
pub enum Link {
    /// QEMU listens on this UNIX socket (`server=on`).
    Listen(PathBuf),
    /// QEMU connects to it, retrying every 500 ms (`server=off,reconnect-ms=500`).
    Connect(PathBuf),
}

/// One Linux peer boot.
#[derive(Clone, Debug)]
pub struct LinuxPeer {
    pub link: Link,
    /// eth0's address with prefix, e.g. `10.0.0.1/24`.
    pub ip: String,
    pub mac: [u8; 6],
    /// A permanent neighbour entry: (IP, MAC).
    pub neigh: Option<(String, [u8; 6])>,
    /// The command (`sh -c`; `$GID`, `$RXE`, `$PEER_IP` are set). No double quotes.
    pub cmd: String,
    /// Wait until this address answers ping before the command.
    pub wait_ping: Option<String>,
    /// Seconds to sleep before the command.
    pub delay: Option<u32>,
    /// A second NIC on user networking with these extra options (e.g. `hostfwd=...`).
    pub user_net: Option<String>,
    /// `filter-dump` of the stream NIC, both directions.
    pub pcap: Option<PathBuf>,
    pub timeout: Duration,
}

impl LinuxPeer {
    /// The kernel command line.
    pub fn append(&self) -> Result<String, Skip> {
        if self.cmd.contains('"') {
            return Err(skip("the peer command must not contain double quotes"));
        }
        let mut a = String::from("console=ttyS0,115200 panic=-1 quiet loglevel=4");
        a.push_str(&format!(" peer_ip={}", self.ip));
        if let Some((ip, mac)) = &self.neigh {
            a.push_str(&format!(" peer_neigh={ip},{}", fmt_mac(mac)));
        }
        if self.user_net.is_some() {
            a.push_str(&format!(" peer_eth1={USER_NET_IP}"));
        }
        if let Some(p) = &self.wait_ping {
            a.push_str(&format!(" peer_wait_ping={p}"));
        }
        if let Some(d) = self.delay {
            a.push_str(&format!(" peer_delay={d}"));
        }
        a.push_str(&format!(" peer_cmd=\"{}\"", self.cmd));
        Ok(a)
    }

    /// The QEMU command line (TCG: this host's KVM cannot run Linux).
    pub fn command(&self, qemu: &Path, image: &PeerImage) -> Result<Command, Skip> {
        let mut c = Command::new(qemu);
        c.args([
            "-accel", "tcg", "-machine", "q35", "-cpu", "max", "-smp", "1", "-m", "512M",
        ])
        .args([
            "-nodefaults",
            "-nographic",
            "-monitor",
            "none",
            "-no-reboot",
        ])
        .args(["-serial", "stdio"])
        .arg("-kernel")
        .arg(&image.kernel.vmlinuz)
        .arg("-initrd")
        .arg(&image.initrd)
        .arg("-append")
        .arg(self.append()?);
        let netdev = match &self.link {
            Link::Listen(p) => format!(
                "stream,id=n0,server=on,addr.type=unix,addr.path={}",
                p.display()
            ),
            Link::Connect(p) => format!(
                "stream,id=n0,server=off,addr.type=unix,addr.path={},reconnect-ms=500",
                p.display()
            ),
        };
        c.arg("-netdev").arg(netdev);
        c.arg("-device").arg(format!(
            "virtio-net-pci,netdev=n0,mac={},addr=0x3,romfile=",
            fmt_mac(&self.mac)
        ));
        if let Some(pcap) = &self.pcap {
            c.arg("-object").arg(format!(
                "filter-dump,id=f0,netdev=n0,file={}",
                pcap.display()
            ));
        }
        if let Some(u) = &self.user_net {
            let mut m = self.mac;
            m[4] = 0xff;
            let opts = if u.is_empty() {
                String::new()
            } else {
                format!(",{u}")
            };
            c.arg("-netdev").arg(format!("user,id=u0,ipv6=off{opts}"));
            c.arg("-device").arg(format!(
                "virtio-net-pci,netdev=u0,mac={},addr=0x4,romfile=",
                fmt_mac(&m)
            ));
        }
        Ok(c)
    }

    /// Starts the guest; its console lines go to `out` (and to stdout with `tag` when `echo`).
    pub fn spawn(&self, image: &PeerImage, tag: &'static str, echo: bool) -> Result<Running, Skip> {
        let qemu = stock_qemu()?;
        let mut cmd = self.command(&qemu, image)?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| skip(format!("starting {}: {e}", qemu.display())))?;
        let (tx, rx) = mpsc::channel();
        let readers = vec![
            lines(child.stdout.take().expect("piped"), tx.clone(), tag, echo),
            lines(child.stderr.take().expect("piped"), tx, tag, echo),
        ];
        Ok(Running {
            child,
            rx,
            readers,
            start: Instant::now(),
            timeout: self.timeout,
            seen: String::new(),
        })
    }
}

fn lines(
    src: impl Read + Send + 'static,
    tx: mpsc::Sender<String>,
    tag: &'static str,
    echo: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        while r
            .read_until(b'\n', &mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            let text = String::from_utf8_lossy(&line).replace('\r', "");
            if echo {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(format!("{tag}{text}").as_bytes());
                let _ = o.flush();
            }
            let _ = tx.send(text);
            line.clear();
        }
    })
}

/// A booted peer.
pub struct Running {
    child: Child,
    rx: mpsc::Receiver<String>,
    readers: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
    timeout: Duration,
    seen: String,
}

/// What a peer printed and how it ended.
#[derive(Clone, Debug)]
pub struct PeerOutcome {
    pub console: String,
    /// The command's exit status (`PEER: CMD_EXIT rc=N`), if it got that far.
    pub rc: Option<i32>,
    pub timed_out: bool,
    pub wall: Duration,
}

impl PeerOutcome {
    /// The command's own output (the `OUT: ` lines, without the prefix).
    pub fn output(&self) -> String {
        self.console
            .lines()
            .filter_map(|l| l.strip_prefix("OUT: "))
            .fold(String::new(), |mut s, l| {
                s.push_str(l);
                s.push('\n');
                s
            })
    }

    /// The `PEER: name=value` value, e.g. `GID_INDEX`.
    pub fn marker(&self, name: &str) -> Option<String> {
        let key = format!("PEER: {name}=");
        self.console
            .lines()
            .find_map(|l| Some(l.strip_prefix(&key)?.split_whitespace().next()?.to_string()))
    }
}

impl Running {
    /// Drains console lines seen so far; true once `needle` has been printed.
    pub fn saw(&mut self, needle: &str) -> bool {
        self.seen.extend(self.rx.try_iter());
        self.seen.contains(needle)
    }

    /// Waits for the guest to power off (killing it after its timeout).
    pub fn finish(mut self) -> PeerOutcome {
        let deadline = self.start + self.timeout;
        let mut timed_out = false;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    timed_out = true;
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        for r in self.readers {
            let _ = r.join();
        }
        self.seen.extend(self.rx.try_iter());
        let rc = self.seen.lines().find_map(|l| {
            l.strip_prefix("PEER: CMD_EXIT rc=")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
        PeerOutcome {
            console: self.seen,
            rc,
            timed_out,
            wall: self.start.elapsed(),
        }
    }

    /// Kills the guest now.
    pub fn kill(mut self) -> PeerOutcome {
        let _ = self.child.kill();
        self.timeout = Duration::ZERO;
        self.finish()
    }
}

/// Two Linux peers on one stream link: A (10.0.0.1, listening) runs `server_cmd`, B (10.0.0.2,
/// connecting) waits for A to answer ping and runs `client_cmd`. The baseline for the
/// unikernel runs, and a check of the image and this harness.
pub fn run_linux_pair(
    image: &PeerImage,
    work: &Path,
    server_cmd: &str,
    client_cmd: &str,
    pcap: Option<PathBuf>,
    echo: bool,
) -> Result<(PeerOutcome, PeerOutcome), Skip> {
    fs::create_dir_all(work).map_err(|e| skip(format!("{}: {e}", work.display())))?;
    let sock = work.join("link.sock");
    let _ = fs::remove_file(&sock);
    let a = LinuxPeer {
        link: Link::Listen(sock.clone()),
        ip: format!("{PEER_IP}/24"),
        mac: PEER_MAC,
        neigh: Some((UNIKERNEL_IP.into(), UNIKERNEL_MAC)),
        cmd: server_cmd.into(),
        wait_ping: None,
        delay: None,
        user_net: None,
        pcap,
        timeout: Duration::from_secs(120),
    };
    let b = LinuxPeer {
        link: Link::Connect(sock),
        ip: format!("{UNIKERNEL_IP}/24"),
        mac: UNIKERNEL_MAC,
        neigh: Some((PEER_IP.into(), PEER_MAC)),
        cmd: client_cmd.into(),
        wait_ping: Some(PEER_IP.into()),
        delay: Some(1),
        ..a.clone()
    };
    let ra = a.spawn(image, "A| ", echo)?;
    let rb = match b.spawn(image, "B| ", echo) {
        Ok(r) => r,
        Err(e) => {
            ra.kill();
            return Err(e);
        }
    };
    let oa = ra.finish();
    let ob = rb.finish();
    Ok((oa, ob))
}

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

/// What goes to the unikernel's serial input: `tcp HEX` lines (200 bytes each) and `tcp-closed`,
/// held back until the unikernel's console is up (`ready`: the launcher saw its `boot: protocol=` line).
/// Its console init resets the UART's receive FIFO (uart_16550 `SerialPort::init` writes FCR
/// 0xC7); a byte that QEMU had already moved into the UART is lost there, and a `tcp` line that
/// lost its `t` is not a `tcp` line: the app would wait for it until the run timed out.
struct ToUk<W: Write> {
    w: std::sync::Arc<std::sync::Mutex<Option<W>>>,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pending: Vec<u8>,
    closed: bool,
    /// Bytes written to the unikernel so far.
    delivered: usize,
}

impl<W: Write> ToUk<W> {
    fn push(&mut self, b: &[u8]) {
        self.pending.extend_from_slice(b);
        self.flush();
    }

    fn close(&mut self) {
        self.closed = true;
        self.flush();
    }

    /// Writes what is pending once the unikernel is ready.
    fn flush(&mut self) {
        if !self.ready.load(std::sync::atomic::Ordering::Acquire)
            || (self.pending.is_empty() && !self.closed)
        {
            return;
        }
        if let Some(w) = self.w.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            for chunk in self.pending.chunks(200) {
                let hex: String = chunk.iter().map(|x| format!("{x:02x}")).collect();
                let _ = w
                    .write_all(format!("tcp {hex}\n").as_bytes())
                    .and_then(|()| w.flush());
            }
            if self.closed {
                let _ = w.write_all(b"tcp-closed\n").and_then(|()| w.flush());
            }
        }
        self.delivered += self.pending.len();
        self.pending.clear();
        self.closed = false;
    }
}

/// The unikernel's first console line (kernel/src/entry.rs `kernel_main`, after `console::init`).
const UK_CONSOLE_UP: &str = "boot: protocol=";

/// The launcher end of the tools' TCP exchange, a dumb pipe: unikernel `peer: tcp HEX` lines
/// are written to the socket (one write each), socket bytes go to the unikernel's serial input
/// as `tcp HEX` lines, and the end of the connection as `tcp-closed` (both once `ready`).
#[allow(clippy::too_many_arguments)]
fn tcp_pipe<W: Write>(
    role: Role,
    port: u16,
    listener: Option<std::net::TcpListener>,
    from_uk: mpsc::Receiver<Vec<u8>>,
    to_uk: std::sync::Arc<std::sync::Mutex<Option<W>>>,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    log: mpsc::Sender<String>,
) {
    use std::net::TcpStream;
    use std::sync::atomic::Ordering;
    let say = |s: String| {
        let _ = log.send(s + "\n");
    };
    let mut out = ToUk {
        w: to_uk,
        ready,
        pending: Vec::new(),
        closed: false,
        delivered: 0,
    };
    let mut conn: Option<TcpStream> = None;
    // Until Linux answers, what was sent (replayed on a new connection: slirp accepts the
    // host's connection before the guest's tool listens, then closes it).
    let mut history: Vec<Vec<u8>> = Vec::new();
    let mut got_any = false;
    let mut buf = vec![0u8; 65536];
    let t0 = Instant::now();
    let connect = |history: &[Vec<u8>]| -> Option<TcpStream> {
        let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
        c.set_read_timeout(Some(Duration::from_millis(20))).ok()?;
        for m in history {
            c.write_all(m).ok()?;
        }
        Some(c)
    };
    while !stop.load(Ordering::Relaxed) {
        out.flush();
        if conn.is_none() {
            match (role, &listener) {
                (Role::Client, Some(l)) => {
                    if let Ok((c, _)) = l.accept() {
                        say(format!(
                            "launcher: tcp relay: accepted QEMU's guestfwd connection at {:.1} s",
                            t0.elapsed().as_secs_f64()
                        ));
                        let _ = c.set_nonblocking(false);
                        let _ = c.set_read_timeout(Some(Duration::from_millis(20)));
                        conn = Some(c);
                    }
                }
                (Role::Server, _) if !history.is_empty() => {
                    conn = connect(&history);
                    if conn.is_none() {
                        std::thread::sleep(Duration::from_millis(300));
                    }
                }
                _ => {}
            }
        }
        match from_uk.recv_timeout(Duration::from_millis(if conn.is_some() { 0 } else { 20 })) {
            Ok(m) => {
                say(format!(
                    "launcher: tcp relay: {} bytes from the unikernel at {:.1} s (connected: {})",
                    m.len(),
                    t0.elapsed().as_secs_f64(),
                    conn.is_some()
                ));
                if !got_any {
                    history.push(m.clone());
                }
                match conn.as_mut() {
                    Some(c) => {
                        if let Err(e) = c.write_all(&m) {
                            say(format!("launcher: tcp write: {e}"));
                        }
                    }
                    None if role == Role::Server => {
                        conn = connect(&history);
                    }
                    None => {}
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if conn.is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        match c.read(&mut buf) {
            Ok(0) | Err(_) if !got_any && role == Role::Server => {
                // Linux's tool was not listening yet: try again.
                let closed = match c.read(&mut buf) {
                    Ok(0) => true,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    Ok(n) => {
                        got_any = true;
                        history.clear();
                        out.push(&buf[..n]);
                        false
                    }
                };
                if closed {
                    conn = None;
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            Ok(0) => {
                say(format!(
                    "launcher: tcp relay: end of stream at {:.1} s",
                    t0.elapsed().as_secs_f64()
                ));
                out.close();
                conn = None;
                // As client, QEMU's guestfwd chardev is one connection for the run: its end
                // is QEMU's. Keep listening all the same (a chardev that reconnects is served).
                history.clear();
                got_any = false;
            }
            Ok(n) => {
                let up = if out.ready.load(Ordering::Acquire) {
                    ""
                } else {
                    " (held until the unikernel's console is up)"
                };
                say(format!(
                    "launcher: tcp relay: {n} bytes from Linux at {:.1} s{up}",
                    t0.elapsed().as_secs_f64()
                ));
                got_any = true;
                history.clear();
                out.push(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                say(format!("launcher: tcp read: {e}"));
                out.close();
                conn = None;
            }
        }
    }
    let held = match out.pending.len() {
        0 => String::new(),
        n => format!(", {n} held back (the unikernel's console never came up)"),
    };
    say(format!(
        "launcher: tcp relay: {} bytes to the unikernel{held}, connected at the end: {}",
        out.delivered,
        conn.is_some()
    ));
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
        super::prepare_peer_image()?
    };
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let work = super::cache_dir()
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

/// The unikernel's console: lines `peer: tcp HEX` go to the TCP pipe, all are kept (and echoed).
/// Its `boot: protocol=` line (printed after the console's init; firmware may print before it
/// on the same line) sets `ready`.
fn uk_lines(
    src: impl Read + Send + 'static,
    tx: mpsc::Sender<String>,
    tcp: Option<(
        mpsc::Sender<Vec<u8>>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    )>,
    echo: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        while r
            .read_until(b'\n', &mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            let text = String::from_utf8_lossy(&line).replace('\r', "");
            if let Some((_, ready)) = &tcp {
                if text.contains(UK_CONSOLE_UP) {
                    ready.store(true, std::sync::atomic::Ordering::Release);
                }
            }
            if let (Some((tcp, _)), Some(h)) = (&tcp, text.trim_end().strip_prefix("peer: tcp ")) {
                let bytes: Option<Vec<u8>> = (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
                    .collect();
                if let Some(b) = bytes {
                    let _ = tcp.send(b);
                }
            }
            if echo {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(format!("unikernel| {text}").as_bytes());
                let _ = o.flush();
            }
            let _ = tx.send(text);
            line.clear();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// A relay as for a Linux client (the unikernel serves), its serial input a byte vector.
    struct Relay {
        port: u16,
        serial: Arc<Mutex<Option<Vec<u8>>>>,
        ready: Arc<AtomicBool>,
        stop: Arc<AtomicBool>,
        log: mpsc::Receiver<String>,
        seen: String,
        thread: Option<std::thread::JoinHandle<()>>,
        _to_linux: mpsc::Sender<Vec<u8>>,
    }

    impl Relay {
        fn start(ready: bool) -> Relay {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
            l.set_nonblocking(true).unwrap();
            let port = l.local_addr().unwrap().port();
            let serial = Arc::new(Mutex::new(Some(Vec::new())));
            let ready = Arc::new(AtomicBool::new(ready));
            let stop = Arc::new(AtomicBool::new(false));
            let (tx_tcp, rx_tcp) = mpsc::channel();
            let (tx_log, log) = mpsc::channel();
            let thread = {
                let (serial, ready, stop) = (serial.clone(), ready.clone(), stop.clone());
                std::thread::spawn(move || {
                    tcp_pipe(
                        Role::Client,
                        port,
                        Some(l),
                        rx_tcp,
                        serial,
                        ready,
                        stop,
                        tx_log,
                    )
                })
            };
            Relay {
                port,
                serial,
                ready,
                stop,
                log,
                seen: String::new(),
                thread: Some(thread),
                _to_linux: tx_tcp,
            }
        }

        fn serial(&self) -> String {
            String::from_utf8(self.serial.lock().unwrap().clone().unwrap()).unwrap()
        }

        /// Waits (up to a minute) until the relay logged `what`.
        fn wait_log(&mut self, what: &str) {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !self.seen.contains(what) {
                assert!(
                    Instant::now() < deadline,
                    "the relay never logged {what:?}: {}",
                    self.seen
                );
                if let Ok(l) = self.log.recv_timeout(Duration::from_millis(50)) {
                    self.seen.push_str(&l);
                }
            }
        }

        /// Waits (up to a minute) until the serial input is `want`.
        fn wait_serial(&self, want: &str) {
            let deadline = Instant::now() + Duration::from_secs(60);
            while self.serial() != want {
                assert!(
                    Instant::now() < deadline,
                    "serial input {:?}, not {want:?}",
                    self.serial()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    impl Drop for Relay {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn the_relay_holds_linux_bytes_until_the_unikernel_console_is_up() {
        let mut r = Relay::start(false);
        let mut qemu = std::net::TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        qemu.write_all(b"hi").unwrap();
        r.wait_log("2 bytes from Linux");
        // Written now, the UART FIFO reset of the unikernel's console init could eat them.
        assert_eq!(
            r.serial(),
            "",
            "bytes reached the serial input before the console was up"
        );
        r.ready.store(true, Ordering::Release);
        r.wait_serial("tcp 6869\n");
    }

    #[test]
    fn the_relay_serves_a_connection_that_follows_an_ended_one() {
        let mut r = Relay::start(true);
        let mut first = std::net::TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        first.write_all(b"a").unwrap();
        r.wait_log("1 bytes from Linux");
        drop(first);
        r.wait_log("end of stream");
        let mut second = std::net::TcpStream::connect(("127.0.0.1", r.port)).unwrap();
        second.write_all(b"b").unwrap();
        r.wait_serial("tcp 61\ntcp-closed\ntcp 62\n");
    }

    #[test]
    fn the_unikernel_console_up_line_is_the_kernels_boot_line() {
        let (tx, rx) = mpsc::channel();
        let (tcp, _rx_tcp) = mpsc::channel();
        let ready = Arc::new(AtomicBool::new(false));
        let src: &'static [u8] =
            b"qemu noise\n\x1b[2Jboot: protocol=pvh cmdline=\"x\"\npeer: tcp 00\n";
        uk_lines(src, tx, Some((tcp, ready.clone())), false)
            .join()
            .unwrap();
        assert!(ready.load(Ordering::Acquire));
        assert_eq!(rx.try_iter().count(), 3);
        // The kernel prints the line this waits for.
        let entry = include_str!("../../kernel/src/entry.rs");
        // `println!(` then the format string, whatever whitespace rustfmt puts between them.
        let printed = entry
            .match_indices(&format!("\"{UK_CONSOLE_UP}"))
            .any(|(at, _)| entry[..at].trim_end().ends_with("println!("));
        assert!(printed, "kernel_main no longer prints {UK_CONSOLE_UP:?}");
    }

    #[test]
    fn the_app_follows_the_tool() {
        let (app, args) = app_for("ibv_rc_pingpong -d rxe0 -g $GID -n 100 -s 1 $SERVER").unwrap();
        assert_eq!(
            (app.as_str(), args.as_str()),
            ("pingpong", "pingpong -d rxe0 -g $GID -n 100 -s 1")
        );
        let (app, args) = app_for("ib_read_bw -x $GID -F -s 64 10.0.2.100").unwrap();
        assert_eq!(
            (app.as_str(), args.as_str()),
            ("perftest", "perftest ib_read_bw -x $GID -F -s 64")
        );
        assert!(app_for("rping -s").is_err());
        assert!(app_for("  ").is_err());
    }

    #[test]
    fn the_kernel_command_line_carries_the_init_contract() {
        let p = LinuxPeer {
            link: Link::Connect("/tmp/w.sock".into()),
            ip: "10.0.0.1/24".into(),
            mac: PEER_MAC,
            neigh: Some((UNIKERNEL_IP.into(), UNIKERNEL_MAC)),
            cmd: "ib_write_bw -x $GID".into(),
            wait_ping: None,
            delay: Some(2),
            user_net: Some(String::new()),
            pcap: None,
            timeout: Duration::from_secs(1),
        };
        let a = p.append().unwrap();
        for w in [
            "peer_ip=10.0.0.1/24",
            "peer_neigh=10.0.0.2,02:00:00:00:00:02",
            "peer_eth1=10.0.2.15/24",
            "peer_delay=2",
            "peer_cmd=\"ib_write_bw -x $GID\"",
        ] {
            assert!(a.contains(w), "{w} missing from {a}");
        }
        let bad = LinuxPeer {
            cmd: "echo \"x\"".into(),
            ..p
        };
        assert!(bad.append().is_err());
    }
}
