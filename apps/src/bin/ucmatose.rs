//! The server side of rdma-core's librdmacm/examples/cmatose.c (installed as `ucmatose`) on
//! rdma_cm, against Linux's client (`cargo run -- --app ucmatose --peer linux --peer-cmd
//! 'ucmatose -s 10.0.0.1 ...'`).
//!
//! Cmdline: `ucmatose [-c CONNECTIONS] [-C COUNT] [-S SIZE] [-p PORT] ip=A.B.C.D/N` (the tool's
//! options: `apps::cmtools`). As cmatose.c `run_server`: listen on `-p` (7471) of the TCP port
//! space; accept `-c` connections (1), each with its own CQs, QP and message buffer, its `-C`
//! receives (10) posted before the accept, and refuse any beyond; once all came, SEND `-C`
//! messages of `-S` bytes (100) on each and wait for their completions, then for the client's
//! `-C` replies on each (every one `-S` bytes); then disconnect them all and wait for each
//! disconnect. cmatose sends whatever its buffer holds; this side sends a known pattern.
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
    AccessFlags, CompletionQueue, MemoryRegion, QpCaps, RecvWr, SendData, SendFlags, SendOp,
    SendWr, WcStatus,
};
use rdma_cm::rdma_cm::PortSpace;
use rdmacm::{CmId, Event, QpInit};

kernel::entry_point!(main);

/// How long each phase may take once the clients are there.
const WAIT: Duration = Duration::from_secs(120);
const SEED: u8 = 0x3c;

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    let args = oob::tool_args(cmdline, "ucmatose");
    let o = match oob::cmdline_role(cmdline).and_then(|r| cmtools::parse(Tool::Cmatose, &args, r)) {
        Ok(o) => o,
        Err(e) => {
            println!("cmatose: {e}");
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
            println!("cmatose: FAILED: {e}");
            println!("return status -1");
            1
        }
    }
}

/// cmatose.c `struct cmatest_node`.
struct Node {
    id: CmId,
    connected: bool,
    /// `cq[SEND_CQ_INDEX]`, `cq[RECV_CQ_INDEX]`.
    send_cq: CompletionQueue<Hal>,
    recv_cq: CompletionQueue<Hal>,
    mr: Option<MemoryRegion<Hal>>,
}

/// cmatose.c `run_server`.
fn run_server(n: &mut CmNode<'_>, o: &Opts) -> Result<(), String> {
    println!("cmatose: starting server");
    n.cm
        .listen(PortSpace::Tcp, o.port, cm::BACKLOG)
        .map_err(|e| format!("cmatose: failure trying to listen: {e:?}"))?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut t = Tally::default();
    connect_events(n, o, &mut nodes, &mut t)?;
    if o.count != 0 {
        println!("initiating data transfers");
        for nd in nodes.iter().filter(|nd| nd.connected) {
            post_sends(n, o, nd)?;
        }
        println!("completing sends");
        poll_cqs(n, o, &mut nodes, true)?;
        println!("receiving data transfers");
        poll_cqs(n, o, &mut nodes, false)?;
        println!("data transfers complete");
    }
    println!("cmatose: disconnecting");
    for nd in nodes.iter_mut().filter(|nd| nd.connected) {
        nd.connected = false;
        n.cm
            .disconnect(cm::now_ns(), nd.id)
            .map_err(|e| format!("rdma_disconnect: {e:?}"))?;
    }
    disconnect_events(n, &mut t)?;
    println!("disconnected");
    for nd in nodes {
        let _ = n.cm.destroy_id(nd.id);
    }
    println!(
        "cmatose: {} connections, {} messages of {} B each way on each: ok",
        t.connected, o.count, o.size
    );
    Ok(())
}

/// cmatose.c `connect_events`: until every connection of `-c` came (or failed).
fn connect_events(
    n: &mut CmNode<'_>,
    o: &Opts,
    nodes: &mut Vec<Node>,
    t: &mut Tally,
) -> Result<(), String> {
    while !t.all_came(o) {
        // The first client boots under TCG after the unikernel.
        let wait = if nodes.is_empty() { oob::FIRST_WAIT } else { WAIT };
        let e = n
            .next_event(wait)
            .ok_or(format!("{} of {} connections in {wait:?}", t.connected, o.connections))?;
        match e {
            Event::ConnectRequest {
                id,
                initiator_depth,
                responder_resources,
                ..
            } => {
                if nodes.len() as u32 == o.connections {
                    println!("cmatose: failing connection request");
                    let _ = n.cm.reject(cm::now_ns(), id, &[]);
                    continue;
                }
                let nd = connect_handler(n, o, id, initiator_depth, responder_resources);
                match nd {
                    Ok(nd) => nodes.push(nd),
                    Err(e) => {
                        println!("cmatose: {e}");
                        println!("cmatose: failing connection request");
                        let _ = n.cm.reject(cm::now_ns(), id, &[]);
                        t.failed += 1;
                    }
                }
            }
            Event::Established { id, .. } => {
                if let Some(nd) = nodes.iter_mut().find(|nd| nd.id == id) {
                    nd.connected = true;
                    t.connected += 1;
                }
            }
            Event::Rejected { reason, .. } => {
                println!("cmatose: event: RDMA_CM_EVENT_REJECTED, error: {reason}");
                t.failed += 1;
            }
            Event::Unreachable { .. } => {
                println!("cmatose: event: RDMA_CM_EVENT_UNREACHABLE, error: -110");
                t.failed += 1;
            }
            e => println!("cmatose: event {} ignored", cm::event_str(&e)),
        }
    }
    if t.connected == 0 {
        return Err("no connection".into());
    }
    Ok(())
}

