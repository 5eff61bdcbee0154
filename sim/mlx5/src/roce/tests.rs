//! Codec tests that need no captured data: hand-built frames for every opcode, typed errors,
//! and a fixed-seed fuzz of the decoder.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

/// xorshift64*: a fixed-seed generator, so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn ipv4() -> IpHdr {
    // As rxe sends: DSCP 0, DF, TTL 64 (rxe_net.c prepare_ipv4_hdr; the shared captures).
    IpHdr::V4(Ipv4Hdr {
        dscp: 0,
        ecn: 0,
        identification: 0x6552,
        dont_fragment: true,
        ttl: 64,
        src: Ipv4Addr::new(10, 0, 0, 1),
        dst: Ipv4Addr::new(10, 0, 0, 2),
    })
}

fn ipv6() -> IpHdr {
    IpHdr::V6(Ipv6Hdr {
        traffic_class: 0xb9,
        flow_label: 0x12345,
        hop_limit: 3,
        src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1),
        dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 2),
    })
}

/// The extension headers `op` needs, with recognisable values.
fn ext_for(op: Opcode) -> ExtHdrs {
    let h = op.info().unwrap().hdrs;
    let mut e = ExtHdrs::default();
    if h.contains(HdrSet::DETH) {
        e.deth = Some(Deth {
            q_key: 0x1111_1111,
            resv8: 0,
            src_qp: 0x11,
        });
    }
    if h.contains(HdrSet::RETH) {
        e.reth = Some(Reth {
            va: 0x0000_5567_067f_4000,
            r_key: 0x363,
            dma_len: 4096,
        });
    }
    if h.contains(HdrSet::ATOMIC_ETH) {
        e.atomic_eth = Some(AtomicEth {
            va: 0x5565_fad5_7000,
            r_key: 0x2e8,
            swap_add: 1,
            compare: 0xdead_beef_0000_0001,
        });
    }
    if h.contains(HdrSet::AETH) {
        e.aeth = Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, 7));
    }
    if h.contains(HdrSet::ATOMIC_ACK_ETH) {
        e.atomic_ack_eth = Some(AtomicAckEth {
            orig: 0x91e7_d95a_f9b2_0256,
        });
    }
    if h.contains(HdrSet::IMM_DT) {
        e.imm_dt = Some(0x0102_0304);
    }
    if h.contains(HdrSet::IETH) {
        e.ieth = Some(0x0abc_de01);
    }
    e
}

fn headers(op: Opcode, ip: IpHdr, vlan: Option<Vlan>) -> RoceHeaders {
    let mut bth = Bth::new(op, 0x11, 0x60_208c);
    bth.ack_req = op.info().unwrap().position.is_end();
    RoceHeaders {
        eth: EthHdr {
            dst: MAC_B,
            src: MAC_A,
            vlan,
        },
        ip,
        udp: UdpHdr {
            src_port: 0xc121,
            checksum: 0,
        },
        bth,
        ext: ext_for(op),
    }
}

fn roce(bytes: &[u8]) -> RoceFrame<'_> {
    match decode(bytes) {
        Ok(Frame::Roce(f)) => f,
        other => panic!("not RoCE: {other:?}"),
    }
}

#[test]
fn every_opcode_round_trips() {
    let vlan = Some(Vlan {
        pcp: 3,
        dei: false,
        vid: 100,
    });
    let mut n = 0;
    for info in OPCODES {
        let op = Opcode(info.code);
        let lens: &[usize] = if info.payload {
            &[0, 1, 2, 3, 4, 5, 1024, 4096]
        } else {
            &[0]
        };
        for ip in [ipv4(), ipv6()] {
            for v in [None, vlan] {
                for &len in lens {
                    let h = headers(op, ip, v);
                    let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
                    let bytes = h.encode(&payload).unwrap();
                    assert_eq!(Some(bytes.len()), h.frame_len(len), "{}", info.name);
                    let f = roce(&bytes);
                    assert_eq!(f.hdrs, h, "{} len {len}", info.name);
                    assert_eq!(f.payload, &payload[..]);
                    assert_eq!(f.pad_count(), pad_for(len));
                    assert!(f.icrc_ok(), "{} len {len}", info.name);
                    assert!(f.trailer.is_empty());
                    assert_eq!(f.encode().unwrap(), bytes, "{} len {len}", info.name);
                    n += 1;
                }
            }
        }
    }
    assert!(n > 500);
}

