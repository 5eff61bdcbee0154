//! RoCEv2 frames: typed headers, a total decoder and an exact encoder.
//!
//! [`decode`] takes any byte string (an Ethernet frame without FCS) and returns a [`Frame`]: a
//! [`RoceFrame`] for IPv4/IPv6 + UDP destination port 4791, an [`OtherFrame`] for anything else,
//! or a typed [`DecodeError`]; it never panics. [`RoceFrame::encode_into`] gives back the exact
//! bytes of a decoded frame (pad contents and Ethernet trailer included, ICRC recomputed), and
//! [`RoceHeaders::encode_into`] builds a new frame from headers and a payload slice.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::icrc::icrc;
use super::opcode::{HdrSet, OpcodeInfo};
use super::*;

/// An 802.1Q tag (IEEE 802.1Q §9.6: TPID 0x8100, then PCP 3 bits, DEI 1 bit, VID 12 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vlan {
    /// Priority code point (0..=7).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (0..=4095).
    pub vid: u16,
}

/// Ethernet II header (destination first, no FCS: QEMU's stream netdev and pcaps carry none).
/// The EtherType follows from the IP version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthHdr {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// Optional 802.1Q tag.
    pub vlan: Option<Vlan>,
}

/// IPv4 header (RFC 791) of a RoCEv2 packet. Version 4, IHL 5 (no options), protocol 17, no
/// fragmentation; total length and header checksum are computed by the encoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Hdr {
    /// Differentiated services code point (0..=63).
    pub dscp: u8,
    /// Explicit congestion notification (0..=3).
    pub ecn: u8,
    /// Identification.
    pub identification: u16,
    /// Don't Fragment (rxe sets it: rxe_net.c `prepare_ipv4_hdr`, `iph->frag_off = df`).
    pub dont_fragment: bool,
    /// Time to live.
    pub ttl: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
}

/// IPv6 header (RFC 8200) of a RoCEv2 packet: next header 17 directly (no extension headers);
/// the payload length is computed by the encoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Hdr {
    /// Traffic class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow label (0..=0xfffff).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
}

/// The IP header: IPv4 for IPv4-mapped RoCE v2 GIDs, IPv6 otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpHdr {
    /// IPv4.
    V4(Ipv4Hdr),
    /// IPv6.
    V6(Ipv6Hdr),
}

impl IpHdr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpHdr::V4(h) => IpAddr::V4(h.src),
            IpHdr::V6(h) => IpAddr::V6(h.src),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpHdr::V4(h) => IpAddr::V4(h.dst),
            IpHdr::V6(h) => IpAddr::V6(h.dst),
        }
    }
    /// Header length in bytes.
    pub fn len(&self) -> usize {
        match self {
            IpHdr::V4(_) => IPV4_HDR_LEN,
            IpHdr::V6(_) => IPV6_HDR_LEN,
        }
    }
    /// Always false (a header is never empty); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// UDP header (RFC 768). Destination port is [`ROCEV2_UDP_PORT`]; the length is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpHdr {
    /// Source port: a flow hash (rxe_net.c `rxe_prepare`/`rdma_get_udp_sport`; the QP
    /// context's `udp_sport` on a ConnectX).
    pub src_port: u16,
    /// Checksum as sent. rxe sends 0 ("no checksum", RFC 768, which Annex A17 §A17.4.2 allows
    /// since the ICRC protects the packet); the decoder does not verify a non-zero one.
    pub checksum: u16,
}

/// Base Transport Header (IBTA vol. 1 §9.2, 12 bytes; rxe_hdr.h `struct rxe_bth`). The pad
/// count is not stored: the encoder derives it from the payload length, the decoder strips it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bth {
    /// OpCode.
    pub opcode: Opcode,
    /// SE: solicited event.
    pub solicited: bool,
    /// M: migration request.
    pub mig_req: bool,
    /// TVer: transport header version (0; receivers drop others, rxe_recv.c `hdr_check`).
    pub tver: u8,
    /// P_Key.
    pub p_key: u16,
    /// Byte 4: FECN, BECN and resv6 (rxe `resv8a`); masked out of the ICRC.
    pub resv8a: u8,
    /// DestQP (24 bits).
    pub dest_qp: u32,
    /// A: acknowledge request.
    pub ack_req: bool,
    /// resv7 (7 bits, sent as 0).
    pub resv7: u8,
    /// PSN (24 bits).
    pub psn: u32,
}

impl Bth {
    /// A BTH with the fields every packet of the shared captures has: P_Key 0xffff (default
    /// partition), TVer 0, flags and reserved bits 0.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            solicited: false,
            mig_req: false,
            tver: 0,
            p_key: DEFAULT_P_KEY,
            resv8a: 0,
            dest_qp,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }
}

/// RDMA Extended Transport Header (IBTA §9.3.3, 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reth {
    /// Virtual address.
    pub va: u64,
    /// R_Key.
    pub r_key: u32,
    /// DMA length: the whole message's length.
    pub dma_len: u32,
}

