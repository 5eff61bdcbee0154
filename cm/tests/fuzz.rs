//! Mutated CM MADs never panic: each decodes or is refused with a typed error, and whatever
//! decodes encodes again to bytes that decode to the same message. Seeds: the MADs of the
//! shared captures when they are there, else messages this crate builds.

mod common;

use common::accept_on;

use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;
use rdma_cm::conn::{Cm, CmConfig, CmEvent, CmTransport, ConnId, ConnState, Connect, Peer, QpStep};
use rdma_cm::mad::{attr, MAD_HDR_LEN, MAD_LEN};
use rdma_cm::msg::{self, Drep, Dreq, Mra, Rej, Rtu, SidrRep, SidrReq};
use rdma_cm::rdma_cm::{CmaHdr, PortSpace};
use rdma_cm::{CmMad, CmMsg};

const ROUNDS: usize = 20_000;

/// One of every message, all bytes zero but the IDs.
fn built_seeds() -> Vec<Vec<u8>> {
    let msgs = [
        CmMsg::Mra(Mra {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: 0,
            service_timeout: 0,
            private_data: [0; msg::MRA_PRIVATE_DATA_LEN],
        }),
        CmMsg::Rej(Rej {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_rejected: 0,
            reject_info_length: 0,
            reason: 8,
            ari: [0; msg::REJ_ARI_LEN],
            private_data: [0; msg::REJ_PRIVATE_DATA_LEN],
        }),
        CmMsg::Rtu(Rtu {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; msg::RTU_PRIVATE_DATA_LEN],
        }),
        CmMsg::Dreq(Dreq {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn_eecn: 3,
            private_data: [0; msg::DREQ_PRIVATE_DATA_LEN],
        }),
        CmMsg::Drep(Drep {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; msg::RTU_PRIVATE_DATA_LEN],
        }),
        CmMsg::SidrReq(SidrReq {
            request_id: 1,
            pkey: 0xffff,
            service_id: 0x0111_0001,
            private_data: [0; msg::SIDR_REQ_PRIVATE_DATA_LEN],
        }),
        CmMsg::SidrRep(SidrRep {
            request_id: 1,
            status: 0,
            info_length: 0,
            vendor_id: 0,
            qpn: 3,
            service_id: 0x0111_0001,
            qkey: 4,
            info: [0; msg::SIDR_REP_INFO_LEN],
            private_data: [0; msg::SIDR_REP_PRIVATE_DATA_LEN],
        }),
    ];
    let mut seeds: Vec<Vec<u8>> = msgs
        .iter()
        .map(|m| CmMad::new(1, *m).to_bytes().unwrap().to_vec())
        .collect();
    // REQ and REP: a valid header and attribute over zero bodies.
    for id in [attr::REQ, attr::REP] {
        let mut m = seeds[0].clone();
        m[16..18].copy_from_slice(&id.to_be_bytes());
        m[MAD_HDR_LEN..].fill(0);
        seeds.push(m);
    }
    seeds
}

/// One mutation of `seed`.
fn mutate(rng: &mut SplitMix64, seed: &[u8]) -> Vec<u8> {
    let mut m = seed.to_vec();
    let below = |rng: &mut SplitMix64, n: usize| (rng.next_u64() % n as u64) as usize;
    for _ in 0..1 + below(rng, 8) {
        match below(rng, 6) {
            0 => {
                let i = below(rng, m.len().max(1));
                if let Some(b) = m.get_mut(i) {
                    *b ^= 1 << below(rng, 8);
                }
            }
            1 => {
                let i = below(rng, m.len().max(1));
                if let Some(b) = m.get_mut(i) {
                    *b = rng.next_u64() as u8;
                }
            }
            // Any CM attribute, or a neighbour of one.
            2 if m.len() >= 18 => m[17] = 0x0f + below(rng, 0x0d) as u8,
            // A body byte anywhere, 0xff (widest field values).
            3 if m.len() > MAD_HDR_LEN => {
                let i = MAD_HDR_LEN + below(rng, m.len() - MAD_HDR_LEN);
                m[i] = 0xff;
            }
            4 => m.truncate(below(rng, MAD_LEN + 1)),
            5 => m.resize(m.len() + 1 + below(rng, 16), rng.next_u64() as u8),
            _ => {}
        }
    }
    m
}