#[test]
fn frame_sizes_match_the_rxe_captures() {
    // Frame lengths the linuxpeer README reports for rxe's frames at path MTU 1024.
    let cases: [(Opcode, usize, usize); 9] = [
        (Opcode::RC_ACKNOWLEDGE, 0, 62),
        (Opcode::RC_RDMA_READ_REQUEST, 0, 74),
        (Opcode::RC_FETCH_ADD, 0, 86),
        (Opcode::RC_ATOMIC_ACKNOWLEDGE, 0, 70),
        (Opcode::RC_RDMA_WRITE_FIRST, 1024, 1098),
        (Opcode::RC_SEND_MIDDLE, 1024, 1082),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 1024, 1086),
        (Opcode::RC_RDMA_WRITE_ONLY, 64, 138),
        (Opcode::UD_SEND_ONLY, 1024, 1090),
    ];
    for (op, len, want) in cases {
        let h = headers(op, ipv4(), None);
        assert_eq!(h.encode(&vec![0; len]).unwrap().len(), want, "{op}");
    }
}

#[test]
fn fields_land_where_ibta_puts_them() {
    let mut h = headers(Opcode::RC_SEND_LAST_WITH_IMMEDIATE, ipv4(), None);
    h.bth.solicited = true;
    h.bth.mig_req = true;
    h.bth.p_key = 0x8001;
    h.bth.dest_qp = 0xabcdef;
    h.bth.psn = 0xfedcba;
    let b = h.encode(&[9, 9, 9]).unwrap();
    let t = &b[14 + 20 + 8..];
    assert_eq!(t[0], 0x03);
    assert_eq!(t[1], 0x80 | 0x40 | (1 << 4)); // SE, M, PadCnt 1, TVer 0
    assert_eq!(&t[2..4], &[0x80, 0x01]);
    assert_eq!(&t[5..8], &[0xab, 0xcd, 0xef]);
    assert_eq!(t[8], 0x80); // AckReq
    assert_eq!(&t[9..12], &[0xfe, 0xdc, 0xba]);
    assert_eq!(&t[12..16], &[1, 2, 3, 4]); // ImmDt
    assert_eq!(&t[16..20], &[9, 9, 9, 0]); // payload + 1 pad byte
    let ip = &b[14..34];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[6], 0x40); // DF
    assert_eq!(ip[8], 64);
    assert_eq!(ip[9], 17);
    assert_eq!(ipv4_checksum(ip), 0);
    let udp = &b[34..42];
    assert_eq!(&udp[2..4], &4791u16.to_be_bytes());
    assert_eq!(u16::from_be_bytes([udp[4], udp[5]]) as usize, b.len() - 34);
    // ICRC: last four bytes, little-endian, over the IP datagram before it.
    let c = icrc(&b[14..b.len() - 4], false).unwrap();
    assert_eq!(&b[b.len() - 4..], &c.to_le_bytes());
}

#[test]
fn aeth_syndromes() {
    assert_eq!(Aeth::ack(31, 1).syndrome, 0x1f);
    assert_eq!(Aeth::rnr_nak(12, 1).syndrome, 0x2c);
    assert_eq!(Aeth::nak(NakCode::PsnSequenceError, 1).syndrome, 0x60);
    assert_eq!(Aeth::nak(NakCode::RemoteAccessError, 1).syndrome, 0x62);
    let k = |s| {
        Aeth {
            syndrome: s,
            msn: 0,
        }
        .kind()
    };
    assert_eq!(k(0x1f), AethKind::Ack { credit: 31 });
    assert_eq!(k(0x2c), AethKind::RnrNak { timer: 12 });
    assert_eq!(k(0x61), AethKind::Nak(NakCode::InvalidRequest));
    assert_eq!(k(0x63), AethKind::Nak(NakCode::RemoteOperationalError));
    assert_eq!(k(0x45), AethKind::Reserved(0x45));
    assert_eq!(k(0x9f), AethKind::Reserved(0x9f));
    assert_eq!(k(0x2c).to_string(), "RNR_NAK(timer=12)");
    assert_eq!(k(0x60).to_string(), "NAK(PSN_SEQUENCE_ERROR)");
}

