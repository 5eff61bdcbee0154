//! udaddy.c's server side over rdmacm (`run_server`, `connect_handler`, `poll_cqs` with
//! `create_reply_ah`, `post_sends`), on a [`CmNode`](crate::cm::CmNode): the `udaddy` app in the unikernel, an
//! emulated HCA in the host tests. udaddy sends whatever its buffers hold; this side sends a
//! known pattern and checks that every message has `-S` bytes after the GRH room.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use mlx5::{
    AccessFlags, AddressHandle, CompletionQueue, Hal, MemoryRegion, QpCaps, QueuePair, RecvWr,
    SendData, SendFlags, SendOp, SendWr, UdDest, WcStatus, GRH_BYTES,
};
use net::{Clock, Nic};
use rdmacm::{CmId, Event, PortSpace};

use super::{Opts, Tally, Tool};
use crate::cm::{self, say, CmNode, FIRST_WAIT, WAIT};
use crate::oob;

/// The seed of the pattern this side sends.
const SEED: u8 = 0x5d;
/// The Q_Key of rdma_cm's UDP port space (Linux drivers/infiniband/core/cma.c
/// `RDMA_UDP_QKEY`), which a SIDR answer of this space carries.
pub const UDP_QKEY: u32 = 0x0123_4567;

/// udaddy.c `struct cmatest_node`.
struct Node<H: Hal> {
    id: CmId,
    cq: CompletionQueue<H>,
    qp: QueuePair<H>,
    mr: MemoryRegion<H>,
    /// The reply's address, from the first message (`ah`, `remote_qpn`, `remote_qkey`).
    reply: Option<(AddressHandle, u32, u32)>,
}

/// udaddy.c `run_server`.
pub fn run_server<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
) -> Result<(), String> {
    say!(n, "udaddy: starting server");
    n.cm.listen(PortSpace::Udp, o.port, cm::BACKLOG)
        .map_err(|e| format!("failure trying to listen: {e:?}"))?;
    let mut nodes: Vec<Node<H>> = Vec::new();
    let mut t = Tally::default();
    while !t.all_came(o) {
        let wait = if nodes.is_empty() { FIRST_WAIT } else { WAIT };
        let e = n.next_event(wait).ok_or(format!(
            "{} of {} requests in {wait:?}",
            t.connected, o.connections
        ))?;
        let Event::UdRequest { id, .. } = e else {
            say!(n, "udaddy: event {} ignored", cm::event_str(&e));
            continue;
        };
        if nodes.len() as u32 == o.connections {
            say!(n, "udaddy: failing connection request");
            let _ = n.ud_reject(id);
            continue;
        }
        match connect_handler(n, o, id) {
            Ok(nd) => {
                nodes.push(nd);
                t.connected += 1;
            }
            Err(e) => {
                say!(n, "udaddy: {e}");
                say!(n, "udaddy: failing connection request");
                let _ = n.ud_reject(id);
                t.failed += 1;
            }
        }
    }
    if o.count != 0 {
        say!(n, "receiving data transfers");
        for nd in nodes.iter_mut() {
            receive(n, o, nd)?;
        }
        say!(n, "sending replies");
        for nd in nodes.iter_mut() {
            reply(n, o, nd)?;
        }
        say!(n, "data transfers complete");
    }
    super::finish(n, Tool::Udaddy, nodes.iter().map(|nd| nd.id), &t, o);
    Ok(())
}

