//! Target: commands.

use super::cmd_queue::random_opcode;
use super::*;

pub(super) struct CommandFuzz {
    env: Env<Guarded>,
    /// Object numbers seen in outputs (planted into later inputs).
    ids: Vec<u32>,
    /// Guest pages the harness may offer (MANAGE_PAGES, PAS entries).
    pages: Vec<u64>,
    /// A contiguous scratch area for queue buffers built from templates.
    scratch: u64,
    cqs: Vec<u32>,
    qps: Vec<u32>,
    mkeys: Vec<u32>,
    pds: Vec<u32>,
}

const SCRATCH: u64 = 64 * 4096;

impl CommandFuzz {
    pub(super) fn new() -> CommandFuzz {
        let env = Env::new(Guarded::new(8 << 20), 1);
        let ids = vec![env.uar, env.eqn, env.pd];
        let pages = (0..64).map(|_| env.raw.dev.alloc(4096, 4096)).collect();
        let scratch = env.raw.dev.alloc(SCRATCH as usize, 4096);
        let pds = vec![env.pd];
        CommandFuzz {
            env,
            ids,
            pages,
            scratch,
            cqs: Vec::new(),
            qps: Vec::new(),
            mkeys: Vec::new(),
            pds,
        }
    }

    fn one(rng: &mut Rng, xs: &[u32]) -> u32 {
        if xs.is_empty() || rng.chance(100) {
            rng.interesting() as u32
        } else {
            rng.pick(xs)
        }
    }

    /// A valid-looking input for a common opcode, built like the raw datapath helpers build
    /// them, and its output length. The caller mutates it a little.
    fn template(&mut self, rng: &mut Rng) -> (Vec<u8>, usize) {
        let buf = self.scratch + rng.below(SCRATCH / 4096 / 2) * 4096;
        let dbr = self.scratch + SCRATCH - 64 * (1 + rng.below(8));
        let env = &self.env;
        match rng.below(12) {
            0 => (env.cq_input(rng.range(0, 8) as u32, buf, dbr), 16),
            1 => {
                let (s, r) = (Self::one(rng, &self.cqs), Self::one(rng, &self.cqs));
                let pd = Self::one(rng, &self.pds);
                let i = env.qp_input(
                    pd,
                    s,
                    r,
                    rng.range(0, 8) as u32,
                    rng.range(0, 7) as u32,
                    rng.range(0, 4) as u32,
                    buf,
                    dbr,
                );
                (i, 16)
            }
            2 => {
                let pd = Self::one(rng, &self.pds);
                let addr = self.scratch + rng.below(SCRATCH);
                let len = rng.below(SCRATCH);
                let variant = rng.below(4) as u8;
                (env.mkey_input(pd, addr, len, rng.u32() as u8, variant), 16)
            }
            3 => (env.rst2init_input(Self::one(rng, &self.qps)), 16),
            4 => {
                let qpn = Self::one(rng, &self.qps);
                let r = Self::one(rng, &self.qps);
                let i =
                    env.init2rtr_input(qpn, r, env.gid, env.mac, rng.u32(), rng.below(32) as u32);
                (i, 16)
            }
            5 => {
                let qpn = Self::one(rng, &self.qps);
                let i = env.rtr2rts_input(
                    qpn,
                    rng.u32(),
                    rng.below(8) as u32,
                    rng.below(8) as u32,
                    rng.below(32) as u32,
                );
                (i, 16)
            }
            6 => {
                let op = rng.pick(&[opcode::QP_2ERR, opcode::QP_2RST, opcode::DESTROY_QP]);
                let mut i = raw::input(op, 0, qp_2rst_in::BYTES);
                raw::set(&mut i, qp_2rst_in::QPN, Self::one(rng, &self.qps));
                (i, 16)
            }
            7 => {
                let mut i = raw::input(opcode::QUERY_QP, 0, query_qp_in::BYTES);
                raw::set(&mut i, query_qp_in::QPN, Self::one(rng, &self.qps));
                (i, query_qp_out::BYTES)
            }
            8 => {
                let op = rng.pick(&[opcode::DESTROY_CQ, opcode::QUERY_CQ]);
                let mut i = raw::input(op, 0, 16);
                raw::set(&mut i, destroy_cq_in::CQN, Self::one(rng, &self.cqs));
                (i, 0x300)
            }
            9 => {
                let mut i = raw::input(opcode::DESTROY_MKEY, 0, destroy_mkey_in::BYTES);
                raw::set(
                    &mut i,
                    destroy_mkey_in::MKEY_INDEX,
                    Self::one(rng, &self.mkeys),
                );
                (i, 16)
            }
            10 => (raw::input(opcode::ALLOC_PD, 0, 16), 16),
            _ => {
                let mut i = raw::input(opcode::DEALLOC_PD, 0, 16);
                raw::set(&mut i, dealloc_pd_in::PD, Self::one(rng, &self.pds));
                (i, 16)
            }
        }
    }

