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

/// The empty set as a static: a transmitter that is handed this very value (a MIDDLE packet,
/// an ACK's caller need not) knows without looking that no header is present.
pub static NO_EXT: ExtHdrs = ExtHdrs::NONE;

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
    /// TCP source and destination port, for TCP (an unfragmented first packet whose header
    /// holds them).
    pub tcp_ports: Option<(u16, u16)>,
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

/// Bytes of the Ethernet header (with its VLAN tag, if any): where the IP header starts.
pub fn eth_len(eth: &EthHdr) -> usize {
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

mod decoder;
mod encoder;

pub use decoder::decode;
use encoder::{encode, write_headers};
