//! Framing over socket pairs, UNIX and TCP listeners and connectors, in-process links.

use super::*;

#[test]
fn stream_framing_is_qemus_big_endian_length_then_frame() {
    let (raw_a, raw_b) = UnixStream::pair().unwrap();
    let mut link = Link::Stream(StreamLink::from_unix(raw_a).unwrap());
    let f1 = frame_ab(Opcode::RC_SEND_ONLY, 1, &payload(61, 1));
    let f2 = vec![0xffu8; 1];
    link.send(f1.clone()).unwrap();
    link.send(f2.clone()).unwrap();
    assert!(link.flush(soon()).unwrap());
    // What the peer reads: exactly [len BE][frame][len BE][frame].
    let mut want = Vec::new();
    for f in [&f1, &f2] {
        want.extend_from_slice(&(f.len() as u32).to_be_bytes());
        want.extend_from_slice(f);
    }
    let mut got = vec![0u8; want.len()];
    let mut raw_b = raw_b;
    raw_b
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    raw_b.read_exact(&mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(
        read_framed(&got, MAX_FRAME_LEN).unwrap(),
        vec![&f1[..], &f2[..]]
    );

    // The other way, one byte at a time (the length split too): frames come out whole.
    assert_eq!(link.recv().unwrap(), None, "nothing sent yet");
    let mut seen = Vec::new();
    for b in &want {
        raw_b.write_all(&[*b]).unwrap();
        if let Some(f) = link.recv().unwrap() {
            seen.push(f);
        }
    }
    assert_eq!(seen, vec![f1, f2]);
    assert_eq!(link.recv().unwrap(), None);
    drop(raw_b);
    assert_eq!(link.recv_deadline(soon()), Err(LinkError::Closed));
}

#[test]
fn socket_pair_round_trip_all_sizes() {
    let (mut a, mut b) = Link::socket_pair().unwrap();
    let sizes = [1usize, 14, 60, 1082, 1500, 4210, 9018, MAX_FRAME_LEN];
    for (i, &n) in sizes.iter().enumerate() {
        a.send(payload(n, i as u8)).unwrap();
    }
    for (i, &n) in sizes.iter().enumerate() {
        let f = b.recv_deadline(soon()).unwrap().expect("frame");
        assert_eq!(f, payload(n, i as u8));
    }
    assert_eq!(
        a.send(vec![0; MAX_FRAME_LEN + 1]),
        Err(LinkError::BadFrameLength(MAX_FRAME_LEN + 1))
    );
    assert_eq!(a.send(Vec::new()), Err(LinkError::BadFrameLength(0)));
    assert!(a.is_up(), "a refused frame leaves the link up");
    // Nothing waiting: recv returns at once, recv_deadline at its deadline.
    assert_eq!(b.recv().unwrap(), None);
    assert_eq!(
        b.recv_deadline(Instant::now() + Duration::from_millis(20))
            .unwrap(),
        None
    );
    a.shutdown();
    assert!(!a.is_up());
    assert_eq!(a.send(vec![1]), Err(LinkError::Down));
    assert_eq!(b.recv_deadline(soon()), Err(LinkError::Closed));
    assert_eq!(b.recv(), Err(LinkError::Down));
}

fn exchange(mut a: Link, mut b: Link) {
    for i in 0..50u32 {
        a.send(frame_ab(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            i,
            &payload(1024, i as u8),
        ))
        .unwrap();
        b.send(payload(100 + i as usize, 9)).unwrap();
    }
    for i in 0..50u32 {
        let f = b.recv_deadline(soon()).unwrap().expect("frame at b");
        assert_eq!(
            f,
            frame_ab(Opcode::RC_RDMA_WRITE_MIDDLE, i, &payload(1024, i as u8))
        );
        let g = a.recv_deadline(soon()).unwrap().expect("frame at a");
        assert_eq!(g, payload(100 + i as usize, 9));
    }
}

#[test]
fn unix_listener_and_connector() {
    let path = sock_path("unix");
    let addr = StreamAddr::parse(&format!("unix:{}", path.display())).unwrap();
    let l = StreamListener::bind(&addr).unwrap();
    assert_eq!(l.try_accept().unwrap().map(|_| ()), None);
    let c = Link::connect(&addr, soon()).unwrap();
    let s = Link::Stream(l.accept(soon()).unwrap());
    exchange(c, s);
    // A second listener on a live path is refused; a stale path is taken over.
    assert_eq!(
        StreamListener::bind(&addr).unwrap_err(),
        LinkError::Io(std::io::ErrorKind::AddrInUse)
    );
    drop(l);
    assert!(!path.exists(), "the listener removes its path");
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale); // leaves the file behind, nobody listening
    let l2 = StreamListener::bind(&addr).unwrap();
    drop(l2);
}

