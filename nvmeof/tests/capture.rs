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
    Deviant(Deviation, Option<Response>),
}

struct Conn {
    queue: QueueId,
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

#[test]
fn replay_of_the_linux_session() {
    let mut t = target(1 << 30);
    let mut conns: HashMap<String, Conn> = HashMap::new();
    let mut checked = HashMap::<&str, usize>::new();
    for (ln, line) in SESSION
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
    {
        let f: Vec<&str> = line.split(' ').collect();
        let at = format!("session line {}: {line:.100}", ln + 1);
        match f[0] {
            "req" => {
                let acc = t.accept(&unhex(f[2])).expect(&at);
                let conn = Conn {
                    queue: acc.queue,
                    cmds: vec![],
                };
                conns.insert(f[1].to_string(), conn);
                // REP right after: stored on the connection through the next line.
                checked.insert("req", checked.get("req").unwrap_or(&0) + 1);
                let rep = acc.rep.to_bytes();
                conns.get_mut(f[1]).unwrap().cmds.push((
                    0xffff,
                    Pending::Resp(Response {
                        cqe: nvmeof::Cqe::from_bytes(rep[..16].try_into().unwrap()),
                        invalidate: None,
                    }),
                ));
            }
            "rep" => {
                let c = conns.get_mut(f[1]).unwrap();
                let Some((_, Pending::Resp(r))) = c.cmds.pop() else {
                    panic!("{at}")
                };
                assert_eq!(r.cqe.to_bytes()[..], unhex(f[2])[..16], "{at}");
            }
            "cmd" => {
                let c = conns.get_mut(f[1]).unwrap();
                let mut capsule = unhex(f[2]);
                if f[3] != "-" {
                    capsule.extend(data(f[3]));
                }
                let cid = u16::from_le_bytes([capsule[2], capsule[3]]);
                let mut staging = vec![0u8; STAGING_LEN];
                let step = t.submit(c.queue, &capsule, &mut staging).expect(&at);
                let dev = deviation(&capsule);
                let p = match (dev, step) {
                    (Some(Deviation::AnaLog), Step::Respond(r)) => {
                        Pending::Deviant(Deviation::AnaLog, Some(r))
                    }
                    (_, Step::Respond(r)) => Pending::Resp(r),
                    (_, Step::Transfer(tr)) => Pending::Xfer(tr, staging, dev),
                    (_, Step::Hold) => Pending::Held,
                };
                c.cmds.push((cid, p));
                *checked.entry("cmd").or_default() += 1;
            }
            "read" | "write" => {
                let host = data(f[2]);
                let c = conns.get_mut(f[1]).unwrap();
                let want = if f[0] == "read" {
                    Dir::FromHost
                } else {
                    Dir::ToHost
                };
                let i = c
                    .cmds
                    .iter()
                    .position(|(_, p)| match p {
                        Pending::Xfer(tr, _, _) => tr.dir == want,
                        Pending::Deviant(Deviation::AnaLog, _) => want == Dir::ToHost,
                        _ => false,
                    })
                    .expect(&at);
                let (cid, p) = c.cmds.remove(i);
                let (tr, mut staging, dev) = match p {
                    Pending::Xfer(tr, s, dev) => (tr, s, dev),
                    ana => {
                        // Linux's ANA log data: the core has none.
                        c.cmds.insert(i, (cid, ana));
                        continue;
                    }
                };
                assert_eq!(tr.remote.len as usize, host.len(), "{at}");
                let mut moved = host.clone();
                let q = c.queue;
                do_transfer(&mut t, &tr, &mut staging, &mut moved);
                if want == Dir::ToHost {
                    let (mut ours, mut linux) = (moved.clone(), host.clone());
                    // The discovery controller's Identify has no ANA fields to differ.
                    if dev == Some(Deviation::IdCtrlAna) && linux[111] == 1 {
                        mask_ana(&mut ours);
                        mask_ana(&mut linux);
                    }
                    if dev == Some(Deviation::IdNsAna) {
                        ours[92..96].fill(0);
                        linux[92..96].fill(0);
                    }
                    if dev == Some(Deviation::SmartCounters) {
                        ours[32..96].fill(0);
                        linux[32..96].fill(0);
                        // The core logged its refusal of the ANA log (Linux had no error).
                        assert_eq!(ours[176], 1, "{at}");
                        ours[176] = 0;
                    }
                    assert_same(&ours, &linux, &at);
                }
                let r = t.complete_transfer(q, tr.tag, true, &staging).expect(&at);
                c.cmds.insert(i, (cid, Pending::Resp(r)));
                *checked.entry(f[0]).or_default() += 1;
            }
            "rsp" => {
                let linux = unhex(f[2]);
                let cid = u16::from_le_bytes([linux[12], linux[13]]);
                let c = conns.get_mut(f[1]).unwrap();
                let i = c.cmds.iter().position(|(x, _)| *x == cid).expect(&at);
                let (_, p) = c.cmds.remove(i);
                let inval = (f[3] != "-").then(|| u32::from_str_radix(f[3], 16).unwrap());
                match p {
                    Pending::Resp(r) => {
                        assert_eq!(hex(&r.cqe.to_bytes()), hex(&linux), "{at}");
                        assert_eq!(r.invalidate, inval, "{at}");
                    }
                    Pending::Deviant(Deviation::AnaLog, Some(r)) => {
                        // Invalid field, DNR, More (in the error log: nvmet_set_error); the
                        // same head, queue and command.
                        assert_eq!(r.cqe.status, 0x6002, "{at}");
                        assert_eq!(r.cqe.to_bytes()[8..14], linux[8..14], "{at}");
                        assert_eq!(r.invalidate, inval, "{at}");
                    }
                    _ => panic!("{at}: no response from the core"),
                }
                *checked.entry("rsp").or_default() += 1;
            }
            "dreq" => {
                let c = conns.remove(f[1]).unwrap();
                // What is left: the held AERs (Linux never completes them on the wire).
                for (_, p) in &c.cmds {
                    assert!(matches!(p, Pending::Held), "{at}: command left");
                }
                t.close(c.queue);
            }
            _ => panic!("{at}"),
        }
    }
    assert!(conns.is_empty());
    assert_eq!((t.controllers(), t.queues()), (0, 0));
    // The whole session went through: 3 connections, 52 commands, 50 responses (the two
    // AERs stay held), 3 RDMA READs (two Connect data, the 128 KiB write) and 21 RDMA WRITEs
    // (the ANA log's is Linux's alone).
    let counts = ["req", "cmd", "rsp", "read", "write"].map(|k| checked[k]);
    assert_eq!(counts, [3, 52, 50, 3, 21]);
    // The data is on the disk where the host wrote it (4 KiB at 1 MiB, 128 KiB at 2 MiB).
    let d = t.disk(0).unwrap().bytes();
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
