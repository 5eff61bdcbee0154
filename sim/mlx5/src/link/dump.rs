//! `mlx5-sim --decode-pcap FILE [--local ADDR]`: one line per frame of a pcap.
//!
//! A RoCEv2 line: frame number, direction, source > destination IP, UDP source port, BTH opcode
//! name, destination QPN, PSN, AckReq, the AETH (syndrome decoded, MSN) where the opcode has
//! one, payload length, and `icrc=ok|bad`. A UD SEND to QP 1 (the GSI QP) carries a MAD: its
//! line goes on with the CM message it holds (`| CM REQ ...`, decoded by the `rdma-cm` crate)
//! or the MAD's class and attribute. Other frames get a short line. Direction is `out`
//! (sent by ADDR) or `in` (sent to ADDR) when `--local ADDR` (a MAC or an IP address) names the
//! capturing side, else `-`: a classic pcap records no direction. Exit status 1 when any RoCEv2
//! frame fails to decode or has a bad ICRC, 2 when the file cannot be read.

use std::io::{self, Write};
use std::net::IpAddr;
use std::process::ExitCode;

use super::pcap::{PcapError, PcapFile};
use crate::roce::frame::{decode, Frame, OtherFrame, RoceFrame};
use crate::roce::opcode::Opcode;
use crate::roce::ETHERTYPE_ARP;
use rdma_cm::msg::{msg_response, rej_reason, CmMsg};
use rdma_cm::rdma_cm::{CmaHdr, PortSpace};
use rdma_cm::{mad, CmMad};

/// Who captured: frames from it are `out`, frames to it `in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// By MAC address.
    Mac([u8; 6]),
    /// By IP address.
    Ip(IpAddr),
}

impl Local {
    /// Parses `aa:bb:cc:dd:ee:ff` or an IPv4/IPv6 address.
    pub fn parse(s: &str) -> Option<Local> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Some(Local::Ip(ip));
        }
        let parts: Vec<u8> = s
            .split(':')
            .map(|p| {
                (p.len() == 2)
                    .then(|| u8::from_str_radix(p, 16).ok())
                    .flatten()
            })
            .collect::<Option<_>>()?;
        Some(Local::Mac(parts.try_into().ok()?))
    }

    fn direction(
        &self,
        src_mac: &[u8; 6],
        dst_mac: &[u8; 6],
        ips: Option<(IpAddr, IpAddr)>,
    ) -> &'static str {
        let (from, to) = match self {
            Local::Mac(m) => (src_mac == m, dst_mac == m),
            Local::Ip(a) => match ips {
                Some((s, d)) => (s == *a, d == *a),
                None => (false, false),
            },
        };
        match (from, to) {
            (true, false) => "out",
            (false, true) => "in",
            _ => "-",
        }
    }
}

/// Counts from one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records in the file.
    pub frames: usize,
    /// RoCEv2 frames decoded.
    pub roce: usize,
    /// Of those, with a bad ICRC.
    pub icrc_bad: usize,
    /// Frames that claim IP/RoCEv2 but do not decode.
    pub errors: usize,
    /// Non-RoCE frames.
    pub other: usize,
    /// Records the capture cut short (not decoded).
    pub cut: usize,
    /// MADs (UD SENDs to QP 1) of the CM class.
    pub cm_mads: usize,
    /// Of those, not decodable as a CM message.
    pub cm_bad: usize,
}

impl Summary {
    /// Whether the file fails the check.
    pub fn failed(&self) -> bool {
        self.icrc_bad != 0 || self.errors != 0
    }
}

/// An error reading or printing.
#[derive(Debug)]
pub enum DumpError {
    /// The pcap is malformed.
    Pcap(PcapError),
    /// Writing the output failed.
    Io(io::Error),
}

