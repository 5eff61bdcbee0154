//! The model's fault matrix: the driver returns typed errors, never hangs, never panics.

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mlx5::{
    Context, DeliveryStatus, Error, QpCaps, RecvWr, SendData, SendFlags, SendOp, SendWr, WcStatus,
};

fn ping() -> SendWr<'static, TestHal> {
    SendWr {
        wr_id: 1,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"ping"),
        flags: SendFlags::SIGNALED,
    }
}

#[test]
fn command_timeout_is_typed_and_later_commands_still_fail_cleanly() {
    let (sim, ctx) = open();
    sim.with_hca(|h| h.update_faults(|f| f.swallow_commands = true));
    let e = ctx.alloc_pd().err();
    assert!(
        matches!(e, Some(Error::CommandTimeout { opcode: 0x800 })),
        "{e:?}"
    );
    sim.with_hca(|h| h.update_faults(|f| f.swallow_commands = false));
    // The stuck slot is not reused; the next command goes to another slot and works.
    let pd = ctx.alloc_pd();
    assert!(pd.is_ok(), "{:?}", pd.err());
}

#[test]
fn delivery_status_is_reported_as_such() {
    let (sim, ctx) = open();
    sim.with_hca(|h| h.update_faults(|f| f.next_delivery_status = Some(0x7)));
    let e = ctx.alloc_pd().err();
    assert_eq!(
        e,
        Some(Error::Delivery {
            opcode: 0x800,
            status: DeliveryStatus::InLengthErr
        })
    );
    assert!(ctx.alloc_pd().is_ok());
}

#[test]
fn garbled_output_length_is_refused() {
    let (sim, ctx) = open();
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    let e = ctx.alloc_pd().err();
    assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x800 }));
}

#[test]
fn fatal_health_makes_every_later_call_fail() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let m = pd.alloc_mr(4096, mlx5::AccessFlags::ALL).unwrap();
    let bound = p.a.bind_mr(&m).unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.fatal_health = Some(0x8)));
    assert_eq!(
        ctx.alloc_pd().err(),
        Some(Error::DeviceFatal { syndrome: 0x8 })
    );
    assert_eq!(
        ctx.create_cq(4).err(),
        Some(Error::DeviceFatal { syndrome: 0x8 })
    );
    assert_eq!(
        pd.alloc_mr(4096, mlx5::AccessFlags::ALL).err(),
        Some(Error::DeviceFatal { syndrome: 0x8 })
    );
    let mut wc = [mlx5::WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), Err(Error::DeviceFatal { syndrome: 0x8 }));
    assert_eq!(
        ctx.poll_events().err(),
        Some(Error::DeviceFatal { syndrome: 0x8 })
    );
    let fatal = Some(Error::DeviceFatal { syndrome: 0x8 });
    assert_eq!(p.a.post_send(&[ping()]).err(), fatal);
    let r = mlx5::Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    assert_eq!(
        p.a.post_write(0, bound.sge(0, 8), r, mlx5::SendFlags::SIGNALED)
            .err(),
        fatal
    );
    assert_eq!(p.b.post_recv(&[]).err(), fatal);
    drop(p);
    drop(m);
    drop(cq);
    drop(pd);
    // Teardown reports the dead device instead of hanging.
    assert!(ctx.close().is_err());
}

#[test]
fn bring_up_against_a_dead_device_fails_fast() {
    let sim = SimHal::new();
    sim.with_hca(|h| h.update_faults(|f| f.swallow_commands = true));
    let t = std::time::Instant::now();
    let e = Context::open(TestHal(sim.clone()), test_config()).err();
    assert!(matches!(e, Some(Error::CommandTimeout { .. })), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(60));
}

#[test]
fn page_requests_are_served_by_poll_events() {
    let (sim, ctx) = open();
    let before = ctx.pages_held();
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(5)));
    let n = ctx.poll_events().unwrap();
    assert!(n >= 1);
    assert_eq!(ctx.pages_held(), before + 5);
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(-3)));
    ctx.poll_events().unwrap();
    assert_eq!(ctx.pages_held(), before + 2);
    ctx.close().unwrap();
}

#[test]
fn page_request_is_served_while_polling_a_cq() {
    let (sim, ctx) = open();
    let mut cq = ctx.create_cq(16).unwrap();
    let before = ctx.pages_held();
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(2)));
    let mut wc = [mlx5::WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    assert_eq!(ctx.pages_held(), before + 2);
}

#[test]
fn stuck_owner_bit_means_no_completion_not_a_hang() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 64);
    let cqn = p.cq_a.cqn();
    sim.with_hca(|h| h.update_faults(|f| f.stuck_cq_owner = Some(cqn)));
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[m.sge(0, 64)],
    }])
    .unwrap();
    p.a.post_send(&[ping()]).unwrap();
    let w = p.cq_a.poll_wait(1, Duration::from_millis(200)).unwrap();
    assert!(
        w.is_empty(),
        "a CQE the device never handed over is not consumed: {w:?}"
    );
}

