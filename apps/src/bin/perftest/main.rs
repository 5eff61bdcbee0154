//! perftest's other side: the client and the server of `ib_write_bw`, `ib_read_bw`,
//! `ib_send_bw`, `ib_atomic_bw`, `ib_write_lat`, `ib_read_lat` and `ib_send_lat`
//! (linux-rdma/perftest 4.5-0.17, as Debian bookworm ships it; it calls itself "6.06"), against
//! Linux (`cargo run -- --peer linux --peer-cmd 'ib_write_lat -d rxe0 -x $GID -F'`).
//!
//! Cmdline: `perftest TOOL [-s SIZE] [-n ITERS] [-a] [-D SECS [-f MARGIN]] [-e] [-m MTU] [-u TIMEOUT]
//! [-A FETCH_AND_ADD|CMP_AND_SWAP] [-p PORT] [-R] [-x GID] [-d DEV] [-F] [SERVER] role=server|client
//! ip=A.B.C.D/N [peer=A.B.C.D] [neigh=A.B.C.D,MAC]`, the tool's own spelling; `-x`, `-d`, `-F`,
//! `-i` are accepted and ignored (the GID is `ip=`'s). `-p` is the TCP port of the exchange
//! (18515); as server this side listens on it, as client it connects to `peer=` on it. The
//! peer's MAC comes by ARP for the IPv4 address of the GID it sent (apps/src/stack.rs).
//! Defaults and refusals as perftest's (src/perftest_parameters.c `init_perftest_params`,
//! `force_dependecies`, `parser`): `-s` 65536 (bw), 2 (lat), 8 (atomic, the only size); `-n`
//! 5000 (ib_write_bw), else 1000, at least 5 (`MIN_ITER`); `-a` runs the sizes 2^1 .. 2^23
//! (`MAX_SIZE`); `-D` with `-a` or `-e` is refused, `-e` with a WRITE tool is refused, `-a`
//! with ib_atomic_bw is refused (its size cannot change). This side caps `-n` at 2^20 (it
//! keeps a timestamp per iteration, as perftest does).
//!
//! The exchange, over TCP (apps/src/oob.rs), as perftest 4.5's
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
//!      their own figures (with `-a` a handshake after each size). The receiver keeps
//!      perftest's `rx_depth` receives posted (512, at most `-n`, made even without `-a`) and
//!      posts one again as each completes, before it checks the message (`ctx_set_recv_wqes`,
//!      `run_iter_bw_server`; rdma_checks::recv_ring), so Linux's 128 SENDs in flight never
//!      meet an empty receive queue (no RNR NAK);
//!    - `ib_write_lat`: no more exchange: both sides ping-pong RDMA WRITEs, each polling the
//!      last byte of its buffer for the count (`run_iter_lat_write`; the server writes first);
//!    - `ib_read_lat`: the client READs one at a time (`run_iter_lat`), the server only waits;
//!    - `ib_send_lat`: per size both post `rx_depth` receives, a handshake, then SEND
//!      ping-pong (`run_iter_lat_send`; the client sends first).
//! 6. `ctx_close_connection`: a handshake, then `"done"` and its NUL each way (not
//!    ib_write_lat).
//!
//! With `-R` (perftest's `--rdma_cm`) nothing goes over TCP: the exchange is an rdma_cm RC
//! connection to `-p`, each message one SEND, and the keys are `struct pingpong_dest`'s 56
//! bytes rather than text (`rdma_write_keys`, apps/src/perftest.rs); after the MTU a handshake,
//! the test's QP connected by rdma_cm to the same port, and a handshake come before the keys;
//! the QP is not connected from the keys, `ctx_close_connection` is the handshake alone (no
//! `"done"`), and both connections are disconnected at the end (cm.rs). The connections'
//! parameters are rdma_cm's (`-u` and `-m` do not apply to the QP).
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

