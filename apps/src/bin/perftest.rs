//! perftest's other side: the client and the server of `ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`, `ib_read_lat` and `ib_send_lat`
//! (linux-rdma/perftest 4.5-0.17, as Debian bookworm ships it; it calls itself "6.06"), against
//! Linux (`cargo run -- --peer linux --peer-cmd 'ib_write_lat -d rxe0 -x $GID -F'`).
//!
//! Cmdline: `perftest TOOL [-s SIZE] [-n ITERS] [-a] [-D SECS [-f MARGIN]] [-e] [-m MTU] [-u TIMEOUT]
//! [-A FETCH_AND_ADD|CMP_AND_SWAP] [-x GID] [-d DEV] [-F] [SERVER] role=server|client
//! ip=A.B.C.D/N peer_mac=MAC`, the tool's own spelling; `-x`, `-d`, `-F`, `-p`, `-i` are
//! accepted and ignored (the GID is `ip=`'s, the TCP port the launcher's). Defaults and
//! refusals as perftest's (src/perftest_parameters.c `init_perftest_params`,
//! `force_dependecies`, `parser`): `-s` 65536 (bw), 2 (lat), 8 (atomic, the only size); `-n`
//! 5000 (ib_write_bw), else 1000, at least 5 (`MIN_ITER`); `-a` runs the sizes 2^1 .. 2^23
//! (`MAX_SIZE`); `-D` with `-a` or `-e` is refused, `-e` with a WRITE tool is refused, `-a`
//! with ib_atomic_bw is refused (its size cannot change). This side caps `-n` at 2^20 (it
//! keeps a timestamp per iteration, as perftest does).
//!
//! The exchange, over the launcher's TCP pipe (apps/src/oob.rs), as perftest 4.5's
//! src/perftest_communication.c and the tools' main()s (write_bw.c, read_bw.c, send_bw.c,
//! atomic_bw.c, write_lat.c, read_lat.c, send_lat.c) do it; each step is `ctx_xchg_data`, the
//! client writing first:
//! 1. the version, 16 bytes, `"6.06"` NUL-padded;
//! 2. `check_sys_data`: the cycle buffer (4 bytes, big-endian) and the cache line size (4);
//!    each side takes the larger;
//! 3. `check_mtu`: `"%d"` of the IBV_MTU enum and its NUL (2 bytes); the smaller MTU wins;
//! 4. `ctx_hand_shake`, 108 bytes: `"%04x:%04x:%06x:%06x:%08x:%016llx:"` of LID, out_reads,
//!    QPN, PSN, rkey, vaddr, then the 16 GID bytes as `"%02x:"` each, then `"%08x:"` of the
//!    SRQN, and a NUL. The _lat tools of WRITE and READ shake hands once more before the QPs
//!    connect; after it every tool shakes hands twice.
//! 5. the run:
//!    - `ib_{write,read,atomic}_bw`: the client runs every size, then a handshake, then
//!      `xchg_bw_reports` (five 8-byte big-endian fields: size, iterations, BW peak, BW
//!      average, message rate; the last three f64), and the server prints the client's figures;
//!    - `ib_send_bw`: per size the server posts its receives, a handshake, both run and print
//!      their own figures (with `-a` a handshake after each size);
//!    - `ib_write_lat`: no more exchange: both sides ping-pong RDMA WRITEs, each polling the
//!      last byte of its buffer for the count (`run_iter_lat_write`; the server writes first);
//!    - `ib_read_lat`: the client READs one at a time (`run_iter_lat`), the server only waits;
//!    - `ib_send_lat`: per size both post receives, a handshake, then SEND ping-pong
//!      (`run_iter_lat_send`; the client sends first).
//! 6. `ctx_close_connection`: a handshake, then `"done"` and its NUL each way (not
//!    ib_write_lat).
//!
//! QP attributes as perftest's `ctx_modify_qp_to_rtr/rts`: max_dest_rd_atomic = own out_reads
//! (the device's maximum for READ and atomic tools, else 1), max_rd_atomic = the peer's,
//! min_rnr_timer 12, timeout 14, retry 7, rnr_retry 7.
//!
//! Figures: bandwidth as `print_report_bw` (MB = 2^20 bytes; peak = the best
//! `(t_completed[j] - t_posted[i]) / (j - i + 1)`, none with `-D` or more than 20000
//! iterations), latency as `print_report_lat` (deltas between consecutive posts, sorted, the
//! two largest dropped, halved for WRITE and SEND, whose deltas are round trips) and
//! `print_report_lat_duration`. Time is the TSC.
//!
//! Data checks: perftest fills its buffers with `rand()` (zeros for ib_write_lat;
//! src/perftest_resources.c `create_single_mr`) and checks nothing. This side fills its
//! buffer with a known pattern and checks every byte it received or read:
//! - READ requester: every READ of the same remote bytes returns the same bytes;
//! - SEND receiver: every message's length; for bw that the peer's bytes landed (they
//!   overwrite the pattern, which is put back after each message); for lat that every
//!   message equals the first (perftest sends from one unchanged buffer);
//! - WRITE target: the peer's WRITEs landed exactly where perftest's addressing puts them
//!   (`increase_rem_addr` cycles through the cycle buffer when `-s` is at most half of it) and
//!   nowhere else; for ib_write_lat, that the bytes are perftest's zeros and the last byte the
//!   final count;
//! - atomic requester: each fetched value is the previous one at that address plus 1
//!   (FETCH_AND_ADD) or unchanged (CMP_AND_SWAP compares with 0 and swaps in 0,
//!   `ATOMIC_SWAP_VALUE`); atomic target: every 8-byte word perftest's addressing hits holds
//!   its pattern value plus the number of FETCH_AND_ADDs that hit it (perftest cycles over
//!   64-byte steps of the cycle buffer), or is unchanged for CMP_AND_SWAP, and nothing else
//!   changed;
//! - READ target and WRITE/SEND/atomic requester: its own buffer unchanged.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use apps::oob::{self, Oob};
use kernel::time::{Deadline, Instant};
use kernel::{println, AppContext};
use mlx5::{
    AccessFlags, CompletionChannel, CompletionQueue, ConnectOptions, Context, ContextConfig, Hal, MemoryRegion, Mtu,
    QpCaps, QpEndpoint, QueuePair, RecvWr, Remote, SendData, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};

kernel::entry_point!(main);

