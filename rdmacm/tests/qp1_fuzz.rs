//! Hostile datagrams into QP 1: node B runs the driver's GSI QP and `rdmacm`'s passive side
//! (listening, an application that accepts, rejects, leaves pending, disconnects and
//! destroys), node A sends B's QP 1 mutated CM MADs from a UD QP of its own, over the frame
//! wire between the two emulated HCAs. Seeds: the MADs of the shared Linux captures
//! (`data/captured_mads.hex`), the same REQs re-addressed to these two nodes, messages built
//! here, and messages that name what B's answers told the attacker (its communication IDs,
//! its QPN), so that the storm reaches connections in every state.
//!
//! Nothing may panic or hang (a watchdog aborts the test when no step began for a minute);
//! afterwards every id and every QP the storm made is gone once
//! the application destroyed its ids and the CM's timers ran out (the device has the QPs it
//! had before), QP 1 is still in RTS, and a good connection from A's `RdmaCm` still goes
//! through to a SEND. REQs beyond a listener's backlog are rejected (REJ Consumer Defined)
//! and counted; datagrams of every length, bad headers and unknown communication IDs are
//! dropped and counted: those longer than QP 1's path MTU by B's device (the model's
//! `rx_drop_ud_length`), before the GSI service sees them, the rest by the GSI service or
//! the CM.
//!
//! `cargo test -p rdmacm --test qp1_fuzz` runs a short storm; `QP1_FUZZ_ROUNDS` (bursts of
//! up to 8 datagrams, default 150) and `QP1_FUZZ_SEED` (default 0x9b1) make longer or other
//! ones: `QP1_FUZZ_ROUNDS=5000 QP1_FUZZ_SEED=7 cargo test -p rdmacm --test qp1_fuzz`.

/// The cm crate's reader of the shared captures (to check the hex seeds against them).
#[path = "../../cm/tests/common/mod.rs"]
mod cm_captures;
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sim::TestHal;
use common::*;
use mlx5::mr::Access;
use mlx5::{
    AddressHandle, AhAttr, CompletionQueue, MemoryRegion, QpCaps, QueuePair, RecvWr, SendData,
    SendFlags, SendOp, SendWr, UdDest, WcStatus, WorkCompletion, GRH_BYTES,
};
use rdma_cm::mad::{MAD_HDR_LEN, MAD_LEN, QP1_QKEY};
use rdma_cm::msg::{
    msg_response, rej_reason, Drep, Dreq, Mra, Rej, Rtu, SidrReq, DREQ_PRIVATE_DATA_LEN,
    MRA_PRIVATE_DATA_LEN, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN,
    SIDR_REQ_PRIVATE_DATA_LEN,
};
use rdma_cm::rdma_cm::{CmaAddr, CmaHdr, CMA_HDR_LEN, UDP_QKEY};
use rdma_cm::{CmMad, CmMsg};
use rdmacm::{CmId, ConnParam, Event, PortSpace};

/// The ports of the captures' REQs (perftest's 18515, NVMe-oF's 4420) and rping's, where the
/// good connection goes after the storm.
const PORTS: [u16; 3] = [18515, 4420, 7174];
const BACKLOG: usize = 4;
/// How long one burst may take to reach B's CM (wall time) before the next goes.
const DELIVERY: Duration = Duration::from_millis(200);

type Qp = QueuePair<TestHal>;

/// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", 2014):
/// the storm is the seed's.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        }
        Err(_) => default,
    }
}

/// The captured MADs: (what the file says of each, its bytes).
fn captured() -> Vec<(String, [u8; MAD_LEN])> {
    let text = include_str!("data/captured_mads.hex");
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        if let Some(c) = line.strip_prefix("# ") {
            name = c.to_string();
            continue;
        }
        let bytes: Vec<u8> = (0..line.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&line[i..i + 2], 16).expect("hex"))
            .collect();
        out.push((name.clone(), bytes.try_into().expect("256 bytes")));
    }
    out
}

fn gid(ip: [u8; 4]) -> [u8; 16] {
    mlx5::hca::ipv4_mapped_gid(ip)
}

/// A captured REQ from A to B: its path's GIDs and its rdma_cm header's addresses ours, so
/// that B can accept it.
fn readdressed(m: &[u8; MAD_LEN]) -> Option<[u8; MAD_LEN]> {
    let mut mad = CmMad::decode(m).ok()?;
    let CmMsg::Req(r) = &mut mad.msg else {
        return None;
    };
    r.primary.local_gid = gid(IP_A);
    r.primary.remote_gid = gid(IP_B);
    let mut h = CmaHdr::decode(&r.private_data).ok()?;
    h.src = CmaAddr::V4(IP_A);
    h.dst = CmaAddr::V4(IP_B);
    let mut b = [0u8; CMA_HDR_LEN];
    h.encode(&mut b);
    r.private_data[..CMA_HDR_LEN].copy_from_slice(&b);
    mad.to_bytes().ok()
}

