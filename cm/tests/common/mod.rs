//! The CM MADs of the shared Linux captures (`../shared/tools/nvmeof/pcaps/*.pcap` beside the
//! workspace): read with the model's pcap reader and RoCEv2 decoder, one UD SEND_ONLY to QP 1
//! per MAD.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;

use mlx5_sim::link::pcap::PcapFile;
use mlx5_sim::roce::{decode, Frame, Opcode};
use rdma_cm::CmMsg;

/// A message's name, as the captures' README and tshark write it.
pub fn kind(m: &CmMsg) -> &'static str {
    match m {
        CmMsg::Req(_) => "REQ",
        CmMsg::Mra(_) => "MRA",
        CmMsg::Rej(_) => "REJ",
        CmMsg::Rep(_) => "REP",
        CmMsg::Rtu(_) => "RTU",
        CmMsg::Dreq(_) => "DREQ",
        CmMsg::Drep(_) => "DREP",
        CmMsg::SidrReq(_) => "SIDR_REQ",
        CmMsg::SidrRep(_) => "SIDR_REP",
    }
}

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
