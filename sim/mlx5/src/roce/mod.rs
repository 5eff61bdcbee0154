//! RoCEv2, the pure protocol: the frame codec, the ICRC, the opcodes, the RC transport and the
//! counters. No I/O here: the link (sockets, in-process pairs), pcap files, the
//! `--decode-pcap` tool and the fault injector are [`crate::link`].
//!
//! # The frame
//!
//! A RoCEv2 packet is an InfiniBand transport packet (BTH onwards) carried in UDP over IP over
//! Ethernet, with the IB link and network headers (LRH, GRH) replaced by Ethernet and IP
//! (IBTA vol. 1 Annex A17 "RoCEv2", §A17.4). On the wire, in order (all fields big-endian
//! except the ICRC):
//!
//! | header | bytes | fields (IBTA / RFC names) |
//! |---|---|---|
//! | Ethernet II | 14 | destination MAC, source MAC, EtherType 0x0800 (IPv4) or 0x86DD (IPv6); an optional 802.1Q tag (0x8100, PCP/DEI/VID) before it |
//! | IPv4 (RFC 791) | 20 | version 4, IHL 5, DSCP/ECN, total length, identification, flags (DF), TTL, protocol 17, header checksum, addresses |
//! | or IPv6 (RFC 8200) | 40 | version 6, traffic class, flow label, payload length, next header 17, hop limit, addresses |
//! | UDP (RFC 768) | 8 | source port (a flow hash), destination port 4791 (IANA "roce"), length, checksum (0: A17 lets RoCEv2 omit it) |
//! | BTH (IBTA §9.2) | 12 | OpCode; SE, M, PadCnt, TVer; P_Key; byte 4 (FECN/BECN/resv6); DestQP; A (AckReq), resv7; PSN |
//! | DETH | 8 | Q_Key, reserved, SrcQP (UD) |
//! | RETH | 16 | VA, R_Key, DMA length (RDMA WRITE first/only, READ request) |
//! | AtomicETH | 28 | VA, R_Key, swap/add data, compare data (COMPARE_SWAP, FETCH_ADD) |
//! | AETH | 4 | syndrome, MSN (ACKNOWLEDGE, READ response first/last/only, ATOMIC_ACKNOWLEDGE) |
//! | AtomicAckETH | 8 | original remote data (ATOMIC_ACKNOWLEDGE) |
//! | ImmDt | 4 | immediate data (*_WITH_IMMEDIATE) |
//! | IETH | 4 | R_Key to invalidate (SEND_*_WITH_INVALIDATE) |
//! | payload | n | at most the path MTU |
//! | pad | 0..3 | to a multiple of 4 (count in BTH PadCnt) |
//! | ICRC | 4 | CRC-32 over the masked pseudo-header and the packet ([`icrc()`]), little-endian |
//!
//! Which extension headers an opcode carries, and in which order, is the opcode table in
//! [`opcode`] (IBTA §9.2–9.3; Linux drivers/infiniband/sw/rxe/rxe_opcode.c). The AETH syndrome
//! (IBTA §9.7.5.1): bits 6..5 = 00 ACK (bits 4..0 credit count, 31 = none), 01 RNR NAK (bits
//! 4..0 the RNR timer), 11 NAK (bits 4..0: 0 PSN sequence error, 1 invalid request, 2 remote
//! access error, 3 remote operational error); rxe_hdr.h `enum aeth_syndrome` has the same
//! values. Field layouts: rxe_hdr.h (`struct rxe_bth`, `rxe_reth`, `rxe_atmeth`, `rxe_aeth`,
//! `rxe_atmack`, `rxe_deth`, `rxe_immdt`, `rxe_ieth`). IP and UDP as Linux rxe sends them:
//! rxe_net.c `prepare_ipv4_hdr`/`prepare_ipv6_hdr`/`prepare_udp_hdr` (DF set, UDP checksum 0).
//!
//! The shared captures of two Linux rxe peers (`../shared/tools/linuxpeer/pcaps/`, outside the
//! repository) are the ground truth the tests hold this codec to: every RoCEv2 frame in them
//! decodes, checks its ICRC, and re-encodes to the identical bytes.
//!
//! # The pieces
//!
//! - [`opcode`]: [`Opcode`] (constants under IBTA names), [`OpcodeInfo`], [`HdrSet`].
//! - [`frame`]: typed headers ([`EthHdr`], [`IpHdr`], [`UdpHdr`], [`Bth`], [`ExtHdrs`] with
//!   [`Reth`], [`AtomicEth`], [`Aeth`], [`AtomicAckEth`], [`Deth`]), [`decode`] (total: a
//!   [`Frame`] or a [`DecodeError`]), and the encoders [`RoceHeaders::encode_into`] (new frame)
//!   and [`RoceFrame::encode_into`] (exact re-encoding).
//! - [`mod@icrc`]: the ICRC, masking a 60-byte stack copy of the headers and hashing the rest in
//!   place with `crc32fast`.
//! - [`counters`]: the port and transport counters, each with its PRM name where there is one.
//! - [`psn_add`], [`psn_diff`]: 24-bit PSN arithmetic.
//! - The RC transport as pure state machines over decoded packets, with time passed in:
//!   [`requester`] (segmentation, retransmission, completions), [`responder`] (ePSN,
//!   duplicates, NAKs, READ responses, atomics) and their shared types and side-effect traits
//!   in [`transport`]; [`rc::RcQp`] joins both halves of a QP and documents how the datapath
//!   drives them (doorbell, received frame, timer).