/// The built seeds and, when the captures are there, their MADs.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = built_seeds();
    match common::captured_mads() {
        Ok(files) => seeds.extend(files.into_iter().flat_map(|(_, m)| m).map(|c| c.mad)),
        Err(reason) => common::skipped(&format!("{reason}; fuzzing built seeds only")),
    }
    seeds
}

#[test]
fn mutated_mads_never_panic_and_what_decodes_round_trips() {
    let seeds = seeds();
    let mut rng = SplitMix64::seed_from_u64(0x00c0_ffee);
    let (mut decoded, mut refused) = (0, 0);
    for round in 0..ROUNDS {
        let seed = &seeds[round % seeds.len()];
        let m = mutate(&mut rng, seed);
        match CmMad::decode(&m) {
            Ok(mad) => {
                decoded += 1;
                let again = mad.to_bytes().expect("a decoded MAD encodes");
                assert_eq!(CmMad::decode(&again), Ok(mad), "round {round}");
                if let CmMsg::Req(req) = mad.msg {
                    let _ = CmaHdr::decode(&req.private_data);
                }
            }
            Err(_) => refused += 1,
        }
    }
    println!("{decoded} decoded, {refused} refused");
    assert!(decoded > ROUNDS / 10 && refused > ROUNDS / 10);
}

/// Counts sends and remembers each QP's last move.
#[derive(Default)]
struct Sink {
    sent: usize,
    last_move: std::collections::BTreeMap<u32, QpStep>,
}

impl CmTransport for Sink {
    type QpError = ();
    fn send_mad(&mut self, _: &Peer, _: &[u8; MAD_LEN]) {
        self.sent += 1;
    }
    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), ()> {
        self.last_move.insert(qpn, step);
        Ok(())
    }
}