#[test]
fn server_link_takes_one_peer_at_a_time_and_listens_again() {
    let addr = StreamAddr::Unix(sock_path("server"));
    let mut server = FramePort::new(Link::serve(&addr).unwrap(), cfg_b());
    assert!(!server.link().is_up(), "down until a peer connects");
    assert_eq!(server.recv().unwrap(), None);
    let f = frame_ab(Opcode::RC_SEND_ONLY, 1, b"first!");
    assert_eq!(server.send(f.clone()), Err(LinkError::Down));
    for round in 0..3u32 {
        let mut client = FramePort::new(Link::connect(&addr, soon()).unwrap(), cfg_a());
        let f = frame_ab(Opcode::RC_SEND_ONLY, round, b"hello");
        client.send(f.clone()).unwrap();
        let got = server.recv_deadline(soon()).unwrap().expect("frame");
        assert_eq!(got.bytes, f);
        assert!(server.link().is_up());
        let mut back = hdrs(Opcode::RC_ACKNOWLEDGE, round, MAC_B, MAC_A, IP_B, IP_A);
        back.bth.ack_req = false;
        let back = back.encode(&[]).unwrap();
        server.send(back.clone()).unwrap();
        assert_eq!(client.recv_deadline(soon()).unwrap().unwrap().bytes, back);
        drop(client);
        assert_eq!(server.recv_deadline(soon()), Err(LinkError::Closed));
        assert!(!server.link().is_up(), "listening again");
    }
    assert_eq!(server.counters().get(Counter::LinkClosed), 3);
    // A second peer while one is connected waits in the backlog until the first leaves.
    let mut c1 = Link::connect(&addr, soon()).unwrap();
    assert_eq!(server.recv().unwrap(), None);
    let mut c2 = Link::connect(&addr, soon()).unwrap();
    c2.send(frame_ab(Opcode::RC_SEND_ONLY, 20, b"second"))
        .unwrap();
    c1.send(frame_ab(Opcode::RC_SEND_ONLY, 10, b"first."))
        .unwrap();
    assert_eq!(
        server.recv_deadline(soon()).unwrap().unwrap().hdrs.bth.psn,
        10
    );
    c1.shutdown();
    assert_eq!(server.recv_deadline(soon()), Err(LinkError::Closed));
    assert_eq!(
        server.recv_deadline(soon()).unwrap().unwrap().hdrs.bth.psn,
        20
    );
    server.shutdown(soon());
    assert_eq!(server.recv(), Err(LinkError::Down));
}

