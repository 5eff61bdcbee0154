//! A host on one emulated HCA against the target on another: the admin queue (Connect data
//! by RDMA READ, Identify by RDMA WRITE), an I/O queue (Connect data in the capsule), 4 KiB
//! in-capsule and 128 KiB keyed writes landing in the disk's region, reads back by RDMA
//! WRITE, disconnect leaving no queue, controller or QP, and a second connect seeing the
//! data; a request the core refuses, and a host that vanishes.

mod common;

use common::*;
use nvmeof::rdma_cm_data::RejStatus;
use nvmeof::sgl::Sgl;
use nvmeof::status;
use nvmf_rdma::{Note, Why};

fn disk_bytes(t: &Tgt, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    t.nv.target()
        .disk(0)
        .unwrap()
        .mr()
        .read(off, &mut b)
        .unwrap();
    b
}

fn host_bytes(h: &Host, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    h.mr.read(off, &mut b).unwrap();
    b
}

/// 4 KiB at LBA 2048 (byte 1 MiB) and 128 KiB at LBA 4096 (byte 2 MiB), read back.
fn read_back(t: &mut Tgt, h: &mut Host, clock: &cm::CmClock, q: usize) {
    let r = Host::command(t, h, clock, q, &rw(0x02, 2048, 8, h.keyed(READ_OFF, 4096)));
    assert_eq!(r.status, 0, "read 4 KiB: {r:?}");
    assert_eq!(host_bytes(h, READ_OFF, 4096), pattern("pattern4k"));
    let r = Host::command(
        t,
        h,
        clock,
        q,
        &rw(0x02, 4096, 256, h.keyed(READ_OFF, 128 << 10)),
    );
    assert_eq!(r.status, 0, "read 128 KiB: {r:?}");
    assert_eq!(host_bytes(h, READ_OFF, 128 << 10), pattern("pattern128k"));
}

#[test]
fn connect_write_read_disconnect_and_a_second_connect_sees_the_data() {
    let (mut t, mut h, clock) = setup();
    let (aq, cntlid) = Host::admin(&mut t, &mut h, &clock, 5000);
    // Identify controller: 4096 bytes by RDMA WRITE from the command's bounce slot.
    let id = sqe(0x06, 0, 0, &[1], h.keyed(READ_OFF, 4096));
    let r = Host::command(&mut t, &mut h, &clock, aq, &id);
    assert_eq!(r.status, 0, "Identify: {r:?}");
    let ident = host_bytes(&h, READ_OFF, 4096);
    assert_eq!(&ident[4..19], b"NVMEOF-RAM-0001");
    assert_eq!(u16::from_le_bytes([ident[78], ident[79]]), cntlid);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);

    // 4 KiB in the capsule (SGL 0x01), as Linux writes small blocks.
    let mut w = rw(0x01, 2048, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    let r = Host::command(&mut t, &mut h, &clock, q, &w);
    assert_eq!((r.status, r.sqid), (0, 1), "in-capsule write: {r:?}");
    assert_eq!(disk_bytes(&t, 1 << 20, 4096), pattern("pattern4k"));
    // 128 KiB by RDMA READ straight into the disk's region; completed once it is there.
    h.mr.write(WRITE_OFF, &pattern("pattern128k")).unwrap();
    let w = rw(0x01, 4096, 256, h.keyed(WRITE_OFF, 128 << 10));
    let r = Host::command(&mut t, &mut h, &clock, q, &w);
    assert_eq!(r.status, 0, "keyed write: {r:?}");
    assert_eq!(disk_bytes(&t, 2 << 20, 128 << 10), pattern("pattern128k"));
    read_back(&mut t, &mut h, &clock, q);
    // A read past the namespace's end: what nvmet answers for the block layer's failure
    // (Internal Error, DNR), nothing moved.
    let past = rw(0x02, 8191, 2, h.keyed(READ_OFF, 1024));
    let r = Host::command(&mut t, &mut h, &clock, q, &past);
    assert_eq!(
        r.status & !status::MORE,
        status::INTERNAL | status::DNR,
        "{r:?}"
    );

    let connected: Vec<_> = t
        .notes
        .iter()
        .filter_map(|n| match n {
            Note::Connected {
                qid,
                cntlid,
                subsystem,
                host,
                ..
            } => Some((*qid, *cntlid, subsystem.clone(), host.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        connected,
        [
            (0, cntlid, NQN.to_string(), HOSTNQN.to_string()),
            (1, cntlid, NQN.to_string(), HOSTNQN.to_string())
        ]
    );

    // The host disconnects the I/O queue, then the admin queue (Linux's order).
    for q in [q, aq] {
        let id = h.queues[q].id;
        h.node
            .cm
            .disconnect(clock.now(), id, &mut h.node.stack)
            .unwrap();
    }
    spin(&mut t, &mut h, &clock, |t, _| {
        t.nv.connections() == 0 && t.nv.target().controllers() == 0
    });
    assert_eq!(t.nv.target().queues(), 0);
    let gone = t
        .notes
        .iter()
        .filter(|n| matches!(n, Note::Disconnected { why: Why::Host, .. }))
        .count();
    assert_eq!(gone, 2);
    // Once TIMEWAIT is over, no id and no QP is left on the target.
    clock.advance(ALL_RETRIES_NS);
    spin(&mut t, &mut h, &clock, |t, _| t.node.cm.counts() == (0, 0));
    for q in std::mem::take(&mut h.queues) {
        h.node
            .cm
            .destroy_id(clock.now(), q.id, &mut h.node.stack)
            .unwrap();
    }

    // A second connection reads what the first wrote.
    let (_, cntlid2) = Host::admin(&mut t, &mut h, &clock, 5000);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid2);
    h.mr.write(READ_OFF, &[0u8; 128 << 10]).unwrap();
    read_back(&mut t, &mut h, &clock, q);
}

#[test]
fn a_request_the_core_refuses_is_rejected_with_the_nvme_rdma_status() {
    let (mut t, mut h, clock) = setup();
    // An admin queue deeper than NVME_AQ_DEPTH (nvmet_rdma_parse_cm_connect_req).
    let Err((reason, private)) = Host::open(&mut t, &mut h, &clock, &cm_req(0, 64, 63)) else {
        panic!("accepted");
    };
    assert_eq!(reason, rdma_cm::msg::rej_reason::CONSUMER_DEFINED);
    assert_eq!(&private[..4], &RejStatus::InvalidHsqsize.to_bytes());
    assert!(t.notes.iter().any(|n| matches!(
        n,
        Note::Rejected {
            status: RejStatus::InvalidHsqsize,
            ..
        }
    )));
    assert_eq!((t.nv.connections(), t.nv.target().queues()), (0, 0));
    // The next request is served.
    let (_, _) = Host::admin(&mut t, &mut h, &clock, 0);
}

#[test]
fn a_host_that_vanishes_loses_its_controller_at_keep_alive_and_may_connect_again() {
    let (mut t, mut h, clock) = setup();
    let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 2000);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
    let mut w = rw(0x01, 0, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &w).status, 0);
    // The host goes silent; the target's time passes its keep-alive timeout.
    clock.advance(10_000_000_000);
    let t0 = std::time::Instant::now();
    while t.nv.connections() != 0 || t.nv.target().controllers() != 0 {
        t.step(&clock);
        assert!(t0.elapsed().as_secs() < 30, "{:?}", t.notes);
    }
    let n = t
        .notes
        .iter()
        .filter(|n| {
            matches!(
                n,
                Note::Disconnected {
                    why: Why::Controller,
                    ..
                }
            )
        })
        .count();
    assert_eq!(n, 2, "both queues torn down: {:?}", t.notes);
    for q in std::mem::take(&mut h.queues) {
        h.node
            .cm
            .destroy_id(clock.now(), q.id, &mut h.node.stack)
            .unwrap();
    }
    let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 2000);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
    let rd = rw(0x02, 0, 8, h.keyed(READ_OFF, 4096));
    let r = Host::command(&mut t, &mut h, &clock, q, &rd);
    assert_eq!(r.status, 0);
    assert_eq!(host_bytes(&h, READ_OFF, 4096), pattern("pattern4k"));
}

