//! Bring-up and teardown against the emulated HCA, in both execution modes, across a wire,
//! and after a function-level reset.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{Context, Hal, QpCaps, RecvWr, SendData, SendFlags, SendOp, SendWr, WcStatus};
use mlx5_sim::hca::Lifecycle;

#[test]
fn bring_up_order_and_teardown_reclaims_every_page() {
    let sim = SimHal::new();
    sim.with_hca(|h| h.trace_mut().capture());
    let ctx = Context::open(TestHal(sim.clone()), test_config()).expect("bring-up");
    let up = commands(&sim.with_hca(|h| h.trace_mut().take_captured()));
    let pos = |name: &str| {
        up.iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("{name} not sent: {up:?}"))
    };
    // rdma-core mlx5_vfio_setup_function / Linux mlx5_function_setup order.
    let order = [
        "ENABLE_HCA",
        "QUERY_ISSI",
        "SET_ISSI",
        "QUERY_PAGES",
        "MANAGE_PAGES",
        "ACCESS_REG",
        "QUERY_HCA_CAP",
        "SET_HCA_CAP",
        "INIT_HCA",
        "ALLOC_UAR",
        "CREATE_EQ",
        "ALLOC_TRANSPORT_DOMAIN",
        "QUERY_NIC_VPORT_CONTEXT",
    ];
    for w in order.windows(2) {
        assert!(pos(w[0]) < pos(w[1]), "{} before {}: {up:?}", w[0], w[1]);
    }
    assert_eq!(up[0], "ENABLE_HCA");
    assert!(
        up.iter().any(|c| c == "MODIFY_NIC_VPORT_CONTEXT"),
        "RoCE enabled on the vport"
    );
    assert!(
        up.iter().any(|c| c == "SET_ROCE_ADDRESS"),
        "default GID programmed"
    );
    let (maj, min, sub) = ctx.fw_version();
    eprintln!(
        "fw {maj}.{min}.{sub}, mac {:02x?}, {} commands, {} pages",
        ctx.mac(),
        ctx.commands_sent(),
        ctx.pages_held()
    );
    assert!(
        ctx.pages_held() > 0,
        "the device holds firmware pages after bring-up"
    );
    assert_eq!(ctx.mac(), sim.with_hca(|h| h.mac()));
    assert!(sim.with_hca(|h| h.roce_enabled()));
    ctx.close().expect("teardown");
    let down = commands(&sim.with_hca(|h| h.trace_mut().take_captured()));
    eprintln!("teardown: {down:?}");
    let t = down
        .iter()
        .position(|c| c == "TEARDOWN_HCA")
        .expect("TEARDOWN_HCA");
    let m = down
        .iter()
        .rposition(|c| c == "MANAGE_PAGES")
        .expect("page reclaim");
    assert!(t < m);
    assert_eq!(down.last().map(String::as_str), Some("DISABLE_HCA"));
    assert_eq!(sim.with_hca(|h| h.lifecycle()), Lifecycle::Disabled);
}

#[test]
fn bring_up_with_a_device_thread() {
    let sim = SimHal::threaded();
    let ctx = Context::open(TestHal(sim.clone()), test_config()).expect("bring-up (threaded)");
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[m.sge(0, 64)],
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"threaded"),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(&mut p.cq_b, 1)[0].byte_len, 8);
    drop(p);
    drop(m);
    ctx.close().unwrap();
}

#[test]
fn two_hcas_over_the_wire() {
    let (sa, sb) = SimHal::pair();
    let ca = Context::open(TestHal(sa.clone()), test_config()).unwrap();
    let cb = Context::open(TestHal(sb.clone()), test_config()).unwrap();
    assert_ne!(ca.mac(), cb.mac());
    let (pda, pdb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, mut cqb) = (ca.create_cq(64).unwrap(), cb.create_cq(64).unwrap());
    let mut qa = pda.create_qp(&cqa, &cqa, &QpCaps::default()).unwrap();
    let mut qb = pdb.create_qp(&cqb, &cqb, &QpCaps::default()).unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    assert_eq!(ea.gid, mlx5::hca::link_local_gid(ca.mac()));
    qa.connect(&eb, &Default::default()).unwrap();
    qb.connect(&ea, &Default::default()).unwrap();
    let ma = mr(&pda, 1 << 16);
    let mb = mr(&pdb, 1 << 16);
    let data = pattern(40_000, 5);
    ma.write(0, &data).unwrap();
    let r = mlx5::Remote {
        addr: mb.addr(),
        rkey: mb.rkey(),
    };
    qa.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&[ma.sge(0, 40_000)]),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let w = wait(&mut cqa, 1);
    assert_eq!(
        w.first().map(|w| w.status),
        Some(WcStatus::Success),
        "{w:?}"
    );
    let mut got = vec![0u8; 40_000];
    mb.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    qb.post_recv(&[RecvWr {
        wr_id: 9,
        sges: &[mb.sge(0, 4096)],
    }])
    .unwrap();
    qa.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Send { imm: Some(3) },
        data: SendData::Sges(&[ma.sge(100, 1000)]),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    assert_eq!(wait(&mut cqa, 1)[0].status, WcStatus::Success);
    let w = wait(&mut cqb, 1);
    assert_eq!((w[0].wr_id, w[0].byte_len, w[0].imm), (9, 1000, Some(3)));
}

#[test]
fn function_level_reset_then_bring_up_again() {
    let sim = SimHal::new();
    let hal = TestHal(sim.clone());
    let ctx = Context::open(hal.clone(), test_config()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // Abandon the context without teardown, as after a crash, then reset the function.
    std::mem::forget(pd);
    std::mem::forget(ctx);
    hal.function_level_reset().unwrap();
    let ctx = Context::open(hal, test_config()).expect("bring-up after FLR");
    assert!(ctx.pages_held() > 0);
    ctx.close().unwrap();
}
