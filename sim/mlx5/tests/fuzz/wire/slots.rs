//! The `wire` target's set-up: the two HCAs on one virtual clock with the fuzzer between them,
//! each slot's memory (blocks with their MRs and shadows), and its QP pairs opened and closed.

use super::*;

impl WireFuzz {
    fn block(&mut self, side: usize, pd: u32, access: u8, rng: &mut Rng) -> Block {
        let e = &mut self.env[side];
        let at = e.alloc(BLOCK as usize);
        let shadow = rng.bytes(BLOCK as usize);
        e.write(at, &shadow);
        let key = e.mkey_in_pd(pd, at + MR_OFF, MR_LEN, access);
        self.keys[side].push(key);
        Block { at, key, shadow }
    }

    pub(super) fn slot_mem(&mut self, rng: &mut Rng) -> Slot {
        let mut mem = Vec::new();
        for side in 0..2 {
            let pd = self.env[side].alloc_pd();
            let local = self.block(side, pd, dp::LR | dp::LW, rng);
            let remote = self.block(side, pd, dp::ALL, rng);
            let recv = self.block(side, pd, dp::LR | dp::LW, rng);
            mem.push(SideMem {
                pd,
                local,
                remote,
                recv,
                local_next: 0,
                remote_next: 0,
            });
        }
        let b = mem.pop().unwrap();
        let a = mem.pop().unwrap();
        Slot {
            mem: [a, b],
            ends: None,
            tainted: false,
            tainted_iters: 0,
        }
    }

    /// A CQ and an RC QP in `pd` on side `side` (one CQ for both queues).
    fn end(&mut self, side: usize, pd: u32) -> End {
        let e = &mut self.env[side];
        let cq = e.cq(6);
        let qp = e.qp_in_pd(pd, &cq, &cq, 6, 5);
        End {
            qp,
            cq,
            next_psn: PSN0,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            resp: VecDeque::new(),
            msgs_in: 0,
            recv_ok: 0,
            error_seen: false,
            recv_next: 0,
            mw: None,
        }
    }

    /// Connects a new QP pair in `slot` (ack timeout 10: about 4 ms), over IPv4 or (`v6`,
    /// GID index 1) IPv6.
    pub(super) fn open(&mut self, slot: &mut Slot, v6: bool) {
        let a = self.end(0, slot.mem[0].pd);
        let b = self.end(1, slot.mem[1].pd);
        if v6 {
            for (side, (me, peer)) in [(&a, &b), (&b, &a)].into_iter().enumerate() {
                let (gid, mac) = (gid_v6(other(side)), self.env[other(side)].mac);
                let e = &mut self.env[side];
                let i = e.rst2init_input(me.qp.qpn);
                e.raw.exec(&i, 16).ok();
                let mut i = e.init2rtr_input(me.qp.qpn, peer.qp.qpn, gid, mac, PSN0, 1);
                raw::set(&mut i, dp::path_field(ads::SRC_ADDR_INDEX), 1);
                e.raw.exec(&i, 16).ok();
                let i = e.rtr2rts_input(me.qp.qpn, PSN0, 7, 7, 10);
                e.raw.exec(&i, 16).ok();
            }
        } else {
            let (ga, ma, gb, mb) = (
                self.env[0].gid,
                self.env[0].mac,
                self.env[1].gid,
                self.env[1].mac,
            );
            self.env[0].connect_with(&a.qp, b.qp.qpn, gb, mb, 1, 7, 7, 10);
            self.env[1].connect_with(&b.qp, a.qp.qpn, ga, ma, 1, 7, 7, 10);
        }
        let (mut a, mut b) = (a, b);
        for (side, end) in [(0, &mut a), (1, &mut b)] {
            let m = &slot.mem[side];
            let (pd, mr) = (m.pd, (m.remote.mr(), m.remote.key));
            end.mw = Some(self.bind_window(side, pd, end, mr));
        }
        slot.ends = Some([a, b]);
        slot.tainted = false;
        slot.tainted_iters = 0;
    }

    /// Destroys a slot's QPs and CQs (whatever state they are in).
    pub(super) fn close(&mut self, slot: &mut Slot) {
        let Some(ends) = slot.ends.take() else {
            return;
        };
        for (side, end) in ends.into_iter().enumerate() {
            let e = &mut self.env[side];
            let mut i = raw::input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
            raw::set(&mut i, destroy_qp_in::QPN, end.qp.qpn);
            e.raw.exec(&i, 16).ok();
            let mut i = raw::input(opcode::DESTROY_CQ, 0, destroy_cq_in::BYTES);
            raw::set(&mut i, destroy_cq_in::CQN, end.cq.cqn);
            e.raw.exec(&i, 16).ok();
        }
    }

    /// A new iteration of a slot: its MRs are handed out from the start again (each
    /// operation writes fresh random bytes into the range it reads from, [`Self::fresh`]).
    pub(super) fn refill(&mut self, slot: &mut Slot, _rng: &mut Rng) {
        for m in &mut slot.mem {
            m.local_next = 0;
            m.remote_next = 0;
        }
    }

    /// Fresh random bytes at `off..off + n` of block `b` on side `side`, shadow to match (so
    /// an operation that does nothing cannot look right).
    pub(super) fn fresh(env: &Env<Guarded>, b: &mut Block, off: usize, n: usize, rng: &mut Rng) {
        rng.fill(&mut b.shadow[off..off + n]);
        env.write(b.at + off as u64, &b.shadow[off..off + n]);
    }
}
