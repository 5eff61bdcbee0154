//! Completion queues: CREATE_CQ / DESTROY_CQ / QUERY_CQ / MODIFY_CQ (resize), CQE writing, the
//! arm doorbell and completion / CQ-error events.
//!
//! A CQ of `2^log_cq_size` entries lives in a buffer described by `pas[]` (page size RELATIVE to
//! 4 KiB, Linux `create_cq_user`; `page_offset` quantized). CQE `n` is at `(n & (size - 1)) *
//! stride`; for 128-byte CQEs the 64-byte CQE is the second half (rdma-core cq.c
//! `get_sw_cqe`). Hardware writes the owner bit as `(n >> log_cq_size) & 1`, so software sees
//! CQE `n` as its own when `op_own & 1 == !!(n & size)` and the opcode is not INVALID
//! (rdma-core providers/mlx5/cq.c:147).
//!
//! The doorbell record at `dbr_addr` holds the consumer index (`dbrec[0]`, 24 bits) and the arm
//! word (`dbrec[1]`) (rdma-core `mlx5_arm_cq`). The model checks the consumer index
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

mod commands;
mod entry;
mod ring;

use mlx5_prm::{cq_error_syndrome, cqc};

use crate::objects::mr::PagedBuffer;

pub(crate) use commands::{create_cq, destroy_cq, modify_cq, query_cq};
pub use entry::Cqe;

/// Syndromes of the CQ commands (the model's own; range 0x5202_xxxx, see [`crate::objects::mr::syndrome`]).
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

pub(crate) const INDEX_MASK: u32 = 0xff_ffff;

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
    /// The region of guest memory the ring was last written in ([`crate::memory::ViewSlot`]).
    ring_view: crate::memory::ViewSlot,
    /// The stretch of `buf` the last CQE was written in ([`crate::memory::RingWindow`]);
    /// cleared when `buf` is replaced (resize).
    ring_win: crate::memory::RingWindow,
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

/// CQs by number: the CQNs in ascending order beside their CQs (iteration in CQN order, as a
/// `BTreeMap` gave), and a hint naming where the last lookup found its CQ: every CQE looks
/// its CQ up, usually the one the last CQE went to, which the hint finds with one compare
/// instead of a tree walk (a stale hint only costs that compare).
#[derive(Default)]
struct CqMap {
    /// Ascending, no duplicates; `cqs[i]` is CQ `keys[i]`.
    keys: Vec<u32>,
    cqs: Vec<Cq>,
    hint: std::sync::atomic::AtomicUsize,
}

impl CqMap {
    #[inline]
    fn find(&self, cqn: u32) -> Option<usize> {
        use std::sync::atomic::Ordering::Relaxed;
        let h = self.hint.load(Relaxed);
        if self.keys.get(h) == Some(&cqn) {
            return Some(h);
        }
        let i = self.keys.binary_search(&cqn).ok()?;
        self.hint.store(i, Relaxed);
        Some(i)
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn contains_key(&self, cqn: &u32) -> bool {
        self.find(*cqn).is_some()
    }

    #[inline]
    fn get(&self, cqn: &u32) -> Option<&Cq> {
        self.find(*cqn).map(|i| &self.cqs[i])
    }

    #[inline]
    fn get_mut(&mut self, cqn: &u32) -> Option<&mut Cq> {
        self.find(*cqn).map(|i| &mut self.cqs[i])
    }

    /// Adds CQ `cqn` (replacing one of that number, which is returned).
    fn insert(&mut self, cqn: u32, cq: Cq) -> Option<Cq> {
        match self.keys.binary_search(&cqn) {
            Ok(i) => Some(std::mem::replace(&mut self.cqs[i], cq)),
            Err(i) => {
                self.keys.insert(i, cqn);
                self.cqs.insert(i, cq);
                None
            }
        }
    }

    fn remove(&mut self, cqn: &u32) -> Option<Cq> {
        let i = self.keys.binary_search(cqn).ok()?;
        self.keys.remove(i);
        Some(self.cqs.remove(i))
    }

    fn values(&self) -> std::slice::Iter<'_, Cq> {
        self.cqs.iter()
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.cqs.clear();
    }
}

/// The CQ table.
#[derive(Default)]
pub struct CqTable {
    cqs: CqMap,
    next: u32,
}

impl CqTable {
    /// Every CQ.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Cq> {
        self.cqs.values()
    }

    /// The CQ with this number.
    #[inline]
    pub fn get(&self, cqn: u32) -> Option<&Cq> {
        self.cqs.get(&cqn)
    }

    /// The CQ with this number, mutably (every CQE write looks its CQ up here, from the data
    /// path: inlined there, as when the write was in this module).
    #[inline]
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
