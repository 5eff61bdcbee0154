//! The RoCEv2 codec against genuine frames (the linuxpeer captures of two Linux rxe peers, kept
//! outside the repository in `../shared/tools/linuxpeer/pcaps`), and `mlx5-sim --decode-pcap`.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mlx5_sim::link::pcap::{PcapFile, PcapWriter};
use mlx5_sim::roce::{
    decode, Aeth, Bth, Deth, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, NakCode, Opcode, Reth,
    RoceHeaders, UdpHdr,
};
use rdma_cm::msg::{msg_response, rej_reason, Rej, Rtu, SidrReq};
use rdma_cm::rdma_cm::{CmaAddr, CmaHdr, PortSpace, CMA_HDR_LEN};
use rdma_cm::{mad, CmMad, CmMsg};

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

/// A UD SEND_ONLY to QP 1 from QP 1 carrying `mad` (how MADs travel on RoCE).
fn mad_frame(psn: u32, mad: &[u8]) -> Vec<u8> {
    let ext = ExtHdrs {
        deth: Some(Deth {
            q_key: mad::QP1_QKEY,
            resv8: 0,
            src_qp: 1,
        }),
        ..Default::default()
    };
    let mut h = hdrs(Opcode::UD_SEND_ONLY, psn, ext);
    h.bth.dest_qp = 1;
    h.encode(mad).unwrap()
}

/// `--decode-pcap` names each CM MAD on QP 1 with its fields (a SIDR_REQ with rdma_cm's header,
/// a REJ for an unknown service ID, an RTU), lists a MAD of another class by class and
/// attribute, and counts a CM MAD that does not decode (an attribute the CM has not) without
/// failing the RoCE check.
#[test]
fn decode_pcap_names_cm_mads() {
    let mut pd = [0u8; rdma_cm::msg::SIDR_REQ_PRIVATE_DATA_LEN];
    let mut cma = [0u8; CMA_HDR_LEN];
    CmaHdr {
        src_port: 40342,
        src: CmaAddr::V4([10, 0, 0, 1]),
        dst: CmaAddr::V4([10, 0, 0, 2]),
    }
    .encode(&mut cma);
    pd[..CMA_HDR_LEN].copy_from_slice(&cma);
    let sidr = CmMsg::SidrReq(SidrReq {
        request_id: 0x1234_5678,
        pkey: 0xffff,
        service_id: PortSpace::Udp.service_id(7174),
        private_data: pd,
    });
    let rej = CmMsg::Rej(Rej {
        local_comm_id: 0,
        remote_comm_id: 0x9c24_9cef,
        message_rejected: msg_response::REQ,
        reject_info_length: 0,
        reason: rej_reason::INVALID_SERVICE_ID,
        ari: [0; rdma_cm::msg::REJ_ARI_LEN],
        private_data: [0; rdma_cm::msg::REJ_PRIVATE_DATA_LEN],
    });
    let rtu = CmMsg::Rtu(Rtu {
        local_comm_id: 0xdbb3_52a9,
        remote_comm_id: 0x145a_07eb,
        private_data: [0; rdma_cm::msg::RTU_PRIVATE_DATA_LEN],
    });
    let mut w = PcapWriter::new(Vec::new(), false).unwrap();
    let mut mads: Vec<Vec<u8>> = [sidr, rej, rtu]
        .iter()
        .map(|m| CmMad::new(0x2_a952_b3db, *m).to_bytes().unwrap().to_vec())
        .collect();
    // A subnet-management MAD (class 0x01), and a CM MAD of attribute 0x0030.
    let mut smp = mads[2].clone();
    smp[1] = 0x01;
    let mut odd = mads[2].clone();
    odd[16..18].copy_from_slice(&0x0030u16.to_be_bytes());
    mads.extend([smp, odd]);
    for (i, m) in mads.iter().enumerate() {
        let f = mad_frame(i as u32, m);
        w.write_frame(Duration::from_millis(i as u64), &f).unwrap();
    }
    let (code, out) = run_decode(&w.into_inner(), "mads", &[]);
    print!("{out}");
    assert_eq!(code, 0, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with(
        "UD_SEND_ONLY qpn=0x000001 psn=0 ackreq=1 len=256 icrc=ok | CM SIDR_REQ \
         tid=0x00000002a952b3db req=0x12345678 sid=0x0000000001111c06 (Udp port 7174) \
         cma_src_port=40342"
    ));
    assert!(lines[1].ends_with(
        "| CM REJ tid=0x00000002a952b3db comm=0x00000000 remote=0x9c249cef reason=8 \
         (invalid service ID) of REQ"
    ));
    assert!(lines[2].ends_with("| CM RTU tid=0x00000002a952b3db comm=0xdbb352a9 remote=0x145a07eb"));
    assert!(lines[3].ends_with("| MAD class=0x01 method=0x03 attr=0x0014"));
    assert!(lines[4].ends_with("| CM MAD attr=0x0030 not decodable: Attribute(48)"));
    assert_eq!(
        lines[5],
        "5 frames: 5 RoCEv2 (0 bad ICRC), 0 not decodable, 0 other, 0 cut by the capture; \
         4 CM MADs (1 not decodable)"
    );
}

/// The CM MADs of the Linux captures of rdma_cm (`../shared/tools/nvmeof/pcaps`: NVMe-oF,
/// `ib_write_bw -R`, a REJ for an unknown service ID) are each named, as their README lists
/// them.
#[test]
fn decode_pcap_names_the_captured_cm_mads() {
    let dir = match std::env::var_os("NVMEOF_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/nvmeof/pcaps")
        }
    };
    for (file, want) in [
        ("nvmeof.pcap", [3, 3, 3, 3, 3, 0]),
        ("perftest_cm.pcap", [2, 2, 2, 2, 2, 0]),
        ("perftest_cm_rej.pcap", [1, 0, 0, 0, 0, 1]),
    ] {
        let path = dir.join(file);
        if !path.exists() {
            eprintln!("SKIPPED: {} not found (set NVMEOF_PCAPS)", path.display());
            return;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_mlx5-sim"))
            .arg("--decode-pcap")
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{file}: {text}");
        let got = ["REQ", "REP", "RTU", "DREQ", "DREP", "REJ"].map(|k| {
            text.lines()
                .filter(|l| l.contains(&format!("| CM {k} ")))
                .count()
        });
        assert_eq!(got, want, "{file}");
        let n: usize = want.iter().sum();
        assert!(
            text.contains(&format!("; {n} CM MADs (0 not decodable)")),
            "{file}: {text}"
        );
    }
}
