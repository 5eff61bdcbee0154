use super::create::layout;
use super::rc::*;
use super::*;
use core::sync::atomic::{AtomicU32, AtomicU8};

fn caps() -> crate::caps::Caps {
    crate::caps::Caps {
        log_max_qp_sz: 15,
        max_wqe_sz_sq: 1024,
        max_wqe_sz_rq: 512,
        ..Default::default()
    }
}

#[test]
fn layout_rounds_per_prm() {
    let l = layout(
        &QpCaps {
            max_send_wr: 10,
            max_recv_wr: 10,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        },
        &caps(),
    )
    .unwrap();
    // 48 + max(16, align(16 + 4, 16) = 32) = 80 -> 128 bytes = 2 WQEBBs; 20 -> 32 blocks.
    assert_eq!(l.sq_max_bbs, 2);
    assert_eq!(l.sq_wqe_cnt, 32);
    assert_eq!(l.rq_wqe_cnt, 16);
    assert_eq!(l.rq_stride_shift, 4);
    assert_eq!(l.sq_offset, 16 * 16);
    assert_eq!(l.caps.max_send_wr, 16);
    // The WQE less ctrl + raddr + atomic and the inline header (rdma-core verbs.c
    // mlx5_calc_sq_size).
    assert_eq!(l.caps.max_inline_data, 128 - 48 - 4);
    assert!(layout(
        &QpCaps {
            max_send_sge: 100,
            ..Default::default()
        },
        &caps()
    )
    .is_err());
    assert!(layout(
        &QpCaps {
            max_send_wr: 1 << 20,
            ..Default::default()
        },
        &caps()
    )
    .is_err());
}

#[test]
fn absurd_wr_counts_are_refused_not_wrapped() {
    for (send, recv) in [
        (u32::MAX, 1),
        (1, u32::MAX),
        ((1 << 31) + 1, 1),
        (1, (1 << 31) + 1),
        (1 << 31, 0),
        (1 << 16, 0),
    ] {
        let r = layout(
            &QpCaps {
                max_send_wr: send,
                max_recv_wr: recv,
                ..Default::default()
            },
            &caps(),
        );
        assert_eq!(
            r.err(),
            Some(Error::Invalid(InvalidInput::QpCaps)),
            "send {send} recv {recv}"
        );
    }
    // The largest legal queues still fit (2^15 blocks, 16-bit counters).
    let l = layout(
        &QpCaps {
            max_send_wr: 1 << 15,
            max_recv_wr: 1 << 15,
            max_inline_data: 0,
            ..Default::default()
        },
        &caps(),
    )
    .unwrap();
    assert_eq!((l.sq_wqe_cnt, l.rq_wqe_cnt), (1 << 15, 1 << 15));
}

#[test]
fn the_receive_queue_is_at_least_one_basic_block() {
    for (wr, sge, cnt) in [(1, 1, 4), (2, 1, 4), (1, 2, 2), (1, 4, 1), (5, 1, 8)] {
        let l = layout(
            &QpCaps {
                max_recv_wr: wr,
                max_recv_sge: sge,
                ..Default::default()
            },
            &caps(),
        )
        .unwrap();
        assert_eq!(l.rq_wqe_cnt, cnt, "{wr} WRs of {sge} SGEs");
        assert_eq!(l.sq_offset % 64, 0);
        assert!(l.sq_offset >= 64);
        assert_eq!(l.caps.max_recv_wr, cnt);
    }
}

#[test]
fn the_largest_inline_send_fits_the_ds_field() {
    for inline in [0, 16, 60, 64, 200, 400, 900, 972] {
        let l = layout(
            &QpCaps {
                max_inline_data: inline,
                ..Default::default()
            },
            &caps(),
        )
        .unwrap();
        let max = l.caps.max_inline_data;
        assert!(max >= inline);
        // RDMA WRITE (ctrl + raddr) and SEND of max_inline bytes.
        let write_ds = 2 + (max + 4).div_ceil(16);
        assert!(write_ds <= 63, "inline {inline}: ds {write_ds}");
        assert!(wqe::wqebbs(write_ds) <= l.sq_max_bbs);
    }
    // 973 bytes need more than a 1024-byte WQE.
    assert!(layout(
        &QpCaps {
            max_inline_data: 973,
            ..Default::default()
        },
        &caps()
    )
    .is_err());
}

#[test]
fn rd_atomic_rounds_up_and_refuses_above_the_device() {
    assert_eq!(log_rd_atomic(0, 4), Ok(0));
    assert_eq!(log_rd_atomic(1, 4), Ok(0));
    assert_eq!(log_rd_atomic(3, 4), Ok(2));
    assert_eq!(log_rd_atomic(16, 4), Ok(4));
    assert_eq!(
        log_rd_atomic(17, 4),
        Err(Error::Invalid(InvalidInput::RdAtomic {
            requested: 17,
            max: 16
        }))
    );
}

