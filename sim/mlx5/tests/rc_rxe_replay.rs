//! The RC transport against Linux soft-RoCE: the request and response streams of the linuxpeer
//! captures (two rxe peers, `../shared/tools/linuxpeer/pcaps`, outside the repository) replayed
//! into the model's state machines.
//!
//! - Responder: every request rxe's requester sent goes into [`Responder::receive`] in capture
//!   order; what the model answers (opcode, PSN, AETH syndrome and MSN, payload length, atomic
//!   original value) must be what rxe's responder answered, frame for frame — retransmitted
//!   duplicates included.
//! - Requester: the captured messages are rebuilt as work requests and posted to a
//!   [`Requester`]; fed rxe's responses, it must send the same request packets (first
//!   transmissions: opcode, PSN, AckReq, SE, RETH, ImmDt, IETH, AtomicETH, payload bytes) and
//!   complete every work request successfully.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;

use mlx5_sim::link::pcap::PcapFile;
use mlx5_sim::roce::requester::{ReqConfig, Requester, WorkRequest, WrOp};
use mlx5_sim::roce::responder::{RespConfig, Responder};
use mlx5_sim::roce::transport::{
    AccessFault, AtomicOp, Completions, LocalFault, RecvCompletion, RecvFault, RemoteAccess,
    ReqMemory, RespMemory, RxPacket, RxPayload, Tx, TxPayload, WcStatus,
};
use mlx5_sim::roce::{decode, psn_diff, Bth, ExtHdrs, Frame, OpKind, Opcode};

fn pcap_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("LINUXPEER_PCAPS") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/linuxpeer/pcaps")
        }
    };
    if dir.join("write.pcap").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: {} has no rxe captures (set LINUXPEER_PCAPS): RC replay against rxe not run",
            dir.display()
        );
        None
    }
}

/// One captured RC packet, owned.
#[derive(Clone, Debug)]
struct Pkt {
    bth: Bth,
    ext: ExtHdrs,
    payload: Vec<u8>,
}

impl Pkt {
    fn rx(&self) -> RxPacket<'_> {
        RxPacket {
            bth: self.bth,
            ext: &self.ext,
            payload: RxPayload::Bytes(&self.payload),
        }
    }
}

/// The RC packets of one requester → responder QP pair, both directions, in capture order.
#[derive(Default, Debug)]
struct Flow {
    /// `true` for a request (requester → responder).
    pkts: Vec<(bool, Pkt)>,
}

/// Flows keyed by (requester IP, responder IP, UDP source port).
fn flows(file: &str, dir: &std::path::Path) -> BTreeMap<(IpAddr, IpAddr, u16), Flow> {
    let bytes = std::fs::read(dir.join(file)).unwrap();
    let pcap = PcapFile::parse(&bytes).unwrap();
    let mut out: BTreeMap<(IpAddr, IpAddr, u16), Flow> = BTreeMap::new();
    for rec in pcap.records() {
        let rec = rec.unwrap();
        let Ok(Frame::Roce(f)) = decode(rec.data) else {
            continue;
        };
        assert!(f.icrc_ok());
        let info = f.hdrs.bth.opcode.info().unwrap();
        if info.transport != mlx5_sim::roce::Transport::Rc {
            continue;
        }
        let (s, d) = (f.hdrs.ip.src(), f.hdrs.ip.dst());
        let req = info.is_request();
        let key = if req {
            (s, d, f.hdrs.udp.src_port)
        } else {
            (d, s, f.hdrs.udp.src_port)
        };
        out.entry(key).or_default().pkts.push((
            req,
            Pkt {
                bth: f.hdrs.bth,
                ext: f.hdrs.ext,
                payload: f.payload.to_vec(),
            },
        ));
    }
    out
}

/// What a response says, for comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    opcode: Opcode,
    psn: u32,
    dest_qp: u32,
    ack_req: bool,
    aeth: Option<(u8, u32)>,
    orig: Option<u64>,
    len: usize,
}

fn answer(bth: &Bth, ext: &ExtHdrs, len: usize) -> Answer {
    Answer {
        opcode: bth.opcode,
        psn: bth.psn,
        dest_qp: bth.dest_qp,
        ack_req: bth.ack_req,
        aeth: ext.aeth.map(|a| (a.syndrome, a.msn)),
        orig: ext.atomic_ack_eth.map(|a| a.orig),
        len,
    }
}