/// The kinds no capture holds: a SIDR_REQ for B's UD port, an MRA, a REJ.
fn built() -> Vec<[u8; MAD_LEN]> {
    let mut pd = [0u8; SIDR_REQ_PRIVATE_DATA_LEN];
    let mut h = [0u8; CMA_HDR_LEN];
    CmaHdr {
        src_port: 40000,
        src: CmaAddr::V4(IP_A),
        dst: CmaAddr::V4(IP_B),
    }
    .encode(&mut h);
    pd[..CMA_HDR_LEN].copy_from_slice(&h);
    let msgs = [
        CmMsg::SidrReq(SidrReq {
            request_id: 0x5151,
            pkey: 0xffff,
            service_id: PortSpace::Udp.service_id(PORTS[2]),
            private_data: pd,
        }),
        CmMsg::Mra(Mra {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_mraed: msg_response::REP,
            service_timeout: 20,
            private_data: [0; MRA_PRIVATE_DATA_LEN],
        }),
        CmMsg::Rej(Rej {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_rejected: msg_response::REP,
            reject_info_length: 0,
            reason: rej_reason::CONSUMER_DEFINED,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_DATA_LEN],
        }),
    ];
    msgs.iter()
        .map(|m| CmMad::new(0x77, *m).to_bytes().unwrap())
        .collect()
}

/// The attacker: a UD QP on A with QP 1's Q_Key, an address handle to B, send and receive
/// buffers; what B answered it.
struct Attacker {
    qp: Qp,
    cq: CompletionQueue<TestHal>,
    mr: MemoryRegion<TestHal>,
    ah: AddressHandle,
    sends_out: usize,
    /// B's answers, by kind; REJs also by reason.
    answers: BTreeMap<String, usize>,
    rejs: BTreeMap<u16, usize>,
    /// MADs that name what the answers told: B's IDs, its QPN, the exchange.
    learned: Vec<[u8; MAD_LEN]>,
}

const SEND_SLOTS: usize = 16;
const RECV_SLOTS: usize = 32;
/// A send slot holds the largest datagram (path MTU 4096), a receive slot the GRH area and a MAD.
const SLOT: usize = 4096 + 64;
const SEND_TAG: u64 = 1 << 40;
/// QP 1's path MTU: the driver gives the GSI QP 256 (drivers/mlx5/src/qp/gsi.rs, as Linux
/// ib/qp.c `__mlx5_ib_modify_qp` for `is_sqp`); a longer datagram is dropped by the receiving
/// device (sim/mlx5/src/datapath/ud/recv.rs, rxe_resp.c `check_length`).
const GSI_PATH_MTU: usize = 256;

