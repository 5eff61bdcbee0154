//! The fuzzer in the middle: frames noted for the tainted-slot evidence, delivered (and kept
//! for mutation), duplicated, swapped or replaced in flight on their way between the HCAs.

use super::*;

impl WireFuzz {
    /// Notes what a frame for side `to` tells the QPs there (for the tainted-slot evidence,
    /// when it is `delivered`), and returns the slot index its DestQP names, if any (`SLOTS` =
    /// the fresh pair).
    fn note(&mut self, to: usize, f: &[u8], delivered: bool) -> Option<usize> {
        let Ok(Frame::Roce(r)) = decode(f) else {
            return None;
        };
        if !r.icrc_ok() {
            return None;
        }
        let qpn = r.hdrs.bth.dest_qp;
        let src = ip_to_gid(r.hdrs.ip.src());
        let from_peer = src == self.env[other(to)].gid || src == gid_v6(other(to));
        let info = r.hdrs.bth.opcode.info()?;
        let mut hit = None;
        let slots = self
            .slots
            .iter_mut()
            .chain(std::iter::once(&mut self.clean));
        for (i, s) in slots.enumerate() {
            let Some(ends) = s.ends.as_mut() else {
                continue;
            };
            let e = &mut ends[to];
            if e.qp.qpn != qpn {
                continue;
            }
            hit = Some(i);
            if !from_peer || !delivered {
                break;
            }
            match info.kind {
                OpKind::ReadResponse | OpKind::Acknowledge | OpKind::AtomicAcknowledge => {
                    if e.resp.len() >= 4096 {
                        e.resp.pop_front();
                    }
                    e.resp.push_back((r.hdrs.bth.psn, r.hdrs.bth.opcode));
                }
                OpKind::Send if info.position.is_end() => e.msgs_in += 1,
                OpKind::Write if info.position.is_end() && r.hdrs.ext.imm_dt.is_some() => {
                    e.msgs_in += 1
                }
                _ => {}
            }
            break;
        }
        hit
    }

    fn taint(&mut self, i: Option<usize>) {
        if let Some(i) = i {
            if i < self.slots.len() {
                self.slots[i].tainted = true;
            } else {
                self.clean.tainted = true;
            }
        }
    }

    pub(super) fn deliver(&mut self, to: usize, f: Vec<u8>, genuine: bool) {
        let hit = self.note(to, &f, true);
        if genuine {
            if self.pool[to].len() >= POOL {
                self.pool[to].pop_front();
            }
            self.pool[to].push_back(f.clone());
        } else {
            STATS.wire_hostile.fetch_add(1, Ordering::Relaxed);
            if hit.is_some() {
                STATS.wire_hostile_to_qp.fetch_add(1, Ordering::Relaxed);
            }
            self.taint(hit);
        }
        let _ = self.mitm[to].send(f);
    }

    /// Moves what each HCA sent to the other; returns how many frames moved.
    pub(super) fn forward(&mut self, rng: &mut Rng) -> usize {
        let mut moved = 0;
        for from in 0..2 {
            let to = other(from);
            let mut batch = Vec::new();
            while let Ok(Some(f)) = self.mitm[from].recv() {
                batch.push(f);
                if batch.len() > 4096 {
                    break;
                }
            }
            moved += batch.len();
            if batch.len() >= 2 && rng.chance(self.perturb) {
                let i = rng.below(batch.len() as u64 - 1) as usize;
                batch.swap(i, i + 1);
            }
            for f in batch {
                if self.hostile_left > 0 && rng.chance(self.mutate_in_flight) {
                    // Replaced in flight: the original is lost (its QP's slot is tainted:
                    // the loss costs it a timeout) and a mutation goes in its place.
                    self.hostile_left -= 1;
                    let lost = self.note(to, &f, false);
                    self.taint(lost);
                    let h = self.mutate(&f, to, rng);
                    self.deliver(to, h, false);
                    continue;
                }
                if rng.chance(self.perturb) {
                    self.deliver(to, f.clone(), true);
                }
                self.deliver(to, f, true);
            }
        }
        moved
    }
}
