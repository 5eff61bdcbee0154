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

/// Flags of a work completion (`ibv_wc_flags`; Linux hw/mlx5/cq.c `handle_responder` sets
/// them for receives, zero for sends).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(transparent)]
pub struct WcFlags(pub u8);

impl WcFlags {
    /// No flag.
    pub const NONE: WcFlags = WcFlags(0);
    /// `IB_WC_GRH`: the receive buffer starts with the 40-byte GRH area (a datagram QP's
    /// receives; the CQE's `flags_rqpn` bits 29:28 non-zero).
    pub const GRH: WcFlags = WcFlags(1 << 0);
    /// `IB_WC_WITH_IMM`: [`WorkCompletion::imm`] holds the sender's immediate data.
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    /// True when every flag of `o` is set.
    pub const fn contains(self, o: WcFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl core::ops::BitOr for WcFlags {
    type Output = WcFlags;
    fn bitor(self, o: WcFlags) -> WcFlags {
        WcFlags(self.0 | o.0)
    }
}

/// One work completion. `repr(C)`, with `status`, `opcode`, `vendor_err`, `wc_flags`, `sl`
/// and `pkey_index` in one 8-byte word and `qp_num` beside `src_qp`, so the poller writes
/// each pair as one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Bytes transferred: defined for receives, RDMA READ and atomics (verbs leaves it
    /// undefined for SEND and RDMA WRITE completions; there it is the CQE's `byte_cnt`). A
    /// datagram QP's receive counts the 40-byte GRH area too.
    pub byte_len: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Receives: the sender's QP number (`flags_rqpn` bits 23:0: a datagram's DETH source
    /// QP, 1 from a GSI QP); zero for sends.
    pub src_qp: u32,
    /// Immediate data, when the sender attached some.
    pub imm: Option<u32>,
    /// Status.
    pub status: WcStatus,
    /// Opcode (meaningful when `status` is success).
    pub opcode: WcOpcode,
    /// Vendor syndrome of an error CQE.
    pub vendor_err: u8,
    /// Receives: [`WcFlags::GRH`], [`WcFlags::WITH_IMM`]; zero for sends.
    pub wc_flags: WcFlags,
    /// Receives: the service level (RoCE: the VLAN priority of a tagged frame, else 0, as
    /// Linux hw/mlx5/cq.c `handle_responder` reports it); zero for sends.
    pub sl: u8,
    /// Receives on the GSI QP: the index of the packet's P_Key in the port's table (RoCE
    /// has the one default P_Key at index 0; Linux `handle_responder` looks the CQE's P_Key
    /// up for QP1 and reports 0 for every other QP); zero otherwise.
    pub pkey_index: u16,
}

/// `status`, `opcode`, `vendor_err`, `wc_flags`, `sl` and `pkey_index` of a completion, as
/// they lie in memory: one 8-byte store (the last three zero: a send completion's).
#[derive(Clone, Copy)]
pub(super) struct WcHead(u64);

// The layout `WcHead::write` relies on: the six fields (one padding byte among them) in one
// 8-byte word, and `src_qp` right after `qp_num`.
const _: () = {
    use core::mem::{offset_of, size_of};
    let o = offset_of!(WorkCompletion, status);
    assert!(size_of::<WorkCompletion>() >= o + 8);
    assert!(size_of::<WcStatus>() == 1 && size_of::<WcOpcode>() == 1);
    assert!(offset_of!(WorkCompletion, opcode) == o + 1);
    assert!(offset_of!(WorkCompletion, vendor_err) == o + 2);
    assert!(offset_of!(WorkCompletion, wc_flags) == o + 3 && size_of::<WcFlags>() == 1);
    assert!(offset_of!(WorkCompletion, sl) == o + 4);
    assert!(offset_of!(WorkCompletion, pkey_index) == o + 6);
    assert!(offset_of!(WorkCompletion, imm) + size_of::<Option<u32>>() <= o);
    let q = offset_of!(WorkCompletion, qp_num);
    assert!(offset_of!(WorkCompletion, src_qp) == q + 4);
};

impl WcHead {
    pub(super) const fn new(status: WcStatus, opcode: WcOpcode, vendor_err: u8) -> WcHead {
        WcHead(u64::from_ne_bytes([
            status as u8,
            opcode as u8,
            vendor_err,
            0,
            0,
            0,
            0,
            0,
        ]))
    }

    /// A successful completion with this head.
    #[inline]
    pub(super) fn write(self, w: &mut WorkCompletion, wr_id: u64, byte_len: u32, qp_num: u32) {
        w.wr_id = wr_id;
        w.byte_len = byte_len;
        w.imm = None;
        let q = qp_num.to_ne_bytes();
        // SAFETY: `qp_num` and `src_qp` are adjacent `u32`s and the 8 bytes at `status` are
        // `status`, `opcode`, `vendor_err`, `wc_flags`, `sl`, padding and `pkey_index`
        // (checked above), all inside `*w` (unaligned stores); the bytes written are a valid
        // `WcStatus` and `WcOpcode` (both `repr(u8)`, from `WcHead::new`), and any bytes are
        // a valid `u32`, `WcFlags`, `u8` and `u16`.
        unsafe {
            let b = w as *mut WorkCompletion as *mut u8;
            let at = b.add(core::mem::offset_of!(WorkCompletion, qp_num));
            ptr::write_unaligned(at as *mut [u8; 8], [q[0], q[1], q[2], q[3], 0, 0, 0, 0]);
            let at = b.add(core::mem::offset_of!(WorkCompletion, status));
            ptr::write_unaligned(at as *mut u64, self.0);
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
            wc_flags: WcFlags::NONE,
            sl: 0,
            pkey_index: 0,
            src_qp: 0,
        }
    }
}
