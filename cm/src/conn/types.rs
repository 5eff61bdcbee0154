//! What the connection state machine takes and gives: the transport it drives, the QP moves it
//! asks for, what a connect puts in its REQ, its events, the timing rules.

use crate::mad::MAD_LEN;
use crate::msg::{Req, REJ_PRIVATE_DATA_LEN, REP_PRIVATE_DATA_LEN, SIDR_REP_PRIVATE_DATA_LEN};
use crate::rdma_cm::CmaHdr;

/// Nanoseconds of an IBA time exponent as Linux's CM waits it: 2^(t-8) ms, at least 1 ms
/// (`drivers/infiniband/core/cm.c` `cm_convert_to_ms`; IBTA: 4.096 µs × 2^t).
/// Exponents beyond the 5-bit fields are taken as 31.
pub const fn iba_time_ns(t: u8) -> u64 {
    let t = if t > 31 { 31 } else { t };
    (1u64 << t.saturating_sub(8)) * 1_000_000
}

/// The Local ACK Timeout of a path (4.096 µs × 2^value) from the ACK delay of the CA that
/// answers (`ca_ack_delay`) and the path's packet life time: the larger of the delay and the
/// life time + 1, one more when the other is within half of it, at most 31
/// (`drivers/infiniband/core/cm.c` `cm_ack_timeout`). A REQ carries it with the sender's own
/// ACK delay; the active side's QP gets it with the REP's Target ACK Delay.
pub const fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let (delay, life) = (ca_ack_delay as u16, packet_life_time as u16);
    let mut t = life + 1;
    if t >= delay {
        t += (delay + 1 >= t) as u16;
    } else {
        t = delay + (t + 1 >= delay) as u16;
    }
    if t > 31 {
        31
    } else {
        t as u8
    }
}

/// A connection's handle: its local communication ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// Where a MAD came from and where the answers go (cm.c `cm_create_response_msg_ah`: to the
/// source of the received MAD).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The sender's GID (the GRH's source; an IPv4-mapped address on RoCE v2).
    pub gid: [u8; 16],
    /// The sender's QP (the DETH's source QP: 1 for the GSI).
    pub qpn: u32,
}

/// RTR attributes taken from a REQ (cm.c `cm_init_qp_rtr_attr`, cma.c `cma_modify_qp_rtr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RtrAttrs {
    /// The peer's QPN (REQ Local QPN).
    pub dest_qpn: u32,
    /// First PSN expected from the peer: the REP's Starting PSN.
    pub rq_psn: u32,
    /// Path MTU (REQ Path Packet Payload MTU, `enum ib_mtu`).
    pub path_mtu: u8,
    /// RDMA READs / atomics accepted as responder: the REP's Responder Resources.
    pub max_dest_rd_atomic: u8,
    /// P_Key (REQ Partition Key).
    pub pkey: u16,
    /// The peer's GID (REQ Primary Local Port GID).
    pub remote_gid: [u8; 16],
    /// Our GID the peer addressed (REQ Primary Remote Port GID).
    pub local_gid: [u8; 16],
    /// Flow label (REQ Primary Flow Label); on RoCE the driver picks the UDP source port
    /// from it (`rdma_flow_label_to_udp_sport`, `mlx5::ah::flow_label_to_udp_sport`).
    pub flow_label: u32,
    /// Hop limit (REQ Primary Hop Limit).
    pub hop_limit: u8,
    /// Traffic class (REQ Primary Traffic Class).
    pub traffic_class: u8,
    /// Service level (REQ Primary SL).
    pub sl: u8,
}

/// RTS attributes taken from a REQ (cm.c `cm_init_qp_rts_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RtsAttrs {
    /// First send PSN: the REQ's Starting PSN.
    pub sq_psn: u32,
    /// Local ACK timeout exponent (REQ Primary Local ACK Timeout: cm.c
    /// `cm_format_paths_from_req` takes packet life time = it − 1, `cm_init_av_by_path` adds
    /// the 1 back).
    pub timeout: u8,
    /// Transport retries (REQ Retry Count).
    pub retry_cnt: u8,
    /// RNR retries (REQ RNR Retry Count).
    pub rnr_retry: u8,
    /// Outstanding RDMA READs / atomics as initiator: the REP's Initiator Depth.
    pub max_rd_atomic: u8,
}

