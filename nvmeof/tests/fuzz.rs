//! Mutated capsules never panic the core and never reach outside the namespace. Seeds: every
//! command capsule of the shared capture's session (`tests/data/nvmeof_session.txt`), mutated
//! byte by byte and field by field (opcode, flags, SGL, lengths, LBAs, NSIDs), sent on
//! admin, I/O, discovery and unconnected queues, with transfers that sometimes fail and time
//! that runs on (keep-alive). Opcode-specific mutations keep what makes a command reach its
//! data path (a Dataset Management with the deallocate attribute) while its keyed length varies.
//! `NVMEOF_FUZZ_SEED` (hex or decimal) and `NVMEOF_FUZZ_ROUNDS` run another seed or longer.

mod common;

use common::*;
use nvmeof::exec::STAGING_LEN;
use nvmeof::{Backend, BackendError, Dir, ExecError, Local, QueueId, Step, Target};
use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;

/// Rounds and seed unless `NVMEOF_FUZZ_ROUNDS` / `NVMEOF_FUZZ_SEED` say otherwise.
const ROUNDS: usize = 30_000;
const SEED: u64 = 0x00c0_ffee;

/// `NVMEOF_FUZZ_SEED` and `NVMEOF_FUZZ_ROUNDS`, or the defaults.
fn seed_and_rounds() -> (u64, usize) {
    let num = |v: String| {
        let v = v.trim().to_owned();
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
            None => v.replace('_', "").parse(),
        }
        .unwrap_or_else(|e| panic!("{v}: {e}"))
    };
    let seed = std::env::var("NVMEOF_FUZZ_SEED").map_or(SEED, num);
    let rounds = std::env::var("NVMEOF_FUZZ_ROUNDS").map_or(ROUNDS, |v| num(v) as usize);
    (seed, rounds)
}
/// The namespace: 1 MiB, 2048 blocks.
const NS: usize = 1 << 20;

/// A disk that counts every access outside itself (the core must make none).
struct Guarded {
    mem: Vec<u8>,
    outside: usize,
}

impl Guarded {
    fn range(&mut self, off: u64, len: u64) -> Result<std::ops::Range<usize>, BackendError> {
        match off.checked_add(len) {
            Some(end) if end <= self.mem.len() as u64 => Ok(off as usize..end as usize),
            _ => {
                self.outside += 1;
                Err(BackendError::OutOfRange)
            }
        }
    }
}

impl Backend for Guarded {
    fn size(&self) -> u64 {
        self.mem.len() as u64
    }
    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let end = off
            .checked_add(out.len() as u64)
            .ok_or(BackendError::OutOfRange)?;
        assert!(end <= self.mem.len() as u64, "read outside the namespace");
        out.copy_from_slice(&self.mem[off as usize..end as usize]);
        Ok(())
    }
    fn write(&mut self, off: u64, data: &[u8]) -> Result<(), BackendError> {
        let r = self.range(off, data.len() as u64)?;
        self.mem[r].copy_from_slice(data);
        Ok(())
    }
    fn write_zeroes(&mut self, off: u64, len: u64) -> Result<(), BackendError> {
        let r = self.range(off, len)?;
        self.mem[r].fill(0);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}

fn seeds() -> Vec<Vec<u8>> {
    include_str!("data/nvmeof_session.txt")
        .lines()
        .filter(|l| l.starts_with("cmd "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let mut c = unhex(f[2]);
            if f[3] != "-" {
                c.extend(data(f[3]));
            }
            c
        })
        .collect()
}

