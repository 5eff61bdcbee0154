//! Memory windows in the model, from raw commands and raw WQEs: a window is a free KLMS key
//! with `umr_en` (Linux ib/mr.c `mlx5_ib_alloc_mw`), bound, unbound and invalidated by the
//! UMR WQEs rdma-core providers/mlx5/qp.c builds (`set_bind_wr`), on any RC QP (no `fre`
//! needed); every check of `mlx5_sim::objects::mw` has a test here that the window stays as it was.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::wqe::umr_ctrl_seg::{mask as mk, *};
use mlx5_prm::*;
use mlx5_sim::objects::mr::{syndrome as mrs, Access, MrFault};
use mlx5_sim::objects::mw::{mw_vendor, window_type};
use mlx5_sim::InProcHca;
use raw::{input, set};

const VARIANT: u8 = 0x31;

/// CREATE_MKEY of a window (Linux `mlx5_ib_alloc_mw`): free, umr_en, lr, KLMS, qpn 0xffffff,
/// 4 KLM octowords, `en_rinval` for type 2.
fn window_input(pd: u32, ty: u8) -> Vec<u8> {
    let mut i = input(opcode::CREATE_MKEY, 0, create_mkey_in::BYTES);
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    set(&mut i, mkc::FREE.within(m), 1);
    set(&mut i, mkc::TRANSLATIONS_OCTWORD_SIZE.within(m), 4);
    set(&mut i, mkc::PD.within(m), pd);
    set(&mut i, mkc::UMR_EN.within(m), 1);
    set(&mut i, mkc::LR.within(m), 1);
    set(
        &mut i,
        mkc::ACCESS_MODE_1_0.within(m),
        mkc_access_mode::bits_1_0(mkc_access_mode::KLMS),
    );
    set(&mut i, mkc::EN_RINVAL.within(m), (ty == 2) as u32);
    set(&mut i, mkc::QPN.within(m), 0xff_ffff);
    set(&mut i, mkc::MKEY_7_0.within(m), VARIANT.into());
    i
}

fn window(e: &mut Env, pd: u32, ty: u8) -> u32 {
    let d = e.raw.exec(&window_input(pd, ty), 16);
    d.ok();
    mkey::from_index(d.get(create_mkey_out::MKEY_INDEX), VARIANT)
}

/// The UMR WQE body (UMR ctrl, mkey segment, KLM data) of one window operation.
#[derive(Clone)]
struct Op {
    flags: u8,
    mask: u64,
    free: bool,
    qpn: u32,
    variant: u8,
    access: u8,
    start: u64,
    len: u64,
    /// KLM entries (byte_count, key, address), padded to 64 bytes.
    klm: Vec<(u32, u32, u64)>,
}

impl Op {
    /// rdma-core `set_bind_wr` for a bind of `len` bytes of `mr_key` at `addr`.
    fn bind(ty: u8, qpn: u32, variant: u8, access: u8, mr_key: u32, addr: u64, len: u64) -> Op {
        let mut flags = FLAG_INLINE | FLAG_TRANSLATION_OFFSET_EN;
        let mut mask =
            mk::FREE | mk::KEY | mk::LEN | mk::START_ADDR | mk::LW | mk::RR | mk::RW | mk::A;
        if ty == 2 {
            flags |= FLAG_CHECK_NOT_FREE;
            mask |= mk::QPN;
        }
        Op {
            flags,
            mask,
            free: false,
            qpn: if ty == 2 { qpn } else { 0xff_ffff },
            variant,
            access,
            start: addr,
            len,
            klm: vec![(len as u32, mr_key, addr)],
        }
    }

    /// rdma-core IBV_WR_LOCAL_INV (`set_bind_wr(TYPE_2, 0, {})`), keeping `variant`.
    fn local_inv(variant: u8) -> Op {
        Op {
            flags: FLAG_INLINE | FLAG_TRANSLATION_OFFSET_EN | FLAG_CHECK_QPN,
            mask: mk::FREE | mk::KEY | mk::QPN,
            free: true,
            qpn: 0xff_ffff,
            variant,
            access: 0,
            start: 0,
            len: 0,
            klm: vec![],
        }
    }