const WAIT: Duration = Duration::from_secs(120);
const SEED: u8 = 0x3c;
/// perftest's version string (configure.ac `AC_INIT([perftest],[6.06])` in 4.5-0.17).
const VERSION: &[u8] = b"6.06";
/// This side's cycle buffer (perftest: the page size) and cache line (check_sys_data).
const CYCLE_BUFFER: u64 = 4096;
const CACHE_LINE: u64 = 64;
/// perftest_parameters.h `MAX_SIZE`: the largest size of `-a`.
const MAX_SIZE: u64 = 1 << 23;
/// perftest_parameters.h `MIN_ITER`.
const MIN_ITER: u64 = 5;
/// This side's cap on `-n` (a timestamp per iteration).
const MAX_ITERS: u64 = 1 << 20;
/// Work requests in flight at most (this side's send queue is 64 deep), and bytes.
const OUTSTANDING: u64 = 32;
const IN_FLIGHT: u64 = 1 << 20;
/// perftest_parameters.c `print_report_lat`: the largest deltas left out.
const LAT_MEASURE_TAIL: usize = 2;
/// perftest_resources.h `ATOMIC_ADD_VALUE` (FETCH_AND_ADD adds 1; CMP_AND_SWAP compares
/// with 0, the WR's zeroed `compare_add`, and swaps in `ATOMIC_SWAP_VALUE` 0).
const ATOMIC_ADD: u64 = 1;
const MB: f64 = 1_048_576.0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verb {
    Write,
    Read,
    Send,
    Atomic,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AtomicOp {
    FetchAdd,
    CmpSwap,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Test {
    Bw,
    Lat,
}

struct Opts {
    tool: &'static str,
    verb: Verb,
    test: Test,
    atomic: AtomicOp,
    size: u64,
    iters: u64,
    mtu: u8,
    client: bool,
    all: bool,
    /// `-D`: seconds, and the margin (`-f`, default a quarter of it).
    duration: Option<(u64, u64)>,
    events: bool,
    /// `-u`: the local ACK timeout exponent (4.096 us << u), perftest's default 14.
    qp_timeout: u8,
}

impl Opts {
    /// The sizes of the run: every power of two from 2 to 2^23 with `-a`.
    fn sizes(&self) -> Vec<u64> {
        if self.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else {
            alloc::vec![self.size]
        }
    }

    fn max_size(&self) -> u64 {
        if self.all {
            MAX_SIZE
        } else {
            self.size
        }
    }
}

/// perftest_resources.h `INC`: `size` rounded up to whole cache lines (at least one).
fn inc(size: u64) -> u64 {
    size.div_ceil(CACHE_LINE).max(1) * CACHE_LINE
}

/// The one region, laid out as perftest's (`alloc_ctx`: two halves of
/// `INC(BUFF_SIZE(size, cycle_buffer))`): `[0, half)` is what this side sends or WRITEs from;
/// `[half, 2 half)` is what it announces (`vaddr`), the peer's target; after them, slots for
/// READ destinations, atomic results and receives.
#[derive(Clone, Copy)]
struct Layout {
    half: u64,
    slot_area: u64,
}

impl Layout {
    fn new(max_size: u64, verb: Verb) -> Layout {
        let half = inc(max_size.max(CYCLE_BUFFER));
        // WRITE uses no slots.
        let slot_area = if verb == Verb::Write { CYCLE_BUFFER } else { (64 * inc(max_size)).clamp(CYCLE_BUFFER, 16 << 20) };
        Layout { half, slot_area }
    }
    fn target(&self) -> u64 {
        self.half
    }
    fn len(&self) -> u64 {
        2 * self.half + self.slot_area
    }
    /// How many slots of `size` bytes there are (at most 64).
    fn nslots(&self, size: u64) -> u64 {
        (self.slot_area / inc(size)).clamp(1, 64)
    }
    /// Offset of slot `k` (modulo the slot count) for `size`-byte messages.
    fn slot(&self, size: u64, k: u64) -> u64 {
        2 * self.half + (k % self.nslots(size)) * inc(size)
    }
}

fn parse(cmdline: &str) -> Result<Opts, String> {
    let args = oob::tool_args(cmdline, "perftest");
    let mut it = args.iter();
    let (tool, verb, test) = match it.next().copied() {
        Some("ib_write_bw") => ("ib_write_bw", Verb::Write, Test::Bw),
        Some("ib_read_bw") => ("ib_read_bw", Verb::Read, Test::Bw),
        Some("ib_send_bw") => ("ib_send_bw", Verb::Send, Test::Bw),
        Some("ib_atomic_bw") => ("ib_atomic_bw", Verb::Atomic, Test::Bw),
        Some("ib_write_lat") => ("ib_write_lat", Verb::Write, Test::Lat),
        Some("ib_read_lat") => ("ib_read_lat", Verb::Read, Test::Lat),
        Some("ib_send_lat") => ("ib_send_lat", Verb::Send, Test::Lat),
        Some(t) => {
            return Err(format!(
                "{t}: not supported (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat)"
            ))
        }
        None => return Err("which tool? (perftest ib_write_bw|ib_read_bw|ib_send_bw|ib_atomic_bw|ib_*_lat ...)".into()),
    };
    let mut o = Opts {
        tool,
        verb,
        test,
        atomic: AtomicOp::FetchAdd,
        size: match (verb, test) {
            (Verb::Atomic, _) => 8,
            (_, Test::Bw) => 65536,
            (_, Test::Lat) => 2,
        },
        iters: if (verb, test) == (Verb::Write, Test::Bw) { 5000 } else { 1000 },
        mtu: 3,
        client: false,
        all: false,
        duration: None,
        events: false,
        qp_timeout: 14,
    };
    let mut margin: Option<u64> = None;
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().copied().ok_or(format!("{name} needs a value"));
        match *a {
            "-s" | "--size" => {
                let v = val("-s")?;
                o.size = oob::parse_num(v)
                    .filter(|&n| n > 0 && n <= MAX_SIZE)
                    .ok_or(format!("-s {v}: not a size from 1 to 8M"))?;
            }
            "-n" | "--iters" => {
                let v = val("-n")?;
                o.iters = oob::parse_num(v)
                    .filter(|&n| (MIN_ITER..=MAX_ITERS).contains(&n))
                    .ok_or(format!("-n {v}: not a count from {MIN_ITER} to {MAX_ITERS}"))?;
            }
            "-m" | "--mtu" => {
                let v = val("-m")?;
                o.mtu = oob::parse_num(v).and_then(oob::mtu_enum).ok_or(format!("-m {v}: not 256..4096"))?;
            }
            "-A" | "--atomic_type" => {
                let v = val("-A")?;
                if verb != Verb::Atomic {
                    return Err("-A: atomic tests only".into());
                }
                o.atomic = match v {
                    "FETCH_AND_ADD" => AtomicOp::FetchAdd,
                    "CMP_AND_SWAP" => AtomicOp::CmpSwap,
                    _ => return Err(format!("-A {v}: not FETCH_AND_ADD or CMP_AND_SWAP")),
                };
            }
            "-D" | "--duration" => {
                let v = val("-D")?;
                let d = oob::parse_num(v).filter(|&n| n > 0 && n <= 3600).ok_or(format!("-D {v}: not 1..3600 seconds"))?;
                o.duration = Some((d, 0));
            }
            "-f" | "--margin" => {
                let v = val("-f")?;
                margin = Some(oob::parse_num(v).ok_or(format!("-f {v}: not a number of seconds"))?);
            }
            "-x" | "--gid-index" | "-d" | "--ib-dev" | "-p" | "--port" | "-i" | "--ib-port" => {
                val(a)?;
            }
            "-u" | "--qp-timeout" => {
                let v = val("-u")?;
                o.qp_timeout = oob::parse_num(v).filter(|&n| n <= 31).ok_or(format!("-u {v}: not 0..31"))? as u8;
            }
            "-F" | "--CPU-freq" => {}
            "-a" | "--all" => o.all = true,
            "-e" | "--events" => {
                // perftest_parameters.c parser 'e'.
                if verb == Verb::Write {
                    return Err("-e: events feature not available on WRITE verb".into());
                }
                o.events = true;
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ => o.client = true,
        }
    }
    // force_dependecies.
    if verb == Verb::Atomic && (o.size != 8 || o.all) {
        return Err("message size cannot be changed for atomic tests (-s, -a)".into());
    }
    if let Some((d, _)) = o.duration {
        if o.all {
            return Err("duration mode (-D) doesn't support running on all sizes (-a)".into());
        }
        if o.events {
            return Err("duration mode (-D) doesn't work with events (-e)".into());
        }
        let m = margin.unwrap_or(d / 4);
        if d <= 2 * m {
            return Err("please check that DURATION > 2*MARGIN".into());
        }
        o.duration = Some((d, m));
    }
    if let Some(client) = oob::cmdline_role(cmdline)? {
        o.client = client;
    }
    Ok(o)
}

fn main(ctx: &AppContext) -> i32 {
    let o = match parse(ctx.cmdline.0) {
        Ok(o) => o,
        Err(e) => {
            println!("perftest: {e}");
            return 2;
        }
    };
    match run(&o, ctx.cmdline.0) {
        Ok(()) => 0,
        Err(e) => {
            println!("perftest: FAILED: {e}");
            1
        }
    }
}

/// One side's `struct pingpong_dest` as ctx_hand_shake carries it.
struct Dest {
    out_reads: u32,
    qpn: u32,
    psn: u32,
    rkey: u32,
    vaddr: u64,
    gid: [u8; 16],
}

fn key_msg(d: &Dest) -> Vec<u8> {
    let mut s = format!("{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:", 0, d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr);
    for b in d.gid {
        s.push_str(&format!("{b:02x}:"));
    }
    s.push_str(&format!("{:08x}:", 0));
    let mut v = s.into_bytes();
    v.push(0);
    v
}

fn parse_key(m: &[u8]) -> Option<Dest> {
    let s = core::str::from_utf8(m.split(|&b| b == 0).next()?).ok()?;
    let f: Vec<&str> = s.split(':').collect();
    if f.len() < 23 {
        return None;
    }
    let h = |x: &str| u64::from_str_radix(x, 16).ok();
    let mut gid = [0u8; 16];
    for (i, g) in gid.iter_mut().enumerate() {
        *g = u8::from_str_radix(f[6 + i], 16).ok()?;
    }
    Some(Dest {
        out_reads: h(f[1])? as u32,
        qpn: h(f[2])? as u32,
        psn: h(f[3])? as u32,
        rkey: h(f[4])? as u32,
        vaddr: h(f[5])?,
        gid,
    })
}

/// `ctx_xchg_data`: the client writes, then reads; the server reads, then writes.
fn xchg(link: &mut Oob, client: bool, mine: &[u8], what: &str) -> Result<Vec<u8>, String> {
    if client {
        link.send(mine);
    }
    let theirs = link.recv(mine.len()).map_err(|e| format!("exchange of the {what}: {e:?}"))?;
    if !client {
        link.send(mine);
    }
    Ok(theirs)
}

/// The figures of `print_report_bw`: (size, iterations, BW peak MB/s, BW average MB/s, Mpps).
#[derive(Clone, Copy, Default)]
struct Report {
    size: u64,
    iters: u64,
    peak: f64,
    avg: f64,
    rate: f64,
}

const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";

fn print_bw_header() {
    println!("{RESULT_LINE}");
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
}

fn print_bw_line(r: &Report) {
    println!(" {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}", r.size, r.iters, r.peak, r.avg, r.rate);
}

fn mtu_of(e: u8) -> Mtu {
    match e {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        _ => Mtu::Mtu1024,
    }
}

fn peer_mac(cmdline: &str) -> Option<[u8; 6]> {
    let v = cmdline.split_ascii_whitespace().filter_map(|w| w.strip_prefix("peer_mac=")).next_back()?;
    oob::unhex(&v.replace(':', ""))?.try_into().ok()
}

/// The duration clock (`-D`), as perftest's `catch_alarm` states: `margin` seconds of warm-up,
/// the sample, `margin` seconds of cool-down, the end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Start,
    Sample,
    StopSample,
    End,
}

#[derive(Clone, Copy)]
struct Clock {
    t0: Instant,
    margin: Duration,
    dur: Duration,
}

impl Clock {
    fn start(secs: u64, margin: u64) -> Clock {
        Clock { t0: Instant::now(), margin: Duration::from_secs(margin), dur: Duration::from_secs(secs) }
    }
    fn phase(&self) -> Phase {
        let t = self.t0.elapsed();
        if t < self.margin {
            Phase::Start
        } else if t < self.dur - self.margin {
            Phase::Sample
        } else if t < self.dur {
            Phase::StopSample
        } else {
            Phase::End
        }
    }
    /// The sample's length in microseconds.
    fn sample_us(&self) -> f64 {
        (self.dur - 2 * self.margin).as_secs_f64() * 1e6
    }
}

/// TSC ticks per microsecond.
fn ticks_per_us() -> f64 {
    kernel::time::tsc_hz() as f64 / 1e6
}

fn now() -> u64 {
    Instant::now().ticks()
}

/// Everything the run uses on the device. Fields drop in order: the QP before its CQs, the CQs
/// before their channels, and the region last.
struct Res<H: Hal> {
    qp: QueuePair<H>,
    scq: CompletionQueue<H>,
    rcq: CompletionQueue<H>,
    sch: Option<CompletionChannel<H>>,
    rch: Option<CompletionChannel<H>>,
    mr: MemoryRegion<H>,
    lay: Layout,
    /// `-e`: completion events taken; completions there at the first poll; completions there
    /// right after arming the CQ.
    events: [u64; 3],
}

/// The next completion of `cq`, by polling or, with a channel (`-e`), by arming the CQ and
/// waiting for its completion event (perftest `ctx_notify_events`). `None` when `stop` reached
/// its end first.
fn wait_cq<H: Hal>(
    cq: &mut CompletionQueue<H>,
    ch: Option<&CompletionChannel<H>>,
    events: &mut [u64; 3],
    stop: Option<&Clock>,
) -> Result<Option<WorkCompletion>, String> {
    let deadline = Deadline::after(WAIT);
    let mut wc = [WorkCompletion::default(); 1];
    let mut waited = false;
    loop {
        if cq.poll(&mut wc).map_err(|e| format!("poll: {e:?}"))? == 1 {
            if ch.is_some() && !waited {
                events[1] += 1;
            }
            return Ok(Some(wc[0]));
        }
        if stop.is_some_and(|c| c.phase() == Phase::End) {
            return Ok(None);
        }
        if deadline.expired() {
            return Err(format!("no completion in {WAIT:?}"));
        }
        match ch {
            None => core::hint::spin_loop(),
            Some(ch) => {
                cq.req_notify_cq(false).map_err(|e| format!("req_notify_cq: {e:?}"))?;
                if cq.poll(&mut wc).map_err(|e| format!("poll: {e:?}"))? == 1 {
                    events[2] += 1;
                    return Ok(Some(wc[0]));
                }
                match ch.get_cq_event(WAIT) {
                    Ok(ev) if ev.cqn == cq.cqn() => {
                        cq.ack_events(1).map_err(|e| format!("ack_cq_events: {e:?}"))?;
                        events[0] += 1;
                        waited = true;
                    }
                    Ok(ev) => return Err(format!("completion event for CQ {:#x}, not {:#x}", ev.cqn, cq.cqn())),
                    Err(e) => return Err(format!("get_cq_event: {e:?}")),
                }
            }
        }
    }
}

fn ok_wc(wc: &WorkCompletion, what: &str) -> Result<(), String> {
    if wc.status != WcStatus::Success {
        return Err(format!("{what} {} in error: {:?} (vendor syndrome {:#x})", wc.wr_id, wc.status, wc.vendor_err));
    }
    Ok(())
}

/// The known pattern has a prime period, so a 64 KiB window of it at any phase is one
/// slice of [`PAT`] (this side's CPU is slow at per-byte work, so fills and checks copy and
/// compare slices).
const PERIOD: usize = 4093;
const CHUNK: usize = 65536;

/// Byte `i` of the known pattern (odd, so never perftest's ib_write_lat zeros).
const fn pat_of(i: usize) -> u8 {
    let j = (i % PERIOD) as u64;
    let x = j.wrapping_mul(31) ^ ((SEED as u64) << 3) ^ (j << 9);
    ((x ^ (x >> 8) ^ (x >> 16)) as u8) | 1
}

static PAT: [u8; CHUNK + PERIOD] = {
    let mut a = [0u8; CHUNK + PERIOD];
    let mut i = 0;
    while i < a.len() {
        a[i] = pat_of(i);
        i += 1;
    }
    a
};

/// The pattern of `[off, off + n)`, `n` at most [`CHUNK`].
fn pat(off: u64, n: usize) -> &'static [u8] {
    let s = (off % PERIOD as u64) as usize;
    &PAT[s..s + n]
}

