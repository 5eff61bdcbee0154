//! Loopback RDMA WRITE payload moves: the model joins the copies of consecutive packets of one
//! message (datapath/rc `PendingMove`) and keeps one key translation per run of packets
//! (`WriteXlat`). The bytes that land must still be those of one copy per packet, in PSN
//! order, whatever the layout: overlapping source and destination, a destination key whose
//! pages are scattered on the bus, a message longer than one batch of packets.
//!
//! And the translations kept between messages: a WRITE's rkey translation and a one-entry
//! gather list's pieces are reused only while the key table's generation stands (datapath/rc
//! `WriteXlat`, `LastGather`), so a key destroyed between two messages fails the second
//! exactly as it would have without them, and nothing moves.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{cqe, create_mkey_in, create_mkey_out, mkey, wqe};
use mlx5_sim::roce::requester::ReqCounters;
use mlx5_sim::roce::responder::RespCounters;
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;
/// The path MTU `Env::connect_local` sets (`qpc.mtu` 3).
const MTU: usize = 1024;

struct Pair {
    env: Env,
    a: Qp,
    b: Qp,
    scq: Cq,
    rcq: Cq,
}

fn pair() -> Pair {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let scq = env.cq(6);
    let rcq = env.cq(6);
    let a = env.qp(&scq, &rcq, 6, 5);
    let b = env.qp(&scq, &rcq, 6, 5);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    Pair {
        env,
        a,
        b,
        scq,
        rcq,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(29)
                .wrapping_add(seed ^ (i >> 8) as u8)
        })
        .collect()
}

/// Posts a signaled RDMA WRITE of `len` bytes and returns its completion.
fn post_write(p: &mut Pair, (src, lkey): (u64, u32), (dst, rkey): (u64, u32), len: usize) -> Cqe {
    p.env.post_send(
        &mut p.a,
        wqe::opcode::RDMA_WRITE,
        CE,
        0,
        &[&raddr_seg(dst, rkey), &dseg(len as u32, lkey, src)],
    );
    p.env
        .poll_cq(&mut p.scq)
        .expect("loopback completes at the doorbell")
}

/// Posts a signaled RDMA WRITE of `len` bytes and checks its successful completion.
fn write(p: &mut Pair, src: (u64, u32), dst: (u64, u32), len: usize) {
    let c = post_write(p, src, dst, len);
    assert_eq!(c.opcode(), cqe::opcode::REQ, "syndrome {:#x}", c.syndrome());
}

/// A WRITE within one buffer, to 1 MTU above its source: packet k reads what packet k - 1
/// wrote, so the first MTU of the source repeats (joining the packets' copies into one memmove
/// would shift the whole source instead). Then the other way (destination below the source),
/// where each packet reads bytes no earlier packet wrote.
#[test]
fn overlapping_write_lands_as_its_packets_do() {
    let mut p = pair();
    let n = 6 * MTU;
    let buf = p.env.alloc(n + MTU);
    let key = p.env.mkey(buf, (n + MTU) as u64, LR | LW | RW);
    let orig = pattern(n + MTU, 3);

    p.env.write(buf, &orig);
    write(&mut p, (buf, key), (buf + MTU as u64, key), n);
    let mut want = orig.clone();
    for k in 0..n / MTU {
        want.copy_within(k * MTU..(k + 1) * MTU, (k + 1) * MTU);
    }
    assert_eq!(p.env.read(buf, n + MTU), want, "upward overlap");
    assert_eq!(&want[MTU..2 * MTU], &orig[..MTU]);
    assert_eq!(&want[n..n + MTU], &orig[..MTU]);

    p.env.write(buf, &orig);
    write(&mut p, (buf + MTU as u64, key), (buf, key), n);
    let mut want = orig.clone();
    for k in 0..n / MTU {
        want.copy_within((k + 1) * MTU..(k + 2) * MTU, k * MTU);
    }
    assert_eq!(p.env.read(buf, n + MTU), want, "downward overlap");
    assert_eq!(&want[..n], &orig[MTU..]);
}

/// The destination key's pages are in reverse bus order (and the WRITE starts mid-page): each
/// packet lands in the pages its IOVA range maps to.
#[test]
fn write_through_scattered_pages_lands_in_each() {
    let mut p = pair();
    let pages = 6usize;
    let bus = p.env.alloc(pages * 4096);
    let iova = 0x7_0000_0000u64;
    let mut i = p
        .env
        .mkey_input(p.env.pd, iova, (pages * 4096) as u64, LR | LW | RW, 0x42);
    for k in 0..pages {
        let e = (bus + ((pages - 1 - k) * 4096) as u64) | mkey::MTT_PRESENT;
        let at = create_mkey_in::BYTES + 8 * k;
        i[at..at + 8].copy_from_slice(&e.to_be_bytes());
    }
    let d = p.env.raw.exec(&i, 16);
    d.ok();
    let rkey = mkey::from_index(d.get(create_mkey_out::MKEY_INDEX), 0x42);

    let len = 4 * 4096 + 300;
    let src = p.env.alloc(len);
    let lkey = p.env.mkey(src, len as u64, LR);
    let data = pattern(len, 11);
    p.env.write(src, &data);
    p.env.write(bus, &vec![0u8; pages * 4096]);
    let off = 1000usize;
    write(&mut p, (src, lkey), (iova + off as u64, rkey), len);

    let mut want = vec![0u8; pages * 4096];
    for (j, &b) in data.iter().enumerate() {
        let v = off + j; // offset in the key's IOVA range
        let page = v / 4096;
        want[(pages - 1 - page) * 4096 + v % 4096] = b;
    }
    assert_eq!(p.env.read(bus, pages * 4096), want);
}

