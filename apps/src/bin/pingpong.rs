//! `ibv_rc_pingpong`'s other side: the RC SEND/RECV ping-pong of rdma-core's
//! libibverbs/examples/rc_pingpong.c, as server or client, against Linux (`cargo run --
//! --peer linux --peer-cmd 'ibv_rc_pingpong ...'`).
//!
//! Cmdline: `pingpong [-s SIZE] [-n ITERS] [-m MTU] [-p PORT] [SERVER] role=server|client
//! ip=A.B.C.D/N [peer=A.B.C.D] [neigh=A.B.C.D,MAC]` (the tool's own option spelling; `-d`,
//! `-g`, `-i`, `-r`, `-l` are accepted and ignored: the device, GID index and port are
//! `ip=`'s). A `SERVER` word or `role=client` makes it the client. `-p` is the TCP port of the
//! exchange (18515): the server listens on it, the client connects to `peer=` on it. The
//! peer's MAC comes by ARP for the IPv4 address of the GID it sent (apps/src/stack.rs).
//!
//! The exchange (rc_pingpong.c `pp_client_exch_dest` / `pp_server_exch_dest`), over TCP
//! (apps/src/oob.rs): the client writes `"%04x:%06x:%06x:%s"` of LID, QPN,
//! PSN and the 16 GID bytes as 32 hex digits, NUL-terminated (52 bytes); the server reads it,
//! connects its QP, answers the same; the client reads it and writes `"done"` with its NUL.
//! QP attributes as `pp_connect_ctx`: MTU `-m` (1024), min_rnr_timer 12, timeout 14, retry 7,
//! rnr_retry 7, one outstanding READ/atomic each way, hop limit 1.
//!
//! The ping-pong (rc_pingpong.c `main`/`parse_single_wc`): both sides keep receives posted;
//! the client sends first; each side sends its next message once its previous SEND completed
//! and a message arrived, until both counts reach `-n`. rc_pingpong sends from and receives
//! into one buffer (filled with 0x7b by `pp_init_ctx`), so it echoes what it received: every
//! message from Linux must equal the unikernel's previous one (the server's first, 0x7b
//! bytes). Every byte is checked.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::time::Duration;

use apps::app::{self, Hca, OptionError};
use apps::oob::{self, Oob, OobError, Side};
use apps::pingpong::{
    self, dest_msg, first_difference, message, next_completion, print_figures, read_remote, Error,
    Opts, Tool, WAIT,
};
use apps::stack::{self, KernelNode, NetArgs};
use kernel::time::Instant;
use kernel::{println, AppContext};
use mlx5::{
    AccessFlags, CompletionQueue, ConnectOptions, CounterSet, MemoryRegion, QpCaps, QpEndpoint,
    QueuePair, RecvWr, SendData, SendFlags, SendOp, SendWr, WorkCompletion,
};
use mlx5_kernel::KernelHal;

kernel::entry_point!(main);

const RECV_SLOTS: u64 = 4;
const SEED: u8 = 0x5a;
/// rc_pingpong's `pp_init_ctx`: `memset(ctx->buf, 0x7b, size)`.
const RC_PINGPONG_FILL: u8 = 0x7b;

/// rc_pingpong's options (rc_pingpong.c `main`: `-s` 4096 here, `-n` 1000, `-m` 1024).
fn parse(cmdline: &str) -> Result<Opts, OptionError<'_>> {
    let tool = Tool {
        app: "pingpong",
        max_size: 1 << 20,
        mtu: true,
    };
    let defaults = Opts {
        size: 4096,
        iters: 1000,
        mtu: 3,
        rx_depth: 500,
        client: false,
        port: oob::TOOL_PORT,
    };
    pingpong::parse(cmdline, &tool, defaults)
}

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    app::exit("pingpong", parse(cmdline), |o| run(&o, cmdline))
}

fn run<'a>(o: &Opts, cmdline: &'a str) -> Result<(), Error<'a>> {
    let net = stack::net_args(cmdline).map_err(Error::NetArgs)?;
    let side = Side::new(o.client, net.peer).map_err(|e| Error::Oob("the cmdline", e))?;
    // Fault finding: the QP counts into a Q counter set of its own, printed with the port's
    // counters when the run fails.
    app::with_counted_hca("pingpong", |dev, set| run_on(o, dev, &net, side, set))
}

