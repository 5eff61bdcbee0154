//! The passive side answers the Linux hosts' REQs, RTUs, DREQs and DREPs of the shared captures
//! with the very MADs the Linux target sent, byte for byte: given the target's choices (its
//! communication ID, QPN, PSN, CA GUID, ACK delay, private data, when to disconnect), the REP,
//! DREP, DREQ and REJ it sends are Linux's.

mod common;

use std::collections::VecDeque;

use common::CapturedMad;
use rdma_cm::conn::{Accept, Cm, CmConfig, CmEvent, CmTransport, ConnId, Peer, QpStep};
use rdma_cm::mad::MAD_LEN;
use rdma_cm::msg::{Rep, Req};
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
        p.listen(req.service_id, 8).unwrap();
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

#[test]
fn passive_side_answers_linux_with_linux_s_own_mads() {
    let files = match common::captured_mads() {
        Ok(f) => f,
        Err(reason) => return common::skipped(&reason),
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
        println!("{file}: {conns} connections replayed");
    }
    // nvmeof: 3 REP + 3 DREP; perftest: 2 REP, 1 DREP, 1 DREQ; the REJ.
    assert_eq!(total, 6 + 4 + 1);
}
