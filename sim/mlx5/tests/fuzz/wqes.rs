//! Target: WQEs.

use super::*;

const DATA_LEN: usize = 64 << 10;

pub(super) struct WqeFuzz {
    env: Env<Guarded>,
    a: dp::Qp,
    b: dp::Qp,
    cqs: Vec<dp::Cq>,
    data: u64,
    keys: Vec<u32>,
    dead: bool,
    /// This step builds well-formed WQEs with valid keys and in-bounds addresses (to get
    /// past the first checks into the data path), instead of hostile ones.
    tame: bool,
}

const WQE_OPCODES: &[u8] = &[
    wqe::opcode::NOP,
    wqe::opcode::RDMA_WRITE,
    wqe::opcode::RDMA_WRITE_IMM,
    wqe::opcode::SEND,
    wqe::opcode::SEND_IMM,
    wqe::opcode::SEND_INVAL,
    wqe::opcode::RDMA_READ,
    wqe::opcode::ATOMIC_CS,
    wqe::opcode::ATOMIC_FA,
    wqe::opcode::ATOMIC_MASKED_CS,
    wqe::opcode::ATOMIC_MASKED_FA,
    wqe::opcode::LOCAL_INVAL,
    wqe::opcode::TSO,
];

impl WqeFuzz {
    pub(super) fn new() -> WqeFuzz {
        let mut env = Env::new(Guarded::new(8 << 20), 1);
        let cqs: Vec<dp::Cq> = (0..4).map(|_| env.cq(6)).collect();
        let a = env.qp(&cqs[0], &cqs[1], 6, 5);
        let b = env.qp(&cqs[2], &cqs[3], 6, 5);
        env.connect_local(&a, b.qpn);
        env.connect_local(&b, a.qpn);
        let data = env.alloc(DATA_LEN);
        let k1 = env.mkey(data, DATA_LEN as u64, dp::ALL);
        let k2 = env.mkey(data, 4096, dp::LR | dp::LW);
        WqeFuzz {
            env,
            a,
            b,
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
        if self.tame {
            return (self.data + rng.below(DATA_LEN as u64 / 2)) & !7;
        }
        match rng.below(8) {
            0 => rng.interesting(),
            1 => self.data + DATA_LEN as u64 - rng.below(64),
            _ => self.data + rng.below(DATA_LEN as u64),
        }
    }

    fn len(&self, rng: &mut Rng) -> u32 {
        if self.tame {
            return rng.range(1, 4096) as u32;
        }
        match rng.below(6) {
            0 => 0,
            1 => rng.interesting() as u32,
            2 => rng.range(1, DATA_LEN as u64 + 64) as u32,
            _ => rng.range(1, 512) as u32,
        }
    }

    fn wqe(&self, rng: &mut Rng, idx: u16) -> Vec<u8> {
        if !self.tame && rng.chance(100) {
            let n = 64 * rng.range(1, 4) as usize;
            let mut w = rng.bytes(n);
            if rng.chance(500) {
                let ds = w[7] & 0x3f;
                w[4..8].copy_from_slice(&wqe::qpn_ds(self.a.qpn, ds).to_be_bytes());
            }
            return w;
        }
        let op = if self.tame {
            rng.pick(&WQE_OPCODES[..9])
        } else if rng.chance(900) {
            rng.pick(WQE_OPCODES)
        } else {
            rng.u32() as u8
        };
        let mut segs: Vec<Vec<u8>> = Vec::new();
        let raddr = dp::raddr_seg(self.addr(rng), self.key(rng)).to_vec();
        match op {
            wqe::opcode::RDMA_WRITE | wqe::opcode::RDMA_WRITE_IMM | wqe::opcode::RDMA_READ => {
                segs.push(raddr)
            }
            wqe::opcode::ATOMIC_CS
            | wqe::opcode::ATOMIC_FA
            | wqe::opcode::ATOMIC_MASKED_CS
            | wqe::opcode::ATOMIC_MASKED_FA => {
                segs.push(raddr);
                segs.push(dp::atomic_seg(rng.u64(), rng.u64()).to_vec());
                if !self.tame && rng.chance(300) {
                    segs.push(dp::atomic_seg(rng.u64(), rng.u64()).to_vec());
                }
            }
            _ => {
                if !self.tame && rng.chance(100) {
                    segs.push(raddr);
                }
            }
        }
        let atomic = matches!(
            op,
            wqe::opcode::ATOMIC_CS
                | wqe::opcode::ATOMIC_FA
                | wqe::opcode::ATOMIC_MASKED_CS
                | wqe::opcode::ATOMIC_MASKED_FA
        );
        if self.tame && atomic {
            segs.push(dp::dseg(8, self.keys[0], self.addr(rng)).to_vec());
        }
        let nsegs = if self.tame {
            rng.range(0, 1) * u64::from(!atomic)
        } else {
            rng.range(0, 4)
        };
        for _ in 0..nsegs {
            if !self.tame && rng.chance(250) {
                let n = match rng.below(4) {
                    0 => rng.range(0, 16),
                    _ => rng.range(0, 200),
                } as usize;
                let mut s = dp::inline_seg(&rng.bytes(n));
                if rng.chance(200) {
                    // A byte count that lies about the segment.
                    s[0..4].copy_from_slice(&(rng.u32() | wqe::INLINE_SEG).to_be_bytes());
                }
                segs.push(s);
            } else {
                segs.push(dp::dseg(self.len(rng), self.key(rng), self.addr(rng)).to_vec());
            }
        }
        let refs: Vec<&[u8]> = segs.iter().map(|s| s.as_slice()).collect();
        let any = rng.u32() as u8;
        let fm_ce_se = rng.pick(&[0u8, 8, 2, 0xa, any]);
        let qpn = if self.tame || rng.chance(970) {
            self.a.qpn
        } else {
            rng.u32() & 0xff_ffff
        };
        let fm_ce_se = if self.tame {
            wqe::ctrl::CQ_UPDATE
        } else {
            fm_ce_se
        };
        let mut w = dp::send_wqe(op, idx, qpn, fm_ce_se, rng.u32(), &refs);
        if !self.tame && rng.chance(50) {
            // Lie about ds.
            w[7] = rng.u32() as u8;
        }
        if !self.tame && rng.chance(30) {
            w[0] = rng.u32() as u8; // opmod
        }
        let pad = w.len().div_ceil(64) * 64;
        w.resize(pad.max(64), 0);
        w
    }
}

impl Epoch for WqeFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.tame = rng.chance(600);
        // Receives on b (and sometimes a), some bogus.
        for _ in 0..rng.range(0, 3) {
            let n = rng.range(0, 4) as usize;
            let sges: Vec<(u32, u32, u64)> = (0..n)
                .map(|_| (self.len(rng), self.key(rng), self.addr(rng)))
                .collect();
            if rng.chance(800) {
                self.env.post_recv(&mut self.b, &sges);
            } else {
                self.env.post_recv(&mut self.a, &sges);
            }
        }
        // One to three WQEs on a, then one doorbell.
        let mut last = Vec::new();
        for _ in 0..rng.range(1, 3) {
            let w = self.wqe(rng, self.a.sq_pi);
            self.env.write_send(&mut self.a, &w);
            last = w;
        }
        let dbr = if self.tame || rng.chance(950) {
            u32::from(self.a.sq_pi)
        } else {
            rng.u32()
        };
        self.env.write(self.a.dbr + 4, &dbr.to_be_bytes());
        let half = 256u64;
        let reg = u64::from(self.a.uar) * 4096 + 0x800 + half * u64::from(self.a.bf_half);
        self.a.bf_half ^= 1;
        let dev = &self.env.raw.dev;
        match if self.tame {
            2 + rng.below(8)
        } else {
            rng.below(10)
        } {
            0 => {
                // A random doorbell anywhere in the DB/BF area.
                let off = u64::from(self.a.uar) * 4096 + 0x800 + (rng.below(0x800) & !7);
                dev.write64(off, rng.u64());
            }
            1..=3 => {
                // BlueFlame copy of the last WQE (maybe stale, maybe short, maybe long).
                let mut bytes = last.clone();
                if !self.tame && rng.chance(200) {
                    let i = rng.below(bytes.len() as u64) as usize;
                    bytes[i] ^= 0xff;
                }
                let n = match if self.tame { 9 } else { rng.below(10) } {
                    0 => rng.range(1, bytes.len() as u64 / 8) as usize * 8,
                    1 => bytes.len() + 64,
                    _ => bytes.len(),
                };
                bytes.resize(n.min(512), 0);
                for (i, c) in bytes.chunks_exact(8).enumerate() {
                    dev.write64(
                        reg + i as u64 * 8,
                        u64::from_le_bytes(c.try_into().unwrap()),
                    );
                }
            }
            _ => dev.write64(reg, u64::from_le_bytes(last[0..8].try_into().unwrap())),
        }
        // Let the engine run and reap completions and events.
        for _ in 0..rng.range(1, 3) {
            dev.poll();
        }
        for cq in self.cqs.iter_mut() {
            reap(&self.env, cq)?;
        }
        let _ = self.env.drain_eq();
        {
            for qpn in [self.a.qpn, self.b.qpn] {
                let d = self.env.query_qp(qpn);
                let rts = d.delivery == Some(0)
                    && d.status() == 0
                    && d.get(qpc::STATE.within(query_qp_out::QPC)) == u32::from(qp::state::RTS);
                self.dead |= !rts;
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
