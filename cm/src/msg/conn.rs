//! The connection establishment messages that carry a QP's parameters: REQ (IBTA vol. 1
//! Table 106) and REP (Table 110), at the offsets of Linux `include/rdma/ibta_vol1_c12.h`
//! (`CM_REQ_*`, `CM_REP_*`; the vendor IDs of Linux's ECE support, `CM_REQ_VENDOR_ID`,
//! `CM_REP_VENDOR_ID_H/M/L`, as in its newer header). Reserved bits are sent as zero and ignored
//! on receipt.

use super::Body;
use crate::field::{bytes, get_split, loc, put, set_split, Loc};
use crate::mad::{attr, CmError, MAD_LEN};

/// Private data bytes of a REQ (`CM_REQ_PRIVATE_DATA`, 736 bits at byte 140).
pub const REQ_PRIVATE_DATA_LEN: usize = 92;
/// Private data bytes of a REP (`CM_REP_PRIVATE_DATA`, 1568 bits at byte 36).
pub const REP_PRIVATE_DATA_LEN: usize = 196;

/// Transport Service Type of a REQ (`CM_REQ_TRANSPORT_SERVICE_TYPE`; Linux `enum ib_qp_type`
/// order as cm.c `cm_req_set_qp_type` / `cm_req_get_qp_type` map it).
pub mod transport {
    /// Reliable connected.
    pub const RC: u8 = 0;
    /// Unreliable connected.
    pub const UC: u8 = 1;
    /// Reliable datagram (with Extended Transport Type: XRC).
    pub const RD: u8 = 2;
}

/// One path of a REQ (primary at byte 52, alternate at byte 96: the same fields 44 bytes
/// apart, `CM_REQ_PRIMARY_*` / `CM_REQ_ALTERNATE_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReqPath {
    /// Local Port LID (`CM_REQ_PRIMARY_LOCAL_PORT_LID`, 16 bits at 52); RoCE: 0xffff.
    pub local_lid: u16,
    /// Remote Port LID (`CM_REQ_PRIMARY_REMOTE_PORT_LID`, 16 bits at 54).
    pub remote_lid: u16,
    /// Local Port GID (`CM_REQ_PRIMARY_LOCAL_PORT_GID`, 128 bits at 56).
    pub local_gid: [u8; 16],
    /// Remote Port GID (`CM_REQ_PRIMARY_REMOTE_PORT_GID`, 128 bits at 72).
    pub remote_gid: [u8; 16],
    /// Flow Label (`CM_REQ_PRIMARY_FLOW_LABEL`, 20 bits at 88); on RoCE it picks the UDP
    /// source port (`include/rdma/ib_verbs.h` `rdma_flow_label_to_udp_sport`).
    pub flow_label: u32,
    /// Packet Rate (`CM_REQ_PRIMARY_PACKET_RATE`, byte 91 bits 2..8).
    pub packet_rate: u8,
    /// Traffic Class (`CM_REQ_PRIMARY_TRAFFIC_CLASS`, byte 92).
    pub traffic_class: u8,
    /// Hop Limit (`CM_REQ_PRIMARY_HOP_LIMIT`, byte 93).
    pub hop_limit: u8,
    /// SL (`CM_REQ_PRIMARY_SL`, byte 94 bits 0..4).
    pub sl: u8,
    /// Subnet Local (`CM_REQ_PRIMARY_SUBNET_LOCAL`, byte 94 bit 4).
    pub subnet_local: bool,
    /// Local ACK Timeout (`CM_REQ_PRIMARY_LOCAL_ACK_TIMEOUT`, byte 95 bits 0..5): 4.096 µs ×
    /// 2^value (cm.c `cm_ack_timeout`).
    pub local_ack_timeout: u8,
}

