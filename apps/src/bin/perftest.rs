//! perftest's other side: the client and the server of `ib_write_bw`, `ib_read_bw` and
//! `ib_send_bw` (linux-rdma/perftest 4.5, as Debian bookworm ships it), against Linux
//! (`cargo run -- --peer linux --peer-cmd 'ib_write_bw -d rxe0 -x $GID -F'`).
//!
//! Cmdline: `perftest TOOL [-s SIZE] [-n ITERS] [-m MTU] [-x GID] [-d DEV] [-F] [SERVER]
//! role=server|client ip=A.B.C.D/N peer_mac=MAC`, the tool's own spelling; `-x`, `-d`, `-F`,
//! `-p` are accepted and ignored (the GID is `ip=`'s, the TCP port the launcher's). `-a`
//! (all sizes) and `-D` (duration) are refused with a message: not supported yet.
//!
//! The exchange, over the launcher's TCP pipe (apps/src/oob.rs), as a capture of two Linux
//! peers shows it (tests/linux_peer.rs `two_linux_peers_perftest_capture`; perftest
//! src/perftest_communication.c): each step is `ctx_xchg_data`, the client writing first.
//! 1. the version, 16 bytes, `"6.06"` NUL-padded;
//! 2. `check_sys_data`: the cycle buffer (4 bytes, big-endian) and the cache line size (4);
//! 3. `check_mtu`: `"%d"` of the IBV_MTU enum and its NUL (2 bytes); the smaller MTU wins;
//! 4. `ctx_hand_shake`, 108 bytes: `"%04x:%04x:%06x:%06x:%08x:%016llx:"` of LID, out_reads, QPN,
//!    PSN, rkey, vaddr, then the 16 GID bytes as `"%02x:"` each, then `"%08x:"` of the SRQN,
//!    and a NUL. The QPs connect, then two more handshakes.
//! 5. WRITE/READ: the client runs, then a handshake, then `xchg_bw_reports` (five 8-byte
//!    big-endian fields: size, iterations, BW peak, BW average, message rate; the last three
//!    f64), and the server prints the client's figures. SEND: the server posts its receives, a
//!    handshake, both run; each prints its own figures.
//! 6. `ctx_close_connection`: a handshake, then `"done"` and its NUL each way.
//!
//! QP attributes as perftest's `ctx_modify_qp_to_rtr/rts`: max_dest_rd_atomic = own out_reads,
//! max_rd_atomic = the peer's, min_rnr_timer 12, timeout 14, retry 7, rnr_retry 7.
//!
//! Data checks: perftest fills its buffers with `rand()` (src/perftest_resources.c
//! `create_single_mr`) and checks nothing. This side fills its buffer with a known pattern;
//! as READ requester it checks that every byte of every READ equals the first READ of the same
//! remote bytes; as SEND receiver, every message's length, and that every received byte
//! landed (the pattern is overwritten where the message says); as WRITE target, that the
//! peer's bytes landed in the first `-s` bytes; as READ target and as WRITE/SEND requester,
//! that its own buffer is unchanged.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use apps::oob::{self, Oob};
use kernel::time::Instant;
use kernel::{println, AppContext};
use mlx5::{
    AccessFlags, ConnectOptions, Context, ContextConfig, Mtu, QpCaps, QpEndpoint, RecvWr, Remote, SendData,
    SendFlags, SendOp, SendWr, WcStatus,
};

kernel::entry_point!(main);

const WAIT: Duration = Duration::from_secs(120);
const SEED: u8 = 0x3c;
/// perftest's version string (src/perftest_parameters.h `VERSION` as Debian's 4.5-0.17 sends it).
const VERSION: &[u8] = b"6.06";
/// perftest's default cycle buffer and this machine's cache line (check_sys_data).
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
const OUTSTANDING: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Write,
    Read,
    Send,
}

struct Opts {
    tool: &'static str,
    verb: Verb,
    size: u32,
    iters: u64,
    mtu: u8,
    client: bool,
}

impl Opts {
    /// The region the peer targets: perftest cycles its remote address through the cycle
    /// buffer this side announced (`check_sys_data`) when `-s` is at most half of it
    /// (src/perftest_resources.c `increase_rem_addr`), so it spans at least that.
    fn region(&self) -> u64 {
        (self.size as u64).max(CYCLE_BUFFER as u64)
    }

