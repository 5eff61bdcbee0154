//! Two HCAs in one process joined by real RoCEv2 frames (`InProcHca::pair`: every packet is
//! encoded, ICRC-sealed, checked and decoded), with seeded wire faults on both ports: RC must
//! end byte-exact with no error completion, and the counters must show the faults happened.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{opcode, query_q_counter_in, query_vport_counter_out, wqe};
use mlx5_sim::device::ExecMode;
use mlx5_sim::link::FaultSpec;
use mlx5_sim::roce::counters::Counter;
use mlx5_sim::InProcHca;
use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;
use raw::{input, set};

const CE: u8 = wqe::ctrl::CQ_UPDATE;

/// Uniform in `0..n` (`n > 0`) from SplitMix64 (rand_xoshiro's; the fault injector's
/// generator too).
fn below(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 31) as u8).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

/// A 64-bit traffic counter of QUERY_VPORT_COUNTER (`packets`, then `octets`).
fn traffic(out: &[u8], f: mlx5_prm::Field, octets: bool) -> u64 {
    let at = f.byte_offset() + if octets { 8 } else { 0 };
    u64::from_be_bytes(out[at..at + 8].try_into().unwrap())
}

fn vport_counters(e: &mut Env) -> Vec<u8> {
    let i = input(opcode::QUERY_VPORT_COUNTER, 0, 32);
    let d = e.raw.exec(&i, query_vport_counter_out::BYTES);
    d.ok();
    d.out.clone()
}

fn q_counter(e: &mut Env, c: Counter) -> u32 {
    let mut i = input(opcode::QUERY_Q_COUNTER, 0, 32);
    set(&mut i, query_q_counter_in::COUNTER_SET_ID, 0);
    let d = e.raw.exec(&i, mlx5_prm::query_q_counter_out::BYTES);
    d.ok();
    let at = c.q_counter_offset().unwrap();
    u32::from_be_bytes(d.out[at..at + 4].try_into().unwrap())
}

