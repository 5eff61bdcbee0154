//! Reading CQEs: the field reads, the send fast path's helpers and the general parser.

use alloc::sync::Arc;
use core::ptr;

use mlx5_prm::{cqe, wqe};

use crate::hal::Hal;
use crate::wq::{SendCursor, WqShared};

use super::{CqShared, WcFlags, WcHead, WcOpcode, WcStatus, WorkCompletion};

/// A CQE in the CQ buffer, read field by field (no 64-byte copy).
#[derive(Clone, Copy)]
pub(super) struct Cqe(pub(super) *const u8);

/// Bytes 1..4 of a dword read in memory order.
pub(super) const QPN_BYTES: u32 = u32::from_ne_bytes([0, 0xff, 0xff, 0xff]);

impl Cqe {
    /// # Safety
    /// As [`Cqe::be32`].
    #[inline]
    pub(super) unsafe fn ne32(self, o: usize) -> u32 {
        // SAFETY: per the caller: in bounds and 4-byte aligned; volatile: device memory.
        unsafe { ptr::read_volatile(self.0.add(o) as *const u32) }
    }
    /// # Safety
    /// `self.0 + o + 4` stays inside the CQE and `o` is a multiple of 4 (the CQE is 64-byte
    /// aligned).
    #[inline]
    pub(super) unsafe fn be32(self, o: usize) -> u32 {
        // SAFETY: per the caller: in bounds and 4-byte aligned; volatile: device memory.
        u32::from_be(unsafe { ptr::read_volatile(self.0.add(o) as *const u32) })
    }
    /// # Safety
    /// `self.0 + o + 2` stays inside the CQE and `o` is even.
    #[inline]
    pub(super) unsafe fn be16(self, o: usize) -> u16 {
        // SAFETY: per the caller.
        u16::from_be(unsafe { ptr::read_volatile(self.0.add(o) as *const u16) })
    }
    /// # Safety
    /// `self.0 + o` lies inside the CQE.
    #[inline]
    pub(super) unsafe fn u8(self, o: usize) -> u8 {
        // SAFETY: per the caller.
        unsafe { ptr::read_volatile(self.0.add(o)) }
    }
}

/// `ibv_wc_opcode` of a successful send completion, by the WQE opcode in
/// `sop_drop_qpn[31:24]` (rdma-core cq.c `handle_good_req`).
const REQ_OPCODE: [WcOpcode; 256] = {
    let mut t = [WcOpcode::Unknown; 256];
    t[wqe::opcode::RDMA_WRITE as usize] = WcOpcode::RdmaWrite;
    t[wqe::opcode::RDMA_WRITE_IMM as usize] = WcOpcode::RdmaWrite;
    t[wqe::opcode::SEND as usize] = WcOpcode::Send;
    t[wqe::opcode::SEND_IMM as usize] = WcOpcode::Send;
    t[wqe::opcode::SEND_INVAL as usize] = WcOpcode::Send;
    t[wqe::opcode::RDMA_READ as usize] = WcOpcode::RdmaRead;
    t[wqe::opcode::ATOMIC_CS as usize] = WcOpcode::CompSwap;
    t[wqe::opcode::ATOMIC_FA as usize] = WcOpcode::FetchAdd;
    t
};

/// The opcode cache entry of a raw `sop_drop_qpn` dword: the dword and the head of the
/// successful completion it makes (rdma-core cq.c `handle_good_req`).
#[inline]
pub(super) fn req_seen(sop: u32) -> (u32, WcHead) {
    let op = REQ_OPCODE[sop.to_ne_bytes()[0] as usize];
    (sop, WcHead::new(WcStatus::Success, op, 0))
}

/// The opcode cache entry of QP `q` with the NOP opcode byte (0): its key.
pub(super) fn nop_seen(q: &WqShared) -> (u32, WcHead) {
    req_seen(q.qpn_key)
}

fn bad_cqe(qpn: u32) -> WorkCompletion {
    WorkCompletion {
        qp_num: qpn,
        status: WcStatus::BadCqe,
        ..WorkCompletion::default()
    }
}

/// The QP `qpn` (cached for the next CQEs), or `None` when no QP of this CQ has that number.
fn find_qp<'c, H: Hal>(
    shared: &CqShared<H>,
    cached: &'c mut Arc<WqShared>,
    qpn: u32,
) -> Option<&'c WqShared> {
    if cached.qpn != qpn {
        *cached = shared.qps.read().iter().find(|q| q.qpn == qpn)?.clone();
    }
    Some(cached)
}

/// A CQE the poll loop's common case does not take (receives, errors, another QP, garbage): the cursor's
/// tail is published first (the general parser works on the shared state, and may switch
/// `cached` to another QP), and the cursor is taken again afterwards.
#[inline]
pub(super) fn other_cqe<H: Hal>(
    shared: &CqShared<H>,
    cached: &mut Arc<WqShared>,
    q: &mut SendCursor,
    c: Cqe,
    op_own: u8,
    w: &mut WorkCompletion,
) {
    cached.store_tail(q);
    // SAFETY: the caller saw the CQE handed over (owner bit, opcode, read barrier).
    let sop = u32::from_be(unsafe { c.ne32(cqe::offset::SOP_DROP_QPN) });
    // SAFETY: as above.
    unsafe { parse(shared, cached, c, op_own, sop, w) };
    *q = cached.cursor();
}

