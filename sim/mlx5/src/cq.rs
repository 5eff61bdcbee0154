//! Completion queues: CREATE_CQ / DESTROY_CQ / QUERY_CQ / MODIFY_CQ (resize), CQE writing, the
//! arm doorbell and completion / CQ-error events.
//!
//! A CQ of `2^log_cq_size` entries lives in a buffer described by `pas[]` (page size RELATIVE to
//! 4 KiB, facts trap 2; `page_offset` quantized, trap 3). CQE `n` is at `(n & (size - 1)) *
//! stride`; for 128-byte CQEs the 64-byte CQE is the second half (datapath facts
//! `cqe_ownership`). Hardware writes the owner bit as `(n >> log_cq_size) & 1`, so software sees
//! CQE `n` as its own when `op_own & 1 == !!(n & size)` and the opcode is not INVALID
//! (rdma-core providers/mlx5/cq.c:147).
//!
//! The doorbell record at `dbr_addr` holds the consumer index (`dbrec[0]`, 24 bits) and the arm
//! word (`dbrec[1]`) (datapath facts `doorbell_records.cq`). The model checks the consumer index
//! before every CQE to detect overrun (re-reading the record when the last value read leaves no
//! proof of room, see `Cq::write_one`), which it reports as a CQ_ERROR event with syndrome
//! `MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN` (Linux include/linux/mlx5/mlx5_ifc.h:3348) unless the CQ
//! was created with `oi` (overrun ignore).
//!
//! Arming: the 64-bit doorbell at UAR + 0x20 is `(sn << 28 | cmd | ci) << 32 | cqn`
//! (rdma-core cq.c:1749). An armed CQ posts one completion EQE to `c_eqn` when the next CQE
//! (REQ_NOT) or the next solicited or error CQE (REQ_NOT_SOL) is written, then disarms; arming
//! with a consumer index behind the producer fires at once if a qualifying CQE is already there.
//! The arm sequence number (`sn`, bits 29:28) is recorded as the doorbell carries it: no source
//! says what the hardware does with a stale one, so the model checks nothing about it.
//!
//! Resize (MODIFY_CQ, op_mod `MLX5_CQ_OPMOD_RESIZE`): the device writes a RESIZE CQE
//! (`MLX5_CQE_RESIZE_CQ`) at the producer index of the old buffer and writes every later CQE
//! to the new one, the producer counter running on; copying the CQEs before the RESIZE CQE is
//! the driver's job (Linux ib/cq.c `copy_resize_cqes`, rdma-core cq.c
//! `mlx5_cq_resize_copy_cqes`, both of which expect the RESIZE CQE there once the command
//! returned).

use std::collections::BTreeMap;

use mlx5_prm::{
    cmd_hca_cap, cmd_status, comp_event, cq_db, cq_error, cq_error_syndrome, cq_modify, cqc, cqe,
    create_cq_in, create_cq_out, destroy_cq_in, event, modify_cq_in, query_cq_in, query_cq_out,
};

use crate::cmd::{err, field as get, CmdResult};
use crate::hca::Hca;
use crate::memory::{DmaError, GuestMemory};
use crate::mr::{PagedBuffer, PasError};

