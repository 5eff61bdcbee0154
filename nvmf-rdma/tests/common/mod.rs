//! A host (initiator) and the target on two emulated ConnectX-5s joined by a wire: the
//! target is node A (10.0.0.1) with an [`NvmfRdma`] on its rdma_cm, the host node B
//! (10.0.0.2) with rdmacm's active side and one region for its capsules and data, driving
//! one command at a time as Linux's `nvme-rdma` lays them out (SGL types 0x01 and 0x40).
#![allow(dead_code)]

#[allow(unused_imports)]
#[path = "../../../rdmacm/tests/common/mod.rs"]
pub mod cm;

#[allow(unused_imports)]
#[path = "../../../nvmeof/tests/common/mod.rs"]
pub mod core;

use std::time::Instant;

use cm::sim::TestHal;
use cm::{nodes, qp_init, CmClock, Node, IP_A};
use mlx5::mr::Access;
use mlx5::{
    MemoryRegion, RecvWr, SendData, SendFlags, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use nvmeof::sgl::Sgl;
use nvmeof::{Cqe, KeyedSgl};
use nvmf_rdma::{Limits, Note, NvmfRdma};
use rdmacm::{CmId, ConnParam, Event, NewQp, PortSpace, QpInit};

// Not every user of this module takes all of them (the bench).
#[allow(unused_imports)]
pub use core::{connect, pattern, set_cc, sqe, CC_ENABLE, HOSTNQN, NQN};

/// The target's disk.
pub const DISK: usize = 4 << 20;
/// The host's region: receive slots (64 bytes, 32 per queue, 8 queues), capsules, data.
pub const HOST_MR: usize = 1 << 20;
pub const CAPSULE_OFF: u64 = 64 << 10;
pub const DATA_OFF: u64 = 128 << 10;
pub const WRITE_OFF: u64 = 256 << 10;
pub const READ_OFF: u64 = 512 << 10;
const RECV_SLOTS: u64 = 32;

/// The target node.
pub struct Tgt {
    pub node: Node,
    pub nv: NvmfRdma<TestHal>,
    pub notes: Vec<Note>,
}

/// One queue of the host.
pub struct HQueue {
    pub id: CmId,
    /// Its receive slots start at slot `base`.
    base: u64,
    cid: u16,
}

/// The host node.
pub struct Host {
    pub node: Node,
    pub mr: MemoryRegion<TestHal>,
    pub queues: Vec<HQueue>,
    /// The QP the next queue gets.
    pub init: QpInit,
    next_base: u64,
}

/// Target A listening on 4420 with a disk of [`DISK`] bytes, host B, the CM clock.
pub fn setup() -> (Tgt, Host, CmClock) {
    let (a, b, clock) = nodes();
    let mut cfg = core::capture_config();
    cfg.max_qid = 8;
    let nv = NvmfRdma::new(&a.ctx, cfg, DISK, Limits::default()).expect("target");
    let mut t = Tgt {
        node: a,
        nv,
        notes: Vec::new(),
    };
    t.nv.listen(&mut t.node.cm).expect("listen");
    let mr = b.pd.alloc_mr(HOST_MR, Access::ALL).expect("host mr");
    let h = Host {
        node: b,
        mr,
        queues: Vec::new(),
        init: qp_init(),
        next_base: 0,
    };
    (t, h, clock)
}

impl Tgt {
    /// Polls the target once.
    pub fn step(&mut self, clock: &CmClock) {
        self.node.stack.poll();
        self.nv
            .poll(&mut self.node.cm, &mut self.node.stack, clock.now());
        while let Some(n) = self.nv.take_note() {
            self.notes.push(n);
        }
    }
}

/// Steps both until `done` holds (panics after 30 s of wall time).
pub fn spin(
    t: &mut Tgt,
    h: &mut Host,
    clock: &CmClock,
    mut done: impl FnMut(&mut Tgt, &mut Host) -> bool,
) {
    let t0 = Instant::now();
    loop {
        t.step(clock);
        h.node.step(clock);
        if done(t, h) {
            return;
        }
        assert!(
            t0.elapsed().as_secs() < 30,
            "timed out; target notes {:?}, host events {:?}",
            t.notes,
            h.node.events
        );
        std::thread::yield_now();
    }
}

/// The REQ's NVMe private data.
pub fn cm_req(qid: u16, hrqsize: u16, hsqsize: u16) -> [u8; 32] {
    core::cm_req(qid, hrqsize, hsqsize)
}

impl Host {
    fn recv_off(&self, slot: u64) -> u64 {
        slot * 64
    }

    /// Connects queue `qid` (REQ private data `req`): Ok with the queue's index once
    /// established, or the REJ's reason and private data.
    pub fn open(
        t: &mut Tgt,
        h: &mut Host,
        clock: &CmClock,
        req: &[u8; 32],
    ) -> Result<usize, (u16, Vec<u8>)> {
        let p = ConnParam {
            private_data: req,
            responder_resources: 16,
            initiator_depth: 0,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        let qp = NewQp {
            pd: &h.node.pd,
            send_cq: &h.node.cq,
            recv_cq: &h.node.cq,
            init: h.init,
        };
        let id = h
            .node
            .cm
            .connect(
                clock.now(),
                IP_A,
                4420,
                PortSpace::Tcp,
                &qp,
                &p,
                &mut h.node.stack,
            )
            .expect("connect");
        let base = h.next_base;
        h.next_base += RECV_SLOTS;
        for s in base..base + RECV_SLOTS {
            let sge = [h.mr.sge(h.recv_off(s), 64)];
            h.node
                .cm
                .qp(id)
                .unwrap()
                .post_recv(&[RecvWr {
                    wr_id: s,
                    sges: &sge,
                }])
                .unwrap();
        }
        let mut out = None;
        spin(t, h, clock, |_, h| {
            out = h.node.take(|e| match e {
                Event::Established { id: i, .. } if *i == id => Some(Ok(())),
                Event::Rejected {
                    id: i,
                    reason,
                    private_data,
                } if *i == id => Some(Err((*reason, private_data.clone()))),
                _ => None,
            });
            out.is_some()
        });
        out.unwrap()?;
        h.queues.push(HQueue { id, base, cid: 0 });
        Ok(h.queues.len() - 1)
    }

    /// Sends capsule `c` on queue `q` and waits for its response.
    pub fn command(t: &mut Tgt, h: &mut Host, clock: &CmClock, q: usize, c: &[u8]) -> Cqe {
        Host::command_wc(t, h, clock, q, c).0
    }

    /// Sends capsule `c` on queue `q` (its command identifier the queue's next); returns the
    /// command identifier.
    pub fn send_capsule(h: &mut Host, q: usize, c: &[u8]) -> u16 {
        let mut c = c.to_vec();
        let cid = h.queues[q].cid;
        h.queues[q].cid = cid.wrapping_add(1);
        c[2..4].copy_from_slice(&cid.to_le_bytes());
        h.mr.write(CAPSULE_OFF, &c).unwrap();
        let id = h.queues[q].id;
        let sge = [h.mr.sge(CAPSULE_OFF, c.len() as u32)];
        h.node
            .cm
            .qp(id)
            .unwrap()
            .post_send(&[SendWr {
                wr_id: 1 << 40,
                op: SendOp::Send { imm: None },
                data: SendData::Sges(&sge),
                flags: SendFlags::SIGNALED,
            }])
            .unwrap();
        cid
    }

    /// [`Host::command`], with the completion of the receive the response arrived in.
    pub fn command_wc(
        t: &mut Tgt,
        h: &mut Host,
        clock: &CmClock,
        q: usize,
        c: &[u8],
    ) -> (Cqe, WorkCompletion) {
        let cid = Host::send_capsule(h, q, c);
        let id = h.queues[q].id;
        let base = h.queues[q].base;
        let mut got = None;
        spin(t, h, clock, |_, h| {
            while let Some(w) = h.node.poll_cq() {
                // Receives of queues gone before (their QPs in ERR) come back flushed.
                if w.status == WcStatus::WrFlushErr {
                    continue;
                }
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                if matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvWithInv)
                    && (base..base + RECV_SLOTS).contains(&w.wr_id)
                {
                    assert_eq!(w.byte_len, 16);
                    got = Some(w);
                }
            }
            got.is_some()
        });
        let wc = got.unwrap();
        let slot = wc.wr_id;
        let mut b = [0u8; 16];
        h.mr.read(h.recv_off(slot), &mut b).unwrap();
        let sge = [h.mr.sge(h.recv_off(slot), 64)];
        h.node
            .cm
            .qp(id)
            .unwrap()
            .post_recv(&[RecvWr {
                wr_id: slot,
                sges: &sge,
            }])
            .unwrap();
        let cqe = Cqe::from_bytes(&b);
        assert_eq!(cqe.cid, cid, "the response names the command");
        (cqe, wc)
    }

    /// A keyed SGL (type 0x40) over `len` bytes of the host's region at `off`.
    pub fn keyed(&self, off: u64, len: u32) -> Sgl {
        Sgl::keyed(
            KeyedSgl {
                addr: self.mr.addr() + off,
                len,
                key: self.mr.rkey(),
            },
            false,
        )
    }

    /// The admin queue connected (Connect data by RDMA READ), enabled: (queue, cntlid).
    pub fn admin(t: &mut Tgt, h: &mut Host, clock: &CmClock, kato: u32) -> (usize, u16) {
        let q = Host::open(t, h, clock, &cm_req(0, 32, 31)).expect("admin queue");
        let c = connect(0, 31, kato, 0xffff, NQN, HOSTNQN);
        h.mr.write(DATA_OFF, &c[64..]).unwrap();
        let mut sqe = c[..64].to_vec();
        sqe[24..40].copy_from_slice(&h.keyed(DATA_OFF, 1024).0);
        let r = Host::command(t, h, clock, q, &sqe);
        assert_eq!(r.status, 0, "admin Connect: {r:?}");
        let cntlid = r.result as u16;
        let r = Host::command(t, h, clock, q, &set_cc(CC_ENABLE));
        assert_eq!(r.status, 0, "enable: {r:?}");
        (q, cntlid)
    }

    /// I/O queue `qid` of controller `cntlid` connected (Connect data in the capsule).
    pub fn io(t: &mut Tgt, h: &mut Host, clock: &CmClock, qid: u16, cntlid: u16) -> usize {
        let q = Host::open(t, h, clock, &cm_req(qid, 32, 31)).expect("I/O queue");
        let r = Host::command(t, h, clock, q, &connect(qid, 31, 0, cntlid, NQN, HOSTNQN));
        assert_eq!(r.status, 0, "I/O Connect: {r:?}");
        assert_eq!(r.sqid, qid);
        q
    }
}

/// An NVM command on namespace 1: `opcode` of `blocks` 512-byte blocks at `slba`.
pub fn rw(opcode: u8, slba: u64, blocks: u32, sgl: Sgl) -> Vec<u8> {
    sqe(
        opcode,
        0,
        1,
        &[slba as u32, (slba >> 32) as u32, blocks - 1],
        sgl,
    )
}

/// The live QPs and mkeys of the target's device model, for leak checks.
pub fn live(t: &Tgt) -> (usize, usize) {
    t.node
        .sim
        .hca
        .with_hca(|h| (h.qps().len(), h.mkeys().len()))
}

/// The CM's retries and TIMEWAIT, all over (16 tries of rdma_cm's ~4 s response timeout).
pub const ALL_RETRIES_NS: u64 = 16 * 4_300_000_000;
