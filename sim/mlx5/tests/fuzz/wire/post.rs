//! The `wire` target's work requests: every operation posted with the receive it needs, its
//! effect applied to the shadows, spare receives on tainted slots, the random mix of operations.

use super::*;

impl WireFuzz {
    /// Posts `op` from side `s` of `slot`, with the receive it needs on the other side, and
    /// applies its effect to the shadows. Returns false when it did not fit.
    pub(super) fn post(&mut self, slot: &mut Slot, s: usize, op: Op, rng: &mut Rng) -> bool {
        let r = other(s);
        let len: u32 = if op.atomic() {
            8
        } else {
            match rng.below(6) {
                0 => 0,
                1 | 2 => rng.range(1, 64) as u32,
                _ => rng.range(1, 3000) as u32,
            }
        };
        let ends = slot.ends.as_mut().expect("open slot");
        if ends[s].sq.len() >= 24 || ends[r].rq.len() >= 20 {
            return false;
        }
        let need = u64::from(len.max(8)).next_multiple_of(8);
        let (lm, rm) = if s == 0 {
            let [a, b] = &mut slot.mem;
            (a, b)
        } else {
            let [a, b] = &mut slot.mem;
            (b, a)
        };
        if lm.local_next + need > MR_LEN || rm.remote_next + need > MR_LEN {
            return false;
        }
        let loff = MR_OFF + lm.local_next;
        let roff = MR_OFF + rm.remote_next;
        lm.local_next += need;
        rm.remote_next += need;
        let laddr = lm.local.at + loff;
        let raddr = rm.remote.at + roff;
        // Every other remote range goes through the peer QP's window (no RNG draw: the
        // stream stays as before windows).
        let rkey = match ends[r].mw {
            Some(w) if (roff / 8) % 2 == 1 => w,
            _ => rm.remote.key,
        };
        let (lo, ro, n) = (loff as usize, roff as usize, len as usize);
        match op {
            Op::Read => Self::fresh(&self.env[r], &mut rm.remote, ro, n, rng),
            o if o.atomic() => Self::fresh(&self.env[r], &mut rm.remote, ro, 8, rng),
            _ => Self::fresh(&self.env[s], &mut lm.local, lo, n, rng),
        }
        let imm = rng.u32();
        let mut recv_expect = None;
        match op {
            Op::Write | Op::WriteImm => {
                let src = lm.local.shadow[lo..lo + n].to_vec();
                rm.remote.shadow[ro..ro + n].copy_from_slice(&src);
                if op == Op::WriteImm {
                    recv_expect = Some((cqe::opcode::RESP_WR_IMM, len, Some(imm)));
                }
            }
            Op::Send | Op::SendImm => {
                let k = ends[r].recv_next % 3;
                let at = MR_OFF as usize + k as usize * RECV_LEN as usize;
                let src = lm.local.shadow[lo..lo + n].to_vec();
                rm.recv.shadow[at..at + n].copy_from_slice(&src);
                recv_expect = Some(if op == Op::SendImm {
                    (cqe::opcode::RESP_SEND_IMM, len, Some(imm))
                } else {
                    (cqe::opcode::RESP_SEND, len, None)
                });
            }
            Op::Read => {
                let src = rm.remote.shadow[ro..ro + n].to_vec();
                lm.local.shadow[lo..lo + n].copy_from_slice(&src);
            }
            Op::FetchAdd | Op::CompSwap | Op::Bind => {}
        }
        let (swap_add, compare) = (rng.u64(), rng.u64());
        let (atomic, recv) = if op.atomic() {
            let orig = u64::from_be_bytes(rm.remote.shadow[ro..ro + 8].try_into().unwrap());
            let compare = if rng.chance(500) { orig } else { compare };
            let new = match op {
                Op::FetchAdd => orig.wrapping_add(swap_add),
                _ if orig == compare => swap_add,
                _ => orig,
            };
            rm.remote.shadow[ro..ro + 8].copy_from_slice(&new.to_be_bytes());
            lm.local.shadow[lo..lo + 8].copy_from_slice(&orig.to_be_bytes());
            (Some((swap_add, compare)), None)
        } else {
            let recv = recv_expect.map(|x| {
                let k = ends[r].recv_next % 3;
                ends[r].recv_next += 1;
                (rm.recv.mr() + u64::from(k * RECV_LEN), rm.recv.key, x)
            });
            (None, recv)
        };
        self.post_wqe(
            ends,
            s,
            op,
            len,
            imm,
            (laddr, lm.local.key),
            (raddr, rkey),
            atomic,
            recv,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn post_wqe(
        &mut self,
        ends: &mut [End; 2],
        s: usize,
        op: Op,
        len: u32,
        imm: u32,
        (laddr, lkey): (u64, u32),
        (raddr, rkey): (u64, u32),
        atomic: Option<(u64, u64)>,
        recv: Option<RecvFor>,
    ) -> bool {
        let r = other(s);
        if let Some((addr, key, expect)) = recv {
            let e = &mut ends[r];
            let idx = e.qp.rq_pi;
            self.env[r].post_recv(&mut e.qp, &[(RECV_LEN, key, addr)]);
            e.rq.push_back(PostedRecv {
                idx,
                len: RECV_LEN,
                expect: Some(expect),
            });
        }
        let rseg = dp::raddr_seg(raddr, rkey);
        let dseg = dp::dseg(len, lkey, laddr);
        let aseg = atomic.map(|(a, c)| dp::atomic_seg(a, c));
        let mut segs: Vec<&[u8]> = Vec::new();
        if matches!(op, Op::Write | Op::WriteImm | Op::Read) || op.atomic() {
            segs.push(&rseg);
        }
        if let Some(a) = &aseg {
            segs.push(a);
        }
        if len > 0 {
            segs.push(&dseg);
        }
        let e = &mut ends[s];
        let idx =
            self.env[s].post_send(&mut e.qp, op.wqe_opcode(), wqe::ctrl::CQ_UPDATE, imm, &segs);
        let npsn = if op.atomic() {
            1
        } else {
            len.div_ceil(MTU).max(1)
        };
        let first = e.next_psn;
        e.next_psn = psn_add(first, npsn);
        e.sq.push_back(Posted {
            idx,
            op,
            len,
            first_psn: first,
            last_psn: psn_add(first, npsn - 1),
        });
        true
    }

    /// A receive with random length and key on a tainted slot (for hostile SENDs to land in).
    pub(super) fn post_spare_recv(&mut self, slot: &mut Slot, side: usize, rng: &mut Rng) {
        let m = &slot.mem[side];
        let ends = slot.ends.as_mut().unwrap();
        let e = &mut ends[side];
        if e.rq.len() >= 20 {
            return;
        }
        let len = if rng.chance(800) {
            rng.range(1, u64::from(RECV_LEN)) as u32
        } else {
            rng.interesting() as u32
        };
        let key = if rng.chance(900) {
            m.recv.key
        } else {
            m.local.key
        };
        let addr = m.recv.mr() + rng.below(3) * u64::from(RECV_LEN);
        let idx = e.qp.rq_pi;
        self.env[side].post_recv(&mut e.qp, &[(len, key, addr)]);
        // A byte count of 0 stands for 2^31 (wqe.rs `ZERO_BYTE_COUNT_MEANS`).
        let len = match len & 0x7fff_ffff {
            0 => 1 << 31,
            n => n,
        };
        e.rq.push_back(PostedRecv {
            idx,
            len,
            expect: None,
        });
    }

    pub(super) fn random_op(rng: &mut Rng) -> Op {
        rng.pick(&[
            Op::Write,
            Op::Write,
            Op::WriteImm,
            Op::Send,
            Op::Send,
            Op::SendImm,
            Op::Read,
            Op::Read,
            Op::FetchAdd,
            Op::CompSwap,
        ])
    }
}