/// Syndromes of the CQ commands (the model's own; range 0x5202_xxxx, see [`crate::mr::syndrome`]).
pub mod syndrome {
    /// Input shorter than `create_cq_in` / `destroy_cq_in` / `query_cq_in`.
    pub const INPUT_TOO_SHORT: u32 = 0x5202_0001;
    /// `uar_page` names no allocated UAR.
    pub const BAD_UAR: u32 = 0x5202_0003;
    /// `c_eqn` names no EQ.
    pub const BAD_EQN: u32 = 0x5202_0004;
    /// `log_cq_size` above `cmd_hca_cap.log_max_cq_sz`.
    pub const SIZE_ABOVE_CAP: u32 = 0x5202_0005;
    /// `cqe_sz` other than 64 or 128 bytes (128-byte padded CQEs are not modelled).
    pub const BAD_CQE_SIZE: u32 = 0x5202_0006;
    /// Fewer `pas[]` entries than the CQ buffer needs.
    pub const PAS_TOO_FEW: u32 = 0x5202_0007;
    /// A `pas[]` entry is not page aligned, or the page size is out of range.
    pub const PAS_BAD: u32 = 0x5202_0008;
    /// `dbr_addr` is not 8-byte aligned.
    pub const DBR_MISALIGNED: u32 = 0x5202_0009;
    /// `1 << log_max_cq` CQs already exist.
    pub const TOO_MANY_CQS: u32 = 0x5202_000a;
    /// DESTROY/QUERY_CQ of a CQN that does not exist.
    pub const UNKNOWN_CQ: u32 = 0x5202_000b;
    /// DESTROY_CQ while a QP still reports to the CQ.
    pub const CQ_IN_USE: u32 = 0x5202_000c;
    /// A feature the model does not implement: umem, collapsed CQ (`cc`), CQE compression.
    pub const UNSUPPORTED: u32 = 0x5202_000d;
    /// MODIFY_CQ with an op_mod other than RESIZE, or a `resize_field_select` without
    /// LOG_SIZE or with unknown bits (model choice: only resizing is modelled).
    pub const MODIFY_UNSUPPORTED: u32 = 0x5202_000e;
    /// MODIFY_CQ resize while `cmd_hca_cap.cq_resize` is 0.
    pub const RESIZE_NOT_CAPABLE: u32 = 0x5202_000f;
    /// MODIFY_CQ resize to another CQE size (model choice; Linux refuses it in the driver).
    pub const RESIZE_CQE_SIZE: u32 = 0x5202_0010;
    /// MODIFY_CQ resize: the CQEs not consumed yet do not fit the new size, or the old buffer
    /// has no room for the RESIZE CQE (status `BAD_SIZE_OUTS_CQES_ERR`).
    pub const RESIZE_OUTSTANDING: u32 = 0x5202_0011;
    /// MODIFY_CQ resize of a CQ in error (model choice).
    pub const RESIZE_IN_ERROR: u32 = 0x5202_0012;
    /// MODIFY_CQ resize: the RESIZE CQE could not be written to the old buffer.
    pub const RESIZE_CQE_WRITE: u32 = 0x5202_0013;
}

/// `MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN` (Linux include/linux/mlx5/mlx5_ifc.h:3348).
pub const CQ_ERROR_SYNDROME_CQ_OVERRUN: u8 = cq_error_syndrome::CQ_OVERRUN;
/// `MLX5_CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR` (Linux mlx5_ifc.h:3349): the CQ buffer or
/// doorbell record is not reachable by DMA.
pub const CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION: u8 = cq_error_syndrome::CQ_ACCESS_VIOLATION_ERROR;

/// What the corrupt-CQE fault writes as the opcode (no `MLX5_CQE_*` has this value).
pub const CORRUPT_CQE_OPCODE: u8 = 0x7;
/// What the corrupt-CQE fault writes as syndrome and vendor syndrome.
pub const CORRUPT_CQE_SYNDROME: u8 = 0xee;

const INDEX_MASK: u32 = 0xff_ffff;

/// A 64-byte CQE under construction (`struct mlx5_cqe64`, offsets in [`mlx5_prm::cqe::offset`]).
/// The owner bit is set by the CQ when it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe(pub [u8; cqe::SIZE]);

impl Cqe {
    fn put32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// A successful completion: `opcode` is a `cqe::opcode` value (REQ, RESP_SEND, ...).
    pub fn success(opcode: u8, qpn: u32, wqe_counter: u16, byte_cnt: u32) -> Cqe {
        let mut c = Cqe([0; cqe::SIZE]);
        c.put32(cqe::offset::BYTE_CNT, byte_cnt);
        c.put32(cqe::offset::SOP_DROP_QPN, qpn & INDEX_MASK);
        c.0[cqe::offset::WQE_COUNTER..cqe::offset::WQE_COUNTER + 2]
            .copy_from_slice(&wqe_counter.to_be_bytes());
        c.0[cqe::offset::OP_OWN] = opcode << 4;
        c
    }

    /// A requester completion: REQ with the send WQE opcode in `sop_drop_qpn` bits 31:24
    /// (rdma-core cq.c reads `be32toh(cqe64->sop_drop_qpn) >> 24`).
    pub fn requester(wqe_opcode: u8, qpn: u32, wqe_counter: u16, byte_cnt: u32) -> Cqe {
        let mut c = Cqe::success(cqe::opcode::REQ, qpn, wqe_counter, byte_cnt);
        c.put32(
            cqe::offset::SOP_DROP_QPN,
            (wqe_opcode as u32) << 24 | (qpn & INDEX_MASK),
        );
        c
    }

