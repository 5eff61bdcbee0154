//! TCP between two stacks on an in-memory link: an echo byte for byte, and every way a call
//! ends early.

mod common;

use common::*;
use net::{NetError, Op, LINGER_US};

/// The echo server of the tests: accepts one connection on `port`, sends back what it
/// receives until the peer closes, then closes. Returns the bytes echoed.
fn echo_once(b: &mut S, port: u16) -> Result<usize, NetError> {
    let mut l = b.tcp_listen(port)?;
    let d = after(b, 10_000);
    let c = b.tcp_accept(&mut l, d)?;
    let mut buf = vec![0; 8192];
    let mut total = 0;
    loop {
        let d = after(b, 10_000);
        let n = b.tcp_recv(&c, &mut buf, d)?;
        if n == 0 {
            break;
        }
        let d = after(b, 10_000);
        b.tcp_send_all(&c, &buf[..n], d)?;
        total += n;
    }
    let d = after(b, 10_000);
    b.tcp_close(c, d)?;
    b.tcp_unlisten(l)?;
    Ok(total)
}

#[test]
fn echo_byte_for_byte() {
    let (mut a, mut b, _link) = stacks();
    let data = pattern(400 * 1024, 7);
    // Pieces of many sizes: one byte, less than a segment, more than one, a whole window.
    let sizes = [1usize, 7, 1460, 1461, 4096, 65536, 20_000, 100_000, 3];
    let (sent, echoed) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 10_000);
            let c = a.tcp_connect(IP_B, 7, d)?;
            assert_eq!(a.tcp_remote(&c), Ok((IP_B, 7)));
            let mut off = 0;
            let mut back = vec![0; data.len()];
            for size in sizes.iter().cycle() {
                if off == data.len() {
                    break;
                }
                let end = (off + size).min(data.len());
                let d = after(a, 10_000);
                a.tcp_send_all(&c, &data[off..end], d)?;
                a.tcp_recv_exact(&c, &mut back[off..end], d)?;
                off = end;
            }
            let d = after(a, 10_000);
            a.tcp_close(c, d)?;
            assert!(back == data, "the echo differs");
            Ok::<_, NetError>(off)
        },
        |b| echo_once(b, 7),
    );
    assert_eq!(sent, Ok(data.len()));
    assert_eq!(echoed, Ok(data.len()));
}

#[test]
fn accept_serves_one_connection_after_another() {
    let (mut a, mut b, _link) = stacks();
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            for i in 0..3u8 {
                let d = after(a, 10_000);
                let c = a.tcp_connect(IP_B, 9000, d)?;
                a.tcp_send_all(&c, &[i; 3], d)?;
                a.tcp_close(c, d)?;
            }
            Ok::<_, NetError>(())
        },
        |b| {
            let mut l = b.tcp_listen(9000)?;
            let mut got = vec![];
            for _ in 0..3 {
                let d = after(b, 10_000);
                let c = b.tcp_accept(&mut l, d)?;
                let (ip, port) = b.tcp_remote(&c)?;
                assert_eq!(ip, IP_A);
                assert!(port >= 49152);
                let mut buf = [0; 3];
                b.tcp_recv_exact(&c, &mut buf, d)?;
                // The peer closed: end of stream.
                assert_eq!(b.tcp_recv(&c, &mut [0; 4], d), Ok(0));
                b.tcp_close(c, d)?;
                got.push(buf);
            }
            Ok::<_, NetError>(got)
        },
    );
    assert_eq!(ra, Ok(()));
    assert_eq!(rb, Ok(vec![[0; 3], [1; 3], [2; 3]]));
    // The closed connections are let go of: at once on the side that closed second (its
    // FIN acknowledged, Closed), after LINGER_US on the side that closed first (TimeWait).
    assert_eq!(b.open_sockets(), b.config().tcp_backlog);
    let until = after(&a, LINGER_US / 1000 + 100);
    while a.now_us() < until {
        a.poll();
        std::thread::yield_now();
    }
    assert_eq!(a.open_sockets(), 0);
}

#[test]
fn connect_refused_timed_out_and_unresolved() {
    let (mut a, mut b, link) = stacks();
    let r = with_peer(&mut a, &mut b, |a| {
        let d = after(a, 5000);
        a.tcp_connect(IP_B, 4444, d).map(|_| ())
    });
    assert_eq!(r, Err(NetError::Refused));
    // Nobody answers ARP.
    let d = after(&a, 300);
    assert_eq!(
        a.tcp_connect(NOBODY, 80, d).map(|_| ()),
        Err(NetError::ArpTimeout { ip: NOBODY })
    );
    // B is known (the refused connection above), the SYN gets no answer.
    link.cut(true);
    let d = after(&a, 300);
    assert_eq!(
        a.tcp_connect(IP_B, 4444, d).map(|_| ()),
        Err(NetError::Timeout(Op::Connect))
    );
    assert_eq!(
        a.tcp_connect(IP_B, 0, d).map(|_| ()),
        Err(NetError::BadPort)
    );
    // No socket of the failed connections is left behind.
    assert_eq!(a.open_sockets(), 0);
}

