//! The server side of rdma-core's librdmacm/examples/udaddy.c on rdma_cm's UDP port space
//! (SIDR), against Linux's client (`cargo run -- --app udaddy --peer linux --peer-cmd
//! 'udaddy -s 10.0.0.1 ...'`).
//!
//! Cmdline: `udaddy [-c CONNECTIONS] [-C COUNT] [-S SIZE] ip=A.B.C.D/N` (the tool's options:
//! `apps::cmtools`; the port is udaddy's fixed 7174). As udaddy.c `run_server`: answer `-c`
//! SIDR requests (1), each with a UD QP of its own, its `-C` receives (10) of `-S` bytes (100)
//! and the 40-byte GRH room posted before the answer; receive `-C` messages on each (SEND with
//! immediate: the client's QPN), address the reply from the first (udaddy.c `create_reply_ah`:
//! the GRH area's IPv4 source, the immediate, this QP's Q_Key), and SEND `-C` replies with
//! this QP's number as immediate.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use apps::cm::{self, CmNode, Hal};
use apps::cmtools::{self, Opts, Tally, Tool};
use apps::oob;
use kernel::{println, AppContext};
use mlx5::{
    AccessFlags, AddressHandle, AhAttr, CompletionQueue, MemoryRegion, QpCaps, QueuePair,
    RecvWr, SendData, SendFlags, SendOp, SendWr, UdDest, WcStatus, GRH_BYTES,
};
use rdma_cm::rdma_cm::PortSpace;
use rdmacm::{CmId, Event};

kernel::entry_point!(main);

/// How long each phase may take once the clients are there.
const WAIT: Duration = Duration::from_secs(120);
const SEED: u8 = 0x5d;
/// The Q_Key of rdma_cm's UDP port space (Linux drivers/infiniband/core/cma.c
/// `RDMA_UDP_QKEY`), which a SIDR answer of this space carries.
const UDP_QKEY: u32 = 0x0123_4567;

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    let args = oob::tool_args(cmdline, "udaddy");
    let o = match oob::cmdline_role(cmdline).and_then(|r| cmtools::parse(Tool::Udaddy, &args, r)) {
        Ok(o) => o,
        Err(e) => {
            println!("udaddy: {e}");
            return 2;
        }
    };
    let r = cm::run(cmdline, |n| run_server(n, &o));
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            0
        }
        Err(e) => {
            println!("udaddy: FAILED: {e}");
            println!("return status -1");
            1
        }
    }
}

/// udaddy.c `struct cmatest_node`.
struct Node {
    id: CmId,
    cq: CompletionQueue<Hal>,
    qp: QueuePair<Hal>,
    mr: MemoryRegion<Hal>,
    /// The reply's address, from the first message (`ah`, `remote_qpn`, `remote_qkey`).
    reply: Option<(AddressHandle, u32, u32)>,
}

/// udaddy.c `run_server`.
fn run_server(n: &mut CmNode<'_>, o: &Opts) -> Result<(), String> {
    println!("udaddy: starting server");
    n.cm
        .listen(PortSpace::Udp, o.port, cm::BACKLOG)
        .map_err(|e| format!("udaddy: failure trying to listen: {e:?}"))?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut t = Tally::default();
    while !t.all_came(o) {
        let wait = if nodes.is_empty() { oob::FIRST_WAIT } else { WAIT };
        let e = n
            .next_event(wait)
            .ok_or(format!("{} of {} requests in {wait:?}", t.connected, o.connections))?;
        let Event::UdRequest { id, .. } = e else {
            println!("udaddy: event {} ignored", cm::event_str(&e));
            continue;
        };
        if nodes.len() as u32 == o.connections {
            println!("udaddy: failing connection request");
            let _ = n.cm.reject(cm::now_ns(), id, &[]);
            continue;
        }
        match connect_handler(n, o, id) {
            Ok(nd) => {
                nodes.push(nd);
                t.connected += 1;
            }
            Err(e) => {
                println!("udaddy: {e}");
                println!("udaddy: failing connection request");
                let _ = n.cm.reject(cm::now_ns(), id, &[]);
                t.failed += 1;
            }
        }
    }
    if o.count != 0 {
        println!("receiving data transfers");
        for nd in nodes.iter_mut() {
            receive(n, o, nd)?;
        }
        println!("sending replies");
        for nd in nodes.iter_mut() {
            reply(n, o, nd)?;
        }
        println!("data transfers complete");
    }
    for nd in nodes {
        let _ = n.cm.destroy_id(nd.id);
    }
    println!(
        "udaddy: {} requests, {} messages of {} B each way on each: ok",
        t.connected, o.count, o.size
    );
    Ok(())
}