use apps::app::{self, Hca};
use apps::oob::{self, Oob, OobError, Side};
use apps::stack::{self, KernelNode};
use kernel::time::{Deadline, Instant};
use kernel::{println, AppContext};
use mlx5::{
    AccessFlags, CompletionChannel, CompletionQueue, ConnectOptions, CounterSet, Hal, MemoryRegion,
    ProtectionDomain, QpCaps, QpEndpoint, QueuePair, Remote, SendData, SendFlags, SendOp, SendWr,
    WcStatus, WorkCompletion,
};
use mlx5_kernel::KernelHal;
use net::NetError;
use rdma_checks::recv_ring::{send_rx_depth, RecvRing};

mod args;
mod buffer;
mod bw;
mod clock;
mod cm;
mod error;
mod exchange;
mod lat;
mod link;
mod recv;
mod report;
mod res;
mod target;

/// What each side writes last (perftest_communication.c `ctx_close_connection`: `sizeof "done"`).
const DONE: &[u8; 5] = b"done\0";

use args::*;
use buffer::*;
use bw::*;
use clock::*;
use cm::*;
use error::*;
use exchange::*;
use lat::*;
use link::*;
use recv::*;
use report::*;
use res::*;
use target::*;

kernel::entry_point!(main);

const WAIT: Duration = Duration::from_secs(120);
fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    app::exit("perftest", parse(cmdline), |o| run(&o, cmdline))
}

fn run<'a>(o: &Opts, cmdline: &'a str) -> Result<(), Error<'a>> {
    let net = stack::net_args(cmdline).map_err(Error::NetArgs)?;
    let side = Side::new(o.client, net.peer).map_err(Error::Side)?;
    // Fault finding: the QP counts into a Q counter set of its own, printed with the port's
    // counters when the run fails.
    app::with_counted_hca("perftest", |dev, set| run_on(o, dev, &net, side, set))
}

/// The run on the open device: the resources, the exchange, the test's connection, the test
/// and its report, and the resources' end.
fn run_on(
    o: &Opts,
    dev: &Hca,
    net: &stack::NetArgs,
    side: Side,
    set: Option<&CounterSet<KernelHal>>,
) -> Result<(), Error<'static>> {
    let ip = net.ip.addr;
    let sgid = oob::ipv4_gid_index(dev, ip).map_err(|e| Error::Verbs("the IPv4 GID", e))?;
    let gid = oob::ipv4_gid(ip);
    let pd = dev.alloc_pd().map_err(|e| Error::Verbs("alloc_pd", e))?;
    let (mut r, caps) = setup(o, dev, &pd, net, side, sgid)?;
    // perftest_parameters.c: out_reads is the device's maximum for READ and atomic tools.
    let my_reads: u32 = match o.verb {
        Verb::Read | Verb::Atomic => (1u32 << dev.caps().log_max_ra_res_qp.min(7)).min(128),
        _ => 1,
    };
    let mtu = exchange_params(o, &mut r, sgid)?;
    if o.rdma_cm {
        rdma_cm_connection(o, &mut r, &pd, caps, my_reads)?;
    }
    if let Some(s) = set {
        match r.qp()?.set_counter_set(Some(s)) {
            Ok(()) => {}
            // With -R the CM has moved the QP to RTS already: a set it cannot take there
            // only costs the fault-finding counters.
            Err(e) if o.rdma_cm => log::info!("perftest: no Q counter set on the QP: {e:?}"),
            Err(e) => return Err(Error::Verbs("the QP's counter set", e)),
        }
    }
    let ep = r.qp()?.endpoint();
    let me = Dest {
        out_reads: my_reads,
        qpn: ep.qpn,
        psn: ep.psn,
        rkey: r.mr.rkey(),
        vaddr: r.mr.addr() + r.lay.target(),
        gid,
    };
    let (rem, km) = exchange_keys(o, &mut r, &me, sgid)?;
    // With -R the test's QP is connected; otherwise to the peer's keys.
    if !o.rdma_cm {
        connect(o, dev, &mut r, &rem, mtu, sgid, my_reads)?;
    }
    let c = o.client;
    hs(&mut r.link, c, &km, "handshake after RTR")?;
    hs(&mut r.link, c, &km, "second handshake after RTR")?;
    let remote = Remote {
        addr: rem.vaddr,
        rkey: rem.rkey,
    };
    let mut notes = the_test(o, &mut r, remote, &km)?;
    finish(o, &mut r, &mut notes)?;
    drop(r);
    drop(pd);
    Ok(())
}

