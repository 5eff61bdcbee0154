//! Writing CQEs into a CQ's ring: the owner bit, the overrun check, faults and arming.

use mlx5_prm::{cq_db, cqc, cqe};

use crate::memory::{DmaError, GuestMemory};

use super::{
    Arm, Cq, CqEvent, Cqe, CqeFaults, CORRUPT_CQE_OPCODE, CORRUPT_CQE_SYNDROME,
    CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION, CQ_ERROR_SYNDROME_CQ_OVERRUN, INDEX_MASK,
};

impl Cq {
    /// The DMA memory the CQ uses: its buffer pages and its doorbell record.
    pub(crate) fn dma_ranges(&self) -> Vec<(u64, u64)> {
        let mut v = self.buf.ranges();
        v.push((self.dbr_addr, 8));
        v
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// The producer counter (CQEs written so far).
    pub fn producer(&self) -> u32 {
        self.pi
    }

    /// The arm sequence number of the last arm doorbell (recorded, not checked).
    pub fn arm_sn(&self) -> u32 {
        self.arm_sn
    }

    /// Arm doorbells received.
    pub fn arms(&self) -> u32 {
        self.arms
    }

    /// log2 of the number of entries.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    pub(super) fn consumer_index(&self, mem: &dyn GuestMemory) -> Result<u32, DmaError> {
        Ok(mem.read_u32_be(self.dbr_addr + 4 * cq_db::SET_CI as u64)? & INDEX_MASK)
    }

    /// Writes one CQE at the producer index and advances it. Returns the event to post.
    pub fn write(&mut self, mem: &dyn GuestMemory, c: &Cqe, faults: CqeFaults) -> CqEvent {
        self.write_at(&mem, mem.version(), c, faults)
    }

    /// [`Cq::write`] with the memory's version read already (`now`,
    /// [`GuestMemory::version`], for the doorbell the CQE belongs to).
    /// `mem` is dereferenced only when the CQE does not go through the ring's stretch.
    #[inline]
    pub(crate) fn write_at<'m, M: std::ops::Deref<Target = dyn GuestMemory + 'm> + ?Sized>(
        &mut self,
        mem: &M,
        now: u64,
        c: &Cqe,
        faults: CqeFaults,
    ) -> CqEvent {
        if self.in_error {
            return CqEvent::None;
        }
        if faults.duplicate {
            return self.write_twice(&**mem, c, faults);
        }
        match self.write_one(mem, now, c, faults) {
            Ok(e) => e,
            Err(syndrome) => {
                self.in_error = true;
                CqEvent::Error { syndrome }
            }
        }
    }

    /// [`Cq::write`] under the duplicate fault: the CQE, then a second copy (the last event
    /// either posts wins).
    #[cold]
    #[inline(never)]
    fn write_twice(&mut self, mem: &dyn GuestMemory, c: &Cqe, faults: CqeFaults) -> CqEvent {
        let mut ev = CqEvent::None;
        for _ in 0..2 {
            match self.write_one(&mem, mem.version(), c, faults) {
                Ok(CqEvent::None) => {}
                Ok(e) => ev = e,
                Err(syndrome) => {
                    self.in_error = true;
                    return CqEvent::Error { syndrome };
                }
            }
        }
        ev
    }

