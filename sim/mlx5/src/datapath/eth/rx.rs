//! Ethernet receive: a frame steered to a TIR lands in the next receive WQE of the TIR's RQ
//! and completes with a receive CQE.
//!
//! The RQ is cyclic and its WQEs are lists of data segments (Linux
//! drivers/net/ethernet/mellanox/mlx5/core/en.h `struct mlx5e_rx_wqe_cyc`), ended early by an
//! entry whose lkey is `MLX5_INVALID_LKEY` ([`crate::datapath::wqe::RecvWqe`]); software posts
//! them by writing the WQE counter to the doorbell record's receive dword (en_rx.c
//! `mlx5e_post_rx_wqes`, wq.h `mlx5_wq_cyc_update_db_record`). The frame's bytes go to the
//! entries in order, each through the key table with local write
//! ([`crate::objects::mr::MkeyTable::resolve`]), never past them.
//!
//! The CQE is what en_rx.c reads (`mlx5e_handle_rx_cqe`, `mlx5e_build_rx_skb`,
//! `mlx5e_handle_csum`): opcode RESP_SEND, `wqe_counter` the WQE's counter, `byte_cnt` the
//! frame's length, `srqn` the RQ's user index (no LRO segments), the QPN field of
//! `sop_drop_qpn` the RQN (mlx5e does not read it, but a driver that finds a completion's queue
//! by it does: Linux ib/cq.c `mlx5_poll_one` looks the CQE's QPN up in the table where ib/qp.c
//! `create_raw_packet_qp_rq` put the raw packet QP's RQ under its RQN, through
//! `mlx5_core_create_rq_tracked`), `l4_l3_hdr_type` the header
//! types, `hds_ip_ext` the L2 / L3 / L4 checksum-ok bits, and `check_sum` the one's-complement
//! sum of the IP packet (from the IP header, not over VLAN tags or Ethernet padding: what
//! `mlx5e_skb_csum_fixup` corrects for when `cqe_checksum_full` is not advertised).
//!
//! No receive WQE posted: the frame is dropped and counted in `out_of_buffer` (the port's Q
//! counter set 0 and the RQ's set, `query_q_counter_out`). A frame longer than the WQE's
//! entries, or an entry whose key refuses it, ends in an error CQE (RESP_ERR; the WQE is
//! consumed) and the RQ in ERR, as a receive WQE too small for its message does on a QP.

use mlx5_prm::eth_cqe::{self, hds_ip_ext, l3_hdr_type as l3_type, l4_hdr_type as l4_type};
use mlx5_prm::rqc_state as state;
use mlx5_prm::{cqe, event_queue_type};

use crate::datapath::cq::post_cqe;
use crate::datapath::eth::catastrophe_event;
use crate::datapath::eth::headers::{self, Headers, L3, L4};
use crate::datapath::wqe::RecvWqe;
use crate::datapath::{lkey_vendor, vendor, Dp};
use crate::objects::cq::Cqe;
use crate::objects::mr::{Access, KeyUser};
use crate::objects::wq::WqKind;
use crate::roce::counters::Counter;

/// Why a frame handed to [`deliver`] was not received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EthRxDrop {
    /// No TIR of that number (counted in the port's `rx_drop_rq_not_ready`).
    NoTir,
    /// The TIR's RQ does not exist or is not in RDY (counted in the port's
    /// `rx_drop_rq_not_ready`).
    RqNotReady,
    /// No receive WQE posted (counted as the Q counter's `out_of_buffer`).
    OutOfBuffer,
    /// The WQE's entries are shorter than the frame: error CQE, the RQ in ERR.
    WqeTooSmall,
    /// A WQE entry's key refused the write or its memory is not guest memory: error CQE,
    /// the RQ in ERR.
    Protection,
    /// The RQ's doorbell record or ring could not be read, or its counter is impossible: a
    /// WQ_CATAS_ERROR event, the RQ in ERR.
    WqError,
}