/// 10,000 RDMA WRITEs of mixed sizes, with READs and atomics among them, across 1% drop,
/// 1% reorder and 0.1% corruption on both directions.
#[test]
fn rc_over_faulty_frames_ends_byte_exact() {
    let (da, db) = InProcHca::pair(ExecMode::Inline);
    for (d, seed) in [(&da, 11u64), (&db, 22u64)] {
        let spec: FaultSpec = format!("drop=0.01,reorder=0.01:window=4,corrupt=0.001,seed={seed}")
            .parse()
            .unwrap();
        d.with_hca(|h| h.port.set_faults(spec));
    }
    let mut ea = Env::new(da.clone(), 1);
    let mut eb = Env::new(db.clone(), 2);
    let (mut a_scq, a_rcq) = (ea.cq(8), ea.cq(4));
    let (b_scq, b_rcq) = (eb.cq(4), eb.cq(4));
    let mut a = ea.qp(&a_scq, &a_rcq, 7, 4);
    let b = eb.qp(&b_scq, &b_rcq, 4, 4);
    // ack_timeout 10: 4.096 us << 10 = ~4 ms before a lost packet is sent again.
    ea.connect_with(&a, b.qpn, eb.gid, eb.mac, 1, 7, 7, 10);
    eb.connect_with(&b, a.qpn, ea.gid, ea.mac, 1, 7, 7, 10);

    const REGION: usize = 256 * 1024;
    let src = ea.alloc(REGION);
    let rd = ea.alloc(64 * 1024);
    let at_local = ea.alloc(4096);
    let dst = eb.alloc(REGION + 4096);
    let src_key = ea.mkey(src, REGION as u64, LR);
    let rd_key = ea.mkey(rd, 64 * 1024, LW);
    let at_key = ea.mkey(at_local, 4096, LW);
    let dst_key = eb.mkey(dst, (REGION + 4096) as u64, RW | RR | A | LW);
    let src_data = pattern(REGION, 3);
    ea.write(src, &src_data);
    let counter_at = dst + REGION as u64;
    eb.write(counter_at, &0u64.to_be_bytes());
    let mut model = vec![0u8; REGION];
    eb.write(dst, &model);
    let mut counter = 0u64;

    let sizes = [1u64, 7, 64, 256, 1000, 1024, 1025, 4096, 4097, 9000, 16384];
    let mut rng = SplitMix64::seed_from_u64(0x5eed);
    let (mut writes, mut reads, mut atomics) = (0, 0, 0);
    while writes < 10_000 {
        // One batch: up to 32 WQEs, then all their completions.
        let mut checks_read: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut checks_atomic: Vec<(u64, u64)> = Vec::new();
        let mut posted = 0;
        // A READ retried after a lost response executes again and would see WRITEs posted
        // after it: the WQE after a READ is fenced (it waits for the READ to complete), as an
        // application must do when it overwrites what it reads.
        let mut fm = CE;
        for _ in 0..32 {
            let kind = below(&mut rng, 100);
            let this = fm;
            fm = CE;
            if kind < 4 && checks_read.len() < 4 {
                let len = sizes[below(&mut rng, sizes.len() as u64) as usize];
                let off = below(&mut rng, (REGION as u64) - len);
                let to = rd + checks_read.len() as u64 * 16 * 1024;
                ea.post_send(
                    &mut a,
                    wqe::opcode::RDMA_READ,
                    this,
                    0,
                    &[
                        &raddr_seg(dst + off, dst_key),
                        &dseg(len as u32, rd_key, to),
                    ],
                );
                checks_read.push((to, model[off as usize..(off + len) as usize].to_vec()));
                fm = CE | wqe::fence::FENCE;
                reads += 1;
            } else if kind < 6 && checks_atomic.len() < 64 {
                let add = below(&mut rng, 1000) + 1;
                let to = at_local + checks_atomic.len() as u64 * 8;
                ea.post_send(
                    &mut a,
                    wqe::opcode::ATOMIC_FA,
                    this,
                    0,
                    &[
                        &raddr_seg(counter_at, dst_key),
                        &atomic_seg(add, 0),
                        &dseg(8, at_key, to),
                    ],
                );
                checks_atomic.push((to, counter));
                counter += add;
                atomics += 1;
            } else {
                let len = sizes[below(&mut rng, sizes.len() as u64) as usize];
                let s = below(&mut rng, (REGION as u64) - len);
                let d = below(&mut rng, (REGION as u64) - len);
                ea.post_send(
                    &mut a,
                    wqe::opcode::RDMA_WRITE,
                    this,
                    0,
                    &[
                        &raddr_seg(dst + d, dst_key),
                        &dseg(len as u32, src_key, src + s),
                    ],
                );
                model[d as usize..(d + len) as usize]
                    .copy_from_slice(&src_data[s as usize..(s + len) as usize]);
                writes += 1;
            }
            posted += 1;
            // The peer runs alongside (an inline device only moves when polled): without
            // this, posting a batch could outlast the ACK timeout with the peer never polled.
            db.poll();
            da.poll();
        }
        for _ in 0..posted {
            let c = ea.wait_cq(&mut a_scq, &[&db]);
            assert!(
                !c.is_error(),
                "error completion: syndrome {:#x} vendor {:#x} opcode {:#x} (after {writes} writes)\nA {:?}\nB {:?}",
                c.syndrome(),
                c.vendor_syndrome(),
                c.wqe_opcode(),
                da.with_hca(|h| h.port.counters().snapshot().nonzero()),
                db.with_hca(|h| h.port.counters().snapshot().nonzero()),
            );
        }
        for (to, want) in &checks_read {
            assert!(ea.read(*to, want.len()) == *want, "READ result differs");
        }
        for (to, orig) in &checks_atomic {
            assert_eq!(ea.read(*to, 8), orig.to_be_bytes(), "FETCH_ADD original");
        }
    }
    assert!(
        reads > 100 && atomics > 100,
        "{reads} reads, {atomics} atomics"
    );
    assert_eq!(
        eb.read(dst, REGION),
        model,
        "the target region is byte-exact"
    );
    assert_eq!(eb.read(counter_at, 8), counter.to_be_bytes());

    // The faults happened, and RC paid for them with retransmissions.
    let (ca, cb) = (
        da.with_hca(|h| h.port.counters().snapshot()),
        db.with_hca(|h| h.port.counters().snapshot()),
    );
    eprintln!(
        "{writes} writes, {reads} reads, {atomics} atomics\nA: {:?}\nB: {:?}",
        ca.nonzero(),
        cb.nonzero()
    );
    for (name, c) in [("A", &ca), ("B", &cb)] {
        assert!(
            c.get(Counter::FaultDropped) > 0,
            "{name}: {:?}",
            c.nonzero()
        );
        assert!(
            c.get(Counter::FaultReordered) > 0,
            "{name}: {:?}",
            c.nonzero()
        );
    }
    assert!(
        ca.get(Counter::FaultCorrupted) + cb.get(Counter::FaultCorrupted) > 0,
        "{:?}",
        ca.nonzero()
    );
    // Every corrupted frame dies at the receiver: on its ICRC, or earlier on a header check
    // (a MAC byte, the IPv4 checksum) when the corrupted byte is there.
    assert_eq!(
        ca.rx_dropped(),
        cb.get(Counter::FaultCorrupted),
        "{:?}",
        ca.nonzero()
    );
    assert_eq!(
        cb.rx_dropped(),
        ca.get(Counter::FaultCorrupted),
        "{:?}",
        cb.nonzero()
    );
    assert!(ca.get(Counter::Retransmits) > 0, "{:?}", ca.nonzero());
    assert!(cb.get(Counter::OutOfSequence) > 0, "{:?}", cb.nonzero());
    // The same through the commands.
    let va = vport_counters(&mut ea);
    assert_eq!(
        traffic(&va, query_vport_counter_out::TRANSMITTED_IB_UNICAST, false),
        ca.get(Counter::TxRoceUnicastFrames)
    );
    assert!(traffic(&va, query_vport_counter_out::RECEIVED_IB_UNICAST, true) > 0);
    let seq_or_timeout =
        q_counter(&mut ea, Counter::PacketSeqErr) + q_counter(&mut ea, Counter::LocalAckTimeout);
    assert!(seq_or_timeout > 0);
    assert_eq!(
        q_counter(&mut eb, Counter::OutOfSequence) as u64,
        cb.get(Counter::OutOfSequence)
    );
}
