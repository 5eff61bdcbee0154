//! Memory windows against the model: alloc/dealloc of type 1 and 2 windows, binds through a
//! BIND_MW WQE and the bind verb, RDMA through the window's rkey, invalidation by LOCAL_INV
//! and by a peer's SEND with invalidate, the completions' opcodes, and every refusal: the
//! driver's typed errors before anything is posted, and the device's error completions for
//! what only the device knows.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{
    AccessFlags, ConnectOptions, Error, InvalidInput, MemoryRegion, MemoryWindow, MwBind, MwType,
    ProtectionDomain, QpCaps, QpOptions, QueuePair, RecvWr, SendData, SendFlags, SendOp, SendWr,
    WcOpcode, WcStatus,
};
use mlx5_sim::objects::mw::window_type;

const BINDABLE: AccessFlags = AccessFlags(AccessFlags::ALL.0 | AccessFlags::MW_BIND.0);
const RW: AccessFlags = AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);

/// Two connected RC QPs of one PD, both with room for window WQEs: `a` is the requester of
/// the RDMA tests, `b` the responder, which owns the windows.
/// A [`Pair`] whose QPs may bind windows (`QpOptions::mw_bind`).
fn mw_pair_in(ctx: &mlx5::Context<TestHal>, pd: ProtectionDomain<TestHal>) -> Pair {
    let opts = QpOptions {
        mw_bind: true,
        ..QpOptions::default()
    };
    pair_with(ctx, pd, &QpCaps::default(), &opts, 64)
}

fn mw_pair(ctx: &mlx5::Context<TestHal>) -> Pair {
    mw_pair_in(ctx, ctx.alloc_pd().expect("pd"))
}

fn bind<'a>(
    mr: &'a MemoryRegion<TestHal>,
    off: u64,
    len: u64,
    access: AccessFlags,
) -> MwBind<'a, TestHal> {
    MwBind {
        mr,
        addr: mr.addr() + off,
        len,
        access,
    }
}

/// Binds type 2 `mw` on QP b and checks the completion.
fn bind2(p: &mut Pair, mw: &mut MemoryWindow<TestHal>, b: &MwBind<'_, TestHal>) -> u32 {
    let rkey =
        p.b.post_bind_mw(77, mw, b, SendFlags::SIGNALED)
            .expect("post bind");
    let w = one(&mut p.cq_b);
    assert_eq!(
        (w.status, w.opcode, w.wr_id),
        (WcStatus::Success, WcOpcode::BindMw, 77)
    );
    rkey
}

fn local_inv(qp: &mut QueuePair<TestHal>, rkey: u32) {
    qp.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::LocalInv { rkey },
        data: SendData::Sges(&[]),
        flags: SendFlags::SIGNALED,
    }])
    .expect("post local inv");
}

#[test]
fn alloc_creates_free_klm_windows_and_dealloc_destroys_them() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let w1 = pd.alloc_mw(MwType::Type1).unwrap();
    let w2 = pd.alloc_mw(MwType::Type2).unwrap();
    assert_eq!((w1.mw_type(), w2.mw_type()), (MwType::Type1, MwType::Type2));
    assert_ne!(w1.rkey() >> 8, w2.rkey() >> 8);
    sim.with_hca(|h| {
        for (w, ty) in [(&w1, 1u8), (&w2, 2u8)] {
            let m = h.mkeys().by_index(w.rkey() >> 8).expect("window key");
            // Linux mlx5_ib_alloc_mw: free, umr_en, KLMS, qpn 0xffffff, 4 KLM octowords,
            // en_rinval for type 2.
            assert_eq!(window_type(m), Some(ty));
            assert!(m.free && m.umr_en);
            assert_eq!((m.qpn, m.xlt_octowords, m.pd), (0xff_ffff, 4, pd.pdn()));
            assert_eq!(m.variant, w.rkey() as u8);
        }
    });
    let (k1, k2) = (w1.rkey(), w2.rkey());
    w1.dealloc().unwrap();
    drop(w2);
    sim.with_hca(|h| {
        assert!(h.mkeys().by_index(k1 >> 8).is_none());
        assert!(h.mkeys().by_index(k2 >> 8).is_none());
    });
}