    /// An error completion (`struct mlx5_err_cqe`): `opcode` is REQ_ERR or RESP_ERR.
    pub fn error(
        opcode: u8,
        syndrome: u8,
        vendor_syndrome: u8,
        wqe_opcode: u8,
        qpn: u32,
        wqe_counter: u16,
    ) -> Cqe {
        let mut c = Cqe([0; cqe::SIZE]);
        c.0[cqe::err_offset::VENDOR_ERR_SYND] = vendor_syndrome;
        c.0[cqe::err_offset::SYNDROME] = syndrome;
        c.put32(
            cqe::err_offset::S_WQE_OPCODE_QPN,
            (wqe_opcode as u32) << 24 | (qpn & INDEX_MASK),
        );
        c.0[cqe::err_offset::WQE_COUNTER..cqe::err_offset::WQE_COUNTER + 2]
            .copy_from_slice(&wqe_counter.to_be_bytes());
        c.0[cqe::err_offset::OP_OWN] = opcode << 4;
        c
    }

    /// Sets `imm_inval_pkey` to the immediate exactly as it travelled (rdma-core copies it to
    /// `wc->imm_data` without byte swapping).
    pub fn with_imm(mut self, imm: u32) -> Cqe {
        self.put32(cqe::offset::IMM_INVAL_PKEY, imm);
        self
    }

    /// Sets `flags_rqpn` (bits 23:0: the remote QP number, `wc->src_qp`).
    pub fn with_remote_qpn(mut self, rqpn: u32) -> Cqe {
        self.put32(cqe::offset::FLAGS_RQPN, rqpn & INDEX_MASK);
        self
    }

    /// Sets `srqn_uidx` (bits 23:0: the QP's `user_index`, which rdma-core uses to find the QP
    /// when CQE version 1 is in use).
    pub fn with_user_index(mut self, uidx: u32) -> Cqe {
        self.put32(cqe::offset::SRQN_UIDX, uidx & INDEX_MASK);
        self
    }

    /// Sets the solicited-event bit of `op_own` (bit 1, rdma-core mlx5dv.h:1243).
    pub fn with_solicited(mut self, se: bool) -> Cqe {
        if se {
            self.0[cqe::offset::OP_OWN] |= 0x2;
        }
        self
    }

    /// The CQE opcode.
    pub fn opcode(&self) -> u8 {
        cqe::opcode(self.0[cqe::offset::OP_OWN])
    }

    /// Whether this is an error CQE.
    pub fn is_error(&self) -> bool {
        matches!(self.opcode(), cqe::opcode::REQ_ERR | cqe::opcode::RESP_ERR)
    }

    /// Whether this CQE satisfies a REQ_NOT_SOL arm (solicited, or unsuccessful).
    fn solicits(&self) -> bool {
        self.is_error() || cqe::se(self.0[cqe::offset::OP_OWN]) != 0
    }
}

/// Arm state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arm {
    /// Not armed: CQEs are written without events.
    Off,
    /// Armed for the next CQE (`MLX5_CQ_DB_REQ_NOT`).
    Next,
    /// Armed for the next solicited or error CQE (`MLX5_CQ_DB_REQ_NOT_SOL`).
    Solicited,
}

/// One completion queue.
#[derive(Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    log_size: u32,
    stride: u64,
    buf: PagedBuffer,
    /// `c_eqn`: where completion events go.
    pub eqn: u32,
    /// `uar_page`.
    pub uar: u32,
    dbr_addr: u64,
    overrun_ignore: bool,
    /// CQEs written so far (the producer counter; CQE `pi` is the next one).
    pi: u32,
    /// The consumer index last read from the doorbell record (`None`: not read yet). See
    /// `write_one` for why a value that already shows room proves room.
    seen_ci: Option<u32>,
    /// Producer counter just past the last solicited or error CQE (0: none yet).
    solicit_mark: u32,
    arm: Arm,
    arm_sn: u32,
    arms: u32,
    /// Producer counter when the last event was posted.
    last_notified: u32,
    /// Set after an overrun or DMA failure: the CQ accepts no more CQEs.
    pub in_error: bool,
    /// QPs that report to this CQ.
    users: u32,
    cqc: [u8; cqc::BYTES],
}