const PATH_LOCAL_LID: Loc = loc(52, 0, 16);
const PATH_REMOTE_LID: Loc = loc(54, 0, 16);
const PATH_LOCAL_GID: usize = 56;
const PATH_REMOTE_GID: usize = 72;
const PATH_FLOW_LABEL: Loc = loc(88, 0, 20);
const PATH_PACKET_RATE: Loc = loc(91, 2, 6);
const PATH_TRAFFIC_CLASS: Loc = loc(92, 0, 8);
const PATH_HOP_LIMIT: Loc = loc(93, 0, 8);
const PATH_SL: Loc = loc(94, 0, 4);
const PATH_SUBNET_LOCAL: Loc = loc(94, 4, 1);
const PATH_LOCAL_ACK_TIMEOUT: Loc = loc(95, 0, 5);
/// Bytes from the primary path to the alternate one.
const ALTERNATE: usize = 96 - 52;

impl ReqPath {
    fn read(m: &[u8; MAD_LEN], d: usize) -> ReqPath {
        ReqPath {
            local_lid: PATH_LOCAL_LID.plus(d).get16(m),
            remote_lid: PATH_REMOTE_LID.plus(d).get16(m),
            local_gid: bytes(m, PATH_LOCAL_GID + d),
            remote_gid: bytes(m, PATH_REMOTE_GID + d),
            flow_label: PATH_FLOW_LABEL.plus(d).get32(m),
            packet_rate: PATH_PACKET_RATE.plus(d).get8(m),
            traffic_class: PATH_TRAFFIC_CLASS.plus(d).get8(m),
            hop_limit: PATH_HOP_LIMIT.plus(d).get8(m),
            sl: PATH_SL.plus(d).get8(m),
            subnet_local: PATH_SUBNET_LOCAL.plus(d).flag(m),
            local_ack_timeout: PATH_LOCAL_ACK_TIMEOUT.plus(d).get8(m),
        }
    }

    fn write(&self, m: &mut [u8; MAD_LEN], d: usize) -> Result<(), CmError> {
        PATH_LOCAL_LID.plus(d).set(m, self.local_lid)?;
        PATH_REMOTE_LID.plus(d).set(m, self.remote_lid)?;
        put(m, PATH_LOCAL_GID + d, &self.local_gid);
        put(m, PATH_REMOTE_GID + d, &self.remote_gid);
        PATH_FLOW_LABEL.plus(d).set(m, self.flow_label)?;
        PATH_PACKET_RATE.plus(d).set(m, self.packet_rate)?;
        PATH_TRAFFIC_CLASS.plus(d).set(m, self.traffic_class)?;
        PATH_HOP_LIMIT.plus(d).set(m, self.hop_limit)?;
        PATH_SL.plus(d).set(m, self.sl)?;
        PATH_SUBNET_LOCAL.plus(d).set(m, self.subnet_local)?;
        PATH_LOCAL_ACK_TIMEOUT
            .plus(d)
            .set(m, self.local_ack_timeout)
    }
}

