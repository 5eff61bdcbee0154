//! The `wire` target's oracle: completions reaped and judged, the clean slots' memory
//! against its shadow, the canaries, and the pump that runs both HCAs and the wire.

use super::*;

impl WireFuzz {
    pub(super) fn reap(&mut self) -> Result<(), String> {
        let mut slots = std::mem::take(&mut self.slots);
        let mut clean = std::mem::replace(&mut self.clean, Slot::placeholder());
        let mut r = Ok(());
        for (i, s) in slots
            .iter_mut()
            .chain(std::iter::once(&mut clean))
            .enumerate()
        {
            r = r.and_then(|_| self.reap_slot(i, s));
        }
        self.slots = slots;
        self.clean = clean;
        for e in &mut self.env {
            if !e.drain_eq().is_empty() {
                e.raw.eq_doorbell(e.uar, e.eqn, e.eq_ci, false);
            }
        }
        r
    }

    fn reap_slot(&mut self, si: usize, slot: &mut Slot) -> Result<(), String> {
        let tainted = slot.tainted;
        let Some(ends) = slot.ends.as_mut() else {
            return Ok(());
        };
        for (side, e) in ends.iter_mut().enumerate() {
            let mut n = 0;
            while let Some(c) = self.env[side].poll_cq(&mut e.cq) {
                n += 1;
                if n > 256 {
                    return Err(format!("slot {si} side {side}: a CQ keeps producing CQEs"));
                }
                let why = |what: String| {
                    format!(
                        "slot {si} side {side} QP {:#x} ({}): {what}; CQE {:02x?}",
                        e.qp.qpn,
                        if tainted { "tainted" } else { "clean" },
                        c.0
                    )
                };
                if c.qpn() != e.qp.qpn {
                    return Err(why(format!("CQE for QP {:#x}", c.qpn())));
                }
                match c.opcode() {
                    cqe::opcode::REQ | cqe::opcode::REQ_ERR => {
                        let Some(p) = e.sq.pop_front() else {
                            return Err(why("send completion with no WQE outstanding".into()));
                        };
                        if c.wqe_counter() != p.idx {
                            return Err(why(format!(
                                "send completion for WQE {} but {} is the oldest outstanding",
                                c.wqe_counter(),
                                p.idx
                            )));
                        }
                        if c.opcode() == cqe::opcode::REQ_ERR {
                            e.error_seen = true;
                            if !tainted {
                                return Err(why(format!(
                                    "{:?} failed (syndrome {:#x}) on a slot no hostile frame reached",
                                    p.op,
                                    c.syndrome()
                                )));
                            }
                            continue;
                        }
                        if c.wqe_opcode() != p.op.wqe_opcode() {
                            return Err(why(format!("completion opcode for {:?}", p.op)));
                        }
                        if p.op == Op::Read && c.byte_cnt() != p.len {
                            return Err(why(format!(
                                "READ of {} completed with byte count {}",
                                p.len,
                                c.byte_cnt()
                            )));
                        }
                        if tainted && !evidence(e, &p) {
                            return Err(why(format!(
                                "{p:?} completed successfully but no response proving it reached \
                                 the QP (responses seen {:?})",
                                e.resp.iter().rev().take(8).collect::<Vec<_>>()
                            )));
                        }
                    }
                    cqe::opcode::RESP_WR_IMM
                    | cqe::opcode::RESP_SEND
                    | cqe::opcode::RESP_SEND_IMM
                    | cqe::opcode::RESP_SEND_INV
                    | cqe::opcode::RESP_ERR => {
                        let Some(p) = e.rq.pop_front() else {
                            return Err(why("receive completion with no receive posted".into()));
                        };
                        if c.wqe_counter() != p.idx {
                            return Err(why(format!(
                                "receive completion for WQE {} but {} is the oldest posted",
                                c.wqe_counter(),
                                p.idx
                            )));
                        }
                        if c.opcode() == cqe::opcode::RESP_ERR {
                            e.error_seen = true;
                            if !tainted {
                                return Err(why(format!(
                                    "receive failed (syndrome {:#x}) on a clean slot",
                                    c.syndrome()
                                )));
                            }
                            continue;
                        }
                        e.recv_ok += 1;
                        if c.opcode() != cqe::opcode::RESP_WR_IMM && c.byte_cnt() > p.len {
                            return Err(why(format!(
                                "receive of {} bytes into a buffer of {}",
                                c.byte_cnt(),
                                p.len
                            )));
                        }
                        if e.recv_ok > e.msgs_in {
                            return Err(why(format!(
                                "{} successful receives but only {} messages ended at the QP",
                                e.recv_ok, e.msgs_in
                            )));
                        }
                        if let (false, Some((op, len, imm))) = (tainted, p.expect) {
                            let got = (c.opcode(), c.byte_cnt(), imm.map(|_| c.imm()));
                            if got != (op, len, imm) {
                                return Err(why(format!(
                                    "receive completion {got:x?}, want {:x?}",
                                    (op, len, imm)
                                )));
                            }
                        }
                    }
                    o => return Err(why(format!("CQE opcode {o:#x}"))),
                }
            }
        }
        Ok(())
    }

