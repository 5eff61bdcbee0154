//! Fault injection on a port.

use super::*;

/// Sends `n` frames A→B through a port with `spec`; returns the PSNs B accepted, in order,
/// and both snapshots.
fn faulty_run(
    spec: &str,
    n: u32,
) -> (
    Vec<u32>,
    crate::roce::counters::CounterSnapshot,
    crate::roce::counters::CounterSnapshot,
) {
    let (la, lb) = Link::pair();
    let mut a = FramePort::new(la, cfg_a()).with_faults(spec.parse().unwrap());
    let mut b = FramePort::new(lb, cfg_b());
    let mut psns = Vec::new();
    for i in 0..n {
        a.send(frame_ab(
            Opcode::RC_RDMA_WRITE_MIDDLE,
            i,
            &payload(256, i as u8),
        ))
        .unwrap();
        while let Some(p) = b.recv().unwrap() {
            assert_eq!(p.payload(), &payload(256, p.hdrs.bth.psn as u8)[..]);
            psns.push(p.hdrs.bth.psn);
        }
    }
    a.release_held();
    assert_eq!(a.held(), 0);
    while let Some(p) = b.recv().unwrap() {
        psns.push(p.hdrs.bth.psn);
    }
    (psns, a.counters().snapshot(), b.counters().snapshot())
}

#[test]
fn port_faults_are_deterministic_and_hit_their_rates() {
    let spec = "drop=0.02,dup=0.02,reorder=0.02:window=4,corrupt=0.01,seed=7";
    let n = 10_000;
    let (p1, a1, b1) = faulty_run(spec, n);
    let (p2, a2, b2) = faulty_run(spec, n);
    assert_eq!(p1, p2, "same seed: same frames, same order");
    assert_eq!((a1, b1), (a2, b2));
    let (p3, _, _) = faulty_run(&spec.replace("seed=7", "seed=99"), n);
    assert_ne!(p1, p3);

    let dropped = a1.get(Counter::FaultDropped);
    let dup = a1.get(Counter::FaultDuplicated);
    let reord = a1.get(Counter::FaultReordered);
    let corrupt = a1.get(Counter::FaultCorrupted);
    let near = |got: u64, want: f64| (got as f64) > want * 0.7 && (got as f64) < want * 1.3;
    assert!(near(dropped, 200.0), "dropped {dropped}");
    assert!(near(dup, 196.0), "dup {dup}");
    assert!(near(reord, 196.0), "reordered {reord}");
    assert!(near(corrupt, 98.0), "corrupted {corrupt}");
    // Conservation: what A put on the wire B received; corrupted copies (a duplicated
    // corrupted frame is two of them) failed the ICRC; the rest came through.
    let wire = n as u64 - dropped + dup;
    assert_eq!(a1.get(Counter::TxFrames), wire);
    assert_eq!(b1.get(Counter::RxFrames), wire);
    assert_eq!(b1.rx_dropped(), b1.get(Counter::RxIcrcErrors));
    assert!(b1.get(Counter::RxIcrcErrors) >= corrupt);
    assert_eq!(
        b1.get(Counter::RxRoceUnicastFrames),
        wire - b1.get(Counter::RxIcrcErrors)
    );
    assert_eq!(p1.len() as u64, b1.get(Counter::RxRoceUnicastFrames));
    // Reordering happened: some PSN arrived after a larger one.
    assert!(p1.windows(2).any(|w| w[1] < w[0]));
}

#[test]
fn corrupted_frames_fail_the_icrc_and_are_counted() {
    let (psns, a, b) = faulty_run("corrupt=1,seed=3", 500);
    assert!(psns.is_empty(), "no corrupted frame is accepted");
    assert_eq!(a.get(Counter::FaultCorrupted), 500);
    assert_eq!(b.get(Counter::RxIcrcErrors), 500);
    assert_eq!(b.rx_dropped(), 500);
}
