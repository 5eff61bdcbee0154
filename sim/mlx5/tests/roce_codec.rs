//! The RoCEv2 codec against genuine frames (the linuxpeer captures of two Linux rxe peers, kept
//! outside the repository in `../shared/tools/linuxpeer/pcaps`), and `mlx5-sim --decode-pcap`.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mlx5_sim::link::pcap::{PcapFile, PcapWriter};
use mlx5_sim::roce::{
    decode, Aeth, Bth, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, NakCode, Opcode, Reth, RoceHeaders,
    UdpHdr,
};

/// `../shared/tools/linuxpeer/pcaps` beside the clone (as CI lays it out), or the directory
/// `LINUXPEER_PCAPS` names (for a worktree elsewhere).
fn shared_pcaps() -> Option<Vec<PathBuf>> {
    let dir = match std::env::var_os("LINUXPEER_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/linuxpeer/pcaps")
        }
    };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        eprintln!(
            "SKIPPED: {} not found: the rxe captures are not beside this clone (set LINUXPEER_PCAPS)",
            dir.display()
        );
        return None;
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no pcaps in {}", dir.display());
    Some(v)
}

#[test]
fn every_rxe_frame_decodes_checks_its_icrc_and_re_encodes_identically() {
    let Some(files) = shared_pcaps() else { return };
    let mut total = 0;
    let mut opcodes = std::collections::BTreeSet::new();
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        let file = PcapFile::parse(&bytes).unwrap();
        let mut n_roce = 0;
        for (i, rec) in file.records().enumerate() {
            let rec = rec.unwrap();
            let what = format!("{} frame {}", path.display(), i + 1);
            assert_eq!(
                rec.data.len(),
                rec.orig_len as usize,
                "{what}: cut by the capture"
            );
            let f = match decode(rec.data) {
                Ok(Frame::Roce(f)) => f,
                Ok(Frame::Other(o)) => {
                    // Nothing that is UDP to 4791 may land here.
                    assert!(o
                        .ip
                        .is_none_or(|ip| ip.udp_ports.is_none_or(|p| p.1 != 4791)));
                    continue;
                }
                Err(e) => panic!("{what}: {e}"),
            };
            n_roce += 1;
            assert!(
                f.icrc_ok(),
                "{what}: ICRC 0x{:08x}, want 0x{:08x}",
                f.icrc,
                f.icrc_computed
            );
            assert_eq!(f.encode().unwrap(), rec.data, "{what}: re-encoding differs");
            // What the capture README states for every rxe frame.
            let h = &f.hdrs;
            assert_eq!(h.udp.checksum, 0, "{what}");
            assert_eq!(h.bth.p_key, 0xffff, "{what}");
            assert_eq!(h.bth.tver, 0, "{what}");
            match h.ip {
                IpHdr::V4(ip) => {
                    assert!(ip.dont_fragment && ip.ttl == 64 && ip.dscp == 0, "{what}")
                }
                IpHdr::V6(_) => panic!("{what}: the captures are IPv4"),
            }
            opcodes.insert(h.bth.opcode);
            // A flipped payload/header bit is caught by the ICRC.
            let mut bad = rec.data.to_vec();
            let at = bad.len() - 5;
            bad[at] ^= 0x80;
            match decode(&bad) {
                Ok(Frame::Roce(g)) => assert!(!g.icrc_ok(), "{what}: corruption not caught"),
                other => panic!("{what}: corrupted frame: {other:?}"),
            }
        }
        assert!(n_roce > 0, "{}: no RoCE frames", path.display());
        total += n_roce;
    }
    // 1,009 RoCE frames per the capture README.
    assert!(total >= 1009, "{total} RoCE frames");
    for op in [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::UD_SEND_ONLY,
    ] {
        assert!(opcodes.contains(&op), "{op} not seen");
    }
}

fn hdrs(op: Opcode, psn: u32, ext: ExtHdrs) -> RoceHeaders {
    let mut bth = Bth::new(op, 0x12, psn);
    bth.ack_req = op.info().unwrap().is_request();
    RoceHeaders {
        eth: EthHdr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
        },
        ip: IpHdr::V4(Ipv4Hdr {
            dscp: 0,
            ecn: 0,
            identification: psn as u16,
            dont_fragment: true,
            ttl: 64,
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        }),
        udp: UdpHdr {
            src_port: 0xc144,
            checksum: 0,
        },
        bth,
        ext,
    }
}

