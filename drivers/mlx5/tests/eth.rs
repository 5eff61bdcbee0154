//! The Ethernet queue ([`mlx5::EthQueue`]) against two emulated HCAs joined by frames: frames
//! both ways (unicast, broadcast, the largest and the smallest), the MTU refused before the
//! device, frames to other addresses not received, and a close that leaves no object and no
//! DMA memory behind.

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mlx5::{Context, EthConfig, EthError, EthQueue, WcStatus};

type Side = (Arc<SimHal>, Context<TestHal>);

/// Two contexts on two HCAs joined by a wire.
fn two_hcas() -> (Side, Side) {
    let (sa, sb) = SimHal::pair();
    let ca = Context::open(TestHal(sa.clone()), test_config()).expect("bring-up a");
    let cb = Context::open(TestHal(sb.clone()), test_config()).expect("bring-up b");
    ((sa, ca), (sb, cb))
}

/// An Ethernet frame from `src` to `dst` of EtherType 0x88b5 (IEEE 802 local experimental),
/// `len` bytes in all, its payload a pattern of `seed`.
fn frame(dst: [u8; 6], src: [u8; 6], len: usize, seed: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&pattern(len - f.len(), seed));
    f
}

/// The next frame `q` receives or its failure, waiting at most two seconds.
fn try_recv_one(q: &mut EthQueue<TestHal>) -> Result<Option<Vec<u8>>, EthError> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        match q.try_recv(|f| f.to_vec()) {
            Ok(None) if Instant::now() < deadline => std::thread::yield_now(),
            other => return other,
        }
    }
}

/// The next frame `q` receives, waiting at most two seconds.
fn recv_one(q: &mut EthQueue<TestHal>) -> Option<Vec<u8>> {
    try_recv_one(q).unwrap_or_else(|e| panic!("receive failed: {e:?}"))
}

/// `n` frames from `a` to `b`, each received whole before the next is sent.
fn frames_arrive(a: &mut EthQueue<TestHal>, b: &mut EthQueue<TestHal>, n: u8) {
    for i in 1..=n {
        let f = frame(b.mac(), a.mac(), 100, i);
        a.send(&f).expect("send");
        assert_eq!(recv_one(b), Some(f), "frame {i}");
    }
}

/// Waits until every frame `q` sent has completed.
fn drain(q: &mut EthQueue<TestHal>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while q.sends_in_flight().expect("send completions") != 0 {
        assert!(Instant::now() < deadline, "sends did not complete");
        std::thread::yield_now();
    }
}

#[test]
fn frames_cross_both_ways_between_two_hcas() {
    let ((_sa, ca), (_sb, cb)) = two_hcas();
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    assert_eq!(qa.mac(), ca.mac());
    assert_eq!(qa.mtu(), 1514, "a 1500-byte IP MTU and the Ethernet header");
    let (ma, mb) = (qa.mac(), qb.mac());
    // Unicast a -> b, every size class: smaller than the inline headers, the shortest
    // Ethernet frame, a middle one, the largest.
    for (i, len) in [14usize, 60, 590, qa.mtu()].into_iter().enumerate() {
        let f = frame(mb, ma, len, i as u8);
        qa.send(&f).expect("send a -> b");
        let got = recv_one(&mut qb).expect("b receives");
        // The device pads a short frame to 60 bytes (ETH_ZLEN): the frame is its start.
        assert!(got.len() >= len && got[..len] == f[..], "frame {len}");
    }
    // b -> a, many more than the queues hold, each received once and in order.
    for i in 0..200u32 {
        let f = frame(ma, mb, 100 + (i as usize % 300), i as u8);
        qb.send(&f).expect("send b -> a");
        let got = recv_one(&mut qa).expect("a receives");
        assert_eq!(got, f, "frame {i}");
        drain(&mut qb);
    }
    // Broadcast a -> b.
    let f = frame([0xff; 6], ma, 64, 9);
    qa.send(&f).expect("broadcast");
    assert_eq!(recv_one(&mut qb), Some(f));
    // Nothing else arrived.
    assert_eq!(qa.recv(|f| f.len()), None);
    assert_eq!(qb.recv(|f| f.len()), None);
}