    fn body(&self) -> Vec<u8> {
        let mut u = [0u8; SIZE];
        u[FLAGS] = self.flags;
        let oct: u16 = if self.klm.is_empty() {
            0
        } else {
            (self.klm.len() as u16).div_ceil(4) * 4
        };
        u[KLM_OCTOWORDS..KLM_OCTOWORDS + 2].copy_from_slice(&oct.to_be_bytes());
        u[MKEY_MASK..MKEY_MASK + 8].copy_from_slice(&self.mask.to_be_bytes());
        let mut s = [0u8; mkc::BYTES];
        mkc::FREE.set(&mut s, self.free as u32).unwrap();
        mkc::QPN.set(&mut s, self.qpn).unwrap();
        mkc::MKEY_7_0.set(&mut s, self.variant.into()).unwrap();
        mkc::LW.set(&mut s, (self.access & LW != 0) as u32).unwrap();
        mkc::RR.set(&mut s, (self.access & RR != 0) as u32).unwrap();
        mkc::RW.set(&mut s, (self.access & RW != 0) as u32).unwrap();
        mkc::A.set(&mut s, (self.access & A != 0) as u32).unwrap();
        mkc::START_ADDR.set_u64(&mut s, self.start).unwrap();
        mkc::LEN.set_u64(&mut s, self.len).unwrap();
        let mut v = u.to_vec();
        v.extend_from_slice(&s);
        let mut k = vec![0u8; oct as usize * 16];
        for (i, &(bc, key, va)) in self.klm.iter().enumerate() {
            let at = i * 16;
            k[at..at + 4].copy_from_slice(&bc.to_be_bytes());
            k[at + 4..at + 8].copy_from_slice(&key.to_be_bytes());
            k[at + 8..at + 16].copy_from_slice(&va.to_be_bytes());
        }
        v.extend_from_slice(&k);
        v
    }
}

/// Two connected QPs (of PD `e.pd` unless `pd_b` names another for b) with their CQs.
struct Two {
    a: Qp,
    b: Qp,
    ca: Cq,
    cb: Cq,
}

fn two(e: &mut Env, pd_b: Option<u32>) -> Two {
    let ca = e.cq(6);
    let cb = e.cq(6);
    let a = e.qp(&ca, &ca, 6, 4);
    let keep = e.pd;
    if let Some(p) = pd_b {
        e.pd = p;
    }
    let b = e.qp(&cb, &cb, 6, 4);
    e.pd = keep;
    e.connect_local(&a, b.qpn);
    e.connect_local(&b, a.qpn);
    Two { a, b, ca, cb }
}

/// Posts the window operation `op` on `qp` naming window key `key`; its CQE.
fn post(e: &mut Env, qp: &mut Qp, cq: &mut Cq, key: u32, op: &Op) -> Cqe {
    let body = op.body();
    e.post_send(
        qp,
        wqe::opcode::UMR,
        wqe::ctrl::CQ_UPDATE | wqe::fence::INITIATOR_SMALL,
        key,
        &[&body],
    );
    e.wait_cq(cq, &[])
}

fn ok(c: &Cqe) {
    assert!(
        !c.is_error(),
        "error CQE: syndrome {:#x} vendor {:#x}",
        c.syndrome(),
        c.vendor_syndrome()
    );
    assert_eq!(c.wqe_opcode(), wqe::opcode::UMR);
}

fn refused(c: &Cqe, vendor: u8) {
    assert!(c.is_error(), "expected an error CQE");
    assert_eq!(
        (c.syndrome(), c.vendor_syndrome()),
        (cqe::syndrome::MW_BIND_ERR, vendor)
    );
}

fn env() -> Env {
    Env::new(InProcHca::deterministic(), 1)
}