/// What writing a CQE led to (the caller posts the event; it owns the EQs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqEvent {
    /// Nothing to post.
    None,
    /// Post a completion EQE to `eqn` for this CQ.
    Completion {
        /// Target EQ.
        eqn: u32,
    },
    /// Post a CQ_ERROR event with this syndrome.
    Error {
        /// `cq_error.syndrome`.
        syndrome: u8,
    },
}

/// Data-plane fault switches as the CQ applies them.
#[derive(Clone, Copy, Debug, Default)]
pub struct CqeFaults {
    /// Write the owner bit inverted (the CQE stays hardware-owned to software).
    pub stuck_owner: bool,
    /// Garble opcode and syndrome.
    pub corrupt: bool,
    /// Write the CQE twice.
    pub duplicate: bool,
}

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

    fn consumer_index(&self, mem: &dyn GuestMemory) -> Result<u32, DmaError> {
        Ok(mem.read_u32_be(self.dbr_addr + 4 * cq_db::SET_CI as u64)? & INDEX_MASK)
    }

    /// Writes one CQE at the producer index and advances it. Returns the event to post.
    pub fn write(&mut self, mem: &dyn GuestMemory, c: &Cqe, faults: CqeFaults) -> CqEvent {
        if self.in_error {
            return CqEvent::None;
        }
        let copies = if faults.duplicate { 2 } else { 1 };
        let mut ev = CqEvent::None;
        for _ in 0..copies {
            match self.write_one(mem, c, faults) {
                Ok(e) => {
                    if e != CqEvent::None {
                        ev = e;
                    }
                }
                Err(syndrome) => {
                    self.in_error = true;
                    return CqEvent::Error { syndrome };
                }
            }
        }
        ev
    }

    fn write_one(&mut self, mem: &dyn GuestMemory, c: &Cqe, f: CqeFaults) -> Result<CqEvent, u8> {
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
                    .consumer_index(mem)
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
        // Everything but op_own first, then op_own: software polls op_own (trap 25). A CQE
        // inside one page (always, at 64-byte alignment) is two ordered parts of one access.
        match self.buf.bus_in_page(slot, bytes.len()) {
            Some(bus) => mem.write_parts(&[(bus, body), (bus + body.len() as u64, own)]),
            None => self
                .buf
                .write(mem, slot, body)
                .and_then(|_| self.buf.write(mem, slot + body.len() as u64, own)),
        }
        .map_err(|_| CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION)?;
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
    fn query_context(&self, mem: &dyn GuestMemory) -> [u8; cqc::BYTES] {
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

/// The CQ table.
#[derive(Default)]
pub struct CqTable {
    cqs: BTreeMap<u32, Cq>,
    next: u32,
}

impl CqTable {
    /// Every CQ.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Cq> {
        self.cqs.values()
    }

    /// The CQ with this number.
    pub fn get(&self, cqn: u32) -> Option<&Cq> {
        self.cqs.get(&cqn)
    }

    /// The CQ with this number, mutably.
    pub fn get_mut(&mut self, cqn: u32) -> Option<&mut Cq> {
        self.cqs.get_mut(&cqn)
    }

    /// Whether CQ `cqn` exists.
    pub fn contains(&self, cqn: u32) -> bool {
        self.cqs.contains_key(&cqn)
    }

    /// Number of CQs.
    pub fn len(&self) -> usize {
        self.cqs.len()
    }

    /// Whether there is no CQ.
    pub fn is_empty(&self) -> bool {
        self.cqs.is_empty()
    }

    /// Drops every CQ (HCA teardown).
    pub fn clear(&mut self) {
        self.cqs.clear();
    }

    /// Whether some CQ sends its completion events to EQ `eqn` (`c_eqn`): DESTROY_EQ is busy.
    pub fn uses_eq(&self, eqn: u32) -> bool {
        self.cqs.values().any(|c| c.eqn == eqn)
    }

    /// Whether some CQ is armed through UAR `uar` (`uar_page`): DEALLOC_UAR is busy.
    pub fn uses_uar(&self, uar: u32) -> bool {
        self.cqs.values().any(|c| c.uar == uar)
    }

    /// Records that a QP reports to `cqn` (QP creation).
    pub fn attach(&mut self, cqn: u32) {
        if let Some(c) = self.cqs.get_mut(&cqn) {
            c.users += 1;
        }
    }

    /// Records that a QP stopped reporting to `cqn` (QP destruction).
    pub fn detach(&mut self, cqn: u32) {
        if let Some(c) = self.cqs.get_mut(&cqn) {
            c.users = c.users.saturating_sub(1);
        }
    }

    fn alloc_cqn(&mut self) -> u32 {
        loop {
            self.next = (self.next + 1) & INDEX_MASK;
            if self.next != 0 && !self.cqs.contains_key(&self.next) {
                return self.next;
            }
        }
    }
}

/// CREATE_CQ (opcode 0x400).
pub fn create_cq(hca: &mut Hca, input: &[u8], output: &mut [u8]) -> CmdResult {
    let ctx = create_cq_in::CQ_CONTEXT
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    let bad = |s| err(cmd_status::BAD_PARAM_ERR, s);
    if get(create_cq_in::CQ_UMEM_VALID, input) != 0
        || get(cqc::DBR_UMEM_VALID, ctx) != 0
        || get(cqc::CC, ctx) != 0
        || get(cqc::CQE_COMP_EN, ctx) != 0
        || get(cqc::APU_CQ, ctx) != 0
    {
        return Err(bad(syndrome::UNSUPPORTED));
    }
    let stride = match get(cqc::CQE_SZ, ctx) as u8 {
        cqe::stride::CQE_STRIDE_64 => 64,
        cqe::stride::CQE_STRIDE_128 => 128,
        _ => return Err(bad(syndrome::BAD_CQE_SIZE)),
    };
    let log_size = get(cqc::LOG_CQ_SIZE, ctx);
    if log_size > hca.cap(cmd_hca_cap::LOG_MAX_CQ_SZ) {
        return Err(bad(syndrome::SIZE_ABOVE_CAP));
    }
    let uar = get(cqc::UAR_PAGE, ctx);
    if !hca.uar_exists(uar) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_UAR));
    }
    let eqn = get(cqc::C_EQN_OR_APU_ELEMENT, ctx);
    if !hca.eq_exists(eqn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_EQN));
    }
    let dbr_addr = cqc::DBR_ADDR.get64(ctx).unwrap_or(0);
    if !dbr_addr.is_multiple_of(8) {
        return Err(bad(syndrome::DBR_MISALIGNED));
    }
    let buf = PagedBuffer::new(
        &input[create_cq_in::BYTES..],
        get(cqc::LOG_PAGE_SIZE, ctx),
        get(cqc::PAGE_OFFSET, ctx),
        stride << log_size,
    )
    .map_err(|e| match e {
        PasError::TooFewPages => bad(syndrome::PAS_TOO_FEW),
        _ => bad(syndrome::PAS_BAD),
    })?;
    let log_max = hca.cap(cmd_hca_cap::LOG_MAX_CQ).min(24);
    if hca.cqs.cqs.len() as u64 >= 1u64 << log_max {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_CQS));
    }
    let cqn = hca.cqs.alloc_cqn();
    let mut saved = [0u8; cqc::BYTES];
    saved.copy_from_slice(&ctx[..cqc::BYTES]);
    hca.cqs.cqs.insert(
        cqn,
        Cq {
            cqn,
            log_size,
            stride,
            buf,
            eqn,
            uar,
            dbr_addr,
            overrun_ignore: get(cqc::OI, ctx) != 0,
            pi: 0,
            seen_ci: None,
            solicit_mark: 0,
            arm: Arm::Off,
            arm_sn: 0,
            arms: 0,
            last_notified: 0,
            in_error: false,
            users: 0,
            cqc: saved,
        },
    );
    let _ = create_cq_out::CQN.set(output, cqn);
    Ok(())
}