    #[inline(always)]
    fn write_one<'m, M: std::ops::Deref<Target = dyn GuestMemory + 'm> + ?Sized>(
        &mut self,
        mem: &M,
        now: u64,
        c: &Cqe,
        f: CqeFaults,
    ) -> Result<CqEvent, u8> {
        // Overrun: CQE `pi` overwrites one software has not consumed when `pi - ci >= size`.
        // The consumer index in the doorbell record only grows (mod 2^24): software writes
        // its running consumer counter there after polling (Linux include/linux/mlx5/cq.h
        // `mlx5_cq_set_ci`: `*cq->set_ci_db = cpu_to_be32(cq->cons_index & 0xffffff)`, with
        // `cons_index` only ever incremented in drivers/infiniband/hw/mlx5/cq.c
        // `mlx5_poll_one`; rdma-core providers/mlx5/cq.c `update_cons_index` likewise), and
        // never past the producer (it consumes only CQEs it found software-owned). So for a
        // consumer index `c0` read earlier, the current one `c` has `c0 <= c <= pi` (mod
        // 2^24) and `pi - c <= pi - c0`: a `c0` that already shows room proves room, and the
        // record is read again only when `c0` says the CQ might be full. Equivalent to
        // reading it before every CQE for any driver that keeps the rule above. Model choice
        // (no source says when the hardware reads the record): a consumer index that moves
        // backwards, jumps past the producer, or a record that becomes unreadable, is caught
        // at the next such read rather than at the next CQE. A resize keeps the cached value
        // (the counter runs on; the check below uses the current size).
        if !self.overrun_ignore {
            let (pi, size) = (self.pi, self.size());
            let room = |ci: u32| (pi.wrapping_sub(ci) & INDEX_MASK) < size;
            if !self.seen_ci.is_some_and(room) {
                let ci = self
                    .consumer_index(&**mem)
                    .map_err(|_| CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION)?;
                self.seen_ci = Some(ci);
                if !room(ci) {
                    return Err(CQ_ERROR_SYNDROME_CQ_OVERRUN);
                }
            }
        }
        // The CQE as given, unless a fault corrupts it (then a copy): no copy of the 64 bytes
        // for an ordinary CQE, whose op_own byte alone is computed here.
        let mut corrupted;
        let bytes: &[u8; cqe::SIZE] = if f.corrupt {
            corrupted = c.0;
            corrupted[cqe::offset::OP_OWN] =
                CORRUPT_CQE_OPCODE << 4 | (corrupted[cqe::offset::OP_OWN] & 0xf);
            corrupted[cqe::err_offset::SYNDROME] = CORRUPT_CQE_SYNDROME;
            corrupted[cqe::err_offset::VENDOR_ERR_SYND] = CORRUPT_CQE_SYNDROME;
            &corrupted
        } else {
            &c.0
        };
        let mut owner = ((self.pi >> self.log_size) & 1) as u8;
        if f.stuck_owner {
            owner ^= 1;
        }
        let own = [(bytes[cqe::offset::OP_OWN] & !cqe::OWNER_MASK) | owner];
        let body = &bytes[..cqe::offset::OP_OWN];
        let own = &own[..];
        let slot = (self.pi & (self.size() - 1)) as u64 * self.stride + (self.stride - 64);
        // Everything but op_own first, then op_own: software polls op_own (`get_sw_cqe`). A CQE
        // inside one page (always, at 64-byte alignment) is two ordered parts of one access:
        // through the ring's stretch when it holds the slot (the same bytes the ordinary path
        // below writes), else that path, after which the stretch is resolved around the slot.
        let in_win = match body.first_chunk::<{ cqe::offset::OP_OWN }>() {
            Some(b) => self.ring_win.write_split(now, slot, b, own[0]),
            None => false,
        };
        if !in_win {
            self.write_slot(&**mem, slot, body, own)
                .map_err(|_| CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION)?;
            self.ring_win.refresh(&**mem, &self.buf, slot);
        }
        self.pi = self.pi.wrapping_add(1);
        if c.solicits() {
            self.solicit_mark = self.pi;
        }
        let fire = match self.arm {
            Arm::Off => false,
            Arm::Next => true,
            Arm::Solicited => c.solicits(),
        };
        Ok(if fire { self.fire() } else { CqEvent::None })
    }

    /// Writes a CQE's `body` and then its `own` byte at ring offset `slot`, the ordinary way.
    #[inline(never)]
    fn write_slot(
        &mut self,
        mem: &dyn GuestMemory,
        slot: u64,
        body: &[u8],
        own: &[u8],
    ) -> Result<(), DmaError> {
        match self.buf.bus_in_page(slot, body.len() + own.len()) {
            // Through the view of the ring's region: one copy, then the owner byte.
            Some(bus) => match body.first_chunk::<{ cqe::offset::OP_OWN }>() {
                Some(b) => self.ring_view.write_split(mem, bus, b, own[0]),
                None => mem.write_parts(&[(bus, body), (bus + body.len() as u64, own)]),
            },
            None => self
                .buf
                .write(mem, slot, body)
                .and_then(|_| self.buf.write(mem, slot + body.len() as u64, own)),
        }
    }

    fn fire(&mut self) -> CqEvent {
        self.arm = Arm::Off;
        self.last_notified = self.pi;
        CqEvent::Completion { eqn: self.eqn }
    }