impl Attacker {
    fn new(a: &Node, mac_b: [u8; 6]) -> Attacker {
        let cq = a.ctx.create_cq(128).expect("cq");
        // A send queue of four times the buffers: a ring position is written again only
        // long after its WQE completed (the threaded model checks a BlueFlame copy against
        // the ring when it gets to it, and a position rewritten by then fails that check).
        let caps = QpCaps {
            max_send_wr: 4 * SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = a.pd.create_ud_qp(&cq, &cq, &caps, QP1_QKEY).expect("ud qp");
        let mr =
            a.pd.alloc_mr((SEND_SLOTS + RECV_SLOTS) * SLOT, Access::LOCAL_WRITE)
                .expect("mr");
        let sgid_index = a.ctx.add_ipv4_gid(IP_A).expect("gid") as u8;
        let ah =
            a.pd.create_ah(&AhAttr {
                dgid: gid(IP_B),
                dmac: mac_b,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            })
            .expect("ah");
        let mut at = Attacker {
            qp,
            cq,
            mr,
            ah,
            sends_out: 0,
            answers: BTreeMap::new(),
            rejs: BTreeMap::new(),
            learned: Vec::new(),
        };
        for slot in 0..RECV_SLOTS {
            at.post_recv(slot);
        }
        at
    }

    fn post_recv(&mut self, slot: usize) {
        let sge = [self.mr.sge(
            ((SEND_SLOTS + slot) * SLOT) as u64,
            (GRH_BYTES + MAD_LEN) as u32,
        )];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: slot as u64,
                sges: &sge,
            }])
            .expect("post_recv");
    }

    /// Sends `bytes` (any length up to a slot) to B's QP 1 from send slot `slot`.
    fn send(&mut self, slot: usize, bytes: &[u8]) {
        let off = (slot * SLOT) as u64;
        self.mr.write(off, bytes).expect("write");
        let sge = [self.mr.sge(off, bytes.len() as u32)];
        let wr = SendWr {
            wr_id: SEND_TAG | slot as u64,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&sge),
            flags: SendFlags::SIGNALED,
        };
        let dest = UdDest {
            ah: &self.ah,
            remote_qpn: 1,
            remote_qkey: QP1_QKEY,
        };
        self.qp.post_ud_send(&wr, &dest).expect("post_ud_send");
        self.sends_out += 1;
    }

    /// Takes the completions there are: sends done, B's answers read and learned from.
    fn harvest(&mut self) {
        let mut wc = [WorkCompletion::default()];
        while self.cq.poll(&mut wc).expect("poll") == 1 {
            let w = wc[0];
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            if w.wr_id & SEND_TAG != 0 {
                self.sends_out -= 1;
                continue;
            }
            let slot = w.wr_id as usize;
            let mut mad = [0u8; MAD_LEN];
            let off = ((SEND_SLOTS + slot) * SLOT + GRH_BYTES) as u64;
            self.mr.read(off, &mut mad).expect("read");
            self.post_recv(slot);
            self.learn(&mad);
        }
    }

    /// What an answer of B's lets the attacker say next, with B's IDs right.
    fn learn(&mut self, m: &[u8; MAD_LEN]) {
        let mad = CmMad::decode(m).expect("B sends well-formed CM MADs");
        *self.answers.entry(mad.msg.name().into()).or_default() += 1;
        let tid = mad.hdr.tid;
        let say = |msg| CmMad::new(tid, msg).to_bytes().unwrap();
        let mut next = Vec::new();
        match mad.msg {
            CmMsg::Rej(r) => *self.rejs.entry(r.reason).or_default() += 1,
            CmMsg::Rep(r) => {
                let (ours, theirs) = (r.remote_comm_id, r.local_comm_id);
                next.push(say(CmMsg::Rtu(Rtu {
                    local_comm_id: ours,
                    remote_comm_id: theirs,
                    private_data: [0; RTU_PRIVATE_DATA_LEN],
                })));
                next.push(say(CmMsg::Dreq(Dreq {
                    local_comm_id: ours,
                    remote_comm_id: theirs,
                    remote_qpn_eecn: r.local_qpn,
                    private_data: [0; DREQ_PRIVATE_DATA_LEN],
                })));
                next.push(say(CmMsg::Mra(Mra {
                    local_comm_id: ours,
                    remote_comm_id: theirs,
                    message_mraed: msg_response::REP,
                    service_timeout: 18,
                    private_data: [0; MRA_PRIVATE_DATA_LEN],
                })));
                next.push(say(CmMsg::Rej(Rej {
                    local_comm_id: ours,
                    remote_comm_id: theirs,
                    message_rejected: msg_response::REP,
                    reject_info_length: 0,
                    reason: rej_reason::CONSUMER_DEFINED,
                    ari: [0; REJ_ARI_LEN],
                    private_data: [0; REJ_PRIVATE_DATA_LEN],
                })));
            }
            CmMsg::Dreq(d) => next.push(say(CmMsg::Drep(Drep {
                local_comm_id: d.remote_comm_id,
                remote_comm_id: d.local_comm_id,
                private_data: [0; RTU_PRIVATE_DATA_LEN],
            }))),
            _ => {}
        }
        for m in next {
            if self.learned.len() >= 64 {
                self.learned.remove(0);
            }
            self.learned.push(m);
        }
    }
}

/// One to three mutations of `seed`, or none (a quarter of the time).
fn mutate(rng: &mut Rng, seed: &[u8; MAD_LEN]) -> Vec<u8> {
    let mut m = seed.to_vec();
    if rng.one_in(4) {
        return m;
    }
    for _ in 0..1 + rng.below(3) {
        let n = m.len();
        match rng.below(10) {
            0 if n > 0 => {
                let i = rng.below(n);
                m[i] ^= 1 << rng.below(8);
            }
            1 if n > 0 => {
                let i = rng.below(n);
                m[i] = rng.next() as u8;
            }
            // Base version, class, class version or method: a neighbour of the right value
            // or anything.
            2 if n > 3 => {
                let i = rng.below(4);
                m[i] = match rng.below(3) {
                    0 => m[i].wrapping_add(1),
                    1 => m[i].wrapping_sub(1),
                    _ => rng.next() as u8,
                };
            }
            // Any CM attribute or a neighbour of the range; now and then anything.
            3 if n >= 18 => {
                let a = if rng.one_in(4) {
                    rng.next() as u16
                } else {
                    0x0f + rng.below(0x0d) as u16
                };
                m[16..18].copy_from_slice(&a.to_be_bytes());
            }
            // A fresh sender's communication ID: a new REQ each time (a storm).
            4 if n >= MAD_HDR_LEN + 4 => {
                let id = rng.next() as u32;
                m[MAD_HDR_LEN..MAD_HDR_LEN + 4].copy_from_slice(&id.to_be_bytes());
            }
            // The receiver's ID of another message: B's IDs where the attacker learned them.
            5 if n >= MAD_HDR_LEN + 8 => {
                let id = rng.next() as u32 & 0xff;
                m[MAD_HDR_LEN + 4..MAD_HDR_LEN + 8].copy_from_slice(&id.to_be_bytes());
            }
            6 => m.truncate(rng.below(MAD_LEN)),
            // Longer than a MAD: up to the receive buffer's 296 bytes and beyond (all longer
            // than QP 1's path MTU: B's device drops them).
            7 => m.resize(MAD_LEN + 1 + rng.below(64), rng.next() as u8),
            8 if n >= 16 => m[8..16].copy_from_slice(&rng.next().to_be_bytes()),
            9 if n > MAD_HDR_LEN => {
                let i = MAD_HDR_LEN + rng.below(n - MAD_HDR_LEN);
                m[i] = 0xff;
            }
            _ => {}
        }
    }
    m
}

