//! The storage appliance `nvmf-target`: its command line, the target's configuration from it,
//! and the loop that serves (the transport is `nvmf-rdma`, the core `nvmeof`). Generic over
//! the HCA and the stack, as [`crate::cm`] is.
//!
//! Cmdline: `ip=A.B.C.D/N [port=4420] [nqn=NQN] [serial=S] [size=BYTES|NK|NM|NG]
//! [hosts=NQN,NQN|any] [conns=N] [stats=SECS]`: the address the target listens on (its RoCE
//! v2 GID), the port (NVMe/RDMA's 4420), the subsystem's NQN, its serial number, the
//! namespace's size (the RAM disk: one region of identity-mapped huge pages), the hosts
//! allowed (any host when absent), the most connections (NVMe queues) at once
//! (`default_conns` when absent), and every SECS seconds a line of the serving loop's
//! figures (turns, completions, the longest turn) while it has work. The launcher's `role=`
//! and `peer=` words are taken and ignored.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use kernel::cmdline::Cmdline;
use mlx5::Hal;
use net::{Clock, Nic};
use nvmeof::target::{NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use nvmf_rdma::{fmt_ip, Limits, Note, NvmfRdma, Why};

use crate::cm::{say, AppError, CmNode};

/// The subsystem NQN when `nqn=` is absent.
pub const DEFAULT_NQN: &str = "nqn.2026-12.io.example:ram";
/// The serial number when `serial=` is absent.
pub const DEFAULT_SERIAL: &str = "UNIKERNEL-0001";
/// The namespace's size when `size=` is absent: 1 GiB.
pub const DEFAULT_SIZE: u64 = 1 << 30;
/// Highest I/O queue ID a controller may connect (Linux's nvmet allows as many as the host
/// has CPUs; a Linux host asks for one per CPU plus write and poll queues).
pub const MAX_QID: u16 = 8;
/// Bytes of in-capsule data an I/O write may carry (Linux nvmet-rdma's default,
/// `drivers/nvme/target/rdma.c` `NVMET_RDMA_DEFAULT_INLINE_DATA_SIZE`, PAGE_SIZE).
pub const INLINE_DATA_SIZE: u32 = 4096;

/// What the appliance serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmfArgs {
    /// `port=`.
    pub port: u16,
    /// `nqn=`.
    pub nqn: String,
    /// `serial=`.
    pub serial: String,
    /// `size=`, in bytes.
    pub size: u64,
    /// `hosts=`: the host NQNs allowed; empty: any host.
    pub hosts: Vec<String>,
    /// `stats=`: seconds between the loop's figures; 0 (absent): none.
    pub stats: u32,
    /// `conns=`: the most connections (queues of every controller) at once.
    pub conns: usize,
}

/// The most connections `conns=` may ask for: what rdma_cm tracks at once, connections in
/// TIMEWAIT included (the shared CQ then holds as many queues at their deepest:
/// [`nvmf_rdma::CQ_PER_CONN`] entries each).
pub const MAX_CONNS: usize = rdmacm::MAX_CONNS;

/// Connections when `conns=` is absent: a whole controller (admin queue and [`MAX_QID`] I/O
/// queues) for each allowed host (one when any host is allowed) and one more, for a host
/// that connects again while its old controller waits out its keep-alive timeout; plus the
/// discovery controller's queue and a spare; at most [`MAX_CONNS`].
pub fn default_conns(hosts: usize) -> usize {
    let n = hosts.max(1).saturating_add(1);
    n.saturating_mul(usize::from(MAX_QID) + 1)
        .saturating_add(2)
        .min(MAX_CONNS)
}

/// A size: bytes, or a number with K, M or G (binary units); a whole number of 4 KiB.
fn parse_size(v: &str) -> Option<u64> {
    let (n, unit) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    let b = n.parse::<u64>().ok()?.checked_mul(unit)?;
    (b > 0 && b % 4096 == 0).then_some(b)
}