impl From<io::Error> for DumpError {
    fn from(e: io::Error) -> Self {
        DumpError::Io(e)
    }
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The line for a RoCEv2 frame (without number and direction).
pub fn roce_line(f: &RoceFrame<'_>) -> String {
    let h = &f.hdrs;
    let aeth = match h.ext.aeth {
        Some(a) => format!(" aeth={} msn={}", a.kind(), a.msn),
        None => String::new(),
    };
    format!(
        "{} > {} sport={} {} qpn=0x{:06x} psn={} ackreq={}{} len={} icrc={}",
        h.ip.src(),
        h.ip.dst(),
        h.udp.src_port,
        h.bth.opcode,
        h.bth.dest_qp,
        h.bth.psn,
        h.bth.ack_req as u8,
        aeth,
        f.payload.len(),
        if f.icrc_ok() { "ok" } else { "bad" }
    )
}

/// The QP every MAD of the general services goes to (IBTA vol. 1 §13.5.1; Linux
/// `include/rdma/ib_verbs.h` `IB_QPT_GSI`).
const GSI_QPN: u32 = 1;

/// What a MAD holds, for the listing.
enum MadKind {
    /// A CM message (decoded) or ClassPortInfo of the CM class.
    Cm(String),
    /// A CM-class MAD that does not decode.
    CmBad(String),
    /// Another management class.
    Other(String),
}

/// The MAD of a RoCE frame: a UD SEND_ONLY to QP 1 (how MADs travel on RoCE: Linux
/// `drivers/infiniband/core/mad.c` `ib_post_send_mad` on the GSI QP), or None.
fn mad_of(f: &RoceFrame<'_>) -> Option<MadKind> {
    let h = &f.hdrs;
    if h.bth.opcode != Opcode::UD_SEND_ONLY || h.bth.dest_qp != GSI_QPN {
        return None;
    }
    let p = f.payload;
    if p.len() < mad::MAD_HDR_LEN {
        return Some(MadKind::Other(format!("MAD of {} bytes", p.len())));
    }
    let attr = u16::from_be_bytes([p[16], p[17]]);
    if p[1] != mad::MGMT_CLASS_CM {
        return Some(MadKind::Other(format!(
            "MAD class=0x{:02x} method=0x{:02x} attr=0x{attr:04x}",
            p[1], p[3]
        )));
    }
    if attr == mad::attr::CLASS_PORT_INFO {
        return Some(MadKind::Cm(format!(
            "CM ClassPortInfo method=0x{:02x}",
            p[3]
        )));
    }
    Some(match CmMad::decode(p) {
        Ok(m) => MadKind::Cm(cm_text(&m)),
        Err(e) => MadKind::CmBad(format!("CM MAD attr=0x{attr:04x} not decodable: {e:?}")),
    })
}

/// A service ID, with its rdma_cm port space and port when it is an IP-based one, and then the
/// active side's port from the rdma_cm header that starts such a request's private data (Linux
/// `drivers/infiniband/core/cma.c` `cma_format_hdr`).
fn service_id(s: u64, private_data: &[u8]) -> String {
    match PortSpace::from_service_id(s) {
        Some((ps, port)) => match CmaHdr::decode(private_data) {
            Ok(h) => format!(
                "sid=0x{s:016x} ({ps:?} port {port}) cma_src_port={}",
                h.src_port
            ),
            Err(e) => format!("sid=0x{s:016x} ({ps:?} port {port}) no cma_hdr: {e:?}"),
        },
        None => format!("sid=0x{s:016x}"),
    }
}

/// `CM <name> tid=.. comm=..` and the message's fields that name the connection and what it
/// carries (IBTA vol. 1 chapter 12 names; Linux `include/rdma/ibta_vol1_c12.h`).
fn cm_text(m: &CmMad) -> String {
    let ids = |local: u32, remote: u32| format!("comm=0x{local:08x} remote=0x{remote:08x}");
    let body = match &m.msg {
        CmMsg::Req(r) => format!(
            "comm=0x{:08x} {} qpn=0x{:06x} psn=0x{:06x} resp_res={} init_depth={} mtu={} \
             flow_label=0x{:05x}",
            r.local_comm_id,
            service_id(r.service_id, &r.private_data),
            r.local_qpn,
            r.starting_psn,
            r.responder_resources,
            r.initiator_depth,
            r.path_mtu,
            r.primary.flow_label
        ),
        CmMsg::Rep(r) => format!(
            "{} qpn=0x{:06x} psn=0x{:06x} resp_res={} init_depth={}",
            ids(r.local_comm_id, r.remote_comm_id),
            r.local_qpn,
            r.starting_psn,
            r.responder_resources,
            r.initiator_depth
        ),
        CmMsg::Rej(r) => format!(
            "{} reason={}{} of {}",
            ids(r.local_comm_id, r.remote_comm_id),
            r.reason,
            if r.reason == rej_reason::INVALID_SERVICE_ID {
                " (invalid service ID)"
            } else {
                ""
            },
            match r.message_rejected {
                msg_response::REQ => "REQ",
                msg_response::REP => "REP",
                _ => "other",
            }
        ),
        CmMsg::Mra(r) => format!(
            "{} timeout={}",
            ids(r.local_comm_id, r.remote_comm_id),
            r.service_timeout
        ),
        CmMsg::Rtu(r) => ids(r.local_comm_id, r.remote_comm_id),
        CmMsg::Drep(r) => ids(r.local_comm_id, r.remote_comm_id),
        CmMsg::Dreq(r) => format!(
            "{} qpn=0x{:06x}",
            ids(r.local_comm_id, r.remote_comm_id),
            r.remote_qpn_eecn
        ),
        CmMsg::SidrReq(r) => format!(
            "req=0x{:08x} {}",
            r.request_id,
            service_id(r.service_id, &r.private_data)
        ),
        CmMsg::SidrRep(r) => format!(
            "req=0x{:08x} status={} qpn=0x{:06x} qkey=0x{:08x}",
            r.request_id, r.status, r.qpn, r.qkey
        ),
    };
    format!("CM {} tid=0x{:016x} {body}", m.msg.name(), m.hdr.tid)
}

fn other_line(o: &OtherFrame) -> String {
    match (o.ethertype, o.ip) {
        (_, Some(ip)) => match ip.udp_ports {
            Some((s, d)) => format!("UDP {}:{s} > {}:{d}", ip.src, ip.dst),
            None => {
                let name = match ip.protocol {
                    1 => "ICMP",
                    6 => "TCP",
                    17 => "UDP",
                    58 => "ICMPv6",
                    _ => "IP",
                };
                format!("{name} proto={} {} > {}", ip.protocol, ip.src, ip.dst)
            }
        },
        (ETHERTYPE_ARP, None) => format!("ARP {} > {}", mac(&o.src), mac(&o.dst)),
        (t, None) => format!("ethertype=0x{t:04x} {} > {}", mac(&o.src), mac(&o.dst)),
    }
}

/// Prints one line per record of `bytes` (a pcap file) to `out`, then a summary line.
pub fn dump_pcap(
    bytes: &[u8],
    local: Option<Local>,
    out: &mut dyn Write,
) -> Result<Summary, DumpError> {
    let file = PcapFile::parse(bytes).map_err(DumpError::Pcap)?;
    let mut s = Summary::default();
    for (i, rec) in file.records().enumerate() {
        let n = i + 1;
        let rec = rec.map_err(DumpError::Pcap)?;
        s.frames += 1;
        if (rec.data.len() as u64) < rec.orig_len as u64 {
            s.cut += 1;
            writeln!(
                out,
                "{n:>5} -   captured {} of {} bytes: not decoded",
                rec.data.len(),
                rec.orig_len
            )?;
            continue;
        }
        let (dir, text) = match decode(rec.data) {
            Ok(Frame::Roce(f)) => {
                s.roce += 1;
                if !f.icrc_ok() {
                    s.icrc_bad += 1;
                }
                let h = &f.hdrs;
                let dir = local.map_or("-", |l| {
                    l.direction(&h.eth.src, &h.eth.dst, Some((h.ip.src(), h.ip.dst())))
                });
                let line = roce_line(&f);
                let text = match mad_of(&f) {
                    None => line,
                    Some(MadKind::Other(t)) => format!("{line} | {t}"),
                    Some(MadKind::Cm(t)) => {
                        s.cm_mads += 1;
                        format!("{line} | {t}")
                    }
                    Some(MadKind::CmBad(t)) => {
                        s.cm_mads += 1;
                        s.cm_bad += 1;
                        format!("{line} | {t}")
                    }
                };
                (dir, text)
            }
            Ok(Frame::Other(o)) => {
                s.other += 1;
                let dir = local.map_or("-", |l| {
                    l.direction(&o.src, &o.dst, o.ip.map(|ip| (ip.src, ip.dst)))
                });
                (dir, other_line(&o))
            }
            Err(e) => {
                s.errors += 1;
                ("-", format!("ERROR {e}"))
            }
        };
        writeln!(out, "{n:>5} {dir:<3} {text}")?;
    }
    writeln!(
        out,
        "{} frames: {} RoCEv2 ({} bad ICRC), {} not decodable, {} other, {} cut by the capture; \
         {} CM MADs ({} not decodable)",
        s.frames, s.roce, s.icrc_bad, s.errors, s.other, s.cut, s.cm_mads, s.cm_bad
    )?;
    Ok(s)
}

/// The `--decode-pcap` command; `args` are the words after `--decode-pcap`.
pub fn decode_pcap_main(args: &[String]) -> ExitCode {
    const USAGE: &str = "usage: mlx5-sim --decode-pcap FILE [--local MAC|IP]";
    let (path, local) = match args {
        [p] => (p, None),
        [p, flag, a] if flag == "--local" => match Local::parse(a) {
            Some(l) => (p, Some(l)),
            None => {
                eprintln!("mlx5-sim: --local: not a MAC or IP address: {a}\n{USAGE}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("mlx5-sim: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let stdout = io::stdout();
    let mut lock = stdout.lock();
    match dump_pcap(&bytes, local, &mut lock) {
        Ok(s) if s.failed() => ExitCode::FAILURE,
        Ok(_) => ExitCode::SUCCESS,
        Err(DumpError::Pcap(e)) => {
            let _ = lock.flush();
            eprintln!("mlx5-sim: {path}: {e}");
            ExitCode::from(2)
        }
        Err(DumpError::Io(e)) => {
            eprintln!("mlx5-sim: writing output: {e}");
            ExitCode::from(2)
        }
    }
}
