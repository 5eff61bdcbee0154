//! Completion events, the CQ arm sequence number, the armed EQ, CQ resize, refused destroys
//! that give the handle back, and the quarantine of CQ buffers after garbled replies.

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::*;
use mlx5::{
    CompletionChannel, CompletionQueue, ConnectOptions, Context, CqEvent, Error, InvalidInput,
    ProtectionDomain, QpCaps, QueuePair, RecvWr, SendData, SendFlags, SendOp, SendWr, WcStatus,
    WorkCompletion,
};

/// The model's EQ number of the context's one EQ (the model hands out EQ numbers from 1).
const EQN: u8 = mlx5_sim::objects::eq::FIRST_EQN as u8;

/// Two connected QPs whose CQs report to `ch`.
struct EvPair {
    _pd: ProtectionDomain<TestHal>,
    cq_a: CompletionQueue<TestHal>,
    cq_b: CompletionQueue<TestHal>,
    a: QueuePair<TestHal>,
    b: QueuePair<TestHal>,
}

fn ev_pair(ctx: &Context<TestHal>, ch: &CompletionChannel<TestHal>) -> EvPair {
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.create_cq_with_channel(64, ch).unwrap();
    let cq_b = ctx.create_cq_with_channel(64, ch).unwrap();
    let caps = QpCaps::default();
    let mut a = pd.create_qp(&cq_a, &cq_a, &caps).unwrap();
    let mut b = pd.create_qp(&cq_b, &cq_b, &caps).unwrap();
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &ConnectOptions::default()).unwrap();
    b.connect(&ea, &ConnectOptions::default()).unwrap();
    EvPair {
        _pd: pd,
        cq_a,
        cq_b,
        a,
        b,
    }
}

/// A QP on `cq` connected to a peer QP on a CQ of its own (kept alive by the tuple).
fn qp_on(
    ctx: &Context<TestHal>,
    pd: &ProtectionDomain<TestHal>,
    cq: &CompletionQueue<TestHal>,
) -> (
    QueuePair<TestHal>,
    QueuePair<TestHal>,
    CompletionQueue<TestHal>,
) {
    let other = ctx.create_cq(64).unwrap();
    let caps = QpCaps::default();
    let mut a = pd.create_qp(cq, cq, &caps).unwrap();
    let mut b = pd.create_qp(&other, &other, &caps).unwrap();
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &ConnectOptions::default()).unwrap();
    b.connect(&ea, &ConnectOptions::default()).unwrap();
    (a, b, other)
}

fn write_wr(
    m: &mlx5::MemoryRegion<TestHal>,
    wr_id: u64,
    flags: SendFlags,
) -> SendWr<'static, TestHal> {
    SendWr {
        wr_id,
        op: SendOp::Write {
            remote: mlx5::Remote {
                addr: m.addr(),
                rkey: m.rkey(),
            },
            imm: None,
        },
        data: SendData::Inline(b"event"),
        flags,
    }
}

fn arm_sn(sim: &SimHal, cqn: u32) -> (u32, u32) {
    sim.with_hca(|h| {
        let c = h.cqs().get(cqn).expect("cq");
        (c.arm_sn(), c.arms())
    })
}

const SHORT: Duration = Duration::from_millis(50);
const LONG: Duration = Duration::from_secs(5);

#[test]
fn arm_sn_advances_once_per_completion_event_not_per_arm() {
    let (sim, ctx) = open();
    let ch = ctx.create_comp_channel();
    let mut p = ev_pair(&ctx, &ch);
    let m = mr(&p._pd, 4096);
    let cqn = p.cq_a.cqn();
    // Arming twice without an event in between: the same sequence number both times
    // (rdma-core mlx5_arm_cq sends cq->arm_sn, which only mlx5_cq_event advances).
    p.cq_a.req_notify_cq(false).unwrap();
    p.cq_a.req_notify_cq(false).unwrap();
    assert_eq!(arm_sn(&sim, cqn), (0, 2));
    // A completion fires the armed CQ; taking the event advances the sequence number.
    p.a.post_send(&[write_wr(&m, 1, SendFlags::SIGNALED)])
        .unwrap();
    let e = ch.get_cq_event(LONG).unwrap();
    assert_eq!(e, CqEvent { cqn });
    assert_eq!(wait(&mut p.cq_a, 1)[0].wr_id, 1);
    p.cq_a.ack_events(1).unwrap();
    p.cq_a.req_notify_cq(false).unwrap();
    assert_eq!(arm_sn(&sim, cqn), (1, 3));
    // Four events later the 2-bit field wraps (arm_value masks sn & 3).
    for i in 0..4u64 {
        p.a.post_send(&[write_wr(&m, 10 + i, SendFlags::SIGNALED)])
            .unwrap();
        assert_eq!(ch.get_cq_event(LONG).unwrap().cqn, cqn);
        assert_eq!(wait(&mut p.cq_a, 1)[0].wr_id, 10 + i);
        p.cq_a.req_notify_cq(false).unwrap();
    }
    p.cq_a.ack_events(4).unwrap();
    // 2 + 1 + 4 arm doorbells; 5 events taken.
    assert_eq!(arm_sn(&sim, cqn), (5 & 3, 7));
}

