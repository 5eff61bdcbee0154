//! UD and GSI QPs on the wire: a send WQE (control segment, datagram segment, data or inline
//! segments) becomes one RoCEv2 SEND_ONLY packet with a DETH, and a datagram that arrives
//! lands in the next receive WQE behind the 40-byte header area ([`recv`]).
//!
//! # Send
//! At a doorbell ([`crate::datapath`] hands a datagram QP's send queue here) each new WQE is
//! taken in order and executed at once: UD is unreliable, so a WQE completes when its packet
//! leaves (its CQE if CE asks for one). A WQE that fails completes with an error CQE and the
//! QP goes to the send queue error state (SQER, IBTA §10.3.1: a UD send error leaves the
//! receive side working; Linux qp.c's `optab` has SQER2RTS for UD): every WQE after it, and
//! every one posted until SQERR2RTS, completes with WR_FLUSH_ERR.
//!
//! The WQE (Linux drivers/infiniband/hw/mlx5/wr.c `set_datagram_seg`, rdma-core
//! providers/mlx5/qp.c `_mlx5_post_send` for `IBV_QPT_UD`): the 16-byte control segment, the
//! 48-byte datagram segment (`struct mlx5_wqe_av`: Q_Key, remote QPN with
//! `MLX5_EXTENDED_UD_AV`, destination MAC, UDP source port, traffic class, hop limit, the
//! source GID index and flow label in `grh_gid_fl`, the destination GID; Linux
//! drivers/infiniband/hw/mlx5/ah.c `create_ib_ah` fills it), then the data or inline segments
//! as for RC. Opcodes SEND and SEND_IMM (IBTA §9.8.3: UD has SEND only); NOP completes.
//!
//! The packet: BTH `UD_SEND_ONLY` (`_WITH_IMMEDIATE`), DestQP the datagram segment's, the QP's
//! next PSN, P_Key from the QP's P_Key index, SE from the WQE; DETH with the Q_Key (the
//! controlled Q_Key rule, IBTA §10.2.4: a WR Q_Key with the top bit set stands for the QP's
//! own; Linux drivers/infiniband/sw/rxe/rxe_req.c `init_req_packet` does the same) and the
//! source QP (1 for the GSI QP); IPv4 when both GIDs are IPv4-mapped, else IPv6. A message
//! longer than the path MTU (`qpc.mtu`) or `2^log_msg_max` completes with
//! LOCAL_LENGTH_ERR (model choice for the MTU: a UD message is one packet, IBTA §9.8.3, and
//! no public source says which syndrome a ConnectX writes).
//!
//! Routes: a destination GID of this HCA's loops back (the datagram is received before the
//! doorbell returns); any other goes out as a frame on a frame link. A shared-memory pair
//! carries only RC packets by reference: a datagram on it is lost and counted
//! (`tx_drop_link`, model choice).

pub mod recv;

use mlx5_prm::wqe::{self as prm_wqe, av};
use mlx5_prm::{cqe, qp};

use crate::be::be32;
use crate::datapath::cq::post_cqe;
use crate::datapath::rc::{ip_header, roce_headers, work_request, WrPayload};
use crate::datapath::wqe::{SendWqe, MAX_WQE_BYTES};
use crate::datapath::{fetch_wqe, flush_cqe, vendor, wq_catastrophe, Dp};
use crate::objects::cq::Cqe;
use crate::objects::qp::{read_dbr_in, ServiceType, GID_TABLE_SEARCH};
use crate::roce::{Bth, Deth, ExtHdrs, Opcode, RoceHeaders, DEFAULT_P_KEY};

/// The QPN the wire reaches the GSI QP by (IBTA §3.5.3.1: QP1).
pub const GSI_QPN: u32 = 1;

/// The 40-byte header area in front of a received datagram's payload (IBTA §11.4.1.2: room
/// for the GRH; RoCE v2 over IPv4 puts 20 zero bytes then the IPv4 header, rdma-core
/// libibverbs/man/ibv_poll_cq.3 / Linux include/rdma/ib_verbs.h `struct ib_grh` note).
pub const GRH_BYTES: usize = 40;

/// The P_Key at `index` of the port's P_Key table: RoCE ports have the default partition's
/// full-membership key at index 0 only (IBTA annex A16 / A17: RoCE keeps BTH P_Key 0xffff;
/// the shared captures carry it in every packet).
pub(crate) fn pkey_at(index: u32) -> Option<u16> {
    (index == 0).then_some(DEFAULT_P_KEY)
}

/// Path MTU in bytes for `qpc.mtu` (1..5 = 256 << (n - 1), Linux `enum ib_mtu`).
fn mtu_bytes(mtu: u32) -> usize {
    256usize << (mtu.clamp(1, 5) - 1)
}