/// A device whose minimum inline mode is L2 (`wqe_inline_mode` MLX5_CAP_INLINE_MODE_L2, as
/// ConnectX-4 reports it): every WQE carries the Ethernet header inline (18 bytes, or the whole
/// of a shorter frame), the rest through the data segment, and the frames arrive whole.
#[test]
fn frames_carry_the_inline_headers_the_device_asks_for() {
    let ((sa, ca), (_sb, cb)) = two_hcas();
    sa.with_hca(|h| {
        use mlx5_prm::per_protocol_networking_offload_caps as e;
        let l2 = mlx5_prm::cap_inline_mode::L2.into();
        e::WQE_INLINE_MODE
            .set(&mut h.caps_mut().eth.cur[..], l2)
            .unwrap();
    });
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    for (i, len) in [14usize, 15, 18, 19, 60, 61, 1000, qa.mtu()]
        .into_iter()
        .enumerate()
    {
        let f = frame(qb.mac(), qa.mac(), len, i as u8);
        qa.send(&f).expect("send");
        let got = recv_one(&mut qb).expect("received");
        assert!(got.len() >= len && got[..len] == f[..], "frame {len}");
    }
}

/// With every receive buffer full, further frames are dropped by the device and counted in
/// the queue's Q counter set (`out_of_buffer`); the frames that found a buffer are received,
/// in order, and their buffers serve again.
#[test]
fn frames_without_a_posted_buffer_are_counted_as_out_of_buffer() {
    let ((_sa, ca), (_sb, cb)) = two_hcas();
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let cfg = EthConfig {
        rq_depth: 4,
        ..EthConfig::default()
    };
    let mut qb = cb.open_eth(&cfg).expect("open b");
    assert_eq!(qb.rx_out_of_buffer(), Ok(0));
    let frames: Vec<_> = (0..10).map(|i| frame(qb.mac(), qa.mac(), 100, i)).collect();
    for f in &frames {
        qa.send(f).expect("send");
    }
    drain(&mut qa);
    let deadline = Instant::now() + Duration::from_secs(2);
    while qb.rx_out_of_buffer() != Ok(6) {
        assert!(Instant::now() < deadline, "{:?}", qb.rx_out_of_buffer());
        std::thread::yield_now();
    }
    for f in &frames[..4] {
        assert_eq!(recv_one(&mut qb).as_ref(), Some(f));
    }
    assert_eq!(qb.recv(|f| f.len()), None);
    qa.send(&frames[9]).expect("send");
    assert_eq!(recv_one(&mut qb).as_ref(), Some(&frames[9]));
}

/// A device whose multicast list holds one address (`log_max_current_mc_list` 0): the list
/// keeps its head, broadcast, and loses the IPv6 groups (as en_fs.c trims it), and the queue
/// opens and takes broadcast frames.
#[test]
fn a_short_multicast_list_keeps_broadcast() {
    let (sa, sb) = SimHal::pair();
    sb.with_hca(|h| {
        mlx5_prm::cmd_hca_cap::LOG_MAX_CURRENT_MC_LIST
            .set(&mut h.caps_mut().general.cur[..], 0)
            .unwrap();
    });
    // No function reset at bring-up: it would bring the model's caps back.
    let cfg = mlx5::ContextConfig {
        reset_function: false,
        ..test_config()
    };
    let ca = Context::open(TestHal(sa), cfg).expect("bring-up a");
    let cb = Context::open(TestHal(sb), cfg).expect("bring-up b");
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    let f = frame([0xff; 6], qa.mac(), 64, 1);
    qa.send(&f).expect("broadcast");
    assert_eq!(recv_one(&mut qb), Some(f));
    let f = frame(qb.mac(), qa.mac(), 64, 2);
    qa.send(&f).expect("unicast");
    assert_eq!(recv_one(&mut qb), Some(f));
}

/// A receive completion the driver cannot read (the model garbles its opcode) is reported,
/// no buffer the device may still hold is posted again, and the queue goes on receiving.
#[test]
fn a_garbled_receive_completion_is_reported_and_the_queue_goes_on() {
    let ((_sa, ca), (sb, cb)) = two_hcas();
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    sb.with_hca(|h| h.update_faults(|f| f.corrupt_next_cqe = true));
    qa.send(&frame(qb.mac(), qa.mac(), 100, 0)).expect("send");
    let got = try_recv_one(&mut qb);
    assert!(
        matches!(
            got,
            Err(EthError::RecvFailed {
                status: WcStatus::BadCqe,
                ..
            })
        ),
        "{got:?}"
    );
    frames_arrive(&mut qa, &mut qb, 100);
}