/// The run on the open HCA: the resources, the exchange, the ping-pong and its figures.
fn run_on(
    o: &Opts,
    dev: &Hca,
    net: &NetArgs,
    side: Side,
    set: Option<&CounterSet<KernelHal>>,
) -> Result<(), Error<'static>> {
    let ip = net.ip.addr;
    let gid = oob::ipv4_gid(ip);
    let sgid = oob::ipv4_gid_index(dev, ip).map_err(|e| Error::Verbs("the IPv4 GID", e))?;
    let size = o.size as u64;
    let pd = dev.alloc_pd().map_err(|e| Error::Verbs("alloc_pd", e))?;
    let bytes = size * (RECV_SLOTS + 1);
    let len = usize::try_from(bytes).map_err(|_| Error::TooLarge(bytes))?;
    let mr = pd
        .alloc_mr(len, AccessFlags::LOCAL_WRITE)
        .map_err(|e| Error::Verbs("alloc_mr", e))?;
    let cq = dev
        .create_cq(64)
        .map_err(|e| Error::Verbs("create_cq", e))?;
    let mut qp = pd
        .create_qp(&cq, &cq, &QpCaps::default())
        .map_err(|e| Error::Verbs("create_qp", e))?;
    if let Some(s) = set {
        qp.set_counter_set(Some(s))
            .map_err(|e| Error::Verbs("the QP's counter set", e))?;
    }
    let me = QpEndpoint {
        gid,
        ..qp.endpoint()
    };
    println!(
        "  local address:  LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}, GID ::ffff:{}.{}.{}.{} (index {sgid})",
        me.qpn, me.psn, ip[0], ip[1], ip[2], ip[3]
    );
    let node = KernelNode::up(dev, net).map_err(Error::Node)?;
    let link = Oob::open(node, side, o.port, WAIT).map_err(|e| Error::Oob("the exchange", e))?;
    let mut r = Res {
        o,
        link,
        qp,
        cq,
        mr,
    };
    let rem = exchange(&mut r, &me, sgid as u8)?;
    println!(
        "  remote address: LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        rem.qpn,
        rem.psn,
        oob::hex(&rem.gid)
    );
    ping_pong(&mut r)?;
    drop(r);
    drop(pd);
    Ok(())
}

/// What the ping-pong runs on. Fields drop in order: the exchange's connection, the QP, its
/// CQ, the region.
struct Res<'a> {
    o: &'a Opts,
    link: Oob,
    qp: QueuePair<KernelHal>,
    cq: CompletionQueue<KernelHal>,
    mr: MemoryRegion<KernelHal>,
}

impl Res<'_> {
    /// Where receive slot `k` starts: slot k at (k mod RECV_SLOTS + 1) * size, after the send
    /// area.
    fn slot(&self, k: u64) -> u64 {
        (k % RECV_SLOTS + 1) * self.o.size as u64
    }

    /// Posts receive `wr_id` into its slot.
    fn post_recv(&mut self, wr_id: u64) -> Result<(), Error<'static>> {
        let s = [self.mr.sge(self.slot(wr_id), self.o.size)];
        self.qp
            .post_recv(&[RecvWr { wr_id, sges: &s }])
            .map_err(|e| Error::Verbs("post_recv", e))
    }
}

/// rc_pingpong.c `pp_client_exch_dest` / `pp_server_exch_dest` and `pp_connect_ctx`: the
/// peer's endpoint, this side's QP connected to it with its receives posted.
fn exchange(
    r: &mut Res<'_>,
    me: &QpEndpoint,
    sgid_index: u8,
) -> Result<QpEndpoint, Error<'static>> {
    let o = r.o;
    // rc_pingpong asks for hop limit 1, but for a unicast RoCE destination Linux replaces it
    // with the route's (64) (drivers/infiniband/core/verbs.c `ib_resolve_unicast_gid_dmac`):
    // the frames carry TTL 64 either way.
    let copts = ConnectOptions {
        mtu: oob::mtu_of(o.mtu),
        sgid_index,
        ..ConnectOptions::default()
    };
    let sent = |e: OobError| Error::Oob("sending to the peer", e);
    // The client writes first and says done last; the server connects before it answers.
    if o.client {
        r.link.send(&dest_msg(me)).map_err(sent)?;
    }
    let rem = read_remote(&mut r.link, o.client)?;
    r.qp.connect(&rem, &copts)
        .map_err(|e| Error::Verbs("connect", e))?;
    // rc_pingpong posts its receives in INIT, before the exchange; this driver's `connect`
    // takes the QP from RESET to RTS at once, so they are posted right after it, still before
    // the other side can send (the server connects before it answers; the client before the
    // server's first message can come).
    for k in 0..RECV_SLOTS {
        r.post_recv(k)?;
    }
    if o.client {
        r.link.send(b"done\0").map_err(sent)?;
    } else {
        r.link.send(&dest_msg(me)).map_err(sent)?;
    }
    Ok(rem)
}

