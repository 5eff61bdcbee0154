//! Garbage peers: a zero or oversized length or a frame cut short drops the connection,
//! counted; a peer that never reads or vanishes wedges nothing.

use super::*;

/// A port on a socket whose raw peer writes `bytes` and then closes (or not).
fn port_fed(bytes: &[u8], close: bool) -> (FramePort, UnixStream) {
    let (x, mut y) = UnixStream::pair().unwrap();
    y.write_all(bytes).unwrap();
    if close {
        y.shutdown(std::net::Shutdown::Write).unwrap();
    }
    (
        FramePort::new(Link::Stream(StreamLink::from_unix(x).unwrap()), cfg_b()),
        y,
    )
}

fn drain(p: &mut FramePort) -> Result<Vec<RxPacket>, LinkError> {
    let mut v = Vec::new();
    loop {
        match p.recv_deadline(soon()) {
            Ok(Some(x)) => v.push(x),
            Ok(None) => return Ok(v),
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn garbage_peers_drop_the_connection_counted() {
    let good = frame_ab(Opcode::RC_SEND_ONLY, 5, b"hello!!!");
    let mut framed_good = (good.len() as u32).to_be_bytes().to_vec();
    framed_good.extend_from_slice(&good);

    // Zero length after a good frame: the good one is delivered, then the link drops.
    let mut bytes = framed_good.clone();
    bytes.extend_from_slice(&0u32.to_be_bytes());
    bytes.extend_from_slice(&framed_good);
    let (mut p, _peer) = port_fed(&bytes, false);
    let got = p.recv_deadline(soon()).unwrap().unwrap();
    assert_eq!(got.payload(), b"hello!!!");
    assert_eq!(p.recv_deadline(soon()), Err(LinkError::ZeroLength));
    assert!(!p.link().is_up());
    assert_eq!(p.recv(), Err(LinkError::Down));
    assert_eq!(p.counters().get(Counter::LinkZeroLength), 1);

    // Oversized: refused as soon as the length arrives (no waiting for 1 MiB of body).
    let (mut p, _peer) = port_fed(&(1u32 << 20).to_be_bytes(), false);
    assert_eq!(
        p.recv_deadline(soon()),
        Err(LinkError::Oversized {
            len: 1 << 20,
            max: MAX_FRAME_LEN
        })
    );
    assert_eq!(p.counters().get(Counter::LinkOversized), 1);
    let (mut p, _peer) = port_fed(&((MAX_FRAME_LEN + 1) as u32).to_be_bytes(), false);
    assert!(matches!(p.recv(), Err(LinkError::Oversized { .. })));
    // A smaller limit (e.g. jumbo MTU) is honoured.
    let (mut p, _peer) = port_fed(&framed_good, false);
    p.link_mut()
        .as_stream_mut()
        .unwrap()
        .set_max_frame(good.len() - 1);
    assert!(matches!(
        p.recv_deadline(soon()),
        Err(LinkError::Oversized { .. })
    ));

    // A short read then EOF: inside the body, and inside the length.
    let (mut p, _peer) = port_fed(&framed_good[..20], true);
    assert_eq!(
        drain(&mut p).unwrap_err(),
        LinkError::Truncated {
            have: 20,
            need: framed_good.len()
        }
    );
    assert_eq!(p.counters().get(Counter::LinkTruncated), 1);
    let (mut p, _peer) = port_fed(&framed_good[..2], true);
    assert_eq!(
        drain(&mut p).unwrap_err(),
        LinkError::Truncated { have: 2, need: 4 }
    );

    // A clean close at a frame boundary.
    let (mut p, _peer) = port_fed(&framed_good, true);
    assert_eq!(drain(&mut p).unwrap_err(), LinkError::Closed);
    assert_eq!(p.counters().get(Counter::LinkClosed), 1);
    assert_eq!(p.counters().get(Counter::RxRoceUnicastFrames), 1);

    // Random junk never panics or hangs: each run ends in frames, a framing error or silence.
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..200 {
        let n = (x % 64) as usize;
        let junk: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let (mut p, _peer) = port_fed(&junk, x & 1 == 0);
        for _ in 0..4 {
            if p.recv().is_err() {
                break;
            }
        }
    }
}

#[test]
fn a_peer_that_never_reads_cannot_wedge_the_sender() {
    let (x, _y) = UnixStream::pair().unwrap(); // _y never reads
    let mut link = Link::Stream(StreamLink::from_unix(x).unwrap());
    link.as_stream_mut().unwrap().set_max_backlog(64 * 1024);
    let mut port = FramePort::new(link, cfg_a());
    let f = frame_ab(Opcode::RC_RDMA_WRITE_MIDDLE, 0, &payload(4096, 1));
    let mut refused = 0;
    for _ in 0..2000 {
        match port.send(f.clone()) {
            Ok(()) => {}
            Err(LinkError::Backlog) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0, "the socket buffer and backlog filled up");
    assert_eq!(port.counters().get(Counter::TxDropLink), refused);
    assert_eq!(
        port.counters().get(Counter::TxFrames) + refused,
        2000,
        "every frame is either sent or counted as refused"
    );
    // Flushing gives up at its deadline.
    assert!(!port
        .flush(Instant::now() + Duration::from_millis(20))
        .unwrap());
    assert!(port.link().is_up());
}

#[test]
fn a_peer_that_vanishes_is_a_counted_error() {
    let (x, y) = UnixStream::pair().unwrap();
    drop(y);
    let mut port = FramePort::new(Link::Stream(StreamLink::from_unix(x).unwrap()), cfg_a());
    let f = frame_ab(Opcode::RC_SEND_ONLY, 0, b"abcd");
    let e = port.send(f.clone()).unwrap_err();
    assert_eq!(e, LinkError::Io(std::io::ErrorKind::BrokenPipe));
    assert!(e.is_fatal());
    assert_eq!(port.send(f), Err(LinkError::Down));
    let s = port.counters().snapshot();
    assert_eq!(s.get(Counter::TxDropLink), 2);
    assert_eq!(s.get(Counter::LinkIoErrors), 1);
    assert_eq!(s.get(Counter::TxFrames), 0);
}