/// A send completion the driver cannot read (garbled opcode) is found by the next send,
/// which still posts its frame, and kept for the caller; the frames sent after it complete,
/// and with them the slot of the garbled one.
#[test]
fn a_garbled_send_completion_is_reported_and_the_queue_goes_on() {
    let ((sa, ca), (_sb, cb)) = two_hcas();
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    sa.with_hca(|h| h.update_faults(|f| f.corrupt_next_cqe = true));
    let f = frame(qb.mac(), qa.mac(), 100, 0);
    qa.send(&f).expect("send");
    assert_eq!(recv_one(&mut qb), Some(f.clone()), "the frame went out");
    let deadline = Instant::now() + Duration::from_secs(2);
    let got = loop {
        qa.send(&f).expect("posted, a failure found or not");
        assert_eq!(recv_one(&mut qb), Some(f.clone()), "every frame went out");
        match qa.take_send_error() {
            None if Instant::now() < deadline => std::thread::yield_now(),
            other => break other,
        }
    };
    assert!(
        matches!(
            got,
            Some(EthError::SendFailed {
                status: WcStatus::BadCqe,
                ..
            })
        ),
        "{got:?}"
    );
    assert_eq!(qa.send_errors(), 1);
    frames_arrive(&mut qa, &mut qb, 100);
    drain(&mut qa);
}

#[test]
fn frames_to_other_addresses_are_not_received() {
    let ((_sa, ca), (_sb, cb)) = two_hcas();
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    let other = [0x02, 0, 0, 0, 0, 0x99];
    qa.send(&frame(other, qa.mac(), 100, 1)).expect("send");
    // An IPv4 multicast group the queue did not join.
    qa.send(&frame([0x01, 0, 0x5e, 0, 0, 1], qa.mac(), 100, 2))
        .expect("send");
    let f = frame(qb.mac(), qa.mac(), 100, 3);
    qa.send(&f).expect("send");
    // Only the frame to b's address arrives (the ones before it were dropped).
    assert_eq!(recv_one(&mut qb), Some(f));
    assert_eq!(qb.recv(|f| f.len()), None);
}

#[test]
fn a_frame_over_the_mtu_is_refused_before_the_device() {
    let ((sa, ca), (_sb, cb)) = two_hcas();
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    let max = qa.mtu();
    let doorbells = sa.doorbells();
    let big = frame(qb.mac(), qa.mac(), max + 1, 0);
    assert_eq!(
        qa.send(&big),
        Err(EthError::FrameTooLarge { len: max + 1, max })
    );
    assert_eq!(
        qa.send(&big[..13]),
        Err(EthError::FrameTooShort { len: 13, min: 14 })
    );
    assert_eq!(sa.doorbells(), doorbells, "nothing reached the device");
    // The queue still works.
    let f = frame(qb.mac(), qa.mac(), max, 1);
    qa.send(&f).expect("largest frame");
    assert_eq!(recv_one(&mut qb), Some(f));
}

/// The vport's address lists and the root of receive steering are one queue's: a second
/// queue on the context is refused until the first is gone, and opens again after it.
#[test]
fn one_queue_per_context() {
    let (_sim, ctx) = open();
    let q = ctx.open_eth(&EthConfig::default()).expect("open");
    assert_eq!(
        ctx.open_eth(&EthConfig::default()).err(),
        Some(mlx5::Error::Busy)
    );
    drop(q);
    let q = ctx.open_eth(&EthConfig::default()).expect("open again");
    q.close().expect("close");
    ctx.close().expect("teardown");
}

#[test]
fn zero_depths_are_refused() {
    let (_sim, ctx) = open();
    for cfg in [
        EthConfig {
            sq_depth: 0,
            ..EthConfig::default()
        },
        EthConfig {
            rq_depth: 0,
            ..EthConfig::default()
        },
    ] {
        assert_eq!(
            ctx.open_eth(&cfg).err(),
            Some(mlx5::Error::Invalid(mlx5::InvalidInput::ZeroEntries))
        );
    }
}

