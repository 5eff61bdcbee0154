//! Counters through the driver: Q counter sets (ALLOC/DEALLOC/QUERY_Q_COUNTER, the QPC's
//! `counter_set_id`) and the vport's traffic counters (QUERY_VPORT_COUNTER), against two
//! emulated HCAs joined by RoCEv2 frames with wire faults.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{
    CmdStatus, ConnectOptions, Error, InvalidInput, QCounters, QpCaps, QpEndpoint, Remote,
    SendData, SendFlags, SendOp, SendWr, WcStatus,
};
use mlx5_sim::link::FaultSpec;

const SIG: SendFlags = SendFlags::SIGNALED;

/// Two contexts on two HCAs joined by frames, `fault` on both ports.
fn two_hcas(fault: &str) -> (Context2, Context2) {
    let (sa, sb) = SimHal::pair();
    for (s, seed) in [(&sa, 5), (&sb, 6)] {
        let spec: FaultSpec = format!("{fault},seed={seed}").parse().unwrap();
        s.with_hca(|h| h.port.set_faults(spec));
    }
    let ca = mlx5::Context::open(TestHal(sa.clone()), test_config()).expect("bring-up a");
    let cb = mlx5::Context::open(TestHal(sb.clone()), test_config()).expect("bring-up b");
    ((sa, ca), (sb, cb))
}

type Context2 = (std::sync::Arc<SimHal>, mlx5::Context<TestHal>);

/// A QP attached to a counter set counts its transport events there; a set with no QP stays
/// at zero; the port's vport counters count the RoCE frames; `clear` zeroes a set.
#[test]
fn counter_sets_count_the_qps_attached_to_them() {
    let ((_sa, ca), (_sb, cb)) = two_hcas("drop=0.05,reorder=0.05");
    let (ia, ib) = (
        ca.add_ipv4_gid([10, 0, 0, 1]).unwrap(),
        cb.add_ipv4_gid([10, 0, 0, 2]).unwrap(),
    );
    let set_a = ca.alloc_counter_set().unwrap();
    let idle = ca.alloc_counter_set().unwrap();
    let set_b = cb.alloc_counter_set().unwrap();
    assert_ne!(set_a.id(), 0);
    assert_ne!(set_a.id(), idle.id());

    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut cqa, cqb) = (ca.create_cq(64).unwrap(), cb.create_cq(16).unwrap());
    let mut qa = pa.create_qp(&cqa, &cqa, &QpCaps::default()).unwrap();
    let mut qb = pb.create_qp(&cqb, &cqb, &QpCaps::default()).unwrap();
    // In RESET: remembered for RST2INIT / INIT2RTR (Linux qp.c __mlx5_ib_modify_qp).
    qa.set_counter_set(Some(&set_a)).unwrap();
    qb.set_counter_set(Some(&set_b)).unwrap();
    let ea = QpEndpoint {
        gid: mlx5::hca::ipv4_mapped_gid([10, 0, 0, 1]),
        ..qa.endpoint()
    };
    let eb = QpEndpoint {
        gid: mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]),
        ..qb.endpoint()
    };
    // ack timeout 14 (~67 ms, rdma-core's and the driver's default): a shorter one (8, ~1 ms)
    // ran out of retries when the peer's thread was not scheduled in time on a loaded host.
    let o = |i: u16| ConnectOptions {
        sgid_index: i as u8,
        timeout: 14,
        ..ConnectOptions::default()
    };
    qa.connect(&eb, &o(ia)).unwrap();
    qb.connect(&ea, &o(ib)).unwrap();

    let src = mr(&pa, 64 * 1024);
    let dst = mr(&pb, 64 * 1024);
    let data = pattern(64 * 1024, 9);
    src.write(0, &data).unwrap();
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    for round in 0..8u64 {
        let wrs: Vec<_> = (0..8u64)
            .map(|i| {
                let off = (i * 8192) as u32;
                (round * 8 + i, off)
            })
            .collect();
        let sges: Vec<_> = wrs
            .iter()
            .map(|(_, off)| [src.sge(*off as u64, 8192)])
            .collect();
        let list: Vec<_> = wrs
            .iter()
            .zip(&sges)
            .map(|((id, off), sge)| SendWr {
                wr_id: *id,
                op: SendOp::Write {
                    remote: Remote {
                        addr: remote.addr + *off as u64,
                        ..remote
                    },
                    imm: None,
                },
                data: SendData::Sges(sge),
                flags: SIG,
            })
            .collect();
        qa.post_send(&list).unwrap();
        let wcs = cqa
            .poll_wait(8, std::time::Duration::from_secs(20))
            .unwrap();
        assert_eq!(wcs.len(), 8);
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    }
    let mut got = vec![0u8; data.len()];
    dst.read(0, &mut got).unwrap();
    assert!(got == data, "bytes differ");

    let a = set_a.query(false).unwrap();
    let b = set_b.query(false).unwrap();
    // A lost request or ACK makes the requester retry (timeout or sequence NAK); a lost
    // request makes the responder see an out-of-sequence PSN, a lost ACK a duplicate.
    assert!(
        a.local_ack_timeout_err + a.packet_seq_err > 0,
        "requester saw no fault: {a:?}"
    );
    assert!(
        b.out_of_sequence + b.duplicate_request > 0,
        "responder saw no fault: {b:?}"
    );
    // Requester events on A's side only, responder events on B's.
    assert_eq!((a.out_of_sequence, a.duplicate_request), (0, 0), "{a:?}");
    assert_eq!((b.local_ack_timeout_err, b.packet_seq_err), (0, 0), "{b:?}");
    assert_eq!(idle.query(false).unwrap(), QCounters::default());

    let va = ca.query_vport_counters(false).unwrap();
    let vb = cb.query_vport_counters(false).unwrap();
    // 64 WRITEs of 8 KiB at MTU 1024: at least 512 request frames, one way; ACKs the other.
    assert!(va.transmitted_ib_unicast.packets >= 512, "{va:?}");
    assert!(va.transmitted_ib_unicast.octets >= 512 * 1024, "{va:?}");
    assert!(vb.received_ib_unicast.packets > 0, "{vb:?}");
    assert!(vb.transmitted_ib_unicast.packets > 0, "{vb:?}");

    // clear: read, then zero.
    assert_eq!(set_a.query(true).unwrap(), a);
    assert_eq!(set_a.query(false).unwrap(), QCounters::default());
    ca.query_vport_counters(true).unwrap();
    assert_eq!(
        ca.query_vport_counters(false)
            .unwrap()
            .transmitted_ib_unicast
            .packets,
        0
    );
}