/// The region (the pattern written), the exchange's link, the CQs (on completion channels
/// with `-e`) and, without `-R`, the test's QP; and the QP's capabilities.
fn setup(
    o: &Opts,
    dev: &Hca,
    pd: &ProtectionDomain<KernelHal>,
    net: &stack::NetArgs,
    side: Side,
    sgid: u16,
) -> Result<(Res, QpCaps), Error<'static>> {
    let lay = Layout::new(o.max_size(), o.verb, o.rx_depth);
    let len = usize::try_from(lay.len()).map_err(|_| Error::TooLarge("a region of", lay.len()))?;
    let t = Instant::now();
    let mr = pd
        .alloc_mr(len, AccessFlags::ALL)
        .map_err(|e| Error::Verbs("alloc_mr", e))?;
    log::info!(
        "perftest: region of {len} B registered in {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    fill(&mr, 0, lay.len())?;
    log::info!("perftest: pattern written in {:?}", t.elapsed());
    if (o.verb, o.test) == (Verb::Write, Test::Lat) {
        // The byte each size's ping-pong polls starts at 0 (perftest zeroes its whole buffer).
        for s in o.sizes() {
            mr.write(lay.target() + s - 1, &[0])
                .map_err(|e| Error::Verbs("write", e))?;
        }
    }
    let node = KernelNode::up(dev, net).map_err(Error::Network)?;
    let link = if o.rdma_cm {
        Link::Cm(alloc::boxed::Box::new(
            CmLink::open(dev, pd, node, side, o.port, sgid as u8, WAIT)
                .map_err(|e| Error::Link("the exchange (-R)", LinkError::Cm(e)))?,
        ))
    } else {
        Link::Tcp(alloc::boxed::Box::new(
            Oob::open(node, side, o.port, WAIT)
                .map_err(|e| Error::Link("the exchange", LinkError::Tcp(e)))?,
        ))
    };
    let (sch, rch) = if o.events {
        (
            Some(dev.create_comp_channel()),
            Some(dev.create_comp_channel()),
        )
    } else {
        (None, None)
    };
    let mk_cq = |ch: &Option<CompletionChannel<_>>, n: u32| match ch {
        Some(c) => dev.create_cq_with_channel(n, c),
        None => dev.create_cq(n),
    };
    // perftest (perftest_resources.c `create_reg_cqs`, `ctx_init`): the receive CQ and the
    // receive queue hold rx_depth, every receive this side keeps posted.
    let (rq, rcq_len) = match o.verb {
        Verb::Send => {
            let d =
                u32::try_from(o.rx_depth).map_err(|_| Error::TooLarge("rx_depth", o.rx_depth))?;
            (d, d.max(256))
        }
        _ => (64, 256),
    };
    let scq = mk_cq(&sch, 256).map_err(|e| Error::Verbs("create_cq", e))?;
    let rcq = mk_cq(&rch, rcq_len).map_err(|e| Error::Verbs("create_cq", e))?;
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: rq,
        ..QpCaps::default()
    };
    // With -R the test's QP comes with its rdma_cm connection, after the first exchanges.
    let qp = if o.rdma_cm {
        None
    } else {
        Some(
            pd.create_qp(&scq, &rcq, &caps)
                .map_err(|e| Error::Verbs("create_qp", e))?,
        )
    };
    let r = Res {
        qp,
        scq,
        rcq,
        sch,
        rch,
        mr,
        lay,
        events: [0; 3],
        recv_dirty: false,
        link,
    };
    Ok((r, caps))
}