/// DESTROY_CQ (opcode 0x401).
pub fn destroy_cq(hca: &mut Hca, input: &[u8], _output: &mut [u8]) -> CmdResult {
    let cqn = get(destroy_cq_in::CQN, input);
    let cq = hca
        .cqs
        .cqs
        .get(&cqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_CQ))?;
    if cq.users != 0 {
        return Err(err(cmd_status::RES_BUSY, syndrome::CQ_IN_USE));
    }
    hca.cqs.cqs.remove(&cqn);
    Ok(())
}

/// MODIFY_CQ (opcode 0x403), op_mod RESIZE: the CQ moves to the buffer in `pas[]` with the new
/// `log_cq_size` / `log_page_size` / `page_offset` (Linux ib/cq.c `mlx5_ib_resize_cq` selects
/// LOG_SIZE | PG_OFFSET | PG_SIZE). A RESIZE CQE goes to the old buffer at the producer index
/// first; later CQEs go to the new buffer.
pub fn modify_cq(hca: &mut Hca, input: &[u8], _output: &mut [u8]) -> CmdResult {
    let bad = |s| err(cmd_status::BAD_PARAM_ERR, s);
    let op_mod = get(modify_cq_in::OP_MOD, input) as u16;
    let select = get(modify_cq_in::MODIFY_FIELD_SELECT_RESIZE_FIELD_SELECT, input);
    let known = cq_modify::MASK_LOG_SIZE | cq_modify::MASK_PG_OFFSET | cq_modify::MASK_PG_SIZE;
    if op_mod != cq_modify::OPMOD_RESIZE
        || select & cq_modify::MASK_LOG_SIZE == 0
        || select & !known != 0
    {
        return Err(bad(syndrome::MODIFY_UNSUPPORTED));
    }
    if hca.cap(cmd_hca_cap::CQ_RESIZE) == 0 {
        return Err(err(cmd_status::BAD_OP_ERR, syndrome::RESIZE_NOT_CAPABLE));
    }
    if get(modify_cq_in::CQ_UMEM_VALID, input) != 0 {
        return Err(bad(syndrome::UNSUPPORTED));
    }
    let ctx = modify_cq_in::CQ_CONTEXT
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    let cqn = get(modify_cq_in::CQN, input);
    let log_max = hca.cap(cmd_hca_cap::LOG_MAX_CQ_SZ);
    let mem = hca.mem.clone();
    let cq = hca
        .cqs
        .cqs
        .get_mut(&cqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_CQ))?;
    if cq.in_error {
        return Err(err(
            cmd_status::BAD_RES_STATE_ERR,
            syndrome::RESIZE_IN_ERROR,
        ));
    }
    let stride: u64 = match get(cqc::CQE_SZ, ctx) as u8 {
        cqe::stride::CQE_STRIDE_64 => 64,
        cqe::stride::CQE_STRIDE_128 => 128,
        _ => return Err(bad(syndrome::BAD_CQE_SIZE)),
    };
    if stride != cq.stride {
        return Err(bad(syndrome::RESIZE_CQE_SIZE));
    }
    let log_size = get(cqc::LOG_CQ_SIZE, ctx);
    if log_size > log_max {
        return Err(bad(syndrome::SIZE_ABOVE_CAP));
    }
    // Fields not selected keep their value.
    let pick = |mask: u32, f| {
        if select & mask != 0 {
            get(f, ctx)
        } else {
            get(f, &cq.cqc[..])
        }
    };
    let log_page_size = pick(cq_modify::MASK_PG_SIZE, cqc::LOG_PAGE_SIZE);
    let page_offset = pick(cq_modify::MASK_PG_OFFSET, cqc::PAGE_OFFSET);
    let pas = input.get(modify_cq_in::BYTES..).unwrap_or(&[]);
    let buf = PagedBuffer::new(pas, log_page_size, page_offset, stride << log_size).map_err(
        |e| match e {
            PasError::TooFewPages => bad(syndrome::PAS_TOO_FEW),
            _ => bad(syndrome::PAS_BAD),
        },
    )?;
    // The CQEs not consumed yet must fit the new ring, and the old one must have room for the
    // RESIZE CQE (MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR, "bad size too many outstanding CQEs",
    // Linux include/linux/mlx5/device.h).
    let outs = |code| err(cmd_status::BAD_SIZE_OUTS_CQES_ERR, code);
    let outstanding = match cq.consumer_index(&*mem) {
        Ok(ci) => cq.pi.wrapping_sub(ci) & INDEX_MASK,
        Err(_) => return Err(outs(syndrome::RESIZE_OUTSTANDING)),
    };
    if outstanding >= cq.size() || outstanding >= 1u32 << log_size {
        return Err(outs(syndrome::RESIZE_OUTSTANDING));
    }
    // The RESIZE CQE, in the old buffer with the old owner bit.
    let mut c = Cqe([0; cqe::SIZE]);
    c.0[cqe::offset::OP_OWN] = cqe::opcode::RESIZE_CQ << 4;
    let mut bytes = c.0;
    let owner = ((cq.pi >> cq.log_size) & 1) as u8;
    bytes[cqe::offset::OP_OWN] |= owner;
    let slot = (cq.pi & (cq.size() - 1)) as u64 * cq.stride + (cq.stride - 64);
    let wrote = cq
        .buf
        .write(&*mem, slot, &bytes[..cqe::offset::OP_OWN])
        .and_then(|_| {
            cq.buf.write(
                &*mem,
                slot + cqe::offset::OP_OWN as u64,
                &bytes[cqe::offset::OP_OWN..],
            )
        });
    if wrote.is_err() {
        return Err(err(cmd_status::INT_ERR, syndrome::RESIZE_CQE_WRITE));
    }
    cq.pi = cq.pi.wrapping_add(1);
    cq.buf = buf;
    cq.log_size = log_size;
    let _ = cqc::LOG_CQ_SIZE.set(&mut cq.cqc, log_size);
    let _ = cqc::LOG_PAGE_SIZE.set(&mut cq.cqc, log_page_size);
    let _ = cqc::PAGE_OFFSET.set(&mut cq.cqc, page_offset);
    Ok(())
}

