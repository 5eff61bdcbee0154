//! The CM MADs of the shared Linux captures (`../shared/tools/nvmeof/pcaps/*.pcap` beside the
//! workspace): read with the model's pcap reader and RoCEv2 decoder, one UD SEND_ONLY to QP 1
//! per MAD; and what the in-memory tests of two `Cm`s share (a side's transport, the
//! settings, the two nodes and A's connect, the fuzzed applications' accept).

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;

use mlx5_sim::link::pcap::PcapFile;
use mlx5_sim::roce::{decode, Frame, Opcode};
use rdma_cm::conn::{ack_timeout, Accept, CmConfig, CmTransport, Connect, Peer, QpStep};
use rdma_cm::mad::MAD_LEN;
use rdma_cm::rdma_cm::{roce_flow_label, PortSpace};

/// One MAD as captured.
pub struct CapturedMad {
    /// Frame number (1-based, as tshark counts).
    pub frame: usize,
    /// The 256 bytes after the DETH.
    pub mad: Vec<u8>,
    /// The sender's IP address.
    pub src: IpAddr,
    /// The DETH's Q_Key.
    pub qkey: u32,
    /// The DETH's source QP.
    pub src_qp: u32,
}

/// The captures' directory: `../shared/tools/nvmeof/pcaps` beside the workspace (as CI lays
/// it out), or the directory `NVMEOF_PCAPS` names (for a worktree elsewhere).
fn pcap_dir() -> PathBuf {
    match std::env::var_os("NVMEOF_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/nvmeof/pcaps"),
    }
}

/// Every UD datagram to QP 1 of every capture, by file, or why there are none.
pub fn captured_mads() -> Result<Vec<(String, Vec<CapturedMad>)>, String> {
    let dir = pcap_dir();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no .pcap in {}", dir.display());
    let mut out = Vec::new();
    for path in names {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).map_err(|e| format!("{file}: {e}"))?;
        let pcap = PcapFile::parse(&bytes).map_err(|e| format!("{file}: {e}"))?;
        let mut mads = Vec::new();
        for (i, rec) in pcap.records().enumerate() {
            let rec = rec.map_err(|e| format!("{file}: {e}"))?;
            let frame = decode(rec.data).map_err(|e| format!("{file} frame {}: {e:?}", i + 1))?;
            let Frame::Roce(f) = frame else { continue };
            if f.hdrs.bth.dest_qp != 1 {
                continue;
            }
            assert_eq!(
                f.hdrs.bth.opcode,
                Opcode::UD_SEND_ONLY,
                "{file} frame {}",
                i + 1
            );
            let deth = f.hdrs.ext.deth.expect("UD SEND carries a DETH");
            mads.push(CapturedMad {
                src: f.hdrs.ip.src(),
                frame: i + 1,
                mad: f.payload.to_vec(),
                qkey: deth.q_key,
                src_qp: deth.src_qp,
            });
        }
        out.push((file, mads));
    }
    Ok(out)
}

/// Prints why a capture test did not run.
pub fn skipped(reason: &str) {
    eprintln!("\n========================================================");
    eprintln!("SKIPPED: {reason}");
    eprintln!("(the shared captures are not beside the workspace; set NVMEOF_PCAPS)");
    eprintln!("========================================================\n");
}

/// The QP moves and sent MADs of one side of an in-memory exchange; `fail_rtr` makes its
/// RTR moves fail.
#[derive(Default)]
pub struct Side {
    pub out: Vec<[u8; MAD_LEN]>,
    pub moves: Vec<(u32, QpStep)>,
    pub fail_rtr: bool,
}

impl CmTransport for Side {
    type QpError = u8;
    fn send_mad(&mut self, to: &Peer, mad: &[u8; MAD_LEN]) {
        assert_eq!(to.qpn, 1);
        self.out.push(*mad);
    }
    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), u8> {
        if self.fail_rtr && matches!(step, QpStep::Rtr(_)) {
            return Err(7);
        }
        self.moves.push((qpn, step));
        Ok(())
    }
}

impl Side {
    pub fn steps(&self, qpn: u32) -> Vec<QpStep> {
        self.moves
            .iter()
            .filter(|m| m.0 == qpn)
            .map(|m| m.1)
            .collect()
    }
}

/// The settings of a test CM: CA GUID `guid`, communication IDs from `seed`.
pub fn cfg(guid: u64, seed: u32) -> CmConfig {
    CmConfig {
        local_ca_guid: guid,
        ack_delay: 15,
        max_responder_resources: 16,
        max_initiator_depth: 16,
        tid_hi: guid as u32,
        comm_id_seed: seed,
    }
}

/// The fuzzed applications' accept, on QP `qpn`.
pub fn accept_on(qpn: u32) -> Accept<'static> {
    Accept {
        qpn,
        starting_psn: 1,
        responder_resources: 4,
        initiator_depth: 4,
        flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        private_data: &[],
    }
}

/// The IPv4-mapped GID of `ip`.
pub const fn gid_v4(ip: [u8; 4]) -> [u8; 16] {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
    ]
}
/// The active side: 10.0.0.2's QP 1.
pub const A: Peer = Peer {
    gid: gid_v4([10, 0, 0, 2]),
    qpn: 1,
};
/// The passive side: 10.0.0.1's QP 1.
pub const B: Peer = Peer {
    gid: gid_v4([10, 0, 0, 1]),
    qpn: 1,
};
/// B's port (rping's).
pub const PORT: u16 = 7174;
/// A's rdma_cm source port.
pub const SRC_PORT: u16 = 49743;
/// A's and B's RC QPs.
pub const QP_A: u32 = 0x20;
pub const QP_B: u32 = 0x30;

/// A's connect to `port`: Linux rdma_cm's values on RoCE (ACK delay 15, packet life time
/// 18), 3 retries.
pub fn params(port: u16, private_data: &[u8]) -> Connect<'_> {
    Connect {
        service_id: PortSpace::Tcp.service_id(port),
        qpn: QP_A,
        starting_psn: 0x11_1111,
        local_gid: A.gid,
        remote_gid: B.gid,
        flow_label: roce_flow_label(SRC_PORT, port),
        hop_limit: 64,
        traffic_class: 0,
        path_mtu: 3,
        pkey: 0xffff,
        responder_resources: 16,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 6,
        local_ack_timeout: ack_timeout(15, 18),
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 3,
        srq: false,
        flow_control: true,
        private_data,
    }
}