/// What B's application does with its ids.
#[derive(Default)]
struct App {
    /// Requests not answered yet.
    pending: Vec<CmId>,
    /// Every id it has (until destroyed).
    live: Vec<CmId>,
    events: BTreeMap<&'static str, usize>,
    refused_calls: usize,
}

impl App {
    fn destroy(&mut self, b: &mut Node, now: u64, id: CmId) {
        self.pending.retain(|p| *p != id);
        if self.live.contains(&id) {
            b.cm.destroy_id(now, id, &mut b.stack)
                .expect("destroy_id of a live id");
            self.live.retain(|l| *l != id);
        }
    }

    /// Accepts (with a QP), rejects or destroys request `id`.
    fn answer(&mut self, b: &mut Node, now: u64, id: CmId, rng: &mut Rng) {
        self.pending.retain(|p| *p != id);
        let r = match rng.below(3) {
            0 => {
                b.create_qp(id);
                b.cm.accept(now, id, &ConnParam::default(), &mut b.stack)
            }
            1 => b.cm.reject(now, id, b"no", &mut b.stack),
            _ => return self.destroy(b, now, id),
        };
        if r.is_err() {
            self.refused_calls += 1;
            self.destroy(b, now, id);
        }
    }

    fn on(&mut self, b: &mut Node, now: u64, ev: Event, ud_qpn: u32, rng: &mut Rng) {
        let name = match &ev {
            Event::ConnectRequest { .. } => "ConnectRequest",
            Event::Established { .. } => "Established",
            Event::Rejected { .. } => "Rejected",
            Event::Unreachable { .. } => "Unreachable",
            Event::ConnectError { .. } => "ConnectError",
            Event::AddrError { .. } => "AddrError",
            Event::Disconnected { .. } => "Disconnected",
            Event::TimewaitExit { .. } => "TimewaitExit",
            Event::UdRequest { .. } => "UdRequest",
            Event::UdResolved { .. } => "UdResolved",
        };
        *self.events.entry(name).or_default() += 1;
        match ev {
            Event::ConnectRequest { id, .. } => {
                self.live.push(id);
                if rng.one_in(2) {
                    self.pending.push(id);
                } else {
                    self.answer(b, now, id, rng);
                }
            }
            Event::Established { id, .. } => {
                if rng.one_in(3) && b.cm.disconnect(now, id, &mut b.stack).is_err() {
                    self.refused_calls += 1;
                }
            }
            Event::UdRequest { id, .. } => {
                self.live.push(id);
                let r = if rng.one_in(2) {
                    b.cm.ud_accept(now, id, ud_qpn, UDP_QKEY, b"ud", &mut b.stack)
                } else {
                    b.cm.ud_reject(now, id, &mut b.stack)
                };
                if r.is_err() {
                    self.refused_calls += 1;
                }
                self.destroy(b, now, id);
            }
            Event::Disconnected { id } if rng.one_in(2) => self.destroy(b, now, id),
            Event::Disconnected { .. } => {}
            Event::Rejected { id, .. }
            | Event::Unreachable { id }
            | Event::ConnectError { id }
            | Event::AddrError { id }
            | Event::TimewaitExit { id } => self.destroy(b, now, id),
            Event::UdResolved { .. } => panic!("B resolves nothing"),
        }
    }

    /// Steps B (and A's IP stack, which answers B's ARP) once and handles B's events; now
    /// and then answers a pending request.
    fn step(&mut self, a: &mut Node, b: &mut Node, clock: &CmClock, ud_qpn: u32, rng: &mut Rng) {
        a.stack.poll();
        b.step(clock);
        for ev in std::mem::take(&mut b.events) {
            self.on(b, clock.now(), ev, ud_qpn, rng);
        }
        if !self.pending.is_empty() && rng.one_in(6) {
            let id = self.pending[rng.below(self.pending.len())];
            self.answer(b, clock.now(), id, rng);
        }
    }
}

