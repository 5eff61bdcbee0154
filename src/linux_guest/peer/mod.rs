//! The Linux RDMA peer (the launcher's `--peer linux`, tests/linux_peer.rs): a Linux soft-RoCE
//! (rdma_rxe) peer against the unikernel.
//!
//! - [`LinuxPeer`]: boots the peer image ([`super::prepare_peer_image`]) under TCG with one
//!   NIC (eth0, virtio-net) on a QEMU `-netdev stream` socket: RoCE and the tools' TCP
//!   exchange share it, as between two hosts.
//! - [`run_linux_peer`] (the launcher's `--peer linux`): the peer and the unikernel with the
//!   emulated HCA whose port is plugged into the peer's stream socket. The unikernel has its
//!   own IP stack on that port: Linux finds it by ARP and talks TCP to it; the launcher only
//!   starts both and collects their consoles.
//! - [`Serving`]: the unikernel of such a run on its own, which Linux guests join one after
//!   the other (a host that vanishes, then a new one: tests/nvmeof_host.rs).

mod run;
mod serve;
#[cfg(test)]
mod tests;

pub use run::{
    app_for, cli, is_service, linux_side, run_linux_peer, unikernel_cmdline, uses_rdma_cm, PeerRun,
    PeerRunResult, Role,
};
pub use serve::Serving;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{skip, stock_qemu, PeerImage, Skip};

/// The peer's RoCE MAC when the caller names none.
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The peer's RoCE address when the caller names none.
pub const PEER_IP: &str = "10.0.0.1";
/// The unikernel's address (its `ip=`), and `$SERVER` in a Linux client's command.
pub const UNIKERNEL_IP: &str = "10.0.0.2";
/// The unikernel's MAC: its HCA port's (`mlx5-sim --mac`).
pub const UNIKERNEL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

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
    /// A permanent neighbour entry (IP, MAC); without it Linux resolves its neighbours by ARP.
    pub neigh: Option<(String, [u8; 6])>,
    /// The command (`sh -c`; `$GID`, `$RXE`, `$PEER_IP` are set). No double quotes.
    pub cmd: String,
    /// Wait until this address answers ping before the command.
    pub wait_ping: Option<String>,
    /// Seconds to sleep before the command.
    pub delay: Option<u32>,
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
    crate::guest::console_lines(src, move |text| {
        if echo {
            crate::guest::echo_stdout(&format!("{tag}{text}"));
        }
        let _ = tx.send(text);
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

    /// eth0's neighbour entry for `ip` after the command (`PEER: NEIGH` lines: `ip neigh`'s
    /// `10.0.0.2 lladdr 02:00:00:00:00:02 REACHABLE`), if it had one.
    pub fn neighbour(&self, ip: &str) -> Option<String> {
        self.console
            .lines()
            .filter_map(|l| l.strip_prefix("PEER: NEIGH "))
            .find(|l| l.split_whitespace().next() == Some(ip))
            .map(|l| l.trim_end().to_string())
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
        for r in std::mem::take(&mut self.readers) {
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
            console: std::mem::take(&mut self.seen),
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

impl Drop for Running {
    /// A guest nobody waits for any more (a test failed before its end) is killed, not left
    /// running on a shared machine.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Two Linux peers on one stream link: A (10.0.0.1, listening) runs `server_cmd`, B (10.0.0.2,
/// connecting) waits for A to answer ping and runs `client_cmd`; each finds the other by ARP.
/// The baseline for the unikernel runs, and a check of the image and this harness.
pub fn run_linux_pair(
    image: &PeerImage,
    work: &Path,
    server_cmd: &str,
    client_cmd: &str,
    pcap: Option<PathBuf>,
    echo: bool,
) -> Result<(PeerOutcome, PeerOutcome), Skip> {
    run_linux_pair_within(
        image,
        work,
        server_cmd,
        client_cmd,
        pcap,
        echo,
        Duration::from_secs(120),
    )
}

/// [`run_linux_pair`] with each guest killed after `timeout` (from its start).
pub fn run_linux_pair_within(
    image: &PeerImage,
    work: &Path,
    server_cmd: &str,
    client_cmd: &str,
    pcap: Option<PathBuf>,
    echo: bool,
    timeout: Duration,
) -> Result<(PeerOutcome, PeerOutcome), Skip> {
    fs::create_dir_all(work).map_err(|e| skip(format!("{}: {e}", work.display())))?;
    let sock = work.join("link.sock");
    let _ = fs::remove_file(&sock);
    let a = LinuxPeer {
        link: Link::Listen(sock.clone()),
        ip: format!("{PEER_IP}/24"),
        mac: PEER_MAC,
        neigh: None,
        cmd: server_cmd.into(),
        wait_ping: None,
        delay: None,
        pcap,
        timeout,
    };
    let b = LinuxPeer {
        link: Link::Connect(sock),
        ip: format!("{UNIKERNEL_IP}/24"),
        mac: UNIKERNEL_MAC,
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