/// A failed send WQE: (CQE syndrome, vendor syndrome).
type Fail = (u8, u8);

const MALFORMED: Fail = (cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE);

/// What a datagram QP's send WQE sends.
struct Datagram {
    hdrs: RoceHeaders,
    payload: Vec<u8>,
    /// The destination GID is one of this HCA's.
    local: bool,
}

/// Takes every new WQE of datagram QP `qpn`'s send queue and executes it (RTS) or flushes it
/// (SQER).
pub(crate) fn sq_post(hca: &mut Dp<'_>, qpn: u32, raw: &mut [u8; MAX_WQE_BYTES]) {
    let now = hca.mem.version();
    let mut pi = None;
    loop {
        let Some(q) = hca.objects.qps.get_mut(qpn) else {
            return;
        };
        let flush = match q.state {
            qp::state::RTS => false,
            qp::state::SQER => true,
            _ => return,
        };
        let pi = match pi {
            Some(pi) => pi,
            None => match read_dbr_in(&mut q.dbr_view, now, hca.mem, q.dbr_addr) {
                Ok((_, sq)) => *pi.insert(sq),
                Err(_) => return wq_catastrophe(hca, qpn, "doorbell record unreadable"),
            },
        };
        let pos = q.sq_next;
        if pos == pi {
            return;
        }
        if pi.wrapping_sub(pos) as u32 > q.sq_size() {
            return wq_catastrophe(hca, qpn, "SQ producer counter beyond the ring");
        }
        let Ok(len) = fetch_wqe(hca.mem, now, q, pos, raw) else {
            return wq_catastrophe(hca, qpn, "SQ buffer unreadable");
        };
        q.sq_next = pos.wrapping_add(SendWqe::bbs_of(&raw[..16]) as u16);
        let (cqn, uidx) = (q.cqn_snd, q.user_index);
        let wqe = &raw[..len];
        let (op, index) = (wqe[3], u16::from_be_bytes([wqe[1], wqe[2]]));
        if flush {
            post_cqe(
                hca,
                cqn,
                &flush_cqe(cqe::opcode::REQ_ERR, op, qpn, index, uidx),
            );
            continue;
        }
        match execute(hca, qpn, wqe) {
            Ok((signaled, byte_len)) => {
                if signaled {
                    let c = Cqe::requester(op, qpn, index, byte_len).with_user_index(uidx);
                    post_cqe(hca, cqn, &c);
                }
            }
            Err((syn, vend)) => {
                let c = Cqe::error(cqe::opcode::REQ_ERR, syn, vend, op, qpn, index)
                    .with_user_index(uidx);
                post_cqe(hca, cqn, &c);
                if let Some(q) = hca.objects.qps.get_mut(qpn) {
                    q.state = qp::state::SQER;
                }
            }
        }
    }
}

/// Executes one send WQE of datagram QP `qpn`: (whether it asks for a CQE, bytes sent).
fn execute(hca: &mut Dp<'_>, qpn: u32, wqe: &[u8]) -> Result<(bool, u32), Fail> {
    let (w, body) = parse(wqe)?;
    if w.qpn != qpn {
        return Err(MALFORMED);
    }
    match w.opcode {
        prm_wqe::opcode::NOP => return Ok((w.signaled(), 0)),
        prm_wqe::opcode::SEND | prm_wqe::opcode::SEND_IMM => {}
        _ => return Err(MALFORMED),
    }
    // Every lkey checked before any byte moves (the RC path's gather, unchanged).
    let (_, len, payload) = work_request(hca, qpn, &w, &body, 0)?;
    let d = datagram(hca, qpn, &w, &wqe[prm_wqe::ctrl_seg::SIZE..], len, payload)?;
    send(hca, qpn, d);
    Ok((w.signaled(), len))
}

/// The WQE without its datagram segment (the control segment with `ds` less the segment's
/// three units, then the data or inline segments), parsed as any send WQE: the parsed WQE
/// and the bytes its gather list points into.
fn parse(wqe: &[u8]) -> Result<(SendWqe, Vec<u8>), Fail> {
    let (ctrl, av_units) = (prm_wqe::ctrl_seg::SIZE, av::SIZE / prm_wqe::SEND_WQE_DS);
    let ds = SendWqe::ds_of(wqe) as usize;
    if ds < 1 + av_units || wqe.len() < (ds * prm_wqe::SEND_WQE_DS).max(ctrl + av::SIZE) {
        return Err(MALFORMED);
    }
    let mut body = Vec::with_capacity(wqe.len() - av::SIZE);
    body.extend_from_slice(&wqe[..ctrl]);
    body[prm_wqe::ctrl_seg::QPN_DS + 3] -= av_units as u8;
    body.extend_from_slice(&wqe[ctrl + av::SIZE..]);
    let w = SendWqe::parse(&body).map_err(|_| MALFORMED)?;
    Ok((w, body))
}