/// The QPs of B's device, and the state of its QP 1.
fn device_qps(b: &Node) -> (usize, Option<u8>) {
    b.sim.with_hca(|h| {
        let qps = h.qps();
        (qps.len(), qps.gsi().and_then(|q| qps.state(q)))
    })
}

/// Datagrams B is done with: taken off QP 1 by its GSI service (well-formed MADs or not), or
/// dropped by its device as longer than QP 1's path MTU.
fn b_took(b: &Node) -> u64 {
    let g = b.cm.gsi_counters();
    // B's device drops only datagrams to QP 1: the attacker reaches no other datagram QP.
    g.received + g.bad_receives + b.ud_length_drops()
}

/// How long a step of the storm may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(60);

/// Turns a hang into a failure: a thread that aborts the test process (with a message) when
/// no step of the storm began for `limit`, which no assertion could do for a `poll` that
/// never returns.
struct Watchdog {
    beats: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(limit: Duration) -> Watchdog {
        let (beats, done) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (b, d) = (beats.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut last, mut since) = (0, Instant::now());
            while !d.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let now = b.load(Ordering::Relaxed);
                if now != last {
                    (last, since) = (now, Instant::now());
                } else if since.elapsed() > limit {
                    eprintln!("qp1_fuzz: no step for {limit:?}, a hang: aborting");
                    std::process::abort();
                }
            }
        });
        Watchdog { beats, done }
    }

    fn beat(&self) {
        self.beats.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// The two nodes, B listening on every port (and a UD port for SIDR) with a UD QP for its
/// SIDR answers and its application, the attacker on A; B's device QPs before the storm.
struct Storm {
    watchdog: Watchdog,
    a: Node,
    b: Node,
    clock: CmClock,
    at: Attacker,
    ud: Qp,
    app: App,
    rng: Rng,
    qps_before: usize,
}

impl Storm {
    fn new(seed: u64) -> Storm {
        let (a, mut b, clock) = nodes();
        for p in PORTS {
            b.cm.listen(PortSpace::Tcp, p, BACKLOG).unwrap();
        }
        b.cm.listen(PortSpace::Udp, PORTS[2], BACKLOG).unwrap();
        let ud =
            b.pd.create_ud_qp(&b.cq, &b.cq, &QpCaps::default(), UDP_QKEY)
                .expect("ud qp");
        let at = Attacker::new(&a, b.stack.mac());
        let (qps_before, qp1) = device_qps(&b);
        assert_eq!(qp1, Some(mlx5_prm::qp::state::RTS));
        Storm {
            watchdog: Watchdog::start(HANG),
            a,
            b,
            clock,
            at,
            ud,
            app: App::default(),
            rng: Rng(seed),
            qps_before,
        }
    }

    /// The attacker takes B's answers; B and its application run once.
    fn step(&mut self) {
        self.watchdog.beat();
        self.at.harvest();
        let ud_qpn = self.ud.qpn();
        self.app
            .step(&mut self.a, &mut self.b, &self.clock, ud_qpn, &mut self.rng);
    }

    /// Sends `datagrams` to B's QP 1, then steps until B took them all or `DELIVERY` passed
    /// (a slow machine). Returns how many B had not taken yet.
    fn burst(&mut self, datagrams: &[Vec<u8>]) -> u64 {
        let want = b_took(&self.b) + datagrams.len() as u64;
        for (slot, d) in datagrams.iter().enumerate() {
            self.at.send(slot, d);
        }
        let t0 = Instant::now();
        loop {
            self.step();
            let late = want.saturating_sub(b_took(&self.b));
            if self.at.sends_out == 0 && (late == 0 || t0.elapsed() > DELIVERY) {
                return late;
            }
            std::thread::yield_now();
        }
    }

    /// Runs every timer out: the CM's time jumps ahead, doubling, from 1 s to about a year
    /// (a mutated REQ may ask for 2^31 × 4.096 µs per try, 15 times), with B stepping at
    /// each jump and its application destroying what ends and every request left.
    fn run_out_timers(&mut self) {
        for k in 0..25 {
            for _ in 0..2 {
                self.clock.advance(1_000_000_000u64 << k);
                for _ in 0..4 {
                    self.step();
                }
                for id in std::mem::take(&mut self.app.pending) {
                    self.app.destroy(&mut self.b, self.clock.now(), id);
                }
            }
        }
    }

    /// After the storm: once the application destroyed every id and every timer ran out,
    /// nothing is left (no id, no QP in the CM, the device's QPs as before), QP 1 is still in
    /// RTS, and a good connection goes through.
    fn nothing_leaked_and_a_good_connection_works(&mut self) {
        for id in self.app.live.clone() {
            self.app.destroy(&mut self.b, self.clock.now(), id);
        }
        self.run_out_timers();
        assert!(self.app.live.is_empty(), "ids left: {:?}", self.app.live);
        assert_eq!(self.b.cm.counts(), (0, 0), "ids or QPs left in B's CM");
        let (qps, qp1) = device_qps(&self.b);
        assert_eq!(qps, self.qps_before, "QPs leaked on B's device");
        assert_eq!(qp1, Some(mlx5_prm::qp::state::RTS), "QP 1 left RTS");
        good_connection(&mut self.a, &mut self.b, &self.clock, PORTS[2]);
    }
}

/// A's `RdmaCm` connects to B's `port`; B accepts; a SEND crosses; A disconnects.
fn good_connection(a: &mut Node, b: &mut Node, clock: &CmClock, port: u16) {
    let ia = a
        .connect(clock, IP_B, port, &ConnParam::default())
        .expect("connect");
    let mut ib = None;
    run(a, b, clock, |_, b| {
        ib = ib.or_else(|| {
            b.take(|e| match e {
                Event::ConnectRequest { id, .. } => Some(*id),
                _ => None,
            })
        });
        ib.is_some()
    });
    let ib = ib.unwrap();
    b.create_qp(ib);
    b.post_recv(ib, 0);
    b.cm.accept(clock.now(), ib, &ConnParam::default(), &mut b.stack)
        .expect("accept");
    let (mut ea, mut eb) = (false, false);
    run(a, b, clock, |a, b| {
        ea |= a
            .take(|e| matches!(e, Event::Established { id, .. } if *id == ia).then_some(()))
            .is_some();
        eb |= b
            .take(|e| matches!(e, Event::Established { id, .. } if *id == ib).then_some(()))
            .is_some();
        ea && eb
    });
    a.send(ia, b"after the storm");
    one_wc(a, b, clock, true);
    let got = one_wc(a, b, clock, false);
    assert_eq!(got.byte_len, 15);
    assert_eq!(b.slot(0, 15), b"after the storm");
    a.cm.disconnect(clock.now(), ia, &mut a.stack)
        .expect("disconnect");
    run(a, b, clock, |_, b| {
        b.take(|e| matches!(e, Event::Disconnected { id } if *id == ib).then_some(()))
            .is_some()
    });
}

#[test]
fn mutated_mads_into_qp1_never_break_the_passive_side() {
    let rounds = env_or("QP1_FUZZ_ROUNDS", 150) as usize;
    let seed = env_or("QP1_FUZZ_SEED", 0x9b1);
    let mut s = Storm::new(seed);
    // The attacker's choices on a stream of their own, apart from the application's (whose
    // events come as the device threads interleave).
    let mut rng = Rng(!seed);
    let mut seeds: Vec<[u8; MAD_LEN]> = captured().into_iter().map(|(_, m)| m).collect();
    let readdressed: Vec<_> = seeds.iter().filter_map(readdressed).collect();
    assert_eq!(readdressed.len(), 3, "one REQ per capture");
    seeds.extend(readdressed);
    seeds.extend(built());
    let (mut sent, mut late) = (0u64, 0u64);
    for _ in 0..rounds {
        let n = 1 + rng.below(8);
        let datagrams: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                // As many draws whatever was learned: the seed picks the same stream.
                let (from_learned, pick) = (rng.one_in(3), rng.next() as usize);
                let learned = &s.at.learned;
                let seed = if from_learned && !learned.is_empty() {
                    learned[pick % learned.len()]
                } else {
                    seeds[pick % seeds.len()]
                };
                mutate(&mut rng, &seed)
            })
            .collect();
        sent += n as u64;
        late += s.burst(&datagrams);
        // Time passes: retries, TIMEWAIT, address resolution run out now and then.
        if rng.one_in(4) {
            s.clock.advance(rng.next() % 5_000_000_000);
        }
    }
    // Stragglers of a slow burst arrive.
    let t0 = Instant::now();
    while b_took(&s.b) < sent && t0.elapsed().as_secs() < 20 {
        s.step();
    }
    let (g, c) = (s.b.cm.gsi_counters(), s.b.cm.cm_counters());
    let long = s.b.ud_length_drops();
    println!(
        "seed {seed:#x}, {rounds} bursts: {sent} datagrams sent, {late} late; B's device \
         dropped {long} longer than QP 1's path MTU; B's GSI {g:?}; B's CM {c:?}; B's \
         application {:?}, {} calls refused; B answered {:?}, REJ reasons {:?}",
        s.app.events, s.app.refused_calls, s.at.answers, s.at.rejs
    );
    // Every datagram was dropped and counted by B's device (longer than QP 1's path MTU) or
    // reached B's GSI service: taken to its CM, or dropped and counted there.
    assert_eq!(g.received + g.bad_receives + long, sent);
    assert!(
        c.dropped > 0 && g.bad_receives > 0 && long > 0,
        "{g:?} {c:?} {long}"
    );
    assert!(s.app.events.get("ConnectRequest").is_some_and(|n| *n > 0));
    s.nothing_leaked_and_a_good_connection_works();
}

