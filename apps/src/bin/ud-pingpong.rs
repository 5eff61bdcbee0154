//! `ibv_ud_pingpong`'s other side: the UD SEND ping-pong of rdma-core's
//! libibverbs/examples/ud_pingpong.c, as server or client, against Linux (`cargo run --
//! --peer linux --peer-cmd 'ibv_ud_pingpong ...'`).
//!
//! Cmdline: `ud-pingpong [-s SIZE] [-n ITERS] [-r RX_DEPTH] [-p PORT] [SERVER]
//! role=server|client ip=A.B.C.D/N [peer=A.B.C.D] [neigh=A.B.C.D,MAC]` (the tool's own option
//! spelling; `-d`, `-g`, `-i`, `-l` are accepted and ignored: the device, GID index and port
//! are `ip=`'s; `-e` and `-c` too: this side polls and checks every byte always). A `SERVER`
//! word or `role=client` makes it the client. `-p` is the TCP port of the exchange (18515).
//! Defaults as ud_pingpong.c `main`: `-s` 1024, `-n` 1000, `-r` 500; `-s` larger than the
//! port's active MTU is refused (`pp_init_ctx`).
//!
//! The exchange is rc_pingpong's (apps/src/pingpong.rs): the client writes its LID, QPN, PSN
//! and GID, the server reads it, makes its address handle (`pp_connect_ctx`), answers the
//! same, and reads the client's `"done"`; the client makes its address handle after it.
//! The address handle as `pp_connect_ctx`: the peer's GID, hop limit 64, this side's GID
//! index; the peer's MAC by ARP for the IPv4 address of its GID. Q_Key 0x11111111 both ways
//! (`pp_init_ctx`, `pp_post_send`).
//!
//! The ping-pong (ud_pingpong.c `main`): both sides keep `-r` receives of SIZE + 40 bytes
//! posted (the 40-byte GRH area first: on RoCE v2 over IPv4, 20 bytes and the IPv4 header);
//! the client sends first; each side sends its next message once its previous SEND completed
//! and a message arrived, until both counts reach `-n`. ud_pingpong sends from byte 40 of
//! the one buffer its receives land in, so it echoes what it received: every message from
//! Linux must equal the unikernel's previous one (the server's first is ud_pingpong's
//! untouched buffer: 0x7b bytes, byte 0 zero under its `-c`). Every byte is checked, and for
//! every receive the sender's QPN, the GRH flag and the IPv4 sender in the GRH area. This
//! side's messages carry a zero at byte 0, where ud_pingpong's `-c` looks (its check of
//! each page's first byte).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;

use apps::app::{self, Hca, OptionError};
use apps::oob::{self, Oob, Side};
use apps::pingpong::{
    self, dest_msg, first_difference, message, next_completion, print_figures, read_remote, Error,
    Opts, Tool, WAIT,
};
use apps::stack::{self, KernelNode, NetArgs};
use kernel::time::Instant;
use kernel::{println, AppContext};
use mlx5::{
    grh_ipv4_source, AccessFlags, AddressHandle, AhAttr, CompletionQueue, MemoryRegion, QpCaps,
    QpEndpoint, QueuePair, RecvWr, SendData, SendFlags, SendOp, SendWr, UdDest, WcFlags,
    WorkCompletion, GRH_BYTES,
};
use mlx5_kernel::KernelHal;

kernel::entry_point!(main);

const SEED: u8 = 0x5b;
/// ud_pingpong's `pp_init_ctx`: `memset(ctx->buf, 0x7b, size + 40)`.
const UD_PINGPONG_FILL: u8 = 0x7b;
/// ud_pingpong's Q_Key (`pp_init_ctx`, `pp_post_send`).
const QKEY: u32 = 0x1111_1111;
/// ud_pingpong's `pp_connect_ctx`: `ah_attr.grh.hop_limit = 64`.
const HOP_LIMIT: u8 = 64;
/// What the client writes last (`write(sockfd, "done", sizeof "done")`).
const DONE: &[u8; 5] = b"done\0";

/// ud_pingpong's options (ud_pingpong.c `main`: `-s` 1024, `-n` 1000, `-r` 500).
fn parse(cmdline: &str) -> Result<Opts, OptionError<'_>> {
    let tool = Tool {
        app: "ud-pingpong",
        max_size: 4096,
        mtu: false,
    };
    let defaults = Opts {
        size: 1024,
        iters: 1000,
        mtu: 0,
        rx_depth: 500,
        client: false,
        port: oob::TOOL_PORT,
    };
    pingpong::parse(cmdline, &tool, defaults)
}

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    app::exit("ud-pingpong", parse(cmdline), |o| run(&o, cmdline))
}

/// What the ping-pong runs on.
struct Res<'a> {
    o: &'a Opts,
    qp: QueuePair<KernelHal>,
    cq: CompletionQueue<KernelHal>,
    mr: MemoryRegion<KernelHal>,
    link: Oob,
}