/// The packet of send WQE `w` of QP `qpn` (datagram segment `seg`, `len` bytes in `payload`).
fn datagram(
    hca: &Dp<'_>,
    qpn: u32,
    w: &SendWqe,
    seg: &[u8],
    len: u32,
    payload: WrPayload,
) -> Result<Datagram, Fail> {
    let q = hca.objects.qps.get(qpn).ok_or(MALFORMED)?;
    if len as usize > mtu_bytes(q.mtu) {
        return Err((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::MSG_TOO_LONG));
    }
    let dqp_dct = be32(seg, av::DQP_DCT);
    // Model choice: only the extended address vector (with the GRH fields RoCE needs), which
    // Linux wr.c `set_datagram_seg` and rdma-core always set.
    if dqp_dct & prm_wqe::EXTENDED_UD_AV == 0 {
        return Err(MALFORMED);
    }
    let wr_qkey = be32(seg, av::QKEY);
    let q_key = if wr_qkey & 0x8000_0000 != 0 {
        q.qkey
    } else {
        wr_qkey
    };
    let gid_fl = be32(seg, av::GRH_GID_FL);
    let sgid = hca.roce_gid((gid_fl >> 20) & 0xff).ok_or(MALFORMED)?;
    let mut rgid = [0u8; 16];
    rgid.copy_from_slice(&seg[av::RGID..av::RGID + 16]);
    let mut rmac = [0u8; 6];
    rmac.copy_from_slice(&seg[av::RMAC..av::RMAC + 6]);
    let (tclass, hop) = (seg[av::TCLASS], seg[av::HOP_LIMIT]);
    let ip = ip_header(&sgid, &rgid, tclass, gid_fl, hop);
    let mut sport = u16::from_be_bytes([seg[av::RLID], seg[av::RLID + 1]]);
    if sport == 0 {
        // Model choice, as for RC: a stable port in Linux rdma_get_udp_sport's range.
        sport = 0xc000 | (qpn & 0x3fff) as u16;
    }
    let imm = w.opcode == prm_wqe::opcode::SEND_IMM;
    let opcode = if imm {
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
    } else {
        Opcode::UD_SEND_ONLY
    };
    let mut bth = Bth::new(opcode, dqp_dct & 0xff_ffff, q.npsn & crate::roce::PSN_MASK);
    bth.solicited = w.solicited;
    bth.p_key = pkey_at(q.path.pkey_index).ok_or(MALFORMED)?;
    let src_qp = if q.st == ServiceType::Gsi {
        GSI_QPN
    } else {
        qpn
    };
    let ext = ExtHdrs {
        deth: Some(Deth {
            q_key,
            resv8: 0,
            src_qp,
        }),
        imm_dt: imm.then_some(w.imm),
        ..ExtHdrs::NONE
    };
    let bytes = message(hca, payload, len as usize)?;
    let local = (0..GID_TABLE_SEARCH).any(|i| hca.roce_gid(i) == Some(rgid));
    Ok(Datagram {
        hdrs: roce_headers(hca.mac(), rmac, ip, sport, bth, ext),
        payload: bytes,
        local,
    })
}

/// The `len` bytes of a message (inline bytes taken from the WQE, or read from the guest
/// pieces the gather list's keys resolved to, which were proved guest memory then).
fn message(hca: &Dp<'_>, payload: WrPayload, len: usize) -> Result<Vec<u8>, Fail> {
    let p = match payload {
        WrPayload::Bytes(b) => return Ok(b.to_vec()),
        WrPayload::Pieces(p) => p,
    };
    let mut v = vec![0u8; len];
    let mut at = 0;
    for &(bus, n) in p.iter() {
        let n = n.min(len - at);
        hca.mem
            .read(bus, &mut v[at..at + n])
            .map_err(|_| (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT))?;
        at += n;
    }
    Ok(v)
}

/// Sends datagram `d` of QP `qpn` (its PSN taken).
fn send(hca: &mut Dp<'_>, qpn: u32, d: Datagram) {
    if let Some(q) = hca.objects.qps.get_mut(qpn) {
        q.npsn = q.npsn.wrapping_add(1) & crate::roce::PSN_MASK;
    }
    let Ok(frame) = d.hdrs.encode(&d.payload) else {
        return;
    };
    if d.local {
        let ip_start = crate::roce::frame::eth_len(&d.hdrs.eth);
        recv::deliver(hca, &d.hdrs, &frame[ip_start..], &d.payload);
    } else {
        hca.port.send_frame(frame);
    }
}
