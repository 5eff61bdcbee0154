//! The common MAD header and the constants of the communication management class.
//!
//! Layout: IBTA vol. 1 §13.4.2 (common MAD header) as Linux `include/rdma/ib_mad.h`
//! `struct ib_mad_hdr` declares it; constants from `ib_mad.h` and `include/rdma/ib_cm.h`.

/// Bytes of a MAD on QP 1: header plus data (`ib_mad.h` `IB_MGMT_MAD_SIZE`).
pub const MAD_LEN: usize = 256;
/// Bytes of the common MAD header (`ib_mad.h` `IB_MGMT_MAD_HDR`).
pub const MAD_HDR_LEN: usize = 24;
/// Bytes of the CM message after the header (`ib_mad.h` `IB_MGMT_MAD_DATA`).
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HDR_LEN;

/// The MAD base version (`ib_mad.h` `IB_MGMT_BASE_VERSION`).
pub const BASE_VERSION: u8 = 1;
/// The communication management class (`ib_mad.h` `IB_MGMT_CLASS_CM`).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// The CM class version Linux speaks (`drivers/infiniband/core/cm_msgs.h`
/// `IB_CM_CLASS_VERSION`, IBTA 1.2).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send: how every CM message travels (`ib_mad.h` `IB_MGMT_METHOD_SEND`; Linux
/// `drivers/infiniband/core/cm.c` `cm_format_mad_hdr`).
pub const METHOD_SEND: u8 = 0x03;
/// The Q_Key of QP 1 (`ib_mad.h` `IB_QP1_QKEY`).
pub const QP1_QKEY: u32 = 0x8001_0000;

/// Attribute IDs of the CM class (`include/rdma/ib_cm.h` `CM_REQ_ATTR_ID` ... `CM_APR_ATTR_ID`;
/// ClassPortInfo from `ib_mad.h` `IB_MGMT_CLASSPORTINFO_ATTR_ID`).
pub mod attr {
    /// ClassPortInfo (not a CM message; not decoded here).
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MessageReceiptAcknowledgement.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResolutionRequest.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResolutionResponse.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath (not decoded: alternate paths are left out).
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse (not decoded).
    pub const APR: u16 = 0x001a;
}

/// Why bytes are not a CM MAD this crate understands, or a message cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmError {
    /// The datagram is not `MAD_LEN` bytes.
    Length(usize),
    /// Base version other than [`BASE_VERSION`].
    BaseVersion(u8),
    /// Management class other than [`MGMT_CLASS_CM`].
    Class(u8),
    /// Class version other than [`CM_CLASS_VERSION`].
    ClassVersion(u8),
    /// Method other than [`METHOD_SEND`].
    Method(u8),
    /// An attribute that is not one of the CM messages decoded here.
    Attribute(u16),
    /// The header's attribute ID does not name the message being encoded.
    AttributeMismatch {
        /// In the header.
        header: u16,
        /// The message's.
        message: u16,
    },
    /// REJ Rejected Info Length or SIDR_REP Additional Information Length beyond its 72 bytes.
    InfoLength(u8),
    /// Private data longer than the message has room for.
    PrivateDataLength {
        /// The room.
        max: usize,
        /// Offered.
        got: usize,
    },
    /// A value wider than its field.
    FieldRange {
        /// First bit of the field in the MAD.
        bit_offset: u16,
        /// Its width.
        width: u8,
        /// The value offered.
        value: u64,
    },
}

/// The common MAD header (`ib_mad.h` `struct ib_mad_hdr`, all fields big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MadHdr {
    /// `base_version`, byte 0.
    pub base_version: u8,
    /// `mgmt_class`, byte 1.
    pub mgmt_class: u8,
    /// `class_version`, byte 2.
    pub class_version: u8,
    /// `method`, byte 3.
    pub method: u8,
    /// `status`, bytes 4-5.
    pub status: u16,
    /// `class_specific`, bytes 6-7.
    pub class_specific: u16,
    /// `tid`, bytes 8-15: every MAD of one CM exchange carries the REQ's (cm.c
    /// `cm_form_tid`, `cm_format_mad_hdr`).
    pub tid: u64,
    /// `attr_id`, bytes 16-17.
    pub attr_id: u16,
    /// `resv`, bytes 18-19 (reserved; kept as received).
    pub resv: u16,
    /// `attr_mod`, bytes 20-23.
    pub attr_mod: u32,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