/// Writes the known pattern over `[off, off + len)`.
fn fill<H: Hal>(mr: &MemoryRegion<H>, off: u64, len: u64) -> Result<(), String> {
    let mut at = off;
    let end = off + len;
    while at < end {
        let n = (end - at).min(CHUNK as u64);
        mr.write(at, pat(at, n as usize)).map_err(|e| format!("write: {e:?}"))?;
        at += n;
    }
    Ok(())
}

fn read<H: Hal>(mr: &MemoryRegion<H>, off: u64, len: u64) -> Result<Vec<u8>, String> {
    let mut v = alloc::vec![0u8; len as usize];
    mr.read(off, &mut v).map_err(|e| format!("read: {e:?}"))?;
    Ok(v)
}

/// Walks `[off, off + len)` in chunks: `f(offset, byte)` for each byte.
fn scan<H: Hal>(mr: &MemoryRegion<H>, off: u64, len: u64, mut f: impl FnMut(u64, u8)) -> Result<(), String> {
    let mut at = off;
    let end = off + len;
    while at < end {
        let n = (end - at).min(65536);
        let b = read(mr, at, n)?;
        for (i, x) in b.into_iter().enumerate() {
            f(at + i as u64, x);
        }
        at += n;
    }
    Ok(())
}

/// The first byte of `[off, off + len)` that is not the pattern.
fn first_changed<H: Hal>(mr: &MemoryRegion<H>, off: u64, len: u64) -> Result<Option<u64>, String> {
    let mut at = off;
    let end = off + len;
    while at < end {
        let n = (end - at).min(CHUNK as u64);
        let b = read(mr, at, n)?;
        let p = pat(at, n as usize);
        if b != p {
            let i = b.iter().zip(p).position(|(x, y)| x != y).unwrap_or(0);
            return Ok(Some(at + i as u64));
        }
        at += n;
    }
    Ok(None)
}

