//! The NVMe/RDMA private data of the RDMA CM exchange: what the host's REQ carries, what the
//! target's REP and REJ carry.
//!
//! Layouts: NVMe over Fabrics RDMA transport binding, as Linux `include/linux/nvme-rdma.h`
//! declares them (`struct nvme_rdma_cm_req`, `struct nvme_rdma_cm_rep`, `struct
//! nvme_rdma_cm_rej`, `enum nvme_rdma_cm_status`); checks as Linux's target does them
//! (`drivers/nvme/target/rdma.c` `nvmet_rdma_parse_cm_connect_req`).

/// Bytes of the REQ's NVMe private data (after the rdma_cm header).
pub const CM_REQ_LEN: usize = 32;
/// Bytes of the REP's private data.
pub const CM_REP_LEN: usize = 32;
/// Bytes of the REJ's private data.
pub const CM_REJ_LEN: usize = 4;
/// The only record format (`nvme-rdma.h` `NVME_RDMA_CM_FMT_1_0`).
pub const RECFMT_1_0: u16 = 0;
/// The admin queue's largest depth (`include/linux/nvme.h` `NVME_AQ_DEPTH`).
pub const AQ_DEPTH: u32 = 32;

/// Reject statuses (`nvme-rdma.h` `enum nvme_rdma_cm_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum RejStatus {
    /// `NVME_RDMA_CM_INVALID_LEN`.
    InvalidLen = 0x01,
    /// `NVME_RDMA_CM_INVALID_RECFMT`.
    InvalidRecfmt = 0x02,
    /// `NVME_RDMA_CM_INVALID_QID`.
    InvalidQid = 0x03,
    /// `NVME_RDMA_CM_INVALID_HSQSIZE`.
    InvalidHsqsize = 0x04,
    /// `NVME_RDMA_CM_INVALID_HRQSIZE`.
    InvalidHrqsize = 0x05,
    /// `NVME_RDMA_CM_NO_RSC`.
    NoRsc = 0x06,
    /// `NVME_RDMA_CM_INVALID_IRD`.
    InvalidIrd = 0x07,
    /// `NVME_RDMA_CM_INVALID_ORD`.
    InvalidOrd = 0x08,
    /// `NVME_RDMA_CM_INVALID_CNTLID`.
    InvalidCntlid = 0x09,
}

impl RejStatus {
    /// The REJ's private data (`struct nvme_rdma_cm_rej`: recfmt, sts, little-endian).
    pub fn to_bytes(self) -> [u8; CM_REJ_LEN] {
        let s = (self as u16).to_le_bytes();
        [0, 0, s[0], s[1]]
    }
}

/// The host's REQ private data (`struct nvme_rdma_cm_req`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmReq {
    /// Record format.
    pub recfmt: u16,
    /// The queue ID this connection carries (0: admin).
    pub qid: u16,
    /// The host's receive queue size: the target's send queue depth.
    pub hrqsize: u16,
    /// The host's submission queue size, 0's based: the target's receive queue depth - 1.
    pub hsqsize: u16,
}

impl CmReq {
    /// Reads the private data after the rdma_cm header, with the checks of Linux
    /// `nvmet_rdma_parse_cm_connect_req` (empty: invalid length; recfmt other than 1.0).
    pub fn parse(private: &[u8]) -> Result<CmReq, RejStatus> {
        if private.len() < 8 {
            return Err(RejStatus::InvalidLen);
        }
        let at = |o: usize| u16::from_le_bytes([private[o], private[o + 1]]);
        let req = CmReq {
            recfmt: at(0),
            qid: at(2),
            hrqsize: at(4),
            hsqsize: at(6),
        };
        if req.recfmt != RECFMT_1_0 {
            return Err(RejStatus::InvalidRecfmt);
        }
        Ok(req)
    }

    /// The 32 bytes a host sends (reserved bytes zero).
    pub fn to_bytes(&self) -> [u8; CM_REQ_LEN] {
        let mut b = [0u8; CM_REQ_LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.qid.to_le_bytes());
        b[4..6].copy_from_slice(&self.hrqsize.to_le_bytes());
        b[6..8].copy_from_slice(&self.hsqsize.to_le_bytes());
        b
    }
}

/// The target's REP private data (`struct nvme_rdma_cm_rep`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmRep {
    /// Record format.
    pub recfmt: u16,
    /// The target's receive queue size (Linux: `queue->recv_queue_size`).
    pub crqsize: u16,
}

impl CmRep {
    /// The 32 bytes of the REP's private data (reserved bytes zero).
    pub fn to_bytes(&self) -> [u8; CM_REP_LEN] {
        let mut b = [0u8; CM_REP_LEN];
        b[0..2].copy_from_slice(&self.recfmt.to_le_bytes());
        b[2..4].copy_from_slice(&self.crqsize.to_le_bytes());
        b
    }
}