/// A window's state on the device: (free, variant, qpn, start, len, access).
fn state(e: &Env, key: u32) -> (bool, u8, u32, u64, u128, Access) {
    e.dev().with_hca(|h| {
        let m = h.mkeys().by_index(key >> 8).expect("window");
        (m.free, m.variant, m.qpn, m.start, m.len, m.access)
    })
}

fn with_variant(key: u32, v: u8) -> u32 {
    (key & !0xff) | v as u32
}

#[test]
fn create_mkey_makes_windows_and_still_refuses_empty_keys_that_are_not_free() {
    let mut e = env();
    let pd = e.pd;
    let w1 = window(&mut e, pd, 1);
    let w2 = window(&mut e, pd, 2);
    e.dev().with_hca(|h| {
        assert_eq!(window_type(h.mkeys().by_index(w1 >> 8).unwrap()), Some(1));
        assert_eq!(window_type(h.mkeys().by_index(w2 >> 8).unwrap()), Some(2));
    });
    // An empty KLMS key that is not free, or without umr_en, stays refused.
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    let mut i = window_input(pd, 2);
    set(&mut i, mkc::FREE.within(m), 0);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, mrs::KLM_BAD_LENGTH);
    let mut i = window_input(pd, 2);
    set(&mut i, mkc::UMR_EN.within(m), 0);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, mrs::KLM_BAD_LENGTH);
    // A free window key resolves to nothing.
    e.dev().with_hca(|h| {
        assert_eq!(
            h.mkeys().translate(w2, 0, 1, Access::REMOTE_READ, pd).err(),
            Some(MrFault::Free)
        );
    });
}

#[test]
fn type2_bind_on_a_qp_without_fre_then_rdma_then_local_inv() {
    let mut e = env();
    let pd = e.pd;
    let buf = e.alloc(16384);
    let mr = e.mkey(buf, 16384, ALL);
    let w = window(&mut e, pd, 2);
    let mut t = two(&mut e, None);
    let bqpn = t.b.qpn;
    let op = Op::bind(2, bqpn, 0x99, RR | RW, mr, buf + 4096, 4096);
    ok(&post(&mut e, &mut t.b, &mut t.cb, w, &op));
    let rkey = with_variant(w, 0x99);
    let (free, v, qpn, start, len, access) = state(&e, w);
    assert_eq!(
        (free, v, qpn, start, len),
        (false, 0x99, bqpn, buf + 4096, 4096)
    );
    assert!(access.contains(Access::REMOTE_WRITE) && access.contains(Access::REMOTE_READ));
    assert!(!access.contains(Access::REMOTE_ATOMIC));
    // RDMA WRITE from a through the window lands in the MR.
    let src = e.alloc(64);
    let lk = e.mkey(src, 64, ALL);
    e.write(src, b"through the window");
    let rs = raddr_seg(buf + 4096 + 8, rkey);
    let ds = dseg(18, lk, src);
    e.post_send(
        &mut t.a,
        wqe::opcode::RDMA_WRITE,
        wqe::ctrl::CQ_UPDATE,
        0,
        &[&rs, &ds],
    );
    let c = e.wait_cq(&mut t.ca, &[]);
    assert!(!c.is_error());
    assert_eq!(e.read(buf + 4096 + 8, 18), b"through the window");
    // The old key (the alloc variant) names nothing usable.
    e.dev().with_hca(|h| {
        let user = mlx5_sim::objects::mr::KeyUser { pd, qpn: bqpn };
        assert_eq!(
            h.mkeys()
                .resolve(w, buf + 4096, 1, Access::REMOTE_READ, user)
                .err(),
            Some(MrFault::VariantMismatch)
        );
        // Remote access only through the bound QP (mkc.qpn).
        let other = mlx5_sim::objects::mr::KeyUser { pd, qpn: t.a.qpn };
        assert_eq!(
            h.mkeys()
                .resolve(rkey, buf + 4096, 1, Access::REMOTE_READ, other)
                .err(),
            Some(MrFault::QpMismatch)
        );
        // Bounds: the window, not the MR.
        assert_eq!(
            h.mkeys()
                .resolve(rkey, buf + 4095, 1, Access::REMOTE_READ, user)
                .err(),
            Some(MrFault::OutOfBounds)
        );
        assert_eq!(
            h.mkeys()
                .resolve(rkey, buf + 8192, 1, Access::REMOTE_READ, user)
                .err(),
            Some(MrFault::OutOfBounds)
        );
    });
    // LOCAL_INV on b: free, qpn back to any.
    ok(&post(
        &mut e,
        &mut t.b,
        &mut t.cb,
        rkey,
        &Op::local_inv(0x99),
    ));
    let (free, v, qpn, _, len, _) = state(&e, w);
    assert_eq!((free, v, qpn, len), (true, 0x99, 0xff_ffff, 0));
}

