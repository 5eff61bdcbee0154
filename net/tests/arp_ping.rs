//! ARP and ping between two stacks on an in-memory link, and their timeouts.

mod common;

use common::*;
use net::{ConfigError, Ipv4Addr, NetError, Op, Stack, StackConfig, ARP_RETRY_US};

#[test]
fn arp_resolves_both_ways() {
    let (mut a, mut b, _link) = stacks();
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 5000);
            a.resolve(IP_B, d)
        },
        |b| {
            let d = after(b, 5000);
            b.resolve(IP_A, d)
        },
    );
    assert_eq!(ra, Ok(MAC_B));
    assert_eq!(rb, Ok(MAC_A));
    assert_eq!(a.neighbour(IP_B), Some(MAC_B));
    assert_eq!(b.neighbour(IP_A), Some(MAC_A));
    // Known now: answered without the link.
    let d = after(&a, 0);
    assert_eq!(a.resolve(IP_B, d), Ok(MAC_B));
    // Our own address is our own MAC.
    assert_eq!(a.resolve(IP_A, d), Ok(MAC_A));
}

#[test]
fn arp_times_out_and_repeats_its_request() {
    let (mut a, _b, link) = stacks();
    let t0 = a.now_us();
    let r = a.resolve(NOBODY, t0 + 1_500_000);
    let took = a.now_us() - t0;
    assert_eq!(r, Err(NetError::ArpTimeout { ip: NOBODY }));
    assert!((1_500_000..5_000_000).contains(&took), "took {took} us");
    // One request at once, one after ARP_RETRY_US: two frames, both on the link.
    assert_eq!(ARP_RETRY_US, 1_000_000);
    assert_eq!(link.delivered(), 2);
    assert_eq!(a.stats().tx_frames, 2);
}

#[test]
fn off_subnet_goes_to_the_gateway_or_nowhere() {
    let far = Ipv4Addr::new(192, 168, 1, 1);
    let (mut a, _b, _link) = stacks();
    let d = after(&a, 100);
    assert_eq!(a.resolve(far, d), Err(NetError::NoRoute { ip: far }));
    assert_eq!(a.ping(far, d), Err(NetError::NoRoute { ip: far }));

    // With B as the gateway, resolving a far address is resolving B.
    let (mut a, mut b, _link) = stacks_with(|c| {
        if c.ip == IP_A {
            c.gateway = Some(IP_B)
        }
    });
    let r = with_peer(&mut a, &mut b, |a| {
        let d = after(a, 5000);
        a.resolve(far, d)
    });
    assert_eq!(r, Ok(MAC_B));
    // A gateway nobody answers for.
    let (mut a, _b, _link) = stacks_with(|c| c.gateway = Some(NOBODY));
    let d = after(&a, 200);
    assert_eq!(a.resolve(far, d), Err(NetError::ArpTimeout { ip: NOBODY }));
}

#[test]
fn solicit_asks_once_and_polling_learns_the_answer() {
    let (mut a, mut b, link) = stacks();
    assert_eq!(a.next_hop_mac(IP_B), None);
    a.solicit(IP_B);
    assert_eq!(link.delivered(), 1);
    // B answers in its poll, A learns in its own.
    let t0 = a.now_us();
    while a.next_hop_mac(IP_B).is_none() && a.now_us() - t0 < 5_000_000 {
        b.poll();
        a.poll();
    }
    assert_eq!(a.next_hop_mac(IP_B), Some(MAC_B));
    assert_eq!(a.neighbour(IP_B), Some(MAC_B));
    // Known now, our own address, no route: nothing is sent.
    let sent = a.stats().tx_frames;
    a.solicit(IP_B);
    a.solicit(IP_A);
    a.solicit(Ipv4Addr::new(192, 168, 1, 1));
    assert_eq!(a.stats().tx_frames, sent);
    assert_eq!(a.next_hop_mac(IP_A), Some(MAC_A));
    assert_eq!(a.next_hop_mac(Ipv4Addr::new(192, 168, 1, 1)), None);
}

