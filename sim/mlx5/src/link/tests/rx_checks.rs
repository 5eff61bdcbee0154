//! The receive checks, which drop and count as hardware does.

use super::*;

fn ipv6_neighbor_solicitation() -> Vec<u8> {
    // To the solicited-node multicast MAC 33:33:ff:00:00:02, ICMPv6 (next header 58) type 135.
    let mut f = vec![0x33, 0x33, 0xff, 0, 0, 2];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    let mut ip = vec![0x60, 0, 0, 0, 0, 24, 58, 255];
    ip.extend_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1).octets());
    ip.extend_from_slice(&Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00, 2).octets());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
    f.extend_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 2).octets());
    f
}

/// The UDP checksum of a frame built by `frame_ab` (IPv4 pseudo-header, RFC 768).
fn set_udp_checksum(f: &mut [u8], wrong: bool) {
    let ip = 14;
    let udp = ip + 20;
    f[udp + 6] = 0;
    f[udp + 7] = 0;
    let ulen = u16::from_be_bytes([f[udp + 4], f[udp + 5]]) as usize;
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&f[ip + 12..ip + 20]);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(ulen as u16).to_be_bytes());
    pseudo.extend_from_slice(&f[udp..udp + ulen]);
    let mut c = ipv4_checksum(&pseudo);
    if c == 0 {
        c = 0xffff;
    }
    if wrong {
        c ^= 0x0101;
    }
    f[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn receive_checks_drop_and_count_as_hardware_does() {
    let cfg = cfg_b();
    let ok = |f: &[u8]| check_rx(f, &cfg);
    let good = frame_ab(Opcode::RC_SEND_ONLY, 1, b"payload!");
    let (h, r) = ok(&good).unwrap();
    assert_eq!(h.bth.psn, 1);
    assert_eq!(&good[r], b"payload!");

    // Wrong unicast MAC.
    let mut f = good.clone();
    f[5] = 9;
    assert_eq!(ok(&f), Err(RxDrop::WrongDstMac([2, 0, 0, 0, 0, 9])));
    // Broadcast and multicast MACs pass the MAC filter (a RoCE frame to them is taken).
    let bc = hdrs(Opcode::RC_SEND_ONLY, 2, MAC_A, [0xff; 6], IP_A, IP_B)
        .encode(b"x")
        .unwrap();
    assert!(ok(&bc).is_ok());
    // Not RoCE.
    assert_eq!(
        ok(&arp_request()),
        Err(RxDrop::NotRoce {
            ethertype: ETHERTYPE_ARP
        })
    );
    assert_eq!(
        ok(&ipv6_neighbor_solicitation()),
        Err(RxDrop::NotRoce {
            ethertype: ETHERTYPE_IPV6
        })
    );
    // Runt and malformed.
    assert_eq!(ok(&good[..10]), Err(RxDrop::Malformed(None)));
    assert!(matches!(ok(&good[..50]), Err(RxDrop::Malformed(Some(_)))));
    let mut f = good.clone();
    f[14 + 10] ^= 1; // IPv4 header checksum
    assert!(matches!(
        ok(&f),
        Err(RxDrop::Malformed(Some(DecodeError::Ipv4Checksum { .. })))
    ));
    // Another destination IP (rxe_chk_dgid); a port without addresses takes any.
    let other = hdrs(
        Opcode::RC_SEND_ONLY,
        3,
        MAC_A,
        MAC_B,
        IP_A,
        Ipv4Addr::new(10, 0, 0, 9),
    )
    .encode(b"x")
    .unwrap();
    assert_eq!(
        ok(&other),
        Err(RxDrop::WrongDstIp(Ipv4Addr::new(10, 0, 0, 9).into()))
    );
    assert!(check_rx(&other, &PortConfig::new(MAC_B)).is_ok());
    // Bad ICRC: a payload byte flipped.
    let mut f = good.clone();
    let n = f.len();
    f[n - 6] ^= 0x40;
    assert!(matches!(ok(&f), Err(RxDrop::Icrc { .. })));
    // TVer 1 and QP 0 (with good ICRCs).
    let mut h1 = hdrs(Opcode::RC_SEND_ONLY, 4, MAC_A, MAC_B, IP_A, IP_B);
    h1.bth.tver = 1;
    assert_eq!(ok(&h1.encode(b"x").unwrap()), Err(RxDrop::BadTver(1)));
    let mut h0 = hdrs(Opcode::RC_SEND_ONLY, 4, MAC_A, MAC_B, IP_A, IP_B);
    h0.bth.dest_qp = 0;
    assert_eq!(ok(&h0.encode(b"x").unwrap()), Err(RxDrop::Qp0));
    // UDP checksum: 0 = none; a right non-zero one passes, a wrong one is dropped. The ICRC
    // masks the UDP checksum, so it stays good either way.
    let mut f = good.clone();
    set_udp_checksum(&mut f, false);
    assert!(ok(&f).is_ok(), "a correct UDP checksum is accepted");
    set_udp_checksum(&mut f, true);
    assert!(matches!(ok(&f), Err(RxDrop::UdpChecksum { .. })));

    counted_through_a_port(
        &good,
        other,
        h1.encode(b"x").unwrap(),
        h0.encode(b"x").unwrap(),
    );
}

/// [`receive_checks_drop_and_count_as_hardware_does`], through a port: every drop is counted
/// under its reason, the good frame comes through. `other` goes to another IP, `h1` has TVer
/// 1, `h0` QP 0.
fn counted_through_a_port(good: &[u8], other: Vec<u8>, h1: Vec<u8>, h0: Vec<u8>) {
    let n = good.len();
    let (mut tx, rx) = Link::pair();
    let mut port = FramePort::new(rx, cfg_b());
    let mut wrong_mac = good.to_vec();
    wrong_mac[5] = 9;
    let mut bad_icrc = good.to_vec();
    bad_icrc[n - 1] ^= 1;
    let mut bad_udp = good.to_vec();
    set_udp_checksum(&mut bad_udp, true);
    for f in [
        wrong_mac,
        arp_request(),
        ipv6_neighbor_solicitation(),
        good[..50].to_vec(),
        other,
        bad_icrc,
        h1,
        h0,
        bad_udp,
        good.to_vec(),
    ] {
        tx.send(f).unwrap();
    }
    let p = port.recv().unwrap().expect("the good frame");
    assert_eq!(p.bytes, good);
    let s = port.counters().snapshot();
    for c in [
        Counter::RxDropWrongDstMac,
        Counter::RxDropMalformed,
        Counter::RxDropWrongDstIp,
        Counter::RxIcrcErrors,
        Counter::RxDropBadTver,
        Counter::RxDropQp0,
        Counter::RxDropUdpChecksum,
        Counter::RxEthBroadcastFrames,
        Counter::RxEthMulticastFrames,
    ] {
        assert_eq!(s.get(c), 1, "{c}: {:?}", s.nonzero());
    }
    assert_eq!(s.get(Counter::RxDropNotRoce), 2);
    assert_eq!(s.rx_dropped(), 9);
    assert_eq!(s.get(Counter::RxFrames), 10);
    assert_eq!(s.get(Counter::RxRoceUnicastFrames), 1);
}

#[test]
fn udp_checksum_over_ipv6_zero_right_and_wrong() {
    let a6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1);
    let b6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 2);
    let mut h = hdrs(Opcode::RC_SEND_ONLY, 9, MAC_A, MAC_B, IP_A, IP_B);
    h.ip = IpHdr::V6(Ipv6Hdr {
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
        src: a6,
        dst: b6,
    });
    let cfg = PortConfig {
        mac: MAC_B,
        ips: vec![b6.into()],
    };
    let mut f = h.encode(b"odd").unwrap();
    assert!(
        check_rx(&f, &cfg).is_ok(),
        "checksum 0 accepted over IPv6 (rxe)"
    );
    // RFC 8200 8.1 pseudo-header: addresses, upper-layer length (32 bits), 3 zero bytes, 17.
    let udp = 14 + 40;
    let ulen = f.len() - udp;
    let mut sum = Vec::new();
    sum.extend_from_slice(&a6.octets());
    sum.extend_from_slice(&b6.octets());
    sum.extend_from_slice(&(ulen as u32).to_be_bytes());
    sum.extend_from_slice(&[0, 0, 0, 17]);
    sum.extend_from_slice(&f[udp..]);
    let c = ipv4_checksum(&sum);
    f[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
    assert!(check_rx(&f, &cfg).is_ok(), "right checksum");
    f[udp + 7] ^= 0x10;
    assert!(matches!(
        check_rx(&f, &cfg),
        Err(RxDrop::UdpChecksum { .. })
    ));
}

