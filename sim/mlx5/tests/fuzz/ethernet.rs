//! Target: the Ethernet queues. Hostile send WQEs and doorbells on a live SQ (WQEs out), and
//! hostile frames handed to a TIR whose RQ holds hostile receive WQEs (frames in).
//!
//! Checked besides the guard regions: every frame the port sends is a frame (60 bytes up to
//! the vport MTU less the FCS), and the half of the data area no key covers never changes (a
//! receive writes only through the keys of its WQE's entries). An SQ or RQ that an error put
//! in ERR is recovered as Linux does (ERR -> RST -> RDY, the counter from 0).

use super::*;
use mlx5_sim::datapath::eth::rx::deliver;
use mlx5_sim::link::Link;
use mlx5_sim::wire::Port;

use crate::eth::{self as e, Eth};

/// The data area: keys cover its first half only.
const DATA_LEN: usize = 64 << 10;
/// The largest frame: the default vport MTU (1522) less the FCS.
const MAX_FRAME: usize = 1518;

pub(super) struct EthFuzz {
    env: Env<Guarded>,
    x: Eth,
    wire: Link,
    data: u64,
    keys: Vec<u32>,
    /// The untouchable half of the data area, as written.
    outside: Vec<u8>,
    tame: bool,
}

impl EthFuzz {
    pub(super) fn new(rng: &mut Rng) -> EthFuzz {
        let mut env = Env::new(Guarded::new(8 << 20), 1);
        let (a, b) = Link::pair();
        *env.raw.dev.f().lock_hca().port_mut() = Port::on_link(a);
        let x = e::eth(&mut env);
        let data = env.alloc(DATA_LEN);
        let half = DATA_LEN as u64 / 2;
        let k1 = env.mkey(data, half, dp::LR | dp::LW);
        let k2 = env.mkey(data, 4096, dp::LR);
        let outside = rng.bytes(DATA_LEN / 2);
        env.write(data + half, &outside);
        EthFuzz {
            env,
            x,
            wire: b,
            data,
            keys: vec![k1, k2],
            outside,
            tame: false,
        }
    }

    fn key(&self, rng: &mut Rng) -> u32 {
        pick_key(rng, self.tame, &self.keys)
    }

    fn addr(&self, rng: &mut Rng, len: u32) -> u64 {
        let half = DATA_LEN as u64 / 2;
        if self.tame {
            return self.data + rng.below(half - u64::from(len).min(half));
        }
        match rng.below(8) {
            0 => rng.interesting(),
            1 => self.data + half - rng.below(64),
            _ => self.data + rng.below(DATA_LEN as u64),
        }
    }

    fn len(&self, rng: &mut Rng) -> u32 {
        if self.tame {
            return rng.range(1, 600) as u32;
        }
        match rng.below(6) {
            0 => 0,
            1 => rng.interesting() as u32,
            2 => rng.range(1, 4000) as u32,
            _ => rng.range(1, 200) as u32,
        }
    }

    /// A send WQE at counter `idx`, padded to whole basic blocks.
    fn send_wqe(&self, rng: &mut Rng, idx: u16) -> Vec<u8> {
        let sqn = self.x.sq.n;
        if !self.tame && rng.chance(100) {
            let n = 64 * rng.range(1, 4) as usize;
            let mut w = rng.bytes(n);
            if rng.chance(500) {
                let ds = w[7] & 0x3f;
                w[4..8].copy_from_slice(&wqe::qpn_ds(sqn, ds).to_be_bytes());
            }
            return w;
        }
        let n = rng.below(300) as usize;
        let frame = e::udp_frame(&rng.bytes(n));
        let ihs = if self.tame {
            rng.pick(&[0usize, 14, 18, 42])
        } else {
            rng.below(frame.len() as u64 + 1) as usize
        };
        let mut dsegs = Vec::new();
        for _ in 0..rng.range(if self.tame { 1 } else { 0 }, 3) {
            let len = self.len(rng);
            dsegs.push(dp::dseg(len, self.key(rng), self.addr(rng, len)));
        }
        let any = rng.u32() as u8;
        let cs = rng.pick(&[0u8, e::CSUM, any]);
        let cs = if self.tame { cs & e::CSUM } else { cs };
        let any = rng.u32() as u8;
        let fm_ce_se = rng.pick(&[0u8, wqe::ctrl::CQ_UPDATE, any]);
        let mut w = e::eth_wqe(sqn, idx, fm_ce_se, cs, &frame[..ihs], &dsegs);
        if !self.tame {
            match rng.below(12) {
                0 => w[7] = rng.u32() as u8,                                 // ds
                1 => w[3] = rng.u32() as u8,                                 // opcode
                2 => w[16 + rng.below(16) as usize] = rng.u32() as u8,       // Ethernet segment
                3 => w[4..7].copy_from_slice(&rng.u32().to_be_bytes()[..3]), // SQN
                4 => w[0] = rng.u32() as u8,                                 // opmod
                _ => {}
            }
        }
        let pad = w.len().div_ceil(64) * 64;
        w.resize(pad.max(64), 0);
        w
    }