/// The rdma app's window check, in full: a type 2 window over part of an MR, RDMA WRITE and
/// READ through its rkey, out-of-window access refused, LOCAL_INV, the old rkey refused.
#[test]
fn type2_window_write_read_out_of_window_and_local_inv() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(64 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let dst = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let old = mw.rkey();
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 8192, 4096, RW));
    // A new variant, the same index.
    assert_eq!((rkey >> 8, mw.rkey()), (old >> 8, rkey));
    assert_ne!(rkey, old);
    let data = pattern(256, 3);
    src.write(0, &data).unwrap();
    let at = target.addr() + 8192 + 100;
    assert_eq!(write_to(&mut p, &src, 256, at, rkey), WcStatus::Success);
    let mut got = vec![0u8; 256];
    target.read(8192 + 100, &mut got).unwrap();
    assert_eq!(got, data);
    assert_eq!(read_from(&mut p, &dst, 256, at, rkey), WcStatus::Success);
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // The last byte of the window is in, the byte before it and one past it are not.
    let end = target.addr() + 8192 + 4096;
    assert_eq!(write_to(&mut p, &src, 1, end - 1, rkey), WcStatus::Success);
    // LOCAL_INV on the QP the window is bound to.
    local_inv(&mut p.b, rkey);
    let w = one(&mut p.cq_b);
    assert_eq!(
        (w.status, w.opcode, w.wr_id),
        (WcStatus::Success, WcOpcode::LocalInv, 9)
    );
    assert_eq!(write_to(&mut p, &src, 16, at, rkey), WcStatus::RemAccessErr);

    // Out of the window (fresh QPs: the access error moved them to ERR).
    let mut p = mw_pair_in(&ctx, p.pd);
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 8192, 4096, RW));
    assert_eq!(write_to(&mut p, &src, 1, end, rkey), WcStatus::RemAccessErr);
    let mut p = mw_pair_in(&ctx, p.pd);
    local_inv(&mut p.b, rkey);
    // Bound through the previous pair's b: LOCAL_INV on this b is refused.
    assert_eq!(one(&mut p.cq_b).status, WcStatus::MwBindErr);
    let mut p = mw_pair_in(&ctx, p.pd);
    let mut mw2 = p.pd.alloc_mw(MwType::Type2).unwrap();
    let r2 = bind2(&mut p, &mut mw2, &bind(&target, 8192, 4096, RW));
    assert_eq!(
        write_to(&mut p, &src, 1, target.addr() + 8191, r2),
        WcStatus::RemAccessErr
    );
}

#[test]
fn window_access_may_be_narrower_than_the_region() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind2(
        &mut p,
        &mut mw,
        &bind(&target, 0, 8192, AccessFlags::REMOTE_READ),
    );
    assert_eq!(
        read_from(&mut p, &src, 64, target.addr(), rkey),
        WcStatus::Success
    );
    assert_eq!(
        write_to(&mut p, &src, 64, target.addr(), rkey),
        WcStatus::RemAccessErr
    );
}

#[test]
fn type2_rkey_changes_with_each_bind_and_old_rkeys_die() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let mut seen = vec![mw.rkey()];
    // Random variants, none of them a recent one (ReDMArk): 64 binds, 64 distinct rkeys.
    for _ in 0..64 {
        let rkey = bind2(&mut p, &mut mw, &bind(&target, 0, 4096, RW));
        assert!(!seen.contains(&rkey), "rkey {rkey:#x} reused: {seen:x?}");
        assert_eq!(rkey >> 8, seen[0] >> 8);
        assert_eq!(
            write_to(&mut p, &src, 8, target.addr(), rkey),
            WcStatus::Success
        );
        local_inv(&mut p.b, rkey);
        assert_eq!(one(&mut p.cq_b).opcode, WcOpcode::LocalInv);
        seen.push(rkey);
    }
    let old = seen[1];
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), old),
        WcStatus::RemAccessErr
    );
}

#[test]
fn send_with_invalidate_from_the_peer_invalidates_the_window() {
    let (sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let rbuf = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 4096, 4096, RW));
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr() + 4096, rkey),
        WcStatus::Success
    );
    p.b.post_recv(&[RecvWr {
        wr_id: 5,
        sges: &[rbuf.sge(0, 4096)],
    }])
    .unwrap();
    src.write(0, b"invalidate").unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 6,
        op: SendOp::SendWithInv { rkey },
        data: SendData::Sges(&[src.sge(0, 10)]),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let s = one(&mut p.cq_a);
    assert_eq!((s.status, s.opcode), (WcStatus::Success, WcOpcode::Send));
    let r = one(&mut p.cq_b);
    assert_eq!(
        (r.status, r.opcode, r.wr_id, r.byte_len, r.imm),
        (WcStatus::Success, WcOpcode::RecvWithInv, 5, 10, Some(rkey))
    );
    sim.with_hca(|h| assert!(h.mkeys().by_index(rkey >> 8).unwrap().free));
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr() + 4096, rkey),
        WcStatus::RemAccessErr
    );
    // The window can be bound again (it is free), with a new rkey.
    let mut p = mw_pair_in(&ctx, p.pd);
    let r2 = bind2(&mut p, &mut mw, &bind(&target, 0, 4096, RW));
    assert_ne!(r2, rkey);
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), r2),
        WcStatus::Success
    );
}