/// Dataset Management (deallocate, as mkfs.ext4's discard sends it) with its range list in
/// the capsule and by RDMA READ: both succeed, and the RAM disk keeps the bytes (the
/// namespace does not report deallocated blocks as reading zeroes: DLFEAT 0).
#[test]
fn dataset_management_deallocates_ranges_in_the_capsule_and_keyed() {
    let (mut t, mut h, clock) = setup();
    let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 0);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
    let mut w = rw(0x01, 0, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &w).status, 0);
    let mut w = rw(0x01, 64, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &w).status, 0);
    // One range: context attributes 0, 8 blocks at `slba` (include/linux/nvme.h
    // `struct nvme_dsm_range`); cdw10 NR 0, cdw11 AD.
    let range = |slba: u64| {
        let mut r = vec![0u8; 16];
        r[4..8].copy_from_slice(&8u32.to_le_bytes());
        r[8..16].copy_from_slice(&slba.to_le_bytes());
        r
    };
    // Linux's host sends the ranges as a whole 4 KiB page in the capsule (seen from Linux
    // 6.1's mkfs.ext4): longer than the one range is fine (nvmet_check_data_len_lte).
    let mut d = sqe(0x09, 0, 1, &[0, 1 << 2], Sgl::in_capsule(0, 4096));
    d.extend(range(0));
    d.resize(64 + 4096, 0);
    let r = Host::command(&mut t, &mut h, &clock, q, &d);
    assert_eq!(r.status, 0, "in-capsule DSM: {r:?}");
    assert_eq!(disk_bytes(&t, 0, 4096), pattern("pattern4k"));
    h.mr.write(DATA_OFF, &range(64)).unwrap();
    let d = sqe(0x09, 0, 1, &[0, 1 << 2], h.keyed(DATA_OFF, 16));
    let r = Host::command(&mut t, &mut h, &clock, q, &d);
    assert_eq!(r.status, 0, "keyed DSM: {r:?}");
    assert_eq!(disk_bytes(&t, 64 * 512, 4096), pattern("pattern4k"));
    // A range past the namespace's end still fails (Internal Error, DNR: the block layer's
    // answer, as for a read).
    let d = sqe(0x09, 0, 1, &[0, 1 << 2], h.keyed(DATA_OFF, 16));
    h.mr.write(DATA_OFF, &range(8190)).unwrap();
    let r = Host::command(&mut t, &mut h, &clock, q, &d);
    assert_eq!(
        r.status & !status::MORE,
        status::INTERNAL | status::DNR,
        "{r:?}"
    );
}