/// The receive CQE of `frame`, received into the WQE of counter `counter` of RQ `rqn`.
fn receive_cqe(frame: &[u8], rqn: u32, counter: u16, user_index: u32) -> Cqe {
    let h = Headers::parse(frame);
    let mut c = Cqe::success(cqe::opcode::RESP_SEND, rqn, counter, frame.len() as u32)
        .with_user_index(user_index);
    let l3 = match h.l3 {
        L3::None => l3_type::NONE,
        L3::Ipv4 { .. } => l3_type::IPV4,
        L3::Ipv6 { .. } => l3_type::IPV6,
    };
    let l4 = match h.l4 {
        L4::None => l4_type::NONE,
        L4::Udp => l4_type::UDP,
        L4::Tcp { ack: false, .. } => l4_type::TCP_NO_ACK,
        L4::Tcp { data: false, .. } => l4_type::TCP_ACK_NO_DATA,
        L4::Tcp { .. } => l4_type::TCP_ACK_AND_DATA,
    };
    // No VLAN tag is stripped (`vlan_cap` is not advertised).
    c.0[cqe::offset::L4_HDR_TYPE_ETC] = eth_cqe::l4_l3_hdr_type(l4, l3, false);
    let mut ok = hds_ip_ext::L2_OK;
    if headers::l3_ok(&h, frame) {
        ok |= hds_ip_ext::L3_OK;
        if headers::l4_ok(&h, frame) {
            ok |= hds_ip_ext::L4_OK;
        }
    }
    c.0[cqe::offset::HDS_IP_EXT] = ok;
    if let Some(p) = h.l3_packet(frame) {
        let sum = headers::fold(headers::sum(p, 0));
        let at = cqe::offset::CHECK_SUM;
        c.0[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    c
}

/// Receives `frame` (an Ethernet frame without FCS) on TIR `tirn`: what receive steering does
/// with a frame a rule forwards to a TIR. Public so tests can hand frames to a TIR.
pub fn deliver(dp: &mut Dp<'_>, tirn: u32, frame: &[u8]) -> Result<(), EthRxDrop> {
    let not_ready = |dp: &Dp<'_>, e: EthRxDrop| {
        dp.port.counters().bump(Counter::RxDropRqNotReady);
        e
    };
    let Some(rqn) = dp.objects.tirs.get(tirn).map(|t| t.rqn) else {
        return Err(not_ready(dp, EthRxDrop::NoTir));
    };
    let mem = dp.mem.clone();
    let Some(rq) = dp.objects.rqs.get(rqn).filter(|rq| rq.state == state::RDY) else {
        return Err(not_ready(dp, EthRxDrop::RqNotReady));
    };
    let Ok(pi) = rq.wq.producer(&*mem, WqKind::Receive) else {
        return Err(catastrophe(dp, rqn, "doorbell record unreadable"));
    };
    let ci = rq.next;
    if pi == ci {
        let set = rq.counter_set;
        dp.port.counters().bump(Counter::OutOfBuffer);
        if let Some(s) = dp.objects.qcounters.get(set) {
            s.bump(Counter::OutOfBuffer);
        }
        return Err(EthRxDrop::OutOfBuffer);
    }
    if pi.wrapping_sub(ci) as u32 > rq.wq.size() {
        return Err(catastrophe(dp, rqn, "RQ producer counter beyond the ring"));
    }
    let (cqn, uidx, pd) = (rq.cqn, rq.user_index, rq.wq.pd);
    let mut raw = vec![0u8; 1 << rq.wq.log_stride];
    if rq.wq.read(&*mem, ci as u32, 0, &mut raw).is_err() {
        return Err(catastrophe(dp, rqn, "RQ buffer unreadable"));
    }
    if let Some(rq) = dp.objects.rqs.get_mut(rqn) {
        rq.next = ci.wrapping_add(1);
    }
    let wqe = RecvWqe::parse(&raw);
    let r = if wqe.capacity() < frame.len() as u64 {
        Err((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::RECV_TOO_SMALL))
    } else {
        scatter(dp, &wqe, KeyUser { pd, qpn: rqn }, frame)
    };
    match r {
        Ok(()) => {
            post_cqe(dp, cqn, &receive_cqe(frame, rqn, ci, uidx));
            Ok(())
        }
        Err((syn, vend)) => {
            let c = Cqe::error(cqe::opcode::RESP_ERR, syn, vend, 0, rqn, ci).with_user_index(uidx);
            post_cqe(dp, cqn, &c);
            if let Some(rq) = dp.objects.rqs.get_mut(rqn) {
                rq.state = state::ERR;
            }
            Err(if syn == cqe::syndrome::LOCAL_LENGTH_ERR {
                EthRxDrop::WqeTooSmall
            } else {
                EthRxDrop::Protection
            })
        }
    }
}

/// Writes `frame` to the entries of `wqe` in order (their capacity holds it).
fn scatter(dp: &Dp<'_>, wqe: &RecvWqe, user: KeyUser, frame: &[u8]) -> Result<(), (u8, u8)> {
    let mut at = 0usize;
    for s in wqe.entries() {
        if at == frame.len() {
            break;
        }
        let n = (s.len.min((frame.len() - at) as u64)) as usize;
        let r = dp
            .objects
            .mkeys
            .resolve(s.lkey, s.addr, n as u64, Access::LOCAL_WRITE, user)
            .map_err(|f| (cqe::syndrome::LOCAL_PROT_ERR, lkey_vendor(f)))?;
        r.write(&**dp.mem, &frame[at..at + n])
            .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
        at += n;
    }
    Ok(())
}

/// A DMA failure on the RQ: a WQ_CATAS_ERROR event naming the RQ, and the RQ to ERR.
fn catastrophe(dp: &mut Dp<'_>, rqn: u32, why: &str) -> EthRxDrop {
    catastrophe_event(dp, event_queue_type::RQ, rqn, why);
    if let Some(rq) = dp.objects.rqs.get_mut(rqn) {
        rq.state = state::ERR;
    }
    EthRxDrop::WqError
}