#[test]
fn type2_bind_refusals_leave_the_window_unchanged() {
    let mut e = env();
    let pd = e.pd;
    let pd2 = e.alloc_pd();
    let buf = e.alloc(16384);
    let mr = e.mkey(buf, 16384, ALL);
    let mr_ro = e.mkey(buf, 16384, LR | RR);
    let mr_other_pd = e.mkey_in_pd(pd2, buf, 16384, ALL);
    let w = window(&mut e, pd, 2);
    let w_pd2 = window(&mut e, pd2, 2);
    let before = state(&e, w);
    let cases: Vec<(&str, u32, Op, u8)> = {
        let base = |qpn| Op::bind(2, qpn, 0x55, RR | RW, mr, buf, 4096);
        vec![
            // Window, QP and MR of one PD (C10-72).
            (
                "window of another PD",
                w_pd2,
                Op::bind(2, 0, 0x55, RR, mr_other_pd, buf, 64),
                mw_vendor::PD_MISMATCH,
            ),
            (
                "MR of another PD",
                w,
                Op {
                    klm: vec![(4096, mr_other_pd, buf)],
                    ..base(0)
                },
                mw_vendor::MR_PD,
            ),
            // C10-75: inside the MR.
            (
                "past the MR",
                w,
                Op {
                    start: buf + 16384 - 64,
                    klm: vec![(4096, mr, buf + 16384 - 64)],
                    ..base(0)
                },
                mw_vendor::BOUNDS,
            ),
            (
                "before the MR",
                w,
                Op {
                    start: buf - 64,
                    klm: vec![(4096, mr, buf - 64)],
                    ..base(0)
                },
                mw_vendor::BOUNDS,
            ),
            // The KLM entries cover exactly the length.
            (
                "short KLM",
                w,
                Op {
                    klm: vec![(2048, mr, buf)],
                    ..base(0)
                },
                mw_vendor::BOUNDS,
            ),
            (
                "zero length",
                w,
                Op {
                    len: 0,
                    klm: vec![(0, 0, 0)],
                    ..base(0)
                },
                mw_vendor::BOUNDS,
            ),
            // C10-74: remote write over an MR without local write.
            (
                "RW over read-only MR",
                w,
                Op {
                    klm: vec![(4096, mr_ro, buf)],
                    ..base(0)
                },
                mw_vendor::ACCESS,
            ),
            // A stale MR key, an unknown one, an indirect one (the window itself).
            (
                "stale MR variant",
                w,
                Op {
                    klm: vec![(4096, mr ^ 1, buf)],
                    ..base(0)
                },
                mw_vendor::BAD_MR,
            ),
            (
                "window over a window",
                w,
                Op {
                    klm: vec![(4096, w_pd2, 0)],
                    ..base(0)
                },
                mw_vendor::BAD_MR,
            ),
            // Type 2 binds to the posting QP.
            ("qpn of another QP", w, base(0x12345), mw_vendor::BAD_QPN),
            (
                "no QPN in the mask",
                w,
                Op {
                    mask: base(0).mask & !mk::QPN,
                    ..base(0)
                },
                mw_vendor::BAD_QPN,
            ),
            // Only what rdma-core's window WQEs carry.
            (
                "PD in the mask",
                w,
                Op {
                    mask: base(0).mask | mk::PD,
                    ..base(0)
                },
                mw_vendor::UNSUPPORTED,
            ),
            (
                "no FREE in the mask",
                w,
                Op {
                    mask: base(0).mask & !mk::FREE,
                    ..base(0)
                },
                mw_vendor::UNSUPPORTED,
            ),
            (
                "CHECK_FREE flag",
                w,
                Op {
                    flags: FLAG_INLINE | FLAG_CHECK_FREE,
                    ..base(0)
                },
                mw_vendor::UNSUPPORTED,
            ),
            (
                "KLM by pointer",
                w,
                Op {
                    flags: FLAG_CHECK_NOT_FREE,
                    ..base(0)
                },
                mw_vendor::UNSUPPORTED,
            ),
            (
                "more KLMs than room",
                w,
                Op {
                    klm: vec![(1024, mr, buf); 5],
                    ..base(0)
                },
                mw_vendor::BOUNDS,
            ),
        ]
    };
    for (what, key, op, vendor) in cases {
        let mut t = two(&mut e, None);
        let mut op = op;
        if op.qpn == 0 {
            op.qpn = t.b.qpn;
        }
        let c = post(&mut e, &mut t.b, &mut t.cb, key, &op);
        assert!(c.is_error(), "{what}: accepted");
        assert_eq!(
            (c.syndrome(), c.vendor_syndrome()),
            (cqe::syndrome::MW_BIND_ERR, vendor),
            "{what}"
        );
        assert_eq!(state(&e, w), before, "{what}: the window changed");
    }
    // The wrong variant in the ctrl imm.
    let mut t = two(&mut e, None);
    let op = Op::bind(2, t.b.qpn, 0x55, RR, mr, buf, 64);
    refused(
        &post(&mut e, &mut t.b, &mut t.cb, w ^ 1, &op),
        mw_vendor::BAD_WINDOW,
    );
    // A QP of another PD than the window (C10-72).
    let mut t = two(&mut e, Some(pd2));
    let op = Op::bind(2, t.b.qpn, 0x55, RR, mr, buf, 64);
    refused(
        &post(&mut e, &mut t.b, &mut t.cb, w, &op),
        mw_vendor::PD_MISMATCH,
    );
    assert_eq!(state(&e, w), before);
}