/// Datagrams to QP 1 of every length but a MAD's (empty, shorter than the header, one byte
/// short or long, the receive buffer's 296 bytes and past it, a whole 4096-byte MTU) and a
/// good MAD's header and attribute each made wrong, and the captures' REP, RTU, DREQ, DREP
/// and REJ, whose communication IDs B never gave out: all dropped and counted (the lengths
/// above QP 1's 256-byte path MTU by B's device, the shorter ones by the GSI service, the
/// rest by the CM), none answered but the DREQ (with a DREP,
/// as cm.c `cm_dreq_handler` answers a DREQ for no connection), QP 1 still in RTS, and a good
/// connection goes through after them.
#[test]
fn bad_lengths_and_headers_into_qp1_are_dropped_and_counted() {
    let mut s = Storm::new(5);
    let (_, perftest_req) = &captured()[0];
    let req = readdressed(perftest_req).unwrap();
    let lengths = [0usize, 1, 23, 24, 64, 200, 255, 257, 296, 297, 1024, 4096];
    // Base version, class, class version, method, attribute ID.
    let headers: [(usize, &[u8]); 8] = [
        (0, &[2]),
        (1, &[0x01]),
        (1, &[0x81]),
        (2, &[1]),
        (3, &[0x01]),
        (3, &[0x83]),
        (16, &[0x00, 0x01]),
        (16, &[0x00, 0x19]),
    ];
    let mut datagrams: Vec<Vec<u8>> = lengths
        .iter()
        .map(|&n| {
            let mut m = req.to_vec();
            m.resize(n, 0xa5);
            m
        })
        .collect();
    for (at_byte, v) in headers {
        let mut m = req.to_vec();
        m[at_byte..at_byte + v.len()].copy_from_slice(v);
        datagrams.push(m);
    }
    let unknown: Vec<_> = captured()
        .into_iter()
        .filter(|(what, _)| {
            ["REP", "RTU", "DREQ", "DREP", "REJ"]
                .iter()
                .any(|k| what.contains(&format!(": {k} ")))
        })
        .map(|(_, m)| m.to_vec())
        .collect();
    assert_eq!(unknown.len(), 9, "2 REPs, RTUs, DREQs and DREPs, 1 REJ");
    datagrams.extend(unknown.iter().cloned());
    for chunk in datagrams.chunks(SEND_SLOTS) {
        s.burst(chunk);
    }
    let t0 = Instant::now();
    while b_took(&s.b) < datagrams.len() as u64 {
        s.step();
        assert!(t0.elapsed().as_secs() < 20, "{:?}", s.b.cm.gsi_counters());
    }
    let (g, c) = (s.b.cm.gsi_counters(), s.b.cm.cm_counters());
    let cm_took = (headers.len() + unknown.len()) as u64;
    let long = lengths.iter().filter(|&&n| n > GSI_PATH_MTU).count() as u64;
    assert_eq!(long, 5, "257, 296, 297, 1024 and 4096 bytes");
    assert_eq!(
        (g.received, g.bad_receives, s.b.ud_length_drops()),
        (cm_took, lengths.len() as u64 - long, long)
    );
    assert_eq!(c.dropped, cm_took);
    assert_eq!(c.rej_sent, 0);
    // The answers (two DREPs, once B's ARP found A) reach the attacker.
    let t0 = Instant::now();
    while s.at.answers.values().sum::<usize>() < 2 {
        s.step();
        assert!(t0.elapsed().as_secs() < 20, "{:?}", s.at.answers);
    }
    assert_eq!(s.b.cm.gsi_counters().sent, 2);
    assert_eq!(s.at.answers, BTreeMap::from([("DREP".to_string(), 2)]));
    assert!(s.app.events.is_empty(), "{:?}", s.app.events);
    s.nothing_leaked_and_a_good_connection_works();
}