#[test]
fn send_with_invalidate_of_a_type1_window_is_refused() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let rbuf = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    let rkey =
        p.b.bind_mw(
            3,
            &mut mw,
            Some(&bind(&target, 0, 4096, RW)),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(one(&mut p.cq_b).opcode, WcOpcode::BindMw);
    p.b.post_recv(&[RecvWr {
        wr_id: 5,
        sges: &[rbuf.sge(0, 4096)],
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 6,
        op: SendOp::SendWithInv { rkey },
        data: SendData::Sges(&[src.sge(0, 10)]),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    // o10-37.2.26: NAK invalid request.
    assert_eq!(one(&mut p.cq_a).status, WcStatus::RemInvReqErr);
    // The window still works through another pair.
    let mut q = mw_pair_in(&ctx, p.pd);
    assert_eq!(
        write_to(&mut q, &src, 8, target.addr(), rkey),
        WcStatus::Success
    );
}

#[test]
fn binding_a_bound_type2_window_is_refused_by_the_device() {
    let (sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 0, 4096, RW));
    // o10-37.2.30: bound, so not bindable until invalidated.
    p.b.post_bind_mw(
        8,
        &mut mw,
        &bind(&target, 4096, 4096, RW),
        SendFlags::SIGNALED,
    )
    .unwrap();
    let w = one(&mut p.cq_b);
    assert_eq!((w.status, w.wr_id), (WcStatus::MwBindErr, 8));
    // The first binding is intact on the device (key, range, QP).
    sim.with_hca(|h| {
        let m = h.mkeys().by_index(rkey >> 8).unwrap();
        assert_eq!((m.variant, m.free), (rkey as u8, false));
        assert_eq!((m.start, m.len, m.qpn), (target.addr(), 4096, p.b.qpn()));
    });
}

#[test]
fn local_inv_of_a_type1_window_or_another_qps_window_is_refused() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    // Type 1 (bound by the verb on b): LOCAL_INV on b is refused (o10-37.2.26).
    let mut w1 = p.pd.alloc_mw(MwType::Type1).unwrap();
    let r1 =
        p.b.bind_mw(
            3,
            &mut w1,
            Some(&bind(&target, 0, 4096, RW)),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(one(&mut p.cq_b).status, WcStatus::Success);
    local_inv(&mut p.b, r1);
    assert_eq!(one(&mut p.cq_b).status, WcStatus::MwBindErr);
    // The type 1 window survived.
    let mut p = mw_pair_in(&ctx, p.pd);
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), r1),
        WcStatus::Success
    );
    // Type 2 bound through b: LOCAL_INV on a is refused, on b accepted.
    let mut w2 = p.pd.alloc_mw(MwType::Type2).unwrap();
    let r2 = bind2(&mut p, &mut w2, &bind(&target, 0, 4096, RW));
    local_inv(&mut p.a, r2);
    assert_eq!(one(&mut p.cq_a).status, WcStatus::MwBindErr);
    local_inv(&mut p.b, r2);
    assert_eq!(one(&mut p.cq_b).status, WcStatus::Success);
}

#[test]
fn type2_remote_access_only_through_the_bound_qp() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 0, 4096, RW));
    // A second pair of the same PD: its responder is not the window's QP.
    let mut q = mw_pair_in(&ctx, p.pd);
    assert_eq!(
        write_to(&mut q, &src, 8, target.addr(), rkey),
        WcStatus::RemAccessErr
    );
}

