//! Work completions: status, opcode, the completion record and the head the poller
//! writes in one store.

use core::ptr;

/// Completion status: the PRM crate's ([`mlx5_prm::cqe::WcStatus`], with the syndrome
/// mapping), shared with the model, which writes the CQEs this reads.
pub use mlx5_prm::cqe::WcStatus;

/// What completed (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[repr(u8)]
pub enum WcOpcode {
    /// SEND or SEND with immediate.
    Send,
    /// RDMA WRITE or RDMA WRITE with immediate.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// Atomic compare and swap.
    CompSwap,
    /// Atomic fetch and add.
    FetchAdd,
    /// A receive completed by a SEND.
    Recv,
    /// A receive completed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// Unknown (error or garbage CQEs).
    Unknown,
    /// A memory window bound (`IBV_WC_BIND_MW`: a BIND_MW work request or the bind verb).
    BindMw,
    /// A local invalidate (`IBV_WC_LOCAL_INV`).
    LocalInv,
    /// A receive completed by a SEND with invalidate (`IBV_WC_RECV` with `IBV_WC_WITH_INV`):
    /// [`WorkCompletion::imm`] holds the invalidated rkey (ibv_wc's `imm_data` /
    /// `invalidated_rkey` union).
    RecvWithInv,
}

/// One work completion. `repr(C)`, with `status`, `opcode` and `vendor_err` adjacent so the
/// poller writes the three as one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Bytes transferred: defined for receives, RDMA READ and atomics (verbs leaves it
    /// undefined for SEND and RDMA WRITE completions; there it is the CQE's `byte_cnt`).
    pub byte_len: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Immediate data, when the sender attached some.
    pub imm: Option<u32>,
    /// Status.
    pub status: WcStatus,
    /// Opcode (meaningful when `status` is success).
    pub opcode: WcOpcode,
    /// Vendor syndrome of an error CQE.
    pub vendor_err: u8,
}

/// `status`, `opcode` and `vendor_err` of a completion and the padding byte after them, as
/// they lie in memory: one 4-byte store.
#[derive(Clone, Copy)]
pub(super) struct WcHead(u32);

// The layout `WcHead::write` relies on: the three one-byte fields at a 4-byte aligned offset,
// then only padding to the end.
const _: () = {
    use core::mem::{offset_of, size_of};
    let o = offset_of!(WorkCompletion, status);
    assert!(o % 4 == 0 && size_of::<WcStatus>() == 1 && size_of::<WcOpcode>() == 1);
    assert!(offset_of!(WorkCompletion, opcode) == o + 1);
    assert!(offset_of!(WorkCompletion, vendor_err) == o + 2);
    assert!(size_of::<WorkCompletion>() >= o + 4);
    assert!(offset_of!(WorkCompletion, imm) + size_of::<Option<u32>>() <= o);
};

impl WcHead {
    pub(super) const fn new(status: WcStatus, opcode: WcOpcode, vendor_err: u8) -> WcHead {
        WcHead(u32::from_ne_bytes([
            status as u8,
            opcode as u8,
            vendor_err,
            0,
        ]))
    }

    /// A successful completion with this head.
    #[inline(always)]
    pub(super) fn write(self, w: &mut WorkCompletion, wr_id: u64, byte_len: u32, qp_num: u32) {
        w.wr_id = wr_id;
        w.byte_len = byte_len;
        w.qp_num = qp_num;
        w.imm = None;
        // SAFETY: the 4 bytes at `status` are `status`, `opcode`, `vendor_err` and padding
        // (checked above), inside `*w` and 4-byte aligned; the bytes written are a valid
        // `WcStatus` and `WcOpcode` (both `repr(u8)`, from `WcHead::new`).
        unsafe {
            let p = (w as *mut WorkCompletion as *mut u8)
                .add(core::mem::offset_of!(WorkCompletion, status));
            ptr::write(p as *mut u32, self.0);
        }
    }
}

impl Default for WorkCompletion {
    fn default() -> Self {
        WorkCompletion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Unknown,
            byte_len: 0,
            imm: None,
            qp_num: 0,
            vendor_err: 0,
        }
    }
}