    /// Whether every clean slot's work is done.
    pub(super) fn clean_done(&self) -> bool {
        self.slots
            .iter()
            .chain(std::iter::once(&self.clean))
            .filter(|s| !s.tainted)
            .filter_map(|s| s.ends.as_ref())
            .all(|e| e.iter().all(|e| e.sq.is_empty() && e.rq.is_empty()))
    }

    /// Runs both HCAs and the fuzzer in the middle until the clean slots are done and the
    /// wire is quiet, injecting `plan`'s hostile frames (step, side) on the way.
    pub(super) fn pump(&mut self, rng: &mut Rng, plan: &[(usize, usize)]) -> Result<(), String> {
        let t0 = self.clock.now_ns();
        let last = plan.iter().map(|p| p.0).max().unwrap_or(0);
        let mut quiet = 0;
        for step in 0..MAX_STEPS {
            for &(_, to) in plan.iter().filter(|p| p.0 == step) {
                let f = self.hostile(to, rng);
                if !f.is_empty() && f.len() <= mlx5_sim::link::MAX_FRAME_LEN {
                    self.deliver(to, f, false);
                }
            }
            for e in &self.env {
                e.dev().poll();
            }
            let moved = self.forward(rng);
            self.reap()?;
            quiet = if moved == 0 { quiet + 1 } else { 0 };
            if step >= last && quiet >= 3 && self.clean_done() {
                return Ok(());
            }
            if !self.step_delay.is_zero() {
                std::thread::sleep(self.step_delay);
            }
            self.clock.advance(if moved == 0 || step >= BUSY_STEPS {
                IDLE_NS
            } else {
                STEP_NS
            });
        }
        if self.clean_done() {
            // The wire never went quiet: only tainted QPs may be talking.
            return Ok(());
        }
        let stuck: Vec<String> = self
            .slots
            .iter()
            .chain(std::iter::once(&self.clean))
            .enumerate()
            .filter(|(_, s)| !s.tainted)
            .filter_map(|(i, s)| s.ends.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| e.iter().any(|e| !e.sq.is_empty() || !e.rq.is_empty()))
            .map(|(i, e)| {
                format!(
                    "slot {i}: A sq {:?} rq {:?}, B sq {:?} rq {:?}",
                    e[0].sq, e[0].rq, e[1].sq, e[1].rq
                )
            })
            .collect();
        Err(format!(
            "clean work never completed ({} µs on the virtual clock, {MAX_STEPS} steps max): {}",
            (self.clock.now_ns() - t0) / 1000,
            stuck.join("; ")
        ))
    }

    /// Memory checks: a clean slot's blocks equal their shadows; a tainted slot's canaries
    /// (the bytes no MR covers) are untouched.
    pub(super) fn check_mem(&self, si: usize, slot: &Slot) -> Result<(), String> {
        for side in 0..2 {
            let m = &slot.mem[side];
            for (name, b) in [
                ("local", &m.local),
                ("remote", &m.remote),
                ("recv", &m.recv),
            ] {
                let now = self.env[side].read(b.at, BLOCK as usize);
                let ranges = if slot.tainted {
                    [
                        0..MR_OFF as usize,
                        (MR_OFF + MR_LEN) as usize..BLOCK as usize,
                    ]
                } else {
                    [0..BLOCK as usize, 0..0]
                };
                for r in ranges {
                    if now[r.clone()] == b.shadow[r.clone()] {
                        continue;
                    }
                    if let Some(i) = r.clone().find(|&i| now[i] != b.shadow[i]) {
                        let in_mr = (MR_OFF as usize..(MR_OFF + MR_LEN) as usize).contains(&i);
                        return Err(format!(
                            "slot {si} side {side} {name} block byte {i:#x} ({}) is {:#04x}, \
                             want {:#04x} ({} slot)",
                            if in_mr {
                                "inside the MR"
                            } else {
                                "outside every MR"
                            },
                            now[i],
                            b.shadow[i],
                            if slot.tainted { "tainted" } else { "clean" }
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether responses that reached `e` prove that `p` completed (IBTA §9.7.5.1: a READ
/// completes with its responses, an atomic with its ATOMIC ACKNOWLEDGE, both never by an
/// implied ACK (rxe_comp.c `check_psn`: COMPST_ERROR_RETRY); anything else with an ACK at or
/// beyond its last PSN, implied or not).
fn evidence(e: &End, p: &Posted) -> bool {
    match p.op {
        Op::Read => (0..=psn_diff(p.last_psn, p.first_psn) as u32).all(|k| {
            let psn = psn_add(p.first_psn, k);
            e.resp.iter().any(|&(x, op)| {
                x == psn && op.info().is_some_and(|i| i.kind == OpKind::ReadResponse)
            })
        }),
        Op::FetchAdd | Op::CompSwap => e
            .resp
            .iter()
            .any(|&(x, op)| x == p.first_psn && op == Opcode::RC_ATOMIC_ACKNOWLEDGE),
        // Local: no response.
        Op::Bind => true,
        _ => e.resp.iter().any(|&(x, _)| psn_diff(x, p.last_psn) >= 0),
    }
}