/// QUERY_CQ (opcode 0x402): the cqc with the current state and counters, and the page list.
pub fn query_cq(hca: &mut Hca, input: &[u8], output: &mut [u8]) -> CmdResult {
    let cqn = get(query_cq_in::CQN, input);
    let cq = hca
        .cqs
        .cqs
        .get(&cqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_CQ))?;
    let ctx = cq.query_context(&*hca.mem);
    let _ = query_cq_out::CQ_CONTEXT.write_bytes(output, &ctx);
    // pas[] as far as the driver's output buffer reaches.
    let room = output.len().saturating_sub(query_cq_out::BYTES) / 8;
    for (i, a) in cq.buf.pas().iter().take(room).enumerate() {
        let at = query_cq_out::BYTES + i * 8;
        output[at..at + 8].copy_from_slice(&a.to_be_bytes());
    }
    Ok(())
}

/// Posts the event a CQE write produced.
fn post_event(hca: &mut Hca, cqn: u32, ev: CqEvent) {
    match ev {
        CqEvent::None => {}
        CqEvent::Completion { eqn } => {
            let mut data = [0u8; comp_event::BYTES];
            let _ = comp_event::CQ_NUMBER.set(&mut data, cqn);
            if !hca.post_eqe(eqn, event::COMP, 0, &data) {
                hca.trace_note(format_args!(
                    "CQ {cqn:#x}: completion event lost, EQ {eqn:#x} full or gone"
                ));
            }
        }
        CqEvent::Error { syndrome } => {
            let mut data = [0u8; cq_error::BYTES];
            let _ = cq_error::CQN.set(&mut data, cqn);
            let _ = cq_error::SYNDROME.set(&mut data, syndrome as u32);
            hca.trace_note(format_args!(
                "CQ {cqn:#x}: CQ error, syndrome {syndrome:#x}"
            ));
            hca.post_async_event(event::CQ_ERROR, 0, &data);
        }
    }
}

