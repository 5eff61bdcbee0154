//! One `wire` iteration: the hostile phase (the slots' traffic with hostile frames injected and
//! mutated in flight), then the clean phase (a fresh QP pair must work).

use super::*;

impl WireFuzz {
    /// Runs `f` on slot `i` taken out of `self` (so `f` may use `self` too).
    fn with_slot<T>(&mut self, i: usize, f: impl FnOnce(&mut Self, &mut Slot) -> T) -> T {
        let mut s = std::mem::replace(&mut self.slots[i], Slot::placeholder());
        let r = f(self, &mut s);
        self.slots[i] = s;
        r
    }

    pub(super) fn hostile_phase(&mut self, rng: &mut Rng) -> Result<(), String> {
        for i in 0..self.slots.len() {
            self.with_slot(i, |w, s| {
                if s.ends.is_none() {
                    let v6 = w.v6_per_mille > 0 && w.v6_rng.chance(w.v6_per_mille);
                    w.open(s, v6);
                }
                if !s.tainted {
                    w.refill(s, rng);
                }
                // Work both ways.
                for _ in 0..rng.range(0, 4) {
                    let side = rng.below(2) as usize;
                    w.post(s, side, Self::random_op(rng), rng);
                }
                if s.tainted {
                    for _ in 0..rng.range(0, 2) {
                        w.post_spare_recv(s, rng.below(2) as usize, rng);
                    }
                }
            });
        }
        // The hostile frames: when, and to whom.
        let n = match rng.below(8) {
            0 => 0,
            1 => rng.range(8, 32),
            _ => rng.range(1, 8),
        };
        let plan: Vec<(usize, usize)> = (0..n)
            .map(|_| {
                let step = if rng.chance(700) {
                    rng.below(4)
                } else {
                    rng.below(16)
                };
                (step as usize, rng.below(2) as usize)
            })
            .collect();
        self.perturb = rng.pick(&[0, 0, 20, 100]);
        self.mutate_in_flight = rng.pick(&[0, 0, 50, 200]);
        self.hostile_left = if n == 0 { 0 } else { rng.range(0, 4) as u32 };
        let r = self.pump(rng, &plan);
        self.perturb = 0;
        self.mutate_in_flight = 0;
        self.hostile_left = 0;
        r?;
        for i in 0..self.slots.len() {
            self.check_mem(i, &self.slots[i])?;
            let s = &mut self.slots[i];
            if s.tainted {
                s.tainted_iters += 1;
                let err = s
                    .ends
                    .as_ref()
                    .is_some_and(|e| e.iter().any(|e| e.error_seen));
                if err || s.tainted_iters > 4 || rng.chance(300) {
                    self.with_slot(i, |w, s| w.close(s));
                    let s = &mut self.slots[i];
                    s.tainted = false;
                    // Its memory took hostile writes: the shadows follow the memory again.
                    for side in 0..2 {
                        for b in [
                            &mut s.mem[side].local,
                            &mut s.mem[side].remote,
                            &mut s.mem[side].recv,
                        ] {
                            b.shadow = self.env[side].read(b.at, BLOCK as usize);
                        }
                    }
                }
            }
        }
        // Frames still on the wire for QPs just destroyed must not reach a new QP that gets
        // the same number: the wire is emptied (a loss only tainted QPs can notice).
        for e in &self.env {
            e.dev().poll();
        }
        for m in &mut self.mitm {
            while let Ok(Some(_)) = m.recv() {}
        }
        Ok(())
    }

    /// A fresh QP pair after the burst: a WRITE, a READ, a SEND (with or without immediate)
    /// and an atomic, each in a random direction, must all complete exactly.
    pub(super) fn clean_phase(&mut self, rng: &mut Rng) -> Result<(), String> {
        let mut c = std::mem::replace(&mut self.clean, Slot::placeholder());
        let v6 = self.v6_per_mille > 0 && self.v6_rng.chance(self.v6_per_mille);
        self.open(&mut c, v6);
        self.refill(&mut c, rng);
        for op in [
            Op::Write,
            Op::Read,
            rng.pick(&[Op::Send, Op::SendImm, Op::WriteImm]),
            rng.pick(&[Op::FetchAdd, Op::CompSwap]),
        ] {
            let side = rng.below(2) as usize;
            self.post(&mut c, side, op, rng);
        }
        self.clean = c;
        let r = self.pump(rng, &[]).and_then(|_| {
            if self.clean.tainted {
                return Err("a frame for the fresh QP pair came from nowhere".into());
            }
            self.check_mem(SLOTS, &self.clean)
        });
        let mut c = std::mem::replace(&mut self.clean, Slot::placeholder());
        self.close(&mut c);
        self.clean = c;
        r.map_err(|e| format!("fresh QP pair after the burst: {e}"))
    }
}