#[test]
fn accept_and_recv_time_out() {
    let (mut a, mut b, _link) = stacks();
    let mut l = b.tcp_listen(7).unwrap();
    let d = after(&b, 200);
    assert_eq!(
        b.tcp_accept(&mut l, d).map(|_| ()),
        Err(NetError::Timeout(Op::Accept))
    );
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 5000);
            let c = a.tcp_connect(IP_B, 7, d)?;
            // B sends nothing.
            let d = after(a, 400);
            let r = a.tcp_recv(&c, &mut [0; 16], d);
            let d = after(a, 5000);
            a.tcp_close(c, d)?;
            r
        },
        |b| {
            let d = after(b, 5000);
            let c = b.tcp_accept(&mut l, d)?;
            // Shorter than A's wait, so it ends before A's FIN.
            let d = after(b, 100);
            let r = b.tcp_recv_exact(&c, &mut [0; 16], d);
            // Then A's FIN.
            let d = after(b, 5000);
            assert_eq!(b.tcp_recv_exact(&c, &mut [0; 16], d), Err(NetError::Closed));
            b.tcp_close(c, d)?;
            r
        },
    );
    assert_eq!(ra, Err(NetError::Timeout(Op::Recv)));
    assert_eq!(rb, Err(NetError::Timeout(Op::Recv)));
}

#[test]
fn send_and_close_time_out_on_a_cut_link() {
    let (mut a, mut b, link) = stacks();
    let mut l = b.tcp_listen(7).unwrap();
    let (ca, cb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 5000);
            a.tcp_connect(IP_B, 7, d)
        },
        |b| {
            let d = after(b, 5000);
            b.tcp_accept(&mut l, d)
        },
    );
    let (ca, _cb) = (ca.unwrap(), cb.unwrap());
    link.cut(true);
    let d = after(&a, 300);
    assert_eq!(
        a.tcp_send_all(&ca, b"never acknowledged", d),
        Err(NetError::Timeout(Op::Send))
    );
    let d = after(&a, 300);
    assert_eq!(a.tcp_close(ca, d), Err(NetError::Timeout(Op::Close)));
}

#[test]
fn reset_and_early_close_are_told_apart() {
    let (mut a, mut b, _link) = stacks();
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 5000);
            let c = a.tcp_connect(IP_B, 7, d)?;
            // B sends 10 bytes and closes: 20 do not come.
            let mut buf = [0; 20];
            let first = a.tcp_recv_exact(&c, &mut buf, d);
            assert_eq!(&buf[..10], b"0123456789");
            a.tcp_close(c, d)?;
            // The second connection is reset.
            let c = a.tcp_connect(IP_B, 7, d)?;
            let second = a.tcp_recv(&c, &mut buf, d);
            let third = a.tcp_send_all(&c, b"x", d);
            a.tcp_abort(c)?;
            Ok::<_, NetError>((first, second, third))
        },
        |b| {
            let mut l = b.tcp_listen(7)?;
            let d = after(b, 5000);
            let c = b.tcp_accept(&mut l, d)?;
            b.tcp_send_all(&c, b"0123456789", d)?;
            b.tcp_close(c, d)?;
            let c = b.tcp_accept(&mut l, d)?;
            b.tcp_abort(c)?;
            Ok::<_, NetError>(())
        },
    );
    assert_eq!(rb, Ok(()));
    let (first, second, third) = ra.unwrap();
    assert_eq!(first, Err(NetError::Closed));
    assert_eq!(second, Err(NetError::Reset));
    assert_eq!(third, Err(NetError::Reset));
}

#[test]
fn ports_and_handles_are_checked() {
    let (mut a, mut b, _link) = stacks();
    let l = a.tcp_listen(7).unwrap();
    assert_eq!(
        a.tcp_listen(7).map(|_| ()),
        Err(NetError::PortInUse { port: 7 })
    );
    assert_eq!(a.tcp_listen(0).map(|_| ()), Err(NetError::BadPort));
    // A's listener is not B's.
    let mut l2 = l;
    let d = after(&b, 0);
    assert_eq!(
        b.tcp_accept(&mut l2, d).map(|_| ()),
        Err(NetError::ForeignHandle)
    );
    a.tcp_unlisten(l2).unwrap();
    // The port is free again.
    let l = a.tcp_listen(7).unwrap();
    assert_eq!(l.port(), 7);
}

/// `tcp_send` queues what fits in the send buffer and never waits: on a cut link the first
/// call takes a whole buffer, the next nothing, and `tcp_queue_all` times out waiting for room;
/// once the link is mended the rest is queued and everything arrives in order. A reset
/// connection refuses.
#[test]
fn tcp_send_queues_what_fits() {
    let (mut a, mut b, link) = stacks_with(|c| c.tcp_tx_buffer = 4096);
    let mut l = b.tcp_listen(7).unwrap();
    let (ca, cb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 5000);
            a.tcp_connect(IP_B, 7, d)
        },
        |b| {
            let d = after(b, 5000);
            b.tcp_accept(&mut l, d)
        },
    );
    let (ca, cb) = (ca.unwrap(), cb.unwrap());
    let data = pattern(10_000, 3);
    link.cut(true);
    assert_eq!(a.tcp_send(&ca, &data), Ok(4096));
    assert_eq!(a.tcp_send(&ca, &data[4096..]), Ok(0));
    assert_eq!(a.tcp_send(&ca, &[]), Ok(0));
    let d = after(&a, 100);
    assert_eq!(
        a.tcp_queue_all(&ca, &data[4096..], d),
        Err(NetError::Timeout(Op::Send))
    );
    link.cut(false);
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let d = after(a, 10_000);
            a.tcp_queue_all(&ca, &data[4096..], d)?;
            a.tcp_send_all(&ca, &[], d)
        },
        |b| {
            let d = after(b, 10_000);
            let mut got = vec![0; data.len()];
            b.tcp_recv_exact(&cb, &mut got, d).map(|()| got)
        },
    );
    assert_eq!(ra, Ok(()));
    assert!(rb.unwrap() == data, "the data differs");
    b.tcp_abort(cb).unwrap();
    let d = after(&a, 5000);
    let r = loop {
        match a.tcp_send(&ca, b"x") {
            Ok(_) if a.now_us() < d => std::thread::yield_now(),
            r => break r,
        }
    };
    assert_eq!(r, Err(NetError::Reset));
}