#[test]
fn atomic_mode_follows_linux_get_atomic_mode() {
    let mut c = caps();
    assert_eq!(atomic_mode(&c), None, "no atomic cap");
    c.atomic = true;
    c.atomic_operations = atomic_ops::CMP_SWAP | atomic_ops::FETCH_ADD;
    c.atomic_size_qp = 1 << 3;
    assert_eq!(atomic_mode(&c), Some(atomic_mode_val::IB_COMP));
    c.atomic_operations |= atomic_ops::EXTENDED_CMP_SWAP;
    assert_eq!(atomic_mode(&c), Some(atomic_mode_val::UP_TO_8B));
    c.atomic_size_qp = (1 << 3) | (1 << 5);
    assert_eq!(atomic_mode(&c), Some(5), "up to 32 bytes");
    c.atomic_operations = atomic_ops::FETCH_ADD;
    assert_eq!(atomic_mode(&c), None, "fetch-add alone");
}

/// A send queue of `cnt` blocks and `max_wr` WRs, with its counters at `start`.
fn send_state(cnt: u32, max_wr: u32, start: u32) -> WqShared {
    WqShared {
        qpn: 5,
        qpn_key: WqShared::key(5),
        sq: (0..cnt)
            .map(|_| SqSlot {
                wrid: AtomicU64::new(0),
                meta: AtomicU64::new(0),
                wc_op: AtomicU8::new(0),
            })
            .collect(),
        sq_mask: cnt - 1,
        sq_max_wr: max_wr,
        sq_wr_tail: AtomicU32::new(start),
        sq_last: AtomicU32::new(start.wrapping_sub(1)),
        rq_wrid: alloc::vec![AtomicU64::new(0)],
        rq_mask: 0,
        rq_head: AtomicU32::new(0),
        rq_tail: AtomicU32::new(0),
        rq_by_counter: false,
        stale: spin::Mutex::new(Vec::new()),
        retired: core::sync::atomic::AtomicBool::new(false),
    }
}

/// What the poster records for a WQE of `bbs` blocks (`QueuePair::set_slot`).
fn record(q: &WqShared, head: &mut u32, cur: &mut u16, wr_id: u64, bbs: u16) -> u16 {
    let start = *cur;
    let sl = &q.sq[(start as u32 & q.sq_mask) as usize];
    *head = head.wrapping_add(1);
    sl.wrid.store(wr_id, Ordering::Relaxed);
    sl.meta.store(slot_meta(*head, start), Ordering::Release);
    *cur = cur.wrapping_add(bbs);
    start
}

#[test]
fn send_completions_are_checked_against_the_ring() {
    let q = send_state(8, 4, 0);
    let (mut head, mut cur) = (0, 0);
    let w1 = record(&q, &mut head, &mut cur, 11, 1);
    let w2 = record(&q, &mut head, &mut cur, 12, 2);
    let w3 = record(&q, &mut head, &mut cur, 13, 1);
    // The next WR (the one-compare case).
    assert_eq!(q.complete_send(w1), Some(11));
    assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 1);
    // A duplicate, a block inside a WQE, a WQE not posted: refused, nothing moves.
    assert_eq!(q.complete_send(w1), None);
    assert_eq!(q.complete_send(w2 + 1), None);
    assert_eq!(q.complete_send(cur), None);
    assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 1);
    // A completion that covers an unsignaled WR (2) takes the full check.
    assert_eq!(q.complete_send(w3), Some(13));
    assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 3);
    assert_eq!(q.complete_send(w2), None, "already covered");
    // A stale slot of an earlier pass over the ring.
    let mut c = q.cursor();
    let w4 = record(&q, &mut head, &mut cur, 14, 1);
    assert_eq!(c.complete(&q, w4.wrapping_add(8)), None);
    assert_eq!(c.complete(&q, w4), Some(14));
    assert_eq!(c.tail(), 4);
}

#[test]
fn send_completions_count_on_across_the_wr_counter_wrap() {
    let start = u32::MAX - 1;
    let q = send_state(8, 4, start);
    let (mut head, mut cur) = (start, 0xfffe_u16);
    let mut c = q.cursor();
    for id in 0..6u64 {
        let w = record(&q, &mut head, &mut cur, id, 1);
        assert_eq!(c.complete(&q, w), Some(id), "WR {id}");
    }
    assert_eq!(c.tail(), start.wrapping_add(6));
    q.store_tail(&c);
    assert_eq!(q.sq_wr_tail.load(Ordering::Relaxed), 4);
}

#[test]
fn udp_sport_is_in_the_rocev2_range() {
    for (a, b) in [(1, 2), (0x123, 0x456), (0xff_ffff, 0xff_fffe)] {
        assert!(udp_sport(a, b) >= 0xc000);
    }
}

#[test]
fn udp_sport_of_a_flow_label_is_linuxs() {
    // The flow labels and UDP source ports of the three NVMe-oF connections of the shared
    // rxe capture (rdma_flow_label_to_udp_sport), and 0 falling back to the QP pair's label.
    assert_eq!(udp_sport_of(0x798d5, 0x11, 0x12), 55499);
    assert_eq!(udp_sport_of(0x3266e, 0x11, 0x12), 58978);
    assert_eq!(udp_sport_of(0x27010, 0x11, 0x12), 61465);
    assert_eq!(udp_sport_of(0, 0x11, 0x12), udp_sport(0x11, 0x12));
}