fn pattern_u64(off: u64) -> u64 {
    // The driver puts the device in host-endian atomic mode: the word is in CPU byte order.
    u64::from_ne_bytes(pat(off, 8).try_into().unwrap_or([0; 8]))
}

fn run(o: &Opts, cmdline: &str) -> Result<(), String> {
    let mac = peer_mac(cmdline).ok_or("need peer_mac=aa:bb:cc:dd:ee:ff (the unikernel answers no ARP)")?;
    let ip = oob::cmdline_ipv4(cmdline).ok_or("need ip=A.B.C.D/N")?;
    let hal = mlx5_kernel::open_first(None).map_err(|e| format!("no mlx5 function: {e:?}"))?;
    let dev = Context::open(hal, ContextConfig::default()).map_err(|e| format!("bring-up: {e:?}"))?;
    // Fault finding: the QP counts into a Q counter set of its own (QPC counter_set_id, as
    // Linux mlx5_ib), printed with the port's counters when the run fails.
    let set = dev.alloc_counter_set().ok();
    let r = (|| -> Result<(), String> {
        let sgid = oob::ipv4_gid_index(&dev, ip).map_err(|e| format!("the IPv4 GID: {e:?}"))?;
        let gid = oob::ipv4_gid(ip);
        let lay = Layout::new(o.max_size(), o.verb);
        let len = usize::try_from(lay.len()).map_err(|_| "size")?;
        let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e:?}"))?;
        let t = Instant::now();
        let mr = pd.alloc_mr(len, AccessFlags::ALL).map_err(|e| format!("alloc_mr: {e:?}"))?;
        log::info!("perftest: region of {len} B registered in {:?}", t.elapsed());
        let t = Instant::now();
        fill(&mr, 0, lay.len())?;
        log::info!("perftest: pattern written in {:?}", t.elapsed());
        if (o.verb, o.test) == (Verb::Write, Test::Lat) {
            // The byte each size's ping-pong polls starts at 0 (perftest zeroes its whole buffer).
            for s in o.sizes() {
                mr.write(lay.target() + s - 1, &[0]).map_err(|e| format!("write: {e:?}"))?;
            }
        }
        let (sch, rch) = if o.events { (Some(dev.create_comp_channel()), Some(dev.create_comp_channel())) } else { (None, None) };
        let mk_cq = |ch: &Option<CompletionChannel<_>>| match ch {
            Some(c) => dev.create_cq_with_channel(256, c),
            None => dev.create_cq(256),
        };
        let scq = mk_cq(&sch).map_err(|e| format!("create_cq: {e:?}"))?;
        let rcq = mk_cq(&rch).map_err(|e| format!("create_cq: {e:?}"))?;
        let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64, ..QpCaps::default() };
        let mut qp = pd.create_qp(&scq, &rcq, &caps).map_err(|e| format!("create_qp: {e:?}"))?;
        if let Some(s) = &set {
            qp.set_counter_set(Some(s)).map_err(|e| format!("the QP's counter set: {e:?}"))?;
        }
        let mut r = Res { qp, scq, rcq, sch, rch, mr, lay, events: [0; 3] };
        let ep = r.qp.endpoint();
        let dcaps = dev.caps();
        // perftest_parameters.c: out_reads is the device's maximum for READ and atomic tools.
        let my_reads: u32 = match o.verb {
            Verb::Read | Verb::Atomic => (1u32 << dcaps.log_max_ra_res_qp.min(7)).min(128),
            _ => 1,
        };
        let me = Dest { out_reads: my_reads, qpn: ep.qpn, psn: ep.psn, rkey: r.mr.rkey(), vaddr: r.mr.addr() + lay.target(), gid };

        let mut link = Oob::new(WAIT);
        let c = o.client;
        let mut v = [0u8; 16];
        v[..VERSION.len()].copy_from_slice(VERSION);
        let theirs = xchg(&mut link, c, &v, "versions")?;
        let their_version: String = core::str::from_utf8(theirs.split(|&b| b == 0).next().unwrap_or(&[])).unwrap_or("?").into();
        let _ = xchg(&mut link, c, &(CYCLE_BUFFER as u32).to_be_bytes(), "cycle buffers")?;
        let _ = xchg(&mut link, c, &(CACHE_LINE as u32).to_be_bytes(), "cache line sizes")?;
        let m = xchg(&mut link, c, &[b'0' + o.mtu, 0], "MTUs")?;
        let their_mtu = m.first().map(|b| b.wrapping_sub(b'0')).filter(|x| (1..=5).contains(x)).ok_or("garbled MTU")?;
        let mtu = o.mtu.min(their_mtu);
        println!("{RESULT_LINE}");
        let what = match o.verb {
            Verb::Atomic => format!("{} {:?}", o.tool, o.atomic),
            _ => o.tool.into(),
        };
        println!("                    {what} (unikernel, {}) against perftest {their_version}", if c { "client" } else { "server" });
        println!(" Mtu             : {}[B]", 128u32 << mtu);
        println!(" GID index       : {sgid}");
        match o.duration {
            Some((d, m)) => println!(" Duration        : {d} s (margin {m} s)"),
            None => println!(" Iterations      : {}{}", o.iters, if o.all { ", sizes 2..8388608" } else { "" }),
        }
        println!(" Events          : {}", if o.events { "on" } else { "off (polling)" });
        println!("{RESULT_LINE}");
        let km = key_msg(&me);
        let rem = parse_key(&xchg(&mut link, c, &km, "keys")?).ok_or("the peer's keys are garbled")?;
        let hs = |link: &mut Oob, what: &str| -> Result<(), String> { xchg(link, c, &km, what).map(|_| ()) };
        if o.test == Test::Lat && matches!(o.verb, Verb::Write | Verb::Read) {
            // write_lat.c / read_lat.c shake hands twice before connecting.
            hs(&mut link, "second key handshake")?;
        }
        println!(" local address: LID 0000 QPN {:#06x} PSN {:#x} RKey {:#08x} VAddr {:#016x}", me.qpn, me.psn, me.rkey, me.vaddr);
        println!(" remote address: LID 0000 QPN {:#06x} PSN {:#x} RKey {:#08x} VAddr {:#016x}", rem.qpn, rem.psn, rem.rkey, rem.vaddr);
        let copts = ConnectOptions {
            mtu: mtu_of(mtu),
            sgid_index: sgid as u8,
            max_dest_rd_atomic: my_reads as u8,
            max_rd_atomic: rem.out_reads.clamp(1, 1u32 << dcaps.log_max_ra_req_qp.min(7)) as u8,
            timeout: o.qp_timeout,
            ..ConnectOptions::default()
        };
        r.qp.connect(&QpEndpoint { qpn: rem.qpn, psn: rem.psn, gid: rem.gid, mac }, &copts)
            .map_err(|e| format!("connect: {e:?}"))?;
        hs(&mut link, "handshake after RTR")?;
        hs(&mut link, "second handshake after RTR")?;

        let remote = Remote { addr: rem.vaddr, rkey: rem.rkey };
        let mut notes: Vec<String> = Vec::new();
        // Before the closing exchange (the launcher stops this side a few seconds after Linux's
        // tool ends): this side's own source half is never written by anyone but itself.
        let close = |link: &mut Oob, mr: &MemoryRegion<_>| -> Result<(), String> {
            if let Some(at) = first_changed(mr, 0, lay.half)? {
                return Err(format!("this side's source buffer changed at byte {at}"));
            }
            hs(link, "closing handshake")?;
            let d = xchg(link, c, b"done\0", "done")?;
            if d != b"done\0" {
                return Err("the peer did not say done".into());
            }
            Ok(())
        };
        match (o.test, o.verb, c) {
            (Test::Bw, Verb::Write | Verb::Read | Verb::Atomic, true) => {
                print_bw_header();
                let mut last = Report::default();
                for s in o.sizes() {
                    let (rep, note) = bw_requester(o, &mut r, remote, s)?;
                    print_bw_line(&rep);
                    notes.push(note);
                    last = rep;
                }
                println!("{RESULT_LINE}");
                hs(&mut link, "handshake after the run")?;
                send_report(&mut link, c, &last)?;
                close(&mut link, &r.mr)?;
            }
            (Test::Bw, Verb::Write | Verb::Read | Verb::Atomic, false) => {
                print_bw_header();
                hs(&mut link, "handshake after the run")?;
                let theirs = recv_report(&mut link, c)?;
                print_bw_line(&theirs);
                println!("{RESULT_LINE}");
                // The client's run is over (its last WR completed before it shook hands).
                notes.push(check_target(o, &r, theirs.iters)?);
                close(&mut link, &r.mr)?;
            }
            (Test::Bw, Verb::Send, _) => {
                print_bw_header();
                for s in o.sizes() {
                    let posted = if c { 0 } else { post_recvs(o, &mut r, s)? };
                    hs(&mut link, "handshake before the run")?;
                    let (rep, note) = if c { bw_requester(o, &mut r, remote, s)? } else { receiver(o, &mut r, s, posted)? };
                    print_bw_line(&rep);
                    notes.push(note);
                    if o.all {
                        hs(&mut link, "handshake after the size")?;
                    }
                }
                println!("{RESULT_LINE}");
                close(&mut link, &r.mr)?;
            }
            (Test::Lat, Verb::Write, _) => {
                print_lat_header(o);
                for s in o.sizes() {
                    notes.push(write_lat(o, &mut r, remote, s)?);
                }
                println!("{RESULT_LINE}");
                notes.push(check_write_lat_target(o, &r)?);
            }
            (Test::Lat, Verb::Read, true) => {
                print_lat_header(o);
                for s in o.sizes() {
                    notes.push(read_lat(o, &mut r, remote, s)?);
                }
                println!("{RESULT_LINE}");
                close(&mut link, &r.mr)?;
            }
            (Test::Lat, Verb::Read, false) => {
                close(&mut link, &r.mr)?;
                println!("{RESULT_LINE}");
                notes.push(check_target(o, &r, 0)?);
            }
            (Test::Lat, Verb::Send, _) => {
                print_lat_header(o);
                for s in o.sizes() {
                    let posted = post_recvs(o, &mut r, s)?;
                    hs(&mut link, "handshake before the run")?;
                    notes.push(send_lat(o, &mut r, s, posted)?);
                }
                println!("{RESULT_LINE}");
                close(&mut link, &r.mr)?;
            }
            (Test::Lat, Verb::Atomic, _) => return Err("ib_atomic_lat is not supported".into()),
        }
        // This side's own source half is never written by anyone but itself.
        if o.verb == Verb::Write && o.test == Test::Lat {
            if let Some(at) = first_changed(&r.mr, 0, lay.half)? {
                return Err(format!("this side's source buffer changed at byte {at}"));
            }
        }
        if o.events {
            // The sides that wait for completions: every client, and the SEND servers.
            let waits = c || o.verb == Verb::Send;
            if waits && r.events[0] == 0 {
                return Err("-e: no completion event was taken".into());
            }
            notes.push(format!(
                "{} completion events taken; {} completions there at the first poll, {} right after arming (-e)",
                r.events[0], r.events[1], r.events[2]
            ));
        }
        for n in &notes {
            println!("perftest: {n}: ok");
        }
        drop(r);
        drop(pd);
        Ok(())
    })();
    if r.is_err() {
        oob::print_counters("perftest", &dev, set.as_ref());
    }
    r?;
    drop(set);
    dev.close().map_err(|_| "teardown refused")?;
    Ok(())
}

