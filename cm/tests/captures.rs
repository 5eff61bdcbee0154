//! Every CM MAD two Linux hosts exchanged over rxe (NVMe-oF, `ib_write_bw -R`, a REJ for an
//! unknown service ID) decodes, and re-encodes byte for byte; the rdma_cm rules (service ID,
//! header, flow label) hold on each connection.

mod common;

use std::collections::BTreeMap;

use rdma_cm::mad::QP1_QKEY;
use rdma_cm::msg::rej_reason;
use rdma_cm::rdma_cm::{roce_flow_label, CmaAddr, CmaHdr, PortSpace};
use rdma_cm::{CmMad, CmMsg};

/// What the captures' README lists per file: (REQ, REP, RTU, DREQ, DREP, REJ).
fn expected(file: &str) -> Option<[usize; 6]> {
    match file {
        "nvmeof.pcap" => Some([3, 3, 3, 3, 3, 0]),
        "perftest_cm.pcap" => Some([2, 2, 2, 2, 2, 0]),
        "perftest_cm_rej.pcap" => Some([1, 0, 0, 0, 0, 1]),
        _ => None,
    }
}

#[test]
fn every_captured_cm_mad_round_trips_byte_for_byte() {
    let files = match common::captured_mads() {
        Ok(f) => f,
        Err(reason) => return common::skipped(&reason),
    };
    let mut total = 0;
    for (file, mads) in &files {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut reqs = Vec::new();
        for c in mads {
            assert_eq!(
                (c.qkey, c.src_qp),
                (QP1_QKEY, 1),
                "{file} frame {}",
                c.frame
            );
            let mad =
                CmMad::decode(&c.mad).unwrap_or_else(|e| panic!("{file} frame {}: {e:?}", c.frame));
            let again = mad.to_bytes().unwrap();
            assert_eq!(&again[..], &c.mad[..], "{file} frame {}", c.frame);
            *counts.entry(mad.msg.name()).or_default() += 1;
            check_connection(file, c.frame, &mad, &mut reqs);
        }
        total += mads.len();
        if let Some(want) = expected(file) {
            let got = ["REQ", "REP", "RTU", "DREQ", "DREP", "REJ"]
                .map(|k| counts.get(k).copied().unwrap_or(0));
            assert_eq!(got, want, "{file}: {counts:?}");
        }
        println!("{file}: {} CM MADs, {counts:?}", mads.len());
    }
    assert!(total >= 27, "{total} CM MADs in the captures");
}

/// The rdma_cm rules on each REQ, and that every later MAD of its exchange names it.
fn check_connection(file: &str, frame: usize, mad: &CmMad, reqs: &mut Vec<(u64, u32)>) {
    match &mad.msg {
        CmMsg::Req(req) => {
            let (ps, port) = PortSpace::from_service_id(req.service_id).unwrap();
            assert_eq!(ps, PortSpace::Tcp, "{file} frame {frame}");
            let cma = CmaHdr::decode(&req.private_data).unwrap();
            assert!(matches!(cma.src, CmaAddr::V4(_)), "{file} frame {frame}");
            assert_eq!(
                req.primary.flow_label,
                roce_flow_label(cma.src_port, port),
                "{file} frame {frame}"
            );
            reqs.push((mad.hdr.tid, req.local_comm_id));
        }
        CmMsg::Rep(rep) => {
            assert!(reqs.contains(&(mad.hdr.tid, rep.remote_comm_id)));
        }
        CmMsg::Rej(rej) => {
            assert_eq!(rej.reason, rej_reason::INVALID_SERVICE_ID);
            assert!(reqs.contains(&(mad.hdr.tid, rej.remote_comm_id)));
        }
        _ => {}
    }
}