struct Answers(Vec<Answer>);

impl Tx for Answers {
    fn send(&mut self, b: &Bth, e: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
        let mut buf = vec![0; p.len];
        (p.fill)(&mut buf)?;
        self.0.push(answer(b, e, p.len));
        Ok(())
    }
}

/// Memory that grants everything; atomic cells start at the values rxe's answers reveal.
#[derive(Default)]
struct Permissive {
    cells: HashMap<u64, u64>,
    recvs: u32,
}

impl RespMemory for Permissive {
    fn check(&mut self, _: u32, _: u64, _: u64, _: RemoteAccess) -> Result<(), AccessFault> {
        Ok(())
    }
    fn write(&mut self, _: u32, _: u64, _: RxPayload<'_>) -> Result<(), AccessFault> {
        Ok(())
    }
    fn read(&mut self, _: u32, _: u64, _: &mut [u8]) -> Result<(), AccessFault> {
        Ok(())
    }
    fn atomic(&mut self, _: u32, va: u64, op: AtomicOp) -> Result<u64, AccessFault> {
        let c = self.cells.get_mut(&va).expect("seeded cell");
        let cur = *c;
        *c = match op {
            AtomicOp::CmpSwap { compare, swap } if cur == compare => swap,
            AtomicOp::CmpSwap { .. } => cur,
            AtomicOp::FetchAdd { add } => cur.wrapping_add(add),
        };
        Ok(cur)
    }
    fn recv_ready(&mut self) -> bool {
        true
    }
    fn recv_write(&mut self, _: u32, _: RxPayload<'_>) -> Result<(), RecvFault> {
        Ok(())
    }
    fn invalidate(&mut self, _: u32) -> Result<(), AccessFault> {
        Ok(())
    }
}

impl Completions for Permissive {
    fn send_done(&mut self, _: u64, _: WcStatus) {
        unreachable!()
    }
    fn recv_done(&mut self, c: RecvCompletion) {
        assert_eq!(c.status, WcStatus::Success);
        self.recvs += 1;
    }
}

const FILES: [&str; 6] = [
    "rc_pingpong.pcap",
    "write.pcap",
    "read.pcap",
    "send.pcap",
    "atomic.pcap",
    "relay_host.pcap",
];

#[test]
fn rxe_requests_get_rxe_answers_from_the_responder() {
    let Some(dir) = pcap_dir() else { return };
    let mut compared = 0;
    for file in FILES {
        for (key, flow) in flows(file, &dir) {
            let reqs: Vec<&Pkt> = flow.pkts.iter().filter(|p| p.0).map(|p| &p.1).collect();
            let want: Vec<Answer> = flow
                .pkts
                .iter()
                .filter(|p| !p.0)
                .map(|(_, p)| answer(&p.bth, &p.ext, p.payload.len()))
                .collect();
            let (Some(first), Some(resp0)) = (reqs.first(), want.first()) else {
                continue;
            };
            let mut env = Permissive::default();
            // Seed each atomic cell with the value rxe answered the first atomic on it with.
            for r in &reqs {
                if let Some(a) = r.ext.atomic_eth {
                    let orig = want.iter().find(|w| w.psn == r.bth.psn && w.orig.is_some());
                    if let Some(o) = orig.and_then(|w| w.orig) {
                        env.cells.entry(a.va).or_insert(o);
                    }
                }
            }
            let cfg = RespConfig::new(resp0.dest_qp, 1024, first.bth.psn);
            let mut resp = Responder::new(cfg).unwrap();
            let mut got = Answers(Vec::new());
            for r in &reqs {
                resp.receive(0, &r.rx(), &mut env, &mut got);
            }
            assert_eq!(got.0.len(), want.len(), "{file} {key:?}");
            for (i, (g, w)) in got.0.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "{file} {key:?} answer {i}");
            }
            assert!(!resp.is_error());
            compared += want.len();
        }
    }
    eprintln!("compared {compared} rxe responses");
    assert!(compared > 100);
}