/// Steps 1 to 3 of the exchange (the versions, `check_sys_data`, `check_mtu`) and the
/// header; the MTU both take.
fn exchange_params(o: &Opts, r: &mut Res, sgid: u16) -> Result<u8, Error<'static>> {
    let c = o.client;
    let mut v = [0u8; 16];
    v[..VERSION.len()].copy_from_slice(VERSION);
    let theirs = xchg(&mut r.link, c, &v, "versions")?;
    let their_version: String =
        core::str::from_utf8(theirs.split(|&b| b == 0).next().unwrap_or(&[]))
            .unwrap_or("?")
            .into();
    let _ = xchg(
        &mut r.link,
        c,
        &(CYCLE_BUFFER as u32).to_be_bytes(),
        "cycle buffers",
    )?;
    let _ = xchg(
        &mut r.link,
        c,
        &(CACHE_LINE as u32).to_be_bytes(),
        "cache line sizes",
    )?;
    let m = xchg(&mut r.link, c, &[b'0' + o.mtu, 0], "MTUs")?;
    let their_mtu = m
        .first()
        .map(|b| b.wrapping_sub(b'0'))
        .filter(|x| (1..=5).contains(x))
        .ok_or(Error::GarbledMtu)?;
    let mtu = o.mtu.min(their_mtu);
    print_header(o, &their_version, mtu, sgid);
    Ok(mtu)
}

/// The run's header: the tool, the MTU, the GID index, the iterations or duration, `-e`.
fn print_header(o: &Opts, their_version: &str, mtu: u8, sgid: u16) {
    println!("{RESULT_LINE}");
    let what = match o.verb {
        Verb::Atomic => format!("{} {:?}", o.tool, o.atomic),
        _ => o.tool.into(),
    };
    println!(
        "                    {what} (unikernel, {}) against perftest {their_version}",
        if o.client { "client" } else { "server" }
    );
    println!(" Mtu             : {}[B]", 128u32 << mtu);
    println!(" GID index       : {sgid}");
    match o.duration {
        Some((d, m)) => println!(" Duration        : {d} s (margin {m} s)"),
        None => println!(
            " Iterations      : {}{}",
            o.iters,
            if o.all { ", sizes 2..8388608" } else { "" }
        ),
    }
    println!(
        " Events          : {}",
        if o.events { "on" } else { "off (polling)" }
    );
    println!("{RESULT_LINE}");
}

/// Step 4, `ctx_hand_shake` of the keys `me` (and the _lat tools' second one for WRITE and
/// READ): the peer's keys and this side's message, which every later handshake repeats.
fn exchange_keys(
    o: &Opts,
    r: &mut Res,
    me: &Dest,
    sgid: u16,
) -> Result<(Dest, Vec<u8>), Error<'static>> {
    let c = o.client;
    // The keys: perftest's text over TCP, the struct's bytes over rdma_cm.
    let km = if o.rdma_cm {
        dest_bytes(me, sgid.into()).to_vec()
    } else {
        key_msg(me)
    };
    let theirs = xchg(&mut r.link, c, &km, "keys")?;
    let rem = if o.rdma_cm {
        parse_dest_bytes(&theirs)
    } else {
        parse_key(&theirs)
    }
    .ok_or(Error::GarbledKeys)?;
    if o.test == Test::Lat && matches!(o.verb, Verb::Write | Verb::Read) {
        // write_lat.c / read_lat.c shake hands twice before connecting.
        hs(&mut r.link, c, &km, "second key handshake")?;
    }
    println!(
        " local address: LID 0000 QPN {:#06x} PSN {:#x} RKey {:#08x} VAddr {:#016x}",
        me.qpn, me.psn, me.rkey, me.vaddr
    );
    println!(
        " remote address: LID 0000 QPN {:#06x} PSN {:#x} RKey {:#08x} VAddr {:#016x}",
        rem.qpn, rem.psn, rem.rkey, rem.vaddr
    );
    Ok((rem, km))
}