/// Every completion of QP 1 counts against [`rdmacm::POLL_BUDGET`], not only the MADs: a
/// flood of datagrams that are not MADs, all waiting at once, is taken a budget at a time,
/// so one `RdmaCm::poll` cannot be held by it.
#[test]
fn a_flood_of_bad_datagrams_is_taken_a_budget_at_a_time() {
    let mut s = Storm::new(6);
    let n = 2 * SEND_SLOTS;
    assert!(n >= 2 * rdmacm::POLL_BUDGET);
    let rx = |b: &Node| {
        b.sim.with_hca(|h| {
            h.port()
                .counters()
                .get(mlx5_sim::roce::counters::Counter::RxRoceUnicastFrames)
        })
    };
    let rx0 = rx(&s.b);
    // All sent and on B's wire before B's CM polls once.
    for i in 0..n {
        s.at.send(i % SEND_SLOTS, &[0xa5; 100]);
    }
    let t0 = Instant::now();
    while s.at.sends_out > 0 || rx(&s.b) < rx0 + n as u64 {
        s.at.harvest();
        assert!(t0.elapsed() < HANG, "{} sends out", s.at.sends_out);
        std::thread::yield_now();
    }
    std::thread::sleep(DELIVERY);
    let before = b_took(&s.b);
    assert!(s.b.cm.poll(s.clock.now(), &mut s.b.stack).is_none());
    assert_eq!(b_took(&s.b) - before, rdmacm::POLL_BUDGET as u64);
    assert!(s.b.cm.poll(s.clock.now(), &mut s.b.stack).is_none());
    assert_eq!(b_took(&s.b) - before, 2 * rdmacm::POLL_BUDGET as u64);
    assert_eq!(
        s.b.cm.gsi_counters().bad_receives,
        2 * rdmacm::POLL_BUDGET as u64
    );
    s.nothing_leaked_and_a_good_connection_works();
}