/// A message of 300 packets: several batches of loopback packets and a full window of
/// unacknowledged PSNs; every byte lands, and the next message after it too.
#[test]
fn long_write_across_batches_is_byte_exact() {
    let mut p = pair();
    let len = 300 * MTU + 17;
    let src = p.env.alloc(len);
    let dst = p.env.alloc(len + 64);
    let lkey = p.env.mkey(src, len as u64, LR);
    let rkey = p.env.mkey(dst, (len + 64) as u64, LW | RW);
    let data = pattern(len, 5);
    p.env.write(src, &data);
    write(&mut p, (src, lkey), (dst + 32, rkey), len);
    assert_eq!(p.env.read(dst + 32, len), data);
    assert_eq!(p.env.read(dst, 32), vec![0u8; 32], "nothing before");
    assert_eq!(
        p.env.read(dst + 32 + len as u64, 32),
        vec![0u8; 32],
        "nothing after"
    );

    let again = pattern(len, 9);
    p.env.write(src, &again);
    write(&mut p, (src, lkey), (dst + 32, rkey), len);
    assert_eq!(p.env.read(dst + 32, len), again);
}

/// The transport counters of QP `qpn` (requester, responder).
fn rc_counters(p: &Pair, qpn: u32) -> (ReqCounters, RespCounters) {
    p.env
        .raw
        .dev
        .with_hca(|h| h.rc_counters(qpn))
        .expect("an RC QP")
}

/// The loopback queue keeps the MIDDLE packets of a message that follow each other in one
/// entry (wire.rs `RefPacket::more`), but they are still packets one by one: a message of 150
/// packets (more than one entry holds) is 150 packets sent, 150 executed in sequence by the
/// responder, no duplicate, nothing out of sequence, an ACK for the AckReq packets, and the
/// bytes of every packet where they belong. Twice, so the second message's PSNs continue.
#[test]
fn packets_sharing_a_queue_entry_are_each_received() {
    let mut p = pair();
    let npkts = 150u64;
    let len = npkts as usize * MTU;
    let src = p.env.alloc(len);
    let dst = p.env.alloc(len);
    let lkey = p.env.mkey(src, len as u64, LR);
    let rkey = p.env.mkey(dst, len as u64, LW | RW);
    let (qa, qb) = (p.a.qpn, p.b.qpn);
    for seed in [21u8, 22] {
        let (req0, _) = rc_counters(&p, qa);
        let (_, resp0) = rc_counters(&p, qb);
        let data = pattern(len, seed);
        p.env.write(src, &data);
        write(&mut p, (src, lkey), (dst, rkey), len);
        assert_eq!(p.env.read(dst, len), data, "message {seed}");
        let (req, _) = rc_counters(&p, qa);
        let (_, resp) = rc_counters(&p, qb);
        assert_eq!(req.packets_sent - req0.packets_sent, npkts);
        assert_eq!(req.retransmitted, 0);
        assert_eq!(
            resp.executed - resp0.executed,
            npkts,
            "each packet executed"
        );
        assert_eq!(resp.duplicates, 0);
        assert_eq!(resp.out_of_sequence, 0);
        assert_eq!(resp.error_naks, 0);
        let acks = resp.acks - resp0.acks;
        assert!((1..=npkts).contains(&acks), "{acks} ACKs");
    }
}