#[test]
fn completion_channel_delivers_events_and_times_out_without_one() {
    let (_sim, ctx) = open();
    let ch = ctx.create_comp_channel();
    let mut p = ev_pair(&ctx, &ch);
    let m = mr(&p._pd, 4096);
    // Not armed: a completion makes no event.
    p.a.post_send(&[write_wr(&m, 1, SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(wait(&mut p.cq_a, 1).len(), 1);
    assert_eq!(ch.get_cq_event(SHORT), Err(Error::Timeout));
    assert_eq!(ch.try_get_cq_event(), Ok(None));
    // Armed for solicited completions only: a plain receive completion makes no event, a
    // solicited one does (REQ_NOT_SOL).
    let buf = mr(&p._pd, 4096);
    p.b.post_recv(&[
        RecvWr {
            wr_id: 100,
            sges: &[buf.sge(0, 64)],
        },
        RecvWr {
            wr_id: 101,
            sges: &[buf.sge(64, 64)],
        },
    ])
    .unwrap();
    p.cq_b.req_notify_cq(true).unwrap();
    let send = |flags| SendWr {
        wr_id: 2,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"hi"),
        flags,
    };
    p.a.post_send(&[send(SendFlags::NONE)]).unwrap();
    let w = wait(&mut p.cq_b, 1);
    assert_eq!((w[0].wr_id, w[0].status), (100, WcStatus::Success));
    assert_eq!(ch.get_cq_event(SHORT), Err(Error::Timeout));
    p.a.post_send(&[send(SendFlags::SOLICITED)]).unwrap();
    let e = ch.get_cq_event(LONG).unwrap();
    assert_eq!(e.cqn, p.cq_b.cqn());
    assert_eq!(wait(&mut p.cq_b, 1)[0].wr_id, 101);
    // The event counts until acknowledged; acknowledging more than was taken is refused.
    assert_eq!(p.cq_b.unacked_events(), 1);
    assert_eq!(
        p.cq_b.ack_events(2),
        Err(Error::Invalid(InvalidInput::OutOfRange))
    );
    p.cq_b.ack_events(1).unwrap();
    assert_eq!(p.cq_b.unacked_events(), 0);
    // Events of a CQ without a channel still go to the context's event log.
    let mut plain = ctx.create_cq(4).unwrap();
    plain.req_notify_cq(false).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (mut q, _peer, _peer_cq) = qp_on(&ctx, &pd, &plain);
    q.post_send(&[write_wr(&m, 9, SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(wait(&mut plain, 1)[0].wr_id, 9);
    ctx.poll_events().unwrap();
    let cqn = plain.cqn();
    assert!(ctx.take_events().contains(&mlx5::Event::Completion { cqn }));
    assert_eq!(ch.pending(), 0);
}

#[test]
fn cq_destroy_waits_for_acknowledged_events_and_gives_the_cq_back() {
    let (_sim, ctx) = open();
    let ch = ctx.create_comp_channel();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq_with_channel(16, &ch).unwrap();
    let (mut q, peer, peer_cq) = qp_on(&ctx, &pd, &cq);
    let m = mr(&pd, 4096);
    cq.req_notify_cq(false).unwrap();
    q.post_send(&[write_wr(&m, 5, SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(ch.get_cq_event(LONG).unwrap().cqn, cq.cqn());
    // In use by a QP: refused, and the CQ comes back with its completion.
    let r = cq.destroy().unwrap_err();
    assert_eq!(r.error, Error::Busy);
    let mut cq = r.into_inner();
    let w = wait(&mut cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::Success));
    drop((q, peer, peer_cq));
    // No QP any more, but an event not acknowledged (ibv_destroy_cq waits for it).
    let r = cq.destroy().unwrap_err();
    assert_eq!(r.error, Error::Busy);
    let mut cq = r.object;
    cq.ack_events(1).unwrap();
    cq.destroy().unwrap();
}

#[test]
fn context_close_refused_while_busy_gives_the_context_back() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let r = ctx.close().unwrap_err();
    assert_eq!(r.error, Error::Busy);
    let ctx = r.into_inner();
    // Still usable.
    let cq = ctx.create_cq(4).unwrap();
    drop(cq);
    drop(pd);
    ctx.close().unwrap();
}

#[test]
fn resize_cq_keeps_the_completions_not_polled_yet() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(7).unwrap();
    assert_eq!(cq.capacity(), 7);
    let (mut q, _peer, _peer_cq) = qp_on(&ctx, &pd, &cq);
    let m = mr(&pd, 4096);
    // Five completions, two polled, three outstanding, then a resize to 64 entries.
    for i in 0..5 {
        q.post_send(&[write_wr(&m, i, SendFlags::SIGNALED)])
            .unwrap();
    }
    let w = wait(&mut cq, 2);
    assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1]);
    cq.resize(60).unwrap();
    assert_eq!(cq.capacity(), 63);
    assert_eq!(
        sim.with_hca(|h| h.cqs().get(cq.cqn()).unwrap().log_size()),
        6
    );
    // The outstanding three come first, in order, then new ones from the new buffer; enough
    // to wrap the old ring several times.
    for i in 5..40 {
        q.post_send(&[write_wr(&m, i, SendFlags::SIGNALED)])
            .unwrap();
    }
    let w = wait(&mut cq, 38);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    assert_eq!(
        w.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (2..40).collect::<Vec<_>>()
    );
    // Smaller again while completions are outstanding, and around the ring more than once.
    for round in 0..3u64 {
        for i in 0..3 {
            q.post_send(&[write_wr(&m, 100 + round * 10 + i, SendFlags::SIGNALED)])
                .unwrap();
        }
        cq.resize(if round % 2 == 0 { 5 } else { 30 }).unwrap();
        let w = wait(&mut cq, 3);
        assert_eq!(
            w.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            (0..3).map(|i| 100 + round * 10 + i).collect::<Vec<_>>()
        );
    }
    // Too small for what is outstanding: refused before anything reaches the device.
    for i in 0..6 {
        q.post_send(&[write_wr(&m, 200 + i, SendFlags::SIGNALED)])
            .unwrap();
    }
    let sent = ctx.commands_sent();
    assert_eq!(
        cq.resize(3),
        Err(Error::Invalid(InvalidInput::CqTooSmall {
            requested: 3,
            outstanding: 6
        }))
    );
    assert_eq!(ctx.commands_sent(), sent);
    assert_eq!(wait(&mut cq, 6).len(), 6);
    // Absurd sizes are typed errors.
    assert_eq!(cq.resize(0), Err(Error::Invalid(InvalidInput::ZeroEntries)));
    assert!(matches!(
        cq.resize(u32::MAX),
        Err(Error::Invalid(InvalidInput::CqTooLarge { .. }))
    ));
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
}

#[test]
fn absurd_cq_sizes_are_typed_errors() {
    let (_sim, ctx) = open();
    for n in [u32::MAX, u32::MAX - 1, 1 << 31, 1 << 24] {
        let e = ctx.create_cq(n).err();
        assert!(
            matches!(e, Some(Error::Invalid(InvalidInput::CqTooLarge { .. }))),
            "{n}: {e:?}"
        );
    }
    let mut cq = ctx.create_cq(4).unwrap();
    // A wait for more completions than exist reserves no absurd amount and ends on time.
    assert!(cq.poll_wait(usize::MAX, SHORT).unwrap().is_empty());
    // A deadline past the clock's range saturates instead of overflowing.
    assert!(cq.poll_wait(0, Duration::MAX).unwrap().is_empty());
}

#[test]
fn eq_is_armed_after_bring_up_and_after_each_round_of_events() {
    let (sim, ctx) = open();
    let (armed, arms, bad) = sim.with_hca(|h| {
        let e = h.eq(EQN).expect("eq");
        (e.armed, e.arms, e.bad_doorbells)
    });
    assert!(
        armed,
        "rdma-core setup_async_eq arms the EQ after CREATE_EQ"
    );
    assert!(arms >= 1);
    assert_eq!(bad, 0);
    // An event disarms it; servicing the EQ arms it again.
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(1)));
    assert!(!sim.with_hca(|h| h.eq(EQN).unwrap().armed));
    assert!(ctx.poll_events().unwrap() >= 1);
    let (armed, arms2) = sim.with_hca(|h| {
        let e = h.eq(EQN).unwrap();
        (e.armed, e.arms)
    });
    assert!(armed);
    assert!(arms2 > arms);
    assert_eq!(sim.with_hca(|h| h.eq(EQN).unwrap().bad_doorbells), 0);
}

#[test]
fn a_changed_command_token_is_logged_not_fatal() {
    let (sim, ctx) = open();
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_token = true));
    // Linux core/cmd.c and rdma-core mlx5_vfio.c never read the token back.
    let pd = ctx.alloc_pd();
    assert!(pd.is_ok(), "{:?}", pd.err());
    assert!(
        !sim.with_hca(|h| h.faults().garble_next_token),
        "the fault was used"
    );
}

