//! Both roles against the Linux hosts of the shared captures, byte for byte. The passive side
//! answers the hosts' REQs, RTUs, DREQs and DREPs with the very MADs the Linux target sent:
//! given the target's choices (its communication ID, QPN, PSN, CA GUID, ACK delay, private
//! data, when to disconnect), the REP, DREP, DREQ and REJ it sends are Linux's. The active side,
//! given the host's choices (ID, QPN, PSN, path, private data), sends the host's REQ, RTU, DREQ
//! and DREP to the target's MADs.

mod common;

use std::collections::VecDeque;

use common::CapturedMad;
use rdma_cm::conn::{
    own_tid, Accept, Cm, CmConfig, CmEvent, CmTransport, ConnId, Connect, Peer, QpStep,
};
use rdma_cm::mad::MAD_LEN;
use rdma_cm::msg::{Rep, Req};
use rdma_cm::rdma_cm::QpType;
use rdma_cm::{CmMad, CmMsg};

#[derive(Default)]
struct Wire {
    sent: VecDeque<[u8; MAD_LEN]>,
    moves: Vec<(u32, QpStep)>,
}

impl CmTransport for Wire {
    type QpError = ();
    fn send_mad(&mut self, _: &Peer, mad: &[u8; MAD_LEN]) {
        self.sent.push_back(*mad);
    }
    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), ()> {
        self.moves.push((qpn, step));
        Ok(())
    }
}

fn decoded(c: &CapturedMad) -> CmMad {
    CmMad::decode(&c.mad).unwrap()
}

/// The MADs of the connection `req` opened, and the target's REP for it, if any.
fn exchange<'a>(mads: &'a [CapturedMad], req: &Req) -> (Vec<&'a CapturedMad>, Option<Rep>) {
    let rep = mads.iter().find_map(|c| match decoded(c).msg {
        CmMsg::Rep(r) if r.remote_comm_id == req.local_comm_id => Some(r),
        _ => None,
    });
    let theirs = rep.map(|r| r.local_comm_id);
    let of_conn = |m: &CmMsg| match m {
        CmMsg::Rej(r) => r.remote_comm_id == req.local_comm_id,
        m => m.local_comm_id() == req.local_comm_id || Some(m.local_comm_id()) == theirs,
    };
    let v = mads.iter().filter(|c| of_conn(&decoded(c).msg)).collect();
    (v, rep)
}

/// The configuration that makes the machine pick the target's ID and TIDs.
fn target_cfg(exch: &[&CapturedMad], rep: Option<&Rep>, active: std::net::IpAddr) -> CmConfig {
    let tid_hi = exch
        .iter()
        .find(|c| c.src != active && matches!(decoded(c).msg, CmMsg::Dreq(_)))
        .map_or(0, |c| (decoded(c).hdr.tid >> 32) as u32);
    CmConfig {
        local_ca_guid: rep.map_or(0, |r| r.local_ca_guid),
        ack_delay: rep.map_or(0, |r| r.target_ack_delay),
        max_responder_resources: u8::MAX,
        max_initiator_depth: u8::MAX,
        tid_hi,
        // The first ID the machine makes is 1 ^ seed.
        comm_id_seed: rep.map_or(1, |r| r.local_comm_id ^ 1),
    }
}

