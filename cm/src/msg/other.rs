//! The short CM messages: MRA (IBTA vol. 1 Table 107), REJ (Table 108), RTU (Table 111), DREQ
//! (Table 112), DREP (Table 113), at the offsets of Linux `include/rdma/ibta_vol1_c12.h`
//! (`CM_MRA_*`, `CM_REJ_*`, `CM_RTU_*`, `CM_DREQ_*`, `CM_DREP_*`).

use super::Body;
use crate::field::{bytes, loc, put};
use crate::mad::{attr, CmError, MAD_LEN};

/// Private data bytes of an MRA (`CM_MRA_PRIVATE_DATA`, 1776 bits at byte 10).
pub const MRA_PRIVATE_DATA_LEN: usize = 222;
/// Private data bytes of a REJ (`CM_REJ_PRIVATE_DATA`, 1184 bits at byte 84).
pub const REJ_PRIVATE_DATA_LEN: usize = 148;
/// Bytes of the REJ's Additional Rejection Information (`CM_REJ_ARI`, 576 bits at byte 12).
pub const REJ_ARI_LEN: usize = 72;
/// Private data bytes of an RTU or a DREP (`CM_RTU_PRIVATE_DATA`, `CM_DREP_PRIVATE_DATA`,
/// 1792 bits at byte 8).
pub const RTU_PRIVATE_DATA_LEN: usize = 224;
/// Private data bytes of a DREQ (`CM_DREQ_PRIVATE_DATA`, 1760 bits at byte 12).
pub const DREQ_PRIVATE_DATA_LEN: usize = 220;

/// Which message an MRA acknowledges or a REJ rejects (`drivers/infiniband/core/cm_msgs.h`
/// `enum cm_msg_response`).
pub mod msg_response {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// A LAP (MRA) or another message.
    pub const OTHER: u8 = 2;
}

/// REJ reasons (`include/rdma/ib_cm.h` `enum ib_cm_rej_reason`; the few this crate sends or
/// acts on; any 16-bit value decodes).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// The peer timed out (sent after the REQ/REP retries ran out).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// No listener for the REQ's service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// The application's own reason (rdma_reject).
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// MessageReceiptAcknowledgement (`ibta_vol1_c12.h` `struct cm_mra_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mra {
    /// Local Communication ID (`CM_MRA_LOCAL_COMM_ID`, byte 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (`CM_MRA_REMOTE_COMM_ID`, byte 4).
    pub remote_comm_id: u32,
    /// Message MRAed (`CM_MRA_MESSAGE_MRAED`, byte 8 bits 0..2): [`msg_response`].
    pub message_mraed: u8,
    /// Service Timeout (`CM_MRA_SERVICE_TIMEOUT`, byte 9 bits 0..5): 4.096 µs × 2^value.
    pub service_timeout: u8,
    /// Private Data (`CM_MRA_PRIVATE_DATA`, byte 10).
    pub private_data: [u8; MRA_PRIVATE_DATA_LEN],
}

impl Body for Mra {
    const ATTR: u16 = attr::MRA;

    fn read(m: &[u8; MAD_LEN]) -> Result<Mra, CmError> {
        Ok(Mra {
            local_comm_id: loc(0, 0, 32).get32(m),
            remote_comm_id: loc(4, 0, 32).get32(m),
            message_mraed: loc(8, 0, 2).get8(m),
            service_timeout: loc(9, 0, 5).get8(m),
            private_data: bytes(m, 10),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        loc(0, 0, 32).set(m, self.local_comm_id)?;
        loc(4, 0, 32).set(m, self.remote_comm_id)?;
        loc(8, 0, 2).set(m, self.message_mraed)?;
        loc(9, 0, 5).set(m, self.service_timeout)?;
        put(m, 10, &self.private_data);
        Ok(())
    }
}

/// ConnectReject (`ibta_vol1_c12.h` `struct cm_rej_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rej {
    /// Local Communication ID (`CM_REJ_LOCAL_COMM_ID`, byte 0; 0 when the REQ was refused
    /// before an ID was made, cm.c `cm_issue_rej`).
    pub local_comm_id: u32,
    /// Remote Communication ID (`CM_REJ_REMOTE_COMM_ID`, byte 4).
    pub remote_comm_id: u32,
    /// Message Rejected (`CM_REJ_MESSAGE_REJECTED`, byte 8 bits 0..2): [`msg_response`].
    pub message_rejected: u8,
    /// Reject Info Length (`CM_REJ_REJECTED_INFO_LENGTH`, byte 9 bits 0..7), at most
    /// [`REJ_ARI_LEN`].
    pub reject_info_length: u8,
    /// Reason (`CM_REJ_REASON`, byte 10): [`rej_reason`].
    pub reason: u16,
    /// Additional Rejection Information (`CM_REJ_ARI`, byte 12).
    pub ari: [u8; REJ_ARI_LEN],
    /// Private Data (`CM_REJ_PRIVATE_DATA`, byte 84).
    pub private_data: [u8; REJ_PRIVATE_DATA_LEN],
}

impl Body for Rej {
    const ATTR: u16 = attr::REJ;

