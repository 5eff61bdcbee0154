//! QEMU's stream netdev relays the link's frames.

use super::*;

/// Kills (and reaps) the QEMU this test started.
struct Qemu(std::process::Child);
impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// QEMU's own stream netdev code carries our frames: two `-netdev stream` clients, one on a
/// UNIX socket and one on TCP, joined by a QEMU hub, connect to two of our listeners; frames
/// sent on one of our links come out of the other, in both directions, byte for byte. QEMU
/// parses our framing with net/net.c `net_fill_rstate` and writes its own with
/// net/stream_data.c `net_stream_data_receive`, so this checks both against the real thing.
/// (`-S` would stop the relay: the hub delivers nothing while the VM is not running.)
#[test]
fn qemu_stream_netdev_relays_our_frames() {
    let unix = StreamAddr::Unix(sock_path("qemu"));
    let la = StreamListener::bind(&unix).unwrap();
    let lb = StreamListener::bind(&StreamAddr::parse("tcp:127.0.0.1:0").unwrap()).unwrap();
    let StreamAddr::Tcp(tcp) = lb.local_addr().unwrap() else {
        unreachable!()
    };
    let StreamAddr::Unix(path) = &unix else {
        unreachable!()
    };
    let child = std::process::Command::new("qemu-system-x86_64")
        .args([
            "-machine",
            "none",
            "-nodefaults",
            "-display",
            "none",
            "-netdev",
        ])
        .arg(format!(
            "stream,id=a,server=off,addr.type=unix,addr.path={}",
            path.display()
        ))
        .arg("-netdev")
        .arg(format!(
            "stream,id=b,server=off,addr.type=inet,addr.host=127.0.0.1,addr.port={}",
            tcp.port()
        ))
        .args(["-netdev", "hubport,id=ha,hubid=0,netdev=a"])
        .args(["-netdev", "hubport,id=hb,hubid=0,netdev=b"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let _qemu = match child {
        Ok(c) => Qemu(c),
        Err(e) => {
            eprintln!("SKIPPED: qemu_stream_netdev_relays_our_frames: qemu-system-x86_64 ({e})");
            return;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut a = FramePort::new(Link::Stream(la.accept(deadline).unwrap()), cfg_a());
    let mut b = FramePort::new(Link::Stream(lb.accept(deadline).unwrap()), cfg_b());
    // QEMU marks each netdev's link up when its main loop handles the connection, which may
    // come after our accept; the hub drops frames towards a link that is still down. Probe
    // each way until one probe gets through, then skip any late probes.
    const PROBE_PSN: u32 = 0xff_fff0;
    let probe_ab = frame_ab(Opcode::RC_SEND_ONLY, PROBE_PSN, b"probe");
    let mut probe_ba = hdrs(Opcode::RC_SEND_ONLY, PROBE_PSN, MAC_B, MAC_A, IP_B, IP_A);
    probe_ba.bth.ack_req = false;
    let probe_ba = probe_ba.encode(b"probe").unwrap();
    let probe = |tx: &mut FramePort, rx: &mut FramePort, f: &Vec<u8>| loop {
        tx.send(f.clone()).unwrap();
        let wait = Instant::now() + Duration::from_millis(50);
        if rx.recv_deadline(wait).unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "QEMU relayed no probe");
    };
    probe(&mut a, &mut b, &probe_ab);
    probe(&mut b, &mut a, &probe_ba);
    let next = |p: &mut FramePort| loop {
        let x = p.recv_deadline(deadline).unwrap().expect("relayed frame");
        if x.hdrs.bth.psn != PROBE_PSN {
            return x;
        }
    };
    let sizes = [60usize, 1024, 4096, 9000, MAX_FRAME_LEN - 100];
    for (i, n) in sizes.iter().enumerate() {
        a.send(frame_ab(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            i as u32,
            &payload(*n, 1),
        ))
        .unwrap();
    }
    for (i, n) in sizes.iter().enumerate() {
        // A late probe (sent again while QEMU was slow to relay the first) may still come first.
        let p = next(&mut b);
        assert_eq!(
            p.bytes,
            frame_ab(Opcode::RC_RDMA_WRITE_MIDDLE, i as u32, &payload(*n, 1))
        );
    }
    let mut ack = hdrs(Opcode::RC_ACKNOWLEDGE, 4, MAC_B, MAC_A, IP_B, IP_A);
    ack.bth.ack_req = false;
    let ack = ack.encode(&[]).unwrap();
    b.send(ack.clone()).unwrap();
    assert_eq!(next(&mut a).bytes, ack);
}