/// Writes a CQE to CQ `cqn`, applying the data-plane fault switches, and posts the resulting
/// completion or CQ-error event. Returns false if the CQ does not exist or is in error.
pub fn post_cqe(hca: &mut Hca, cqn: u32, c: &Cqe) -> bool {
    let f = {
        let faults = hca.faults_mut();
        let f = CqeFaults {
            stuck_owner: faults.stuck_cq_owner == Some(cqn),
            corrupt: faults.corrupt_next_cqe,
            duplicate: faults.duplicate_next_cqe,
        };
        faults.corrupt_next_cqe = false;
        faults.duplicate_next_cqe = false;
        f
    };
    let Some(cq) = hca.cqs.cqs.get_mut(&cqn) else {
        return false;
    };
    if cq.in_error {
        return false;
    }
    let ev = cq.write(&*hca.mem, c, f);
    let ok = !matches!(ev, CqEvent::Error { .. });
    post_event(hca, cqn, ev);
    ok
}

/// The CQ arm doorbell (UAR offset 0x20): `value = (sn << 28 | cmd | ci) << 32 | cqn`.
pub fn arm_doorbell(hca: &mut Hca, value: u64) {
    let cqn = (value as u32) & INDEX_MASK;
    let hi = (value >> 32) as u32;
    let Some(cq) = hca.cqs.cqs.get_mut(&cqn) else {
        hca.trace_note(format_args!(
            "CQ arm doorbell for unknown CQ {cqn:#x} ignored"
        ));
        return;
    };
    let ev = cq.arm(hi);
    post_event(hca, cqn, ev);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RegionMemory;

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
        };
        (c, buf, dbr)
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