/// Without `-R`: the peer's MAC, by ARP for the address its GID carries, and the test's QP
/// connected to the peer's keys `rem` (`ctx_modify_qp_to_rtr/rts`).
fn connect(
    o: &Opts,
    dev: &Hca,
    r: &mut Res,
    rem: &Dest,
    mtu: u8,
    sgid: u16,
    my_reads: u32,
) -> Result<(), Error<'static>> {
    let mac = r
        .link
        .peer_mac(&rem.gid)
        .map_err(|e| Error::Link("the peer's MAC", e))?;
    let copts = ConnectOptions {
        mtu: oob::mtu_of(mtu),
        sgid_index: sgid as u8,
        max_dest_rd_atomic: my_reads as u8,
        max_rd_atomic: rem
            .out_reads
            .clamp(1, 1u32 << dev.caps().log_max_ra_req_qp.min(7)) as u8,
        timeout: o.qp_timeout,
        ..ConnectOptions::default()
    };
    r.qp()?
        .connect(
            &QpEndpoint {
                qpn: rem.qpn,
                psn: rem.psn,
                gid: rem.gid,
                mac,
            },
            &copts,
        )
        .map_err(|e| Error::Verbs("connect", e))
}

/// A handshake: this side's keys message `km` each way (`ctx_hand_shake`).
fn hs(link: &mut Link, c: bool, km: &[u8], what: &'static str) -> Result<(), Error<'static>> {
    xchg(link, c, km, what).map(|_| ())
}

/// Step 6, `ctx_close_connection` with the keys message `km`. Before it (the launcher stops
/// this side a few seconds after Linux's tool ends): this side's own source half, the first
/// `half` bytes of `mr`, is never written by anyone but itself.
fn close(
    link: &mut Link,
    mr: &MemoryRegion<KernelHal>,
    half: u64,
    c: bool,
    km: &[u8],
) -> Result<(), Error<'static>> {
    if let Some(at) = first_changed(mr, 0, half)? {
        return Err(Check::SourceChanged(at).into());
    }
    hs(link, c, km, "closing handshake")?;
    // Over rdma_cm, ctx_close_connection is the handshake alone.
    if matches!(link, Link::Cm(_)) {
        return Ok(());
    }
    // perftest_communication.c `ctx_close_connection`: each side writes "done" and its
    // NUL and closes without reading the other's. So the peer's comes whatever this
    // side does, and the peer may have closed, and reset what arrives after (Linux
    // does on a socket closed with data unread), before this side's is there.
    let d = link.recv(DONE.len()).map_err(|e| Error::Xchg("done", e))?;
    if d != DONE {
        return Err(Error::NoDone);
    }
    match link.send(DONE) {
        Ok(())
        | Err(LinkError::Tcp(OobError::Stream {
            err: NetError::Reset | NetError::Closed,
            ..
        })) => Ok(()),
        Err(e) => Err(Error::Xchg("done", e)),
    }
}