#[test]
fn garbled_cq_create_and_destroy_quarantine_the_buffers() {
    let (sim, ctx) = open();
    assert_eq!(ctx.quarantined(), (0, 0));
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    let e = ctx.create_cq(4).err();
    assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x400 }));
    // The device made the CQ: its buffer (4 KiB) and doorbell record (64 B) are set aside.
    assert_eq!(ctx.quarantined(), (2, 4096 + 64));
    assert!(ctx.needs_reset());

    let cq = ctx.create_cq(4).unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    let r = cq.destroy().unwrap_err();
    assert_eq!(r.error, Error::BadFirmwareReply { opcode: 0x401 });
    // The handle came back; dropping it tries DESTROY_CQ again, which the device refuses
    // (the first one did destroy it): the buffers are quarantined, not freed.
    drop(r);
    assert_eq!(ctx.quarantined(), (4, 2 * (4096 + 64)));
    // A device that refuses a destroy outright keeps the CQ: the same.
    let cq = ctx.create_cq(4).unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.next_delivery_status = Some(0x6)));
    let r = cq.destroy().unwrap_err();
    assert!(
        matches!(r.error, Error::Delivery { opcode: 0x401, .. }),
        "{r:?}"
    );
    // Not a quarantine case yet: retried and succeeds.
    r.into_inner().destroy().unwrap();
    assert_eq!(ctx.quarantined(), (4, 2 * (4096 + 64)));
}