pub mod counters;
pub mod frame;
pub mod icrc;
pub mod opcode;
pub mod rc;
#[cfg(test)]
mod rc_fast_tests;
#[cfg(test)]
mod rc_tests;
pub mod requester;
pub mod responder;
#[cfg(test)]
mod tests;
pub mod transport;

pub use frame::{
    decode, ipv4_checksum, pad_for, Aeth, AethKind, AtomicAckEth, AtomicEth, Bth, DecodeError,
    Deth, EncodeError, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, Ipv6Hdr, Layer, NakCode, OtherFrame,
    OtherIp, Reth, RoceFrame, RoceHeaders, UdpHdr, Vlan, NO_EXT,
};
pub use icrc::icrc;
pub use opcode::{HdrSet, OpKind, Opcode, OpcodeInfo, Position, Transport, OPCODES};

/// UDP destination port of RoCEv2 (IANA "roce"; Annex A17 §A17.4.2; rxe `ROCE_V2_UDP_DPORT`).
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// EtherType IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// TPID of an 802.1Q tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// IP protocol number of UDP.
pub const IP_PROTO_UDP: u8 = 17;
/// IP protocol number of TCP (IANA protocol numbers; RFC 9293).
pub const IP_PROTO_TCP: u8 = 6;
/// TPID of an 802.1ad service tag (IEEE 802.1ad; Linux include/uapi/linux/if_ether.h
/// `ETH_P_8021AD`).
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// The default partition key (IBTA §10.9.1.2; every packet of the shared captures).
pub const DEFAULT_P_KEY: u16 = 0xffff;

/// Ethernet II header without tag.
pub const ETH_HDR_LEN: usize = 14;
/// 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;
/// IPv4 header without options.
pub const IPV4_HDR_LEN: usize = 20;
/// IPv6 fixed header.
pub const IPV6_HDR_LEN: usize = 40;
/// UDP header.
pub const UDP_HDR_LEN: usize = 8;
/// BTH (rxe `RXE_BTH_BYTES`).
pub const BTH_LEN: usize = 12;
/// DETH.
pub const DETH_LEN: usize = 8;
/// RETH.
pub const RETH_LEN: usize = 16;
/// AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// AETH.
pub const AETH_LEN: usize = 4;
/// AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// ImmDt.
pub const IMM_DT_LEN: usize = 4;
/// IETH.
pub const IETH_LEN: usize = 4;
/// ICRC (rxe `RXE_ICRC_SIZE`).
pub const ICRC_LEN: usize = 4;

/// PSNs are 24 bits and wrap (IBTA vol. 1 §9.7.1; rxe `BTH_PSN_MASK`).
pub const PSN_MASK: u32 = 0xff_ffff;

/// `psn + n` in the 24-bit PSN space.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The signed distance `a - b` in the 24-bit PSN space: negative when `a` comes before `b`
/// (within half the space, IBTA §9.7.1). Linux drivers/infiniband/sw/rxe/rxe.h `psn_compare`
/// shifts the difference left by 8 for the sign; this shifts it back to the distance.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}