/// A successful send completion of the cached QP that is not the one its send queue expects
/// next: the full check (a completion that covers unsignaled WRs passes, a duplicate or
/// garbage counter is [`WcStatus::BadCqe`]). Returns the new tail.
///
/// # Safety
/// `c` points to a whole CQE the device handed over.
#[cold]
#[inline(never)]
pub(super) unsafe fn send_slow(
    q: &WqShared,
    slot: &crate::wq::SqSlot,
    tail: u32,
    counter: u16,
    c: Cqe,
    w: &mut WorkCompletion,
) -> u32 {
    let Some((wr_id, tail)) = SendCursor::complete_slow(q, slot, tail, counter) else {
        *w = bad_cqe(q.qpn);
        return tail;
    };
    // SAFETY: per the caller; offsets inside mlx5_cqe64.
    let (sop, byte_len) = unsafe {
        (
            c.ne32(cqe::offset::SOP_DROP_QPN),
            c.be32(cqe::offset::BYTE_CNT),
        )
    };
    *w = WorkCompletion {
        wr_id,
        status: WcStatus::Success,
        opcode: REQ_OPCODE[sop.to_ne_bytes()[0] as usize],
        byte_len,
        qp_num: q.qpn,
        ..WorkCompletion::default()
    };
    tail
}

/// The fields of a successful receive beyond the data (Linux hw/mlx5/cq.c
/// `handle_responder` for an Ethernet port): the source QP, the GRH flag, immediate data's
/// flag, the service level (the VLAN priority of a tagged frame, else 0) and the P_Key index
/// (0: RoCE's P_Key table holds the one default key, which Linux's lookup for QP1 finds at
/// index 0, and other QPs report 0).
///
/// # Safety
/// `c` points to a whole CQE the device handed over.
#[inline]
unsafe fn responder_fields(c: Cqe, wc: &mut WorkCompletion) {
    use cqe::offset as o;
    // SAFETY: per the caller; the offsets lie inside mlx5_cqe64.
    let (flags_rqpn, l4_l3, vlan) = unsafe {
        (
            c.be32(o::FLAGS_RQPN),
            c.u8(o::L4_HDR_TYPE_ETC),
            c.be16(o::VLAN_INFO),
        )
    };
    wc.src_qp = flags_rqpn & cqe::flags_rqpn::SRC_QP_MASK;
    let mut f = WcFlags::NONE;
    if (flags_rqpn >> 28) & 3 != 0 {
        f = f | WcFlags::GRH;
    }
    if wc.imm.is_some() && wc.opcode != WcOpcode::RecvWithInv {
        f = f | WcFlags::WITH_IMM;
    }
    wc.wc_flags = f;
    // `l4_l3_hdr_type` bit 0: a VLAN tag was present; its PCP is the SL.
    wc.sl = if l4_l3 & 1 != 0 {
        (vlan >> 13) as u8 & 7
    } else {
        0
    };
    wc.pkey_index = 0;
}

/// Parses one CQE (rdma-core cq.c `mlx5_parse_cqe`, `handle_good_req`, `handle_responder`,
/// `mlx5_handle_error_cqe`): the general case.
///
/// # Safety
/// `c` points to a whole CQE the device handed over.
#[inline(never)]
unsafe fn parse<H: Hal>(
    shared: &CqShared<H>,
    cached: &mut Arc<WqShared>,
    c: Cqe,
    op_own: u8,
    sop: u32,
    out: &mut WorkCompletion,
) {
    // SAFETY: per the caller.
    *out = unsafe { parse_one(shared, cached, c, op_own, sop) };
}