#[test]
fn garbled_resize_quarantines_the_new_buffer() {
    let (sim, ctx) = open();
    let mut cq = ctx.create_cq(4).unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    assert_eq!(
        cq.resize(100),
        Err(Error::BadFirmwareReply { opcode: 0x403 })
    );
    // 128 entries of 64 B: 8 KiB the device may now write.
    assert_eq!(ctx.quarantined(), (1, 8192));
}

#[test]
fn a_qp_takes_its_own_communication_established_event() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let (mut cq_a, cq_b) = (ctx.create_cq(16).unwrap(), ctx.create_cq(16).unwrap());
    let mut a = pd.create_qp(&cq_a, &cq_a, &QpCaps::default()).unwrap();
    let mut b = pd.create_qp(&cq_b, &cq_b, &QpCaps::default()).unwrap();
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &ConnectOptions::default()).unwrap();
    // B stays in RTR, as a passive side waiting for the RTU: its first request packet is
    // the device's Communication Established event for it.
    b.to_init(mlx5::AccessFlags::ALL).unwrap();
    b.to_rtr(&ea, &ConnectOptions::default()).unwrap();
    let m = mr(&pd, 4096);
    b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[m.sge(0, 64)],
    }])
    .unwrap();
    assert_eq!(a.take_events().unwrap(), []);
    let w = SendWr {
        wr_id: 2,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"first"),
        flags: SendFlags::SIGNALED,
    };
    a.post_send(&[w]).unwrap();
    assert_eq!(wait(&mut cq_a, 1)[0].status, WcStatus::Success);
    let est = mlx5::Event::Qp {
        event_type: mlx5_prm::event::COMM_EST,
        qpn: b.qpn(),
    };
    assert_eq!(a.take_events().unwrap(), [], "A's take leaves B's event");
    assert_eq!(b.take_events().unwrap(), [est]);
    // Taken: neither B nor the context's log sees it again.
    assert_eq!(b.take_events().unwrap(), []);
    ctx.poll_events().unwrap();
    assert!(!ctx.take_events().contains(&est));
}
