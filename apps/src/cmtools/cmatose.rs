//! cmatose.c's server side over rdmacm (`run_server`, `connect_handler`, `post_sends`,
//! `poll_cqs`, `disconnect_events`), on a [`CmNode`](crate::cm::CmNode): the `ucmatose` app in the unikernel, an
//! emulated HCA in the host tests. cmatose sends whatever its buffers hold; this side sends a
//! known pattern and checks that every message has `-S` bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mlx5::{
    AccessFlags, CompletionQueue, Hal, MemoryRegion, QpCaps, RecvWr, SendData, SendFlags, SendOp,
    SendWr, WcStatus,
};
use net::{Clock, Nic};
use rdmacm::{CmId, Event, PortSpace, QpInit};

use super::{Opts, Tally, Tool};
use crate::cm::{self, say, CmNode, FIRST_WAIT, WAIT};
use crate::oob;

/// The seed of the pattern this side sends.
const SEED: u8 = 0x3c;

/// cmatose.c `struct cmatest_node`.
struct Node<H: Hal> {
    id: CmId,
    connected: bool,
    /// `cq[SEND_CQ_INDEX]`, `cq[RECV_CQ_INDEX]`.
    send_cq: CompletionQueue<H>,
    recv_cq: CompletionQueue<H>,
    mr: Option<MemoryRegion<H>>,
}

/// cmatose.c `run_server`.
pub fn run_server<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
) -> Result<(), String> {
    say!(n, "cmatose: starting server");
    n.cm.listen(PortSpace::Tcp, o.port, cm::BACKLOG)
        .map_err(|e| format!("failure trying to listen: {e:?}"))?;
    let mut nodes: Vec<Node<H>> = Vec::new();
    let mut t = Tally::default();
    connect_events(n, o, &mut nodes, &mut t)?;
    if o.count != 0 {
        say!(n, "initiating data transfers");
        for nd in nodes.iter().filter(|nd| nd.connected) {
            post_sends(n, o, nd)?;
        }
        say!(n, "completing sends");
        poll_cqs(n, o, &mut nodes, true)?;
        say!(n, "receiving data transfers");
        poll_cqs(n, o, &mut nodes, false)?;
        say!(n, "data transfers complete");
    }
    say!(n, "cmatose: disconnecting");
    for nd in nodes.iter_mut().filter(|nd| nd.connected) {
        nd.connected = false;
        n.disconnect(nd.id)
            .map_err(|e| format!("rdma_disconnect: {e:?}"))?;
    }
    disconnect_events(n, &mut t)?;
    say!(n, "disconnected");
    super::finish(n, Tool::Cmatose, nodes.iter().map(|nd| nd.id), &t, o);
    Ok(())
}