/// Mutated MADs (the captures' REQs, RTUs, DREQs among them) into a listening passive side
/// that accepts, disconnects and lets time pass: nothing panics, the table never overflows,
/// and once every timer has run no connection is left half made, and every QP of a connection
/// that ended is in ERR.
#[test]
fn mutated_mads_into_the_passive_side_never_panic_nor_leak() {
    let seeds = seeds();
    let cfg = CmConfig {
        local_ca_guid: 1,
        ack_delay: 15,
        max_responder_resources: 16,
        max_initiator_depth: 16,
        tid_hi: 2,
        comm_id_seed: 0x77,
    };
    let mut p = Cm::<8>::new(cfg);
    p.listen(PortSpace::Tcp.service_id(4420), 4).unwrap();
    p.listen(PortSpace::Tcp.service_id(18515), 4).unwrap();
    // The built SIDR_REQ seed's service.
    p.listen(PortSpace::Udp.service_id(1), 4).unwrap();
    let mut t = Sink::default();
    let mut rng = SplitMix64::seed_from_u64(0x5eed);
    let peer = Peer {
        gid: [0; 16],
        qpn: 1,
    };
    let (mut now, mut next_qpn) = (0u64, 0x100u32);
    let mut ids: Vec<ConnId> = Vec::new();
    let mut ended: Vec<ConnId> = Vec::new();
    let mut qpn_of = std::collections::BTreeMap::new();
    let on_event = |ev: Option<CmEvent>, ids: &mut Vec<ConnId>, ended: &mut Vec<ConnId>| match ev {
        Some(CmEvent::ConnectRequest { id, .. }) => ids.push(id),
        Some(CmEvent::Unreachable { id } | CmEvent::Rejected { id, .. }) => ended.push(id),
        Some(CmEvent::TimewaitExit { id, .. }) => ended.push(id),
        _ => {}
    };
    for round in 0..ROUNDS {
        let seed = &seeds[round % seeds.len()];
        let m = if rng.next_u64() % 4 == 0 {
            seed.clone()
        } else {
            mutate(&mut rng, seed)
        };
        let ev = p.on_mad(now, &peer, &m, &mut t).ok().flatten();
        on_event(ev, &mut ids, &mut ended);
        if let Some(&id) = ids.get((rng.next_u64() as usize) % ids.len().max(1)) {
            match rng.next_u64() % 4 {
                0 if p.accept(now, id, &accept_on(next_qpn), &mut t).is_ok() => {
                    qpn_of.insert(id, next_qpn);
                    next_qpn += 1;
                }
                1 => {
                    let _ = p.disconnect(now, id, &mut t);
                }
                2 => {
                    let _ = p.comm_established(id);
                }
                _ => {}
            }
        }
        now += rng.next_u64() % 2_000_000_000;
        while let Some(ev) = p.poll(now, &mut t) {
            on_event(Some(ev), &mut ids, &mut ended);
        }
    }
    // Let every timer run out: retries, give-ups, TIMEWAIT.
    while let Some(deadline) = p.next_deadline() {
        now = deadline;
        while let Some(ev) = p.poll(now, &mut t) {
            on_event(Some(ev), &mut ids, &mut ended);
        }
    }
    for id in &ids {
        let s = p.state(*id);
        assert!(
            matches!(
                s,
                None | Some(ConnState::ReqRcvd | ConnState::MraReqSent | ConnState::Established)
            ),
            "{id:?} left in {s:?}"
        );
    }
    for id in &ended {
        if let Some(qpn) = qpn_of.get(id) {
            assert_eq!(t.last_move.get(qpn), Some(&QpStep::Err), "{id:?}");
        }
    }
    println!(
        "{} requests, {} accepted, {} ended, {} MADs sent, {:?}",
        ids.len(),
        qpn_of.len(),
        ended.len(),
        t.sent,
        p.counters
    );
    assert!(!ids.is_empty() && !qpn_of.is_empty());
}

/// One side of the two-sided fuzz: its outbox and each QP's last move.
#[derive(Default)]
struct Box2 {
    out: Vec<[u8; MAD_LEN]>,
    last_move: std::collections::BTreeMap<u32, QpStep>,
}

impl CmTransport for Box2 {
    type QpError = ();
    fn send_mad(&mut self, _: &Peer, mad: &[u8; MAD_LEN]) {
        self.out.push(*mad);
    }
    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), ()> {
        self.last_move.insert(qpn, step);
        Ok(())
    }
}

/// What one fuzzed side saw: the connections it made or was asked for, and those that ended.
#[derive(Default)]
struct Seen {
    ids: Vec<ConnId>,
    ended: Vec<ConnId>,
    qpn_of: std::collections::BTreeMap<ConnId, u32>,
}