/// A storm of REQs with fresh communication IDs to a listener whose application answers
/// none: the first `BACKLOG` become requests, every other is rejected (REJ Consumer Defined)
/// and counted; answering the requests frees the listener, and a good connection goes
/// through.
#[test]
fn a_req_storm_beyond_the_backlog_is_rejected_and_counted() {
    const STORM: usize = 6 * BACKLOG;
    let mut s = Storm::new(6);
    // The NVMe-oF capture's REQ (port 4420), re-addressed; a new communication ID each.
    let (_, nvme_req) = &captured()[5];
    let req = readdressed(nvme_req).unwrap();
    let CmMsg::Req(r) = CmMad::decode(&req).unwrap().msg else {
        panic!("{nvme_req:x?}")
    };
    assert_eq!(r.service_id, PortSpace::Tcp.service_id(PORTS[1]));
    let storm: Vec<Vec<u8>> = (0..STORM as u32)
        .map(|i| {
            let mut r = r;
            r.local_comm_id = 0x5700_0000 + i;
            let mad = CmMad::new(0x5700 + u64::from(i), CmMsg::Req(r));
            mad.to_bytes().unwrap().to_vec()
        })
        .collect();
    // B's application does not run: every request stays pending.
    let t0 = Instant::now();
    let refused = STORM - BACKLOG;
    for chunk in storm.chunks(SEND_SLOTS) {
        for (slot, d) in chunk.iter().enumerate() {
            s.at.send(slot, d);
        }
        while s.at.sends_out > 0 {
            s.at.harvest();
        }
    }
    while b_took(&s.b) < STORM as u64 || s.at.rejs.values().sum::<usize>() < refused {
        s.at.harvest();
        s.a.stack.poll();
        s.b.step(&s.clock);
        assert!(t0.elapsed().as_secs() < 20, "REJs: {:?}", s.at.rejs);
    }
    let mut requests = Vec::new();
    for e in std::mem::take(&mut s.b.events) {
        match e {
            Event::ConnectRequest { id, .. } => requests.push(id),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(requests.len(), BACKLOG);
    let c = s.b.cm.cm_counters();
    assert_eq!((c.rej_sent, c.dropped), (refused as u64, refused as u64));
    assert_eq!(
        s.at.rejs,
        BTreeMap::from([(rej_reason::CONSUMER_DEFINED, refused)])
    );
    assert_eq!(s.b.cm.counts(), (BACKLOG, 0));
    // The application answers; the listener takes a good connection.
    s.app.live.extend(requests);
    s.nothing_leaked_and_a_good_connection_works();
}

/// The hex seeds are the captures' bytes: each names a capture and a frame, and holds the
/// MAD of that frame (checked when the shared captures are beside the workspace).
#[test]
fn the_hex_seeds_are_the_captured_mads() {
    let files = match cm_captures::captured_mads() {
        Ok(f) => f,
        Err(reason) => return cm_captures::skipped(&reason),
    };
    let seeds = captured();
    for (what, mad) in &seeds {
        // "perftest_cm.pcap frame 15: REQ from 10.0.0.2"
        let (file, rest) = what.split_once(" frame ").expect(what);
        let frame: usize = rest.split(':').next().unwrap().parse().expect(what);
        let (_, mads) = files.iter().find(|(f, _)| f == file).expect(file);
        let m = mads.iter().find(|m| m.frame == frame).expect(what);
        assert_eq!(m.mad, mad.to_vec(), "{what}");
        let kind = CmMad::decode(mad).expect(what).msg.name();
        assert!(what.contains(&format!(": {kind} ")), "{what}: {kind}");
    }
    assert_eq!(seeds.len(), 12);
}