    /// A frame for the RQ: mostly UDP frames, some mutated, some random bytes.
    fn frame(&self, rng: &mut Rng) -> Vec<u8> {
        let n = rng.below(1400) as usize;
        let mut f = e::udp_frame(&rng.bytes(n));
        if self.tame {
            return f;
        }
        match rng.below(6) {
            0 => {
                let n = rng.below(3000) as usize;
                rng.bytes(n)
            }
            1 => {
                let n = rng.below(f.len() as u64) as usize;
                f.truncate(n);
                f
            }
            2 => {
                for _ in 0..rng.range(1, 8) {
                    let i = rng.below(f.len() as u64) as usize;
                    f[i] = rng.u32() as u8;
                }
                f
            }
            _ => f,
        }
    }

    /// Brings an SQ or RQ in ERR (or moved to RST by a hostile MODIFY) back as Linux does;
    /// software's counter restarts at 0.
    fn recover(&mut self) {
        let sq = e::query_state(&mut self.env, true, self.x.sq.n) as u8;
        if sq != sqc_state::RDY {
            if sq == sqc_state::ERR {
                e::modify(&mut self.env, true, self.x.sq.n, sq, sqc_state::RST);
            }
            e::modify(
                &mut self.env,
                true,
                self.x.sq.n,
                sqc_state::RST,
                sqc_state::RDY,
            );
            self.x.sq.pi = 0;
        }
        let rq = e::query_state(&mut self.env, false, self.x.rq.n) as u8;
        if rq != rqc_state::RDY {
            if rq == rqc_state::ERR {
                e::modify(&mut self.env, false, self.x.rq.n, rq, rqc_state::RST);
            }
            e::modify(
                &mut self.env,
                false,
                self.x.rq.n,
                rqc_state::RST,
                rqc_state::RDY,
            );
            self.x.rq.pi = 0;
            self.env.write(self.x.rq.dbr, &0u32.to_be_bytes());
        }
    }

    /// A hostile Ethernet object command: a create input with random bytes changed in its
    /// context (what it creates is destroyed again), or a modify / query / destroy naming a
    /// live object, a random one or a random state. The live queues stay (a destroy of one is
    /// refused while it is named, or recreated by nothing: only spares are destroyed).
    fn command(&mut self, rng: &mut Rng) {
        let (td, tisn, rqn, cqn) = (self.x.td, self.x.tisn, self.x.rq.n, self.x.scq.cqn);
        let (buf, dbr) = (self.x.sq.buf, self.x.sq.dbr);
        let (mut i, destroy) = match rng.below(6) {
            0 => (
                e::tis_input(td),
                (opcode::DESTROY_TIS, destroy_tis_in::TISN),
            ),
            1 => (
                e::sq_input(&self.env, cqn, tisn, 6, buf, dbr),
                (opcode::DESTROY_SQ, destroy_sq_in::SQN),
            ),
            2 => (
                e::rq_input(&self.env, cqn, 4, 5, buf, dbr),
                (opcode::DESTROY_RQ, destroy_rq_in::RQN),
            ),
            3 => (
                e::tir_input(td, rqn),
                (opcode::DESTROY_TIR, destroy_tir_in::TIRN),
            ),
            4 => {
                // A modify of a live queue to a random state.
                let sq = rng.chance(500);
                let n = if sq { self.x.sq.n } else { rqn };
                let (cur, next) = (rng.below(4) as u8, rng.below(4) as u8);
                e::modify(&mut self.env, sq, n, cur, next);
                return;
            }
            _ => {
                // A query naming a live object or any number; a destroy naming any number
                // (the live objects stay: the checks after the step need them).
                let op = rng.pick(&[
                    opcode::QUERY_SQ,
                    opcode::QUERY_RQ,
                    opcode::QUERY_TIS,
                    opcode::QUERY_TIR,
                    opcode::DESTROY_TIS,
                    opcode::DESTROY_RQ,
                    opcode::DESTROY_TIR,
                ]);
                let any = rng.u32() & 0xff_ffff;
                let live = rng.pick(&[tisn, rqn, self.x.tirn, self.x.sq.n]);
                let query = matches!(
                    op,
                    opcode::QUERY_SQ | opcode::QUERY_RQ | opcode::QUERY_TIS | opcode::QUERY_TIR
                );
                let n = if query && rng.chance(500) { live } else { any };
                let live_numbers = [tisn, rqn, self.x.tirn, self.x.sq.n];
                if !query && live_numbers.contains(&n) {
                    return;
                }
                let mut i = raw::input(op, 0, 16);
                raw::set(&mut i, destroy_sq_in::SQN, n);
                let _ = self.env.raw.exec(&i, query_sq_out::BYTES);
                return;
            }
        };
        // Change a few bytes of the context (0x20 on: the header is the dispatcher's).
        for _ in 0..rng.range(1, 4) {
            let at = 0x20 + rng.below(i.len() as u64 - 0x20) as usize;
            i[at] = rng.u32() as u8;
        }
        let d = self.env.raw.exec(&i, 16);
        if d.status() == 0 {
            let n = u32::from_be_bytes(d.out[8..12].try_into().unwrap()) & 0xff_ffff;
            let mut x = raw::input(destroy.0, 0, 16);
            raw::set(&mut x, destroy.1, n);
            let _ = self.env.raw.exec(&x, 16);
        }
    }
}

