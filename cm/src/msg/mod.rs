//! Every CM message as a typed struct, and [`CmMad`]: a whole 256-byte CM MAD, decoded and
//! encoded field by field.

mod conn;
mod other;
mod sidr;

pub use conn::{transport, Rep, Req, ReqPath, REP_PRIVATE_DATA_LEN, REQ_PRIVATE_DATA_LEN};
pub use other::{
    msg_response, rej_reason, Drep, Dreq, Mra, Rej, Rtu, DREQ_PRIVATE_DATA_LEN,
    MRA_PRIVATE_DATA_LEN, REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN, RTU_PRIVATE_DATA_LEN,
};
pub use sidr::{
    sidr_status, SidrRep, SidrReq, SIDR_REP_INFO_LEN, SIDR_REP_PRIVATE_DATA_LEN,
    SIDR_REQ_PRIVATE_DATA_LEN,
};

use crate::mad::{attr, CmError, MadHdr, MAD_LEN};

/// A message body: its attribute ID and its fields at their IBTA offsets.
trait Body: Sized {
    const ATTR: u16;
    fn read(m: &[u8; MAD_LEN]) -> Result<Self, CmError>;
    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError>;
}

/// One CM message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmMsg {
    /// ConnectRequest.
    Req(Req),
    /// MessageReceiptAcknowledgement.
    Mra(Mra),
    /// ConnectReject.
    Rej(Rej),
    /// ConnectReply.
    Rep(Rep),
    /// ReadyToUse.
    Rtu(Rtu),
    /// DisconnectRequest.
    Dreq(Dreq),
    /// DisconnectReply.
    Drep(Drep),
    /// ServiceIDResolutionRequest.
    SidrReq(SidrReq),
    /// ServiceIDResolutionResponse.
    SidrRep(SidrRep),
}

impl CmMsg {
    /// The message's attribute ID ([`attr`]).
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMsg::Req(_) => Req::ATTR,
            CmMsg::Mra(_) => Mra::ATTR,
            CmMsg::Rej(_) => Rej::ATTR,
            CmMsg::Rep(_) => Rep::ATTR,
            CmMsg::Rtu(_) => Rtu::ATTR,
            CmMsg::Dreq(_) => Dreq::ATTR,
            CmMsg::Drep(_) => Drep::ATTR,
            CmMsg::SidrReq(_) => SidrReq::ATTR,
            CmMsg::SidrRep(_) => SidrRep::ATTR,
        }
    }

    /// The message's name, as IBTA vol. 1 chapter 12 and tshark's CM dissector write it
    /// ("REQ", "SIDR_REP").
    pub fn name(&self) -> &'static str {
        match self {
            CmMsg::Req(_) => "REQ",
            CmMsg::Mra(_) => "MRA",
            CmMsg::Rej(_) => "REJ",
            CmMsg::Rep(_) => "REP",
            CmMsg::Rtu(_) => "RTU",
            CmMsg::Dreq(_) => "DREQ",
            CmMsg::Drep(_) => "DREP",
            CmMsg::SidrReq(_) => "SIDR_REQ",
            CmMsg::SidrRep(_) => "SIDR_REP",
        }
    }

    /// The sender's communication ID (the request ID for SIDR), by which the receiver finds
    /// the connection (cm.c `cm_acquire_id` by remote ID, `cm_match_req`).
    pub fn local_comm_id(&self) -> u32 {
        match self {
            CmMsg::Req(m) => m.local_comm_id,
            CmMsg::Mra(m) => m.local_comm_id,
            CmMsg::Rej(m) => m.local_comm_id,
            CmMsg::Rep(m) => m.local_comm_id,
            CmMsg::Rtu(m) => m.local_comm_id,
            CmMsg::Dreq(m) => m.local_comm_id,
            CmMsg::Drep(m) => m.local_comm_id,
            CmMsg::SidrReq(m) => m.request_id,
            CmMsg::SidrRep(m) => m.request_id,
        }
    }

    fn read(attr_id: u16, m: &[u8; MAD_LEN]) -> Result<CmMsg, CmError> {
        Ok(match attr_id {
            attr::REQ => CmMsg::Req(Req::read(m)?),
            attr::MRA => CmMsg::Mra(Mra::read(m)?),
            attr::REJ => CmMsg::Rej(Rej::read(m)?),
            attr::REP => CmMsg::Rep(Rep::read(m)?),
            attr::RTU => CmMsg::Rtu(Rtu::read(m)?),
            attr::DREQ => CmMsg::Dreq(Dreq::read(m)?),
            attr::DREP => CmMsg::Drep(Drep::read(m)?),
            attr::SIDR_REQ => CmMsg::SidrReq(SidrReq::read(m)?),
            attr::SIDR_REP => CmMsg::SidrRep(SidrRep::read(m)?),
            other => return Err(CmError::Attribute(other)),
        })
    }

    fn write(&self, m: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        match self {
            CmMsg::Req(b) => b.write(m),
            CmMsg::Mra(b) => b.write(m),
            CmMsg::Rej(b) => b.write(m),
            CmMsg::Rep(b) => b.write(m),
            CmMsg::Rtu(b) => b.write(m),
            CmMsg::Dreq(b) => b.write(m),
            CmMsg::Drep(b) => b.write(m),
            CmMsg::SidrReq(b) => b.write(m),
            CmMsg::SidrRep(b) => b.write(m),
        }
    }
}

