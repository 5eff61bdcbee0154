//! RDMA between two guests: each guest's HCA is joined to the other's by a wire carrying
//! RoCEv2 frames (`cargo run -- --pair`, or the launcher's `run_pair`). The two apps swap their
//! QP endpoints (QPN, PSN, GID, MAC) as `peer: ...` lines on the serial console, which the
//! launcher relays to the other guest's serial input (there is no ARP: the peer's MAC comes with
//! its endpoint); then the client runs every RC opcode across the wire — RDMA WRITE, WRITE with
//! immediate, SEND, SEND with immediate, RDMA READ, CMP_AND_SWAP, FETCH_AND_ADD — with messages
//! longer than the path MTU, and both sides check every byte.
//!
//! Cmdline: `role=server` or `role=client`; `ip=A.B.C.D/LEN` gives the node its IPv4 identity
//! (the driver programs its RoCE v2 GID with SET_ROCE_ADDRESS, and the QP's path uses it);
//! `mac=` names the MAC the node expects its port to have (the driver does not reprogram the
//! port MAC: a different one is refused).
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::time::Duration;

use kernel::cmdline::Ipv4Identity;
use kernel::time::Deadline;
use kernel::{console, println, AppContext};
use mlx5::{
    AccessFlags, ConnectOptions, Context, ContextConfig, QpCaps, QpEndpoint, RecvWr, Remote, SendData, SendFlags,
    SendOp, SendWr, WcStatus,
};

kernel::entry_point!(main);

/// Bytes of each message: five packets at the default 1024-byte path MTU.
const BIG: u32 = 5000;
/// Server buffer layout (offsets in its MR): WRITE target, WRITE_IMM target, SEND and
/// SEND_IMM receive buffers, READ source, the 8-byte atomic target.
const AT_WRITE: u64 = 0;
const AT_WRITE_IMM: u64 = 8192;
const AT_SEND: u64 = 16384;
const AT_SEND_IMM: u64 = 24576;
const AT_READ: u64 = 32768;
const AT_ATOMIC: u64 = 40960;
const MR_LEN: usize = 49152;
/// Byte-symmetric atomic operands, so the check holds in either atomic byte order.
const SWAP: u64 = 0x0101_0101_0101_0101;
const ADD: u64 = 0x0202_0202_0202_0202;
const WAIT: Duration = Duration::from_secs(60);

/// What one side tells the other.
struct Peer {
    ep: QpEndpoint,
    addr: u64,
    rkey: u32,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn parse_endpoint(line: &str) -> Option<Peer> {
    let rest = line.trim().strip_prefix("endpoint ")?;
    let get = |k: &str| rest.split(' ').find_map(|w| w.strip_prefix(k)?.strip_prefix('='));
    Some(Peer {
        ep: QpEndpoint {
            qpn: hex(get("qpn")?)? as u32,
            psn: hex(get("psn")?)? as u32,
            gid: hex_bytes::<16>(get("gid")?)?,
            mac: hex_bytes::<6>(get("mac")?)?,
        },
        addr: hex(get("addr")?)?,
        rkey: hex(get("rkey")?)? as u32,
    })
}

/// Waits for the relayed line that starts with `prefix` (other lines are ignored).
fn wait_line(prefix: &str) -> Option<Vec<u8>> {
    let deadline = Deadline::after(WAIT);
    let mut buf = [0u8; 256];
    loop {
        let n = console::read_line(&mut buf, deadline)?;
        if buf[..n].starts_with(prefix.as_bytes()) {
            return Some(buf[..n].to_vec());
        }
    }
}

fn pattern(i: usize, seed: u8) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 8) as u8
}

fn bytes(seed: u8) -> Vec<u8> {
    (0..BIG as usize).map(|i| pattern(i, seed)).collect()
}

fn hexs(b: &[u8]) -> alloc::string::String {
    b.iter().map(|b| alloc::format!("{b:02x}")).collect()
}