#[test]
fn bound_type2_window_cannot_be_bound_again_or_invalidated_elsewhere() {
    let mut e = env();
    let pd = e.pd;
    let buf = e.alloc(16384);
    let mr = e.mkey(buf, 16384, ALL);
    let w = window(&mut e, pd, 2);
    let mut t = two(&mut e, None);
    let bqpn = t.b.qpn;
    ok(&post(
        &mut e,
        &mut t.b,
        &mut t.cb,
        w,
        &Op::bind(2, bqpn, 0x10, RR, mr, buf, 64),
    ));
    let rkey = with_variant(w, 0x10);
    let bound = state(&e, w);
    // o10-37.2.30: bound, so no second bind, with or without the free check.
    let mut t2 = two(&mut e, None);
    let mut again = Op::bind(2, t2.b.qpn, 0x11, RR, mr, buf, 64);
    refused(
        &post(&mut e, &mut t2.b, &mut t2.cb, rkey, &again),
        mw_vendor::NOT_FREE,
    );
    let mut t3 = two(&mut e, None);
    again.qpn = t3.b.qpn;
    again.flags &= !FLAG_CHECK_NOT_FREE;
    refused(
        &post(&mut e, &mut t3.b, &mut t3.cb, rkey, &again),
        mw_vendor::NOT_FREE,
    );
    // LOCAL_INV from another QP: CHECK_QPN fails.
    let mut t4 = two(&mut e, None);
    refused(
        &post(&mut e, &mut t4.a, &mut t4.ca, rkey, &Op::local_inv(0x10)),
        mw_vendor::QPN_CHECK,
    );
    // A zero-length "bind" (type 1 unbind form) of a type 2 window: o10-37.2.40.
    let mut unbind = Op::local_inv(0x10);
    unbind.flags &= !FLAG_CHECK_QPN;
    unbind.mask &= !mk::QPN;
    refused(
        &post(&mut e, &mut t.b, &mut t.cb, rkey, &unbind),
        mw_vendor::TYPE2_UNBIND,
    );
    assert_eq!(state(&e, w), bound);
}