/// A whole CM MAD: the common header and one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// The common MAD header; its `attr_id` names the message.
    pub hdr: MadHdr,
    /// The message.
    pub msg: CmMsg,
}

impl CmMad {
    /// A MAD carrying `msg` in exchange `tid`, with the header Linux's CM sends
    /// ([`MadHdr::cm`]).
    pub fn new(tid: u64, msg: CmMsg) -> CmMad {
        CmMad {
            hdr: MadHdr::cm(msg.attr_id(), tid),
            msg,
        }
    }

    /// Decodes the payload of a UD datagram to QP 1: exactly [`MAD_LEN`] bytes, base version,
    /// class, class version and method checked, one of the CM messages by attribute ID.
    pub fn decode(b: &[u8]) -> Result<CmMad, CmError> {
        let m: &[u8; MAD_LEN] = b.try_into().map_err(|_| CmError::Length(b.len()))?;
        let hdr = MadHdr::decode(m)?;
        hdr.check_cm()?;
        let msg = CmMsg::read(hdr.attr_id, m)?;
        Ok(CmMad { hdr, msg })
    }

    /// Encodes into `out` (every byte written; reserved bits zero). Refuses a header whose
    /// attribute ID is not the message's and any value wider than its field.
    pub fn encode(&self, out: &mut [u8; MAD_LEN]) -> Result<(), CmError> {
        let message = self.msg.attr_id();
        if self.hdr.attr_id != message {
            return Err(CmError::AttributeMismatch {
                header: self.hdr.attr_id,
                message,
            });
        }
        let mut m = [0u8; MAD_LEN];
        self.hdr.encode(&mut m);
        self.msg.write(&mut m)?;
        *out = m;
        Ok(())
    }

    /// The encoded MAD in a new array.
    pub fn to_bytes(&self) -> Result<[u8; MAD_LEN], CmError> {
        let mut m = [0u8; MAD_LEN];
        self.encode(&mut m)?;
        Ok(m)
    }
}

/// Private data of `N` bytes from `src`, zero-padded: what a message carries for an
/// application's shorter private data (librdmacm `rdma_accept` / `rdma_reject`
/// `private_data_len`). Longer than `N` is refused.
pub fn private_data<const N: usize>(src: &[u8]) -> Result<[u8; N], CmError> {
    if src.len() > N {
        return Err(CmError::PrivateDataLength {
            max: N,
            got: src.len(),
        });
    }
    let mut out = [0u8; N];
    out[..src.len()].copy_from_slice(src);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests;