fn below(rng: &mut SplitMix64, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

/// One mutation of a capsule: flipped bits, set bytes, a field set to an edge value, cut or
/// grown.
fn mutate(rng: &mut SplitMix64, seed: &[u8]) -> Vec<u8> {
    let mut c = seed.to_vec();
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 9) {
            0 if !c.is_empty() => {
                let i = below(rng, c.len());
                c[i] ^= 1 << below(rng, 8);
            }
            1 if !c.is_empty() => {
                let i = below(rng, c.len().min(64));
                c[i] = rng.next_u64() as u8;
            }
            2 => {
                // A field of the SQE (dwords 1, 6..15) to an edge value.
                let edges = [
                    0u32,
                    1,
                    0xff,
                    0xffff,
                    0x7fff_ffff,
                    u32::MAX,
                    2047,
                    2048,
                    4096,
                ];
                let dw = [1usize, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15][below(rng, 11)];
                if c.len() >= 4 * dw + 4 {
                    let v = edges[below(rng, edges.len())];
                    c[4 * dw..4 * dw + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            3 if c.len() >= 64 => {
                // The SGL type byte.
                let types = [0x00, 0x01, 0x02, 0x0f, 0x40, 0x41, 0x4f, 0x20, 0x50, 0xff];
                c[39] = types[below(rng, types.len())];
            }
            4 if c.len() >= 2 => {
                // Opcode and flags.
                c[0] = [0x00, 0x01, 0x02, 0x06, 0x02, 0x08, 0x09, 0x0c, 0x18, 0x7f][below(rng, 10)];
                c[1] = [0x40, 0x00, 0x41, 0x42, 0x80, 0xc0][below(rng, 6)];
            }
            5 if below(rng, 8) == 0 => c.truncate(below(rng, c.len() + 1)),
            5 if c.len() > 64 => c.truncate(64 + below(rng, c.len() - 63)),
            6 => c.extend((0..below(rng, 5000)).map(|_| rng.next_u64() as u8)),
            7 if c.len() >= 64 && below(rng, 2) == 0 => {
                // A Dataset Management deallocate (cdw11 = AD) with a keyed SGL of a varied
                // length and NR: the path that must read only the ranges.
                c[0] = 0x09;
                c[1] = 0x40;
                c[44..48].copy_from_slice(&4u32.to_le_bytes());
                let nr = [0u32, 1, 0xff, 0x100, 0xffff, u32::MAX][below(rng, 6)];
                c[40..44].copy_from_slice(&nr.to_le_bytes());
                let lens = [0u32, 16, 4095, 4096, 4097, 8192, 65536, 1 << 20, 0xff_ffff];
                let len = lens[below(rng, lens.len())];
                c[32..35].copy_from_slice(&len.to_le_bytes()[..3]);
                c[39] = [0x40, 0x4f][below(rng, 2)];
            }
            _ => {
                // The fabrics command type.
                if c.len() > 4 {
                    c[4] = [0x00, 0x01, 0x04, 0x05, 0x08, 0xff][below(rng, 6)];
                }
            }
        }
    }
    c
}

struct Bench {
    t: Target<Guarded>,
    queues: Vec<QueueId>,
}

fn setup() -> Bench {
    let disk = Guarded {
        mem: vec![0u8; NS],
        outside: 0,
    };
    let mut t = Target::new(capture_config(), vec![disk]).unwrap();
    let mut queues = Vec::new();
    // Admin queue and two I/O queues of an NVM controller, keep-alive 5 s.
    let a = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let mut staging = vec![0u8; STAGING_LEN];
    let step = t.submit(a, &connect(0, 31, 5000, 0xffff, NQN, HOSTNQN), &mut staging);
    let Ok(Step::Respond(r)) = step else {
        panic!("{step:?}")
    };
    let _ = t.submit(a, &set_cc(CC_ENABLE), &mut staging);
    queues.push(a);
    for qid in 1..=2 {
        let q = t.accept(&cm_req(qid, 128, 127)).unwrap().queue;
        let c = connect(qid, 127, 0, r.cqe.result as u16, NQN, HOSTNQN);
        let _ = t.submit(q, &c, &mut staging);
        queues.push(q);
    }
    // A discovery controller, and a queue never connected.
    let d = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let disc = "nqn.2014-08.org.nvmexpress.discovery";
    let _ = t.submit(d, &connect(0, 31, 0, 0xffff, disc, HOSTNQN), &mut staging);
    let _ = t.submit(d, &set_cc(CC_ENABLE), &mut staging);
    queues.push(d);
    queues.push(t.accept(&cm_req(3, 16, 15)).unwrap().queue);
    Bench { t, queues }
}

/// Carries out a transfer, checking it stays inside the namespace and the staging buffer.
fn transfer(
    t: &mut Target<Guarded>,
    dir: Dir,
    local: Local,
    staging: &mut [u8],
    rng: &mut SplitMix64,
) {
    match local {
        Local::Buf { len } => {
            assert!(len as usize <= staging.len(), "staging overrun");
            if dir == Dir::FromHost {
                staging[..len as usize]
                    .iter_mut()
                    .for_each(|b| *b = rng.next_u64() as u8);
            }
        }
        Local::Disk { disk, offset, len } => {
            assert_eq!(disk, 0);
            let end = offset.checked_add(u64::from(len)).expect("range overflow");
            assert!(
                end <= NS as u64,
                "transfer outside the namespace: {offset}+{len}"
            );
            if dir == Dir::FromHost {
                let d = &mut t.disk_mut(0).unwrap().mem;
                d[offset as usize..end as usize].fill(rng.next_u64() as u8);
            }
        }
    }
}

#[test]
fn mutated_capsules_never_panic_nor_leave_the_namespace() {
    let seeds = seeds();
    assert_eq!(seeds.len(), 52);
    let (seed, rounds) = seed_and_rounds();
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut b = setup();
    let mut now = 0u64;
    let mut staging = vec![0u8; STAGING_LEN];
    let (mut ok, mut transfers, mut resets) = (0usize, 0usize, 0usize);
    for round in 0..rounds {
        let seed = &seeds[below(&mut rng, seeds.len())];
        let capsule = if below(&mut rng, 8) == 0 {
            seed.clone()
        } else {
            mutate(&mut rng, seed)
        };
        let q = b.queues[below(&mut rng, b.queues.len())];
        match b.t.submit(q, &capsule, &mut staging) {
            Ok(Step::Respond(r)) => {
                assert_eq!(r.cqe.cid, u16::from_le_bytes([capsule[2], capsule[3]]));
                ok += usize::from(r.cqe.status == 0);
            }
            Ok(Step::Transfer(tr)) => {
                assert_eq!(tr.remote.len, tr.local.len());
                transfer(&mut b.t, tr.dir, tr.local, &mut staging, &mut rng);
                let good = below(&mut rng, 50) != 0;
                match b.t.complete_transfer(q, tr.tag, good, &staging) {
                    Ok(r) => assert_eq!(r.cqe.cid, u16::from_le_bytes([capsule[2], capsule[3]])),
                    Err(e) => assert_eq!(e, ExecError::TransferFailed),
                }
                transfers += 1;
            }
            Ok(Step::Hold) => {}
            Err(ExecError::UnknownQueue | ExecError::ShortCapsule(_) | ExecError::Overrun) => {}
            Err(e) => panic!("round {round}: {e:?}"),
        }
        if below(&mut rng, 200) == 0 {
            now += 3000;
            b.t.tick(now);
        }
        // The transport disconnects what the core tears down; then the host comes back.
        let mut gone = false;
        while let Some(dead) = b.t.take_teardown() {
            b.t.close(dead);
            gone = true;
        }
        if gone || below(&mut rng, 2000) == 0 {
            let outside = b.t.disk(0).unwrap().outside;
            assert_eq!(
                outside, 0,
                "round {round}: backend access outside the namespace"
            );
            for q in std::mem::take(&mut b.queues) {
                b.t.close(q);
            }
            assert_eq!((b.t.controllers(), b.t.queues()), (0, 0), "round {round}");
            b = setup();
            b.t.tick(now);
            resets += 1;
        }
    }
    assert_eq!(b.t.disk(0).unwrap().outside, 0);
    // The mutations reached the commands, not just the parser.
    assert!(
        ok > rounds / 25 && transfers > rounds / 50 && resets > rounds / 300,
        "seed {seed:#x}: {ok} {transfers} {resets}"
    );
}