/// Atomic Extended Transport Header (IBTA §9.3.4, 28 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// Virtual address (8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub r_key: u32,
    /// Swap (COMPARE_SWAP) or add (FETCH_ADD) data.
    pub swap_add: u64,
    /// Compare data (COMPARE_SWAP).
    pub compare: u64,
}

/// NAK codes (IBTA §9.7.5.1 Table 46; rxe_hdr.h `AETH_NAK_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1f,
        }
    }
    /// The code's meaning from its 5 bits.
    pub fn from_code(c: u8) -> NakCode {
        match c & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// The meaning of an AETH syndrome (IBTA §9.7.5.1 Table 45: bits 6..5 select ACK, RNR NAK,
/// reserved or NAK; bit 7 is reserved and 0; bits 4..0 are the credit count, RNR timer or NAK
/// code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AethKind {
    /// ACK with a credit count (31 = no end-to-end credits, as rxe's `AETH_ACK_UNLIMITED`).
    Ack {
        /// Credit count encoding.
        credit: u8,
    },
    /// RNR NAK with the responder's RNR timer encoding (IBTA Table 45's timer field).
    RnrNak {
        /// Timer encoding.
        timer: u8,
    },
    /// NAK with a code.
    Nak(NakCode),
    /// A reserved syndrome (type 10, or bit 7 set).
    Reserved(u8),
}

impl fmt::Display for AethKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AethKind::Ack { credit } => write!(f, "ACK(credit={credit})"),
            AethKind::RnrNak { timer } => write!(f, "RNR_NAK(timer={timer})"),
            AethKind::Nak(c) => match c {
                NakCode::PsnSequenceError => f.write_str("NAK(PSN_SEQUENCE_ERROR)"),
                NakCode::InvalidRequest => f.write_str("NAK(INVALID_REQUEST)"),
                NakCode::RemoteAccessError => f.write_str("NAK(REMOTE_ACCESS_ERROR)"),
                NakCode::RemoteOperationalError => f.write_str("NAK(REMOTE_OPERATIONAL_ERROR)"),
                NakCode::InvalidRdRequest => f.write_str("NAK(INVALID_RD_REQUEST)"),
                NakCode::Reserved(c) => write!(f, "NAK(reserved {c})"),
            },
            AethKind::Reserved(s) => write!(f, "RESERVED(0x{s:02x})"),
        }
    }
}

/// ACK Extended Transport Header (IBTA §9.3.5, 4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// Syndrome byte.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Credit count meaning "no end-to-end flow control" (rxe_hdr.h `AETH_ACK_UNLIMITED`).
    pub const CREDIT_UNLIMITED: u8 = 0x1f;

    /// An ACK with `credit`.
    pub fn ack(credit: u8, msn: u32) -> Aeth {
        Aeth {
            syndrome: credit & 0x1f,
            msn,
        }
    }
    /// An RNR NAK with the RNR timer encoding `timer`.
    pub fn rnr_nak(timer: u8, msn: u32) -> Aeth {
        Aeth {
            syndrome: 0x20 | (timer & 0x1f),
            msn,
        }
    }
    /// A NAK with `code`.
    pub fn nak(code: NakCode, msn: u32) -> Aeth {
        Aeth {
            syndrome: 0x60 | code.code(),
            msn,
        }
    }
    /// What the syndrome means.
    pub fn kind(&self) -> AethKind {
        let low = self.syndrome & 0x1f;
        match self.syndrome >> 5 {
            0 => AethKind::Ack { credit: low },
            1 => AethKind::RnrNak { timer: low },
            3 => AethKind::Nak(NakCode::from_code(low)),
            _ => AethKind::Reserved(self.syndrome),
        }
    }
}

/// Atomic ACK Extended Transport Header (IBTA §9.3.6, 8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// The remote data before the atomic.
    pub orig: u64,
}

/// Datagram Extended Transport Header (IBTA §9.3.2, 8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Deth {
    /// Q_Key.
    pub q_key: u32,
    /// Reserved byte (sent as 0).
    pub resv8: u8,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

/// The extension headers of a packet. Which must be present is fixed by the opcode
/// ([`OpcodeInfo::hdrs`]); the encoder refuses any other combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ExtHdrs {
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// RETH.
    pub reth: Option<Reth>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEth>,
    /// AETH.
    pub aeth: Option<Aeth>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEth>,
    /// ImmDt: the immediate data, as the 32-bit big-endian wire value.
    pub imm_dt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHdrs {
    /// No extension header (what MIDDLE packets carry).
    pub const NONE: ExtHdrs = ExtHdrs {
        deth: None,
        reth: None,
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        imm_dt: None,
        ieth: None,
    };

    /// The set of headers present.
    pub fn set(&self) -> HdrSet {
        let mut s = HdrSet::NONE;
        let mut add = |p: bool, h: HdrSet| {
            if p {
                s = s.union(h)
            }
        };
        add(self.deth.is_some(), HdrSet::DETH);
        add(self.reth.is_some(), HdrSet::RETH);
        add(self.atomic_eth.is_some(), HdrSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HdrSet::AETH);
        add(self.atomic_ack_eth.is_some(), HdrSet::ATOMIC_ACK_ETH);
        add(self.imm_dt.is_some(), HdrSet::IMM_DT);
        add(self.ieth.is_some(), HdrSet::IETH);
        s
    }
}