    /// Records the number a successful create/alloc returned.
    fn record(&mut self, op: u16, out: &[u8]) {
        if out.len() < 12 {
            return;
        }
        let v = u32::from_be_bytes(out[8..12].try_into().unwrap()) & 0xff_ffff;
        let list = match op {
            opcode::CREATE_CQ => &mut self.cqs,
            opcode::CREATE_QP => &mut self.qps,
            opcode::CREATE_MKEY => &mut self.mkeys,
            opcode::ALLOC_PD => &mut self.pds,
            _ => &mut self.ids,
        };
        if list.len() < 64 {
            list.push(v);
        }
    }
}

impl Epoch for CommandFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        if rng.chance(600) {
            let (mut input, outlen) = self.template(rng);
            let op = u16::from_be_bytes([input[0], input[1]]);
            for _ in 0..rng.range(0, 3) {
                let at = 8 + rng.below(input.len() as u64 - 8) as usize;
                input[at] = if rng.chance(500) { rng.u32() as u8 } else { 0 };
            }
            let d = self.env.raw.exec(&input, outlen);
            STATS.commands.fetch_add(1, Ordering::Relaxed);
            if d.delivery.is_none() {
                return Err(format!("templated command {op:#x}: never completed"));
            }
            if d.delivery == Some(0) && d.status() == 0 {
                STATS.commands_ok.fetch_add(1, Ordering::Relaxed);
                self.record(op, &d.out);
            }
            return Ok(());
        }
        let op = random_opcode(rng);
        let op_mod = if rng.chance(700) {
            rng.below(4) as u16
        } else {
            rng.u32() as u16
        };
        let max_in = 16 + 512 * raw::BLOCKS;
        let inlen = match rng.below(5) {
            0 => rng.range(8, 64) as usize,
            1 => rng.range(16, 0x400) as usize,
            2 => rng.range(0x100, 0x1000) as usize,
            _ => rng.range(16, max_in as u64) as usize,
        };
        let mut input = raw::input(op, op_mod, inlen.max(8));
        // Sparse mutations: most fields stay zero, a few get interesting values, live object
        // numbers or guest page addresses.
        let words = input.len() / 4;
        for _ in 0..rng.range(0, 12) {
            let w = 2 + rng.below(words.saturating_sub(2).max(1) as u64) as usize;
            if w >= words {
                continue;
            }
            let v = match rng.below(6) {
                0 => rng.pick(&self.ids),
                1 => {
                    let p = rng.pick(&self.pages);
                    if w + 1 < words {
                        input[w * 4..w * 4 + 4].copy_from_slice(&((p >> 32) as u32).to_be_bytes());
                        input[w * 4 + 4..w * 4 + 8].copy_from_slice(&(p as u32).to_be_bytes());
                    }
                    continue;
                }
                2 => rng.u32() & 0xff,
                _ => rng.interesting() as u32,
            };
            input[w * 4..w * 4 + 4].copy_from_slice(&v.to_be_bytes());
        }
        if rng.chance(50) {
            let n = input.len();
            rng.fill(&mut input[8..n]);
        }
        let outlen = match rng.below(4) {
            0 => rng.range(0, 16) as usize,
            1 => 16,
            _ => rng.range(16, (512 * raw::BLOCKS) as u64) as usize,
        };
        let d = self.env.raw.exec(&input, outlen);
        STATS.commands.fetch_add(1, Ordering::Relaxed);
        if d.delivery == Some(0) && outlen >= 8 && d.status() == 0 {
            STATS.commands_ok.fetch_add(1, Ordering::Relaxed);
        }
        if d.delivery.is_none() {
            return Err(format!(
                "command {op:#x} op_mod {op_mod:#x} inlen {inlen} outlen {outlen}: never completed"
            ));
        }
        if d.delivery == Some(0) && outlen >= 12 && d.status() == 0 {
            // Remember numbers the device handed out (they sit in the output's third dword
            // for every create/alloc command).
            self.record(op, &d.out);
        }
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.env.raw.dev.ram.check_guards()
    }
    fn worn_out(&self) -> bool {
        self.env.raw.dev.ram.left() < (1 << 20)
    }
}
