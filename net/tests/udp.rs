//! UDP between two stacks on an in-memory link.

mod common;

use common::*;
use net::{Datagram, NetError, Op};

#[test]
fn datagrams_go_both_ways() {
    let (mut a, mut b, _link) = stacks();
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let u = a.udp_bind(5000)?;
            let d = after(a, 5000);
            a.udp_send(&u, (IP_B, 6000), b"ping over udp", d)?;
            let mut buf = [0; 64];
            let got = a.udp_recv(&u, &mut buf, d)?;
            assert_eq!(&buf[..got.len], b"pong");
            a.udp_close(u)?;
            Ok::<_, NetError>(got)
        },
        |b| {
            let u = b.udp_bind(6000)?;
            let d = after(b, 5000);
            let mut buf = [0; 64];
            let got = b.udp_recv(&u, &mut buf, d)?;
            assert_eq!(&buf[..got.len], b"ping over udp");
            b.udp_send(&u, (got.from, got.port), b"pong", d)?;
            b.udp_close(u)?;
            Ok::<_, NetError>(got)
        },
    );
    assert_eq!(
        ra,
        Ok(Datagram {
            len: 4,
            from: IP_B,
            port: 6000
        })
    );
    assert_eq!(
        rb,
        Ok(Datagram {
            len: 13,
            from: IP_A,
            port: 5000
        })
    );
}

#[test]
fn the_largest_datagram_fits_one_frame() {
    let (mut a, mut b, _link) = stacks();
    let max = a.udp_max_payload();
    assert_eq!(max, MTU - 14 - 20 - 8);
    let data = pattern(max, 3);
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let u = a.udp_bind(0)?;
            assert!(u.port() >= 49152);
            let d = after(a, 5000);
            assert_eq!(
                a.udp_send(&u, (IP_B, 6000), &pattern(max + 1, 3), d),
                Err(NetError::TooLarge { len: max + 1, max })
            );
            a.udp_send(&u, (IP_B, 6000), &data, d)?;
            // One that the receiver's buffer cannot hold.
            a.udp_send(&u, (IP_B, 6000), &data, d)
        },
        |b| {
            let u = b.udp_bind(6000)?;
            let d = after(b, 5000);
            let mut buf = vec![0; max];
            let got = b.udp_recv(&u, &mut buf, d)?;
            assert!(buf[..got.len] == data[..]);
            let mut small = [0; 100];
            b.udp_recv(&u, &mut small, d).map(|_| ())
        },
    );
    assert_eq!(ra, Ok(()));
    assert_eq!(rb, Err(NetError::Truncated { len: max, cap: 100 }));
}

#[test]
fn udp_timeouts_and_ports() {
    let (mut a, _b, link) = stacks();
    let u = a.udp_bind(5000).unwrap();
    assert_eq!(
        a.udp_bind(5000).map(|_| ()),
        Err(NetError::PortInUse { port: 5000 })
    );
    let d = after(&a, 200);
    assert_eq!(
        a.udp_recv(&u, &mut [0; 8], d),
        Err(NetError::Timeout(Op::UdpRecv))
    );
    let d = after(&a, 300);
    assert_eq!(
        a.udp_send(&u, (NOBODY, 9), b"lost", d),
        Err(NetError::ArpTimeout { ip: NOBODY })
    );
    // The dropped datagram does not go out later: a queued one would have smoltcp ask for
    // its next hop again after a second of silence.
    let before = link.delivered();
    let until = after(&a, 1500);
    while a.now_us() < until {
        a.poll();
        std::thread::yield_now();
    }
    assert_eq!(link.delivered(), before);
    assert_eq!(a.udp_send(&u, (IP_B, 0), b"x", d), Err(NetError::BadPort));
}