fn send_report(link: &mut Oob, c: bool, r: &Report) -> Result<(), String> {
    for f in [r.size.to_be_bytes(), r.iters.to_be_bytes(), r.peak.to_bits().to_be_bytes(), r.avg.to_bits().to_be_bytes(), r.rate.to_bits().to_be_bytes()] {
        xchg(link, c, &f, "reports")?;
    }
    Ok(())
}

fn recv_report(link: &mut Oob, c: bool) -> Result<Report, String> {
    let mut f = [0u64; 5];
    for x in f.iter_mut() {
        let b = xchg(link, c, &[0u8; 8], "reports")?;
        *x = u64::from_be_bytes(b.try_into().map_err(|_| "report")?);
    }
    Ok(Report { size: f[0], iters: f[1], peak: f64::from_bits(f[2]), avg: f64::from_bits(f[3]), rate: f64::from_bits(f[4]) })
}

/// `print_report_bw` over per-WR post and completion times (every WR signaled).
fn bw_report(size: u64, tp: &[u64], tc: &[u64]) -> Report {
    let n = tc.len().min(tp.len());
    if n == 0 {
        return Report { size, ..Report::default() };
    }
    let tpu = ticks_per_us();
    let total_us = (tc[n - 1].saturating_sub(tp[0])) as f64 / tpu;
    let secs = (total_us / 1e6).max(1e-9);
    let avg = (size * n as u64) as f64 / secs / MB;
    // perftest: no peak above 20000 iterations.
    let peak = if n > 20000 {
        0.0
    } else {
        let mut opt = tc[0].saturating_sub(tp[0]);
        for (i, &p) in tp[..n].iter().enumerate() {
            for (j, &c) in tc[..n].iter().enumerate().skip(i) {
                opt = opt.min(c.saturating_sub(p) / (j - i + 1) as u64);
            }
        }
        if opt == 0 {
            0.0
        } else {
            size as f64 / (opt as f64 / tpu / 1e6) / MB
        }
    };
    Report { size, iters: n as u64, peak, avg, rate: n as f64 / secs / 1e6 }
}

fn duration_report(size: u64, iters: u64, clock: &Clock) -> Report {
    let secs = clock.sample_us() / 1e6;
    Report { size, iters, peak: 0.0, avg: (size * iters) as f64 / secs / MB, rate: iters as f64 / secs / 1e6 }
}