    /// Offset of slot `k`: 0 is the region the peer targets (or this side sends from); 1.. are
    /// READ destinations or receive buffers, `-s` bytes each.
    fn at(&self, k: u64) -> u64 {
        if k == 0 {
            0
        } else {
            self.region() + (k - 1) * self.size as u64
        }
    }
}

fn parse(cmdline: &str) -> Result<Opts, String> {
    let args = oob::tool_args(cmdline, "perftest");
    let mut it = args.iter();
    let (tool, verb) = match it.next().copied() {
        Some("ib_write_bw") => ("ib_write_bw", Verb::Write),
        Some("ib_read_bw") => ("ib_read_bw", Verb::Read),
        Some("ib_send_bw") => ("ib_send_bw", Verb::Send),
        Some(t) => return Err(format!("{t}: not supported yet (ib_write_bw, ib_read_bw, ib_send_bw)")),
        None => return Err("which tool? (perftest ib_write_bw|ib_read_bw|ib_send_bw ...)".into()),
    };
    let mut o = Opts { tool, verb, size: 65536, iters: 5000, mtu: 3, client: false };
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().copied().ok_or(format!("{name} needs a value"));
        match *a {
            "-s" | "--size" => {
                let v = val("-s")?;
                o.size = oob::parse_num(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0 && n <= 1 << 20)
                    .ok_or(format!("-s {v}: not a size from 1 to 1M"))?;
            }
            "-n" | "--iters" => {
                let v = val("-n")?;
                o.iters = oob::parse_num(v).filter(|&n| n > 0 && n <= 1 << 24).ok_or(format!("-n {v}: not a count"))?;
            }
            "-m" | "--mtu" => {
                let v = val("-m")?;
                o.mtu = oob::parse_num(v).and_then(oob::mtu_enum).ok_or(format!("-m {v}: not 256..4096"))?;
            }
            "-x" | "--gid-index" | "-d" | "--ib-dev" | "-p" | "--port" | "-i" | "--ib-port" => {
                val(a)?;
            }
            "-F" | "--CPU-freq" => {}
            "-a" | "--all" | "-D" | "--duration" => return Err(format!("{a}: not supported yet")),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ => o.client = true,
        }
    }
    match cmdline.split_ascii_whitespace().filter_map(|w| w.strip_prefix("role=")).next_back() {
        Some("client") => o.client = true,
        Some("server") => o.client = false,
        Some(r) => return Err(format!("role={r}: not server or client")),
        None => {}
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

/// The figures perftest prints: (size, iterations, BW peak MB/s, BW average MB/s, Mpps).
#[derive(Clone, Copy, Default)]
struct Report {
    size: u64,
    iters: u64,
    peak: f64,
    avg: f64,
    rate: f64,
}

fn print_table(r: &Report) {
    println!("---------------------------------------------------------------------------------------");
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
    println!(" {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}", r.size, r.iters, r.peak, r.avg, r.rate);
    println!("---------------------------------------------------------------------------------------");
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

fn run(o: &Opts, cmdline: &str) -> Result<(), String> {
    let mac = peer_mac(cmdline).ok_or("need peer_mac=aa:bb:cc:dd:ee:ff (the unikernel answers no ARP)")?;
    let ip = oob::cmdline_ipv4(cmdline).ok_or("need ip=A.B.C.D/N")?;
    let hal = mlx5_kernel::open_first(None).map_err(|e| format!("no mlx5 function: {e:?}"))?;
    let dev = Context::open(hal, ContextConfig::default()).map_err(|e| format!("bring-up: {e:?}"))?;
    let sgid = oob::ipv4_gid_index(&dev, ip).map_err(|e| format!("the IPv4 GID: {e:?}"))?;
    let gid = oob::ipv4_gid(ip);
    // Slot 0: the buffer the peer targets (WRITE, READ) or this side sends from; slots 1..:
    // READ destinations or receive buffers.
    let slots = OUTSTANDING as u64 + 1;
    let len = usize::try_from(o.at(slots)).map_err(|_| "size")?;
    let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e:?}"))?;
    let mr = pd.alloc_mr(len, AccessFlags::ALL).map_err(|e| format!("alloc_mr: {e:?}"))?;
    let fill: Vec<u8> = (0..len).map(|i| oob::pattern(SEED, 0, i)).collect();
    mr.write(0, &fill).map_err(|e| format!("write: {e:?}"))?;
    let mut cq = dev.create_cq(256).map_err(|e| format!("create_cq: {e:?}"))?;
    let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64, ..QpCaps::default() };
    let mut qp = pd.create_qp(&cq, &cq, &caps).map_err(|e| format!("create_qp: {e:?}"))?;
    let ep = qp.endpoint();
    let dcaps = dev.caps();
    let my_reads: u32 = match o.verb {
        Verb::Read => (1u32 << dcaps.log_max_ra_res_qp.min(7)).min(128),
        _ => 1,
    };
    let me = Dest { out_reads: my_reads, qpn: ep.qpn, psn: ep.psn, rkey: mr.rkey(), vaddr: mr.addr(), gid };

    let mut link = Oob::new(WAIT);
    let c = o.client;
    let mut v = [0u8; 16];
    v[..VERSION.len()].copy_from_slice(VERSION);
    let theirs = xchg(&mut link, c, &v, "versions")?;
    let their_version: String = core::str::from_utf8(theirs.split(|&b| b == 0).next().unwrap_or(&[])).unwrap_or("?").into();
    let _ = xchg(&mut link, c, &CYCLE_BUFFER.to_be_bytes(), "cycle buffers")?;
    let _ = xchg(&mut link, c, &CACHE_LINE.to_be_bytes(), "cache line sizes")?;
    let m = xchg(&mut link, c, &[b'0' + o.mtu, 0], "MTUs")?;
    let their_mtu = m.first().map(|b| b.wrapping_sub(b'0')).filter(|x| (1..=5).contains(x)).ok_or("garbled MTU")?;
    let mtu = o.mtu.min(their_mtu);
    println!("---------------------------------------------------------------------------------------");
    println!("                    {} (unikernel, {}) against perftest {their_version}", o.tool, if c { "client" } else { "server" });
    println!(" Mtu             : {}[B]", 128u32 << mtu);
    println!(" GID index       : {sgid}");
    println!("---------------------------------------------------------------------------------------");
    let km = key_msg(&me);
    let rem = parse_key(&xchg(&mut link, c, &km, "keys")?).ok_or("the peer's keys are garbled")?;
    println!(
        " local address: LID 0000 QPN {:#06x} PSN {:#x} RKey {:#08x} VAddr {:#016x}",
        me.qpn, me.psn, me.rkey, me.vaddr
    );
    println!(" remote address: LID 0000 QPN {:#06x} PSN {:#x} RKey {:#08x} VAddr {:#016x}", rem.qpn, rem.psn, rem.rkey, rem.vaddr);
    let copts = ConnectOptions {
        mtu: mtu_of(mtu),
        sgid_index: sgid as u8,
        max_dest_rd_atomic: my_reads as u8,
        max_rd_atomic: rem.out_reads.clamp(1, 1u32 << dcaps.log_max_ra_req_qp.min(7)) as u8,
        ..ConnectOptions::default()
    };
    qp.connect(&QpEndpoint { qpn: rem.qpn, psn: rem.psn, gid: rem.gid, mac }, &copts)
        .map_err(|e| format!("connect: {e:?}"))?;
    let hs = |link: &mut Oob, what: &str| -> Result<(), String> { xchg(link, c, &km, what).map(|_| ()) };
    hs(&mut link, "handshake after RTR")?;
    // perftest 4.5 syncs once more before the run (seen in the capture of two Linux peers).
    hs(&mut link, "second handshake after RTR")?;

    let remote = Remote { addr: rem.vaddr, rkey: rem.rkey };
    let mine: Report;
    let checked: String;
    match (o.verb, c) {
        (Verb::Write | Verb::Read, true) => {
            let (r, note) = requester(o, &mut qp, &mut cq, &mr, remote)?;
            mine = r;
            checked = note;
            hs(&mut link, "handshake after the run")?;
            print_table(&mine);
            for f in [mine.size.to_be_bytes(), mine.iters.to_be_bytes(), mine.peak.to_bits().to_be_bytes(), mine.avg.to_bits().to_be_bytes(), mine.rate.to_bits().to_be_bytes()] {
                xchg(&mut link, c, &f, "reports")?;
            }
        }
        (Verb::Write | Verb::Read, false) => {
            hs(&mut link, "handshake after the run")?;
            let mut f = [0u64; 5];
            for x in f.iter_mut() {
                let b = xchg(&mut link, c, &[0u8; 8], "reports")?;
                *x = u64::from_be_bytes(b.try_into().map_err(|_| "report")?);
            }
            let theirs = Report { size: f[0], iters: f[1], peak: f64::from_bits(f[2]), avg: f64::from_bits(f[3]), rate: f64::from_bits(f[4]) };
            print_table(&theirs);
            mine = theirs;
            let mut got = alloc::vec![0u8; len];
            mr.read(0, &mut got).map_err(|e| format!("read: {e:?}"))?;
            // The peer's WRITEs cover the region from its start, -s bytes each, up to its end.
            let n = (o.size as u64 * o.iters).min(o.region()) as usize;
            checked = if o.verb == Verb::Write {
                let changed = got[..n].iter().zip(&fill[..n]).filter(|(a, b)| a != b).count();
                if got[n..] != fill[n..] {
                    return Err(format!("the peer's WRITEs reached bytes beyond 0..{n}"));
                }
                // perftest's bytes are rand(): ~1/256 of them equal the pattern by chance.
                if changed < n - n / 64 - 1 {
                    return Err(format!("only {changed} of {n} bytes were written by the peer"));
                }
                format!("the peer's WRITEs landed in bytes 0..{n} ({changed} changed), nothing beyond")
            } else {
                if got != fill {
                    return Err("the peer's READs changed this side's buffer".into());
                }
                format!("this side's {len} bytes unchanged by the peer's READs")
            };
        }
        (Verb::Send, true) => {
            hs(&mut link, "handshake before the run")?;
            let (r, note) = requester(o, &mut qp, &mut cq, &mr, remote)?;
            mine = r;
            checked = note;
            print_table(&mine);
        }
        (Verb::Send, false) => {
            for k in 1..slots.min(caps.max_recv_wr as u64) {
                let s = [mr.sge(o.at(k), o.size)];
                qp.post_recv(&[RecvWr { wr_id: k, sges: &s }]).map_err(|e| format!("post_recv: {e:?}"))?;
            }
            hs(&mut link, "handshake before the run")?;
            let (r, note) = receiver(o, &mut qp, &mut cq, &mr, &fill, slots.min(caps.max_recv_wr as u64))?;
            mine = r;
            checked = note;
            print_table(&mine);
        }
    }
    hs(&mut link, "closing handshake")?;
    let d = xchg(&mut link, c, b"done\0", "done")?;
    if d != b"done\0" {
        return Err("the peer did not say done".into());
    }
    let _ = mine.avg;
    println!("perftest: {checked}: ok");
    drop(qp);
    drop(cq);
    drop(mr);
    drop(pd);
    dev.close().map_err(|_| "teardown refused")?;
    Ok(())
}