/// A QP move the state machine asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpStep {
    /// RESET → INIT with the REQ's P_Key (cma.c `cma_init_conn_qp`).
    Init {
        /// P_Key.
        pkey: u16,
    },
    /// INIT → RTR.
    Rtr(RtrAttrs),
    /// RTR → RTS.
    Rts(RtsAttrs),
    /// Any state → ERR (disconnect, failed establishment; cma.c `cma_modify_qp_err`).
    Err,
}

/// What the state machine drives: the GSI QP's sends and the connection's QP.
pub trait CmTransport {
    /// Why a QP move failed (the driver's typed error).
    type QpError: Copy + core::fmt::Debug + PartialEq;
    /// Sends one MAD to `to`'s QP 1 (a lost datagram is retried by the state machine).
    fn send_mad(&mut self, to: &Peer, mad: &[u8; MAD_LEN]);
    /// Moves QP `qpn`.
    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), Self::QpError>;
}

/// The device's side of the negotiation and the REP's fixed fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmConfig {
    /// Our CA GUID (REP Local CA GUID).
    pub local_ca_guid: u64,
    /// The device's `local_ca_ack_delay` (REP Target ACK Delay).
    pub ack_delay: u8,
    /// The device's `max_qp_rd_atom`: most responder resources we grant.
    pub max_responder_resources: u8,
    /// The device's `max_qp_init_rd_atom`: most initiator depth we use.
    pub max_initiator_depth: u8,
    /// High 32 bits of the transaction IDs of exchanges we start (a DREQ): the MAD agent's
    /// client number in Linux (`drivers/infiniband/core/mad.c` `ib_register_mad_agent`
    /// `hi_tid`), see [`own_tid`](crate::conn::own_tid).
    pub tid_hi: u32,
    /// Mixed into local communication IDs so a restarted CM does not reuse its old ones
    /// (cm.c `cm_alloc_id_priv`: an xarray index XOR a random operand).
    pub comm_id_seed: u32,
}

/// What the active side puts in its REQ (`rdma_connect`: Linux cma.c `cma_connect_ib`,
/// cm.c `ib_send_cm_req` / `cm_format_req`). The QP `qpn` stays in RESET until the REP: then
/// the machine moves it through INIT, RTR and RTS and sends the RTU (cma.c `cma_rep_recv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connect<'a> {
    /// The service asked for ([`crate::rdma_cm::PortSpace::service_id`]).
    pub service_id: u64,
    /// Our RC QP (REQ Local QPN), in RESET, receives may be posted.
    pub qpn: u32,
    /// The PSN we expect first (REQ Starting PSN: our RQ PSN, the peer's first send PSN;
    /// random in Linux).
    pub starting_psn: u32,
    /// Our GID (REQ Primary Local Port GID; an IPv4-mapped address on RoCE v2).
    pub local_gid: [u8; 16],
    /// The peer's GID (REQ Primary Remote Port GID).
    pub remote_gid: [u8; 16],
    /// Flow label of the path (REQ Primary Flow Label; rdma_cm's
    /// [`crate::rdma_cm::roce_flow_label`]); both sides take the RoCE UDP source port from it.
    pub flow_label: u32,
    /// Hop limit (REQ Primary Hop Limit; 1 or less marks the path subnet-local).
    pub hop_limit: u8,
    /// Traffic class (REQ Primary Traffic Class).
    pub traffic_class: u8,
    /// Path MTU (`enum ib_mtu`: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// P_Key (0xffff on RoCE).
    pub pkey: u16,
    /// RDMA READs / atomics we accept as responder (REQ Responder Resources).
    pub responder_resources: u8,
    /// RDMA READs / atomics we issue at once (REQ Initiator Depth).
    pub initiator_depth: u8,
    /// Transport retries of our QP (REQ Retry Count).
    pub retry_count: u8,
    /// The peer's retries of our RNR NAKs (REQ RNR Retry Count).
    pub rnr_retry_count: u8,
    /// REQ Primary Local ACK Timeout: [`ack_timeout`]`(our ACK delay, packet life time)`. The
    /// packet life time is taken back as this − 1 (as cm.c `cm_format_paths_from_req` does):
    /// it sets how long the REQ waits (below) and, with the REP's Target ACK Delay, our QP's
    /// ACK timeout (cm.c `cm_rep_handler`).
    pub local_ack_timeout: u8,
    /// How long we wait for the peer's REP beyond two packet life times (REQ Remote CM
    /// Response Timeout; cm.c `ib_send_cm_req`: `timeout_ms`).
    pub remote_cm_response_timeout: u8,
    /// How long the peer may wait for our answers (REQ Local CM Response Timeout).
    pub local_cm_response_timeout: u8,
    /// REQ, and later DREQ, retransmissions before giving up (REQ Max CM Retries, ≤ 15).
    pub max_cm_retries: u8,
    /// Our QP takes its receives from an SRQ (REQ SRQ).
    pub srq: bool,
    /// REQ End-to-End Flow Control (librdmacm `struct rdma_conn_param` `flow_control`: Linux's
    /// nvme-rdma host sets it, `drivers/nvme/host/rdma.c` `nvme_rdma_route_resolved`; rdma-core
    /// `librdmacm/examples/rping.c` and perftest `src/perftest_communication.c` leave it 0).
    pub flow_control: bool,
    /// The REQ's private data, the rdma_cm header first when the peer is rdma_cm (≤ 92
    /// bytes, zero-padded).
    pub private_data: &'a [u8],
}

