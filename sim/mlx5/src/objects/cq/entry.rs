//! The CQE the model writes (`struct mlx5_cqe64`).

use mlx5_prm::cqe;

use super::INDEX_MASK;

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

    /// Sets the bits of `flags_rqpn` above the remote QP number (`flags`: bits 31:24, as
    /// [`mlx5_prm::cqe::flags_rqpn`] names them), keeping the QP number.
    pub fn with_flags(mut self, flags: u32) -> Cqe {
        let at = cqe::offset::FLAGS_RQPN;
        let rqpn = u32::from_be_bytes([0, self.0[at + 1], self.0[at + 2], self.0[at + 3]]);
        self.put32(at, (flags & !INDEX_MASK) | rqpn);
        self
    }

    /// Sets `imm_inval_pkey` to the P_Key the packet carried (the GSI QP's receive CQEs:
    /// Linux drivers/infiniband/hw/mlx5/cq.c `handle_responder` reads its low 16 bits).
    pub fn with_pkey(mut self, pkey: u16) -> Cqe {
        self.put32(cqe::offset::IMM_INVAL_PKEY, pkey.into());
        self
    }

    /// Sets `srqn_uidx` (bits 23:0: the QP's `user_index`, which rdma-core uses to find the QP
    /// when CQE version 1 is in use).
    pub fn with_user_index(mut self, uidx: u32) -> Cqe {
        self.set_user_index(uidx);
        self
    }

    /// [`Cqe::with_user_index`] in place.
    #[inline]
    pub(crate) fn set_user_index(&mut self, uidx: u32) {
        self.put32(cqe::offset::SRQN_UIDX, uidx & INDEX_MASK);
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
    pub(super) fn solicits(&self) -> bool {
        self.is_error() || cqe::se(self.0[cqe::offset::OP_OWN]) != 0
    }
}
