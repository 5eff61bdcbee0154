//! The rdma app's checks on the host, against the in-process model (the unikernel and the
//! VFIO example run the same code on QEMU and on hardware).

#[allow(dead_code)]
#[path = "../../../drivers/mlx5/tests/common/mod.rs"]
mod common;

use std::fmt;
use std::time::{Duration, Instant};

use common::*;
use mlx5::hal::{DmaBuffer, Hal};
use mlx5::mr::PhysChunk;
use rdma_checks::{BigMemory, Console};

struct Con(Instant);

impl Console for Con {
    fn print(&self, line: fmt::Arguments<'_>) {
        println!("{line}");
    }
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

struct Big(<TestHal as Hal>::Dma);

impl BigMemory for Big {
    fn chunks(&self) -> Vec<PhysChunk> {
        vec![PhysChunk {
            bus: self.0.bus_addr(),
            len: self.0.len() as u64,
        }]
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn page_size(&self) -> u64 {
        2 << 20
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        // SAFETY: `offset + dst.len()` is inside the buffer (the checks read what they wrote).
        unsafe {
            std::ptr::copy_nonoverlapping(self.0.cpu_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
    }
}

#[test]
fn rdma_checks_pass_on_the_model() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let big = Big(hal.dma_alloc(4 << 20, 2 << 20).expect("big memory"));
    let (passed, failed) = rdma_checks::run(&Con(Instant::now()), ctx, big, true);
    assert!(passed > 0);
    assert_eq!(failed, 0, "{failed} rdma checks failed");
}

/// A perftest `ib_send_bw` client (`run_iter_bw`: at most `tx_depth` = min(128, n) SENDs in
/// flight, every one signaled) against a receiver that keeps its receive queue with
/// [`rdma_checks::recv_ring::RecvRing`] of `depth`. Returns the RNR NAKs the client's QP
/// received (Q counter `rnr_nak_retry_err`) and the smallest number of receives the receiver
/// had posted right after taking a completion, against what perftest keeps:
/// min(depth, messages still due).
fn send_bw_through_ring(n: u64, size: u32, depth: u64) -> (u32, Option<(u64, u64)>) {
    use mlx5::{QpCaps, QpOptions, SendData, SendFlags, SendOp, SendWr, WcStatus, WorkCompletion};
    use rdma_checks::recv_ring::RecvRing;
    // The deterministic model: a doorbell runs everything it can at once (all SENDs in flight
    // meet the receive queue as it stands); `poll` runs the RNR retry timer.
    let (sim, ctx) = open();
    let caps = QpCaps {
        max_send_wr: 128,
        max_recv_wr: 512,
        ..QpCaps::default()
    };
    let pd = ctx.alloc_pd().expect("pd");
    let mut p = pair_with(&ctx, pd, &caps, &QpOptions::default(), 1024);
    let set = ctx.alloc_counter_set().expect("counter set");
    p.a.set_counter_set(Some(&set))
        .expect("the client's counter set");
    let src = mr(&p.pd, size as usize);
    src.write(0, &vec![0x5a; size as usize]).unwrap();
    let slots = depth + 1;
    let dst = mr(&p.pd, (slots * size as u64) as usize);
    let mut ring = RecvRing::new(depth, n, size, 0, size as u64, slots);
    ring.post_initial(&mut p.b, &dst).expect("initial receives");
    let tx_depth = n.min(128);
    let (mut sent, mut acked, mut received) = (0u64, 0u64, 0u64);
    let mut worst: Option<(u64, u64)> = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut wc = [WorkCompletion::default(); 16];
    while received < n || acked < n {
        sim.hca.poll();
        assert!(
            Instant::now() < deadline,
            "stuck: sent {sent}, acked {acked}, received {received} of {n}"
        );
        while sent < n && sent - acked < tx_depth {
            let wr = SendWr {
                wr_id: sent,
                op: SendOp::Send { imm: None },
                data: SendData::Sges(&[src.sge(0, size)]),
                flags: SendFlags::SIGNALED,
            };
            p.a.post_send(&[wr]).expect("post_send");
            sent += 1;
        }
        let k = p.cq_a.poll(&mut wc).expect("poll a");
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "SEND {}", w.wr_id);
            acked += 1;
        }
        let k = p.cq_b.poll(&mut wc).expect("poll b");
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "receive {}", w.wr_id);
            assert_eq!(w.byte_len, size);
            let at = ring.complete(&mut p.b, &dst, w.wr_id).expect("repost");
            // The message's slot is the caller's until the next completion: no posted
            // receive lands there (depth + 1 slots).
            assert!(ring.exclusive());
            assert!(
                (ring.done()..ring.posted()).all(|i| ring.slot(i) != at),
                "receive {}'s slot is posted again while it is being looked at",
                w.wr_id
            );
            received += 1;
            let kept = ring.outstanding();
            let perftest_keeps = depth.min(n - received);
            if kept < perftest_keeps && worst.is_none_or(|(k, _)| kept < k) {
                worst = Some((kept, perftest_keeps));
            }
        }
    }
    let q = set.query(false).expect("QUERY_Q_COUNTER");
    drop(p);
    (q.rnr_nak_retry_err, worst)
}

/// The unikernel's perftest receiver keeps perftest's rx_depth (512, at most `-n`) receives
/// posted and reposts each one as it completes: a client with 128 SENDs in flight meets no
/// RNR NAK, and after every completion at least min(rx_depth, messages still due) receives are
/// posted. (Before, the receiver posted 64: the Linux-client ib_send_bw run drew ~1,300 RNR
/// NAKs at 64 KiB and 13 at 64 B.)
#[test]
fn perftest_receiver_keeps_rx_depth_posted_and_draws_no_rnr_nak() {
    use rdma_checks::recv_ring::send_rx_depth;
    for (n, size) in [(100u64, 64u32), (1000, 256)] {
        let depth = send_rx_depth(Some(n), false);
        let (rnr, worst) = send_bw_through_ring(n, size, depth);
        assert_eq!(
            worst, None,
            "n={n}: fewer receives posted than perftest keeps (kept, perftest)"
        );
        assert_eq!(
            rnr, 0,
            "n={n} size={size}: rx_depth {depth} drew {rnr} RNR NAKs"
        );
    }
}

/// The same run with the receiver's old depth (64 receives for 100 SENDs in flight) draws RNR
/// NAKs: the counter the test above reads does see the flaw.
#[test]
fn a_receiver_with_64_posted_draws_rnr_naks_from_100_in_flight() {
    let (rnr, _) = send_bw_through_ring(100, 64, 64);
    assert!(
        rnr > 0,
        "64 receives for 100 SENDs in flight drew no RNR NAK"
    );
}