/// udaddy.c `connect_handler`: `verify_test_params` (the message fits the MTU), `init_node`
/// (a CQ of `2 * -C`, a UD QP, the message buffer with the GRH room), `post_recvs`, and the
/// SIDR answer with the QP (`rdma_accept` with `qp_num`).
fn connect_handler(n: &mut CmNode<'_>, o: &Opts, id: CmId) -> Result<Node, String> {
    // The path MTU of RoCE here is 1024 (the driver's default for rdma_cm's connections).
    if o.count != 0 && o.size > 1024 {
        return Err(format!("udaddy: message_size {} is larger than active mtu 1024", o.size));
    }
    let cqe = if o.count != 0 { 2 * o.count } else { 2 };
    let cq = n.dev.create_cq(cqe).map_err(|e| format!("unable to create CQ: {e:?}"))?;
    let caps = QpCaps {
        max_send_wr: o.count.max(1),
        max_recv_wr: o.count.max(1),
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp = n
        .pd
        .create_ud_qp(&cq, &cq, &caps, UDP_QKEY)
        .map_err(|e| format!("unable to create QP: {e:?}"))?;
    let len = o.size + GRH_BYTES as u32;
    let mr = n
        .pd
        .alloc_mr(len as usize, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("failed to reg MR: {e:?}"))?;
    for k in 0..o.count {
        let s = [mr.sge(0, len)];
        qp.post_recv(&[RecvWr {
            wr_id: u64::from(k),
            sges: &s,
        }])
        .map_err(|e| format!("failed to post receives: {e:?}"))?;
    }
    n.cm
        .ud_accept(cm::now_ns(), id, qp.qpn(), UDP_QKEY, &[])
        .map_err(|e| format!("udaddy: failure accepting: {e:?}"))?;
    Ok(Node {
        id,
        cq,
        qp,
        mr,
        reply: None,
    })
}

/// udaddy.c `poll_cqs` for the receives, with `create_reply_ah` from the first: `-C`
/// messages, every one `-S` bytes with the client's QPN as immediate.
fn receive(n: &mut CmNode<'_>, o: &Opts, nd: &mut Node) -> Result<(), String> {
    let wcs = n
        .poll_cq(&mut nd.cq, o.count as usize, WAIT)
        .map_err(|e| format!("udaddy: failed polling CQ: {e:?}"))?;
    if wcs.len() < o.count as usize {
        return Err(format!("{} of {} messages in {WAIT:?}", wcs.len(), o.count));
    }
    for wc in &wcs {
        if wc.status != WcStatus::Success || wc.byte_len != o.size + GRH_BYTES as u32 {
            return Err(format!(
                "a receive {:?} of {} B (vendor syndrome {:#x})",
                wc.status, wc.byte_len, wc.vendor_err
            ));
        }
    }
    let rqpn = wcs[0].imm.ok_or("a message without immediate data")?;
    let mut grh = [0u8; GRH_BYTES];
    nd.mr.read(0, &mut grh).map_err(|e| format!("the GRH: {e:?}"))?;
    let src = cmtools::grh_ipv4_source(&grh).ok_or("the GRH area holds no IPv4 header")?;
    let dmac = n
        .node
        .resolve(src, WAIT)
        .map_err(|e| format!("the client's MAC: {e:?}"))?;
    let ah = n
        .pd
        .create_ah(&AhAttr {
            dgid: oob::ipv4_gid(src),
            dmac,
            sgid_index: n.sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        })
        .map_err(|e| format!("udaddy: failure creating address handle: {e:?}"))?;
    nd.reply = Some((ah, rqpn, UDP_QKEY));
    Ok(())
}

/// udaddy.c `post_sends(node, IBV_SEND_SIGNALED)` and `poll_cqs`: `-C` SENDs with this QP's
/// number as immediate, each completed.
fn reply(n: &mut CmNode<'_>, o: &Opts, nd: &mut Node) -> Result<(), String> {
    let (ah, remote_qpn, remote_qkey) = nd.reply.ok_or("no reply address")?;
    let fill: Vec<u8> = (0..o.size as usize).map(|i| oob::pattern(SEED, 0, i)).collect();
    nd.mr.write(0, &fill).map_err(|e| format!("the message: {e:?}"))?;
    let dest = UdDest {
        ah: &ah,
        remote_qpn,
        remote_qkey,
    };
    let qpn = nd.qp.qpn();
    for k in 0..o.count {
        let s = [nd.mr.sge(0, o.size)];
        let wr = SendWr {
            wr_id: u64::from(k),
            op: SendOp::Send { imm: Some(qpn) },
            data: SendData::Sges(&s),
            flags: SendFlags::SIGNALED,
        };
        nd.qp
            .post_ud_send(&wr, &dest)
            .map_err(|e| format!("failed to post sends: {e:?}"))?;
    }
    let wcs = n
        .poll_cq(&mut nd.cq, o.count as usize, WAIT)
        .map_err(|e| format!("udaddy: failed polling CQ: {e:?}"))?;
    if wcs.len() < o.count as usize {
        return Err(format!("{} of {} send completions in {WAIT:?}", wcs.len(), o.count));
    }
    if let Some(wc) = wcs.iter().find(|wc| wc.status != WcStatus::Success) {
        return Err(format!(
            "a send completion {:?} (vendor syndrome {:#x})",
            wc.status, wc.vendor_err
        ));
    }
    Ok(())
}