/// DESTROY_QP of the QP a type 2 window is bound to: the window stays bound but names no QP
/// (rxe: the window holds its QP object and `rxe_lookup_mw` compares it), so a new QP that
/// gets the same QPN has no access (REM_ACCESS_ERR at the requester, nothing written), cannot
/// invalidate it (CHECK_QPN) nor have it invalidated remotely; DESTROY_MKEY still works.
#[test]
fn type2_window_of_a_destroyed_qp_grants_nothing_to_a_qp_reusing_its_qpn() {
    let mut e = env();
    let pd = e.pd;
    let buf = e.alloc(16384);
    let mr = e.mkey(buf, 16384, ALL);
    let rbuf = e.alloc(4096);
    let rk = e.mkey(rbuf, 4096, ALL);
    let src = e.alloc(64);
    let lk = e.mkey(src, 64, ALL);
    e.write(src, b"after the QP died");
    let w = window(&mut e, pd, 2);
    let mut t = two(&mut e, None);
    let bqpn = t.b.qpn;
    ok(&post(
        &mut e,
        &mut t.b,
        &mut t.cb,
        w,
        &Op::bind(2, bqpn, 0x21, RR | RW, mr, buf, 4096),
    ));
    let rkey = with_variant(w, 0x21);
    let mut dq = input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
    set(&mut dq, destroy_qp_in::QPN, bqpn);
    e.raw.exec(&dq, 16).ok();
    let (free, v, qpn, start, len, _) = state(&e, w);
    assert_eq!(
        (free, v, qpn, start, len),
        (false, 0x21, mlx5_sim::objects::mw::DEAD_QPN, buf, 4096),
        "still bound, to no QP"
    );
    e.dev().with_hca(|h| {
        let user = mlx5_sim::objects::mr::KeyUser { pd, qpn: bqpn };
        assert_eq!(
            h.mkeys()
                .resolve(rkey, buf, 1, Access::REMOTE_WRITE, user)
                .err(),
            Some(MrFault::QpMismatch)
        );
    });
    // A new QP of the same PD with the dead QP's number, connected to a.
    e.dev().with_hca(|h| h.qps_mut().set_next_qpn(bqpn));
    let cc = e.cq(6);
    let c = e.qp(&cc, &cc, 6, 4);
    assert_eq!(c.qpn, bqpn, "the QPN is reused");
    e.connect_local(&c, t.a.qpn);
    // RDMA WRITE from a through the window: the responder (the new QP) refuses it.
    let rs = raddr_seg(buf + 8, rkey);
    let ds = dseg(17, lk, src);
    e.post_send(
        &mut t.a,
        wqe::opcode::RDMA_WRITE,
        wqe::ctrl::CQ_UPDATE,
        0,
        &[&rs, &ds],
    );
    let cqe = e.wait_cq(&mut t.ca, &[]);
    assert!(cqe.is_error(), "the write through the window was accepted");
    assert_eq!(cqe.syndrome(), cqe::syndrome::REMOTE_ACCESS_ERR);
    assert_eq!(e.read(buf + 8, 17), vec![0u8; 17], "nothing written");
    // Each refusal below moves its QP to the error state: every check gets a fresh QP with
    // the dead QP's number. A SEND_INVAL arriving at one cannot invalidate the window.
    let reuse = |e: &mut Env, old: &Qp| {
        let mut dq = input(opcode::DESTROY_QP, 0, destroy_qp_in::BYTES);
        set(&mut dq, destroy_qp_in::QPN, old.qpn);
        e.raw.exec(&dq, 16).ok();
        e.dev().with_hca(|h| h.qps_mut().set_next_qpn(bqpn));
        let cq = e.cq(6);
        let q = e.qp(&cq, &cq, 6, 4);
        assert_eq!(q.qpn, bqpn, "the QPN is reused again");
        (q, cq)
    };
    let (mut d, mut dcq) = reuse(&mut e, &c);
    let rcq = e.cq(6);
    let mut r = e.qp(&rcq, &rcq, 6, 4);
    e.connect_local(&d, r.qpn);
    e.connect_local(&r, d.qpn);
    e.post_recv(&mut d, &[(4096, rk, rbuf)]);
    e.post_send(
        &mut r,
        wqe::opcode::SEND_INVAL,
        wqe::ctrl::CQ_UPDATE,
        rkey,
        &[&ds],
    );
    let cqe = e.wait_cq(&mut { rcq }, &[]);
    assert!(cqe.is_error(), "the remote invalidation was accepted");
    assert_eq!(cqe.syndrome(), cqe::syndrome::REMOTE_INVAL_REQ_ERR);
    let _ = e.poll_cq(&mut dcq);
    // Nor can it invalidate the window itself (CHECK_QPN).
    let (mut f, mut fcq) = reuse(&mut e, &d);
    e.connect_local(&f, r.qpn);
    refused(
        &post(&mut e, &mut f, &mut fcq, rkey, &Op::local_inv(0x21)),
        mw_vendor::QPN_CHECK,
    );
    let (free, _, qpn, ..) = state(&e, w);
    assert_eq!(
        (free, qpn),
        (false, mlx5_sim::objects::mw::DEAD_QPN),
        "still bound, to no QP"
    );
    // It can still be destroyed.
    e.destroy_mkey(w).ok();
}

