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
        q.send(&f).unwrap_or_else(|e| panic!("frame {i}: {e:?}"));
    }
    let doorbells = sim.doorbells();
    assert_eq!(q.send(&f), Err(EthError::QueueFull));
    assert_eq!(q.sends_in_flight(), Ok(8));
    assert_eq!(sim.doorbells(), doorbells, "the refused frame rang nothing");
    sim.with_hca(|h| h.update_faults(|f| f.stuck_cq_owner = None));
    q.close().expect("close");
    ctx.close().expect("teardown");
}

/// A frame the device fails (its data segment names no key) completes in error: the next
/// send reports it, after bringing the SQ back from ERR through RST to RDY (mlx5e's
/// recovery), and the queue sends again.
#[test]
fn a_send_completed_in_error_is_reported_and_the_sq_recovers() {
    let (_sim, ctx) = open();
    let mut q = ctx.open_eth(&EthConfig::default()).expect("open");
    let mut f = [0u8; 200];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&q.mac());
    q.send(&f).expect("a good frame");
    q.send_with_lkey(&f, 0xdead_be00).expect("posted");
    match q.send(&f) {
        Err(EthError::SendFailed { status, .. }) => {
            assert_ne!(status, crate::cq::WcStatus::Success)
        }
        other => panic!("expected the failure reported: {other:?}"),
    }
    assert_eq!(q.sends_in_flight(), Ok(0));
    for _ in 0..3 {
        q.send(&f).expect("sends again");
    }
    assert_eq!(q.sends_in_flight(), Ok(0));
    q.close().expect("close");
    ctx.close().expect("teardown");
}