/// Step 5, the test with the peer's buffer `remote`, its figures printed, and step 6; the
/// notes of what was checked.
fn the_test(
    o: &Opts,
    r: &mut Res,
    remote: Remote,
    km: &[u8],
) -> Result<Vec<String>, Error<'static>> {
    let c = o.client;
    let half = r.lay.half;
    let mut notes: Vec<String> = Vec::new();
    match (o.test, o.verb, c) {
        (Test::Bw, Verb::Write | Verb::Read | Verb::Atomic, true) => {
            print_bw_header();
            let mut last = Report::default();
            for s in o.sizes() {
                let (rep, note) = bw_requester(o, r, remote, s)?;
                print_bw_line(&rep);
                notes.push(note);
                last = rep;
            }
            println!("{RESULT_LINE}");
            hs(&mut r.link, c, km, "handshake after the run")?;
            send_report(&mut r.link, c, &last)?;
            close(&mut r.link, &r.mr, half, c, km)?;
        }
        (Test::Bw, Verb::Write | Verb::Read | Verb::Atomic, false) => {
            print_bw_header();
            hs(&mut r.link, c, km, "handshake after the run")?;
            let theirs = recv_report(&mut r.link, c)?;
            print_bw_line(&theirs);
            println!("{RESULT_LINE}");
            // The client's run is over (its last WR completed before it shook hands).
            notes.push(check_target(o, r, theirs.iters)?);
            close(&mut r.link, &r.mr, half, c, km)?;
        }
        (Test::Bw, Verb::Send, _) => {
            print_bw_header();
            for s in o.sizes() {
                let ring = if c { None } else { Some(post_recvs(o, r, s)?) };
                hs(&mut r.link, c, km, "handshake before the run")?;
                let (rep, note) = match ring {
                    None => bw_requester(o, r, remote, s)?,
                    Some(ring) => receiver(o, r, s, ring)?,
                };
                print_bw_line(&rep);
                notes.push(note);
                if o.all {
                    hs(&mut r.link, c, km, "handshake after the size")?;
                }
            }
            println!("{RESULT_LINE}");
            close(&mut r.link, &r.mr, half, c, km)?;
        }
        (Test::Lat, Verb::Write, _) => {
            print_lat_header(o);
            for s in o.sizes() {
                notes.push(write_lat(o, r, remote, s)?);
            }
            println!("{RESULT_LINE}");
            notes.push(check_write_lat_target(o, r)?);
        }
        (Test::Lat, Verb::Read, true) => {
            print_lat_header(o);
            for s in o.sizes() {
                notes.push(read_lat(o, r, remote, s)?);
            }
            println!("{RESULT_LINE}");
            close(&mut r.link, &r.mr, half, c, km)?;
        }
        (Test::Lat, Verb::Read, false) => {
            close(&mut r.link, &r.mr, half, c, km)?;
            println!("{RESULT_LINE}");
            notes.push(check_target(o, r, 0)?);
        }
        (Test::Lat, Verb::Send, _) => {
            print_lat_header(o);
            for s in o.sizes() {
                let ring = post_recvs(o, r, s)?;
                hs(&mut r.link, c, km, "handshake before the run")?;
                notes.push(send_lat(o, r, s, ring)?);
            }
            println!("{RESULT_LINE}");
            close(&mut r.link, &r.mr, half, c, km)?;
        }
        (Test::Lat, Verb::Atomic, _) => return Err(Error::AtomicLat),
    }
    Ok(notes)
}

/// After the test: ib_write_lat's source check, `-e`'s events, the notes printed, and with
/// `-R` both rdma_cm connections disconnected.
fn finish(o: &Opts, r: &mut Res, notes: &mut Vec<String>) -> Result<(), Error<'static>> {
    // This side's own source half is never written by anyone but itself.
    if o.verb == Verb::Write && o.test == Test::Lat {
        if let Some(at) = first_changed(&r.mr, 0, r.lay.half)? {
            return Err(Check::SourceChanged(at).into());
        }
    }
    if o.events {
        // The sides that wait for completions: every client, and the SEND servers.
        let waits = o.client || o.verb == Verb::Send;
        if waits && r.events[0] == 0 {
            return Err(Error::NoEvents);
        }
        notes.push(format!(
            "{} completion events taken; {} completions there at the first poll, {} right after arming (-e)",
            r.events[0], r.events[1], r.events[2]
        ));
    }
    for n in notes.iter() {
        println!("perftest: {n}: ok");
    }
    // -R: both rdma_cm connections disconnected (destroy_ctx), their QPs destroyed with
    // their ids before the test's CQs go.
    if let Link::Cm(l) = &mut r.link {
        println!("perftest: rdma_cm: {}", l.close());
    }
    Ok(())
}