/// cmatose.c `connect_handler` / `init_node` / `post_recvs`, then `rdma_accept(id, NULL)`.
fn connect_handler(
    n: &mut CmNode<'_>,
    o: &Opts,
    id: CmId,
    ird: u8,
    ord: u8,
) -> Result<Node, String> {
    // `cqe = message_count ? message_count : 1`, for both CQs and both queues.
    let cqe = o.count.max(1);
    let send_cq = n.dev.create_cq(cqe).map_err(|e| format!("unable to create CQ: {e:?}"))?;
    let recv_cq = n.dev.create_cq(cqe).map_err(|e| format!("unable to create CQ: {e:?}"))?;
    let init = QpInit {
        caps: QpCaps {
            max_send_wr: cqe,
            max_recv_wr: cqe,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    };
    n.cm
        .create_qp(id, &n.pd, &send_cq, &recv_cq, &init)
        .map_err(|e| format!("unable to create QP: {e:?}"))?;
    let mr = if o.count != 0 {
        let mr = n
            .pd
            .alloc_mr(o.size as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("failed to reg MR: {e:?}"))?;
        let fill: Vec<u8> = (0..o.size as usize).map(|i| oob::pattern(SEED, 0, i)).collect();
        mr.write(0, &fill).map_err(|e| format!("the message: {e:?}"))?;
        let qp = n.cm.qp(id).ok_or("no QP")?;
        for k in 0..o.count {
            let s = [mr.sge(0, o.size)];
            qp.post_recv(&[RecvWr {
                wr_id: u64::from(k),
                sges: &s,
            }])
            .map_err(|e| format!("failed to post receives: {e:?}"))?;
        }
        Some(mr)
    } else {
        None
    };
    n.cm
        .accept(cm::now_ns(), id, &cm::accept_defaults(ird, ord))
        .map_err(|e| format!("failure accepting: {e:?}"))?;
    Ok(Node {
        id,
        connected: false,
        send_cq,
        recv_cq,
        mr,
    })
}

/// cmatose.c `post_sends`: `-C` SENDs of the buffer (the QP signals every one: `sq_sig_all`).
fn post_sends(n: &mut CmNode<'_>, o: &Opts, nd: &Node) -> Result<(), String> {
    let mr = nd.mr.as_ref().ok_or("no message buffer")?;
    let qp = n.cm.qp(nd.id).ok_or("no QP")?;
    for k in 0..o.count {
        let s = [mr.sge(0, o.size)];
        qp.post_send(&[SendWr {
            wr_id: u64::from(k),
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&s),
            flags: SendFlags::SIGNALED,
        }])
        .map_err(|e| format!("failed to post sends: {e:?}"))?;
    }
    Ok(())
}

/// cmatose.c `poll_cqs`: `-C` completions on each connected node's send (or receive) CQ;
/// every one successful, every receive `-S` bytes.
fn poll_cqs(n: &mut CmNode<'_>, o: &Opts, nodes: &mut [Node], send: bool) -> Result<(), String> {
    for (i, nd) in nodes.iter_mut().enumerate().filter(|(_, nd)| nd.connected) {
        let cq = if send { &mut nd.send_cq } else { &mut nd.recv_cq };
        let wcs = n
            .poll_cq(cq, o.count as usize, WAIT)
            .map_err(|e| format!("cmatose: failed polling CQ: {e:?}"))?;
        if wcs.len() < o.count as usize {
            return Err(format!(
                "connection {i}: {} of {} {} in {WAIT:?}",
                wcs.len(),
                o.count,
                if send { "send completions" } else { "messages" }
            ));
        }
        if let Some(wc) = wcs
            .iter()
            .find(|wc| wc.status != WcStatus::Success || (!send && wc.byte_len != o.size))
        {
            return Err(format!(
                "connection {i}: completion {:?} of {} B (vendor syndrome {:#x})",
                wc.status, wc.byte_len, wc.vendor_err
            ));
        }
    }
    Ok(())
}

/// cmatose.c `disconnect_events`: until every connection's disconnect came.
fn disconnect_events(n: &mut CmNode<'_>, t: &mut Tally) -> Result<(), String> {
    while !t.all_gone() {
        match n.next_event(WAIT) {
            Some(Event::Disconnected { .. }) => t.disconnected += 1,
            Some(e) => println!("cmatose: event {} ignored", cm::event_str(&e)),
            None => {
                return Err(format!(
                    "{} of {} disconnects in {WAIT:?}",
                    t.disconnected, t.connected
                ))
            }
        }
    }
    Ok(())
}