/// ConnectRequest (IBTA vol. 1 Table 106, `ibta_vol1_c12.h` `struct cm_req_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// Local Communication ID (`CM_REQ_LOCAL_COMM_ID`, byte 0).
    pub local_comm_id: u32,
    /// Vendor ID (`CM_REQ_VENDOR_ID`, 24 bits at 5; Linux's ECE `vendor_id`, 0 without ECE).
    pub vendor_id: u32,
    /// ServiceID (`CM_REQ_SERVICE_ID`, byte 8).
    pub service_id: u64,
    /// Local CA GUID (`CM_REQ_LOCAL_CA_GUID`, byte 16).
    pub local_ca_guid: u64,
    /// Local Q_Key (`CM_REQ_LOCAL_Q_KEY`, byte 28).
    pub local_qkey: u32,
    /// Local QPN (`CM_REQ_LOCAL_QPN`, 24 bits at 32).
    pub local_qpn: u32,
    /// Responder Resources (`CM_REQ_RESPONDER_RESOURCES`, byte 35): RDMA READs / atomics
    /// the sender accepts as responder.
    pub responder_resources: u8,
    /// Local EECN (`CM_REQ_LOCAL_EECN`, 24 bits at 36).
    pub local_eecn: u32,
    /// Initiator Depth (`CM_REQ_INITIATOR_DEPTH`, byte 39).
    pub initiator_depth: u8,
    /// Remote EECN (`CM_REQ_REMOTE_EECN`, 24 bits at 40).
    pub remote_eecn: u32,
    /// Remote CM Response Timeout (`CM_REQ_REMOTE_CM_RESPONSE_TIMEOUT`, byte 43 bits 0..5):
    /// how long the sender waits for the REP, 4.096 µs × 2^value.
    pub remote_cm_response_timeout: u8,
    /// Transport Service Type (`CM_REQ_TRANSPORT_SERVICE_TYPE`, byte 43 bits 5..7): [`transport`].
    pub transport_service_type: u8,
    /// End-to-End Flow Control (`CM_REQ_END_TO_END_FLOW_CONTROL`, byte 43 bit 7).
    pub end_to_end_flow_control: bool,
    /// Starting PSN (`CM_REQ_STARTING_PSN`, 24 bits at 44): the PSN the sender expects to
    /// receive first, i.e. the passive side's first send PSN (cm.c `cm_format_req`,
    /// `cm_format_req_event`).
    pub starting_psn: u32,
    /// Local CM Response Timeout (`CM_REQ_LOCAL_CM_RESPONSE_TIMEOUT`, byte 47 bits 0..5).
    pub local_cm_response_timeout: u8,
    /// Retry Count (`CM_REQ_RETRY_COUNT`, byte 47 bits 5..8).
    pub retry_count: u8,
    /// Partition Key (`CM_REQ_PARTITION_KEY`, byte 48).
    pub pkey: u16,
    /// Path Packet Payload MTU (`CM_REQ_PATH_PACKET_PAYLOAD_MTU`, byte 50 bits 0..4;
    /// `enum ib_mtu`: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDC Exists (`CM_REQ_RDC_EXISTS`, byte 50 bit 4).
    pub rdc_exists: bool,
    /// RNR Retry Count (`CM_REQ_RNR_RETRY_COUNT`, byte 50 bits 5..8).
    pub rnr_retry_count: u8,
    /// Max CM Retries (`CM_REQ_MAX_CM_RETRIES`, byte 51 bits 0..4).
    pub max_cm_retries: u8,
    /// SRQ (`CM_REQ_SRQ`, byte 51 bit 4).
    pub srq: bool,
    /// Extended Transport Type (`CM_REQ_EXTENDED_TRANSPORT_TYPE`, byte 51 bits 5..8; 1 = XRC).
    pub extended_transport_type: u8,
    /// The primary path (bytes 52-95).
    pub primary: ReqPath,
    /// The alternate path (bytes 96-139; all zero when there is none).
    pub alternate: ReqPath,
    /// SAP Supported (`CM_REQ_SAP_SUPPORTED`, byte 139 bit 5).
    pub sap_supported: bool,
    /// Private Data (`CM_REQ_PRIVATE_DATA`, byte 140); rdma_cm puts its
    /// [`crate::rdma_cm::CmaHdr`] first.
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl Body for Req {
    const ATTR: u16 = attr::REQ;

    fn read(m: &[u8; MAD_LEN]) -> Result<Req, CmError> {
        Ok(Req {
            local_comm_id: loc(0, 0, 32).get32(m),
            vendor_id: loc(5, 0, 24).get32(m),
            service_id: loc(8, 0, 64).get(m),
            local_ca_guid: loc(16, 0, 64).get(m),
            local_qkey: loc(28, 0, 32).get32(m),
            local_qpn: loc(32, 0, 24).get32(m),
            responder_resources: loc(35, 0, 8).get8(m),
            local_eecn: loc(36, 0, 24).get32(m),
            initiator_depth: loc(39, 0, 8).get8(m),
            remote_eecn: loc(40, 0, 24).get32(m),
            remote_cm_response_timeout: loc(43, 0, 5).get8(m),
            transport_service_type: loc(43, 5, 2).get8(m),
            end_to_end_flow_control: loc(43, 7, 1).flag(m),
            starting_psn: loc(44, 0, 24).get32(m),
            local_cm_response_timeout: loc(47, 0, 5).get8(m),
            retry_count: loc(47, 5, 3).get8(m),
            pkey: loc(48, 0, 16).get16(m),
            path_mtu: loc(50, 0, 4).get8(m),
            rdc_exists: loc(50, 4, 1).flag(m),
            rnr_retry_count: loc(50, 5, 3).get8(m),
            max_cm_retries: loc(51, 0, 4).get8(m),
            srq: loc(51, 4, 1).flag(m),
            extended_transport_type: loc(51, 5, 3).get8(m),
            primary: ReqPath::read(m, 0),
            alternate: ReqPath::read(m, ALTERNATE),
            sap_supported: loc(139, 5, 1).flag(m),
            private_data: bytes(m, 140),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        loc(0, 0, 32).set(m, self.local_comm_id)?;
        loc(5, 0, 24).set(m, self.vendor_id)?;
        loc(8, 0, 64).set(m, self.service_id)?;
        loc(16, 0, 64).set(m, self.local_ca_guid)?;
        loc(28, 0, 32).set(m, self.local_qkey)?;
        loc(32, 0, 24).set(m, self.local_qpn)?;
        loc(35, 0, 8).set(m, self.responder_resources)?;
        loc(36, 0, 24).set(m, self.local_eecn)?;
        loc(39, 0, 8).set(m, self.initiator_depth)?;
        loc(40, 0, 24).set(m, self.remote_eecn)?;
        loc(43, 0, 5).set(m, self.remote_cm_response_timeout)?;
        loc(43, 5, 2).set(m, self.transport_service_type)?;
        loc(43, 7, 1).set(m, self.end_to_end_flow_control)?;
        loc(44, 0, 24).set(m, self.starting_psn)?;
        loc(47, 0, 5).set(m, self.local_cm_response_timeout)?;
        loc(47, 5, 3).set(m, self.retry_count)?;
        loc(48, 0, 16).set(m, self.pkey)?;
        loc(50, 0, 4).set(m, self.path_mtu)?;
        loc(50, 4, 1).set(m, self.rdc_exists)?;
        loc(50, 5, 3).set(m, self.rnr_retry_count)?;
        loc(51, 0, 4).set(m, self.max_cm_retries)?;
        loc(51, 4, 1).set(m, self.srq)?;
        loc(51, 5, 3).set(m, self.extended_transport_type)?;
        self.primary.write(m, 0)?;
        self.alternate.write(m, ALTERNATE)?;
        loc(139, 5, 1).set(m, self.sap_supported)?;
        put(m, 140, &self.private_data);
        Ok(())
    }
}

/// The REP's vendor ID bytes, high to low (`CM_REP_VENDOR_ID_H`, `_M`, `_L`).
const REP_VENDOR_ID: [Loc; 3] = [loc(15, 0, 8), loc(19, 0, 8), loc(23, 0, 8)];

/// ConnectReply (IBTA vol. 1 Table 110, `ibta_vol1_c12.h` `struct cm_rep_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rep {
    /// Local Communication ID (`CM_REP_LOCAL_COMM_ID`, byte 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (`CM_REP_REMOTE_COMM_ID`, byte 4): the REQ's local one.
    pub remote_comm_id: u32,
    /// Local Q_Key (`CM_REP_LOCAL_Q_KEY`, byte 8).
    pub local_qkey: u32,
    /// Local QPN (`CM_REP_LOCAL_QPN`, 24 bits at 12).
    pub local_qpn: u32,
    /// Local EE Context Number (`CM_REP_LOCAL_EE_CONTEXT_NUMBER`, 24 bits at 16).
    pub local_eecn: u32,
    /// Starting PSN (`CM_REP_STARTING_PSN`, 24 bits at 20): the active side's first send PSN.
    pub starting_psn: u32,
    /// Vendor ID, 24 bits in three bytes: `CM_REP_VENDOR_ID_H` (byte 15), `_M` (19), `_L`
    /// (23); Linux's ECE `vendor_id`, 0 without ECE.
    pub vendor_id: u32,
    /// Responder Resources (`CM_REP_RESPONDER_RESOURCES`, byte 24).
    pub responder_resources: u8,
    /// Initiator Depth (`CM_REP_INITIATOR_DEPTH`, byte 25).
    pub initiator_depth: u8,
    /// Target ACK Delay (`CM_REP_TARGET_ACK_DELAY`, byte 26 bits 0..5).
    pub target_ack_delay: u8,
    /// Failover Accepted (`CM_REP_FAILOVER_ACCEPTED`, byte 26 bits 5..7).
    pub failover_accepted: u8,
    /// End-to-End Flow Control (`CM_REP_END_TO_END_FLOW_CONTROL`, byte 26 bit 7).
    pub end_to_end_flow_control: bool,
    /// RNR Retry Count (`CM_REP_RNR_RETRY_COUNT`, byte 27 bits 0..3).
    pub rnr_retry_count: u8,
    /// SRQ (`CM_REP_SRQ`, byte 27 bit 3).
    pub srq: bool,
    /// Local CA GUID (`CM_REP_LOCAL_CA_GUID`, byte 28).
    pub local_ca_guid: u64,
    /// Private Data (`CM_REP_PRIVATE_DATA`, byte 36).
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl Body for Rep {
    const ATTR: u16 = attr::REP;

    fn read(m: &[u8; MAD_LEN]) -> Result<Rep, CmError> {
        Ok(Rep {
            local_comm_id: loc(0, 0, 32).get32(m),
            remote_comm_id: loc(4, 0, 32).get32(m),
            local_qkey: loc(8, 0, 32).get32(m),
            local_qpn: loc(12, 0, 24).get32(m),
            local_eecn: loc(16, 0, 24).get32(m),
            starting_psn: loc(20, 0, 24).get32(m),
            vendor_id: get_split(m, &REP_VENDOR_ID),
            responder_resources: loc(24, 0, 8).get8(m),
            initiator_depth: loc(25, 0, 8).get8(m),
            target_ack_delay: loc(26, 0, 5).get8(m),
            failover_accepted: loc(26, 5, 2).get8(m),
            end_to_end_flow_control: loc(26, 7, 1).flag(m),
            rnr_retry_count: loc(27, 0, 3).get8(m),
            srq: loc(27, 3, 1).flag(m),
            local_ca_guid: loc(28, 0, 64).get(m),
            private_data: bytes(m, 36),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        loc(0, 0, 32).set(m, self.local_comm_id)?;
        loc(4, 0, 32).set(m, self.remote_comm_id)?;
        loc(8, 0, 32).set(m, self.local_qkey)?;
        loc(12, 0, 24).set(m, self.local_qpn)?;
        loc(16, 0, 24).set(m, self.local_eecn)?;
        loc(20, 0, 24).set(m, self.starting_psn)?;
        set_split(m, &REP_VENDOR_ID, self.vendor_id)?;
        loc(24, 0, 8).set(m, self.responder_resources)?;
        loc(25, 0, 8).set(m, self.initiator_depth)?;
        loc(26, 0, 5).set(m, self.target_ack_delay)?;
        loc(26, 5, 2).set(m, self.failover_accepted)?;
        loc(26, 7, 1).set(m, self.end_to_end_flow_control)?;
        loc(27, 0, 3).set(m, self.rnr_retry_count)?;
        loc(27, 3, 1).set(m, self.srq)?;
        loc(28, 0, 64).set(m, self.local_ca_guid)?;
        put(m, 36, &self.private_data);
        Ok(())
    }
}
