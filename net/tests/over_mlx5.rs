//! Two stacks over two emulated ConnectX-5s joined by an in-process wire: each stack on its
//! HCA's Ethernet queue (the driver's `EthQueue` as a `Nic`), ARP, ping and TCP between them
//! through the model's send queue, port, steering and receive queue.

mod common;
#[allow(dead_code)]
#[path = "../../drivers/mlx5/tests/common/mod.rs"]
mod sim;

use std::time::Instant;

use common::{after, both, pattern, StdClock, IP_A, IP_B};
use mlx5::{Context, EthConfig, EthQueue};
use net::{NetError, Stack, StackConfig};
use sim::{test_config, SimHal, TestHal};

type E = Stack<EthQueue<TestHal>, StdClock>;

/// Two HCAs on one wire, a context and an Ethernet queue each, a stack on each queue.
fn stacks() -> (Context<TestHal>, Context<TestHal>, E, E) {
    let (sa, sb) = SimHal::pair();
    let ca = Context::open(TestHal(sa), test_config()).unwrap();
    let cb = Context::open(TestHal(sb), test_config()).unwrap();
    let qa = ca.open_eth(&EthConfig::default()).unwrap();
    let qb = cb.open_eth(&EthConfig::default()).unwrap();
    let clock = StdClock(Instant::now());
    let a = Stack::new(qa, clock, &StackConfig::new(IP_A, 24)).unwrap();
    let b = Stack::new(qb, clock, &StackConfig::new(IP_B, 24)).unwrap();
    (ca, cb, a, b)
}

#[test]
fn arp_ping_and_tcp_echo_over_two_hcas() {
    let (_ca, _cb, mut a, mut b) = stacks();
    let (mac_a, mac_b) = (a.mac(), b.mac());
    assert_ne!(mac_a, mac_b);
    let data = pattern(256 * 1024, 11);
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 10_000);
            let mac = a.resolve(IP_B, d)?;
            a.ping(IP_B, d)?;
            let c = a.tcp_connect(IP_B, 7, d)?;
            let mut back = vec![0; data.len()];
            for (i, piece) in data.chunks(24 * 1024).enumerate() {
                let at = i * 24 * 1024;
                let d = after(a, 10_000);
                a.tcp_send_all(&c, piece, d)?;
                a.tcp_recv_exact(&c, &mut back[at..at + piece.len()], d)?;
            }
            let d = after(a, 10_000);
            a.tcp_close(c, d)?;
            assert!(back == data, "the echo differs");
            Ok::<_, NetError>(mac)
        },
        |b| {
            let d = after(b, 10_000);
            let mac = b.resolve(IP_A, d)?;
            let mut l = b.tcp_listen(7)?;
            let c = b.tcp_accept(&mut l, d)?;
            let mut buf = vec![0; 4096];
            loop {
                let d = after(b, 10_000);
                let n = b.tcp_recv(&c, &mut buf, d)?;
                if n == 0 {
                    break;
                }
                b.tcp_send_all(&c, &buf[..n], d)?;
            }
            let d = after(b, 10_000);
            b.tcp_close(c, d)?;
            Ok::<_, NetError>(mac)
        },
    );
    assert_eq!(ra, Ok(mac_b));
    assert_eq!(rb, Ok(mac_a));
    for s in [a.stats(), b.stats()] {
        assert_eq!(s.tx_errors, 0, "{s:?}");
        assert_eq!(s.rx_too_large, 0, "{s:?}");
    }
}