/// A SEND of 12 packets whose MIDDLE packets share loopback-queue entries, gathered from two
/// buffers and scattered into three receive segments: each packet's bytes land at its offset
/// of the receive WQE, across the segment boundaries, and the receive completes with the whole
/// length.
#[test]
fn long_send_lands_across_receive_segments() {
    let mut p = pair();
    let (l1, l2) = (5 * MTU + 100, 6 * MTU + 200);
    let len = l1 + l2;
    let src = p.env.alloc(len + 4096);
    let dst = p.env.alloc(len + 8192);
    let lkey = p.env.mkey(src, (len + 4096) as u64, LR);
    let rkey = p.env.mkey(dst, (len + 8192) as u64, LR | LW);
    let data = pattern(len, 13);
    // The second gather buffer is not right after the first.
    p.env.write(src, &data[..l1]);
    p.env.write(src + (l1 + 4096) as u64, &data[l1..]);
    let (r1, r2) = (3 * MTU + 7, 4 * MTU);
    let r3 = len - r1 - r2 + 50;
    let (d1, d2, d3) = (dst, dst + (r1 + 1000) as u64, dst + (r1 + r2 + 3000) as u64);
    p.env.post_recv(
        &mut p.b,
        &[
            (r1 as u32, rkey, d1),
            (r2 as u32, rkey, d2),
            (r3 as u32, rkey, d3),
        ],
    );
    p.env.post_send(
        &mut p.a,
        wqe::opcode::SEND,
        CE,
        0,
        &[
            &dseg(l1 as u32, lkey, src),
            &dseg(l2 as u32, lkey, src + (l1 + 4096) as u64),
        ],
    );
    let r = p.env.poll_cq(&mut p.rcq).expect("receive completes");
    assert_eq!(
        r.opcode(),
        cqe::opcode::RESP_SEND,
        "syndrome {:#x}",
        r.syndrome()
    );
    assert_eq!(r.byte_cnt() as usize, len);
    let s = p.env.poll_cq(&mut p.scq).expect("send completes");
    assert_eq!(s.opcode(), cqe::opcode::REQ);
    assert_eq!(p.env.read(d1, r1), data[..r1]);
    assert_eq!(p.env.read(d2, r2), data[r1..r1 + r2]);
    assert_eq!(p.env.read(d3, len - r1 - r2), data[r1 + r2..]);
    assert_eq!(
        p.env.read(d1 + r1 as u64, 1000),
        vec![0u8; 1000],
        "between segments"
    );
    let (_, resp) = rc_counters(&p, p.b.qpn);
    assert_eq!(resp.executed, 12, "each packet executed");
}

/// Two WRITEs of 20 packets to one rkey, the key destroyed in between: the first lands; the
/// second, whose first packet the responder would have let through on the translation it kept,
/// is refused (NAK remote access: REMOTE_ACCESS_ERR at the requester) and writes nothing.
#[test]
fn write_after_its_rkey_is_destroyed_is_refused() {
    second_write_after_destroying(Key::Remote, cqe::syndrome::REMOTE_ACCESS_ERR);
}

/// Two WRITE WQEs with the same one-entry gather list, its lkey destroyed in between: the
/// second completes with LOCAL_PROT_ERR (its pieces are not taken from the first WQE's) and
/// nothing moves.
#[test]
fn wqe_after_its_lkey_is_destroyed_fails_locally() {
    second_write_after_destroying(Key::Local, cqe::syndrome::LOCAL_PROT_ERR);
}

/// Which key of a WRITE [`second_write_after_destroying`] destroys.
enum Key {
    Local,
    Remote,
}

/// Two WRITEs of 20 packets from one source to one destination, `key` destroyed between them:
/// the first lands; the second completes in error with `syndrome` and nothing of it lands.
fn second_write_after_destroying(key: Key, syndrome: u8) {
    let mut p = pair();
    let len = 20 * MTU;
    let src = p.env.alloc(len);
    let dst = p.env.alloc(len);
    let lkey = p.env.mkey(src, len as u64, LR);
    let rkey = p.env.mkey(dst, len as u64, LW | RW);
    let data = pattern(len, 1);
    p.env.write(src, &data);
    let c = post_write(&mut p, (src, lkey), (dst, rkey), len);
    assert_eq!(c.opcode(), cqe::opcode::REQ, "syndrome {:#x}", c.syndrome());
    assert_eq!(p.env.read(dst, len), data);

    p.env
        .destroy_mkey(match key {
            Key::Local => lkey,
            Key::Remote => rkey,
        })
        .ok();
    p.env.write(src, &pattern(len, 2));
    let c = post_write(&mut p, (src, lkey), (dst, rkey), len);
    assert_eq!(c.opcode(), cqe::opcode::REQ_ERR);
    assert_eq!(c.syndrome(), syndrome);
    assert_eq!(
        p.env.read(dst, len),
        data,
        "nothing of the second WRITE landed"
    );
}

/// The same key, WQE after WQE, while nothing changes: every message lands (the kept
/// translations are the right ones), including into the part of the key a later message
/// reaches past what an earlier one covered.
#[test]
fn writes_on_kept_translations_land() {
    let mut p = pair();
    let len = 40 * MTU;
    let src = p.env.alloc(len);
    let dst = p.env.alloc(2 * len);
    let lkey = p.env.mkey(src, len as u64, LR);
    let rkey = p.env.mkey(dst, 2 * len as u64, LW | RW);
    for (k, (off, n)) in [
        (0, len),
        (0, len / 2),
        (len / 4, len),
        (len, len),
        (5, 7 * MTU + 3),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(n, 10 + k as u8);
        p.env.write(src, &data);
        let c = post_write(&mut p, (src, lkey), (dst + off as u64, rkey), n);
        assert_eq!(
            c.opcode(),
            cqe::opcode::REQ,
            "message {k}: syndrome {:#x}",
            c.syndrome()
        );
        assert_eq!(p.env.read(dst + off as u64, n), data, "message {k}");
    }
}
