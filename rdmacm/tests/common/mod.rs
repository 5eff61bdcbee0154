//! Two nodes on two emulated ConnectX-5s joined by a frame wire (`SimHal::pair()`: UD
//! datagrams, QP 1's MADs among them, cross as Ethernet frames), each with an IP stack on its
//! Ethernet queue (ARP) and an `RdmaCm`, polled in turn by one thread (the models run their
//! own device threads). The CM's clock is the wall clock plus a skew the tests advance to
//! run its timers (retries, TIMEWAIT) without waiting for them.
#![allow(dead_code)]

#[allow(dead_code, unused_imports)]
#[path = "../../../drivers/mlx5/tests/common/mod.rs"]
pub mod sim;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mlx5::mr::Access;
use mlx5::{
    CompletionQueue, Context, EthConfig, EthQueue, MemoryRegion, ProtectionDomain, QpCaps, RecvWr,
    SendData, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};
use net::{Clock, Stack, StackConfig};
use rdmacm::{CmConfig, CmError, CmId, ConnParam, Event, NewQp, PortSpace, QpInit, RdmaCm};
use sim::{test_config, SimHal, TestHal};

pub const IP_A: [u8; 4] = [10, 0, 0, 1];
pub const IP_B: [u8; 4] = [10, 0, 0, 2];

/// Microseconds of the wall clock, for the IP stacks.
#[derive(Clone, Copy)]
pub struct WallClock(pub Instant);

impl Clock for WallClock {
    fn now_us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
    fn relax(&self) {
        std::thread::yield_now();
    }
}

/// The CM's nanoseconds: the wall clock plus a skew.
pub struct CmClock {
    t0: Instant,
    skew: AtomicU64,
}

impl CmClock {
    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64 + self.skew.load(Ordering::Relaxed)
    }
    /// Moves the CM's time `ns` forward.
    pub fn advance(&self, ns: u64) {
        self.skew.fetch_add(ns, Ordering::Relaxed);
    }
}

pub type S = Stack<EthQueue<TestHal>, WallClock>;

/// One node.
pub struct Node {
    pub sim: Arc<SimHal>,
    pub ctx: Context<TestHal>,
    pub stack: S,
    pub cm: RdmaCm<TestHal>,
    pub pd: ProtectionDomain<TestHal>,
    pub cq: CompletionQueue<TestHal>,
    /// 16 slots of 256 bytes: receives at 0..8, sends at 8..16.
    pub mr: MemoryRegion<TestHal>,
    pub ip: [u8; 4],
    /// The GID index of `ip`.
    pub sgid: u8,
    /// Events polled so far and not yet taken.
    pub events: Vec<Event>,
}

fn node(sim: Arc<SimHal>, ip: [u8; 4], wall: WallClock) -> Node {
    let ctx = Context::open(TestHal(sim.clone()), test_config()).expect("bring-up");
    let q = ctx.open_eth(&EthConfig::default()).expect("eth");
    let stack = Stack::new(q, wall, &StackConfig::new(ip.into(), 24)).expect("stack");
    let sgid = ctx.add_ipv4_gid(ip).expect("gid") as u8;
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(256).expect("cq");
    let mr = pd.alloc_mr(16 * 256, Access::ALL).expect("mr");
    let cm = RdmaCm::new(&ctx, &pd, &CmConfig::new(ip, sgid)).expect("rdmacm");
    Node {
        sim,
        ctx,
        stack,
        cm,
        pd,
        cq,
        mr,
        ip,
        sgid,
        events: Vec::new(),
    }
}

/// Nodes A (10.0.0.1) and B (10.0.0.2) and the CM clock.
pub fn nodes() -> (Node, Node, CmClock) {
    let (sa, sb) = SimHal::pair();
    let wall = WallClock(Instant::now());
    let a = node(sa, IP_A, wall);
    let b = node(sb, IP_B, wall);
    let clock = CmClock {
        t0: Instant::now(),
        skew: AtomicU64::new(0),
    };
    (a, b, clock)
}

impl Node {
    /// Polls the stack and the CM once, keeping the CM's events.
    pub fn step(&mut self, clock: &CmClock) {
        self.stack.poll();
        while let Some(e) = self.cm.poll(clock.now(), &mut self.stack) {
            self.events.push(e);
        }
    }