/// A word of the appliance's command line that is not valid: which word, with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError<'a> {
    /// `port=`: not a port.
    Port(&'a str),
    /// `nqn=`: not 1 to 223 bytes.
    Nqn(&'a str),
    /// `serial=`: not 1 to 20 printable ASCII bytes.
    Serial(&'a str),
    /// `size=`: not BYTES, NK, NM or NG, a multiple of 4 KiB.
    Size(&'a str),
    /// `hosts=`: an NQN of the list is empty or longer than 223 bytes.
    Hosts(&'a str),
    /// `stats=`: not a number of seconds.
    Stats(&'a str),
    /// `conns=`: not 1 to [`MAX_CONNS`].
    Conns(&'a str),
}

impl core::fmt::Display for ArgError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgError::Port(v) => write!(f, "port={v}: not a port"),
            ArgError::Nqn(v) => write!(f, "nqn={v}: 1 to 223 bytes"),
            ArgError::Serial(v) => write!(f, "serial={v}: 1 to 20 printable ASCII bytes"),
            ArgError::Size(v) => {
                write!(f, "size={v}: not BYTES, NK, NM or NG (a multiple of 4 KiB)")
            }
            ArgError::Hosts(v) => write!(
                f,
                "hosts={v}: NQNs of 1 to 223 bytes, comma-separated, or any"
            ),
            ArgError::Stats(v) => write!(f, "stats={v}: not a number of seconds"),
            ArgError::Conns(v) => write!(f, "conns={v}: not 1 to {MAX_CONNS}"),
        }
    }
}

/// The appliance's words of `cmdline`.
pub fn parse(cmdline: &str) -> Result<NvmfArgs, ArgError<'_>> {
    let c = Cmdline(cmdline);
    let port = match c.get("port") {
        None => 4420,
        Some(v) => crate::oob::parse_port(v).ok_or(ArgError::Port(v))?,
    };
    let nqn = c.get("nqn").unwrap_or(DEFAULT_NQN);
    // NVMe Base: an NQN is at most 223 bytes (Linux `NVMF_NQN_SIZE` 223 + NUL).
    if nqn.is_empty() || nqn.len() > 223 {
        return Err(ArgError::Nqn(nqn));
    }
    let serial = c.get("serial").unwrap_or(DEFAULT_SERIAL);
    // Identify Controller's SN is 20 ASCII bytes.
    if serial.is_empty() || serial.len() > 20 || !serial.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ArgError::Serial(serial));
    }
    let size = match c.get("size") {
        None => DEFAULT_SIZE,
        Some(v) => parse_size(v).ok_or(ArgError::Size(v))?,
    };
    let hosts: Vec<String> = match c.get("hosts") {
        None | Some("any") => Vec::new(),
        Some(v) => v.split(',').map(ToString::to_string).collect(),
    };
    if hosts.iter().any(|h| h.is_empty() || h.len() > 223) {
        return Err(ArgError::Hosts(c.get("hosts").unwrap_or_default()));
    }
    let stats = match c.get("stats") {
        None => 0,
        Some(v) => v.parse::<u32>().map_err(|_| ArgError::Stats(v))?,
    };
    let conns = match c.get("conns") {
        None => default_conns(hosts.len()),
        Some(v) => match v.parse::<usize>() {
            Ok(n @ 1..=MAX_CONNS) => n,
            _ => return Err(ArgError::Conns(v)),
        },
    };
    Ok(NvmfArgs {
        port,
        nqn: nqn.into(),
        serial: serial.into(),
        size,
        hosts,
        stats,
        conns,
    })
}