#[test]
fn garbage_and_duplicate_cqes_are_reported_not_trusted() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[m.sge(0, 64)],
    }])
    .unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.corrupt_next_cqe = true));
    p.a.post_send(&[ping()]).unwrap();
    let mut w = p.cq_a.poll_wait(1, Duration::from_secs(2)).unwrap();
    w.extend(p.cq_b.poll_wait(1, Duration::from_secs(2)).unwrap());
    eprintln!("corrupt CQE -> {w:?}");
    // Exactly one of the two completions was corrupted: it is reported as BadCqe, the other
    // one is intact.
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(
        w.iter().filter(|w| w.status == WcStatus::BadCqe).count(),
        1,
        "{w:?}"
    );
    assert_eq!(
        w.iter()
            .filter(|w| w.status == WcStatus::Success && w.wr_id == 1)
            .count(),
        1,
        "{w:?}"
    );
    assert!(
        !sim.with_hca(|h| h.faults().corrupt_next_cqe),
        "the fault was used"
    );

    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    sim.with_hca(|h| h.update_faults(|f| f.duplicate_next_cqe = true));
    p.a.post_send(&[SendWr {
        wr_id: 7,
        op: SendOp::Write {
            remote: mlx5::Remote {
                addr: m.addr(),
                rkey: m.rkey(),
            },
            imm: None,
        },
        data: SendData::Inline(b"dup"),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let w = p.cq_a.poll_wait(2, Duration::from_secs(2)).unwrap();
    eprintln!(
        "duplicate CQE -> {w:?} (a = {}, b = {}, cq_a = {})",
        p.a.qpn(),
        p.b.qpn(),
        p.cq_a.cqn()
    );
    assert_eq!(
        w.iter()
            .filter(|w| w.wr_id == 7 && w.status == WcStatus::Success)
            .count(),
        1,
        "completed once: {w:?}"
    );
    assert!(w.len() < 2 || w[1].status == WcStatus::BadCqe);
    let _ = Arc::strong_count(&sim);
}

#[test]
fn a_dying_device_closes_send_gates_that_are_open() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let local = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    let bound = p.a.bind_mr(&local).unwrap();
    let r = mlx5::Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    let sge = [local.sge(8, 8)];
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&sge),
        flags: SendFlags::SIGNALED,
    };
    // Both fast paths check the device when their gate opens, then not again until it closes.
    p.a.post_write(1, bound.sge(0, 8), r, SendFlags::SIGNALED)
        .unwrap();
    p.a.post_send(&[wr]).unwrap();
    assert_eq!(wait(&mut p.cq_a, 2).len(), 2);
    sim.with_hca(|h| h.update_faults(|f| f.fatal_health = Some(0x8)));
    let fatal = Some(Error::DeviceFatal { syndrome: 0x8 });
    // A command finds the device dead (health sensors) ...
    assert_eq!(ctx.alloc_pd().err(), fatal);
    // ... which closes every QP's gate: no later post reaches the device.
    let db = sim.doorbells();
    assert_eq!(
        p.a.post_write(3, bound.sge(0, 8), r, SendFlags::SIGNALED)
            .err(),
        fatal
    );
    assert_eq!(p.a.post_send(&[wr]).err(), fatal);
    assert_eq!(p.b.post_send(&[ping()]).err(), fatal);
    assert_eq!(sim.doorbells(), db, "no doorbell after the device died");
}

#[test]
fn page_requests_are_served_while_polling_only_full_batches() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    // 7 entries: a ring of 8 CQEs.
    let mut cq = ctx.create_cq(7).unwrap();
    let mut a = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let mut b = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &Default::default()).unwrap();
    b.connect(&ea, &Default::default()).unwrap();
    let m = pd.alloc_mr(4096, mlx5::AccessFlags::ALL).unwrap();
    let bound = a.bind_mr(&m).unwrap();
    let r = mlx5::Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let before = ctx.pages_held();
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(2)));
    let mut wc = [mlx5::WorkCompletion::default(); 1];
    // 3 x 6 completions, each polled by a call that finds its one slot filled (the model
    // completes loopback WRs before the doorbell returns): the CQ never looks empty.
    for round in 0..3u64 {
        for i in 0..6 {
            a.post_write(round * 6 + i, bound.sge(0, 8), r, SendFlags::SIGNALED)
                .unwrap();
        }
        for i in 0..6 {
            assert_eq!(cq.poll(&mut wc).unwrap(), 1);
            assert_eq!(
                (wc[0].wr_id, wc[0].status),
                (round * 6 + i, WcStatus::Success)
            );
        }
    }
    // 18 CQEs passed the end of the 8-CQE ring twice: the poller looked at the event queue.
    assert_eq!(ctx.pages_held(), before + 2);
}
