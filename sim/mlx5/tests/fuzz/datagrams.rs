//! Target: datagrams. Hostile send WQEs (datagram segments naming any QPN, Q_Key, GID index,
//! MAC; short or lying segments; RC opcodes) on a UD QP and the GSI QP, looping back to
//! each other, and hostile receive WQEs for what arrives.

use super::*;

const DATA_LEN: usize = 64 << 10;
/// The UD QP's Q_Key and the GSI QP's (Linux include/rdma/ib_mad.h `IB_QP1_QKEY`).
const QKEYS: [u32; 2] = [0x1111_2222, 0x8001_0000];

pub(super) struct UdFuzz {
    env: Env<Guarded>,
    /// The UD QP and the GSI QP.
    qps: [dp::Qp; 2],
    cqs: Vec<dp::Cq>,
    data: u64,
    keys: Vec<u32>,
    dead: bool,
    tame: bool,
}

impl UdFuzz {
    pub(super) fn new() -> UdFuzz {
        let mut env = Env::new(Guarded::new(8 << 20), 1);
        let cqs: Vec<dp::Cq> = (0..4).map(|_| env.cq(6)).collect();
        let pd = env.pd;
        let ud = env.qp_of_type(qp::st::UD, pd, &cqs[0], &cqs[1], 6, 5);
        let gsi = env.qp_of_type(qp::st::QP1, pd, &cqs[2], &cqs[3], 6, 5);
        let (ud, gsi) = (ud.ok().unwrap(), gsi.ok().unwrap());
        env.bring_up_datagram(ud.qpn, QKEYS[0], 3, 12);
        env.bring_up_datagram(gsi.qpn, QKEYS[1], 1, 8);
        let data = env.alloc(DATA_LEN);
        let k1 = env.mkey(data, DATA_LEN as u64, dp::ALL);
        let k2 = env.mkey(data, 4096, dp::LR);
        UdFuzz {
            env,
            qps: [ud, gsi],
            cqs,
            data,
            keys: vec![k1, k2],
            dead: false,
            tame: false,
        }
    }

    fn key(&self, rng: &mut Rng) -> u32 {
        pick_key(rng, self.tame, &self.keys)
    }

    fn addr(&self, rng: &mut Rng) -> u64 {
        match if self.tame { 9 } else { rng.below(8) } {
            0 => rng.interesting(),
            1 => self.data + DATA_LEN as u64 - rng.below(64),
            _ => self.data + rng.below(DATA_LEN as u64 / 2),
        }
    }

    fn len(&self, rng: &mut Rng) -> u32 {
        match if self.tame { 9 } else { rng.below(6) } {
            0 => 0,
            1 => rng.interesting() as u32,
            2 => rng.range(1, 5000) as u32,
            _ => rng.range(1, 300) as u32,
        }
    }

    /// A datagram segment: to the other QP (its number, or 1 for the GSI QP) with its Q_Key,
    /// or anything.
    fn av(&self, rng: &mut Rng, to: usize) -> Vec<u8> {
        let (gid, mac) = (self.env.gid, self.env.mac);
        let dqpn = if to == 1 { 1 } else { self.qps[0].qpn };
        let mut s = dp::av_seg(dqpn, QKEYS[to], gid, mac);
        if self.tame {
            return s.to_vec();
        }
        match rng.below(10) {
            0 => return rng.bytes(48),
            1 => s[8..12].copy_from_slice(&rng.u32().to_be_bytes()),
            2 => s[0..4].copy_from_slice(&rng.u32().to_be_bytes()),
            3 => s[28] = rng.u32() as u8,
            4 => s[32 + rng.below(16) as usize] ^= 1 << rng.below(8),
            5 => s[0..4].copy_from_slice(&0x8000_0000u32.to_be_bytes()),
            _ => {}
        }
        s.to_vec()
    }

    fn wqe(&self, rng: &mut Rng, from: usize, idx: u16) -> Vec<u8> {
        let qpn = self.qps[from].qpn;
        let op = if self.tame || rng.chance(900) {
            rng.pick(&[wqe::opcode::SEND, wqe::opcode::SEND_IMM])
        } else {
            let any = rng.u32() as u8;
            rng.pick(&[
                wqe::opcode::NOP,
                wqe::opcode::RDMA_WRITE,
                wqe::opcode::RDMA_READ,
                wqe::opcode::ATOMIC_CS,
                any,
            ])
        };
        let mut segs: Vec<Vec<u8>> = Vec::new();
        if self.tame || rng.chance(950) {
            segs.push(self.av(rng, 1 - from));
        }
        for _ in 0..if self.tame { 1 } else { rng.range(0, 3) } {
            if rng.chance(300) {
                let n = rng.range(0, if self.tame { 100 } else { 300 }) as usize;
                segs.push(dp::inline_seg(&rng.bytes(n)));
            } else {
                segs.push(dp::dseg(self.len(rng), self.key(rng), self.addr(rng)).to_vec());
            }
        }
        let refs: Vec<&[u8]> = segs.iter().map(|s| s.as_slice()).collect();
        let fm_ce_se = if self.tame {
            wqe::ctrl::CQ_UPDATE
        } else {
            rng.u32() as u8
        };
        let mut w = dp::send_wqe(op, idx, qpn, fm_ce_se, rng.u32(), &refs);
        if !self.tame && rng.chance(50) {
            w[7] = rng.u32() as u8; // lie about ds
        }
        let pad = w.len().div_ceil(64) * 64;
        w.resize(pad.max(64), 0);
        w
    }
}

impl Epoch for UdFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.tame = rng.chance(600);
        for _ in 0..rng.range(0, 3) {
            let n = rng.range(0, 4) as usize;
            let sges: Vec<(u32, u32, u64)> = (0..n)
                .map(|_| (self.len(rng).max(64), self.key(rng), self.addr(rng)))
                .collect();
            let to = rng.below(2) as usize;
            self.env.post_recv(&mut self.qps[to], &sges);
        }
        let from = rng.below(2) as usize;
        let mut last = Vec::new();
        for _ in 0..rng.range(1, 3) {
            let w = self.wqe(rng, from, self.qps[from].sq_pi);
            self.env.write_send(&mut self.qps[from], &w);
            last = w;
        }
        self.env.ring_sq(&mut self.qps[from], &last);
        self.env.raw.dev.poll();
        // The receive CQs (1 and 3): count the datagrams that arrived.
        for cq in [1, 3] {
            while let Some(c) = self.env.poll_cq(&mut self.cqs[cq]) {
                if !c.is_error() {
                    STATS.ud_received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        for cq in self.cqs.iter_mut() {
            reap(&self.env, cq)?;
        }
        let _ = self.env.drain_eq();
        for i in 0..2 {
            let qpn = self.qps[i].qpn;
            let d = self.env.query_qp(qpn);
            let state = d.get(qpc::STATE.within(query_qp_out::QPC));
            if state == u32::from(qp::state::SQER) {
                // A send error: back to RTS (Linux optab SQER2RTS).
                let i = self.env.modify_input(opcode::SQERR2RTS_QP, qpn, 0);
                self.env.raw.exec(&i, 16).ok();
            } else if d.status() != 0 || state != u32::from(qp::state::RTS) {
                self.dead = true;
            }
        }
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()
    }
    fn worn_out(&self) -> bool {
        self.dead || self.env.raw.dev.ram.left() < (1 << 20)
    }
}