/// Every header of a RoCEv2 frame up to the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoceHeaders {
    /// Ethernet.
    pub eth: EthHdr,
    /// IPv4 or IPv6.
    pub ip: IpHdr,
    /// UDP.
    pub udp: UdpHdr,
    /// BTH.
    pub bth: Bth,
    /// Extension headers.
    pub ext: ExtHdrs,
}

/// A decoded RoCEv2 frame, borrowing its payload and trailer from the input bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    /// The headers.
    pub hdrs: RoceHeaders,
    /// The payload, without pad bytes.
    pub payload: &'a [u8],
    /// The pad bytes as received (the first `pad_count` are used; the encoder of a new frame
    /// sends zeros).
    pub pad: [u8; 3],
    /// The ICRC as received (the little-endian u32 of the last 4 bytes of the UDP payload).
    pub icrc: u32,
    /// The ICRC this frame should carry.
    pub icrc_computed: u32,
    /// Bytes after the IP datagram (Ethernet padding), kept for an exact re-encoding.
    pub trailer: &'a [u8],
}

impl RoceFrame<'_> {
    /// Whether the received ICRC is right.
    pub fn icrc_ok(&self) -> bool {
        self.icrc == self.icrc_computed
    }
    /// The BTH pad count.
    pub fn pad_count(&self) -> usize {
        pad_for(self.payload.len())
    }
    /// Appends this frame's exact bytes to `out` (pad contents and trailer as decoded; the
    /// ICRC recomputed, so a frame that decoded with a bad ICRC comes out with a good one).
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        encode(&self.hdrs, self.payload, self.pad, self.trailer, out)
    }
    /// This frame's bytes in a new vector.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::new();
        self.encode_into(&mut v)?;
        Ok(v)
    }
}

impl RoceHeaders {
    /// Appends a frame with these headers, `payload`, zero pad bytes and the ICRC to `out`.
    pub fn encode_into(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        encode(self, payload, [0; 3], &[], out)
    }
    /// The frame in a new vector.
    pub fn encode(&self, payload: &[u8]) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::new();
        self.encode_into(payload, &mut v)?;
        Ok(v)
    }
    /// Appends a frame with these headers and room for `payload_len` payload bytes (zeroed,
    /// then zero pad and a zero ICRC), and returns the payload's range in `out`. The caller
    /// fills that range (e.g. gathers straight from guest memory) and then calls
    /// [`RoceHeaders::seal_icrc`] on the frame: no separate payload buffer, no extra copy.
    pub fn encode_for_payload(
        &self,
        payload_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<std::ops::Range<usize>, EncodeError> {
        write_headers(self, payload_len, 0, out)?;
        let start = out.len();
        out.resize(start + payload_len + pad_for(payload_len) + ICRC_LEN, 0);
        Ok(start..start + payload_len)
    }

    /// Writes the ICRC into the last four bytes of `frame`, a frame made with these headers
    /// (by [`RoceHeaders::encode_for_payload`]) and no Ethernet trailer. Fails if `frame` is
    /// shorter than the headers.
    pub fn seal_icrc(&self, frame: &mut [u8]) -> Result<(), EncodeError> {
        let ip_start = eth_len(&self.eth);
        let n = frame.len();
        let short = EncodeError::FrameTooShort(n);
        let end = n.checked_sub(ICRC_LEN).ok_or(short)?;
        let dgram = frame.get(ip_start..end).ok_or(short)?;
        let c = icrc(dgram, matches!(self.ip, IpHdr::V6(_))).ok_or(short)?;
        frame[end..].copy_from_slice(&c.to_le_bytes());
        Ok(())
    }

    /// Bytes of the frame these headers would make with `payload_len` bytes of payload
    /// (Ethernet header to ICRC, no FCS), or `None` when that does not fit the IP length field.
    pub fn frame_len(&self, payload_len: usize) -> Option<usize> {
        let udp = udp_len(self.bth.opcode.info()?.hdrs, payload_len)?;
        let l3 = match self.ip {
            IpHdr::V4(_) => IPV4_HDR_LEN.checked_add(udp).filter(|&n| n <= 0xffff)?,
            IpHdr::V6(_) => IPV6_HDR_LEN + udp,
        };
        Some(eth_len(&self.eth) + l3)
    }
}

