//! A datagram that arrived for a UD QP or the GSI QP (QPN 1 on the wire): the checks, the
//! receive WQE, the 40-byte header area and the payload, the receive CQE.
//!
//! Checks, in order (IBTA §10.9.3 P_Key, §10.2.4 Q_Key; Linux
//! drivers/infiniband/sw/rxe/rxe_recv.c `check_keys` makes the same two): the QP exists, is
//! of a datagram type (QPN 1 names the GSI QP, [`crate::objects::qp::QpTable::gsi`]) and is
//! in RTR or a later state short of ERR; the BTH P_Key matches the QP's P_Key table entry;
//! the DETH Q_Key equals the QP's; a receive WQE is posted; the payload is no longer than the
//! QP's path MTU (`qpc.mtu`). A datagram failing a key check is dropped and counted
//! (`rx_drop_pkey`, `rx_drop_qkey`); one with no receive WQE posted is dropped and counted as
//! `out_of_buffer` (the Q counter Linux reads for it, mlx5_ifc.h
//! `query_q_counter_out.out_of_buffer`); one longer than the path MTU is dropped and counted
//! (`rx_drop_ud_length`), its receive WQE left posted and the QP's state unchanged. That is
//! rxe's order and outcome: rxe_resp.c `check_resource` finds the WQE, then `check_length`
//! refuses an "only" packet whose payload exceeds `qp->mtu` (RESPST_ERR_LENGTH), and
//! `rxe_responder` handles that for UD without an SRQ as a class D error: the message is
//! dropped, no CQE, the WQE stays.
//!
//! The receive buffer gets the 40-byte header area, then the payload (IBTA §11.4.1.2;
//! rdma-core libibverbs/man/ibv_poll_cq.3 for RoCE v2: over IPv4 the area holds 20 zero
//! bytes then the IPv4 header, over IPv6 the IPv6 header). The CQE (Linux
//! drivers/infiniband/hw/mlx5/cq.c `handle_responder`): RESP_SEND or RESP_SEND_IMM, the byte
//! count with the 40 bytes, `flags_rqpn` = the source QP, the header-area flag and the L3
//! header type; `imm_inval_pkey` the immediate, or for the GSI QP the P_Key. A receive WQE
//! too small for the datagram completes with LOCAL_LENGTH_ERR and a bad scatter entry with
//! LOCAL_PROT_ERR; the QP then goes to ERR (as the RC responder's local errors do).

use mlx5_prm::cqe::{self, flags_rqpn};
use mlx5_prm::qp;

use super::{mtu_bytes, pkey_at, GRH_BYTES, GSI_QPN};
use crate::datapath::cq::post_cqe;
use crate::datapath::{enter_error, lkey_vendor, next_recv, vendor, wq_catastrophe, Dp};
use crate::objects::cq::Cqe;
use crate::objects::mr::{Access, KeyUser};
use crate::objects::qp::ServiceType;
use crate::roce::counters::Counter;
use crate::roce::{IpHdr, RoceHeaders};

/// Bytes of an IPv4 header without options (RoCE v2 frames carry none).
const IPV4_BYTES: usize = 20;

/// Whether a packet's P_Key matches the QP's (IBTA §10.9.3: the low 15 bits equal, and not
/// both limited members; Linux rxe_recv.c `pkey_match`).
fn pkey_matches(pkt: u16, ours: u16) -> bool {
    (pkt & 0x7fff) == (ours & 0x7fff) && (pkt | ours) & 0x8000 != 0
}

/// The datagram QP a packet to `dest_qp` is for.
fn target(hca: &Dp<'_>, dest_qp: u32) -> Option<u32> {
    let qps = &hca.objects.qps;
    if dest_qp == GSI_QPN {
        return qps.gsi();
    }
    qps.get(dest_qp)
        .filter(|q| q.st == ServiceType::Ud)
        .map(|q| q.qpn)
}