#[test]
fn static_neighbours_answer_at_once_and_stay() {
    let (mut a, mut b, link) = stacks();
    link.cut(true);
    a.add_neighbour(IP_B, [2, 0, 0, 0, 0, 0x77]);
    let d = after(&a, 0);
    assert_eq!(a.resolve(IP_B, d), Ok([2, 0, 0, 0, 0, 0x77]));
    assert_eq!(link.delivered(), 0);
    // B's ARP request (B learns A) does not replace A's static entry for B.
    link.cut(false);
    let r = with_peer(&mut b, &mut a, |b| {
        let d = after(b, 5000);
        b.resolve(IP_A, d)
    });
    assert_eq!(r, Ok(MAC_A));
    assert_eq!(a.neighbour(IP_B), Some([2, 0, 0, 0, 0, 0x77]));
}

#[test]
fn ping_is_answered_by_the_peer_stack() {
    let (mut a, mut b, _link) = stacks();
    let rtts = with_peer(&mut a, &mut b, |a| {
        (0..3)
            .map(|_| {
                let d = after(a, 5000);
                a.ping(IP_B, d)
            })
            .collect::<Vec<_>>()
    });
    for r in rtts {
        assert!(r.is_ok(), "{r:?}");
    }
    // And the other way.
    let r = with_peer(&mut b, &mut a, |b| {
        let d = after(b, 5000);
        b.ping(IP_A, d)
    });
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn ping_timeouts_tell_arp_from_echo() {
    let (mut a, mut b, link) = stacks();
    let d = after(&a, 300);
    assert_eq!(a.ping(NOBODY, d), Err(NetError::ArpTimeout { ip: NOBODY }));
    // B is known, then the link goes: no echo reply.
    let r = with_peer(&mut a, &mut b, |a| {
        let d = after(a, 5000);
        a.ping(IP_B, d)
    });
    assert!(r.is_ok(), "{r:?}");
    link.cut(true);
    let d = after(&a, 300);
    assert_eq!(a.ping(IP_B, d), Err(NetError::Timeout(Op::Ping)));
}

#[test]
fn configurations_smoltcp_would_panic_on_are_refused() {
    let (na, _nb, _l) = net::loopback::pair([1, 0, 0, 0, 0, 1], MAC_B, MTU);
    let clock = StdClock(std::time::Instant::now());
    let cfg = StackConfig::new(IP_A, 24);
    assert_eq!(
        Stack::new(na, clock, &cfg).err(),
        Some(NetError::Config(ConfigError::Mac([1, 0, 0, 0, 0, 1])))
    );
    let bad = [
        (StackConfig::new(IP_A, 33), ConfigError::Prefix(33)),
        (
            StackConfig::new(Ipv4Addr::BROADCAST, 24),
            ConfigError::Address(Ipv4Addr::BROADCAST),
        ),
        (
            StackConfig::new(Ipv4Addr::new(224, 0, 0, 1), 24),
            ConfigError::Address(Ipv4Addr::new(224, 0, 0, 1)),
        ),
        (
            StackConfig {
                gateway: Some(Ipv4Addr::new(10, 0, 1, 1)),
                ..StackConfig::new(IP_A, 24)
            },
            ConfigError::Gateway(Ipv4Addr::new(10, 0, 1, 1)),
        ),
        (
            StackConfig {
                tcp_rx_buffer: (1 << 30) + 1,
                ..StackConfig::new(IP_A, 24)
            },
            ConfigError::TcpBuffer((1 << 30) + 1),
        ),
        (
            StackConfig {
                tcp_tx_buffer: 0,
                ..StackConfig::new(IP_A, 24)
            },
            ConfigError::TcpBuffer(0),
        ),
    ];
    for (cfg, want) in bad {
        let (na, _nb, _l) = net::loopback::pair(MAC_A, MAC_B, MTU);
        assert_eq!(
            Stack::new(na, clock, &cfg).err(),
            Some(NetError::Config(want))
        );
    }
    let (na, _nb, _l) = net::loopback::pair(MAC_A, MAC_B, 100);
    assert_eq!(
        Stack::new(na, clock, &StackConfig::new(IP_A, 24)).err(),
        Some(NetError::Config(ConfigError::Mtu(100)))
    );
}
