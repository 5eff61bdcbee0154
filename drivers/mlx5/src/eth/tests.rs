//! The queue's limits against the emulated HCA, where the test needs the queue's insides (its
//! CQ numbers).

use super::{EthConfig, EthError};
use crate::test_hal::open;

/// With no send completion coming back (the model writes the send CQ's CQEs without handing
/// them over), the queue takes as many frames as it has slots, then refuses with
/// `QueueFull` before anything reaches the device; closing it still destroys everything.
#[test]
fn a_full_send_queue_refuses_the_next_frame() {
    let (sim, ctx) = open();
    let cfg = EthConfig {
        sq_depth: 6,
        rq_depth: 4,
    };
    let mut q = ctx.open_eth(&cfg).expect("open");
    let cqn = q.send_cqn().expect("send CQ");
    sim.with_hca(|h| h.update_faults(|f| f.stuck_cq_owner = Some(cqn)));
    let mut f = [0u8; 64];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&q.mac());
    // sq_depth rounds up to 8 slots.
    for i in 0..8 {
        assert!(q.can_send(), "room for frame {i}");
        q.send(&f).unwrap_or_else(|e| panic!("frame {i}: {e:?}"));
    }
    assert!(!q.can_send(), "every slot is the device's");
    let doorbells = sim.doorbells();
    assert_eq!(q.send(&f), Err(EthError::QueueFull));
    assert_eq!(q.sends_in_flight(), Ok(8));
    assert_eq!(sim.doorbells(), doorbells, "the refused frame rang nothing");
    sim.with_hca(|h| h.update_faults(|f| f.stuck_cq_owner = None));
    q.close().expect("close");
    ctx.close().expect("teardown");
}

/// A frame the device fails (its data segment names no key) completes in error: the next
/// send finds it, brings the SQ back from ERR through RST to RDY (mlx5e's recovery) and
/// posts its own frame; the failure is counted and kept for the caller, and the queue sends
/// again.
#[test]
fn a_send_completed_in_error_is_reported_and_the_sq_recovers() {
    let (sim, ctx) = open();
    let mut q = ctx.open_eth(&EthConfig::default()).expect("open");
    let mut f = [0u8; 200];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&q.mac());
    q.send(&f).expect("a good frame");
    q.send_with_lkey(&f, 0xdead_be00).expect("posted");
    let doorbells = sim.doorbells();
    q.send(&f).expect("posted after the SQ recovered");
    assert!(
        sim.doorbells() > doorbells,
        "the next frame was posted, not dropped"
    );
    match q.take_send_error() {
        Some(EthError::SendFailed { status, .. }) => {
            assert_ne!(status, crate::cq::WcStatus::Success)
        }
        other => panic!("expected the failure reported: {other:?}"),
    }
    assert_eq!(q.send_errors(), 1);
    assert_eq!(q.take_send_error(), None, "taken once");
    assert_eq!(q.sends_in_flight(), Ok(0));
    for _ in 0..3 {
        q.send(&f).expect("sends again");
    }
    assert_eq!(q.sends_in_flight(), Ok(0));
    q.close().expect("close");
    ctx.close().expect("teardown");
}

/// A frame longer than its receive buffer completes in error and moves the RQ to ERR (as the
/// model does); the receive reports it and brings the RQ back (mlx5e's flush: ERR, RST, RDY,
/// the ring filled again), and the next frame is received.
#[test]
fn a_receive_completed_in_error_is_reported_and_the_rq_recovers() {
    let (sa, sb) = crate::test_hal::SimHal::pair();
    let ca = crate::Context::open(crate::test_hal::TestHal(sa), crate::test_hal::test_config())
        .expect("bring-up a");
    let cb = crate::Context::open(
        crate::test_hal::TestHal(sb.clone()),
        crate::test_hal::test_config(),
    )
    .expect("bring-up b");
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    let mut f = alloc::vec![0u8; 300];
    f[..6].copy_from_slice(&qb.mac());
    f[6..12].copy_from_slice(&qa.mac());
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    qb.shrink_rx_wqes(64).expect("hostile WQEs");
    sb.with_hca(|h| h.trace_mut().capture());
    qa.send(&f).expect("send");
    let recv = |q: &mut crate::EthQueue<crate::test_hal::TestHal>| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            match q.try_recv(|f| f.to_vec()) {
                Ok(None) if std::time::Instant::now() < deadline => std::thread::yield_now(),
                other => return other,
            }
        }
    };
    match recv(&mut qb) {
        Err(EthError::RecvFailed { status, .. }) => {
            assert_ne!(status, crate::cq::WcStatus::Success)
        }
        other => panic!("expected the failure reported: {other:?}"),
    }
    let cmds = crate::test_hal::commands(&sb.with_hca(|h| h.trace_mut().take_captured()));
    assert_eq!(
        cmds,
        ["QUERY_RQ", "MODIFY_RQ", "MODIFY_RQ"],
        "ERR -> RST -> RDY"
    );
    for i in 0..3u8 {
        f[20] = i;
        qa.send(&f).expect("send");
        assert_eq!(
            recv(&mut qb),
            Ok(Some(f.clone())),
            "frame {i} after recovery"
        );
    }
}
