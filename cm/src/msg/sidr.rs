//! Service ID resolution for UD services: SIDR_REQ (IBTA vol. 1 Table 119) and SIDR_REP
//! (Table 120), at the offsets of Linux `include/rdma/ibta_vol1_c12.h` (`CM_SIDR_REQ_*`,
//! `CM_SIDR_REP_*`, with the vendor ID of Linux's ECE support from its newer header).

use super::Body;
use crate::field::{bytes, get_split, loc, put, set_split, Loc};
use crate::mad::{attr, CmError, MAD_LEN};

/// Private data bytes of a SIDR_REQ (`CM_SIDR_REQ_PRIVATE_DATA`, 1728 bits at byte 16).
pub const SIDR_REQ_PRIVATE_DATA_LEN: usize = 216;
/// Private data bytes of a SIDR_REP (`CM_SIDR_REP_PRIVATE_DATA`, 1088 bits at byte 96).
pub const SIDR_REP_PRIVATE_DATA_LEN: usize = 136;
/// Bytes of the SIDR_REP's Additional Information (`CM_SIDR_REP_ADDITIONAL_INFORMATION`,
/// 576 bits at byte 24).
pub const SIDR_REP_INFO_LEN: usize = 72;

/// The SIDR_REP's vendor ID parts, high first (`CM_SIDR_REP_VENDOR_ID_H`, `_L`).
const SIDR_REP_VENDOR_ID: [Loc; 2] = [loc(6, 0, 16), loc(11, 0, 8)];

/// SIDR_REP status (`include/rdma/ib_cm.h` `enum ib_cm_sidr_status`).
pub mod sidr_status {
    /// The QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// Service ID not supported.
    pub const UNSUPPORTED: u8 = 1;
    /// Rejected by the service.
    pub const REJECT: u8 = 2;
    /// No QP.
    pub const NO_QP: u8 = 3;
    /// Redirect (Additional Information holds ClassPortInfo).
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// ServiceIDResolutionRequest (`ibta_vol1_c12.h` `struct cm_sidr_req_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrReq {
    /// RequestID (`CM_SIDR_REQ_REQUESTID`, byte 0).
    pub request_id: u32,
    /// Partition Key (`CM_SIDR_REQ_PARTITION_KEY`, byte 4).
    pub pkey: u16,
    /// ServiceID (`CM_SIDR_REQ_SERVICEID`, byte 8).
    pub service_id: u64,
    /// Private Data (`CM_SIDR_REQ_PRIVATE_DATA`, byte 16); rdma_cm puts its header first.
    pub private_data: [u8; SIDR_REQ_PRIVATE_DATA_LEN],
}

impl Body for SidrReq {
    const ATTR: u16 = attr::SIDR_REQ;

    fn read(m: &[u8; MAD_LEN]) -> Result<SidrReq, CmError> {
        Ok(SidrReq {
            request_id: loc(0, 0, 32).get32(m),
            pkey: loc(4, 0, 16).get16(m),
            service_id: loc(8, 0, 64).get(m),
            private_data: bytes(m, 16),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        loc(0, 0, 32).set(m, self.request_id)?;
        loc(4, 0, 16).set(m, self.pkey)?;
        loc(8, 0, 64).set(m, self.service_id)?;
        put(m, 16, &self.private_data);
        Ok(())
    }
}

/// ServiceIDResolutionResponse (`ibta_vol1_c12.h` `struct cm_sidr_rep_msg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrRep {
    /// RequestID (`CM_SIDR_REP_REQUESTID`, byte 0): the SIDR_REQ's.
    pub request_id: u32,
    /// Status (`CM_SIDR_REP_STATUS`, byte 4): [`sidr_status`].
    pub status: u8,
    /// Additional Information Length (`CM_SIDR_REP_ADDITIONAL_INFORMATION_LENGTH`, byte 5),
    /// at most [`SIDR_REP_INFO_LEN`].
    pub info_length: u8,
    /// Vendor ID, 24 bits: `CM_SIDR_REP_VENDOR_ID_H` (16 bits at 6) then
    /// `CM_SIDR_REP_VENDOR_ID_L` (byte 11).
    pub vendor_id: u32,
    /// QPN (`CM_SIDR_REP_QPN`, 24 bits at 8).
    pub qpn: u32,
    /// ServiceID (`CM_SIDR_REP_SERVICEID`, byte 12).
    pub service_id: u64,
    /// Q_Key (`CM_SIDR_REP_Q_KEY`, byte 20).
    pub qkey: u32,
    /// Additional Information (`CM_SIDR_REP_ADDITIONAL_INFORMATION`, byte 24).
    pub info: [u8; SIDR_REP_INFO_LEN],
    /// Private Data (`CM_SIDR_REP_PRIVATE_DATA`, byte 96).
    pub private_data: [u8; SIDR_REP_PRIVATE_DATA_LEN],
}

impl Body for SidrRep {
    const ATTR: u16 = attr::SIDR_REP;

    fn read(m: &[u8; MAD_LEN]) -> Result<SidrRep, CmError> {
        let info_length = loc(5, 0, 8).get8(m);
        if usize::from(info_length) > SIDR_REP_INFO_LEN {
            return Err(CmError::InfoLength(info_length));
        }
        Ok(SidrRep {
            request_id: loc(0, 0, 32).get32(m),
            status: loc(4, 0, 8).get8(m),
            info_length,
            vendor_id: get_split(m, &SIDR_REP_VENDOR_ID),
            qpn: loc(8, 0, 24).get32(m),
            service_id: loc(12, 0, 64).get(m),
            qkey: loc(20, 0, 32).get32(m),
            info: bytes(m, 24),
            private_data: bytes(m, 96),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        if usize::from(self.info_length) > SIDR_REP_INFO_LEN {
            return Err(CmError::InfoLength(self.info_length));
        }
        loc(0, 0, 32).set(m, self.request_id)?;
        loc(4, 0, 8).set(m, self.status)?;
        loc(5, 0, 8).set(m, self.info_length)?;
        set_split(m, &SIDR_REP_VENDOR_ID, self.vendor_id)?;
        loc(8, 0, 24).set(m, self.qpn)?;
        loc(12, 0, 64).set(m, self.service_id)?;
        loc(20, 0, 32).set(m, self.qkey)?;
        put(m, 24, &self.info);
        put(m, 96, &self.private_data);
        Ok(())
    }
}