/// cmatose.c `connect_events`: until every connection of `-c` came (or failed).
fn connect_events<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    nodes: &mut Vec<Node<H>>,
    t: &mut Tally,
) -> Result<(), String> {
    while !t.all_came(o) {
        // The first client boots under TCG after the unikernel.
        let wait = if nodes.is_empty() { FIRST_WAIT } else { WAIT };
        let e = n.next_event(wait).ok_or(format!(
            "{} of {} connections in {wait:?}",
            t.connected, o.connections
        ))?;
        match e {
            Event::ConnectRequest {
                id,
                initiator_depth,
                responder_resources,
                ..
            } => {
                if nodes.len() as u32 == o.connections {
                    say!(n, "cmatose: failing connection request");
                    let _ = n.reject(id);
                    continue;
                }
                let nd = connect_handler(n, o, id, initiator_depth, responder_resources);
                match nd {
                    Ok(nd) => nodes.push(nd),
                    Err(e) => {
                        say!(n, "cmatose: {e}");
                        say!(n, "cmatose: failing connection request");
                        let _ = n.reject(id);
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
                say!(n, "cmatose: event: RDMA_CM_EVENT_REJECTED, error: {reason}");
                t.failed += 1;
            }
            e @ (Event::Unreachable { .. } | Event::ConnectError { .. }) => {
                say!(n, "cmatose: event: {}, error: -110", cm::event_str(&e));
                t.failed += 1;
            }
            e => say!(n, "cmatose: event {} ignored", cm::event_str(&e)),
        }
    }
    if t.connected == 0 {
        return Err("no connection".into());
    }
    Ok(())
}

/// cmatose.c `connect_handler` / `init_node` / `post_recvs`, then `rdma_accept(id, NULL)`.
fn connect_handler<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    id: CmId,
    ird: u8,
    ord: u8,
) -> Result<Node<H>, String> {
    // `cqe = message_count ? message_count : 1`, for both CQs and both queues.
    let cqe = o.count.max(1);
    let send_cq = n
        .dev
        .create_cq(cqe)
        .map_err(|e| format!("unable to create CQ: {e:?}"))?;
    let recv_cq = n
        .dev
        .create_cq(cqe)
        .map_err(|e| format!("unable to create CQ: {e:?}"))?;
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
    n.cm.create_qp(id, &n.pd, &send_cq, &recv_cq, &init)
        .map_err(|e| format!("unable to create QP: {e:?}"))?;
    let mr = if o.count != 0 {
        let mr =
            n.pd.alloc_mr(o.size as usize, AccessFlags::LOCAL_WRITE)
                .map_err(|e| format!("failed to reg MR: {e:?}"))?;
        let fill: Vec<u8> = (0..o.size as usize)
            .map(|i| oob::pattern(SEED, 0, i))
            .collect();
        mr.write(0, &fill)
            .map_err(|e| format!("the message: {e:?}"))?;
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
    n.accept(id, &cm::accept_defaults(ird, ord))
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
fn post_sends<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    nd: &Node<H>,
) -> Result<(), String> {
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
fn poll_cqs<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    nodes: &mut [Node<H>],
    send: bool,
) -> Result<(), String> {
    for (i, nd) in nodes.iter_mut().enumerate().filter(|(_, nd)| nd.connected) {
        let cq = if send {
            &mut nd.send_cq
        } else {
            &mut nd.recv_cq
        };
        let wcs = n
            .poll_cq(cq, o.count as usize, WAIT)
            .map_err(|e| format!("failed polling CQ: {e:?}"))?;
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
fn disconnect_events<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    t: &mut Tally,
) -> Result<(), String> {
    while !t.all_gone() {
        match n.next_event(WAIT) {
            Some(Event::Disconnected { .. }) => t.disconnected += 1,
            Some(e) => say!(n, "cmatose: event {} ignored", cm::event_str(&e)),
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

#[cfg(test)]
mod tests {
    use std::string::String;
    use std::vec::Vec;

    use mlx5::{AccessFlags, QpCaps, RecvWr, SendData, SendFlags, SendOp, SendWr, WcStatus};
    use rdmacm::{ConnParam, Event, PortSpace, QpInit};

    use super::super::Tool;
    use super::{SEED, WAIT};
    use crate::oob;
    use crate::sim::SimHal;
    use crate::testnet::{on_hca, HcaCmNode};

    /// cmatose.c `run_client` as the host test's peer: `conns` connections to 10.0.0.1's
    /// `port`, `count` receives posted on each before it connects, then its `count` messages
    /// of `size` bytes (checked against the server's pattern) and `count` replies, then the
    /// server's disconnects answered.
    fn client(n: &mut HcaCmNode<'_>, port: u16, conns: usize, count: u32, size: u32) {
        let mut v = Vec::new();
        for _ in 0..conns {
            let scq = n.dev.create_cq(count).unwrap();
            let rcq = n.dev.create_cq(count).unwrap();
            let caps = QpCaps {
                max_send_wr: count,
                max_recv_wr: count,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let init = QpInit {
                caps,
                access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
            };
            // cmatose.c `route_handler`: responder resources and initiator depth 1, retry
            // count 5, and the RNR retry count memset's 0.
            let p = ConnParam {
                private_data: &[],
                responder_resources: 1,
                initiator_depth: 1,
                retry_count: 5,
                rnr_retry_count: 0,
            };
            let id = n
                .connect([10, 0, 0, 1], port, PortSpace::Tcp, (&scq, &rcq), init, &p)
                .unwrap();
            let mr =
                n.pd.alloc_mr(size as usize, AccessFlags::LOCAL_WRITE)
                    .unwrap();
            for k in 0..count {
                let s = [mr.sge(0, size)];
                let wr = RecvWr {
                    wr_id: k.into(),
                    sges: &s,
                };
                n.cm.qp(id).unwrap().post_recv(&[wr]).unwrap();
            }
            v.push((id, scq, rcq, mr));
        }
        let mut up = 0;
        while up < conns {
            match n.next_event(WAIT).expect("an event") {
                Event::Established { .. } => up += 1,
                e => panic!("client: {e:?}"),
            }
        }
        let want: Vec<u8> = (0..size as usize)
            .map(|i| oob::pattern(SEED, 0, i))
            .collect();
        for (id, scq, rcq, mr) in v.iter_mut() {
            let wcs = n.poll_cq(rcq, count as usize, WAIT).unwrap();
            assert_eq!(wcs.len(), count as usize);
            assert!(wcs
                .iter()
                .all(|w| w.status == WcStatus::Success && w.byte_len == size));
            let mut got = std::vec![0u8; size as usize];
            mr.read(0, &mut got).unwrap();
            assert_eq!(got, want, "the server's message");
            for k in 0..count {
                let s = [mr.sge(0, size)];
                let wr = SendWr {
                    wr_id: k.into(),
                    op: SendOp::Send { imm: None },
                    data: SendData::Sges(&s),
                    flags: SendFlags::SIGNALED,
                };
                n.cm.qp(*id).unwrap().post_send(&[wr]).unwrap();
            }
            let wcs = n.poll_cq(scq, count as usize, WAIT).unwrap();
            assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
        }
        // cmatose.c `cma_handler`: DISCONNECTED is answered with rdma_disconnect.
        let mut gone = 0;
        while gone < conns {
            match n.next_event(WAIT).expect("the server's disconnect") {
                Event::Disconnected { id } => {
                    let _ = n.disconnect(id);
                    gone += 1;
                }
                e => panic!("client: {e:?}"),
            }
        }
    }

    /// cmatose's server on one emulated HCA, a cmatose client with two connections on the
    /// other: both connect, ten 100-byte messages go each way on each, the server disconnects
    /// both and hears both disconnects.
    #[test]
    fn the_cmatose_server_takes_two_connections_and_ten_messages_each_way() {
        let (sa, sb) = SimHal::pair();
        let o = super::super::parse(Tool::Cmatose, &["-c", "2"], None).unwrap();
        let (srv, cli) = std::thread::scope(|s| {
            let srv = s.spawn(move || on_hca(sa, "ip=10.0.0.1/24", |n| super::run_server(n, &o)));
            let cli = s.spawn(move || {
                on_hca(sb, "ip=10.0.0.2/24", |n| {
                    client(n, o.port, 2, o.count, o.size)
                })
            });
            (srv.join().unwrap(), cli.join())
        });
        assert!(cli.is_ok(), "the client failed; server: {:?}", srv.1);
        assert_eq!(srv.0, Ok(()), "server: {:?}", srv.1);
        let lines: Vec<String> = srv.1;
        for l in [
            "cmatose: starting server",
            "initiating data transfers",
            "completing sends",
            "receiving data transfers",
            "data transfers complete",
            "cmatose: disconnecting",
            "disconnected",
            "cmatose: 2 connections, 10 messages of 100 B each way on each: ok",
        ] {
            assert!(lines.iter().any(|x| x == l), "no {l:?} in {lines:?}");
        }
    }
}