/// What the application says when accepting (librdmacm `struct rdma_conn_param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept<'a> {
    /// The QP that takes the connection (in RESET: the machine moves it).
    pub qpn: u32,
    /// The PSN the peer sends first (REP Starting PSN; random in Linux).
    pub starting_psn: u32,
    /// Responder resources wanted; the REP carries the least of this, the REQ's initiator
    /// depth and the device's (rdma-core `librdmacm/cma.c` `ucma_process_conn_req`,
    /// `ucma_valid_param`).
    pub responder_resources: u8,
    /// Initiator depth wanted; the REP carries the least of this, the REQ's responder
    /// resources and the device's.
    pub initiator_depth: u8,
    /// REP End-to-End Flow Control.
    pub flow_control: bool,
    /// REP RNR Retry Count (the peer's retries of our RNR NAKs).
    pub rnr_retry_count: u8,
    /// REP SRQ.
    pub srq: bool,
    /// Private data for the REP (at most 196 bytes).
    pub private_data: &'a [u8],
}

/// What happened, for the application (rdma_cm's events, librdmacm `enum rdma_cm_event_type`).
// No allocator: the REQ travels by value, once per connection.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listened service (`RDMA_CM_EVENT_CONNECT_REQUEST`): accept or reject it.
    ConnectRequest {
        /// The new connection.
        id: ConnId,
        /// The REQ as received.
        req: Req,
        /// Its rdma_cm header, if the private data starts with a valid one.
        cma: Option<CmaHdr>,
    },
    /// A SIDR_REQ for a listened UD service (`RDMA_CM_EVENT_CONNECT_REQUEST` on a UD ID):
    /// answer with [`Cm::sidr_reply`].
    ///
    /// [`Cm::sidr_reply`]: crate::conn::Cm::sidr_reply
    SidrRequest {
        /// What the answer needs.
        ticket: crate::conn::SidrTicket,
        /// The rdma_cm header, if the private data starts with a valid one.
        cma: Option<CmaHdr>,
        /// The SIDR_REQ's private data.
        private_data: [u8; crate::msg::SIDR_REQ_PRIVATE_DATA_LEN],
    },
    /// The connection carries data (`RDMA_CM_EVENT_ESTABLISHED`): on the passive side the
    /// RTU came or the first packet arrived ([`Cm::comm_established`]); on the active side
    /// the REP came, the QP is in RTS and the RTU sent.
    ///
    /// [`Cm::comm_established`]: crate::conn::Cm::comm_established
    Established {
        /// The connection.
        id: ConnId,
        /// The REP's private data on the active side (cma.c `cma_set_rep_event_data`: all
        /// 196 bytes); zero on the passive side (rdma_cm's RTU carries none: cma.c
        /// `cma_rep_recv` sends it without).
        private_data: [u8; REP_PRIVATE_DATA_LEN],
    },
    /// The peer rejected our REQ or REP, or ended the connection with a REJ
    /// (`RDMA_CM_EVENT_REJECTED`); the QP is in ERR, the connection gone, or in TIMEWAIT when
    /// it was established or the reason is Stale Connection (cm.c `cm_rej_handler`).
    Rejected {
        /// The connection.
        id: ConnId,
        /// The REJ's reason.
        reason: u16,
        /// The REJ's private data (cma.c `cma_ib_handler`: all 148 bytes).
        private_data: [u8; REJ_PRIVATE_DATA_LEN],
    },
    /// The REQ or the REP went unanswered through every retry, or the SIDR_REQ did
    /// (`RDMA_CM_EVENT_UNREACHABLE`, cm.c `cm_process_send_error`); the QP is in ERR, the
    /// connection gone. The passive side sent a REJ with reason Timeout.
    Unreachable {
        /// The connection or SIDR request.
        id: ConnId,
    },
    /// The REP came but our QP could not be moved to RTS (`RDMA_CM_EVENT_CONNECT_ERROR`,
    /// cma.c `cma_rep_recv`): the QP is in ERR, a REJ (Consumer Defined) was sent, the
    /// connection is gone.
    ConnectError {
        /// The connection.
        id: ConnId,
    },
    /// The answer to our SIDR_REQ ([`Cm::sidr_request`]; cm.c `cm_sidr_rep_handler`, cma.c
    /// `cma_sidr_rep_handler`: status Success resolves the UD service, any other is
    /// `RDMA_CM_EVENT_UNREACHABLE`). The request is gone.
    ///
    /// [`Cm::sidr_request`]: crate::conn::Cm::sidr_request
    SidrReply {
        /// The request.
        id: ConnId,
        /// SIDR_REP Status ([`crate::msg::sidr_status`]).
        status: u8,
        /// The service's UD QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// The SIDR_REP's private data.
        private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
    },
    /// DREQ received or our DREQ answered or timed out (`RDMA_CM_EVENT_DISCONNECTED`); the
    /// QP is in ERR and the connection in TIMEWAIT.
    Disconnected {
        /// The connection.
        id: ConnId,
    },
    /// TIMEWAIT is over (`RDMA_CM_EVENT_TIMEWAIT_EXIT`): the QP may be reused.
    TimewaitExit {
        /// The connection, now gone.
        id: ConnId,
        /// Its QP.
        qpn: u32,
    },
}

/// Why a received MAD changed nothing (each is counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Not a CM MAD this machine decodes.
    Decode(crate::mad::CmError),
    /// Names no connection of ours.
    UnknownConn,
    /// Not expected in the connection's state.
    WrongState,
    /// A message this machine does not take.
    Unsupported,
    /// A duplicate REQ: answered again (REP, MRA or REJ) but no new connection.
    DuplicateReq,
    /// A duplicate REP once established: the RTU sent again.
    DuplicateRep,
    /// A REQ refused with a REJ (its reason), or a SIDR_REQ with a SIDR_REP (its status).
    Rejected(u16),
}

/// Why an application call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError<E> {
    /// No such connection.
    UnknownConn,
    /// Not possible in the connection's state.
    WrongState,
    /// No room for another listener or connection.
    Full,
    /// The service ID is already listened on.
    InUse,
    /// The message cannot be encoded: private data too long, a value wider than its field.
    Encode(crate::mad::CmError),
    /// A QP move failed; the connection is unchanged (reject it or retry).
    Qp(E),
}