fn main(ctx: &AppContext) -> i32 {
    let server = match ctx.cmdline.get("role") {
        Some("server") => true,
        Some("client") => false,
        _ => {
            println!("peer: need role=server or role=client on the cmdline");
            return 2;
        }
    };
    let (ip, mac) = match (ctx.cmdline.ipv4(), ctx.cmdline.mac()) {
        (Ok(ip), Ok(mac)) => (ip, mac),
        (Err(e), _) | (_, Err(e)) => {
            println!("peer: bad cmdline: {e:?}");
            return 2;
        }
    };
    match run(server, ip, mac) {
        Ok(()) => 0,
        Err(why) => {
            println!("peer: FAILED: {why}");
            1
        }
    }
}

fn run(server: bool, ip: Option<Ipv4Identity>, mac: Option<[u8; 6]>) -> Result<(), &'static str> {
    let hal = mlx5_kernel::open_first(None).map_err(|_| "no mlx5 function")?;
    let dev = Context::open(hal, ContextConfig::default()).map_err(|_| "bring-up failed")?;
    if mac.is_some_and(|m| m != dev.mac()) {
        return Err("mac= differs from the port's MAC (the driver does not reprogram it)");
    }
    // The node's identity: its IPv4 GID when ip= is given, else the default GID (index 0).
    let (sgid_index, gid) = match ip {
        Some(ip) => {
            let i = dev.add_ipv4_gid(ip.addr).map_err(|_| "SET_ROCE_ADDRESS for ip= failed")?;
            println!(
                "peer: ip {}.{}.{}.{}/{} is RoCE v2 GID index {i}",
                ip.addr[0], ip.addr[1], ip.addr[2], ip.addr[3], ip.prefix_len
            );
            (i as u8, mlx5::hca::ipv4_mapped_gid(ip.addr))
        }
        None => (0, dev.query_gid(0).map_err(|_| "query_gid")?.0),
    };
    let pd = dev.alloc_pd().map_err(|_| "alloc_pd")?;
    let mr = pd.alloc_mr(MR_LEN, AccessFlags::ALL).map_err(|_| "alloc_mr")?;
    let mut cq = dev.create_cq(64).map_err(|_| "create_cq")?;
    let mut qp = pd.create_qp(&cq, &cq, &QpCaps::default()).map_err(|_| "create_qp")?;
    let me = QpEndpoint { gid, ..qp.endpoint() };
    println!(
        "peer: endpoint qpn={:x} psn={:x} gid={} mac={} addr={:x} rkey={:x}",
        me.qpn,
        me.psn,
        hexs(&me.gid),
        hexs(&me.mac),
        mr.addr(),
        mr.rkey()
    );
    let line = wait_line("endpoint ").ok_or("no endpoint from the other guest")?;
    let peer = parse_endpoint(core::str::from_utf8(&line).map_err(|_| "garbled endpoint")?).ok_or("bad endpoint")?;
    let o = ConnectOptions { min_rnr_timer: 1, sgid_index, ..ConnectOptions::default() };
    qp.connect(&peer.ep, &o).map_err(|_| "connect")?;

    if server {
        mr.write(AT_READ, &bytes(50)).map_err(|_| "write")?;
        mr.write(AT_ATOMIC, &[0; 8]).map_err(|_| "write")?;
        let r = |at| [mr.sge(at, BIG)];
        // The WRITE_IMM's receive only reports it (its bytes go to the RETH's address).
        let (r1, r2, r3) = (r(AT_WRITE_IMM), r(AT_SEND), r(AT_SEND_IMM));
        qp.post_recv(&[
            RecvWr { wr_id: 1, sges: &r1 },
            RecvWr { wr_id: 2, sges: &r2 },
            RecvWr { wr_id: 3, sges: &r3 },
        ])
        .map_err(|_| "post_recv")?;
        println!("peer: ready");
        // WRITE_IMM, SEND, SEND_IMM consume the receives in that order.
        let wcs = cq.poll_wait(3, WAIT).map_err(|_| "poll")?;
        if wcs.len() != 3 || wcs.iter().any(|w| w.status != WcStatus::Success || w.byte_len != BIG) {
            return Err("receive completions missing or in error");
        }
        if wcs[0].imm != Some(0xbeef) || wcs[1].imm.is_some() || wcs[2].imm != Some(0xc0ffee) {
            return Err("wrong immediate data");
        }
        let check = |at: u64, seed: u8| -> Result<bool, &'static str> {
            let mut got = alloc::vec![0u8; BIG as usize];
            mr.read(at, &mut got).map_err(|_| "read")?;
            Ok(got == bytes(seed))
        };
        // RC ordering: the WRITEs landed before the SENDs completed.
        if !check(AT_WRITE, 10)? || !check(AT_WRITE_IMM, 20)? || !check(AT_SEND, 30)? || !check(AT_SEND_IMM, 40)? {
            return Err("data from the other guest is wrong");
        }
        // Stay up until the client has read back and run its atomics.
        wait_line("done").ok_or("client never finished")?;
        let mut at = [0u8; 8];
        mr.read(AT_ATOMIC, &mut at).map_err(|_| "read")?;
        if u64::from_ne_bytes(at) != SWAP + ADD {
            return Err("atomics left the wrong value");
        }
        println!(
            "peer: server received RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM of {BIG} B, served RDMA_READ, CMP_AND_SWAP, FETCH_AND_ADD: ok"
        );
    } else {
        for (at, seed) in [(0u64, 10u8), (8192, 20), (16384, 30), (24576, 40)] {
            mr.write(at, &bytes(seed)).map_err(|_| "write")?;
        }
        wait_line("ready").ok_or("the server never got ready")?;
        let remote = |off| Remote { addr: peer.addr + off, rkey: peer.rkey };
        let sge = |at| [mr.sge(at, BIG)];
        let (w, wi, sd, si, back) = (sge(0), sge(8192), sge(16384), sge(24576), sge(32768));
        let (cs_out, fa_out) = ([mr.sge(40960, 8)], [mr.sge(40968, 8)]);
        let sig = SendFlags::SIGNALED;
        let wrs = [
            SendWr { wr_id: 1, op: SendOp::Write { remote: remote(AT_WRITE), imm: None }, data: SendData::Sges(&w), flags: sig },
            SendWr { wr_id: 2, op: SendOp::Write { remote: remote(AT_WRITE_IMM), imm: Some(0xbeef) }, data: SendData::Sges(&wi), flags: sig },
            SendWr { wr_id: 3, op: SendOp::Send { imm: None }, data: SendData::Sges(&sd), flags: sig },
            SendWr { wr_id: 4, op: SendOp::Send { imm: Some(0xc0ffee) }, data: SendData::Sges(&si), flags: sig },
            SendWr { wr_id: 5, op: SendOp::Read { remote: remote(AT_READ) }, data: SendData::Sges(&back), flags: sig },
            SendWr {
                wr_id: 6,
                op: SendOp::CompareSwap { remote: remote(AT_ATOMIC), compare: 0, swap: SWAP },
                data: SendData::Sges(&cs_out),
                flags: sig,
            },
            SendWr { wr_id: 7, op: SendOp::FetchAdd { remote: remote(AT_ATOMIC), add: ADD }, data: SendData::Sges(&fa_out), flags: sig },
        ];
        qp.post_send(&wrs).map_err(|_| "post_send")?;
        let wcs = cq.poll_wait(7, WAIT).map_err(|_| "poll")?;
        if wcs.len() != 7 || wcs.iter().any(|w| w.status != WcStatus::Success) {
            return Err("send completions missing or in error");
        }
        let mut got = alloc::vec![0u8; BIG as usize];
        mr.read(32768, &mut got).map_err(|_| "read")?;
        if got != bytes(50) {
            return Err("RDMA_READ from the other guest returned wrong bytes");
        }
        let (mut cs, mut fa) = ([0u8; 8], [0u8; 8]);
        mr.read(40960, &mut cs).map_err(|_| "read")?;
        mr.read(40968, &mut fa).map_err(|_| "read")?;
        if u64::from_ne_bytes(cs) != 0 || u64::from_ne_bytes(fa) != SWAP {
            return Err("atomics returned wrong original values");
        }
        println!("peer: done");
        println!(
            "peer: client ran RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, RDMA_READ of {BIG} B and CMP_AND_SWAP, FETCH_AND_ADD across the wire: ok"
        );
    }
    drop(qp);
    drop(cq);
    drop(mr);
    drop(pd);
    dev.close().map_err(|_| "teardown")?;
    Ok(())
}