impl Res<'_> {
    /// Where receive slot `k` starts: after the send area, SIZE + 40 bytes each.
    fn slot(&self, k: u64) -> u64 {
        self.o.size as u64 + (k % self.o.rx_depth as u64) * (self.o.size as u64 + GRH_BYTES as u64)
    }

    fn post_recv(&mut self, k: u64) -> Result<(), Error<'static>> {
        let s = [self.mr.sge(self.slot(k), self.o.size + GRH_BYTES as u32)];
        self.qp
            .post_recv(&[RecvWr { wr_id: k, sges: &s }])
            .map_err(|e| Error::Verbs("post_recv", e))
    }
}

fn run<'a>(o: &Opts, cmdline: &'a str) -> Result<(), Error<'a>> {
    let net = stack::net_args(cmdline).map_err(Error::NetArgs)?;
    let side = Side::new(o.client, net.peer).map_err(|e| Error::Oob("the cmdline", e))?;
    app::with_hca(|dev| {
        let r = run_on(o, dev, &net, side);
        if r.is_err() {
            // No Q counter set on the UD QP: binding one (RTS2RTS) is refused for a UD QP
            // today (BAD_PARAM from the model).
            oob::print_counters("ud-pingpong", dev, None);
        }
        r
    })
}

/// The run on the open HCA: the resources, the exchange, the ping-pong.
fn run_on(o: &Opts, dev: &Hca, net: &NetArgs, side: Side) -> Result<(), Error<'static>> {
    let ip = net.ip.addr;
    // pp_init_ctx: the size must fit the port's active MTU.
    let port = dev
        .query_port(1)
        .map_err(|e| Error::Verbs("query_port", e))?;
    let mtu = port.active_mtu.map_or(0, |m| 128u32 << (m as u32));
    if o.size > mtu {
        return Err(Error::SizeAboveMtu(mtu));
    }
    let sgid = oob::ipv4_gid_index(dev, ip).map_err(|e| Error::Verbs("the IPv4 GID", e))?;
    let pd = dev.alloc_pd().map_err(|e| Error::Verbs("alloc_pd", e))?;
    let len = o.size as u64 + o.rx_depth as u64 * (o.size as u64 + GRH_BYTES as u64);
    let mr = pd
        .alloc_mr(len as usize, AccessFlags::LOCAL_WRITE)
        .map_err(|e| Error::Verbs("alloc_mr", e))?;
    let cq = dev
        .create_cq(o.rx_depth + 1)
        .map_err(|e| Error::Verbs("create_cq", e))?;
    let caps = QpCaps {
        max_send_wr: 1,
        max_recv_wr: o.rx_depth,
        ..QpCaps::default()
    };
    let qp = pd
        .create_ud_qp(&cq, &cq, &caps, QKEY)
        .map_err(|e| Error::Verbs("create_ud_qp", e))?;
    let me = QpEndpoint {
        gid: oob::ipv4_gid(ip),
        ..qp.endpoint()
    };
    println!(
        "  local address:  LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}: GID ::ffff:{}.{}.{}.{} (index {sgid})",
        me.qpn, me.psn, ip[0], ip[1], ip[2], ip[3]
    );
    let node = KernelNode::up(dev, net).map_err(Error::Node)?;
    let link = Oob::open(node, side, o.port, WAIT).map_err(|e| Error::Oob("the exchange", e))?;
    let mut r = Res {
        o,
        qp,
        cq,
        mr,
        link,
    };
    // ud_pingpong posts its receives before the exchange (the QP is in RTS from its
    // creation here): the client's first message can come as soon as it has the answer.
    for k in 0..o.rx_depth as u64 {
        r.post_recv(k)?;
    }
    let (rem, ah) = exchange(&mut r, &me, &pd, sgid as u8)?;
    println!(
        "  remote address: LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        rem.qpn,
        rem.psn,
        oob::hex(&rem.gid)
    );
    ping_pong(&mut r, &rem, &ah)?;
    drop(r);
    drop(pd);
    Ok(())
}

/// ud_pingpong.c `pp_client_exch_dest` / `pp_server_exch_dest` and `pp_connect_ctx`: the
/// peer's endpoint and the address handle to it.
fn exchange(
    r: &mut Res<'_>,
    me: &QpEndpoint,
    pd: &mlx5::ProtectionDomain<KernelHal>,
    sgid_index: u8,
) -> Result<(QpEndpoint, AddressHandle), Error<'static>> {
    let sent = |e| Error::Oob("sending to the peer", e);
    if r.o.client {
        r.link.send(&dest_msg(me)).map_err(sent)?;
    }
    let rem = read_remote(&mut r.link, r.o.client)?;
    let ah = pd
        .create_ah(&AhAttr {
            dgid: rem.gid,
            dmac: rem.mac,
            sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
        })
        .map_err(|e| Error::Verbs("create_ah", e))?;
    if r.o.client {
        r.link.send(DONE).map_err(sent)?;
    } else {
        r.link.send(&dest_msg(me)).map_err(sent)?;
        let d = r
            .link
            .recv(DONE.len())
            .map_err(|e| Error::Oob("reading the client's done", e))?;
        if d != DONE {
            return Err(Error::NoDone);
        }
    }
    Ok((rem, ah))
}