#[test]
fn type1_bind_rebind_and_unbind_by_the_verb() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    let r1 =
        p.a.bind_mw(
            1,
            &mut mw,
            Some(&bind(&target, 0, 4096, RW)),
            SendFlags::SIGNALED,
        )
        .unwrap();
    let w = one(&mut p.cq_a);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::BindMw));
    // Usable through any QP of the PD: a writes to b, whose responder is not the binder.
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), r1),
        WcStatus::Success
    );
    // Bound again while bound (type 1 allows it): a new rkey, the old one is dead.
    let r2 =
        p.a.bind_mw(
            1,
            &mut mw,
            Some(&bind(&target, 4096, 4096, RW)),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(one(&mut p.cq_a).status, WcStatus::Success);
    assert_ne!(r1, r2);
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr() + 4096, r2),
        WcStatus::Success
    );
    assert!(mw.holds_region());
    // Unbound: nothing maps.
    let r3 = p.a.bind_mw(1, &mut mw, None, SendFlags::SIGNALED).unwrap();
    assert_eq!(one(&mut p.cq_a).status, WcStatus::Success);
    assert!(!mw.holds_region());
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr() + 4096, r3),
        WcStatus::RemAccessErr
    );
    let mut p = mw_pair_in(&ctx, p.pd);
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), r1),
        WcStatus::RemAccessErr
    );
}

#[test]
fn dealloc_of_a_bound_window_kills_its_rkey_and_frees_the_region() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let mut target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 0, 4096, RW));
    // The window holds the region: dereg waits (IB: an MR with bound windows stays).
    assert_eq!(target.dereg(), Err(Error::Busy));
    mw.dealloc().unwrap();
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), rkey),
        WcStatus::RemAccessErr
    );
    target.dereg().unwrap();
}

#[test]
fn zero_based_type2_window_is_addressed_from_zero() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let zb = AccessFlags(RW.0 | AccessFlags::ZERO_BASED.0);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey = bind2(&mut p, &mut mw, &bind(&target, 8192, 4096, zb));
    src.write(0, &pattern(32, 9)).unwrap();
    assert_eq!(write_to(&mut p, &src, 32, 16, rkey), WcStatus::Success);
    let mut got = vec![0u8; 32];
    target.read(8192 + 16, &mut got).unwrap();
    assert_eq!(got, pattern(32, 9));
    assert_eq!(
        write_to(&mut p, &src, 1, 4096, rkey),
        WcStatus::RemAccessErr
    );
}