/// A pcap written by the model's own writer: a WRITE, its ACK, an RNR NAK, a PSN NAK, an ARP.
fn own_pcap() -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), false).unwrap();
    let reth = ExtHdrs {
        reth: Some(Reth {
            va: 0x1000,
            r_key: 0x77,
            dma_len: 100,
        }),
        ..Default::default()
    };
    let aeth = |a| ExtHdrs {
        aeth: Some(a),
        ..Default::default()
    };
    let frames = [
        hdrs(Opcode::RC_RDMA_WRITE_ONLY, 5, reth)
            .encode(&[0xab; 100])
            .unwrap(),
        hdrs(Opcode::RC_ACKNOWLEDGE, 5, aeth(Aeth::ack(31, 1)))
            .encode(&[])
            .unwrap(),
        hdrs(Opcode::RC_ACKNOWLEDGE, 6, aeth(Aeth::rnr_nak(12, 1)))
            .encode(&[])
            .unwrap(),
        hdrs(
            Opcode::RC_ACKNOWLEDGE,
            6,
            aeth(Aeth::nak(NakCode::PsnSequenceError, 1)),
        )
        .encode(&[])
        .unwrap(),
    ];
    for (i, f) in frames.iter().enumerate() {
        w.write_frame(Duration::from_millis(1000 + i as u64), f)
            .unwrap();
    }
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    w.write_frame(Duration::from_secs(2), &arp).unwrap();
    w.into_inner()
}

fn run_decode(bytes: &[u8], name: &str, extra: &[&str]) -> (i32, String) {
    let path = std::env::temp_dir().join(format!("mlx5-sim-{}-{name}.pcap", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mlx5-sim"))
        .arg("--decode-pcap")
        .arg(&path)
        .args(extra)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8(out.stdout).unwrap();
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
fn decode_pcap_lists_own_frames_and_exits_zero() {
    let (code, out) = run_decode(&own_pcap(), "good", &["--local", "02:00:00:00:00:01"]);
    print!("{out}");
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6);
    assert_eq!(
        lines[0],
        "    1 out 10.0.0.1 > 10.0.0.2 sport=49476 RC_RDMA_WRITE_ONLY qpn=0x000012 psn=5 ackreq=1 len=100 icrc=ok"
    );
    assert!(lines[1].contains(
        "RC_ACKNOWLEDGE qpn=0x000012 psn=5 ackreq=0 aeth=ACK(credit=31) msn=1 len=0 icrc=ok"
    ));
    assert!(lines[2].contains("aeth=RNR_NAK(timer=12) msn=1"));
    assert!(lines[3].contains("aeth=NAK(PSN_SEQUENCE_ERROR) msn=1"));
    assert_eq!(
        lines[4],
        "    5 out ARP 02:00:00:00:00:01 > ff:ff:ff:ff:ff:ff"
    );
    assert!(lines[5].starts_with("5 frames: 4 RoCEv2 (0 bad ICRC), 0 not decodable, 1 other"));
}

#[test]
fn decode_pcap_fails_on_a_corrupted_frame() {
    let good = own_pcap();
    // Flip one payload byte of the first frame (24-byte file header, 16-byte record header).
    let mut bad = good.clone();
    bad[24 + 16 + 80] ^= 1;
    let (code, out) = run_decode(&bad, "bad", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.lines().next().unwrap().ends_with("icrc=bad"), "{out}");
    assert!(out.contains("(1 bad ICRC)"), "{out}");
    // A frame that claims RoCEv2 but does not decode fails too: the ACK's opcode becomes 0x15.
    let mut undecodable = good.clone();
    // Second record's frame: file header, record header, the 174-byte WRITE (14 Ethernet + 20 IP
    // + 8 UDP + 12 BTH + 16 RETH + 100 payload + 4 ICRC), record header.
    let second = 24 + 16 + 174 + 16;
    undecodable[second + 42] = 0x15;
    let (code, out) = run_decode(&undecodable, "undecodable", &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ERROR unknown BTH opcode 0x15"), "{out}");
    // Not a pcap at all: exit 2.
    let (code, _) = run_decode(b"not a pcap file at all, no", "garbage", &[]);
    assert_eq!(code, 2);
}

#[test]
fn decode_pcap_passes_on_the_rxe_captures() {
    let Some(files) = shared_pcaps() else { return };
    for path in files {
        let out = Command::new(env!("CARGO_BIN_EXE_mlx5-sim"))
            .args([
                "--decode-pcap",
                path.to_str().unwrap(),
                "--local",
                "10.0.0.1",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {text}", path.display());
        assert!(
            text.contains("icrc=ok") && !text.contains("icrc=bad"),
            "{}",
            path.display()
        );
    }
}
