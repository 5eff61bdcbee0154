//! Capture (pcap), checked with tshark when it is installed.

use super::*;

/// A `Write` whose bytes the test can read back.
#[derive(Clone, Default)]
struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn capture_records_both_directions_as_on_the_wire() {
    let buf = Shared::default();
    let tap = PcapTap::new(buf.clone()).unwrap();
    let (la, lb) = Link::pair();
    let mut a = FramePort::new(la, cfg_a()).with_tap(tap.clone());
    let mut b = FramePort::new(lb, cfg_b());
    let req = frame_ab(Opcode::RC_SEND_ONLY, 1, b"ping");
    let mut ack_h = hdrs(Opcode::RC_ACKNOWLEDGE, 1, MAC_B, MAC_A, IP_B, IP_A);
    ack_h.bth.ack_req = false;
    let ack = ack_h.encode(&[]).unwrap();
    a.send(req.clone()).unwrap();
    assert!(b.recv().unwrap().is_some());
    b.send(ack.clone()).unwrap();
    assert!(a.recv().unwrap().is_some());
    b.send(arp_request()).unwrap(); // received and captured, then dropped
    assert_eq!(a.recv().unwrap(), None);
    tap.flush().unwrap();
    let bytes = buf.0.lock().unwrap().clone();
    let f = PcapFile::parse(&bytes).unwrap();
    let recs: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
    let datas: Vec<&[u8]> = recs.iter().map(|r| r.data).collect();
    assert_eq!(datas, vec![&req[..], &ack[..], &arp_request()[..]]);
    assert!(recs[0].ts <= recs[1].ts && recs[1].ts <= recs[2].ts);
    assert!(
        recs[0].ts.as_secs() > 1_600_000_000,
        "wall-clock timestamps"
    );
}

#[test]
fn capture_shows_faults_as_the_wire_carried_them() {
    let buf = Shared::default();
    let tap = PcapTap::new(buf.clone()).unwrap();
    let (la, _lb) = Link::pair();
    let mut a = FramePort::new(la, cfg_a())
        .with_tap(tap.clone())
        .with_faults("drop=0.3,dup=0.3,seed=5".parse().unwrap());
    for i in 0..100 {
        a.send(frame_ab(Opcode::RC_SEND_ONLY, i, b"data")).unwrap();
    }
    tap.flush().unwrap();
    let bytes = buf.0.lock().unwrap().clone();
    let n = PcapFile::parse(&bytes).unwrap().records().count() as u64;
    let s = a.counters().snapshot();
    assert_eq!(
        n,
        100 - s.get(Counter::FaultDropped) + s.get(Counter::FaultDuplicated)
    );
    assert_eq!(n, s.get(Counter::TxFrames));
    // Corruptions are in the capture as the wire carried them: `--decode-pcap` flags them.
    let buf = Shared::default();
    let tap = PcapTap::new(buf.clone()).unwrap();
    let (la, _lb) = Link::pair();
    let mut a = FramePort::new(la, cfg_a())
        .with_tap(tap.clone())
        .with_faults("corrupt=0.5,seed=5".parse().unwrap());
    for i in 0..40 {
        a.send(frame_ab(Opcode::RC_SEND_ONLY, i, b"data")).unwrap();
    }
    tap.flush().unwrap();
    let bytes = buf.0.lock().unwrap().clone();
    let sum = crate::link::dump::dump_pcap(&bytes, None, &mut Vec::new()).unwrap();
    let corrupted = a.counters().get(Counter::FaultCorrupted) as usize;
    assert!(corrupted > 5);
    assert_eq!((sum.roce, sum.icrc_bad), (40, corrupted));
}

/// One frame per opcode the transport will send, A→B and B→A, through a port pair with a
/// file tap. Returns the frames in capture order.
fn capture_every_opcode(path: &std::path::Path) -> Vec<(Opcode, Vec<u8>)> {
    let tap = PcapTap::create(path).unwrap();
    let (la, lb) = Link::socket_pair().unwrap();
    let mut a = FramePort::new(la, cfg_a()).with_tap(tap.clone());
    let mut b = FramePort::new(lb, cfg_b());
    let mut frames = Vec::new();
    let requests = [
        Opcode::RC_SEND_ONLY,
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    ];
    let responses = [
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
    ];
    for (i, op) in requests.iter().enumerate() {
        let f = frame_ab(*op, 100 + i as u32, &payload(1024, i as u8));
        a.send(f.clone()).unwrap();
        frames.push((*op, f));
        assert!(b.recv_deadline(soon()).unwrap().is_some());
    }
    for (i, op) in responses.iter().enumerate() {
        let p = if op.info().unwrap().payload {
            payload(1021, i as u8)
        } else {
            Vec::new()
        };
        let mut h = hdrs(*op, 200 + i as u32, MAC_B, MAC_A, IP_B, IP_A);
        h.bth.ack_req = false;
        let f = h.encode(&p).unwrap();
        b.send(f.clone()).unwrap();
        frames.push((*op, f));
        assert!(a.recv_deadline(soon()).unwrap().is_some());
    }
    a.shutdown(soon());
    frames
}

#[test]
fn tshark_decodes_the_capture_as_roce() {
    let path = sock_path("cap").with_extension("pcap");
    let frames = capture_every_opcode(&path);
    // The file itself: every frame, in order, byte for byte.
    let bytes = std::fs::read(&path).unwrap();
    let recs: Vec<_> = PcapFile::parse(&bytes)
        .unwrap()
        .records()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(recs.len(), frames.len());
    for (r, (_, f)) in recs.iter().zip(&frames) {
        assert_eq!(r.data, &f[..]);
    }
    // The model's own `--decode-pcap` check passes it.
    let sum = crate::link::dump::dump_pcap(&bytes, None, &mut Vec::new()).unwrap();
    assert_eq!((sum.roce, sum.icrc_bad, sum.errors), (frames.len(), 0, 0));
    let out = match std::process::Command::new("tshark")
        .args(["-r"])
        .arg(&path)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "frame.protocols",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
            "-e",
            "_ws.expert.message",
        ])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "SKIPPED: tshark_decodes_the_capture_as_roce: tshark not runnable ({e}); \
                 .ci/setup installs it"
            );
            let _ = std::fs::remove_file(&path);
            return;
        }
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), frames.len(), "{text}");
    for (line, (op, f)) in lines.iter().zip(&frames) {
        let cols: Vec<&str> = line.split(',').collect();
        assert!(
            cols[0].ends_with("udp:infiniband") || cols[0].contains(":infiniband"),
            "{op}: not decoded as InfiniBand over UDP: {line}"
        );
        assert_eq!(cols[1], op.0.to_string(), "{op}: opcode: {line}");
        let psn = u32::from_be_bytes([0, f[42 + 9], f[42 + 10], f[42 + 11]]);
        assert_eq!(cols[2], psn.to_string(), "{op}: PSN: {line}");
        assert!(!line.to_lowercase().contains("malformed"), "{op}: {line}");
    }
    // The verbose dump: the Base Transport Header everywhere, nothing malformed.
    let v = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .arg("-V")
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&v.stdout);
    assert_eq!(
        v.matches("Base Transport Header").count(),
        frames.len(),
        "{v}"
    );
    assert!(!v.contains("Malformed"), "{v}");
    let _ = std::fs::remove_file(&path);
}