#[test]
fn type1_windows_rebind_unbind_and_refuse_local_inv() {
    let mut e = env();
    let pd = e.pd;
    let buf = e.alloc(16384);
    let mr = e.mkey(buf, 16384, ALL);
    let w = window(&mut e, pd, 1);
    let mut t = two(&mut e, None);
    ok(&post(
        &mut e,
        &mut t.a,
        &mut t.ca,
        w,
        &Op::bind(1, 0, 0x21, RR, mr, buf, 64),
    ));
    let r1 = with_variant(w, 0x21);
    assert_eq!(state(&e, w).2, 0xff_ffff);
    // Bound again while bound (type 1), then usable from any QP of the PD.
    ok(&post(
        &mut e,
        &mut t.a,
        &mut t.ca,
        r1,
        &Op::bind(1, 0, 0x22, RR | RW, mr, buf + 64, 128),
    ));
    let r2 = with_variant(w, 0x22);
    e.dev().with_hca(|h| {
        for qpn in [t.a.qpn, t.b.qpn] {
            let u = mlx5_sim::objects::mr::KeyUser { pd, qpn };
            assert!(h
                .mkeys()
                .resolve(r2, buf + 64, 128, Access::REMOTE_WRITE, u)
                .is_ok());
        }
    });
    // A type 1 bind naming a QP is refused.
    let mut bad = Op::bind(1, 0, 0x23, RR, mr, buf, 64);
    bad.mask |= mk::QPN;
    bad.qpn = t.a.qpn;
    refused(
        &post(&mut e, &mut t.a, &mut t.ca, r2, &bad),
        mw_vendor::BAD_QPN,
    );
    // LOCAL_INV of a type 1 window (qpn 0xffffff): CHECK_QPN fails (o10-37.2.26).
    let mut t = two(&mut e, None);
    refused(
        &post(&mut e, &mut t.a, &mut t.ca, r2, &Op::local_inv(0x22)),
        mw_vendor::QPN_CHECK,
    );
    // The unbind form: free, nothing maps.
    let mut unbind = Op::local_inv(0x24);
    unbind.flags &= !FLAG_CHECK_QPN;
    unbind.mask &= !mk::QPN;
    let mut t = two(&mut e, None);
    ok(&post(&mut e, &mut t.a, &mut t.ca, r2, &unbind));
    let (free, v, _, _, len, _) = state(&e, w);
    assert_eq!((free, v, len), (true, 0x24, 0));
}