/// The HCA's port hands every frame that is not RoCEv2 on ([`FramePort::recv_any`]),
/// whatever its destination MAC (the vport's address filter judges that); RoCEv2 frames are
/// judged as before, a RoCEv2 frame to another MAC is still dropped at the port, and so are
/// runts and frames that do not decode.
#[test]
fn recv_any_hands_non_roce_frames_on() {
    let good = frame_ab(Opcode::RC_SEND_ONLY, 1, b"payload!");
    let mut to_other = arp_request();
    to_other[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    let mut roce_to_other = good.clone();
    roce_to_other[5] = 9;
    let cfg = cfg_b();
    assert_eq!(classify(&arp_request(), &cfg), Ok(Rx::Eth));
    assert_eq!(classify(&to_other, &cfg), Ok(Rx::Eth));
    assert_eq!(classify(&ipv6_neighbor_solicitation(), &cfg), Ok(Rx::Eth));
    assert!(matches!(classify(&good, &cfg), Ok(Rx::Roce(..))));
    assert_eq!(
        classify(&roce_to_other, &cfg),
        Err(RxDrop::WrongDstMac([2, 0, 0, 0, 0, 9]))
    );
    assert_eq!(classify(&good[..10], &cfg), Err(RxDrop::Malformed(None)));

    let (mut tx, rx) = Link::pair();
    let mut port = FramePort::new(rx, cfg_b());
    for f in [
        arp_request(),
        to_other.clone(),
        roce_to_other,
        good[..10].to_vec(),
        good.clone(),
    ] {
        tx.send(f).unwrap();
    }
    assert_eq!(port.recv_any().unwrap(), Some(Received::Eth(arp_request())));
    assert_eq!(port.recv_any().unwrap(), Some(Received::Eth(to_other)));
    match port.recv_any().unwrap() {
        Some(Received::Roce(p)) => assert_eq!(p.bytes, good),
        other => panic!("expected the RoCE frame, got {other:?}"),
    }
    assert_eq!(port.recv_any().unwrap(), None);
    let s = port.counters().snapshot();
    assert_eq!(s.get(Counter::RxFrames), 5);
    assert_eq!(s.get(Counter::RxDropWrongDstMac), 1);
    assert_eq!(s.get(Counter::RxDropMalformed), 1);
    // Not counted as dropped nor as received_eth_* here: the vport decides that.
    assert_eq!(s.get(Counter::RxDropNotRoce), 0);
    assert_eq!(s.get(Counter::RxEthBroadcastFrames), 0);
    assert_eq!(s.rx_dropped(), 2);
}