/// A frame that is not RoCEv2: what the decoder could tell about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtherFrame {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// 802.1Q tag, if any.
    pub vlan: Option<Vlan>,
    /// EtherType (after the tag).
    pub ethertype: u16,
    /// IP details for IPv4/IPv6 frames.
    pub ip: Option<OtherIp>,
}

/// The addresses and protocol of a non-RoCE IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtherIp {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IPv4 protocol / IPv6 next header.
    pub protocol: u8,
    /// UDP source and destination port, for UDP to another port.
    pub udp_ports: Option<(u16, u16)>,
}

/// What [`decode`] found.
// RoCE frames are the common case on the data path: boxing them would cost an allocation per
// packet to shrink the rare `Other`.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A RoCEv2 frame.
    Roce(RoceFrame<'a>),
    /// Anything else (ARP, TCP, UDP to another port, ...).
    Other(OtherFrame),
}

/// Where a frame ended too early.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet header.
    Ethernet,
    /// 802.1Q tag.
    Vlan,
    /// IPv4 header or datagram.
    Ipv4,
    /// IPv6 header or datagram.
    Ipv6,
    /// UDP header.
    Udp,
    /// BTH (and the ICRC after it).
    Bth,
    /// Extension headers.
    ExtHeaders,
}

/// Why a byte string is not a well-formed frame. Only frames that claim to be IP are judged;
/// among those only UDP to port 4791 is decoded strictly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the layer needs.
    Truncated {
        /// The layer.
        layer: Layer,
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// The IP version nibble does not match the EtherType.
    IpVersion(u8),
    /// An IPv4 header with options (IHL != 5) on a RoCEv2 packet. Model choice: Annex A17 and
    /// rxe (rxe_icrc.c takes `sizeof(struct iphdr)`) assume a 20-byte header.
    Ipv4Options {
        /// The IHL field.
        ihl: u8,
    },
    /// A fragment (MF or offset) of a RoCEv2 packet: RoCEv2 is never fragmented (DF).
    Ipv4Fragment,
    /// The reserved IPv4 flag bit is set (RFC 791: must be zero). Model choice: rejected.
    Ipv4ReservedFlag,
    /// The IPv4 header checksum is wrong.
    Ipv4Checksum {
        /// As received.
        found: u16,
        /// As computed.
        expected: u16,
    },
    /// The IP total (IPv4) or payload (IPv6) length is too small for the headers it claims.
    IpLength(u16),
    /// The UDP length disagrees with the IP length.
    UdpLength {
        /// UDP length field.
        udp: u16,
        /// What the IP header leaves for UDP.
        ip: usize,
    },
    /// An opcode outside the table ([`super::opcode::OPCODES`]).
    UnknownOpcode(u8),
    /// Payload plus pad is not a multiple of 4 bytes (IBTA §9.2: pad count makes it so).
    PayloadMisaligned(usize),
    /// The BTH pad count exceeds the bytes after the headers.
    PadTooLong {
        /// Pad count.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        have: usize,
    },
    /// Payload on an opcode that carries none (READ request, ACK, atomics).
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// Bytes between the headers and the ICRC.
        len: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated { layer, need, have } => {
                write!(f, "truncated {layer:?}: need {need} bytes, have {have}")
            }
            DecodeError::IpVersion(v) => write!(f, "IP version {v} does not match the EtherType"),
            DecodeError::Ipv4Options { ihl } => write!(f, "IPv4 options (IHL {ihl})"),
            DecodeError::Ipv4Fragment => f.write_str("IPv4 fragment"),
            DecodeError::Ipv4ReservedFlag => f.write_str("IPv4 reserved flag set"),
            DecodeError::Ipv4Checksum { found, expected } => {
                write!(f, "IPv4 checksum 0x{found:04x}, want 0x{expected:04x}")
            }
            DecodeError::IpLength(l) => write!(f, "IP length {l} too small"),
            DecodeError::UdpLength { udp, ip } => {
                write!(f, "UDP length {udp}, IP leaves {ip}")
            }
            DecodeError::UnknownOpcode(o) => write!(f, "unknown BTH opcode 0x{o:02x}"),
            DecodeError::PayloadMisaligned(n) => {
                write!(f, "payload+pad of {n} bytes not 4-aligned")
            }
            DecodeError::PadTooLong { pad, have } => {
                write!(f, "pad count {pad} but {have} bytes after the headers")
            }
            DecodeError::UnexpectedPayload { opcode, len } => {
                write!(f, "{} bytes of payload on {}", len, Opcode(opcode))
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why headers cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The opcode is not in the table.
    UnknownOpcode(u8),
    /// The extension headers present differ from the opcode's set.
    HeaderMismatch {
        /// The opcode.
        opcode: u8,
        /// Headers the opcode needs.
        want: HdrSet,
        /// Headers given.
        have: HdrSet,
    },
    /// Payload on an opcode that carries none.
    UnexpectedPayload {
        /// The opcode.
        opcode: u8,
        /// Payload length.
        len: usize,
    },
    /// A field does not fit its bits.
    FieldRange {
        /// IBTA/RFC field name.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// The packet does not fit the IP/UDP 16-bit length fields.
    TooLong(usize),
    /// [`RoceHeaders::seal_icrc`] was given fewer bytes than the headers take.
    FrameTooShort(usize),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::UnknownOpcode(o) => write!(f, "unknown BTH opcode 0x{o:02x}"),
            EncodeError::HeaderMismatch { opcode, want, have } => write!(
                f,
                "{} needs extension headers {want:?}, given {have:?}",
                Opcode(opcode)
            ),
            EncodeError::UnexpectedPayload { opcode, len } => {
                write!(
                    f,
                    "{} carries no payload, given {len} bytes",
                    Opcode(opcode)
                )
            }
            EncodeError::FieldRange { field, value } => {
                write!(f, "{field} = {value:#x} does not fit")
            }
            EncodeError::TooLong(n) => write!(f, "payload of {n} bytes too long for one packet"),
            EncodeError::FrameTooShort(n) => write!(f, "{n} bytes: shorter than the headers"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Pad bytes after `payload_len` bytes of payload (IBTA §9.2: to a 4-byte multiple).
pub fn pad_for(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// UDP length for a packet with extension headers `hdrs` and `payload_len` payload bytes, or
/// `None` when it does not fit 16 bits.
fn udp_len(hdrs: HdrSet, payload_len: usize) -> Option<usize> {
    let n = (UDP_HDR_LEN + BTH_LEN + hdrs.len() + ICRC_LEN)
        .checked_add(payload_len)?
        .checked_add(pad_for(payload_len))?;
    (n <= 0xffff).then_some(n)
}

fn eth_len(eth: &EthHdr) -> usize {
    ETH_HDR_LEN + if eth.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
}

/// The RFC 791 header checksum of `hdr` (with its checksum field as it is: a correct header
/// sums to 0).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in hdr.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}

fn need(layer: Layer, b: &[u8], n: usize) -> Result<(), DecodeError> {
    if b.len() < n {
        Err(DecodeError::Truncated {
            layer,
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

/// Decodes one Ethernet frame (no FCS). Total: every input gives a value or a typed error.
pub fn decode(frame: &[u8]) -> Result<Frame<'_>, DecodeError> {
    need(Layer::Ethernet, frame, ETH_HDR_LEN)?;
    let mut dst = [0u8; 6];
    let mut src = [0u8; 6];
    dst.copy_from_slice(&frame[0..6]);
    src.copy_from_slice(&frame[6..12]);
    let mut ethertype = be16(frame, 12);
    let mut l3 = ETH_HDR_LEN;
    let mut vlan = None;
    if ethertype == ETHERTYPE_VLAN {
        need(Layer::Vlan, frame, ETH_HDR_LEN + VLAN_TAG_LEN)?;
        let tci = be16(frame, 14);
        vlan = Some(Vlan {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        });
        ethertype = be16(frame, 16);
        l3 += VLAN_TAG_LEN;
    }
    let eth = EthHdr { dst, src, vlan };
    let other = |ip: Option<OtherIp>| {
        Ok(Frame::Other(OtherFrame {
            dst,
            src,
            vlan,
            ethertype,
            ip,
        }))
    };
    let ipb = &frame[l3..];
    let (ip, ip_end) = match ethertype {
        ETHERTYPE_IPV4 => {
            need(Layer::Ipv4, ipb, IPV4_HDR_LEN)?;
            if ipb[0] >> 4 != 4 {
                return Err(DecodeError::IpVersion(ipb[0] >> 4));
            }
            let ihl = ipb[0] & 0x0f;
            let hlen = ihl as usize * 4;
            let proto = ipb[9];
            let flags_frag = be16(ipb, 6);
            let frag_off = flags_frag & 0x1fff;
            let s = Ipv4Addr::new(ipb[12], ipb[13], ipb[14], ipb[15]);
            let d = Ipv4Addr::new(ipb[16], ipb[17], ipb[18], ipb[19]);
            let mut oip = OtherIp {
                src: IpAddr::V4(s),
                dst: IpAddr::V4(d),
                protocol: proto,
                udp_ports: None,
            };
            if proto != IP_PROTO_UDP || frag_off != 0 || hlen < IPV4_HDR_LEN {
                return other(Some(oip));
            }
            need(Layer::Udp, ipb, hlen + UDP_HDR_LEN)?;
            let dport = be16(ipb, hlen + 2);
            if dport != ROCEV2_UDP_PORT {
                oip.udp_ports = Some((be16(ipb, hlen), dport));
                return other(Some(oip));
            }
            // From here on the frame is RoCEv2 and judged strictly.
            if ihl != 5 {
                return Err(DecodeError::Ipv4Options { ihl });
            }
            if flags_frag & 0x8000 != 0 {
                return Err(DecodeError::Ipv4ReservedFlag);
            }
            if flags_frag & 0x2000 != 0 {
                return Err(DecodeError::Ipv4Fragment);
            }
            let total = be16(ipb, 2);
            if (total as usize) < IPV4_HDR_LEN + UDP_HDR_LEN {
                return Err(DecodeError::IpLength(total));
            }
            need(Layer::Ipv4, ipb, total as usize)?;
            let sum = ipv4_checksum(&ipb[..IPV4_HDR_LEN]);
            if sum != 0 {
                let found = be16(ipb, 10);
                let mut h = [0u8; IPV4_HDR_LEN];
                h.copy_from_slice(&ipb[..IPV4_HDR_LEN]);
                h[10] = 0;
                h[11] = 0;
                return Err(DecodeError::Ipv4Checksum {
                    found,
                    expected: ipv4_checksum(&h),
                });
            }
            let ip = IpHdr::V4(Ipv4Hdr {
                dscp: ipb[1] >> 2,
                ecn: ipb[1] & 3,
                identification: be16(ipb, 4),
                dont_fragment: flags_frag & 0x4000 != 0,
                ttl: ipb[8],
                src: s,
                dst: d,
            });
            (ip, total as usize)
        }
        ETHERTYPE_IPV6 => {
            need(Layer::Ipv6, ipb, IPV6_HDR_LEN)?;
            if ipb[0] >> 4 != 6 {
                return Err(DecodeError::IpVersion(ipb[0] >> 4));
            }
            let mut a = [0u8; 16];
            a.copy_from_slice(&ipb[8..24]);
            let s = Ipv6Addr::from(a);
            a.copy_from_slice(&ipb[24..40]);
            let d = Ipv6Addr::from(a);
            let next = ipb[6];
            let mut oip = OtherIp {
                src: IpAddr::V6(s),
                dst: IpAddr::V6(d),
                protocol: next,
                udp_ports: None,
            };
            if next != IP_PROTO_UDP {
                return other(Some(oip));
            }
            need(Layer::Udp, ipb, IPV6_HDR_LEN + UDP_HDR_LEN)?;
            let dport = be16(ipb, IPV6_HDR_LEN + 2);
            if dport != ROCEV2_UDP_PORT {
                oip.udp_ports = Some((be16(ipb, IPV6_HDR_LEN), dport));
                return other(Some(oip));
            }
            let plen = be16(ipb, 4);
            if (plen as usize) < UDP_HDR_LEN {
                return Err(DecodeError::IpLength(plen));
            }
            need(Layer::Ipv6, ipb, IPV6_HDR_LEN + plen as usize)?;
            let w = be32(ipb, 0);
            let ip = IpHdr::V6(Ipv6Hdr {
                traffic_class: (w >> 20) as u8,
                flow_label: w & 0xf_ffff,
                hop_limit: ipb[7],
                src: s,
                dst: d,
            });
            (ip, IPV6_HDR_LEN + plen as usize)
        }
        _ => return other(None),
    };
    let dgram = &ipb[..ip_end];
    let trailer = &ipb[ip_end..];
    let u = &dgram[ip.len()..];
    let ulen = be16(u, 4);
    if ulen as usize != u.len() {
        return Err(DecodeError::UdpLength {
            udp: ulen,
            ip: u.len(),
        });
    }
    let udp = UdpHdr {
        src_port: be16(u, 0),
        checksum: be16(u, 6),
    };
    let t = &u[UDP_HDR_LEN..];
    need(Layer::Bth, t, BTH_LEN + ICRC_LEN)?;
    let opcode = Opcode(t[0]);
    let info: &OpcodeInfo = opcode.info().ok_or(DecodeError::UnknownOpcode(opcode.0))?;
    let pad_count = (t[1] >> 4) & 3;
    let bth = Bth {
        opcode,
        solicited: t[1] & 0x80 != 0,
        mig_req: t[1] & 0x40 != 0,
        tver: t[1] & 0x0f,
        p_key: be16(t, 2),
        resv8a: t[4],
        dest_qp: be24(t, 5),
        ack_req: t[8] & 0x80 != 0,
        resv7: t[8] & 0x7f,
        psn: be24(t, 9),
    };
    let ext_len = info.hdrs.len();
    need(Layer::ExtHeaders, t, BTH_LEN + ext_len + ICRC_LEN)?;
    let mut ext = ExtHdrs::default();
    let mut p = BTH_LEN;
    if info.hdrs.contains(HdrSet::DETH) {
        ext.deth = Some(Deth {
            q_key: be32(t, p),
            resv8: t[p + 4],
            src_qp: be24(t, p + 5),
        });
        p += DETH_LEN;
    }
    if info.hdrs.contains(HdrSet::RETH) {
        ext.reth = Some(Reth {
            va: be64(t, p),
            r_key: be32(t, p + 8),
            dma_len: be32(t, p + 12),
        });
        p += RETH_LEN;
    }
    if info.hdrs.contains(HdrSet::ATOMIC_ETH) {
        ext.atomic_eth = Some(AtomicEth {
            va: be64(t, p),
            r_key: be32(t, p + 8),
            swap_add: be64(t, p + 12),
            compare: be64(t, p + 20),
        });
        p += ATOMIC_ETH_LEN;
    }
    if info.hdrs.contains(HdrSet::AETH) {
        ext.aeth = Some(Aeth {
            syndrome: t[p],
            msn: be24(t, p + 1),
        });
        p += AETH_LEN;
    }
    if info.hdrs.contains(HdrSet::ATOMIC_ACK_ETH) {
        ext.atomic_ack_eth = Some(AtomicAckEth { orig: be64(t, p) });
        p += ATOMIC_ACK_ETH_LEN;
    }
    if info.hdrs.contains(HdrSet::IMM_DT) {
        ext.imm_dt = Some(be32(t, p));
        p += IMM_DT_LEN;
    }
    if info.hdrs.contains(HdrSet::IETH) {
        ext.ieth = Some(be32(t, p));
        p += IETH_LEN;
    }
    let body = &t[p..t.len() - ICRC_LEN];
    if !body.len().is_multiple_of(4) {
        return Err(DecodeError::PayloadMisaligned(body.len()));
    }
    if pad_count as usize > body.len() {
        return Err(DecodeError::PadTooLong {
            pad: pad_count,
            have: body.len(),
        });
    }
    if !info.payload && !body.is_empty() {
        return Err(DecodeError::UnexpectedPayload {
            opcode: opcode.0,
            len: body.len(),
        });
    }
    let (payload, pad_bytes) = body.split_at(body.len() - pad_count as usize);
    let mut pad = [0u8; 3];
    pad[..pad_bytes.len()].copy_from_slice(pad_bytes);
    let icrc_at = t.len() - ICRC_LEN;
    let icrc_wire =
        u32::from_le_bytes([t[icrc_at], t[icrc_at + 1], t[icrc_at + 2], t[icrc_at + 3]]);
    let is_v6 = matches!(ip, IpHdr::V6(_));
    // The datagram holds at least IP + UDP + BTH here, so icrc() returns Some.
    let icrc_computed = icrc(&dgram[..dgram.len() - ICRC_LEN], is_v6).unwrap_or(!icrc_wire);
    Ok(Frame::Roce(RoceFrame {
        hdrs: RoceHeaders {
            eth,
            ip,
            udp,
            bth,
            ext,
        },
        payload,
        pad,
        icrc: icrc_wire,
        icrc_computed,
        trailer,
    }))
}

fn range(field: &'static str, value: u64, max: u64) -> Result<(), EncodeError> {
    if value > max {
        Err(EncodeError::FieldRange { field, value })
    } else {
        Ok(())
    }
}

fn check(h: &RoceHeaders, payload_len: usize) -> Result<&'static OpcodeInfo, EncodeError> {
    let op = h.bth.opcode;
    let info = op.info().ok_or(EncodeError::UnknownOpcode(op.0))?;
    let have = h.ext.set();
    if have != info.hdrs {
        return Err(EncodeError::HeaderMismatch {
            opcode: op.0,
            want: info.hdrs,
            have,
        });
    }
    if !info.payload && payload_len != 0 {
        return Err(EncodeError::UnexpectedPayload {
            opcode: op.0,
            len: payload_len,
        });
    }
    if let Some(v) = h.eth.vlan {
        range("802.1Q PCP", v.pcp as u64, 7)?;
        range("802.1Q VID", v.vid as u64, 0xfff)?;
    }
    match h.ip {
        IpHdr::V4(v) => {
            range("IPv4 DSCP", v.dscp as u64, 63)?;
            range("IPv4 ECN", v.ecn as u64, 3)?;
        }
        IpHdr::V6(v) => range("IPv6 Flow Label", v.flow_label as u64, 0xf_ffff)?,
    }
    range("BTH TVer", h.bth.tver as u64, 0xf)?;
    range("BTH DestQP", h.bth.dest_qp as u64, 0xff_ffff)?;
    range("BTH resv7", h.bth.resv7 as u64, 0x7f)?;
    range("BTH PSN", h.bth.psn as u64, 0xff_ffff)?;
    if let Some(d) = h.ext.deth {
        range("DETH SrcQP", d.src_qp as u64, 0xff_ffff)?;
    }
    if let Some(a) = h.ext.aeth {
        range("AETH MSN", a.msn as u64, 0xff_ffff)?;
    }
    Ok(info)
}

fn encode(
    h: &RoceHeaders,
    payload: &[u8],
    pad: [u8; 3],
    trailer: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let ip_start = write_headers(h, payload.len(), trailer.len(), out)?;
    out.extend_from_slice(payload);
    out.extend_from_slice(&pad[..pad_for(payload.len())]);
    let is_v6 = matches!(h.ip, IpHdr::V6(_));
    // The datagram written so far holds IP + UDP + BTH, so icrc() returns Some.
    let c = icrc(&out[ip_start..], is_v6).unwrap_or(0);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(trailer);
    Ok(())
}

/// Appends the headers (Ethernet to the last extension header) for a packet of `payload_len`
/// payload bytes, reserving room for `extra` more bytes after them; returns where the IP header
/// starts in `out`.
fn write_headers(
    h: &RoceHeaders,
    payload_len: usize,
    extra: usize,
    out: &mut Vec<u8>,
) -> Result<usize, EncodeError> {
    let info = check(h, payload_len)?;
    let too_long = EncodeError::TooLong(payload_len);
    let udp = udp_len(info.hdrs, payload_len).ok_or(too_long)?;
    let ip_total = h.ip.len() + udp;
    if matches!(h.ip, IpHdr::V4(_)) && ip_total > 0xffff {
        return Err(too_long);
    }
    out.reserve(eth_len(&h.eth) + ip_total + extra);
    out.extend_from_slice(&h.eth.dst);
    out.extend_from_slice(&h.eth.src);
    if let Some(v) = h.eth.vlan {
        out.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        let tci = (v.pcp as u16) << 13 | (v.dei as u16) << 12 | v.vid;
        out.extend_from_slice(&tci.to_be_bytes());
    }
    let ip_start;
    match h.ip {
        IpHdr::V4(v) => {
            out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            ip_start = out.len();
            let mut b = [0u8; IPV4_HDR_LEN];
            b[0] = 0x45;
            b[1] = v.dscp << 2 | v.ecn;
            b[2..4].copy_from_slice(&(ip_total as u16).to_be_bytes());
            b[4..6].copy_from_slice(&v.identification.to_be_bytes());
            b[6] = if v.dont_fragment { 0x40 } else { 0 };
            b[8] = v.ttl;
            b[9] = IP_PROTO_UDP;
            b[12..16].copy_from_slice(&v.src.octets());
            b[16..20].copy_from_slice(&v.dst.octets());
            let c = ipv4_checksum(&b);
            b[10..12].copy_from_slice(&c.to_be_bytes());
            out.extend_from_slice(&b);
        }
        IpHdr::V6(v) => {
            out.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            ip_start = out.len();
            let w = 6u32 << 28 | (v.traffic_class as u32) << 20 | v.flow_label;
            out.extend_from_slice(&w.to_be_bytes());
            out.extend_from_slice(&(udp as u16).to_be_bytes());
            out.push(IP_PROTO_UDP);
            out.push(v.hop_limit);
            out.extend_from_slice(&v.src.octets());
            out.extend_from_slice(&v.dst.octets());
        }
    }
    out.extend_from_slice(&h.udp.src_port.to_be_bytes());
    out.extend_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
    out.extend_from_slice(&(udp as u16).to_be_bytes());
    out.extend_from_slice(&h.udp.checksum.to_be_bytes());
    let b = &h.bth;
    let pad_count = pad_for(payload_len);
    out.push(b.opcode.0);
    out.push((b.solicited as u8) << 7 | (b.mig_req as u8) << 6 | (pad_count as u8) << 4 | b.tver);
    out.extend_from_slice(&b.p_key.to_be_bytes());
    out.push(b.resv8a);
    out.extend_from_slice(&b.dest_qp.to_be_bytes()[1..]);
    out.push((b.ack_req as u8) << 7 | b.resv7);
    out.extend_from_slice(&b.psn.to_be_bytes()[1..]);
    let e = &h.ext;
    if let Some(d) = e.deth {
        out.extend_from_slice(&d.q_key.to_be_bytes());
        out.push(d.resv8);
        out.extend_from_slice(&d.src_qp.to_be_bytes()[1..]);
    }
    if let Some(r) = e.reth {
        out.extend_from_slice(&r.va.to_be_bytes());
        out.extend_from_slice(&r.r_key.to_be_bytes());
        out.extend_from_slice(&r.dma_len.to_be_bytes());
    }
    if let Some(a) = e.atomic_eth {
        out.extend_from_slice(&a.va.to_be_bytes());
        out.extend_from_slice(&a.r_key.to_be_bytes());
        out.extend_from_slice(&a.swap_add.to_be_bytes());
        out.extend_from_slice(&a.compare.to_be_bytes());
    }
    if let Some(a) = e.aeth {
        out.push(a.syndrome);
        out.extend_from_slice(&a.msn.to_be_bytes()[1..]);
    }
    if let Some(a) = e.atomic_ack_eth {
        out.extend_from_slice(&a.orig.to_be_bytes());
    }
    if let Some(i) = e.imm_dt {
        out.extend_from_slice(&i.to_be_bytes());
    }
    if let Some(i) = e.ieth {
        out.extend_from_slice(&i.to_be_bytes());
    }
    Ok(ip_start)
}