/// Converts a run into perftest's figures (MB = 2^20 bytes, as perftest's MB/sec).
fn report(o: &Opts, total: Duration, best: Duration) -> Report {
    let size = o.size as u64;
    let secs = total.as_secs_f64().max(1e-9);
    let mb = (1u64 << 20) as f64;
    let avg = (size * o.iters) as f64 / secs / mb;
    let peak = if best.is_zero() { avg } else { size as f64 / best.as_secs_f64() / mb };
    Report { size, iters: o.iters, peak: peak.max(avg), avg, rate: o.iters as f64 / secs / 1e6 }
}

/// WRITE, READ or SEND `-n` times, up to [`OUTSTANDING`] at a time, each signaled.
fn requester<H: mlx5::Hal>(
    o: &Opts,
    qp: &mut mlx5::QueuePair<H>,
    cq: &mut mlx5::CompletionQueue<H>,
    mr: &mlx5::MemoryRegion<H>,
    remote: Remote,
) -> Result<(Report, String), String> {
    let t0 = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut last = Instant::now();
    let mut best = Duration::MAX;
    let mut first: Option<Vec<u8>> = None;
    let mut got = alloc::vec![0u8; o.size as usize];
    let mut mismatches = 0u64;
    while done < o.iters {
        while posted < o.iters && posted - done < OUTSTANDING as u64 {
            // READs land in their own slot (1..); WRITE and SEND go out of slot 0.
            let slot = 1 + posted % OUTSTANDING as u64;
            let local = if o.verb == Verb::Read { [mr.sge(o.at(slot), o.size)] } else { [mr.sge(0, o.size)] };
            let op = match o.verb {
                Verb::Write => SendOp::Write { remote, imm: None },
                Verb::Read => SendOp::Read { remote },
                Verb::Send => SendOp::Send { imm: None },
            };
            let wr = SendWr { wr_id: posted, op, data: SendData::Sges(&local), flags: SendFlags::SIGNALED };
            qp.post_send(&[wr]).map_err(|e| format!("post_send {posted}: {e:?}"))?;
            posted += 1;
        }
        let wcs = cq.poll_wait(1, WAIT).map_err(|e| format!("poll: {e:?}"))?;
        let wc = wcs.first().ok_or(format!("no completion in {WAIT:?} ({done} of {} done)", o.iters))?;
        if wc.status != WcStatus::Success {
            return Err(format!("work request {} in error: {:?} (vendor syndrome {:#x})", wc.wr_id, wc.status, wc.vendor_err));
        }
        if o.verb == Verb::Read {
            let slot = 1 + wc.wr_id % OUTSTANDING as u64;
            mr.read(o.at(slot), &mut got).map_err(|e| format!("read: {e:?}"))?;
            match &first {
                None => first = Some(got.clone()),
                Some(f) if *f != got => mismatches += 1,
                Some(_) => {}
            }
        }
        let now = Instant::now();
        best = best.min(now.duration_since(last));
        last = now;
        done += 1;
    }
    let r = report(o, t0.elapsed(), if best == Duration::MAX { Duration::ZERO } else { best });
    let note = match o.verb {
        Verb::Read if mismatches > 0 => return Err(format!("{mismatches} of {} READs returned other bytes than the first", o.iters)),
        Verb::Read => format!("every byte of {} READs of {} B equals the first READ", o.iters, o.size),
        _ => {
            let mut b = alloc::vec![0u8; o.size as usize];
            mr.read(0, &mut b).map_err(|e| format!("read: {e:?}"))?;
            if b.iter().enumerate().any(|(i, &x)| x != oob::pattern(SEED, 0, i)) {
                return Err("the source buffer changed".into());
            }
            format!("{} {} of {} B from the known pattern", o.iters, if o.verb == Verb::Send { "SENDs" } else { "WRITEs" }, o.size)
        }
    };
    Ok((r, note))
}