#[test]
fn the_driver_refuses_bad_binds_before_posting() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let plain = p.pd.alloc_mr(16 << 10, AccessFlags::ALL).unwrap();
    let readonly =
        p.pd.alloc_mr(
            16 << 10,
            AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::MW_BIND.0),
        )
        .unwrap();
    let mut w1 = p.pd.alloc_mw(MwType::Type1).unwrap();
    let mut w2 = p.pd.alloc_mw(MwType::Type2).unwrap();
    let f = SendFlags::SIGNALED;
    let inv = |e: InvalidInput| Err(Error::Invalid(e));
    // The verb for the other type.
    assert_eq!(
        p.b.post_bind_mw(1, &mut w1, &bind(&target, 0, 64, RW), f),
        inv(InvalidInput::MwType)
    );
    assert_eq!(
        p.b.bind_mw(1, &mut w2, Some(&bind(&target, 0, 64, RW)), f),
        inv(InvalidInput::MwType)
    );
    // C10-73: the region lacks MW_BIND.
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &bind(&plain, 0, 64, RW), f),
        inv(InvalidInput::MwBindNotAllowed)
    );
    // C10-74: remote write over a region without local write.
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &bind(&readonly, 0, 64, RW), f),
        inv(InvalidInput::MwAccess)
    );
    assert_eq!(
        p.b.post_bind_mw(
            1,
            &mut w2,
            &bind(&readonly, 0, 64, AccessFlags::REMOTE_READ),
            f
        )
        .map(|_| ()),
        Ok(())
    );
    assert_eq!(one(&mut p.cq_b).status, WcStatus::Success);
    local_inv(&mut p.b, w2.rkey());
    assert_eq!(one(&mut p.cq_b).status, WcStatus::Success);
    // Unknown access bits; zero-based type 1.
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &bind(&target, 0, 64, AccessFlags(1 << 8)), f),
        inv(InvalidInput::MwAccess)
    );
    let zb = AccessFlags(RW.0 | AccessFlags::ZERO_BASED.0);
    assert_eq!(
        p.b.bind_mw(1, &mut w1, Some(&bind(&target, 0, 64, zb)), f),
        inv(InvalidInput::MwAccess)
    );
    // C10-75: outside the region.
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &bind(&target, (16 << 10) - 63, 64, RW), f),
        inv(InvalidInput::OutOfRange)
    );
    let before = MwBind {
        mr: &target,
        addr: target.addr() - 1,
        len: 64,
        access: RW,
    };
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &before, f),
        inv(InvalidInput::OutOfRange)
    );
    // o10-37.2.40: a zero-length type 2 bind.
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &bind(&target, 0, 0, RW), f),
        inv(InvalidInput::ZeroLength)
    );
    // C10-72: another PD's region, window or QP.
    let pd2 = ctx.alloc_pd().unwrap();
    let other_mr = pd2.alloc_mr(4096, BINDABLE).unwrap();
    let mut other_w = pd2.alloc_mw(MwType::Type2).unwrap();
    assert_eq!(
        p.b.post_bind_mw(1, &mut w2, &bind(&other_mr, 0, 64, RW), f),
        inv(InvalidInput::PdMismatch)
    );
    assert_eq!(
        p.b.post_bind_mw(1, &mut other_w, &bind(&target, 0, 64, RW), f),
        inv(InvalidInput::PdMismatch)
    );
    // A QP of another PD than the window (C10-72).
    let cq2 = ctx.create_cq(16).unwrap();
    let opts = QpOptions {
        mw_bind: true,
        ..QpOptions::default()
    };
    let mut foreign_qp = pd2
        .create_qp_with(&cq2, &cq2, &QpCaps::default(), &opts)
        .unwrap();
    foreign_qp
        .connect(&p.a.endpoint(), &ConnectOptions::default())
        .unwrap();
    assert_eq!(
        foreign_qp.post_bind_mw(1, &mut w2, &bind(&target, 0, 64, RW), f),
        inv(InvalidInput::PdMismatch)
    );
    // A QP without room for window WQEs.
    let cq = ctx.create_cq(16).unwrap();
    let mut small = p.pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    small
        .connect(&p.a.endpoint(), &ConnectOptions::default())
        .unwrap();
    assert_eq!(
        small.post_bind_mw(1, &mut w2, &bind(&target, 0, 64, RW), f),
        inv(InvalidInput::NoMwRoom)
    );
    // A LOCAL_INV with local data.
    let src = mr(&p.pd, 64);
    assert_eq!(
        p.b.post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::LocalInv { rkey: w2.rkey() },
            data: SendData::Sges(&[src.sge(0, 8)]),
            flags: f,
        }]),
        Err(Error::Invalid(InvalidInput::TooManySge {
            given: 1,
            max: 0
        }))
    );
    // Nothing reached the device: no completion, and the window still binds.
    let mut none = [mlx5::WorkCompletion::default(); 4];
    assert_eq!(p.cq_b.poll(&mut none).unwrap(), 0);
    assert_eq!(small.post_send(&[]), Ok(()));
    let rkey = bind2(&mut p, &mut w2, &bind(&target, 0, 64, RW));
    assert_eq!(rkey, w2.rkey());
}

#[test]
fn access_flags_accept_mw_bind_but_not_zero_based_for_regions() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    assert!(pd.alloc_mr(4096, BINDABLE).is_ok());
    assert_eq!(
        pd.alloc_mr(
            4096,
            AccessFlags(AccessFlags::ALL.0 | AccessFlags::ZERO_BASED.0)
        )
        .err(),
        Some(Error::Invalid(InvalidInput::AccessFlags))
    );
}

#[test]
fn unsignaled_bind_completes_silently_and_the_window_works() {
    let (_sim, ctx) = open();
    let mut p = mw_pair(&ctx);
    let target = p.pd.alloc_mr(16 << 10, BINDABLE).unwrap();
    let src = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let rkey =
        p.b.post_bind_mw(11, &mut mw, &bind(&target, 0, 4096, RW), SendFlags::NONE)
            .unwrap();
    assert_eq!(
        write_to(&mut p, &src, 8, target.addr(), rkey),
        WcStatus::Success
    );
    local_inv(&mut p.b, rkey);
    // One completion: the LOCAL_INV, which also retires the unsignaled bind before it.
    let w = one(&mut p.cq_b);
    assert_eq!(
        (w.status, w.opcode, w.wr_id),
        (WcStatus::Success, WcOpcode::LocalInv, 9)
    );
    let mut more = [mlx5::WorkCompletion::default(); 2];
    assert_eq!(p.cq_b.poll(&mut more).unwrap(), 0);
}