    /// Takes the first kept event `f` picks.
    pub fn take<T>(&mut self, f: impl Fn(&Event) -> Option<T>) -> Option<T> {
        let i = self.events.iter().position(|e| f(e).is_some())?;
        f(&self.events.remove(i))
    }

    /// Connects to `port` (RDMA_PS_TCP) at `dst` with a QP on the test CQ.
    pub fn connect(
        &mut self,
        clock: &CmClock,
        dst: [u8; 4],
        port: u16,
        p: &ConnParam<'_>,
    ) -> Result<CmId, CmError> {
        let qp = NewQp {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            init: qp_init(),
        };
        self.cm.connect(
            clock.now(),
            dst,
            port,
            PortSpace::Tcp,
            &qp,
            p,
            &mut self.stack,
        )
    }

    /// Gives connection request `id` a QP on the test CQ.
    pub fn create_qp(&mut self, id: CmId) {
        let (pd, cq) = (&self.pd, &self.cq);
        self.cm
            .create_qp(id, pd, cq, cq, &qp_init())
            .expect("create_qp");
    }

    /// Posts a receive of slot `slot` on `id`'s QP.
    pub fn post_recv(&mut self, id: CmId, slot: u64) {
        let sge = [self.mr.sge(slot * 256, 256)];
        let qp = self.cm.qp(id).expect("qp");
        qp.post_recv(&[RecvWr {
            wr_id: slot,
            sges: &sge,
        }])
        .expect("post_recv");
    }

    /// Sends `data` inline on `id`'s QP.
    pub fn send(&mut self, id: CmId, data: &[u8]) {
        let qp = self.cm.qp(id).expect("qp");
        qp.post_send(&[SendWr {
            wr_id: 100,
            op: SendOp::Send { imm: None },
            data: SendData::Inline(data),
            flags: SendFlags::SIGNALED,
        }])
        .expect("post_send");
    }

    /// The bytes of receive slot `slot`.
    pub fn slot(&self, slot: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mr.read(slot * 256, &mut b).unwrap();
        b
    }

    /// Datagrams this node's device dropped as longer than the receiving QP's path MTU (the
    /// model's `rx_drop_ud_length`: before any receive WQE or service sees them).
    pub fn ud_length_drops(&self) -> u64 {
        self.sim.with_hca(|h| {
            h.port()
                .counters()
                .get(mlx5_sim::roce::counters::Counter::RxDropUdLength)
        })
    }

    /// Polls the test CQ for one completion.
    pub fn poll_cq(&mut self) -> Option<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        (self.cq.poll(&mut wc).unwrap() == 1).then_some(wc[0])
    }
}

pub fn qp_init() -> QpInit {
    QpInit {
        caps: QpCaps::default(),
        access: Access::ALL,
    }
}

/// Steps both nodes until `done` holds (or panics after 20 s of wall time).
pub fn run(
    a: &mut Node,
    b: &mut Node,
    clock: &CmClock,
    mut done: impl FnMut(&mut Node, &mut Node) -> bool,
) {
    let t0 = Instant::now();
    loop {
        a.step(clock);
        b.step(clock);
        if done(a, b) {
            return;
        }
        assert!(
            t0.elapsed().as_secs() < 20,
            "timed out; A's events {:?}, B's {:?}",
            a.events,
            b.events
        );
        std::thread::yield_now();
    }
}

/// Waits for one successful completion on `n`'s CQ.
pub fn one_wc(a: &mut Node, b: &mut Node, clock: &CmClock, on_a: bool) -> WorkCompletion {
    let mut got = None;
    run(a, b, clock, |a, b| {
        let n = if on_a { a } else { b };
        got = n.poll_cq();
        got.is_some()
    });
    let w = got.unwrap();
    assert_eq!(w.status, WcStatus::Success, "{w:?}");
    w
}

/// A connects to `port` of B (which listens on it) with the default parameters; returns A's
/// id and that of the request B then hears.
pub fn request(a: &mut Node, b: &mut Node, clock: &CmClock, port: u16) -> (CmId, CmId) {
    let ia = a.connect(clock, IP_B, port, &ConnParam::default()).unwrap();
    let mut ib = None;
    run(a, b, clock, |_, b| {
        ib = b.take(|e| match e {
            Event::ConnectRequest { id, .. } => Some(*id),
            _ => None,
        });
        ib.is_some()
    });
    (ia, ib.unwrap())
}
