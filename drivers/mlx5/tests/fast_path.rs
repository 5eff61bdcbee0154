//! The fast posting calls on regions bound to a QP (`bind_mr`, `post_write`, `post_read`,
//! `unbind_mr`) against the emulated HCA: data movement, the region lifetime rules, the
//! checks made before anything reaches the device, and interleaving with the generic calls
//! across ring wraps.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{
    AccessFlags, Error, InvalidInput, QpCaps, Remote, SendData, SendFlags, SendOp, SendWr,
    WcOpcode, WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

#[test]
fn bound_write_and_read_move_data() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let local = mr(&p.pd, 8192);
    let remote = mr(&p.pd, 8192);
    let lb = p.a.bind_mr(&local).unwrap();
    assert_eq!(
        (lb.lkey(), lb.addr(), lb.len()),
        (local.lkey(), local.addr(), 8192)
    );
    local.write(100, &pattern(1000, 3)).unwrap();
    let r = |off: u64| Remote {
        addr: remote.addr() + off,
        rkey: remote.rkey(),
    };
    p.a.post_write(1, lb.sge(100, 1000), r(2000), SIG).unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode, w[0].qp_num),
        (1, WcStatus::Success, WcOpcode::RdmaWrite, p.a.qpn())
    );
    let mut got = vec![0u8; 1000];
    remote.read(2000, &mut got).unwrap();
    assert_eq!(got, pattern(1000, 3));
    // Read it back into another part of the local region.
    p.a.post_read(2, lb.sge(4096, 1000), r(2000), SIG).unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode, w[0].byte_len),
        (2, WcStatus::Success, WcOpcode::RdmaRead, 1000)
    );
    local.read(4096, &mut got).unwrap();
    assert_eq!(got, pattern(1000, 3));
    // An unsignaled write is covered by the next signaled one.
    p.a.post_write(3, lb.sge(0, 8), r(0), SendFlags::NONE)
        .unwrap();
    p.a.post_write(4, lb.sge(8, 8), r(8), SIG).unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!((w.len(), w[0].wr_id), (1, 4));
    p.a.unbind_mr(lb).unwrap();
}

#[test]
fn bound_region_stays_registered_until_unbound_and_completed() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let mut local = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    let lb = p.a.bind_mr(&local).unwrap();
    assert_eq!(local.dereg(), Err(Error::Busy), "bound to a QP");
    let r = Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    p.a.post_write(1, lb.sge(0, 64), r, SIG).unwrap();
    // Unbinding with the WR not yet completed: the QP keeps the region until it is.
    p.a.unbind_mr(lb).unwrap();
    assert_eq!(
        local.dereg(),
        Err(Error::Busy),
        "a posted WR still names it"
    );
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    p.a.release_completed();
    local.dereg().unwrap();
    local.dereg().unwrap();
}

#[test]
fn bound_posts_are_checked_before_the_doorbell() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    let ro = p.pd.alloc_mr(4096, AccessFlags::REMOTE_READ).unwrap();
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let on_a = p.a.bind_mr(&m).unwrap();
    let ro_on_a = p.a.bind_mr(&ro).unwrap();
    let before = (sim.doorbells(), ctx.commands_sent());
    assert_eq!(
        p.b.post_write(0, on_a.sge(0, 8), r, SIG).err(),
        Some(Error::Invalid(InvalidInput::UnboundRegion)),
        "a handle of another QP"
    );
    assert_eq!(
        p.a.post_write(0, on_a.sge(4000, 200), r, SIG).err(),
        Some(Error::Invalid(InvalidInput::OutOfRange))
    );
    assert_eq!(
        p.a.post_write(0, on_a.sge(u64::MAX - 2, 8), r, SIG).err(),
        Some(Error::Invalid(InvalidInput::OutOfRange))
    );
    assert_eq!(
        p.a.post_read(0, ro_on_a.sge(0, 8), r, SIG).err(),
        Some(Error::Invalid(InvalidInput::LocalAccess)),
        "RDMA READ into a region without local write"
    );
    assert_eq!(
        p.b.unbind_mr(on_a).err(),
        Some(Error::Invalid(InvalidInput::UnboundRegion))
    );
    assert_eq!(
        (sim.doorbells(), ctx.commands_sent()),
        before,
        "nothing reached the device"
    );
}