impl Seen {
    fn on(&mut self, ev: CmEvent) {
        match ev {
            CmEvent::ConnectRequest { id, .. } => self.ids.push(id),
            CmEvent::Unreachable { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::ConnectError { id }
            | CmEvent::TimewaitExit { id, .. } => self.ended.push(id),
            _ => {}
        }
    }

    /// Runs `cm`'s timers due at `now`.
    fn run_timers<const N: usize>(&mut self, now: u64, cm: &mut Cm<N>, t: &mut Box2) {
        while let Some(ev) = cm.poll(now, t) {
            self.on(ev);
        }
    }

    /// Once every timer ran out: nothing half made, every ended connection's QP in ERR.
    fn check<const N: usize>(&self, cm: &Cm<N>, t: &Box2, who: &str) {
        for id in &self.ids {
            let s = cm.state(*id);
            assert!(
                matches!(
                    s,
                    None | Some(
                        ConnState::ReqRcvd | ConnState::MraReqSent | ConnState::Established
                    )
                ),
                "{who}: {id:?} left in {s:?}"
            );
        }
        for id in &self.ended {
            if let Some(qpn) = self.qpn_of.get(id) {
                assert_eq!(t.last_move.get(qpn), Some(&QpStep::Err), "{who}: {id:?}");
            }
        }
    }
}

/// An active and a passive side talking through a wire that loses, mutates, duplicates and
/// replays their MADs, while both applications connect, accept, reject, MRA, disconnect and
/// destroy, and time jumps: nothing panics, and once every timer has run neither side has a connection
/// half made or an ended connection's QP out of ERR.
#[test]
fn a_hostile_wire_between_both_roles_never_panics_nor_leaks() {
    let cfg = |guid: u64| CmConfig {
        local_ca_guid: guid,
        ack_delay: 15,
        max_responder_resources: 16,
        max_initiator_depth: 16,
        tid_hi: guid as u32,
        comm_id_seed: (guid as u32) << 16,
    };
    let (mut a, mut b) = (Cm::<8>::new(cfg(1)), Cm::<8>::new(cfg(2)));
    let service = PortSpace::Tcp.service_id(4420);
    b.listen(service, 4).unwrap();
    b.listen(PortSpace::Udp.service_id(4420), 4).unwrap();
    let (mut ta, mut tb) = (Box2::default(), Box2::default());
    let (mut sa, mut sb) = (Seen::default(), Seen::default());
    let mut rng = SplitMix64::seed_from_u64(0x00ac_717e);
    let peer = Peer {
        gid: [0; 16],
        qpn: 1,
    };
    let (mut now, mut next_qpn) = (0u64, 0x100u32);
    let mut replay: Vec<Vec<u8>> = Vec::new();
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    for _ in 0..ROUNDS / 4 {
        let r = rng.next_u64();
        // The applications.
        // A recent connection of a side.
        let recent = |ids: &[ConnId]| {
            let back = (r >> 8) as usize % ids.len().clamp(1, 4);
            ids.len().checked_sub(1 + back).map(|i| ids[i])
        };
        match r % 32 {
            0 => {
                let c = Connect {
                    service_id: if r & 0x100 == 0 { service } else { 7 },
                    qpn: next_qpn,
                    starting_psn: (r >> 8) as u32 & 0xff_ffff,
                    local_gid: [1; 16],
                    remote_gid: [2; 16],
                    flow_label: (r >> 32) as u32 & 0xf_ffff,
                    hop_limit: 64,
                    traffic_class: 0,
                    path_mtu: 3,
                    pkey: 0xffff,
                    responder_resources: 4,
                    initiator_depth: 4,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    local_ack_timeout: 19,
                    remote_cm_response_timeout: 20,
                    local_cm_response_timeout: 20,
                    max_cm_retries: (r >> 12) as u8 & 3,
                    srq: false,
                    flow_control: false,
                    private_data: &[],
                };
                if let Ok(id) = a.connect(now, &peer, &c, &mut ta) {
                    sa.ids.push(id);
                    sa.qpn_of.insert(id, next_qpn);
                    next_qpn += 1;
                }
            }
            1 if r & 0x300 == 0 => {
                let _ = a.sidr_request(now, &peer, PortSpace::Udp.service_id(4420), &[], &mut ta);
            }
            2..=9 => {
                if let Some(id) = recent(&sb.ids) {
                    if b.accept(now, id, &accept_on(next_qpn), &mut tb).is_ok() {
                        sb.qpn_of.insert(id, next_qpn);
                        next_qpn += 1;
                    }
                }
            }
            10 | 11 => {
                if let Some(id) = recent(&sb.ids) {
                    let _ = match r & 0x300 {
                        0 => b.reject(id, &[1], &mut tb),
                        0x100 => b.mra(id, 20, &mut tb),
                        _ => b.disconnect(now, id, &mut tb),
                    };
                }
            }
            12 => {
                if let Some(id) = recent(&sa.ids) {
                    let _ = a.disconnect(now, id, &mut ta);
                }
            }
            // Either application destroys a connection; the QP's last move must then be ERR.
            13 if r & 0x300 == 0 => {
                if let Some(id) = recent(&sa.ids) {
                    if a.destroy(now, id, &mut ta).is_ok() {
                        sa.ended.push(id);
                    }
                }
            }
            14 if r & 0x300 == 0 => {
                if let Some(id) = recent(&sb.ids) {
                    if b.destroy(now, id, &mut tb).is_ok() {
                        sb.ended.push(id);
                    }
                }
            }
            _ => {}
        }
        // The wire: each MAD lost, mutated, delivered, or delivered twice; now and then an old
        // one again.
        for (from_a, out) in [
            (true, std::mem::take(&mut ta.out)),
            (false, std::mem::take(&mut tb.out)),
        ] {
            for m in out {
                let fate = rng.next_u64() % 8;
                let copies: Vec<Vec<u8>> = match fate {
                    0 => vec![],
                    1 | 2 => vec![mutate(&mut rng, &m)],
                    3 => vec![m.to_vec(), m.to_vec()],
                    _ => vec![m.to_vec()],
                };
                if rng.next_u64() % 16 == 0 {
                    replay.push(m.to_vec());
                }
                for c in copies {
                    if let Ok(mad) = CmMad::decode(&c) {
                        *kinds.entry(mad.msg.name()).or_default() += 1;
                    }
                    let (cm, t, seen) = if from_a {
                        (&mut b, &mut tb, &mut sb)
                    } else {
                        (&mut a, &mut ta, &mut sa)
                    };
                    if let Ok(Some(ev)) = cm.on_mad(now, &peer, &c, t) {
                        seen.on(ev);
                    }
                }
            }
        }
        if !replay.is_empty() && rng.next_u64() % 8 == 0 {
            let old = &replay[(rng.next_u64() as usize) % replay.len()];
            if let Ok(Some(ev)) = a.on_mad(now, &peer, old, &mut ta) {
                sa.on(ev);
            }
            if let Ok(Some(ev)) = b.on_mad(now, &peer, old, &mut tb) {
                sb.on(ev);
            }
        }
        now += rng.next_u64() % 3_000_000_000;
        sa.run_timers(now, &mut a, &mut ta);
        sb.run_timers(now, &mut b, &mut tb);
    }
    // The wire goes quiet; every timer runs out.
    ta.out.clear();
    tb.out.clear();
    while let Some(d) = [a.next_deadline(), b.next_deadline()]
        .into_iter()
        .flatten()
        .min()
    {
        now = d;
        sa.run_timers(now, &mut a, &mut ta);
        sb.run_timers(now, &mut b, &mut tb);
        ta.out.clear();
        tb.out.clear();
    }
    sa.check(&a, &ta, "active");
    sb.check(&b, &tb, "passive");
    let established = sa
        .ids
        .iter()
        .filter(|id| a.state(**id) == Some(ConnState::Established))
        .count();
    println!(
        "active: {} connects, {} ended, {established} established; passive: {} requests; \
         delivered {kinds:?}; {:?} / {:?}",
        sa.ids.len(),
        sa.ended.len(),
        sb.ids.len(),
        a.counters,
        b.counters
    );
    // The wire lets enough through for every message kind to reach the other side.
    for k in [
        "REQ", "REP", "RTU", "REJ", "MRA", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP",
    ] {
        assert!(kinds.get(k).is_some_and(|n| *n > 0), "no {k}: {kinds:?}");
    }
    assert!(established > 0 && !sa.ended.is_empty());
}