    fn read(m: &[u8; MAD_LEN]) -> Result<Rej, CmError> {
        let reject_info_length = loc(9, 0, 7).get8(m);
        if usize::from(reject_info_length) > REJ_ARI_LEN {
            return Err(CmError::InfoLength(reject_info_length));
        }
        Ok(Rej {
            local_comm_id: loc(0, 0, 32).get32(m),
            remote_comm_id: loc(4, 0, 32).get32(m),
            message_rejected: loc(8, 0, 2).get8(m),
            reject_info_length,
            reason: loc(10, 0, 16).get16(m),
            ari: bytes(m, 12),
            private_data: bytes(m, 84),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        if usize::from(self.reject_info_length) > REJ_ARI_LEN {
            return Err(CmError::InfoLength(self.reject_info_length));
        }
        loc(0, 0, 32).set(m, self.local_comm_id)?;
        loc(4, 0, 32).set(m, self.remote_comm_id)?;
        loc(8, 0, 2).set(m, self.message_rejected)?;
        loc(9, 0, 7).set(m, self.reject_info_length)?;
        loc(10, 0, 16).set(m, self.reason)?;
        put(m, 12, &self.ari);
        put(m, 84, &self.private_data);
        Ok(())
    }
}

/// The layout RTU and DREP share: the two communication IDs and private data
/// (`ibta_vol1_c12.h` `struct cm_rtu_msg`, `struct cm_drep_msg`); `ATTR` tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdsAndData<const ATTR: u16> {
    /// Local Communication ID (`CM_RTU_LOCAL_COMM_ID`, `CM_DREP_LOCAL_COMM_ID`, byte 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (`CM_RTU_REMOTE_COMM_ID`, `CM_DREP_REMOTE_COMM_ID`, byte 4).
    pub remote_comm_id: u32,
    /// Private Data (`CM_RTU_PRIVATE_DATA`, `CM_DREP_PRIVATE_DATA`, byte 8).
    pub private_data: [u8; RTU_PRIVATE_DATA_LEN],
}

/// ReadyToUse (`ibta_vol1_c12.h` `struct cm_rtu_msg`).
pub type Rtu = IdsAndData<{ attr::RTU }>;

/// DisconnectReply (`ibta_vol1_c12.h` `struct cm_drep_msg`).
pub type Drep = IdsAndData<{ attr::DREP }>;

fn read_ids(m: &[u8; MAD_LEN]) -> (u32, u32) {
    (loc(0, 0, 32).get32(m), loc(4, 0, 32).get32(m))
}

fn write_ids(m: &mut [u8; MAD_LEN], local: u32, remote: u32) -> Result<(), CmError> {
    loc(0, 0, 32).set(m, local)?;
    loc(4, 0, 32).set(m, remote)
}

impl<const A: u16> Body for IdsAndData<A> {
    const ATTR: u16 = A;

    fn read(m: &[u8; MAD_LEN]) -> Result<Self, CmError> {
        let (local_comm_id, remote_comm_id) = read_ids(m);
        Ok(IdsAndData {
            local_comm_id,
            remote_comm_id,
            private_data: bytes(m, 8),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        write_ids(m, self.local_comm_id, self.remote_comm_id)?;
        put(m, 8, &self.private_data);
        Ok(())
    }
}

/// DisconnectRequest (`ibta_vol1_c12.h` `struct cm_dreq_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dreq {
    /// Local Communication ID (`CM_DREQ_LOCAL_COMM_ID`, byte 0).
    pub local_comm_id: u32,
    /// Remote Communication ID (`CM_DREQ_REMOTE_COMM_ID`, byte 4).
    pub remote_comm_id: u32,
    /// Remote QPN/EECN (`CM_DREQ_REMOTE_QPN_EECN`, 24 bits at 8): the receiver's QPN.
    pub remote_qpn_eecn: u32,
    /// Private Data (`CM_DREQ_PRIVATE_DATA`, byte 12).
    pub private_data: [u8; DREQ_PRIVATE_DATA_LEN],
}

impl Body for Dreq {
    const ATTR: u16 = attr::DREQ;

    fn read(m: &[u8; MAD_LEN]) -> Result<Dreq, CmError> {
        let (local_comm_id, remote_comm_id) = read_ids(m);
        Ok(Dreq {
            local_comm_id,
            remote_comm_id,
            remote_qpn_eecn: loc(8, 0, 24).get32(m),
            private_data: bytes(m, 12),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        write_ids(m, self.local_comm_id, self.remote_comm_id)?;
        loc(8, 0, 24).set(m, self.remote_qpn_eecn)?;
        put(m, 12, &self.private_data);
        Ok(())
    }
}