/// The core's configuration: one subsystem with namespace 1 (512-byte blocks) on disk 0, at
/// port 1 of address `ip`; its UUID and NGUID from the HCA's MAC, so they stay the same
/// across boots of one appliance.
pub fn config(a: &NvmfArgs, ip: [u8; 4], mac: [u8; 6]) -> TargetConfig {
    let mut uuid = [0u8; 16];
    uuid[..6].copy_from_slice(&mac);
    // RFC 4122 version 4 and variant bits, so hosts read it as a UUID.
    uuid[6] = 0x40;
    uuid[8] = 0x80;
    uuid[15] = 1;
    let mut nguid = uuid;
    nguid[15] = 2;
    TargetConfig {
        port: PortConfig {
            portid: 1,
            traddr: fmt_ip(ip),
            trsvcid: a.port.to_string(),
        },
        subsystems: vec![SubsystemConfig {
            nqn: a.nqn.clone(),
            serial: a.serial.clone(),
            allow_any_host: a.hosts.is_empty(),
            hosts: a.hosts.clone(),
            namespaces: vec![NamespaceConfig {
                nsid: 1,
                disk: 0,
                lba_shift: 9,
                uuid,
                nguid,
            }],
        }],
        model: "unikernel nvmf-target".into(),
        firmware: env!("CARGO_PKG_VERSION").into(),
        discovery_serial: a.serial.clone(),
        max_qid: MAX_QID,
        inline_data_size: INLINE_DATA_SIZE,
    }
}

/// A note of the transport as the appliance's line.
pub fn line(n: &Note) -> String {
    match n {
        Note::Connected {
            ip,
            qid,
            cntlid,
            subsystem,
            host,
        } => format!(
            "connect from {}: queue {qid} of controller {cntlid}, {subsystem}, host {host}",
            fmt_ip(*ip)
        ),
        Note::ConnectRefused {
            ip,
            status,
            subsystem,
            host,
        } => format!(
            "refused Connect from {}: status {status:#06x}, subsystem {subsystem}, host {host}",
            fmt_ip(*ip)
        ),
        Note::Fatal { ip, error } => {
            format!("error: {}: fatal command error: {error:?}", fmt_ip(*ip))
        }
        Note::Overrun { ip, tag } => format!(
            "error: {}: command {tag} overran its bounce slot or queue",
            fmt_ip(*ip)
        ),
        Note::Rejected { ip, status } => {
            format!("refused {}: {status:?}", fmt_ip(*ip))
        }
        Note::Disconnected {
            ip,
            qid,
            cntlid,
            why,
        } => {
            let why = match why {
                Why::Host => "by the host",
                Why::Cm => "by the connection manager",
                Why::Controller => "controller gone (keep-alive timeout or fatal error)",
                Why::Transport => "transport error",
            };
            let ctrl = cntlid.map_or(String::new(), |c| format!(" of controller {c}"));
            format!("disconnect from {}: queue {qid}{ctrl}, {why}", fmt_ip(*ip))
        }
        Note::Transport { ip, status } => {
            format!("error: {}: a work request failed: {status:?}", fmt_ip(*ip))
        }
        Note::DeviceError(e) => format!("error: the device: {e:?}"),
    }
}