/// rc_pingpong.c `main`'s loop, every received message checked; its figures, and where the
/// time went.
fn ping_pong(r: &mut Res<'_>) -> Result<(), Error<'static>> {
    let o = r.o;
    let t0 = Instant::now();
    // Message k: the known pattern with k's bytes XORed into every 8-byte word, made and
    // checked a word at a time (byte loops cost a microsecond an iteration under an
    // instruction-emulating KVM).
    let base: Vec<u8> = (0..o.size as usize)
        .map(|i| oob::pattern(SEED, 0, i))
        .collect();
    let mut p = Pong {
        base,
        last: Vec::new(),
        got: alloc::vec![0u8; o.size as usize],
        t: Times::default(),
    };
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut send_pending = false;
    let mut recv_pending = true;
    if o.client {
        p.send(r, 0)?;
        send_pending = true;
    }
    while rcnt < o.iters || scnt < o.iters {
        let tp = Instant::now();
        let wc = next_completion(&mut r.link, &mut r.cq, scnt, rcnt)?;
        let tw = Instant::now();
        p.t.poll += tw.duration_since(tp);
        if wc.wr_id >> 32 == 1 {
            scnt += 1;
            send_pending = false;
        } else {
            p.received(r, &wc, rcnt)?;
            rcnt += 1;
            recv_pending = false;
            let tp = Instant::now();
            r.post_recv(wc.wr_id + RECV_SLOTS)?;
            p.t.posting += tp.elapsed();
        }
        if scnt < o.iters && !send_pending && !recv_pending {
            p.send(r, scnt)?;
            send_pending = true;
            recv_pending = true;
        }
        let w = tw.elapsed();
        p.t.work += w;
        p.t.worst = p.t.worst.max(w);
    }
    print_figures(o, t0);
    p.t.print();
    println!("pingpong: every byte of {rcnt} messages checked: ok");
    Ok(())
}

/// Where the ping-pong's time goes: waiting for completions, and this side's own work between
/// them (checking a message, filling and posting the next), its longest step; of the work,
/// copying out of and into the registered memory and posting.
#[derive(Default)]
struct Times {
    poll: Duration,
    work: Duration,
    worst: Duration,
    read: Duration,
    write: Duration,
    posting: Duration,
}

impl Times {
    fn print(&self) {
        println!(
            "pingpong: {:.3} s waiting for completions, {:.3} s checking and posting (longest step {:.3} s), \
             of which {:.3} s in MemoryRegion::read, {:.3} s in MemoryRegion::write, {:.3} s in post_send/post_recv",
            self.poll.as_secs_f64(),
            self.work.as_secs_f64(),
            self.worst.as_secs_f64(),
            self.read.as_secs_f64(),
            self.write.as_secs_f64(),
            self.posting.as_secs_f64()
        );
    }
}

/// What the ping-pong keeps between completions.
struct Pong {
    /// This side's pattern, of `-s` bytes.
    base: Vec<u8>,
    /// The message this side sent last: the one rc_pingpong echoes next.
    last: Vec<u8>,
    /// A received message.
    got: Vec<u8>,
    t: Times,
}

impl Pong {
    /// Posts this side's message `k`, signaled, remembered in `last`.
    fn send(&mut self, r: &mut Res<'_>, k: u64) -> Result<(), Error<'static>> {
        let data = message(&self.base, k);
        let tc = Instant::now();
        r.mr.write(0, &data).map_err(|e| Error::Verbs("write", e))?;
        self.last = data;
        self.t.write += tc.elapsed();
        let s = [r.mr.sge(0, r.o.size)];
        let wr = SendWr {
            wr_id: 1 << 32 | k,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&s),
            flags: SendFlags::SIGNALED,
        };
        let tp = Instant::now();
        let res =
            r.qp.post_send(&[wr])
                .map_err(|e| Error::PostSend("post_send", k, e));
        self.t.posting += tp.elapsed();
        res
    }

    /// Checks received message `n` (completion `wc`): its length and every byte. The
    /// server's first message is rc_pingpong's untouched buffer; every other one echoes this
    /// side's previous message.
    fn received(&mut self, r: &Res<'_>, wc: &WorkCompletion, n: u64) -> Result<(), Error<'static>> {
        let o = r.o;
        if wc.byte_len != o.size {
            return Err(Error::Length {
                n,
                len: wc.byte_len as usize,
                size: o.size,
                grh: false,
            });
        }
        let tc = Instant::now();
        r.mr.read(r.slot(wc.wr_id), &mut self.got)
            .map_err(|e| Error::Verbs("read", e))?;
        self.t.read += tc.elapsed();
        let bad = if !o.client && n == 0 {
            self.got.iter().position(|&b| b != RC_PINGPONG_FILL)
        } else {
            first_difference(&self.got, &self.last)
        };
        match bad {
            Some(at) => Err(Error::Byte {
                n,
                at,
                value: self.got[at],
            }),
            None => Ok(()),
        }
    }
}
