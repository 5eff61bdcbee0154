//! Replays the whole session of the shared capture `nvmeof.pcap` (discovery, connect, I/O,
//! disconnect of a Linux 6.1 host against Linux 6.1 nvmet-rdma) against the core: every
//! command capsule of the host goes in, and the core's responses (CQE bytes, the rkey to
//! invalidate), its REP private data and the data it moves must be Linux's, byte for byte,
//! but for the deviations listed in [`Deviation`].

mod common;

use std::collections::HashMap;

use common::*;
use nvmeof::exec::STAGING_LEN;
use nvmeof::{Dir, QueueId, Response, Step, Transfer};

const SESSION: &str = include_str!("data/nvmeof_session.txt");

/// Where the core answers differently from Linux's target, on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deviation {
    /// The ANA log page (LID 0x0c): the core does not report asymmetric namespace access
    /// (a single-port appliance), so a host would not ask; Linux's target answers it. The
    /// core answers it as Linux answers a log page it does not have: invalid field, DNR,
    /// logged.
    AnaLog,
    /// Identify Controller of the NVM controller: the same but for the ANA fields (CMIC bit
    /// 3, OAES bit 11, ANATT, ANACAP, ANAGRPMAX, NANAGRPID).
    IdCtrlAna,
    /// Identify Namespace: the same but for ANAGRPID (no ANA group).
    IdNsAna,
    /// The SMART log: Linux counts the block device's I/O, including its own kernel's
    /// partition scan of null_blk before the host came; the core counts the host's. And the
    /// core's error count has the ANA log's refusal.
    SmartCounters,
}

/// A command of the session in the core.
enum Pending {
    Resp(Response),
    Xfer(Transfer, Vec<u8>, Option<Deviation>),
    Held,
    /// The ANA log's refusal.
    Deviant(Response),
}

struct Conn {
    queue: QueueId,
    /// The REP private data of the core.
    rep: [u8; 32],
    /// Commands by cid, in submission order.
    cmds: Vec<(u16, Pending)>,
}

fn deviation(sqe: &[u8]) -> Option<Deviation> {
    match (sqe[0], sqe[40]) {
        (0x02, 0x0c) => Some(Deviation::AnaLog),
        (0x02, 0x02) => Some(Deviation::SmartCounters),
        (0x06, 0x01) => Some(Deviation::IdCtrlAna),
        (0x06, 0x00) => Some(Deviation::IdNsAna),
        _ => None,
    }
}

/// Offsets of the ANA fields of `struct nvme_id_ctrl` (`include/linux/nvme.h`): CMIC, OAES
/// (its second byte), ANATT, ANACAP, ANAGRPMAX, NANAGRPID.
fn mask_ana(id: &mut [u8]) {
    id[76] &= !(1 << 3);
    id[93] &= !(1 << 3);
    id[342..352].fill(0);
}

/// The core fed the session line by line, and what it answered.
struct Replay {
    t: nvmeof::Target<Disk>,
    conns: HashMap<String, Conn>,
    counts: HashMap<&'static str, usize>,
}

impl Replay {
    fn line(&mut self, f: &[&str], at: &str) {
        match f[0] {
            "req" => self.req(f, at),
            "rep" => {
                let rep = self.conns[f[1]].rep;
                assert_eq!(rep[..], unhex(f[2])[..], "{at}");
            }
            "cmd" => self.cmd(f, at),
            "read" => self.transfer(f, Dir::FromHost, at),
            "write" => self.transfer(f, Dir::ToHost, at),
            "rsp" => self.rsp(f, at),
            "dreq" => {
                let c = self.conns.remove(f[1]).unwrap();
                // What is left: the held AERs (Linux never completes them on the wire).
                for (_, p) in &c.cmds {
                    assert!(matches!(p, Pending::Held), "{at}: command left");
                }
                self.t.close(c.queue);
            }
            _ => panic!("{at}"),
        }
        let kind = ["req", "cmd", "read", "write", "rsp"]
            .into_iter()
            .find(|k| *k == f[0]);
        if let Some(k) = kind {
            *self.counts.entry(k).or_default() += 1;
        }
    }

    fn req(&mut self, f: &[&str], at: &str) {
        let acc = self.t.accept(&unhex(f[2])).expect(at);
        let conn = Conn {
            queue: acc.queue,
            rep: acc.rep.to_bytes(),
            cmds: vec![],
        };
        self.conns.insert(f[1].to_string(), conn);
    }

    fn cmd(&mut self, f: &[&str], at: &str) {
        let c = self.conns.get_mut(f[1]).unwrap();
        let mut capsule = unhex(f[2]);
        if f[3] != "-" {
            capsule.extend(data(f[3]));
        }
        let cid = u16::from_le_bytes([capsule[2], capsule[3]]);
        let mut staging = vec![0u8; STAGING_LEN];
        let step = self.t.submit(c.queue, &capsule, &mut staging).expect(at);
        let dev = deviation(&capsule);
        let p = match (dev, step) {
            (Some(Deviation::AnaLog), Step::Respond(r)) => Pending::Deviant(r),
            (_, Step::Respond(r)) => Pending::Resp(r),
            (_, Step::Transfer(tr)) => Pending::Xfer(tr, staging, dev),
            (_, Step::Hold) => Pending::Held,
        };
        c.cmds.push((cid, p));
    }