/// Serves `a` on node `n` until the launcher stops it.
pub fn serve<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    a: &NvmfArgs,
) -> Result<(), AppError> {
    let size = usize::try_from(a.size).map_err(|_| AppError::DiskSize(a.size))?;
    let cfg = config(a, n.ip, n.dev.mac());
    let limits = Limits::new(a.port, a.conns);
    let mut nv =
        NvmfRdma::new(n.dev, cfg, size, limits).map_err(|e| AppError::Target("the target", e))?;
    nv.listen(&mut n.cm)
        .map_err(|e| AppError::Target("rdma_listen", e))?;
    let mr = nv.target().disk(0).map(|d| d.mr().translation_info());
    let hosts = if a.hosts.is_empty() {
        "any".into()
    } else {
        a.hosts.join(",")
    };
    say!(
        n,
        "nvmf-target: serving {} (serial {}), namespace 1: {} bytes in 512-byte blocks, on {}:{} (NVMe/RDMA, RoCE v2); hosts: {hosts}; at most {} connections",
        a.nqn,
        a.serial,
        a.size,
        fmt_ip(n.ip),
        a.port,
        a.conns
    );
    if let Some(t) = mr {
        say!(
            n,
            "nvmf-target: the disk is one memory region: {} translation entries of {} KiB",
            t.mtt_entries,
            (1u64 << t.page_shift) >> 10
        );
    }
    let baseline = State::of(&nv, &n.cm);
    say!(n, "nvmf-target: {}", baseline.line());
    let (mut shown, mut watch) = (baseline, false);
    let mut fig = LoopFigures::new(a.stats, n.node.now_us());
    let mut next_stack = 0;
    loop {
        // One clock read per turn (under the harness's nested KVM a read of the TSC traps:
        // ~7,200 TSC ticks).
        let t0 = n.node.now_us();
        if t0 >= next_stack {
            n.node.poll();
            let t1 = n.node.now_us();
            fig.stack_us += t1.saturating_sub(t0);
            next_stack = t1.saturating_add(STACK_POLL_US);
        }
        let work = nv.poll(&mut n.cm, n.node.stack(), t0.saturating_mul(1000));
        while let Some(note) = nv.take_note() {
            say!(n, "nvmf-target: {}", line(&note));
            watch |= matches!(note, Note::Disconnected { .. });
        }
        // After a disconnect, a state line each time it changes, until it is back at the
        // baseline (a QP stays with rdma_cm through TIMEWAIT).
        if watch {
            let s = State::of(&nv, &n.cm);
            if s != shown {
                say!(n, "nvmf-target: {}", s.line());
                shown = s;
            }
            watch = s != baseline;
        }
        if fig.on() {
            if let Some(l) = fig.turn(t0, n.node.now_us(), work) {
                // What one read of the clock costs (the loop reads it at least once a turn).
                let c0 = n.node.now_us();
                for _ in 0..1000 {
                    core::hint::black_box(n.node.now_us());
                }
                let ns = n.node.now_us().saturating_sub(c0);
                say!(n, "nvmf-target: loop: {l}; a clock read {ns} ns");
            }
        }
    }
}

/// What the target holds: for the line after a disconnect, and the tests' leak checks.
#[derive(Clone, Copy, PartialEq, Eq)]
struct State {
    conns: usize,
    ctrls: usize,
    /// rdma_cm's QPs, those of destroyed ids in TIMEWAIT too ([`rdmacm::RdmaCm::counts`]).
    qps: usize,
    /// The transport's memory regions ([`NvmfRdma::regions`]).
    mrs: usize,
}

impl State {
    fn of<H: Hal>(nv: &NvmfRdma<H>, cm: &rdmacm::RdmaCm<H>) -> State {
        State {
            conns: nv.connections(),
            ctrls: nv.target().controllers(),
            qps: cm.counts().1,
            mrs: nv.regions(),
        }
    }

    fn line(&self) -> String {
        format!(
            "state: {} connections, {} controllers, {} QPs, {} memory regions",
            self.conns, self.ctrls, self.qps, self.mrs
        )
    }
}

/// How often the serving loop polls the IP stack: ARP and ICMP only (the connection manager's
/// MADs and the I/O go through their own QPs, polled every turn). At the stack's own TICK
/// (1 ms) its polls took up to a fifth of the loop's time under the harness (`stats=`: ~0.5 ms
/// a poll there).
const STACK_POLL_US: u64 = 10_000;

/// The serving loop's figures (`stats=SECS`): turns with work (CM events and completions) and
/// without, the time each kind took, and the longest turn, over each period with work.
#[derive(Clone, Copy)]
struct LoopFigures {
    period_us: u64,
    start: u64,
    /// Turns without work, and their microseconds.
    idle: (u64, u64),
    /// Turns with work, their microseconds, and the work items.
    busy: (u64, u64, u64),
    longest: u64,
    /// Microseconds in the stack's polls (`Node::poll`).
    stack_us: u64,
}