/// The requester's local buffers: message bytes by wr_id.
#[derive(Default)]
struct Local {
    bufs: HashMap<u64, Vec<u8>>,
    atomic: HashMap<u64, u64>,
    done: Vec<(u64, WcStatus)>,
}

impl ReqMemory for Local {
    fn gather(&mut self, wr: u64, off: u32, dst: &mut [u8]) -> Result<(), LocalFault> {
        let b = &self.bufs[&wr];
        dst.copy_from_slice(&b[off as usize..off as usize + dst.len()]);
        Ok(())
    }
    fn scatter(&mut self, wr: u64, off: u32, src: RxPayload<'_>) -> Result<(), LocalFault> {
        let RxPayload::Bytes(src) = src else {
            panic!("frames carry bytes")
        };
        let b = self.bufs.get_mut(&wr).unwrap();
        b[off as usize..off as usize + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn atomic_result(&mut self, wr: u64, orig: u64) -> Result<(), LocalFault> {
        self.atomic.insert(wr, orig);
        Ok(())
    }
}

impl Completions for Local {
    fn send_done(&mut self, wr: u64, status: WcStatus) {
        self.done.push((wr, status));
    }
    fn recv_done(&mut self, _: RecvCompletion) {
        unreachable!()
    }
}

struct Sent(Vec<Pkt>);

impl Tx for Sent {
    fn send(&mut self, b: &Bth, e: &ExtHdrs, p: TxPayload<'_>) -> Result<(), LocalFault> {
        let mut payload = vec![0; p.len];
        (p.fill)(&mut payload)?;
        self.0.push(Pkt {
            bth: *b,
            ext: *e,
            payload,
        });
        Ok(())
    }
}

/// Rebuilds the work requests of a request stream (first transmissions only).
fn work_requests(reqs: &[&Pkt]) -> Vec<(WorkRequest, Vec<u8>)> {
    let mut out: Vec<(WorkRequest, Vec<u8>)> = Vec::new();
    for p in reqs {
        let info = p.bth.opcode.info().unwrap();
        if info.position.is_start() {
            let id = out.len() as u64;
            let (op, len) = match info.kind {
                OpKind::Send => (
                    WrOp::Send {
                        imm: p.ext.imm_dt,
                        invalidate: p.ext.ieth,
                    },
                    0,
                ),
                OpKind::Write => {
                    let r = p.ext.reth.unwrap();
                    (
                        WrOp::Write {
                            raddr: r.va,
                            rkey: r.r_key,
                            imm: p.ext.imm_dt,
                        },
                        r.dma_len,
                    )
                }
                OpKind::ReadRequest => {
                    let r = p.ext.reth.unwrap();
                    (
                        WrOp::Read {
                            raddr: r.va,
                            rkey: r.r_key,
                        },
                        r.dma_len,
                    )
                }
                OpKind::Atomic => {
                    let a = p.ext.atomic_eth.unwrap();
                    let op = if p.bth.opcode == Opcode::RC_COMPARE_SWAP {
                        WrOp::CmpSwap {
                            raddr: a.va,
                            rkey: a.r_key,
                            compare: a.compare,
                            swap: a.swap_add,
                        }
                    } else {
                        WrOp::FetchAdd {
                            raddr: a.va,
                            rkey: a.r_key,
                            add: a.swap_add,
                        }
                    };
                    (op, 8)
                }
                k => panic!("request kind {k:?}"),
            };
            let wr = WorkRequest {
                wr_id: id,
                op,
                len,
                fence: false,
                solicited: p.bth.solicited,
            };
            let buf = if matches!(info.kind, OpKind::ReadRequest | OpKind::Atomic) {
                vec![0; len as usize]
            } else {
                Vec::new()
            };
            out.push((wr, buf));
        }
        let last = out.last_mut().expect("a message starts with FIRST / ONLY");
        if matches!(info.kind, OpKind::Send | OpKind::Write) {
            last.1.extend_from_slice(&p.payload);
            if info.position.is_end() {
                if let WrOp::Send { imm, invalidate } = &mut last.0.op {
                    *imm = p.ext.imm_dt;
                    *invalidate = p.ext.ieth;
                    last.0.len = last.1.len() as u32;
                }
                if let WrOp::Write { imm, .. } = &mut last.0.op {
                    *imm = p.ext.imm_dt;
                }
                last.0.solicited = p.bth.solicited;
            }
        }
    }
    out
}

/// Which message (counting FIRST / ONLY packets) the packet with `psn` starts.
fn work_index(sent: &[Pkt], psn: u32) -> usize {
    sent.iter()
        .take_while(|p| p.bth.psn != psn)
        .filter(|p| p.bth.opcode.info().unwrap().position.is_start())
        .count()
}

#[test]
fn rxe_messages_posted_to_the_requester_go_out_as_rxe_sent_them() {
    let Some(dir) = pcap_dir() else { return };
    let mut compared = 0;
    let mut values = 0;
    for file in FILES {
        for (key, flow) in flows(file, &dir) {
            // First transmissions: a request whose PSN was seen before is a retransmission.
            let mut high: Option<u32> = None;
            let mut reqs: Vec<&Pkt> = Vec::new();
            for (is_req, p) in &flow.pkts {
                if !*is_req {
                    continue;
                }
                if high.is_some_and(|h| psn_diff(p.bth.psn, h) <= 0) {
                    continue;
                }
                high = Some(p.bth.psn);
                reqs.push(p);
            }
            let Some(first) = reqs.first() else { continue };
            let mut cfg = ReqConfig::new(first.bth.dest_qp, 1024, first.bth.psn);
            cfg.ack_timeout = 0;
            cfg.max_rd_atomic = 128;
            let mut req = Requester::new(cfg).unwrap();
            let mut env = Local::default();
            let wrs = work_requests(&reqs);
            for (wr, buf) in &wrs {
                env.bufs.insert(wr.wr_id, buf.clone());
                req.post(*wr).unwrap();
            }
            let mut sent = Sent(Vec::new());
            req.pump(0, &mut env, &mut sent);
            for (is_req, p) in &flow.pkts {
                if !*is_req {
                    req.receive(0, &p.rx(), &mut env, &mut sent);
                }
            }
            assert_eq!(sent.0.len(), reqs.len(), "{file} {key:?}");
            for (i, (g, w)) in sent.0.iter().zip(&reqs).enumerate() {
                let what = format!("{file} {key:?} request {i}");
                assert_eq!(g.bth, w.bth, "{what}");
                assert_eq!(g.ext, w.ext, "{what}");
                assert_eq!(g.payload, w.payload, "{what}");
            }
            assert_eq!(
                env.done,
                (0..wrs.len() as u64)
                    .map(|i| (i, WcStatus::Success))
                    .collect::<Vec<_>>(),
                "{file} {key:?}"
            );
            // READ data and atomic values are what rxe's responses carried (first copies).
            let mut by_psn: HashMap<u32, &Pkt> = HashMap::new();
            for (is_req, p) in &flow.pkts {
                if !*is_req {
                    by_psn.entry(p.bth.psn).or_insert(p);
                }
            }
            for (i, (wr, _)) in wrs.iter().enumerate() {
                let psn = sent.0.iter().find(|p| {
                    p.bth.opcode.info().unwrap().position.is_start()
                        && work_index(&sent.0, p.bth.psn) == i
                });
                let psn = psn.unwrap().bth.psn;
                match wr.op {
                    WrOp::Read { .. } => {
                        let n = (wr.len as usize).div_ceil(1024).max(1) as u32;
                        let data: Vec<u8> = (0..n)
                            .flat_map(|k| by_psn[&((psn + k) & 0xff_ffff)].payload.clone())
                            .collect();
                        assert_eq!(env.bufs[&wr.wr_id], data, "{file} READ {i}");
                        values += 1;
                    }
                    WrOp::CmpSwap { .. } | WrOp::FetchAdd { .. } => {
                        let orig = by_psn[&psn].ext.atomic_ack_eth.unwrap().orig;
                        assert_eq!(env.atomic[&wr.wr_id], orig, "{file} atomic {i}");
                        values += 1;
                    }
                    _ => {}
                }
            }
            compared += reqs.len();
        }
    }
    eprintln!("compared {compared} rxe requests, {values} READ / atomic results");
    assert!(compared > 100 && values >= 80);
}