/// The typed errors: a set of another context, a QP in RTR, exhausted sets (the firmware's
/// LIM_ERR); an RTS QP moves between sets with RTS2RTS.
#[test]
fn counter_set_errors_and_rts_rebinding() {
    let (_sim, ctx) = open();
    let (_sim2, other) = open();
    let foreign = other.alloc_counter_set().unwrap();
    let mut p = pair(&ctx, QpCaps::default());
    assert_eq!(
        p.a.set_counter_set(Some(&foreign)),
        Err(Error::Invalid(InvalidInput::ForeignObject))
    );
    // RTS: rebinding goes through RTS2RTS with the COUNTER_SET_ID optpar.
    let s1 = ctx.alloc_counter_set().unwrap();
    p.a.set_counter_set(Some(&s1)).unwrap();
    let m = mr(&p.pd, 4096);
    let w = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: Remote {
                addr: m.addr() + 2048,
                rkey: m.rkey(),
            },
            imm: None,
        },
        data: SendData::Sges(&[m.sge(0, 1024)]),
        flags: SIG,
    };
    p.a.post_send(core::slice::from_ref(&w)).unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    p.a.set_counter_set(None).unwrap();

    // RTR refuses (Linux defers it to RTS; here it is the caller's to retry).
    let cq = ctx.create_cq(4).unwrap();
    let mut q = p.pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    q.to_init(mlx5::AccessFlags::ALL).unwrap();
    let ep = p.b.endpoint();
    q.to_rtr(&ep, &ConnectOptions::default()).unwrap();
    assert!(matches!(
        q.set_counter_set(Some(&s1)),
        Err(Error::Invalid(InvalidInput::QpState { .. }))
    ));

    // Exhaust the sets: the command fails with the firmware's status.
    let mut sets = Vec::new();
    let err = loop {
        match ctx.alloc_counter_set() {
            Ok(s) => sets.push(s),
            Err(e) => break e,
        }
        assert!(sets.len() < 300);
    };
    assert!(
        matches!(err, Error::Command(c) if c.status == CmdStatus::LimErr),
        "{err:?}"
    );
    // Dropping handles frees them (DEALLOC_Q_COUNTER): one can be allocated again.
    sets.pop();
    ctx.alloc_counter_set().unwrap();
}