/// Delivers the UD packet with headers `hdrs` (`ip`: the frame from its IP header on;
/// `payload`: its payload) to its QP.
pub(crate) fn deliver(hca: &mut Dp<'_>, hdrs: &RoceHeaders, ip: &[u8], payload: &[u8]) {
    let Some(deth) = hdrs.ext.deth else {
        return;
    };
    let Some(qpn) = target(hca, hdrs.bth.dest_qp) else {
        return;
    };
    let Some(q) = hca.objects.qps.get(qpn) else {
        return;
    };
    // Receiving works in RTR and after it, a send queue error included (IBTA §10.3.1).
    if !matches!(
        q.state,
        qp::state::RTR | qp::state::RTS | qp::state::SQER | qp::state::SQD
    ) {
        return;
    }
    let ours = pkey_at(q.path.pkey_index).unwrap_or(0);
    if !pkey_matches(hdrs.bth.p_key, ours) {
        hca.port.counters().bump(Counter::RxDropPkey);
        return;
    }
    if deth.q_key != q.qkey {
        hca.port.counters().bump(Counter::RxDropQkey);
        return;
    }
    let (cqn, uidx, gsi, user, mtu) = (
        q.cqn_rcv,
        q.user_index,
        q.st == ServiceType::Gsi,
        KeyUser { pd: q.pd, qpn },
        mtu_bytes(q.mtu),
    );
    let mem = hca.mem.clone();
    let r = match next_recv(&mut hca.objects.qps, &mem, qpn) {
        Ok(Some(r)) => r,
        Ok(None) => {
            hca.port.counters().bump(Counter::OutOfBuffer);
            return;
        }
        Err(()) => return wq_catastrophe(hca, qpn, "RQ buffer unreadable"),
    };
    if payload.len() > mtu {
        // Left posted: the next datagram that fits takes it.
        hca.port.counters().bump(Counter::RxDropUdLength);
        return;
    }
    let Some(q) = hca.objects.qps.get_mut(qpn) else {
        return;
    };
    let counter = q.rq_ci as u16;
    q.rq_ci = q.rq_ci.wrapping_add(1);

    // The header area, then the payload.
    let mut msg = vec![0u8; GRH_BYTES];
    let (l3, at) = match hdrs.ip {
        IpHdr::V4(_) => (flags_rqpn::L3_IPV4, GRH_BYTES - IPV4_BYTES),
        IpHdr::V6(_) => (flags_rqpn::L3_IPV6, 0),
    };
    // (A decoded frame holds its whole IP header.)
    if let Some(h) = ip.get(..GRH_BYTES - at) {
        msg[at..].copy_from_slice(h);
    }
    msg.extend_from_slice(payload);
    let fail = |syn: u8, vend: u8| {
        Cqe::error(cqe::opcode::RESP_ERR, syn, vend, 0, qpn, counter).with_user_index(uidx)
    };
    if msg.len() as u64 > r.capacity() {
        let c = fail(cqe::syndrome::LOCAL_LENGTH_ERR, vendor::RECV_TOO_SMALL);
        post_cqe(hca, cqn, &c);
        return enter_error(hca, qpn);
    }
    if let Err(vend) = scatter(hca, &r, user, &msg) {
        let c = fail(cqe::syndrome::LOCAL_PROT_ERR, vend);
        post_cqe(hca, cqn, &c);
        return enter_error(hca, qpn);
    }
    let imm = hdrs.ext.imm_dt;
    let op = if imm.is_some() {
        cqe::opcode::RESP_SEND_IMM
    } else {
        cqe::opcode::RESP_SEND
    };
    let flags = flags_rqpn::GRH_IN_DATA | l3 << flags_rqpn::L3_TYPE_SHIFT;
    let mut c = Cqe::success(op, qpn, counter, msg.len() as u32)
        .with_user_index(uidx)
        .with_remote_qpn(deth.src_qp)
        .with_flags(flags)
        .with_solicited(hdrs.bth.solicited);
    if let Some(i) = imm {
        c = c.with_imm(i);
    } else if gsi {
        c = c.with_pkey(hdrs.bth.p_key);
    }
    post_cqe(hca, cqn, &c);
}

/// Writes `msg` into the scatter list of receive WQE `r` (every entry's lkey checked for
/// local write by QP `user`); the vendor syndrome of the first fault.
fn scatter(
    hca: &Dp<'_>,
    r: &crate::datapath::wqe::RecvWqe,
    user: KeyUser,
    msg: &[u8],
) -> Result<(), u8> {
    let mut at = 0usize;
    for s in r.entries() {
        if at >= msg.len() {
            break;
        }
        let n = (s.len as usize).min(msg.len() - at);
        let res = hca
            .objects
            .mkeys
            .resolve(s.lkey, s.addr, n as u64, Access::LOCAL_WRITE, user)
            .map_err(lkey_vendor)?;
        let mut off = at;
        res.for_each_piece(|bus, k| {
            hca.mem.write(bus, &msg[off..off + k])?;
            off += k;
            Ok::<(), crate::memory::DmaError>(())
        })
        .map_err(|_| vendor::DMA_FAULT)?;
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::pkey_matches;

    #[test]
    fn pkeys_match_on_the_low_bits_with_one_full_member() {
        assert!(pkey_matches(0xffff, 0xffff));
        assert!(pkey_matches(0x7fff, 0xffff));
        assert!(!pkey_matches(0x7fff, 0x7fff));
        assert!(!pkey_matches(0x8001, 0xffff));
    }
}