#[test]
fn close_destroys_every_object_and_frees_its_memory() {
    let ((sa, ca), (_sb, cb)) = two_hcas();
    let mut qb = cb.open_eth(&EthConfig::default()).expect("open b");
    let held = sa.with_hca(|h| h.dma_in_use());
    sa.with_hca(|h| h.trace_mut().capture());
    let mut qa = ca.open_eth(&EthConfig::default()).expect("open a");
    // Frames in flight both ways when the queue goes.
    for i in 0..8 {
        qa.send(&frame(qb.mac(), qa.mac(), 200, i)).expect("send");
        qb.send(&frame(qa.mac(), qb.mac(), 200, i)).expect("send");
    }
    assert!(recv_one(&mut qb).is_some());
    qa.close().expect("close");
    let cmds = commands(&sa.with_hca(|h| h.trace_mut().take_captured()));
    let count = |name: &str| cmds.iter().filter(|c| *c == name).count();
    for obj in [
        "TIS",
        "SQ",
        "RQ",
        "TIR",
        "FLOW_TABLE",
        "FLOW_GROUP",
        "CQ",
        "MKEY",
    ] {
        let made = count(&format!("CREATE_{obj}"));
        assert!(made > 0, "{obj} made: {cmds:?}");
        assert_eq!(count(&format!("DESTROY_{obj}")), made, "{obj}: {cmds:?}");
    }
    assert_eq!(
        count("SET_FLOW_TABLE_ENTRY"),
        count("DELETE_FLOW_TABLE_ENTRY")
    );
    assert_eq!(count("ALLOC_PD"), count("DEALLOC_PD"));
    assert_eq!(count("ALLOC_Q_COUNTER"), count("DEALLOC_Q_COUNTER"));
    assert_eq!(count("ALLOC_UAR"), count("DEALLOC_UAR"));
    // Destroyed in reverse: the steering before the TIR, the TIR before its RQ, the queues
    // before their CQs, the region (its mkey) after the queues.
    let last = |name: &str| cmds.iter().rposition(|c| c == name).unwrap();
    assert!(last("DESTROY_FLOW_TABLE") < last("DESTROY_TIR"));
    assert!(last("DESTROY_TIR") < last("DESTROY_RQ"));
    assert!(last("DESTROY_SQ") < last("DESTROY_CQ"));
    assert!(last("DESTROY_SQ") < last("DESTROY_MKEY"));
    assert!(last("DESTROY_SQ") < last("DESTROY_TIS"));
    // The device holds what it held before the queue, nothing quarantined.
    assert_eq!(sa.with_hca(|h| h.dma_in_use()), held);
    assert_eq!(ca.quarantined(), (0, 0));
    // The function tears down with every page given back.
    ca.close().expect("teardown");
    assert_eq!(sa.with_hca(|h| h.pages().owned()), 0);
    drop(qb);
    cb.close().expect("teardown b");
}

/// A frame written in place by `send_with` arrives as `send` would send it; a refused one
/// never runs its closure. `rx_frame` hands the same frame in place until `rx_done` gives its
/// buffer back; the buffer is then posted again and takes the next frame.
#[test]
fn a_frame_written_in_place_arrives_and_a_held_frame_is_kept() {
    let ((_sa, ca), (_sb, cb)) = two_hcas();
    let cfg = EthConfig {
        sq_depth: 4,
        rq_depth: 2,
    };
    let mut qa = ca.open_eth(&cfg).expect("open a");
    let mut qb = cb.open_eth(&cfg).expect("open b");
    let f = frame(qb.mac(), qa.mac(), 200, 7);
    let built = qa.send_with(f.len(), |buf| {
        buf.copy_from_slice(&f);
        42
    });
    assert_eq!(built, Ok(42));
    assert_eq!(
        qa.send_with(10, |_| panic!("a refused frame is not built")),
        Err(EthError::FrameTooShort { len: 10, min: 14 })
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    let got = loop {
        match qb.rx_frame() {
            Ok(None) if Instant::now() < deadline => std::thread::yield_now(),
            other => break other.map(|g| g.map(<[u8]>::to_vec)),
        }
    };
    assert_eq!(got, Ok(Some(f.clone())));
    assert_eq!(qb.rx_frame(), Ok(Some(&f[..])), "held, not a second one");
    qb.rx_done().expect("given back");
    assert_eq!(qb.recv(|g| g.len()), None);
    // Every buffer of the ring, the given-back one too, takes a frame again.
    for i in 0..6u8 {
        let g = frame(qb.mac(), qa.mac(), 100, i);
        qa.send(&g).expect("send");
        assert_eq!(recv_one(&mut qb), Some(g), "frame {i}");
    }
}