/// A window UMR still needs the window's own QP rules, while any other UMR still needs `fre`.
#[test]
fn plain_umr_on_a_qp_without_fre_is_still_refused() {
    let mut e = env();
    let buf = e.alloc(4096);
    let mr = e.mkey(buf, 4096, ALL);
    let mut t = two(&mut e, None);
    let op = Op::bind(1, 0, 0x30, RR, mr, buf, 64);
    let c = post(&mut e, &mut t.a, &mut t.ca, mr, &op);
    assert!(c.is_error());
    assert_eq!(
        c.vendor_syndrome(),
        mlx5_sim::datapath::umr::umr_vendor::NOT_FRE
    );
}

#[test]
fn send_with_invalidate_rules() {
    let mut e = env();
    let pd = e.pd;
    let buf = e.alloc(16384);
    let mr = e.mkey(buf, 16384, ALL);
    let rbuf = e.alloc(4096);
    let rk = e.mkey(rbuf, 4096, ALL);
    let src = e.alloc(64);
    let lk = e.mkey(src, 64, ALL);
    let w2 = window(&mut e, pd, 2);
    let w1 = window(&mut e, pd, 1);
    let mut t = two(&mut e, None);
    let bqpn = t.b.qpn;
    ok(&post(
        &mut e,
        &mut t.b,
        &mut t.cb,
        w2,
        &Op::bind(2, bqpn, 0x40, RR, mr, buf, 64),
    ));
    ok(&post(
        &mut e,
        &mut t.b,
        &mut t.cb,
        w1,
        &Op::bind(1, 0, 0x41, RR, mr, buf, 64),
    ));
    let (r2, r1) = (with_variant(w2, 0x40), with_variant(w1, 0x41));
    // SEND_INVAL of the type 2 window from a: the receive CQE is RESP_SEND_INV with the rkey.
    e.post_recv(&mut t.b, &[(4096, rk, rbuf)]);
    let ds = dseg(8, lk, src);
    e.post_send(
        &mut t.a,
        wqe::opcode::SEND_INVAL,
        wqe::ctrl::CQ_UPDATE,
        r2,
        &[&ds],
    );
    let c = e.wait_cq(&mut t.ca, &[]);
    assert!(!c.is_error());
    assert_eq!(c.wqe_opcode(), wqe::opcode::SEND_INVAL);
    let r = e.wait_cq(&mut t.cb, &[]);
    assert_eq!(
        (r.opcode(), r.imm(), r.byte_cnt()),
        (cqe::opcode::RESP_SEND_INV, r2, 8)
    );
    let (free, v, qpn, ..) = state(&e, w2);
    assert_eq!((free, v, qpn), (true, 0x40, 0xff_ffff));
    // Refused, each with NAK invalid request: a type 1 window (no en_rinval), an MR, a stale
    // variant, a window bound to another QP, one already invalid.
    let mut t2 = two(&mut e, None);
    let b2 = t2.b.qpn;
    let w3 = window(&mut e, pd, 2);
    ok(&post(
        &mut e,
        &mut t2.b,
        &mut t2.cb,
        w3,
        &Op::bind(2, b2, 0x42, RR, mr, buf, 64),
    ));
    let r3 = with_variant(w3, 0x42);
    for (what, key) in [
        ("type 1", r1),
        ("MR", mr),
        ("stale variant", r3 ^ 1),
        ("another QP's window", r3),
        ("already invalid", r2),
    ] {
        let mut t = two(&mut e, None);
        e.post_recv(&mut t.b, &[(4096, rk, rbuf)]);
        e.post_send(
            &mut t.a,
            wqe::opcode::SEND_INVAL,
            wqe::ctrl::CQ_UPDATE,
            key,
            &[&ds],
        );
        let c = e.wait_cq(&mut t.ca, &[]);
        assert!(c.is_error(), "{what}: accepted");
        assert_eq!(c.syndrome(), cqe::syndrome::REMOTE_INVAL_REQ_ERR, "{what}");
    }
    assert!(!state(&e, w1).0 && !state(&e, w3).0);
}