/// ud_pingpong.c `main`'s loop, every received message checked.
fn ping_pong(r: &mut Res<'_>, rem: &QpEndpoint, ah: &AddressHandle) -> Result<(), Error<'static>> {
    let o = r.o;
    let size = o.size as usize;
    // This side's messages: a known pattern per count, byte 0 zero (ud_pingpong's `-c` mark).
    let base: Vec<u8> = (0..size).map(|i| oob::pattern(SEED, 0, i)).collect();
    let mut p = Pong {
        dest: UdDest {
            ah,
            remote_qpn: rem.qpn,
            remote_qkey: QKEY,
        },
        base,
        peer_ip: stack::gid_ipv4(&rem.gid),
        last: Vec::new(),
        got: alloc::vec![0u8; GRH_BYTES + size],
    };
    let t0 = Instant::now();
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let (mut send_pending, mut recv_pending) = (false, true);
    if o.client {
        p.send(r, 0)?;
        send_pending = true;
    }
    while rcnt < o.iters || scnt < o.iters {
        let wc = next_completion(&mut r.link, &mut r.cq, scnt, rcnt)?;
        if wc.wr_id >> 32 == 1 {
            scnt += 1;
            send_pending = false;
        } else {
            p.received(r, &wc, rem.qpn, rcnt)?;
            rcnt += 1;
            recv_pending = false;
            r.post_recv(wc.wr_id + o.rx_depth as u64)?;
        }
        if scnt < o.iters && !send_pending && !recv_pending {
            p.send(r, scnt)?;
            send_pending = true;
            recv_pending = true;
        }
    }
    print_figures(o, t0);
    println!(
        "ud-pingpong: every byte of {rcnt} messages checked, each from QPN {:#x} with its GRH: ok",
        rem.qpn
    );
    Ok(())
}

/// What the ping-pong keeps between completions.
struct Pong<'h> {
    /// Where this side's SENDs go.
    dest: UdDest<'h>,
    /// This side's pattern, of `-s` bytes.
    base: Vec<u8>,
    /// The IPv4 address of the peer's GID, if it is one.
    peer_ip: Option<[u8; 4]>,
    /// This side's last message.
    last: Vec<u8>,
    /// A received message, with its GRH area.
    got: Vec<u8>,
}

impl Pong<'_> {
    /// Posts this side's message `k`, signaled, remembered in `last`.
    fn send(&mut self, r: &mut Res<'_>, k: u64) -> Result<(), Error<'static>> {
        let mut data = message(&self.base, k);
        data[0] = 0;
        r.mr.write(0, &data).map_err(|e| Error::Verbs("write", e))?;
        self.last = data;
        let s = [r.mr.sge(0, r.o.size)];
        let wr = SendWr {
            wr_id: 1 << 32 | k,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&s),
            flags: SendFlags::SIGNALED,
        };
        r.qp.post_ud_send(&wr, &self.dest)
            .map_err(|e| Error::PostSend("post_ud_send", k, e))
    }

    /// Checks received message `n` (completion `wc`): its length, sender QPN `qpn`, GRH
    /// flag, the IPv4 sender in the GRH area and every byte.
    fn received(
        &mut self,
        r: &Res<'_>,
        wc: &WorkCompletion,
        qpn: u32,
        n: u64,
    ) -> Result<(), Error<'static>> {
        let size = r.o.size as usize;
        if wc.byte_len as usize != GRH_BYTES + size {
            return Err(Error::Length {
                n,
                len: wc.byte_len as usize - GRH_BYTES.min(wc.byte_len as usize),
                size: r.o.size,
                grh: true,
            });
        }
        if wc.src_qp != qpn || !wc.wc_flags.contains(WcFlags::GRH) {
            return Err(Error::Source {
                n,
                qpn: wc.src_qp,
                want: qpn,
                flags: wc.wc_flags,
            });
        }
        r.mr.read(r.slot(wc.wr_id), &mut self.got)
            .map_err(|e| Error::Verbs("read", e))?;
        let from = grh_ipv4_source(&self.got[..GRH_BYTES]);
        if self.peer_ip.is_some() && from != self.peer_ip {
            return Err(Error::GrhSource {
                n,
                from,
                want: self.peer_ip,
            });
        }
        check(&self.got[GRH_BYTES..], r.o.client, n, &self.last)
    }
}

/// Message `n` from Linux: the server's first is ud_pingpong's untouched buffer (0x7b bytes,
/// byte 0 zero under `-c`); every other one echoes this side's previous message.
fn check(got: &[u8], client: bool, n: u64, last: &[u8]) -> Result<(), Error<'static>> {
    let bad = if !client && n == 0 {
        got.iter()
            .enumerate()
            .position(|(i, &b)| b != UD_PINGPONG_FILL && !(i == 0 && b == 0))
    } else {
        first_difference(got, last)
    };
    match bad {
        Some(at) => Err(Error::Byte {
            n,
            at,
            value: got[at],
        }),
        None => Ok(()),
    }
}