    /// Handles an arm doorbell (`hi` = `sn << 28 | cmd | ci`).
    pub fn arm(&mut self, hi: u32) -> CqEvent {
        if self.in_error {
            return CqEvent::None;
        }
        let ci = hi & INDEX_MASK;
        self.arm_sn = (hi >> 28) & 3;
        self.arms = self.arms.wrapping_add(1);
        let solicited = hi & cq_db::cmd::REQ_NOT_SOL != 0;
        let pending = self.pi.wrapping_sub(ci) & INDEX_MASK;
        let sol_pending = {
            let d = self.solicit_mark.wrapping_sub(ci) & INDEX_MASK;
            self.solicit_mark != 0 && d != 0 && d <= pending
        };
        if pending != 0 && pending <= self.size() && (!solicited || sol_pending) {
            return self.fire();
        }
        self.arm = if solicited { Arm::Solicited } else { Arm::Next };
        CqEvent::None
    }

    /// The cqc as QUERY_CQ reports it.
    pub(super) fn query_context(&self, mem: &dyn GuestMemory) -> [u8; cqc::BYTES] {
        let mut ctx = self.cqc;
        let st = match self.arm {
            Arm::Off => cqe::state::FIRED,
            _ => cqe::state::ARMED,
        };
        let _ = cqc::ST.set(&mut ctx, st as u32);
        let _ = cqc::PRODUCER_COUNTER.set(&mut ctx, self.pi & INDEX_MASK);
        let _ = cqc::LAST_NOTIFIED_INDEX.set(&mut ctx, self.last_notified & INDEX_MASK);
        let _ = cqc::LAST_SOLICIT_INDEX.set(&mut ctx, self.solicit_mark & INDEX_MASK);
        if let Ok(ci) = self.consumer_index(mem) {
            let _ = cqc::CONSUMER_COUNTER.set(&mut ctx, ci);
        }
        ctx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RegionMemory;
    use crate::mr::PagedBuffer;

    fn cq(mem: &RegionMemory, log_size: u32, oi: bool) -> (Cq, u64, u64) {
        let bytes = 64usize << log_size;
        let buf = mem.alloc(bytes.max(4096), 4096).unwrap();
        let dbr = mem.alloc(64, 64).unwrap();
        let pages: Vec<u8> = (0..bytes.div_ceil(4096) as u64)
            .flat_map(|i| (buf + i * 4096).to_be_bytes())
            .collect();
        let b = PagedBuffer::new(&pages, 0, 0, bytes as u64).unwrap();
        let c = Cq {
            cqn: 5,
            log_size,
            stride: 64,
            buf: b,
            eqn: 3,
            uar: 1,
            dbr_addr: dbr,
            overrun_ignore: oi,
            pi: 0,
            seen_ci: None,
            solicit_mark: 0,
            arm: Arm::Off,
            arm_sn: 0,
            arms: 0,
            last_notified: 0,
            in_error: false,
            users: 0,
            cqc: [0; cqc::BYTES],
            ring_view: Default::default(),
            ring_win: Default::default(),
        };
        (c, buf, dbr)
    }

    #[test]
    fn cq_map_finds_each_cq_whatever_the_last_lookup_was() {
        let mem = RegionMemory::new();
        let mut m = super::super::CqMap::default();
        for cqn in [9u32, 3, 7, 5] {
            let (mut c, _, _) = cq(&mem, 2, false);
            c.cqn = cqn;
            assert!(m.insert(cqn, c).is_none());
        }
        let order: Vec<u32> = m.values().map(|c| c.cqn).collect();
        assert_eq!(order, [3, 5, 7, 9]);
        for cqn in [7u32, 7, 3, 9, 5, 5] {
            assert_eq!(m.get(&cqn).map(|c| c.cqn), Some(cqn));
            assert_eq!(m.get_mut(&cqn).map(|c| c.cqn), Some(cqn));
        }
        // The hint names CQ 5's slot; after 5 goes, that slot holds CQ 7.
        assert!(m.remove(&5).is_some());
        assert!(m.get(&5).is_none() && !m.contains_key(&5));
        assert_eq!(m.get(&7).map(|c| c.cqn), Some(7));
        assert_eq!(m.get(&9).map(|c| c.cqn), Some(9));
        // A new CQ before the hinted slot moves the others up.
        let (mut c, _, _) = cq(&mem, 2, false);
        c.cqn = 1;
        m.insert(1, c);
        for cqn in [1u32, 3, 7, 9] {
            assert_eq!(m.get(&cqn).map(|c| c.cqn), Some(cqn));
        }
        assert_eq!(m.len(), 4);
        assert!(m.get(&2).is_none());
    }

    fn op_own(mem: &RegionMemory, buf: u64, n: u64) -> u8 {
        let mut b = [0u8; 1];
        mem.read(buf + n * 64 + 63, &mut b).unwrap();
        b[0]
    }

    #[test]
    fn owner_bit_flips_per_pass_and_overrun_is_detected() {
        let mem = RegionMemory::new();
        let (mut c, buf, dbr) = cq(&mem, 2, false);
        let e = Cqe::requester(0x8, 0x77, 3, 100);
        for i in 0..4 {
            assert_eq!(c.write(&mem, &e, CqeFaults::default()), CqEvent::None);
            assert_eq!(op_own(&mem, buf, i), 0x00);
        }
        // Full: consumer index 0, producer 4.
        assert_eq!(
            c.write(&mem, &e, CqeFaults::default()),
            CqEvent::Error {
                syndrome: CQ_ERROR_SYNDROME_CQ_OVERRUN
            }
        );
        assert!(c.in_error);
        // Software consumed 2: but the CQ stays in error.
        mem.write_u32_be(dbr, 2).unwrap();
        assert_eq!(c.write(&mem, &e, CqeFaults::default()), CqEvent::None);

        let (mut c, buf, dbr) = cq(&mem, 2, false);
        for _ in 0..4 {
            c.write(&mem, &e, CqeFaults::default());
        }
        mem.write_u32_be(dbr, 3).unwrap();
        c.write(&mem, &e, CqeFaults::default());
        // Second pass: owner 1 at slot 0.
        assert_eq!(op_own(&mem, buf, 0), 0x01);
        assert!(cqe::is_sw_owned(op_own(&mem, buf, 0), 4, 4));
    }

    /// CQEs go through the CQ's view of its ring's region ([`crate::memory::ViewSlot`]):
    /// after the ring's memory is freed, the next CQE fails exactly as without the view (the
    /// CQ enters the error state with an access violation), and another allocation in
    /// between (the memory's version changes, the ring's region stays) changes nothing.
    #[test]
    fn cqe_write_through_the_ring_view_fails_once_the_ring_is_freed() {
        let mem = RegionMemory::new();
        let (mut c, buf, _dbr) = cq(&mem, 2, false);
        let e = Cqe::requester(0x8, 0x77, 3, 100);
        assert_eq!(c.write(&mem, &e, CqeFaults::default()), CqEvent::None);
        // The view is resolved now; a new region changes the version, not the ring.
        mem.alloc(4096, 4096).unwrap();
        assert_eq!(c.write(&mem, &e, CqeFaults::default()), CqEvent::None);
        assert_eq!(c.write(&mem, &e, CqeFaults::default()), CqEvent::None);
        let mut got = [0u8; 64];
        mem.read(buf + 2 * 64, &mut got).unwrap();
        assert_eq!(&got[..63], &e.0[..63]);
        assert_eq!(op_own(&mem, buf, 2), e.0[63] & !cqe::OWNER_MASK);
        assert!(mem.free(buf));
        assert_eq!(
            c.write(&mem, &e, CqeFaults::default()),
            CqEvent::Error {
                syndrome: CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION
            }
        );
        assert!(c.in_error);
    }

    /// The consumer index is re-read only when the last one read leaves no proof of room: an
    /// overrun after software consumed some CQEs (and then stopped) is still detected, at the
    /// first CQE that would overwrite an unconsumed one.
    #[test]
    fn overrun_is_detected_after_the_consumer_index_moved() {
        let mem = RegionMemory::new();
        let (mut c, _buf, dbr) = cq(&mem, 1, false);
        let e = Cqe::requester(0x8, 0x77, 3, 100);
        let ok = |c: &mut Cq| c.write(&mem, &e, CqeFaults::default());
        assert_eq!(ok(&mut c), CqEvent::None);
        assert_eq!(ok(&mut c), CqEvent::None);
        // Software consumed one: exactly one more fits.
        mem.write_u32_be(dbr, 1).unwrap();
        assert_eq!(ok(&mut c), CqEvent::None);
        assert_eq!(
            ok(&mut c),
            CqEvent::Error {
                syndrome: CQ_ERROR_SYNDROME_CQ_OVERRUN
            }
        );
        // Consumed two, then four more CQEs: the fourth overruns.
        let (mut c, _buf, dbr) = cq(&mem, 1, false);
        ok(&mut c);
        ok(&mut c);
        mem.write_u32_be(dbr, 2).unwrap();
        assert_eq!(ok(&mut c), CqEvent::None);
        assert_eq!(ok(&mut c), CqEvent::None);
        mem.write_u32_be(dbr, 3).unwrap();
        assert_eq!(ok(&mut c), CqEvent::None);
        assert_eq!(
            ok(&mut c),
            CqEvent::Error {
                syndrome: CQ_ERROR_SYNDROME_CQ_OVERRUN
            }
        );
        // An unreadable record is still an access violation when a read is needed (the
        // first CQE: nothing read yet).
        let (mut c, _buf, _dbr) = cq(&mem, 1, false);
        c.dbr_addr = u64::MAX - 3;
        assert_eq!(
            ok(&mut c),
            CqEvent::Error {
                syndrome: CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION
            }
        );
    }

    #[test]
    fn arming_next_and_solicited() {
        let mem = RegionMemory::new();
        let (mut c, _buf, _dbr) = cq(&mem, 3, true);
        let plain = Cqe::success(cqe::opcode::RESP_SEND, 1, 0, 4);
        assert_eq!(
            c.arm(cq_db::arm_value(0, cq_db::cmd::REQ_NOT, 0)),
            CqEvent::None
        );
        assert_eq!(
            c.write(&mem, &plain, CqeFaults::default()),
            CqEvent::Completion { eqn: 3 }
        );
        // Disarmed after firing.
        assert_eq!(c.write(&mem, &plain, CqeFaults::default()), CqEvent::None);
        // Arming behind the producer fires at once.
        assert_eq!(
            c.arm(cq_db::arm_value(1, cq_db::cmd::REQ_NOT, 1)),
            CqEvent::Completion { eqn: 3 }
        );
        // Solicited arm: plain CQEs do not fire, solicited and error ones do.
        assert_eq!(
            c.arm(cq_db::arm_value(2, cq_db::cmd::REQ_NOT_SOL, 2)),
            CqEvent::None
        );
        // The sequence number is recorded as sent (no check: no source says what hardware
        // does with a stale one).
        assert_eq!((c.arm_sn(), c.arms()), (2, 3));
        assert_eq!(c.write(&mem, &plain, CqeFaults::default()), CqEvent::None);
        let sol = plain.with_solicited(true);
        assert_eq!(
            c.write(&mem, &sol, CqeFaults::default()),
            CqEvent::Completion { eqn: 3 }
        );
        assert_eq!(
            c.arm(cq_db::arm_value(3, cq_db::cmd::REQ_NOT_SOL, 4)),
            CqEvent::None
        );
        let e = Cqe::error(cqe::opcode::RESP_ERR, 5, 0, 0, 1, 0);
        assert_eq!(
            c.write(&mem, &e, CqeFaults::default()),
            CqEvent::Completion { eqn: 3 }
        );
    }

    #[test]
    fn cqe_128_puts_the_64_byte_cqe_in_the_second_half() {
        let mem = RegionMemory::new();
        let (mut c, buf, _dbr) = cq(&mem, 3, true);
        c.stride = 128;
        c.buf = {
            let pages: Vec<u8> = buf.to_be_bytes().to_vec();
            PagedBuffer::new(&pages, 0, 0, 128 << 3).unwrap()
        };
        c.ring_win.clear();
        let e = Cqe::requester(0x8, 0x77, 3, 100);
        c.write(&mem, &e, CqeFaults::default());
        c.write(&mem, &e, CqeFaults::default());
        // CQE n at n * 128 + 64.
        assert_eq!(op_own(&mem, buf, 1), 0x00);
        assert_eq!(op_own(&mem, buf, 3), 0x00);
        let mut b = [0u8; 4];
        mem.read(buf + 128 + 64 + 44, &mut b).unwrap();
        assert_eq!(u32::from_be_bytes(b), 100);
        mem.read(buf + 128 + 44, &mut b).unwrap();
        assert_eq!(u32::from_be_bytes(b), 0, "first half untouched");
    }

    #[test]
    fn faults_stuck_corrupt_duplicate() {
        let mem = RegionMemory::new();
        let (mut c, buf, _dbr) = cq(&mem, 3, true);
        let e = Cqe::requester(0x8, 0x77, 3, 100);
        c.write(
            &mem,
            &e,
            CqeFaults {
                stuck_owner: true,
                ..Default::default()
            },
        );
        assert!(!cqe::is_sw_owned(op_own(&mem, buf, 0), 0, 8));
        c.write(
            &mem,
            &e,
            CqeFaults {
                corrupt: true,
                duplicate: true,
                ..Default::default()
            },
        );
        assert_eq!(c.producer(), 3);
        assert_eq!(cqe::opcode(op_own(&mem, buf, 1)), CORRUPT_CQE_OPCODE);
        assert_eq!(cqe::opcode(op_own(&mem, buf, 2)), CORRUPT_CQE_OPCODE);
    }
}