#[test]
fn a_corrupted_byte_fails_the_icrc() {
    let h = headers(Opcode::RC_RDMA_WRITE_ONLY, ipv4(), None);
    let bytes = h.encode(&[0x5a; 64]).unwrap();
    for at in [
        34,
        34 + 8 + 5,
        34 + 8 + 12 + 3,
        bytes.len() - 30,
        bytes.len() - 1,
    ] {
        let mut b = bytes.clone();
        b[at] ^= 0x04;
        match decode(&b) {
            Ok(Frame::Roce(f)) => assert!(!f.icrc_ok(), "byte {at}"),
            other => panic!("byte {at}: {other:?}"),
        }
    }
    // The IP identification is covered (with the IP header checksum made right again).
    let mut b = bytes.clone();
    b[18] ^= 1;
    b[24..26].fill(0);
    let c = ipv4_checksum(&b[14..34]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    assert!(!roce(&b).icrc_ok());
    // The TTL is masked.
    b[18] ^= 1;
    b[22] = 1;
    b[24..26].fill(0);
    let c = ipv4_checksum(&b[14..34]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    assert!(roce(&b).icrc_ok());
    // So are BTH byte 4 and the UDP checksum (IPv4 TOS/TTL change the IP
    // header checksum, which the decoder checks first).
    for at in [34 + 6, 34 + 8 + 4] {
        let mut b = bytes.clone();
        b[at] ^= 0xff;
        assert!(roce(&b).icrc_ok(), "byte {at}");
    }
}

#[test]
fn encode_errors_are_typed() {
    let mut h = headers(Opcode::RC_ACKNOWLEDGE, ipv4(), None);
    assert_eq!(
        h.encode(&[1]).unwrap_err(),
        EncodeError::UnexpectedPayload {
            opcode: 0x11,
            len: 1
        }
    );
    h.ext.reth = Some(Reth {
        va: 0,
        r_key: 0,
        dma_len: 0,
    });
    assert!(matches!(
        h.encode(&[]).unwrap_err(),
        EncodeError::HeaderMismatch { opcode: 0x11, .. }
    ));
    let mut h = headers(Opcode::RC_SEND_ONLY, ipv4(), None);
    h.bth.psn = 1 << 24;
    assert_eq!(
        h.encode(&[]).unwrap_err(),
        EncodeError::FieldRange {
            field: "BTH PSN",
            value: 1 << 24
        }
    );
    let h = headers(Opcode::RC_SEND_ONLY, ipv4(), None);
    assert_eq!(
        h.encode(&vec![0; 65536]).unwrap_err(),
        EncodeError::TooLong(65536)
    );
    assert_eq!(h.frame_len(65536), None);
    let mut h = headers(Opcode::RC_SEND_ONLY, ipv4(), None);
    h.bth.opcode = Opcode(0x15);
    assert_eq!(h.encode(&[]).unwrap_err(), EncodeError::UnknownOpcode(0x15));
}

#[test]
fn decode_errors_are_typed() {
    let h = headers(Opcode::RC_SEND_ONLY, ipv4(), None);
    let good = h.encode(&[1, 2, 3, 4]).unwrap();
    let set = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        b
    };
    let fix_ip_csum = |mut b: Vec<u8>| {
        b[24] = 0;
        b[25] = 0;
        let c = ipv4_checksum(&b[14..34]);
        b[24..26].copy_from_slice(&c.to_be_bytes());
        b
    };
    assert!(matches!(
        decode(&good[..10]),
        Err(DecodeError::Truncated {
            layer: Layer::Ethernet,
            ..
        })
    ));
    assert_eq!(decode(&set(14, 0x55)), Err(DecodeError::IpVersion(5)));
    assert!(matches!(
        decode(&set(14 + 8, 63)),
        Err(DecodeError::Ipv4Checksum { .. })
    ));
    assert_eq!(
        decode(&fix_ip_csum(set(20, 0x60))),
        Err(DecodeError::Ipv4Fragment)
    );
    assert_eq!(
        decode(&fix_ip_csum(set(20, 0xc0))),
        Err(DecodeError::Ipv4ReservedFlag)
    );
    assert_eq!(
        decode(&fix_ip_csum(set(42, 0x15))),
        Err(DecodeError::UnknownOpcode(0x15))
    );
    // Pad count 3 on 4 bytes is fine (1-byte payload); on an ACK it is too long.
    assert_eq!(roce(&set(43, 0x30)).payload, &[1]);
    let ack = headers(Opcode::RC_ACKNOWLEDGE, ipv4(), None)
        .encode(&[])
        .unwrap();
    let mut b = ack.clone();
    b[43] = 0x10;
    assert_eq!(decode(&b), Err(DecodeError::PadTooLong { pad: 1, have: 0 }));
    // Four bytes after the AETH of an ACK: payload where none belongs.
    let mut b = ack.clone();
    b.splice(58..58, [0u8; 4]);
    let b = fix_lengths(b, 4);
    assert_eq!(
        decode(&b),
        Err(DecodeError::UnexpectedPayload {
            opcode: 0x11,
            len: 4
        })
    );
    // Two extra bytes: misaligned.
    let mut b = good.clone();
    b.splice(58..58, [0u8; 2]);
    assert_eq!(
        decode(&fix_lengths(b, 2)),
        Err(DecodeError::PayloadMisaligned(6))
    );
    // UDP length disagreeing with IP.
    let mut b = good.clone();
    b[39] += 1;
    assert!(matches!(decode(&b), Err(DecodeError::UdpLength { .. })));
    // IP total length beyond the frame.
    let b = fix_ip_csum(set(17, good[17] + 1));
    assert!(matches!(
        decode(&b),
        Err(DecodeError::Truncated {
            layer: Layer::Ipv4,
            ..
        })
    ));
    // IHL 6 on UDP 4791.
    let mut b = good.clone();
    b[14] = 0x46;
    b.splice(34..34, [0u8; 4]);
    let b = fix_lengths(b, 4);
    assert_eq!(decode(&b), Err(DecodeError::Ipv4Options { ihl: 6 }));
}

/// Grows the IPv4 total length and UDP length of an IHL-5 frame by `by` bytes.
fn fix_lengths(mut b: Vec<u8>, by: u16) -> Vec<u8> {
    let ihl = (b[14] & 0xf) as usize * 4;
    let tot = u16::from_be_bytes([b[16], b[17]]) + by;
    b[16..18].copy_from_slice(&tot.to_be_bytes());
    b[24] = 0;
    b[25] = 0;
    let c = ipv4_checksum(&b[14..14 + ihl]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    let u = 14 + ihl;
    let ul = u16::from_be_bytes([b[u + 4], b[u + 5]]) + by;
    b[u + 4..u + 6].copy_from_slice(&ul.to_be_bytes());
    b
}

#[test]
fn trailer_and_pad_bytes_survive_re_encoding() {
    let h = headers(Opcode::RC_SEND_ONLY, ipv4(), None);
    let mut b = h.encode(&[7]).unwrap();
    // Nonzero pad bytes (recomputing the ICRC over them) and Ethernet padding after the datagram.
    let n = b.len();
    b[n - 7] = 0xaa;
    b[n - 6] = 0xbb;
    b[n - 5] = 0xcc;
    let c = icrc(&b[14..n - 4], false).unwrap();
    b[n - 4..].copy_from_slice(&c.to_le_bytes());
    b.extend_from_slice(&[0xee; 6]);
    let f = roce(&b);
    assert!(f.icrc_ok());
    assert_eq!(f.payload, &[7]);
    assert_eq!(f.pad, [0xaa, 0xbb, 0xcc]);
    assert_eq!(f.trailer, &[0xee; 6]);
    assert_eq!(f.encode().unwrap(), b);
}

#[test]
fn other_frames_are_classified() {
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&MAC_A);
    arp.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    arp.extend_from_slice(&[0; 28]);
    match decode(&arp).unwrap() {
        Frame::Other(o) => {
            assert_eq!(o.ethertype, ETHERTYPE_ARP);
            assert_eq!(o.ip, None);
        }
        f => panic!("{f:?}"),
    }
    // The same RoCE frame to UDP port 4792 is just UDP.
    let mut b = headers(Opcode::RC_SEND_ONLY, ipv4(), None)
        .encode(&[])
        .unwrap();
    b[37] = 0xb8;
    match decode(&b).unwrap() {
        Frame::Other(o) => assert_eq!(o.ip.unwrap().udp_ports, Some((0xc121, 4792))),
        f => panic!("{f:?}"),
    }
}

/// What a decoded frame must re-encode to: the input with the ICRC replaced by the right one.
fn expected_reencoding(input: &[u8], f: &RoceFrame<'_>) -> Vec<u8> {
    let mut want = input.to_vec();
    let at = input.len() - f.trailer.len() - ICRC_LEN;
    want[at..at + 4].copy_from_slice(&f.icrc_computed.to_le_bytes());
    want
}

fn check_total(bytes: &[u8]) -> bool {
    match decode(bytes) {
        Ok(Frame::Roce(f)) => {
            let again = f.encode().expect("a decoded frame always encodes");
            assert_eq!(again, expected_reencoding(bytes, &f));
            true
        }
        Ok(Frame::Other(_)) | Err(_) => false,
    }
}

#[test]
fn fuzz_decoder_is_total_and_exact() {
    let mut rng = Rng(0x005e_ed0f_20c3_u64);
    let mut seeds = Vec::new();
    for info in OPCODES {
        let op = Opcode(info.code);
        let len = if info.payload { 13 } else { 0 };
        for ip in [ipv4(), ipv6()] {
            seeds.push(headers(op, ip, None).encode(&vec![0x42; len]).unwrap());
        }
    }
    let mut decoded = 0;
    // Every truncation of every valid frame.
    for s in &seeds {
        for n in 0..s.len() {
            check_total(&s[..n]);
        }
    }
    // Random mutations of 1 to 4 bytes.
    for _ in 0..40_000 {
        let mut b = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(b.len());
            b[at] = rng.next() as u8;
        }
        if rng.below(8) == 0 {
            let n = rng.below(b.len() + 1);
            b.truncate(n);
        }
        if check_total(&b) {
            decoded += 1;
        }
    }
    // Random byte strings, some dressed with an IPv4/IPv6 EtherType and UDP port 4791.
    for _ in 0..20_000 {
        let n = rng.below(200);
        let mut b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        if n > 60 && rng.below(2) == 0 {
            b[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            b[14] = 0x60;
            b[20] = 17;
            b[56..58].copy_from_slice(&ROCEV2_UDP_PORT.to_be_bytes());
        }
        check_total(&b);
    }
    assert!(
        decoded > 1000,
        "mutations mostly decode (ICRC aside): {decoded}"
    );
}

#[test]
fn two_step_encoding_equals_one_step() {
    for ip in [ipv4(), ipv6()] {
        for len in [0usize, 1, 7, 1024] {
            let h = headers(Opcode::RC_RDMA_WRITE_FIRST, ip, None);
            let payload: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let mut out = vec![0xee; 3]; // appends after what is there
            let r = h.encode_for_payload(len, &mut out).unwrap();
            out[r].copy_from_slice(&payload);
            h.seal_icrc(&mut out[3..]).unwrap();
            assert_eq!(out[3..], h.encode(&payload).unwrap()[..]);
        }
    }
    let h = headers(Opcode::RC_SEND_ONLY, ipv4(), None);
    assert_eq!(
        h.seal_icrc(&mut [0; 40]),
        Err(EncodeError::FrameTooShort(40))
    );
    assert_eq!(h.seal_icrc(&mut [0; 2]), Err(EncodeError::FrameTooShort(2)));
}

#[test]
fn psn_arithmetic_wraps_at_24_bits() {
    assert_eq!(psn_add(0xff_fffe, 3), 1);
    assert_eq!(psn_diff(1, 0xff_fffe), 3);
    assert_eq!(psn_diff(0xff_fffe, 1), -3);
    assert_eq!(psn_diff(5, 5), 0);
    assert_eq!(psn_diff(0x7f_ffff, 0), 0x7f_ffff);
    assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
}