#[test]
fn tcp_listener_and_connector_on_loopback() {
    let l = StreamListener::bind(&StreamAddr::parse("tcp:127.0.0.1:0").unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    assert!(addr.to_string().starts_with("tcp:127.0.0.1:"));
    let c = Link::connect(&addr, soon()).unwrap();
    let s = Link::Stream(l.accept(soon()).unwrap());
    exchange(c, s);
}

#[test]
fn connect_and_accept_give_up_at_their_deadline() {
    let path = sock_path("nobody");
    let addr = StreamAddr::Unix(path);
    let t = Instant::now() + Duration::from_millis(30);
    assert_eq!(Link::connect(&addr, t).unwrap_err(), LinkError::Timeout);
    let l = StreamListener::bind(&StreamAddr::parse("tcp:127.0.0.1:0").unwrap()).unwrap();
    let t = Instant::now() + Duration::from_millis(30);
    assert_eq!(l.accept(t).unwrap_err(), LinkError::Timeout);
    assert!(StreamAddr::parse("tcp:not-an-address").is_err());
    assert!(StreamAddr::parse("unix:").is_err());
}

#[test]
fn in_process_pair_and_loopback() {
    let (a, b) = Link::pair();
    exchange(a, b);
    let (mut a, mut b) = Link::pair();
    a.send(vec![1, 2, 3]).unwrap();
    a.shutdown();
    assert_eq!(a.send(vec![1]), Err(LinkError::Down));
    assert_eq!(b.recv().unwrap(), Some(vec![1, 2, 3]));
    assert_eq!(b.recv(), Err(LinkError::Closed));

    let mut l = Link::loopback();
    l.send(vec![7; 10]).unwrap();
    l.send(vec![8; 10]).unwrap();
    assert_eq!(l.recv().unwrap(), Some(vec![7; 10]));
    assert_eq!(l.recv_deadline(soon()).unwrap(), Some(vec![8; 10]));
    assert_eq!(l.recv().unwrap(), None);
    for _ in 0..MAX_QUEUED_FRAMES {
        l.send(vec![0]).unwrap();
    }
    assert_eq!(l.send(vec![0]), Err(LinkError::Backlog));
}

#[test]
fn two_ports_in_process_deliver_roce_frames_and_count_them() {
    let (la, lb) = Link::pair();
    let mut a = FramePort::new(la, cfg_a());
    let mut b = FramePort::new(lb, cfg_b());
    let mut sent_bytes = 0;
    for i in 0..20u32 {
        let f = frame_ab(Opcode::RC_RDMA_WRITE_ONLY, i, &payload(100 + i as usize, 3));
        sent_bytes += f.len() as u64;
        a.send(f).unwrap();
    }
    for i in 0..20u32 {
        let p = b.recv().unwrap().expect("frame");
        assert_eq!(p.hdrs.bth.psn, i);
        assert_eq!(p.hdrs.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
        assert_eq!(p.payload(), &payload(100 + i as usize, 3)[..]);
    }
    assert_eq!(b.recv().unwrap(), None);
    let (sa, sb) = (a.counters().snapshot(), b.counters().snapshot());
    assert_eq!(sa.get(Counter::TxFrames), 20);
    assert_eq!(sa.get(Counter::TxBytes), sent_bytes);
    assert_eq!(sa.get(Counter::TxRoceUnicastFrames), 20);
    assert_eq!(sa.get(Counter::TxRoceUnicastBytes), sent_bytes);
    assert_eq!(sb.get(Counter::RxFrames), 20);
    assert_eq!(sb.get(Counter::RxRoceUnicastFrames), 20);
    assert_eq!(sb.get(Counter::RxRoceUnicastBytes), sent_bytes);
    assert_eq!(sb.rx_dropped(), 0);
}

/// Whether `fd` is readable now (poll with no wait).
fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one initialised pollfd; poll only writes its revents.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[test]
fn wait_names_the_socket_until_a_whole_frame_is_buffered() {
    let (raw_a, mut raw_b) = UnixStream::pair().unwrap();
    let mut link = Link::Stream(StreamLink::from_unix(raw_a).unwrap());
    let Wait::Fd { fd, write: false } = link.wait() else {
        panic!("an idle stream waits on its socket: {:?}", link.wait());
    };
    assert!(!readable(fd), "nothing sent yet");
    // Two frames in one write: the first receive reads both, the second is buffered and the
    // socket is empty, so a wait on the socket would miss it.
    let (f1, f2) = (payload(100, 1), payload(200, 2));
    let mut bytes = Vec::new();
    for f in [&f1, &f2] {
        bytes.extend_from_slice(&(f.len() as u32).to_be_bytes());
        bytes.extend_from_slice(f);
    }
    raw_b.write_all(&bytes[..bytes.len() - 1]).unwrap();
    assert!(readable(fd), "bytes arrived: the socket wakes a waiter");
    assert_eq!(link.recv().unwrap(), Some(f1));
    assert!(!readable(fd));
    assert_eq!(
        link.wait(),
        Wait::Fd { fd, write: false },
        "a partial frame is buffered: wait for its last byte"
    );
    raw_b.write_all(&bytes[bytes.len() - 1..]).unwrap();
    assert_eq!(link.recv().unwrap(), Some(f2.clone()));
    raw_b.write_all(&bytes).unwrap();
    assert_eq!(link.recv().unwrap(), Some(payload(100, 1)));
    assert_eq!(link.wait(), Wait::Ready, "a whole frame is buffered");
    assert_eq!(link.recv().unwrap(), Some(f2));
    assert_eq!(link.wait(), Wait::Fd { fd, write: false });
    link.shutdown();
    assert_eq!(
        link.wait(),
        Wait::Tick,
        "a link that is down has nothing to wait on"
    );
}

#[test]
fn wait_asks_for_room_while_a_backlog_waits() {
    let (raw_a, raw_b) = UnixStream::pair().unwrap();
    let mut link = Link::Stream(StreamLink::from_unix(raw_a).unwrap());
    // Fill the socket until frames stay in the backlog (nobody reads raw_b).
    let frame = payload(MAX_FRAME_LEN, 3);
    let mut sent = 0;
    while link.as_stream_mut().unwrap().backlog() == 0 {
        link.send(frame.clone()).unwrap();
        sent += 1;
        assert!(sent < 10_000, "the socket never filled");
    }
    let Wait::Fd { write: true, .. } = link.wait() else {
        panic!("a backlog waits for room: {:?}", link.wait());
    };
    drop(raw_b);
}

#[test]
fn wait_of_a_listener_is_its_socket_until_a_peer_comes() {
    let path = sock_path("wait");
    let addr = StreamAddr::Unix(path.clone());
    let mut link = Link::serve(&addr).unwrap();
    let Wait::Fd { fd, write: false } = link.wait() else {
        panic!("a listener waits on its socket: {:?}", link.wait());
    };
    assert!(!readable(fd));
    let _peer = UnixStream::connect(&path).unwrap();
    assert!(readable(fd), "a peer connecting wakes a waiter");
    assert_eq!(link.recv().unwrap(), None, "accepted, nothing sent");
    assert!(link.is_up());
    let Wait::Fd { fd: conn, .. } = link.wait() else {
        panic!("a connected server waits on its peer: {:?}", link.wait());
    };
    assert_ne!(conn, fd);
    let mut lo = Link::loopback();
    assert_eq!(lo.wait(), Wait::Tick);
    lo.send(payload(10, 4)).unwrap();
    assert_eq!(lo.wait(), Wait::Ready);
    let (a, _b) = Link::pair();
    assert_eq!(a.wait(), Wait::Tick, "an in-process pair has no descriptor");
}