/// WRITE, READ, SEND or atomics of `size` bytes, `-n` times or for `-D` seconds, up to
/// [`OUTSTANDING`] at a time, each signaled (`run_iter_bw`); checks what came back.
fn bw_requester<H: Hal>(o: &Opts, r: &mut Res<H>, remote: Remote, size: u64) -> Result<(Report, String), String> {
    let lay = r.lay;
    let clock = o.duration.map(|(d, m)| Clock::start(d, m));
    let n = if clock.is_some() { u64::MAX } else { o.iters };
    // At most IN_FLIGHT bytes outstanding: Linux under TCG acknowledges slowly, and each ACK
    // timeout resends everything unacknowledged (go-back-N), which slows it further.
    let depth = OUTSTANDING.min((IN_FLIGHT / size).max(1));
    let depth = match o.verb {
        Verb::Read | Verb::Atomic => depth.min(lay.nslots(size)),
        _ => depth,
    };
    let mut tp: Vec<u64> = Vec::new();
    let mut tc: Vec<u64> = Vec::new();
    let (mut posted, mut done, mut sampled) = (0u64, 0u64, 0u64);
    let mut first_read: Option<Vec<u8>> = None;
    let mut mismatches = 0u64;
    // Atomics: the last value seen at each of perftest's 64 addresses of the cycle buffer.
    let steps = CYCLE_BUFFER / inc(8);
    let mut last: Vec<Option<u64>> = alloc::vec![None; steps as usize];
    let mut ended = false;
    while done < posted || (!ended && posted < n) {
        if let Some(cl) = &clock {
            if cl.phase() == Phase::End {
                ended = true;
            }
        }
        while !ended && posted < n && posted - done < depth {
            let k = posted;
            let local;
            let op = match o.verb {
                Verb::Write => {
                    local = [r.mr.sge(0, size as u32)];
                    SendOp::Write { remote, imm: None }
                }
                Verb::Send => {
                    local = [r.mr.sge(0, size as u32)];
                    SendOp::Send { imm: None }
                }
                Verb::Read => {
                    local = [r.mr.sge(lay.slot(size, k), size as u32)];
                    SendOp::Read { remote }
                }
                Verb::Atomic => {
                    local = [r.mr.sge(lay.slot(64, k), 8)];
                    // increase_rem_addr: the next cache line of the cycle buffer each time.
                    let at = Remote { addr: remote.addr + (k % steps) * inc(8), rkey: remote.rkey };
                    match o.atomic {
                        AtomicOp::FetchAdd => SendOp::FetchAdd { remote: at, add: ATOMIC_ADD },
                        AtomicOp::CmpSwap => SendOp::CompareSwap { remote: at, compare: 0, swap: 0 },
                    }
                }
            };
            let wr = SendWr { wr_id: k, op, data: SendData::Sges(&local), flags: SendFlags::SIGNALED };
            if clock.is_none() {
                tp.push(now());
            }
            r.qp.post_send(&[wr]).map_err(|e| format!("post_send {k}: {e:?}"))?;
            posted += 1;
        }
        if done == posted {
            continue;
        }
        let wc = wait_cq(&mut r.scq, r.sch.as_ref(), &mut r.events, None)?.ok_or("no completion")?;
        ok_wc(&wc, "work request")?;
        if clock.is_none() {
            tc.push(now());
        }
        if wc.wr_id != done {
            return Err(format!("completion of work request {} where {done} was due", wc.wr_id));
        }
        match o.verb {
            Verb::Read => {
                let got = read(&r.mr, lay.slot(size, wc.wr_id), size)?;
                match &first_read {
                    None => first_read = Some(got),
                    Some(f) if *f != got => mismatches += 1,
                    Some(_) => {}
                }
            }
            Verb::Atomic => {
                let b = read(&r.mr, lay.slot(64, wc.wr_id), 8)?;
                let got = u64::from_ne_bytes(b.try_into().map_err(|_| "8 bytes")?);
                let s = (wc.wr_id % steps) as usize;
                if let Some(prev) = last[s] {
                    let want = match o.atomic {
                        AtomicOp::FetchAdd => prev.wrapping_add(ATOMIC_ADD),
                        AtomicOp::CmpSwap => prev,
                    };
                    if got != want {
                        mismatches += 1;
                    }
                }
                last[s] = Some(got);
            }
            _ => {}
        }
        done += 1;
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    let rep = match &clock {
        Some(cl) => duration_report(size, sampled, cl),
        None => bw_report(size, &tp, &tc),
    };
    let count = if clock.is_some() { format!("{done} (over -D)") } else { format!("{done}") };
    let note = match o.verb {
        Verb::Read if mismatches > 0 => return Err(format!("{mismatches} of {done} READs of {size} B returned other bytes than the first")),
        Verb::Read => format!("every byte of {count} READs of {size} B equals the first READ"),
        Verb::Atomic if mismatches > 0 => return Err(format!("{mismatches} of {done} {:?} results are not the arithmetic ones", o.atomic)),
        Verb::Atomic => match o.atomic {
            AtomicOp::FetchAdd => format!("{count} FETCH_AND_ADDs over {steps} words: each fetched value is the previous one at its word + 1"),
            AtomicOp::CmpSwap => format!("{count} CMP_AND_SWAPs (0 -> 0) over {steps} words: each fetched value equals the word's first"),
        },
        _ => format!("{count} {} of {size} B from the known pattern", if o.verb == Verb::Send { "SENDs" } else { "WRITEs" }),
    };
    Ok((rep, note))
}

/// Posts the first receives for `size`-byte SENDs (`ctx_set_recv_wqes`); how many.
fn post_recvs<H: Hal>(o: &Opts, r: &mut Res<H>, size: u64) -> Result<u64, String> {
    let want = if o.duration.is_some() { u64::MAX } else { o.iters };
    let k = r.lay.nslots(size).min(want).min(64);
    for i in 0..k {
        let s = [r.mr.sge(r.lay.slot(size, i), size as u32)];
        r.qp.post_recv(&[RecvWr { wr_id: i, sges: &s }]).map_err(|e| format!("post_recv: {e:?}"))?;
    }
    Ok(k)
}

/// Takes one received message: its length, and its bytes against the pattern (bw: how many
/// landed, the pattern put back) or against the first message (lat). Reposts the slot while
/// more are due.
struct RecvCheck {
    landed: u64,
    first: Option<Vec<u8>>,
    differ: u64,
}

fn take_recv<H: Hal>(
    o: &Opts,
    r: &mut Res<H>,
    size: u64,
    wc: &WorkCompletion,
    posted: &mut u64,
    chk: &mut RecvCheck,
) -> Result<(), String> {
    ok_wc(wc, "receive")?;
    if wc.byte_len as u64 != size {
        return Err(format!("message {}: {} bytes, not {size}", wc.wr_id, wc.byte_len));
    }
    let at = r.lay.slot(size, wc.wr_id);
    let got = read(&r.mr, at, size)?;
    if o.test == Test::Lat {
        match &chk.first {
            None => chk.first = Some(got.clone()),
            Some(f) if *f != got => chk.differ += 1,
            Some(_) => {}
        }
    }
    let mut i = 0usize;
    while i < got.len() {
        let n = (got.len() - i).min(CHUNK);
        chk.landed += got[i..i + n].iter().zip(pat(at + i as u64, n)).filter(|(a, b)| a != b).count() as u64;
        i += n;
    }
    fill(&r.mr, at, size)?;
    let want = if o.duration.is_some() { u64::MAX } else { o.iters };
    if *posted < want {
        let s = [r.mr.sge(at, size as u32)];
        r.qp.post_recv(&[RecvWr { wr_id: *posted, sges: &s }]).map_err(|e| format!("post_recv: {e:?}"))?;
        *posted += 1;
    }
    Ok(())
}

/// perftest's bytes are rand(): about 1/256 of them equal the pattern they overwrite.
fn enough_landed(landed: u64, total: u64) -> bool {
    landed + total / 64 + 4 >= total
}

/// Receives `-n` SENDs (or for `-D` seconds from the first), reposting each
/// (`run_iter_bw_server`).
fn receiver<H: Hal>(o: &Opts, r: &mut Res<H>, size: u64, mut posted: u64) -> Result<(Report, String), String> {
    let mut clock: Option<Clock> = None;
    let mut chk = RecvCheck { landed: 0, first: None, differ: 0 };
    let (mut rcnt, mut sampled) = (0u64, 0u64);
    let mut t_first = 0u64;
    let mut t_last = 0u64;
    loop {
        if o.duration.is_none() && rcnt == o.iters {
            break;
        }
        let Some(wc) = wait_cq(&mut r.rcq, r.rch.as_ref(), &mut r.events, clock.as_ref())? else { break };
        let t = now();
        if rcnt == 0 {
            t_first = t;
            if let Some((d, m)) = o.duration {
                clock = Some(Clock::start(d, m));
            }
        }
        t_last = t;
        take_recv(o, r, size, &wc, &mut posted, &mut chk)?;
        rcnt += 1;
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    let total = size * rcnt;
    if !enough_landed(chk.landed, total) {
        return Err(format!("only {} of {total} received bytes differ from the pattern they overwrote", chk.landed));
    }
    let rep = match &clock {
        Some(cl) => duration_report(size, sampled, cl),
        None => {
            // run_iter_bw_server: from the first message to the last, no peak.
            let secs = ((t_last - t_first) as f64 / ticks_per_us() / 1e6).max(1e-9);
            Report { size, iters: rcnt, peak: 0.0, avg: total as f64 / secs / MB, rate: rcnt as f64 / secs / 1e6 }
        }
    };
    Ok((rep, format!("{rcnt} messages of {size} B received, {} of {total} bytes landed", chk.landed)))
}

fn print_lat_header(o: &Opts) {
    println!("{RESULT_LINE}");
    if o.duration.is_some() {
        println!(" #bytes        #iterations       t_avg[usec]    tps average");
    } else {
        println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ");
    }
}

fn ceil(x: f64) -> usize {
    let t = x as usize;
    if (t as f64) < x {
        t + 1
    } else {
        t
    }
}

fn sqrt(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let mut g = if x > 1.0 { x / 2.0 } else { 1.0 };
    for _ in 0..100 {
        let n = 0.5 * (g + x / g);
        if (n - g).abs() <= 1e-12 * n {
            return n;
        }
        g = n;
    }
    g
}

/// `print_report_lat`: the deltas between consecutive posts, in microseconds divided by
/// `rtt_factor` (2 for WRITE and SEND, whose deltas are round trips).
fn print_lat(size: u64, iters: u64, tp: &[u64], rtt_factor: f64) {
    if tp.len() < 2 + LAT_MEASURE_TAIL + 1 {
        println!(" {size:<7} {iters}          (too few iterations for a latency report)");
        return;
    }
    let mut delta: Vec<u64> = tp.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    delta.sort_unstable();
    let mc = delta.len() - LAT_MEASURE_TAIL;
    // get_median.
    let median = if !(mc - 1).is_multiple_of(2) { (delta[mc / 2] + delta[mc / 2 - 1]) / 2 } else { delta[mc / 2] };
    let q = ticks_per_us() * rtt_factor;
    let avg = delta[..mc].iter().map(|&d| d as f64 / q).sum::<f64>() / mc as f64;
    // perftest squares an int-truncated difference.
    let var: f64 = delta[..mc]
        .iter()
        .map(|&d| {
            let t = (avg - d as f64 / q) as i64;
            (t * t) as f64
        })
        .sum();
    let stdev = sqrt(var / mc as f64);
    let i99 = ceil(mc as f64 * 0.99);
    let i999 = ceil(mc as f64 * 0.999);
    println!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size,
        iters,
        delta[0] as f64 / q,
        delta[mc] as f64 / q,
        median as f64 / q,
        avg,
        stdev,
        delta[i99] as f64 / q,
        delta[i999] as f64 / q
    );
}

/// `print_report_lat_duration`.
fn print_lat_duration(size: u64, iters: u64, clock: &Clock, rtt_factor: f64) {
    let us = clock.sample_us();
    let lat = if iters == 0 { 0.0 } else { us / rtt_factor / iters as f64 };
    let tps = iters as f64 / (us / 1e6);
    println!(" {size:<7}       {iters}            {lat:<7.2}        {tps:<7.2}");
}

/// Waits until the byte at `off` reads `want` (or the clock ended): `run_iter_lat_write`'s
/// poll of the last byte of its buffer.
fn poll_byte<H: Hal>(mr: &MemoryRegion<H>, off: u64, want: u8, clock: Option<&Clock>) -> Result<bool, String> {
    let deadline = Deadline::after(WAIT);
    let mut spins = 0u32;
    loop {
        if mr.read_volatile_u8(off).map_err(|e| format!("read: {e:?}"))? == want {
            return Ok(true);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            if clock.is_some_and(|c| c.phase() == Phase::End) {
                return Ok(false);
            }
            if deadline.expired() {
                return Err(format!("byte {off} never became {want} in {WAIT:?}"));
            }
        }
        core::hint::spin_loop();
    }
}

/// `run_iter_lat_write`: the server writes first; each side polls the last byte of its
/// buffer for the count, then writes its own count in the last byte of its message.
fn write_lat<H: Hal>(o: &Opts, r: &mut Res<H>, remote: Remote, size: u64) -> Result<String, String> {
    let clock = o.duration.map(|(d, m)| Clock::start(d, m));
    let n = if clock.is_some() { u64::MAX } else { o.iters };
    let server = !o.client;
    let poll_at = r.lay.target() + size - 1;
    let post_at = size - 1;
    let (mut scnt, mut ccnt, mut rcnt, mut sampled) = (0u64, 0u64, 0u64, 0u64);
    let mut tp: Vec<u64> = Vec::with_capacity(if clock.is_some() { 0 } else { n as usize });
    let ended = |c: &Option<Clock>| c.is_some_and(|c| c.phase() == Phase::End);
    while (scnt < n || ccnt < n || rcnt < n) && !ended(&clock) {
        if rcnt < n && !(scnt < 1 && server) {
            rcnt += 1;
            if !poll_byte(&r.mr, poll_at, rcnt as u8, clock.as_ref())? {
                break;
            }
        }
        if scnt < n {
            if clock.is_none() {
                tp.push(now());
            }
            scnt += 1;
            r.mr.write(post_at, &[scnt as u8]).map_err(|e| format!("write: {e:?}"))?;
            let local = [r.mr.sge(0, size as u32)];
            let wr = SendWr { wr_id: scnt, op: SendOp::Write { remote, imm: None }, data: SendData::Sges(&local), flags: SendFlags::SIGNALED };
            r.qp.post_send(&[wr]).map_err(|e| format!("post_send {scnt}: {e:?}"))?;
        }
        if ccnt < n {
            let wc = wait_cq(&mut r.scq, r.sch.as_ref(), &mut r.events, None)?.ok_or("no completion")?;
            ok_wc(&wc, "WRITE")?;
            ccnt += 1;
            if clock.is_some_and(|c| c.phase() == Phase::Sample) {
                sampled += 1;
            }
        }
    }
    // Back to the pattern byte of the source for the next size.
    fill(&r.mr, post_at, 1)?;
    match &clock {
        Some(cl) => print_lat_duration(size, sampled, cl, 2.0),
        None => print_lat(size, n, &tp, 2.0),
    }
    Ok(format!("{scnt} WRITEs of {size} B ping-ponged, each count seen in the last byte"))
}

/// The WRITE target after ib_write_lat: perftest's buffer is zeros, so every byte the peer
/// wrote is 0 but the polled last byte, which holds the final count; nothing beyond changed.
fn check_write_lat_target<H: Hal>(o: &Opts, r: &Res<H>) -> Result<String, String> {
    let s = o.sizes().into_iter().max().unwrap_or(o.size);
    let t = r.lay.target();
    let last = r.mr.read_volatile_u8(t + s - 1).map_err(|e| format!("read: {e:?}"))?;
    if o.duration.is_none() && last != o.iters as u8 {
        return Err(format!("the last byte holds {last}, not the final count {}", o.iters as u8));
    }
    let mut nonzero = None;
    scan(&r.mr, t, s - 1, |i, x| {
        if x != 0 && nonzero.is_none() {
            nonzero = Some(i - t);
        }
    })?;
    if let Some(i) = nonzero {
        return Err(format!("byte {i} of the WRITE target is not perftest's 0"));
    }
    if let Some(i) = first_changed(&r.mr, t + s, r.lay.half - s)? {
        return Err(format!("the peer's WRITEs reached byte {} beyond the message", i - t));
    }
    Ok(format!("the peer's {s} B landed as perftest's zeros, last byte {last}, nothing beyond"))
}

/// `run_iter_lat`: one signaled READ at a time; every READ of the same remote bytes must
/// return the same bytes.
fn read_lat<H: Hal>(o: &Opts, r: &mut Res<H>, remote: Remote, size: u64) -> Result<String, String> {
    let clock = o.duration.map(|(d, m)| Clock::start(d, m));
    let n = if clock.is_some() { u64::MAX } else { o.iters };
    let mut tp: Vec<u64> = Vec::new();
    let (mut scnt, mut sampled, mut mismatches) = (0u64, 0u64, 0u64);
    let mut first: Option<Vec<u8>> = None;
    while scnt < n {
        if clock.is_some_and(|c| c.phase() == Phase::End) {
            break;
        }
        if clock.is_none() {
            tp.push(now());
        }
        let at = r.lay.slot(size, scnt);
        let local = [r.mr.sge(at, size as u32)];
        let wr = SendWr { wr_id: scnt, op: SendOp::Read { remote }, data: SendData::Sges(&local), flags: SendFlags::SIGNALED };
        r.qp.post_send(&[wr]).map_err(|e| format!("post_send {scnt}: {e:?}"))?;
        scnt += 1;
        let wc = wait_cq(&mut r.scq, r.sch.as_ref(), &mut r.events, None)?.ok_or("no completion")?;
        ok_wc(&wc, "READ")?;
        let got = read(&r.mr, at, size)?;
        match &first {
            None => first = Some(got),
            Some(f) if *f != got => mismatches += 1,
            Some(_) => {}
        }
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    match &clock {
        Some(cl) => print_lat_duration(size, sampled, cl, 1.0),
        None => print_lat(size, n, &tp, 1.0),
    }
    if mismatches > 0 {
        return Err(format!("{mismatches} of {scnt} READs of {size} B returned other bytes than the first"));
    }
    Ok(format!("every byte of {scnt} READs of {size} B equals the first READ"))
}

/// `run_iter_lat_send`: the client sends first; each side waits for the peer's message, then
/// sends its own.
fn send_lat<H: Hal>(o: &Opts, r: &mut Res<H>, size: u64, mut posted: u64) -> Result<String, String> {
    let client = o.client;
    let mut clock: Option<Clock> = None;
    let n = if o.duration.is_some() { u64::MAX } else { o.iters };
    let (mut scnt, mut rcnt, mut sampled) = (0u64, 0u64, 0u64);
    let mut tp: Vec<u64> = Vec::new();
    let mut chk = RecvCheck { landed: 0, first: None, differ: 0 };
    let ended = |c: &Option<Clock>| c.is_some_and(|c| c.phase() == Phase::End);
    while (scnt < n || rcnt < n) && !ended(&clock) {
        if rcnt < n && !(scnt < 1 && client) {
            let Some(wc) = wait_cq(&mut r.rcq, r.rch.as_ref(), &mut r.events, clock.as_ref())? else { break };
            if rcnt == 0 {
                // set_on_first_rx_packet: the duration starts with the first message.
                if let Some((d, m)) = o.duration {
                    clock = Some(Clock::start(d, m));
                }
            }
            take_recv(o, r, size, &wc, &mut posted, &mut chk)?;
            rcnt += 1;
            if clock.is_some_and(|c| c.phase() == Phase::Sample) {
                sampled += 1;
            }
        }
        if scnt < n && !ended(&clock) {
            if o.duration.is_none() {
                tp.push(now());
            }
            scnt += 1;
            let local = [r.mr.sge(0, size as u32)];
            let wr = SendWr { wr_id: scnt, op: SendOp::Send { imm: None }, data: SendData::Sges(&local), flags: SendFlags::SIGNALED };
            r.qp.post_send(&[wr]).map_err(|e| format!("post_send {scnt}: {e:?}"))?;
            let wc = wait_cq(&mut r.scq, r.sch.as_ref(), &mut r.events, None)?.ok_or("no completion")?;
            ok_wc(&wc, "SEND")?;
        }
    }
    match &clock {
        Some(cl) => print_lat_duration(size, sampled, cl, 2.0),
        None => print_lat(size, n, &tp, 2.0),
    }
    if chk.differ > 0 {
        return Err(format!("{} of {rcnt} messages of {size} B differ from the first (perftest sends one unchanged buffer)", chk.differ));
    }
    if size >= 8 && chk.landed == 0 && rcnt > 0 {
        return Err(format!("the peer's {size}-byte messages left the pattern as it was"));
    }
    Ok(format!("{rcnt} messages of {size} B received, each equal to the first, {scnt} sent"))
}

/// This side as the target of the peer's WRITEs, READs or atomics (`iters` = what the peer
/// reported, 0 if unknown), after the peer is done: exactly perftest's addressing was hit.
fn check_target<H: Hal>(o: &Opts, r: &Res<H>, iters: u64) -> Result<String, String> {
    let t = r.lay.target();
    let half = r.lay.half;
    match o.verb {
        Verb::Read => {
            if let Some(i) = first_changed(&r.mr, t, half)? {
                return Err(format!("the peer's READs changed byte {} of this side's buffer", i - t));
            }
            Ok(format!("this side's {half} B unchanged by the peer's READs"))
        }
        Verb::Atomic => {
            // increase_rem_addr: op k hits the word at INC(8) * (k mod cycle_buffer / INC(8)).
            let steps = CYCLE_BUFFER / inc(8);
            let mut hits = alloc::vec![0u64; steps as usize];
            for s in 0..steps {
                let at = t + s * inc(8);
                let b = read(&r.mr, at, 8)?;
                let now = u64::from_ne_bytes(b.try_into().map_err(|_| "8 bytes")?);
                hits[s as usize] = now.wrapping_sub(pattern_u64(at));
            }
            if o.atomic == AtomicOp::CmpSwap && hits.iter().any(|&h| h != 0) {
                return Err("a CMP_AND_SWAP (compare 0, swap 0) changed a word".into());
            }
            // FETCH_AND_ADD: the words round-robin, so counts fall by at most one, once.
            let total: u64 = hits.iter().sum();
            let want = |s: u64| total / steps + u64::from(s < total % steps);
            if o.atomic == AtomicOp::FetchAdd {
                if let Some(s) = (0..steps).find(|&s| hits[s as usize] != want(s)) {
                    return Err(format!("word {s} was added to {} times, not {} of {total}", hits[s as usize], want(s)));
                }
                if iters != 0 && o.duration.is_none() && total != iters {
                    return Err(format!("{total} FETCH_AND_ADDs landed, the peer reported {iters}"));
                }
            }
            // Nothing else changed: between the words, and beyond the cycle buffer.
            let mut bad = None;
            scan(&r.mr, t, half, |i, x| {
                let rel = i - t;
                let in_word = rel < CYCLE_BUFFER && rel % inc(8) < 8;
                if !in_word && bad.is_none() && x != pat_of(i as usize) {
                    bad = Some(rel);
                }
            })?;
            if let Some(b) = bad {
                return Err(format!("the peer's atomics changed byte {b}, outside the words perftest targets"));
            }
            Ok(match o.atomic {
                AtomicOp::FetchAdd => format!("{total} FETCH_AND_ADDs of 1 landed round-robin on {steps} words, nothing else changed"),
                AtomicOp::CmpSwap => format!("{steps} words unchanged by CMP_AND_SWAP (0 -> 0), nothing else changed"),
            })
        }
        Verb::Write => {
            // Where perftest's WRITEs go: for each size, op k at INC(size) * (k mod
            // cycle_buffer / INC(size)) when size <= cycle_buffer / 2, else at 0.
            let many = if o.duration.is_some() || iters == 0 { u64::MAX } else { iters };
            let mut written = alloc::vec![false; half as usize];
            for s in o.sizes() {
                let spots = if s <= CYCLE_BUFFER / 2 { (CYCLE_BUFFER / inc(s)).min(many) } else { 1 };
                for k in 0..spots {
                    let at = if s <= CYCLE_BUFFER / 2 { k * inc(s) } else { 0 };
                    for w in written.iter_mut().skip(at as usize).take(s as usize) {
                        *w = true;
                    }
                }
            }
            let (mut landed, mut total, mut stray) = (0u64, 0u64, None);
            scan(&r.mr, t, half, |i, x| {
                let rel = (i - t) as usize;
                let same = x == pat_of(i as usize);
                if written[rel] {
                    total += 1;
                    landed += u64::from(!same);
                } else if !same && stray.is_none() {
                    stray = Some(rel);
                }
            })?;
            if let Some(b) = stray {
                return Err(format!("the peer's WRITEs reached byte {b}, where perftest writes nothing"));
            }
            if o.duration.is_none() && !enough_landed(landed, total) {
                return Err(format!("only {landed} of {total} bytes were written by the peer"));
            }
            Ok(format!("the peer's WRITEs landed where perftest aims them ({landed} of {total} bytes changed), nothing elsewhere"))
        }
        Verb::Send => Ok(String::new()),
    }
}
