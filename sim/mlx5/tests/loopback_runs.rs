//! Loopback RDMA WRITE translations kept between messages: a WRITE's rkey translation and a
//! one-entry gather list's pieces are reused only while the key table's generation stands
//! (rcpath `WriteXlat`, `LastGather`), so a key destroyed between two messages fails the
//! second exactly as it would have without them, and nothing moves.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{cqe, wqe};
use mlx5_sim::InProcHca;

const CE: u8 = wqe::ctrl::CQ_UPDATE;
/// The path MTU `Env::connect_local` sets (`qpc.mtu` 3).
const MTU: usize = 1024;

struct Pair {
    env: Env,
    a: Qp,
    scq: Cq,
}

fn pair() -> Pair {
    let mut env = Env::new(InProcHca::deterministic(), 1);
    let scq = env.cq(6);
    let rcq = env.cq(6);
    let a = env.qp(&scq, &rcq, 6, 5);
    let b = env.qp(&scq, &rcq, 6, 5);
    env.connect_local(&a, b.qpn);
    env.connect_local(&b, a.qpn);
    Pair { env, a, scq }
}

/// Posts a signaled RDMA WRITE of `len` bytes and returns its completion.
fn write(p: &mut Pair, (src, lkey): (u64, u32), (dst, rkey): (u64, u32), len: usize) -> Cqe {
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

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

/// Two WRITEs of 20 packets to one rkey, the key destroyed in between: the first lands; the
/// second, whose first packet the responder would have let through on the translation it kept,
/// is refused (NAK remote access: REMOTE_ACCESS_ERR at the requester) and writes nothing.
#[test]
fn write_after_its_rkey_is_destroyed_is_refused() {
    let mut p = pair();
    let len = 20 * MTU;
    let src = p.env.alloc(len);
    let dst = p.env.alloc(len);
    let lkey = p.env.mkey(src, len as u64, LR);
    let rkey = p.env.mkey(dst, len as u64, LW | RW);
    let data = pattern(len, 1);
    p.env.write(src, &data);
    let c = write(&mut p, (src, lkey), (dst, rkey), len);
    assert_eq!(c.opcode(), cqe::opcode::REQ, "syndrome {:#x}", c.syndrome());
    assert_eq!(p.env.read(dst, len), data);

    p.env.destroy_mkey(rkey).ok();
    p.env.write(src, &pattern(len, 2));
    let c = write(&mut p, (src, lkey), (dst, rkey), len);
    assert_eq!(c.opcode(), cqe::opcode::REQ_ERR);
    assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_ACCESS_ERR);
    assert_eq!(
        p.env.read(dst, len),
        data,
        "nothing of the second WRITE landed"
    );
}

/// Two WRITE WQEs with the same one-entry gather list, its lkey destroyed in between: the
/// second completes with LOCAL_PROT_ERR (its pieces are not taken from the first WQE's) and
/// nothing moves.
#[test]
fn wqe_after_its_lkey_is_destroyed_fails_locally() {
    let mut p = pair();
    let len = 20 * MTU;
    let src = p.env.alloc(len);
    let dst = p.env.alloc(len);
    let lkey = p.env.mkey(src, len as u64, LR);
    let rkey = p.env.mkey(dst, len as u64, LW | RW);
    let data = pattern(len, 3);
    p.env.write(src, &data);
    let c = write(&mut p, (src, lkey), (dst, rkey), len);
    assert_eq!(c.opcode(), cqe::opcode::REQ, "syndrome {:#x}", c.syndrome());

    p.env.destroy_mkey(lkey).ok();
    p.env.write(src, &pattern(len, 4));
    let c = write(&mut p, (src, lkey), (dst, rkey), len);
    assert_eq!(c.opcode(), cqe::opcode::REQ_ERR);
    assert_eq!(c.syndrome(), cqe::syndrome::LOCAL_PROT_ERR);
    assert_eq!(
        p.env.read(dst, len),
        data,
        "nothing of the second WRITE moved"
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
        let c = write(&mut p, (src, lkey), (dst + off as u64, rkey), n);
        assert_eq!(
            c.opcode(),
            cqe::opcode::REQ,
            "message {k}: syndrome {:#x}",
            c.syndrome()
        );
        assert_eq!(p.env.read(dst + off as u64, n), data, "message {k}");
    }
}
