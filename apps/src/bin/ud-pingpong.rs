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

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use apps::oob::{self, Oob, Side};
use apps::pingpong::{
    self, dest_msg, first_difference, message, parse_dest, Opts, Tool, DEST_MSG_LEN,
};
use apps::stack::{self, KernelNode};
use kernel::time::Instant;
use kernel::{println, AppContext};
use mlx5::{
    grh_ipv4_source, AccessFlags, AddressHandle, AhAttr, CompletionQueue, Context, ContextConfig,
    MemoryRegion, QpCaps, QpEndpoint, QueuePair, RecvWr, SendData, SendFlags, SendOp, SendWr,
    UdDest, WcFlags, WcStatus, GRH_BYTES,
};
use mlx5_kernel::KernelHal;

kernel::entry_point!(main);

const WAIT: Duration = Duration::from_secs(120);
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
fn parse(cmdline: &str) -> Result<Opts, String> {
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
    let o = match parse(ctx.cmdline.0) {
        Ok(o) => o,
        Err(e) => {
            println!("ud-pingpong: {e}");
            return 2;
        }
    };
    match run(&o, ctx.cmdline.0) {
        Ok(()) => 0,
        Err(e) => {
            println!("ud-pingpong: FAILED: {e}");
            1
        }
    }
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

    fn post_recv(&mut self, k: u64) -> Result<(), String> {
        let s = [self.mr.sge(self.slot(k), self.o.size + GRH_BYTES as u32)];
        self.qp
            .post_recv(&[RecvWr { wr_id: k, sges: &s }])
            .map_err(|e| format!("post_recv: {e:?}"))
    }
}

fn run(o: &Opts, cmdline: &str) -> Result<(), String> {
    let net = stack::net_args(cmdline).map_err(|e| format!("{e}"))?;
    let side = Side::new(o.client, net.peer).map_err(|e| format!("{e}"))?;
    let ip = net.ip.addr;
    let hal = mlx5_kernel::open_first(None).map_err(|e| format!("no mlx5 function: {e:?}"))?;
    let dev =
        Context::open(hal, ContextConfig::default()).map_err(|e| format!("bring-up: {e:?}"))?;
    let r = (|| -> Result<(), String> {
        // pp_init_ctx: the size must fit the port's active MTU.
        let port = dev
            .query_port(1)
            .map_err(|e| format!("query_port: {e:?}"))?;
        let mtu = port.active_mtu.map_or(0, |m| 128u32 << (m as u32));
        if o.size > mtu {
            return Err(format!("Requested size larger than port MTU ({mtu})"));
        }
        let sgid = oob::ipv4_gid_index(&dev, ip).map_err(|e| format!("the IPv4 GID: {e:?}"))?;
        let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e:?}"))?;
        let len = o.size as u64 + o.rx_depth as u64 * (o.size as u64 + GRH_BYTES as u64);
        let mr = pd
            .alloc_mr(len as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("alloc_mr: {e:?}"))?;
        let cq = dev
            .create_cq(o.rx_depth + 1)
            .map_err(|e| format!("create_cq: {e:?}"))?;
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: o.rx_depth,
            ..QpCaps::default()
        };
        let qp = pd
            .create_ud_qp(&cq, &cq, &caps, QKEY)
            .map_err(|e| format!("create_ud_qp: {e:?}"))?;
        let me = QpEndpoint {
            gid: oob::ipv4_gid(ip),
            ..qp.endpoint()
        };
        println!(
            "  local address:  LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}: GID ::ffff:{}.{}.{}.{} (index {sgid})",
            me.qpn, me.psn, ip[0], ip[1], ip[2], ip[3]
        );
        let node = KernelNode::up(&dev, &net).map_err(|e| format!("the network: {e:?}"))?;
        let link = Oob::open(node, side, o.port, WAIT).map_err(|e| format!("the exchange: {e}"))?;
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
    })();
    if r.is_err() {
        // No Q counter set on the UD QP: binding one (RTS2RTS) is refused for a UD QP today
        // (BAD_PARAM from the model).
        oob::print_counters("ud-pingpong", &dev, None);
    }
    r?;
    dev.close().map_err(|_| "teardown refused")?;
    Ok(())
}

/// ud_pingpong.c `pp_client_exch_dest` / `pp_server_exch_dest` and `pp_connect_ctx`: the
/// peer's endpoint and the address handle to it.
fn exchange(
    r: &mut Res<'_>,
    me: &QpEndpoint,
    pd: &mlx5::ProtectionDomain<KernelHal>,
    sgid_index: u8,
) -> Result<(QpEndpoint, AddressHandle), String> {
    let sent = |e: oob::OobError| format!("sending to the peer: {e}");
    let who = if r.o.client { "server" } else { "client" };
    if r.o.client {
        r.link.send(&dest_msg(me)).map_err(sent)?;
    }
    let m = r
        .link
        .recv(DEST_MSG_LEN)
        .map_err(|e| format!("reading the {who}'s address: {e}"))?;
    let mut rem = parse_dest(&m).ok_or(format!("the {who}'s address is garbled"))?;
    rem.mac = r
        .link
        .peer_mac(&rem.gid)
        .map_err(|e| format!("the {who}'s MAC: {e}"))?;
    let ah = pd
        .create_ah(&AhAttr {
            dgid: rem.gid,
            dmac: rem.mac,
            sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
        })
        .map_err(|e| format!("create_ah: {e:?}"))?;
    if r.o.client {
        r.link.send(DONE).map_err(sent)?;
    } else {
        r.link.send(&dest_msg(me)).map_err(sent)?;
        let d = r
            .link
            .recv(DONE.len())
            .map_err(|e| format!("reading the client's done: {e}"))?;
        if d != DONE {
            return Err("the client did not say done".into());
        }
    }
    Ok((rem, ah))
}

