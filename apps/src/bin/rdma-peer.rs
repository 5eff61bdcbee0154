//! RDMA between two guests: each guest's HCA is joined to the other's by a wire
//! (`cargo run -- --hca-wire ...`, or the launcher's `run_pair`). The two apps swap their QP
//! endpoints as `peer: ...` lines on the serial console, which the launcher relays to the other
//! guest's serial input; then the client RDMA-WRITEs, SENDs and RDMA-READs, and both sides
//! check every byte. Cmdline: `role=server` or `role=client`.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::time::Duration;

use kernel::time::Deadline;
use kernel::{console, println, AppContext};
use mlx5::{
    AccessFlags, ConnectOptions, Context, ContextConfig, QpCaps, QpEndpoint, RecvWr, Remote, SendData, SendFlags,
    SendOp, SendWr, WcStatus,
};

kernel::entry_point!(main);

const LEN: u32 = 4096;
const MSG: u32 = 64;
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

fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(3)
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
    match run(server) {
        Ok(()) => 0,
        Err(why) => {
            println!("peer: FAILED: {why}");
            1
        }
    }
}

fn run(server: bool) -> Result<(), &'static str> {
    let hal = mlx5_kernel::open_first(None).map_err(|_| "no mlx5 function")?;
    let dev = Context::open(hal, ContextConfig::default()).map_err(|_| "bring-up failed")?;
    let pd = dev.alloc_pd().map_err(|_| "alloc_pd")?;
    let mr = pd.alloc_mr(2 * LEN as usize, AccessFlags::ALL).map_err(|_| "alloc_mr")?;
    let mut cq = dev.create_cq(64).map_err(|_| "create_cq")?;
    let mut qp = pd.create_qp(&cq, &cq, &QpCaps::default()).map_err(|_| "create_qp")?;
    let me = qp.endpoint();
    let g = me.gid;
    let m = me.mac;
    println!(
        "peer: endpoint qpn={:x} psn={:x} gid={} mac={} addr={:x} rkey={:x}",
        me.qpn,
        me.psn,
        g.iter().map(|b| alloc::format!("{b:02x}")).collect::<alloc::string::String>(),
        m.iter().map(|b| alloc::format!("{b:02x}")).collect::<alloc::string::String>(),
        mr.addr(),
        mr.rkey()
    );
    let line = wait_line("endpoint ").ok_or("no endpoint from the other guest")?;
    let peer = parse_endpoint(core::str::from_utf8(&line).map_err(|_| "garbled endpoint")?).ok_or("bad endpoint")?;
    let o = ConnectOptions { min_rnr_timer: 1, ..ConnectOptions::default() };
    qp.connect(&peer.ep, &o).map_err(|_| "connect")?;

    if server {
        let rsge = [mr.sge(LEN as u64, MSG)];
        qp.post_recv(&[RecvWr { wr_id: 1, sges: &rsge }]).map_err(|_| "post_recv")?;
        println!("peer: ready");
        let wc = cq.poll_wait(1, WAIT).map_err(|_| "poll")?;
        let wc = wc.first().ok_or("no SEND arrived")?;
        if wc.status != WcStatus::Success || wc.byte_len != MSG || wc.imm != Some(0xc0ffee) {
            return Err("bad receive completion");
        }
        // The client's RDMA WRITE landed before its SEND (RC ordering); check both.
        let mut got = [0u8; LEN as usize];
        mr.read(0, &mut got).map_err(|_| "read")?;
        let mut msg = [0u8; MSG as usize];
        mr.read(LEN as u64, &mut msg).map_err(|_| "read")?;
        if !got.iter().enumerate().all(|(i, &b)| b == pattern(i)) || !msg.iter().enumerate().all(|(i, &b)| b == pattern(i)) {
            return Err("data from the other guest is wrong");
        }
        // Stay up until the client has read the buffer back.
        wait_line("done").ok_or("client never finished")?;
        println!("peer: server received RDMA_WRITE 4096 B and SEND_WITH_IMM 64 B from the other guest: ok");
    } else {
        let data: Vec<u8> = (0..LEN as usize).map(pattern).collect();
        mr.write(0, &data).map_err(|_| "write")?;
        wait_line("ready").ok_or("the server never got ready")?;
        let remote = Remote { addr: peer.addr, rkey: peer.rkey };
        let s = [mr.sge(0, LEN)];
        let m = [mr.sge(0, MSG)];
        let back = [mr.sge(LEN as u64, LEN)];
        let sig = SendFlags::SIGNALED;
        let wrs = [
            SendWr { wr_id: 1, op: SendOp::Write { remote, imm: None }, data: SendData::Sges(&s), flags: sig },
            SendWr { wr_id: 2, op: SendOp::Send { imm: Some(0xc0ffee) }, data: SendData::Sges(&m), flags: sig },
            SendWr { wr_id: 3, op: SendOp::Read { remote }, data: SendData::Sges(&back), flags: sig },
        ];
        qp.post_send(&wrs).map_err(|_| "post_send")?;
        let wcs = cq.poll_wait(3, WAIT).map_err(|_| "poll")?;
        if wcs.len() != 3 || wcs.iter().any(|w| w.status != WcStatus::Success) {
            return Err("send completions missing or in error");
        }
        let mut got = [0u8; LEN as usize];
        mr.read(LEN as u64, &mut got).map_err(|_| "read")?;
        if got[..] != data[..] {
            return Err("RDMA_READ from the other guest returned wrong bytes");
        }
        println!("peer: done");
        println!("peer: client wrote, sent and read back 4096 B across the wire: ok");
    }
    drop(qp);
    drop(cq);
    drop(mr);
    drop(pd);
    dev.close().map_err(|_| "teardown")?;
    Ok(())
}