impl LoopFigures {
    fn new(secs: u32, now_us: u64) -> LoopFigures {
        LoopFigures {
            period_us: u64::from(secs) * 1_000_000,
            start: now_us,
            idle: (0, 0),
            busy: (0, 0, 0),
            longest: 0,
            stack_us: 0,
        }
    }

    /// Whether figures are kept (`stats=` given).
    fn on(&self) -> bool {
        self.period_us != 0
    }

    /// One turn from `t0` to `t1` that did `work` items; the period's line when it ends.
    fn turn(&mut self, t0: u64, t1: u64, work: usize) -> Option<String> {
        let d = t1.saturating_sub(t0);
        if work == 0 {
            self.idle = (self.idle.0 + 1, self.idle.1 + d);
        } else {
            let (n, us, w) = self.busy;
            self.busy = (n + 1, us + d, w + work as u64);
        }
        self.longest = self.longest.max(d);
        let span = t1.saturating_sub(self.start);
        if span < self.period_us {
            return None;
        }
        let (idle, busy) = (self.idle, self.busy);
        let l = (busy.0 > 0).then(|| {
            format!(
                "{} ms: {} turns without work ({} us each), {} with work ({} items, {} us each), longest turn {} us; {} us in the stack's turns",
                span / 1000,
                idle.0,
                idle.1 / idle.0.max(1),
                busy.0,
                busy.2,
                busy.1 / busy.0,
                self.longest,
                self.stack_us
            )
        });
        *self = LoopFigures {
            period_us: self.period_us,
            ..LoopFigures::new(0, t1)
        };
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line() {
        let a = parse("nvmf-target ip=10.0.0.2/24 role=server peer=10.0.0.1").unwrap();
        assert_eq!(
            a,
            NvmfArgs {
                port: 4420,
                nqn: DEFAULT_NQN.into(),
                serial: DEFAULT_SERIAL.into(),
                size: 1 << 30,
                hosts: vec![],
                stats: 0,
                conns: 20,
            }
        );
        let a = parse("ip=10.0.0.2/24 port=4421 nqn=nqn.x:y serial=S1 size=64M hosts=nqn.a,nqn.b")
            .unwrap();
        assert_eq!(
            (a.port, a.nqn.as_str(), a.serial.as_str()),
            (4421, "nqn.x:y", "S1")
        );
        assert_eq!(a.size, 64 << 20);
        assert_eq!(a.hosts, ["nqn.a", "nqn.b"]);
        for (s, b) in [("4096", 4096), ("8K", 8192), ("2G", 2 << 30), ("hosts", 0)] {
            assert_eq!(parse_size(s), (b > 0).then_some(b), "{s}");
        }
        assert_eq!(parse("stats=5").unwrap().stats, 5);
        assert_eq!(parse("conns=24").unwrap().conns, 24);
        // Two allowed hosts: three controllers of nine queues, discovery, a spare.
        assert_eq!(parse("hosts=nqn.a,nqn.b").unwrap().conns, 29);
        assert_eq!(parse("hosts=nqn.a,nqn.b,nqn.c").unwrap().conns, MAX_CONNS);
        for bad in [
            "stats=x",
            "size=0",
            "size=1000",
            "size=xG",
            "port=0",
            "serial=123456789012345678901",
            "hosts=a,,b",
            "conns=0",
            "conns=33",
            "conns=x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let c = config(
            &parse("nqn=n size=4M hosts=any").unwrap(),
            [10, 0, 0, 2],
            [2, 0, 0, 0, 0, 2],
        );
        assert!(c.subsystems[0].allow_any_host);
        assert_eq!(
            (c.port.traddr.as_str(), c.port.trsvcid.as_str()),
            ("10.0.0.2", "4420")
        );
    }
}