/// Replays one connection; returns how many target MADs matched.
fn replay(file: &str, exch: &[&CapturedMad], req: &Req, rep: Option<Rep>) -> usize {
    let active = exch[0].src;
    let mut p = Cm::<4>::new(target_cfg(exch, rep.as_ref(), active));
    if rep.is_some() {
        p.listen(req.service_id, QpType::Rc, 8).unwrap();
    }
    let mut w = Wire::default();
    let peer = Peer {
        gid: [0; 16],
        qpn: 1,
    };
    let mut id: Option<ConnId> = None;
    let mut matched = 0;
    for c in exch {
        let what = format!("{file} frame {}", c.frame);
        if c.src != active {
            // The target's MAD: what the machine sent, or a DREQ the application starts.
            if w.sent.is_empty() && matches!(decoded(c).msg, CmMsg::Dreq(_)) {
                p.disconnect(0, id.unwrap(), &mut w).unwrap();
            }
            let ours = w
                .sent
                .pop_front()
                .unwrap_or_else(|| panic!("{what}: nothing sent"));
            assert_eq!(&ours[..], &c.mad[..], "{what}: {:?}", decoded(c).msg);
            matched += 1;
            continue;
        }
        let ev = p.on_mad(0, &peer, &c.mad, &mut w);
        match ev {
            Ok(Some(CmEvent::ConnectRequest { id: new, .. })) => {
                let r = rep.unwrap();
                let a = Accept {
                    qpn: r.local_qpn,
                    starting_psn: r.starting_psn,
                    responder_resources: r.responder_resources,
                    initiator_depth: r.initiator_depth,
                    flow_control: r.end_to_end_flow_control,
                    rnr_retry_count: r.rnr_retry_count,
                    srq: r.srq,
                    private_data: &r.private_data,
                };
                p.accept(0, new, &a, &mut w).unwrap();
                id = Some(new);
            }
            Ok(Some(CmEvent::Established { .. } | CmEvent::Disconnected { .. })) => {}
            Err(rdma_cm::conn::Dropped::Rejected(8)) => assert!(rep.is_none(), "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(w.sent.is_empty(), "{file}: sent more than the target");
    // The QP went through INIT, RTR, RTS from the REQ, and to ERR at the disconnect.
    if let Some(r) = rep {
        let steps: Vec<_> = w.moves.iter().filter(|m| m.0 == r.local_qpn).collect();
        assert!(matches!(
            steps[..3],
            [
                (_, QpStep::Init { .. }),
                (_, QpStep::Rtr(_)),
                (_, QpStep::Rts(_))
            ]
        ));
        if let (_, QpStep::Rts(rts)) = steps[2] {
            assert_eq!(rts.sq_psn, req.starting_psn, "{file}");
        }
    }
    matched
}

/// Runs `replay` on every connection of every capture (its MADs, its REQ, the target's REP);
/// the sum of what it returns, or `None` when the captures are not there.
fn each_connection(
    role: &str,
    mut replay: impl FnMut(&str, &[&CapturedMad], &Req, Option<Rep>) -> usize,
) -> Option<usize> {
    let files = match common::captured_mads() {
        Ok(f) => f,
        Err(reason) => {
            common::skipped(&reason);
            return None;
        }
    };
    let mut total = 0;
    for (file, mads) in &files {
        let mut conns = 0;
        for c in mads {
            let CmMsg::Req(req) = decoded(c).msg else {
                continue;
            };
            let (exch, rep) = exchange(mads, &req);
            total += replay(file, &exch, &req, rep);
            conns += 1;
        }
        println!("{file}: {conns} connections replayed from the {role}'s side");
    }
    Some(total)
}

#[test]
fn passive_side_answers_linux_with_linux_s_own_mads() {
    let Some(total) = each_connection("target", replay) else {
        return;
    };
    // nvmeof: 3 REP + 3 DREP; perftest: 2 REP, 1 DREP, 1 DREQ; the REJ.
    assert_eq!(total, 6 + 4 + 1);
}

/// What the Linux host chose for its REQ, as a connect (the random parts: ID, QPN, PSN,
/// flow label, private data; the rest are rdma_cm's values on rxe).
fn connect_of(req: &Req) -> Connect<'_> {
    let p = &req.primary;
    Connect {
        service_id: req.service_id,
        qpn: req.local_qpn,
        starting_psn: req.starting_psn,
        local_gid: p.local_gid,
        remote_gid: p.remote_gid,
        flow_label: p.flow_label,
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        path_mtu: req.path_mtu,
        pkey: req.pkey,
        responder_resources: req.responder_resources,
        initiator_depth: req.initiator_depth,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        local_ack_timeout: p.local_ack_timeout,
        remote_cm_response_timeout: req.remote_cm_response_timeout,
        local_cm_response_timeout: req.local_cm_response_timeout,
        max_cm_retries: req.max_cm_retries,
        srq: req.srq,
        flow_control: req.end_to_end_flow_control,
        private_data: &req.private_data,
    }
}

/// Replays one connection from the host's side; returns how many host MADs matched.
fn replay_active(file: &str, exch: &[&CapturedMad], req: &Req) -> usize {
    let active = exch[0].src;
    let tid = decoded(exch[0]).hdr.tid;
    // Linux's own-exchange TID rule holds for the host's REQ.
    assert_eq!(
        own_tid((tid >> 32) as u32, req.local_comm_id),
        tid,
        "{file}"
    );
    let cfg = CmConfig {
        local_ca_guid: req.local_ca_guid,
        ack_delay: 0,
        max_responder_resources: u8::MAX,
        max_initiator_depth: u8::MAX,
        tid_hi: (tid >> 32) as u32,
        // The first ID the machine makes is 1 ^ seed.
        comm_id_seed: req.local_comm_id ^ 1,
    };
    let mut cm = Cm::<4>::new(cfg);
    let mut w = Wire::default();
    let peer = Peer {
        gid: req.primary.remote_gid,
        qpn: 1,
    };
    let id = cm.connect(0, &peer, &connect_of(req), &mut w).unwrap();
    assert_eq!(id.0, req.local_comm_id);
    let mut matched = 0;
    for c in exch {
        let what = format!("{file} frame {}", c.frame);
        if c.src == active {
            // The host's MAD: what the machine sent, or a DREQ the application starts.
            if w.sent.is_empty() && matches!(decoded(c).msg, CmMsg::Dreq(_)) {
                cm.disconnect(0, id, &mut w).unwrap();
            }
            let ours = w
                .sent
                .pop_front()
                .unwrap_or_else(|| panic!("{what}: nothing sent"));
            assert_eq!(
                &ours[..],
                &c.mad[..],
                "{what}: {:?}\nours {:?}",
                decoded(c).msg,
                CmMad::decode(&ours).map(|m| m.msg)
            );
            matched += 1;
            continue;
        }
        match cm.on_mad(0, &peer, &c.mad, &mut w) {
            Ok(Some(CmEvent::Established { id: got, .. })) => assert_eq!(got, id),
            Ok(Some(CmEvent::Disconnected { id: got })) => assert_eq!(got, id),
            Ok(Some(CmEvent::Rejected {
                id: got, reason, ..
            })) => {
                assert_eq!((got, reason), (id, 8), "{what}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(w.sent.is_empty(), "{file}: sent more than the host");
    matched
}

#[test]
fn active_side_sends_linux_s_own_req_rtu_and_dreq() {
    let active = |file: &str, exch: &[&CapturedMad], req: &Req, _| replay_active(file, exch, req);
    let Some(total) = each_connection("host", active) else {
        return;
    };
    // nvmeof: 3 REQ + 3 RTU + 3 DREQ; perftest: 2 REQ, 2 RTU, 1 DREQ, 1 DREP; the rejected REQ.
    assert_eq!(total, 9 + 6 + 1);
}