/// [`parse`]'s body.
///
/// # Safety
/// As [`parse`].
#[inline]
unsafe fn parse_one<H: Hal>(
    shared: &CqShared<H>,
    cached: &mut Arc<WqShared>,
    c: Cqe,
    op_own: u8,
    sop: u32,
) -> WorkCompletion {
    use cqe::offset as o;
    // SAFETY: every offset below is < 64 - 4 (mlx5_cqe64 layout, mlx5_prm::cqe::offset).
    let byte_cnt = unsafe { c.be32(o::BYTE_CNT) };
    let op = cqe::opcode(op_own);
    let qpn = sop & 0xff_ffff;
    let mut wc = WorkCompletion {
        qp_num: qpn,
        byte_len: byte_cnt,
        ..WorkCompletion::default()
    };
    let Some(q) = find_qp(shared, cached, qpn) else {
        return bad_cqe(qpn);
    };
    match op {
        cqe::opcode::REQ | cqe::opcode::REQ_ERR => {
            // SAFETY: as above.
            let counter = unsafe { c.be16(o::WQE_COUNTER) };
            // A UMR's opcode was saved when it was posted (rdma-core cq.c `handle_good_req`:
            // `wc->opcode = wq->wr_data[idx]` for MLX5_OPCODE_UMR).
            let umr_op = ((sop >> 24) as u8 == wqe::opcode::UMR).then(|| q.umr_wc_op(counter));
            let Some(wr_id) = q.complete_send(counter) else {
                return bad_cqe(qpn);
            };
            wc.wr_id = wr_id;
            if op == cqe::opcode::REQ_ERR {
                // SAFETY: as above.
                unsafe {
                    wc.status = WcStatus::from_syndrome(c.u8(cqe::err_offset::SYNDROME));
                    wc.vendor_err = c.u8(cqe::err_offset::VENDOR_ERR_SYND);
                }
                wc.byte_len = 0;
            } else if let Some(op) = umr_op {
                wc.opcode = crate::qp::wc_opcode(op);
            } else {
                wc.opcode = REQ_OPCODE[(sop >> 24) as usize];
            }
        }
        cqe::opcode::RESP_WR_IMM
        | cqe::opcode::RESP_SEND
        | cqe::opcode::RESP_SEND_IMM
        | cqe::opcode::RESP_SEND_INV
        | cqe::opcode::RESP_ERR => {
            let wr_id = if q.rq_by_counter {
                // SAFETY: as above.
                q.complete_recv_at(unsafe { c.be16(o::WQE_COUNTER) })
            } else {
                q.complete_recv()
            };
            let Some(wr_id) = wr_id else {
                return bad_cqe(qpn);
            };
            wc.wr_id = wr_id;
            // SAFETY: as above.
            unsafe {
                match op {
                    cqe::opcode::RESP_ERR => {
                        wc.status = WcStatus::from_syndrome(c.u8(cqe::err_offset::SYNDROME));
                        wc.vendor_err = c.u8(cqe::err_offset::VENDOR_ERR_SYND);
                        wc.byte_len = 0;
                    }
                    cqe::opcode::RESP_WR_IMM => {
                        wc.opcode = WcOpcode::RecvRdmaWithImm;
                        wc.imm = Some(c.be32(o::IMM_INVAL_PKEY));
                    }
                    cqe::opcode::RESP_SEND_IMM => {
                        wc.opcode = WcOpcode::Recv;
                        wc.imm = Some(c.be32(o::IMM_INVAL_PKEY));
                    }
                    // rdma-core cq.c `handle_responder`: MLX5_CQE_RESP_SEND_INV is
                    // IBV_WC_RECV with IBV_WC_WITH_INV, `invalidated_rkey` = imm_inval_pkey.
                    cqe::opcode::RESP_SEND_INV => {
                        wc.opcode = WcOpcode::RecvWithInv;
                        wc.imm = Some(c.be32(o::IMM_INVAL_PKEY));
                    }
                    _ => wc.opcode = WcOpcode::Recv,
                }
                if op != cqe::opcode::RESP_ERR {
                    responder_fields(c, &mut wc);
                }
            }
        }
        _ => return bad_cqe(qpn),
    }
    wc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(64))]
    struct Raw([u8; 64]);

    /// A receive's fields as Linux hw/mlx5/cq.c `handle_responder` reads them on an
    /// Ethernet port: the source QP from `flags_rqpn` 23:0, GRH from bits 29:28, the SL from
    /// a VLAN tag's priority (`l4_l3_hdr_type` bit 0, `vlan_info` 15:13) else 0, WITH_IMM
    /// for immediate data but not for an invalidated rkey, P_Key index 0.
    #[test]
    fn responder_fields_are_handle_responders() {
        use cqe::offset as o;
        let mut raw = Raw([0; 64]);
        let flags = cqe::flags_rqpn::GRH_IN_DATA | 2 << 24 | 0x01_2345;
        raw.0[o::FLAGS_RQPN..o::FLAGS_RQPN + 4].copy_from_slice(&flags.to_be_bytes());
        raw.0[o::VLAN_INFO..o::VLAN_INFO + 2].copy_from_slice(&0xa005u16.to_be_bytes());
        let c = Cqe(raw.0.as_ptr());
        let mut wc = WorkCompletion {
            imm: Some(7),
            opcode: WcOpcode::Recv,
            ..WorkCompletion::default()
        };
        // SAFETY: `raw` is a whole, 64-byte aligned CQE.
        unsafe { responder_fields(c, &mut wc) };
        assert_eq!((wc.src_qp, wc.sl, wc.pkey_index), (0x01_2345, 0, 0));
        assert_eq!(wc.wc_flags, WcFlags::GRH | WcFlags::WITH_IMM);

        raw.0[o::L4_HDR_TYPE_ETC] = 1;
        raw.0[o::FLAGS_RQPN] = 0;
        let c = Cqe(raw.0.as_ptr());
        let mut wc = WorkCompletion {
            imm: Some(0x1234),
            opcode: WcOpcode::RecvWithInv,
            ..WorkCompletion::default()
        };
        // SAFETY: as above.
        unsafe { responder_fields(c, &mut wc) };
        assert_eq!((wc.sl, wc.wc_flags), (5, WcFlags::NONE));
    }
}