impl Epoch for EthFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.tame = rng.chance(500);
        // WQEs out: one to three WQEs, one doorbell (or a hostile one).
        let mut last = Vec::new();
        for _ in 0..rng.range(1, 3) {
            let w = self.send_wqe(rng, self.x.sq.pi);
            let size = 1u64 << self.x.sq.log_sz;
            for (k, bb) in w.chunks(64).enumerate() {
                let slot = (u64::from(self.x.sq.pi) + k as u64) % size;
                self.env.write(self.x.sq.buf + slot * 64, bb);
            }
            self.x.sq.pi = self.x.sq.pi.wrapping_add((w.len() / 64) as u16);
            last = w;
        }
        let dbr = if self.tame || rng.chance(950) {
            u32::from(self.x.sq.pi)
        } else {
            rng.u32()
        };
        self.env.write(self.x.sq.dbr + 4, &dbr.to_be_bytes());
        let reg = u64::from(self.env.uar) * 4096 + 0x800;
        let v = if self.tame || rng.chance(900) {
            u64::from_le_bytes(last[0..8].try_into().unwrap())
        } else {
            rng.u64()
        };
        self.env.raw.dev.write64(reg, v);
        // Frames in: receive WQEs (some bogus), then frames to the TIR (or to no TIR).
        for _ in 0..rng.range(0, 3) {
            let sges: Vec<(u32, u32, u64)> = (0..rng.range(1, 2))
                .map(|_| {
                    let len = if self.tame { 2048 } else { self.len(rng) };
                    (len, self.key(rng), self.addr(rng, len))
                })
                .collect();
            e::post_rq(&self.env, &mut self.x.rq, &sges);
        }
        for _ in 0..rng.range(0, 3) {
            let f = self.frame(rng);
            let tirn = if self.tame || rng.chance(950) {
                self.x.tirn
            } else {
                rng.u32() & 0xff_ffff
            };
            let r = {
                let func = self.env.raw.dev.f();
                let mut h = func.lock_hca();
                deliver(&mut h.dp(), tirn, &f)
            };
            if r.is_ok() {
                STATS.eth_received.fetch_add(1, Ordering::Relaxed);
            }
        }
        // What went out must be frames.
        while let Ok(Some(f)) = self.wire.recv() {
            if f.len() < 60 || f.len() > MAX_FRAME {
                return Err(format!("the port sent a frame of {} bytes", f.len()));
            }
            STATS.eth_sent.fetch_add(1, Ordering::Relaxed);
        }
        reap(&self.env, &mut self.x.scq)?;
        reap(&self.env, &mut self.x.rcq)?;
        if !self.tame && rng.chance(100) {
            self.command(rng);
        }
        let _ = self.env.drain_eq();
        self.recover();
        Ok(())
    }

    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()?;
        let half = DATA_LEN as u64 / 2;
        if self.env.read(self.data + half, DATA_LEN / 2) != self.outside {
            return Err("a receive wrote outside the memory its keys cover".into());
        }
        Ok(())
    }

    fn worn_out(&self) -> bool {
        self.env.raw.dev.ram.left() < (1 << 20)
    }
}