impl MadHdr {
    /// The header of a CM message: base version 1, class CM, class version 2, method Send,
    /// status 0 (cm.c `cm_format_mad_hdr`).
    pub const fn cm(attr_id: u16, tid: u64) -> MadHdr {
        MadHdr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            resv: 0,
            attr_mod: 0,
        }
    }

    /// Reads the header of any MAD (at least `MAD_HDR_LEN` bytes); no field is judged.
    pub fn decode(b: &[u8]) -> Result<MadHdr, CmError> {
        if b.len() < MAD_HDR_LEN {
            return Err(CmError::Length(b.len()));
        }
        let mut tid = [0u8; 8];
        tid.copy_from_slice(&b[8..16]);
        Ok(MadHdr {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: be16(b, 4),
            class_specific: be16(b, 6),
            tid: u64::from_be_bytes(tid),
            attr_id: be16(b, 16),
            resv: be16(b, 18),
            attr_mod: u32::from_be_bytes([b[20], b[21], b[22], b[23]]),
        })
    }

    /// Writes the header into the first `MAD_HDR_LEN` bytes of `out`.
    pub fn encode(&self, out: &mut [u8; MAD_LEN]) {
        out[0] = self.base_version;
        out[1] = self.mgmt_class;
        out[2] = self.class_version;
        out[3] = self.method;
        out[4..6].copy_from_slice(&self.status.to_be_bytes());
        out[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        out[8..16].copy_from_slice(&self.tid.to_be_bytes());
        out[16..18].copy_from_slice(&self.attr_id.to_be_bytes());
        out[18..20].copy_from_slice(&self.resv.to_be_bytes());
        out[20..24].copy_from_slice(&self.attr_mod.to_be_bytes());
    }

    /// Checks what a CM agent requires of a MAD before looking at its attribute: base
    /// version, class, class version and method (cm.c `cm_recv_handler` takes what the MAD
    /// layer delivers to the CM class version it registered, `ib_register_mad_agent`).
    pub fn check_cm(&self) -> Result<(), CmError> {
        if self.base_version != BASE_VERSION {
            return Err(CmError::BaseVersion(self.base_version));
        }
        if self.mgmt_class != MGMT_CLASS_CM {
            return Err(CmError::Class(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(CmError::ClassVersion(self.class_version));
        }
        if self.method != METHOD_SEND {
            return Err(CmError::Method(self.method));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_big_endian() {
        let mut h = MadHdr::cm(attr::REQ, 0x0000_0002_ef9c_249c);
        h.attr_mod = 0x0102_0304;
        h.status = 0x0a0b;
        let mut m = [0u8; MAD_LEN];
        h.encode(&mut m);
        assert_eq!(&m[..4], &[1, 0x07, 2, 0x03]);
        assert_eq!(&m[4..6], &[0x0a, 0x0b]);
        assert_eq!(&m[8..16], &[0, 0, 0, 2, 0xef, 0x9c, 0x24, 0x9c]);
        assert_eq!(&m[16..18], &[0, 0x10]);
        assert_eq!(&m[20..24], &[1, 2, 3, 4]);
        assert_eq!(MadHdr::decode(&m), Ok(h));
        assert_eq!(h.check_cm(), Ok(()));
    }

    #[test]
    fn header_checks_are_typed() {
        let ok = MadHdr::cm(attr::REP, 1);
        assert_eq!(MadHdr::decode(&[0; 23]), Err(CmError::Length(23)));
        let bad = |f: fn(&mut MadHdr)| {
            let mut h = ok;
            f(&mut h);
            h.check_cm()
        };
        assert_eq!(bad(|h| h.base_version = 2), Err(CmError::BaseVersion(2)));
        assert_eq!(bad(|h| h.mgmt_class = 0x01), Err(CmError::Class(1)));
        assert_eq!(bad(|h| h.class_version = 1), Err(CmError::ClassVersion(1)));
        assert_eq!(bad(|h| h.method = 0x01), Err(CmError::Method(1)));
    }
}