/// Receives `-n` SENDs into the slots `1..slots`, reposting each.
fn receiver<H: mlx5::Hal>(
    o: &Opts,
    qp: &mut mlx5::QueuePair<H>,
    cq: &mut mlx5::CompletionQueue<H>,
    mr: &mlx5::MemoryRegion<H>,
    fill: &[u8],
    slots: u64,
) -> Result<(Report, String), String> {
    let size = o.size as u64;
    let mut t0: Option<Instant> = None;
    let mut last = Instant::now();
    let mut best = Duration::MAX;
    let mut got = alloc::vec![0u8; o.size as usize];
    let mut landed = 0u64;
    for n in 0..o.iters {
        let wcs = cq.poll_wait(1, WAIT).map_err(|e| format!("poll: {e:?}"))?;
        let wc = wcs.first().ok_or(format!("no message in {WAIT:?} ({n} of {} received)", o.iters))?;
        let now = Instant::now();
        if t0.is_none() {
            t0 = Some(now);
        } else {
            best = best.min(now.duration_since(last));
        }
        last = now;
        if wc.status != WcStatus::Success {
            return Err(format!("receive {n} in error: {:?} (vendor syndrome {:#x})", wc.status, wc.vendor_err));
        }
        if wc.byte_len != o.size {
            return Err(format!("message {n}: {} bytes, not {}", wc.byte_len, o.size));
        }
        let slot = 1 + (wc.wr_id - 1) % (slots - 1);
        mr.read(o.at(slot), &mut got).map_err(|e| format!("read: {e:?}"))?;
        let at = o.at(slot) as usize;
        landed += got.iter().zip(&fill[at..at + o.size as usize]).filter(|(a, b)| a != b).count() as u64;
        // Back to the pattern, so the next message into this slot shows again.
        mr.write(o.at(slot), &fill[at..at + o.size as usize]).map_err(|e| format!("write: {e:?}"))?;
        let s = [mr.sge(o.at(slot), o.size)];
        qp.post_recv(&[RecvWr { wr_id: wc.wr_id + slots - 1, sges: &s }]).map_err(|e| format!("post_recv: {e:?}"))?;
    }
    let total = (size * o.iters) as f64;
    // perftest's bytes are rand(): about 1/256 equal the pattern by chance.
    if (landed as f64) < total * 0.95 {
        return Err(format!("only {landed} of {total} received bytes differ from the pattern they overwrote"));
    }
    let span = t0.map(|t| t.elapsed()).unwrap_or_default();
    let r = report(o, span, if best == Duration::MAX { Duration::ZERO } else { best });
    Ok((r, format!("{} messages of {} B received, {landed} bytes landed", o.iters, o.size)))
}