/// ud_pingpong.c `main`'s loop, every received message checked.
fn ping_pong(r: &mut Res<'_>, rem: &QpEndpoint, ah: &AddressHandle) -> Result<(), String> {
    let o = r.o;
    let size = o.size as usize;
    // This side's messages: a known pattern per count, byte 0 zero (ud_pingpong's `-c` mark).
    let base: Vec<u8> = (0..size).map(|i| oob::pattern(SEED, 0, i)).collect();
    let mine = |k: u64| {
        let mut m = message(&base, k);
        m[0] = 0;
        m
    };
    let dest = UdDest {
        ah,
        remote_qpn: rem.qpn,
        remote_qkey: QKEY,
    };
    let peer_ip = stack::gid_ipv4(&rem.gid);
    let mut last: Vec<u8> = Vec::new();
    let send = |r: &mut Res<'_>, k: u64, last: &mut Vec<u8>| -> Result<(), String> {
        let data = mine(k);
        r.mr.write(0, &data).map_err(|e| format!("write: {e:?}"))?;
        *last = data;
        let s = [r.mr.sge(0, o.size)];
        let wr = SendWr {
            wr_id: 1 << 32 | k,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&s),
            flags: SendFlags::SIGNALED,
        };
        r.qp.post_ud_send(&wr, &dest)
            .map_err(|e| format!("post_ud_send {k}: {e:?}"))
    };
    let t0 = Instant::now();
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let (mut send_pending, mut recv_pending) = (false, true);
    if o.client {
        send(r, 0, &mut last)?;
        send_pending = true;
    }
    let mut got = alloc::vec![0u8; GRH_BYTES + size];
    while rcnt < o.iters || scnt < o.iters {
        let wcs = r
            .link
            .poll_cq(&mut r.cq, 1, WAIT)
            .map_err(|e| format!("poll (sent {scnt}, received {rcnt}): {e:?}"))?;
        let wc = wcs.first().ok_or(format!(
            "no completion in {WAIT:?} (sent {scnt}, received {rcnt})"
        ))?;
        if wc.status != WcStatus::Success {
            return Err(format!(
                "completion {:#x} in error: {:?} (vendor syndrome {:#x})",
                wc.wr_id, wc.status, wc.vendor_err
            ));
        }
        if wc.wr_id >> 32 == 1 {
            scnt += 1;
            send_pending = false;
        } else {
            let k = wc.wr_id;
            if wc.byte_len as usize != GRH_BYTES + size {
                return Err(format!(
                    "message {rcnt}: {} bytes, not {} and the GRH area",
                    wc.byte_len as usize - GRH_BYTES.min(wc.byte_len as usize),
                    size
                ));
            }
            if wc.src_qp != rem.qpn || !wc.wc_flags.contains(WcFlags::GRH) {
                return Err(format!(
                    "message {rcnt}: from QPN {:#x} (not {:#x}), flags {:?} (no GRH?)",
                    wc.src_qp, rem.qpn, wc.wc_flags
                ));
            }
            r.mr.read(r.slot(k), &mut got)
                .map_err(|e| format!("read: {e:?}"))?;
            let from = grh_ipv4_source(&got[..GRH_BYTES]);
            if peer_ip.is_some() && from != peer_ip {
                return Err(format!(
                    "message {rcnt}: the GRH area names {from:?} as the sender, not {peer_ip:?}"
                ));
            }
            check(&got[GRH_BYTES..], o.client, rcnt, &last)?;
            rcnt += 1;
            recv_pending = false;
            r.post_recv(k + o.rx_depth as u64)?;
        }
        if scnt < o.iters && !send_pending && !recv_pending {
            send(r, scnt, &mut last)?;
            send_pending = true;
            recv_pending = true;
        }
    }
    let usec = oob::secs(t0) * 1e6;
    let bytes = o.size as u64 * o.iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {:.2} seconds = {:.2} usec/iter",
        o.iters,
        usec / 1e6,
        usec / o.iters as f64
    );
    println!(
        "ud-pingpong: every byte of {rcnt} messages checked, each from QPN {:#x} with its GRH: ok",
        rem.qpn
    );
    Ok(())
}

/// Message `n` from Linux: the server's first is ud_pingpong's untouched buffer (0x7b bytes,
/// byte 0 zero under `-c`); every other one echoes this side's previous message.
fn check(got: &[u8], client: bool, n: u64, last: &[u8]) -> Result<(), String> {
    let bad = if !client && n == 0 {
        got.iter()
            .enumerate()
            .position(|(i, &b)| b != UD_PINGPONG_FILL && !(i == 0 && b == 0))
    } else {
        first_difference(got, last)
    };
    match bad {
        Some(i) => Err(format!(
            "message {n}: byte {i} is {:#04x}, not the expected one",
            got[i]
        )),
        None => Ok(()),
    }
}