/// udaddy.c `connect_handler`: `verify_test_params` (the message fits the MTU), `init_node`
/// (a CQ of `2 * -C`, a UD QP, the message buffer with the GRH room), `post_recvs`, and the
/// SIDR answer with the QP (`rdma_accept` with `qp_num`).
fn connect_handler<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    id: CmId,
) -> Result<Node<H>, String> {
    // `message_size > (1 << (port_attr.active_mtu + 7))`: the port's active MTU in bytes.
    let port = n
        .dev
        .query_port(1)
        .map_err(|e| format!("ibv_query_port: {e:?}"))?;
    let mtu = port.active_mtu.map_or(0, |m| 1u32 << (m as u32 + 7));
    if o.count != 0 && o.size > mtu {
        return Err(format!(
            "message_size {} is larger than active mtu {mtu}",
            o.size
        ));
    }
    let cqe = if o.count != 0 { 2 * o.count } else { 2 };
    let cq = n
        .dev
        .create_cq(cqe)
        .map_err(|e| format!("unable to create CQ: {e:?}"))?;
    let caps = QpCaps {
        max_send_wr: o.count.max(1),
        max_recv_wr: o.count.max(1),
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qp =
        n.pd.create_ud_qp(&cq, &cq, &caps, UDP_QKEY)
            .map_err(|e| format!("unable to create QP: {e:?}"))?;
    let len = o.size + GRH_BYTES as u32;
    let mr =
        n.pd.alloc_mr(len as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("failed to reg MR: {e:?}"))?;
    for k in 0..o.count {
        let s = [mr.sge(0, len)];
        qp.post_recv(&[RecvWr {
            wr_id: u64::from(k),
            sges: &s,
        }])
        .map_err(|e| format!("failed to post receives: {e:?}"))?;
    }
    n.ud_accept(id, qp.qpn(), UDP_QKEY)
        .map_err(|e| format!("failure accepting: {e:?}"))?;
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
fn receive<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    nd: &mut Node<H>,
) -> Result<(), String> {
    let wcs = n
        .poll_cq(&mut nd.cq, o.count as usize, WAIT)
        .map_err(|e| format!("failed polling CQ: {e:?}"))?;
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
    nd.mr
        .read(0, &mut grh)
        .map_err(|e| format!("the GRH: {e:?}"))?;
    let src = mlx5::grh_ipv4_source(&grh).ok_or("the GRH area holds no IPv4 header")?;
    let ah = n.create_ah(src, WAIT)?;
    nd.reply = Some((ah, rqpn, UDP_QKEY));
    Ok(())
}

/// udaddy.c `post_sends(node, IBV_SEND_SIGNALED)` and `poll_cqs`: `-C` SENDs with this QP's
/// number as immediate, each completed.
fn reply<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    nd: &mut Node<H>,
) -> Result<(), String> {
    let (ah, remote_qpn, remote_qkey) = nd.reply.ok_or("no reply address")?;
    let fill: Vec<u8> = (0..o.size as usize)
        .map(|i| oob::pattern(SEED, 0, i))
        .collect();
    nd.mr
        .write(0, &fill)
        .map_err(|e| format!("the message: {e:?}"))?;
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
        .map_err(|e| format!("failed polling CQ: {e:?}"))?;
    if wcs.len() < o.count as usize {
        return Err(format!(
            "{} of {} send completions in {WAIT:?}",
            wcs.len(),
            o.count
        ));
    }
    if let Some(wc) = wcs.iter().find(|wc| wc.status != WcStatus::Success) {
        return Err(format!(
            "a send completion {:?} (vendor syndrome {:#x})",
            wc.status, wc.vendor_err
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use mlx5::{AccessFlags, QpCaps, RecvWr, SendData, SendFlags, SendOp, SendWr, UdDest};
    use mlx5::{WcOpcode, WcStatus, GRH_BYTES};
    use rdmacm::Event;

    use super::super::Tool;
    use super::{SEED, UDP_QKEY, WAIT};
    use crate::oob;
    use crate::sim::SimHal;
    use crate::testnet::{on_hca, HcaCmNode};

    /// udaddy.c `run_client` as the host test's peer: resolves the service at 10.0.0.1's
    /// `port` by SIDR, sends its `count` messages of `size` bytes with its QPN as immediate,
    /// and takes the server's `count` replies (checked against the server's pattern, with the
    /// server's QPN as immediate).
    fn client(n: &mut HcaCmNode<'_>, port: u16, count: u32, size: u32) {
        let now = n.now_ns();
        n.cm.ud_resolve(now, [10, 0, 0, 1], port, &[], n.node.stack())
            .unwrap();
        let (qpn, qkey, ah) = match n.next_event(WAIT).expect("the SIDR answer") {
            Event::UdResolved { qpn, qkey, ah, .. } => (qpn, qkey, ah),
            e => panic!("client: {e:?}"),
        };
        assert_eq!(qkey, UDP_QKEY);
        let mut cq = n.dev.create_cq(2 * count).unwrap();
        let caps = QpCaps {
            max_send_wr: count,
            max_recv_wr: count,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut qp = n.pd.create_ud_qp(&cq, &cq, &caps, UDP_QKEY).unwrap();
        let len = size + GRH_BYTES as u32;
        let mr =
            n.pd.alloc_mr(2 * len as usize, AccessFlags::LOCAL_WRITE)
                .unwrap();
        for k in 0..count {
            let s = [mr.sge(0, len)];
            qp.post_recv(&[RecvWr {
                wr_id: k.into(),
                sges: &s,
            }])
            .unwrap();
        }
        let dest = UdDest {
            ah: &ah,
            remote_qpn: qpn,
            remote_qkey: qkey,
        };
        let me = qp.qpn();
        for k in 0..count {
            let s = [mr.sge(u64::from(len), size)];
            let wr = SendWr {
                wr_id: 100 + u64::from(k),
                op: SendOp::Send { imm: Some(me) },
                data: SendData::Sges(&s),
                flags: SendFlags::NONE,
            };
            qp.post_ud_send(&wr, &dest).unwrap();
        }
        let wcs = n.poll_cq(&mut cq, count as usize, WAIT).unwrap();
        assert_eq!(wcs.len(), count as usize);
        for w in &wcs {
            assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::Recv));
            assert_eq!((w.byte_len, w.imm), (len, Some(qpn)));
        }
        let want: Vec<u8> = (0..size as usize)
            .map(|i| oob::pattern(SEED, 0, i))
            .collect();
        let mut got = std::vec![0u8; size as usize];
        mr.read(GRH_BYTES as u64, &mut got).unwrap();
        assert_eq!(got, want, "the server's reply");
    }

    /// udaddy's server on one emulated HCA, a udaddy client on the other: SIDR resolves the
    /// service to the server's UD QP, ten 100-byte messages go each way.
    #[test]
    fn the_udaddy_server_answers_sidr_and_replies_to_ten_messages() {
        let (sa, sb) = SimHal::pair();
        let o = super::super::parse(Tool::Udaddy, &[], None).unwrap();
        let (srv, cli) = std::thread::scope(|s| {
            let srv = s.spawn(move || on_hca(sa, "ip=10.0.0.1/24", |n| super::run_server(n, &o)));
            let cli = s.spawn(move || {
                on_hca(sb, "ip=10.0.0.2/24", |n| client(n, o.port, o.count, o.size))
            });
            (srv.join().unwrap(), cli.join())
        });
        assert!(cli.is_ok(), "the client failed; server: {:?}", srv.1);
        assert_eq!(srv.0, Ok(()), "server: {:?}", srv.1);
        for l in [
            "udaddy: starting server",
            "receiving data transfers",
            "sending replies",
            "data transfers complete",
            "udaddy: 1 requests, 10 messages of 100 B each way on each: ok",
        ] {
            assert!(srv.1.iter().any(|x| x == l), "no {l:?} in {:?}", srv.1);
        }
    }

    /// A message larger than the port's active MTU (1024 on the model's 1500-byte Ethernet)
    /// fails udaddy's `verify_test_params`: the request is refused, the client hears
    /// UNREACHABLE (a SIDR_REP that is not Success), and the server ends with no requests.
    #[test]
    fn the_udaddy_server_refuses_a_message_size_beyond_the_mtu() {
        let (sa, sb) = SimHal::pair();
        let o = super::super::parse(Tool::Udaddy, &["-S", "2000"], None).unwrap();
        let (srv, cli) = std::thread::scope(|s| {
            let srv = s.spawn(move || on_hca(sa, "ip=10.0.0.1/24", |n| super::run_server(n, &o)));
            let cli = s.spawn(move || {
                on_hca(sb, "ip=10.0.0.2/24", |n| {
                    let now = n.now_ns();
                    n.cm.ud_resolve(now, [10, 0, 0, 1], o.port, &[], n.node.stack())
                        .unwrap();
                    n.next_event(WAIT)
                })
            });
            (srv.join().unwrap(), cli.join().unwrap())
        });
        assert!(
            matches!(cli.0, Some(Event::Unreachable { .. })),
            "client: {:?}",
            cli.0
        );
        assert_eq!(srv.0, Ok(()), "server: {:?}", srv.1);
        for l in [
            "udaddy: message_size 2000 is larger than active mtu 1024",
            "udaddy: failing connection request",
            "udaddy: 0 requests (1 refused), 10 messages of 2000 B each way on each: ok",
        ] {
            assert!(srv.1.iter().any(|x| x == l), "no {l:?} in {:?}", srv.1);
        }
    }
}