    /// An RDMA READ (`FromHost`) or WRITE (`ToHost`) of the session: the first command of
    /// the connection waiting for one in that direction does it, and what the core moves
    /// to the host must be Linux's bytes.
    fn transfer(&mut self, f: &[&str], want: Dir, at: &str) {
        let host = data(f[2]);
        let c = self.conns.get_mut(f[1]).unwrap();
        let i = c
            .cmds
            .iter()
            .position(|(_, p)| match p {
                Pending::Xfer(tr, _, _) => tr.dir == want,
                Pending::Deviant(_) => want == Dir::ToHost,
                _ => false,
            })
            .expect(at);
        // Linux's ANA log data: the core has none.
        if matches!(c.cmds[i].1, Pending::Deviant(_)) {
            return;
        }
        let Pending::Xfer(tr, mut staging, dev) =
            std::mem::replace(&mut c.cmds[i].1, Pending::Held)
        else {
            unreachable!()
        };
        assert_eq!(tr.remote.len as usize, host.len(), "{at}");
        let mut moved = host.clone();
        let q = c.queue;
        do_transfer(&mut self.t, &tr, &mut staging, &mut moved);
        if want == Dir::ToHost {
            let (mut ours, mut linux) = (moved, host);
            mask_deviation(dev, &mut ours, &mut linux, at);
            assert_same(&ours, &linux, at);
        }
        let r = self
            .t
            .complete_transfer(q, tr.tag, true, &staging)
            .expect(at);
        self.conns.get_mut(f[1]).unwrap().cmds[i].1 = Pending::Resp(r);
    }

    fn rsp(&mut self, f: &[&str], at: &str) {
        let linux = unhex(f[2]);
        let cid = u16::from_le_bytes([linux[12], linux[13]]);
        let c = self.conns.get_mut(f[1]).unwrap();
        let i = c.cmds.iter().position(|(x, _)| *x == cid).expect(at);
        let (_, p) = c.cmds.remove(i);
        let inval = (f[3] != "-").then(|| u32::from_str_radix(f[3], 16).unwrap());
        match p {
            Pending::Resp(r) => {
                assert_eq!(hex(&r.cqe.to_bytes()), hex(&linux), "{at}");
                assert_eq!(r.invalidate, inval, "{at}");
            }
            Pending::Deviant(r) => {
                // Invalid field, DNR, More (in the error log: nvmet_set_error); the same
                // head, queue and command.
                assert_eq!(r.cqe.status, 0x6002, "{at}");
                assert_eq!(r.cqe.to_bytes()[8..14], linux[8..14], "{at}");
                assert_eq!(r.invalidate, inval, "{at}");
            }
            _ => panic!("{at}: no response from the core"),
        }
    }
}

/// Clears, in both, the bytes a deviation makes differ.
fn mask_deviation(dev: Option<Deviation>, ours: &mut [u8], linux: &mut [u8], at: &str) {
    match dev {
        // The discovery controller's Identify has no ANA fields to differ.
        Some(Deviation::IdCtrlAna) if linux[111] == 1 => {
            mask_ana(ours);
            mask_ana(linux);
        }
        Some(Deviation::IdNsAna) => {
            ours[92..96].fill(0);
            linux[92..96].fill(0);
        }
        Some(Deviation::SmartCounters) => {
            ours[32..96].fill(0);
            linux[32..96].fill(0);
            // The core logged its refusal of the ANA log (Linux had no error).
            assert_eq!(ours[176], 1, "{at}");
            ours[176] = 0;
        }
        _ => {}
    }
}

#[test]
fn replay_of_the_linux_session() {
    let mut r = Replay {
        t: target(1 << 30),
        conns: HashMap::new(),
        counts: HashMap::new(),
    };
    for (ln, line) in SESSION.lines().enumerate() {
        if !line.starts_with('#') {
            let f: Vec<&str> = line.split(' ').collect();
            r.line(&f, &format!("session line {}: {line:.100}", ln + 1));
        }
    }
    assert!(r.conns.is_empty());
    assert_eq!((r.t.controllers(), r.t.queues()), (0, 0));
    // The whole session went through: 3 connections, 52 commands, 50 responses (the two
    // AERs stay held), 3 RDMA READs (two Connect data, the 128 KiB write) and 23 RDMA WRITEs
    // (two of them, the ANA logs, Linux's alone).
    let counts = ["req", "cmd", "rsp", "read", "write"].map(|k| r.counts[k]);
    assert_eq!(counts, [3, 52, 50, 3, 23]);
    // The data is on the disk where the host wrote it (4 KiB at 1 MiB, 128 KiB at 2 MiB).
    let d = r.t.disk(0).unwrap().bytes();
    assert_eq!(d[1 << 20..(1 << 20) + 4096], pattern("pattern4k")[..]);
    assert_eq!(d[2 << 20..(2 << 20) + 131072], pattern("pattern128k")[..]);
}

/// Equal bytes, or a panic naming the differing offsets.
fn assert_same(ours: &[u8], linux: &[u8], at: &str) {
    let diff: Vec<String> = (0..ours.len().max(linux.len()))
        .filter(|&i| ours.get(i) != linux.get(i))
        .map(|i| format!("{i}: {:02x?} vs Linux {:02x?}", ours.get(i), linux.get(i)))
        .collect();
    assert!(
        diff.is_empty(),
        "{at}: {} bytes differ: {:?}",
        diff.len(),
        &diff[..diff.len().min(40)]
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