#[test]
fn bound_posts_respect_queue_room_and_qp_state() {
    let (sim, ctx) = open();
    let mut p = pair(
        &ctx,
        QpCaps {
            max_send_wr: 4,
            ..Default::default()
        },
    );
    let m = mr(&p.pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let b = p.a.bind_mr(&m).unwrap();
    let cap = p.a.caps().max_send_wr as u64;
    for i in 0..cap {
        p.a.post_write(i, b.sge(0, 8), r, SIG).unwrap();
    }
    let db = sim.doorbells();
    assert_eq!(
        p.a.post_write(99, b.sge(0, 8), r, SIG).err(),
        Some(Error::Invalid(InvalidInput::QueueFull))
    );
    assert_eq!(sim.doorbells(), db);
    let w = wait(&mut p.cq_a, cap as usize);
    assert_eq!(
        w.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..cap).collect::<Vec<_>>()
    );
    p.a.post_write(5, b.sge(0, 8), r, SIG).unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].wr_id, 5);

    // Not in RTS: refused.
    let mut q =
        p.pd.create_qp(&p.cq_a, &p.cq_a, &QpCaps::default())
            .unwrap();
    let qb = q.bind_mr(&m).unwrap();
    assert!(matches!(
        q.post_write(0, qb.sge(0, 8), r, SIG),
        Err(Error::Invalid(InvalidInput::QpState { .. }))
    ));
    // In ERR: taken, and flushed (IB spec; Linux ib_drain_sq relies on it).
    p.a.to_err().unwrap();
    p.a.post_write(7, b.sge(0, 8), r, SIG).unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (7, WcStatus::WrFlushErr));
}

#[test]
fn fast_and_generic_posts_interleave_across_ring_wraps() {
    let (_sim, ctx) = open();
    let mut p = pair(
        &ctx,
        QpCaps {
            max_send_wr: 4,
            max_send_sge: 2,
            max_inline_data: 64,
            ..Default::default()
        },
    );
    assert_eq!(
        p.a.caps().max_send_wr,
        4,
        "two-block WQEs, an eight-block ring"
    );
    let local = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    local.write(0, &pattern(4096, 7)).unwrap();
    let b = p.a.bind_mr(&local).unwrap();
    let r = |off: u64| Remote {
        addr: remote.addr() + off,
        rkey: remote.rkey(),
    };
    let mut expect = Vec::new();
    let mut got = Vec::new();
    // 64-byte slots; the inline WRs carry 40 bytes (a two-block WQE, which wraps the
    // eight-block ring now and then), the others 16.
    let len = |i: u64| if i % 4 == 2 { 40 } else { 16 };
    for i in 0..60u64 {
        let off = i * 64;
        match i % 4 {
            0 | 3 => p.a.post_write(i, b.sge(off, 16), r(off), SIG).unwrap(),
            1 => {
                // Two SGEs: a multi-block-capable WQE through the general path.
                let sges = [local.sge(off, 8), local.sge(off + 8, 8)];
                p.a.post_send(&[SendWr {
                    wr_id: i,
                    op: SendOp::Write {
                        remote: r(off),
                        imm: None,
                    },
                    data: SendData::Sges(&sges),
                    flags: SIG,
                }])
                .unwrap()
            }
            _ => {
                let bytes = pattern(4096, 7);
                let inl = &bytes[off as usize..off as usize + 40];
                p.a.post_send(&[SendWr {
                    wr_id: i,
                    op: SendOp::Write {
                        remote: r(off),
                        imm: None,
                    },
                    data: SendData::Inline(inl),
                    flags: SIG,
                }])
                .unwrap()
            }
        }
        expect.push(i);
        if i % 3 == 2 {
            got.extend(wait(&mut p.cq_a, expect.len() - got.len()));
        }
    }
    got.extend(wait(&mut p.cq_a, expect.len() - got.len()));
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), expect);
    let mut mem = vec![0u8; 4096];
    remote.read(0, &mut mem).unwrap();
    let want = pattern(4096, 7);
    for i in 0..60u64 {
        let (off, n) = ((i * 64) as usize, len(i));
        assert_eq!(mem[off..off + n], want[off..off + n], "WR {i}");
    }
}
