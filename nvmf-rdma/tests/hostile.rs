//! Hosts that break the rules, against the transport: a keyed Dataset Management longer than
//! a bounce slot, Connects the core refuses (a line with the NQNs each), and what a torn
//! down connection leaves on the device.

mod common;

use common::*;
use nvmeof::sgl::Sgl;
use nvmf_rdma::Note;

/// One DSM range: 8 blocks at `slba` (`include/linux/nvme.h` `struct nvme_dsm_range`).
fn range(slba: u64) -> Vec<u8> {
    let mut r = vec![0u8; 16];
    r[4..8].copy_from_slice(&8u32.to_le_bytes());
    r[8..16].copy_from_slice(&slba.to_le_bytes());
    r
}

/// A Dataset Management (deallocate, one range) whose keyed SGL is 8 KiB or 64 KiB, longer
/// than the command's 4 KiB bounce slot: the target answers it with success, as Linux does (it
/// copies only the ranges, `io-cmd-bdev.c` `nvmet_bdev_execute_discard`), never writes past
/// the slot nor panics, and serves the next host. (Were the core ever to ask for more than a
/// slot, the transport would end that queue with Note::Overrun instead of overrunning it.)
#[test]
fn a_keyed_dsm_longer_than_a_bounce_slot_never_overruns_it() {
    for len in [8192u32, 64 << 10] {
        let (mut t, mut h, clock) = setup();
        let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 0);
        let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
        let mut data = range(0);
        data.resize(len as usize, 0xa5);
        h.mr.write(DATA_OFF, &data).unwrap();
        let dsm = sqe(0x09, 0, 1, &[0, 1 << 2], h.keyed(DATA_OFF, len));
        // Linux answers success, reading only the range (the core's DSM reads (NR + 1) * 16
        // bytes of the keyed buffer); nothing ends the queue.
        let r = Host::command(&mut t, &mut h, &clock, q, &dsm);
        assert_eq!(r.status, 0, "{len}: {:?}", t.notes);
        assert!(
            !t.notes.iter().any(|n| matches!(n, Note::Overrun { .. })),
            "{len}: {:?}",
            t.notes
        );
        // The target serves on: a second controller.
        let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 0);
        let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
        let mut w = rw(0x01, 0, 8, Sgl::in_capsule(0, 4096));
        w.extend(pattern("pattern4k"));
        assert_eq!(
            Host::command(&mut t, &mut h, &clock, q, &w).status,
            0,
            "{len}"
        );
    }
}

/// Connects the core refuses (a subsystem it does not serve, by RDMA READ on the admin
/// queue; a controller ID it does not know, in the capsule on an I/O queue) are each a
/// Note::ConnectRefused with the status sent and the NQNs the Connect gave.
#[test]
fn refused_connects_are_noted_with_their_status_and_nqns() {
    let (mut t, mut h, clock) = setup();
    let q = Host::open(&mut t, &mut h, &clock, &cm_req(0, 32, 31)).expect("admin queue");
    let c = connect(0, 31, 0, 0xffff, "nqn.2026-12.io.example:nope", HOSTNQN);
    h.mr.write(DATA_OFF, &c[64..]).unwrap();
    let mut sqe = c[..64].to_vec();
    sqe[24..40].copy_from_slice(&h.keyed(DATA_OFF, 1024).0);
    let r = Host::command(&mut t, &mut h, &clock, q, &sqe);
    assert_ne!(r.status, 0);
    let q = Host::open(&mut t, &mut h, &clock, &cm_req(1, 32, 31)).expect("I/O queue");
    let r2 = Host::command(
        &mut t,
        &mut h,
        &clock,
        q,
        &connect(1, 31, 0, 0x77, NQN, HOSTNQN),
    );
    assert_ne!(r2.status, 0);
    let refused: Vec<_> = t
        .notes
        .iter()
        .filter_map(|n| match n {
            Note::ConnectRefused {
                status,
                subsystem,
                host,
                ..
            } => Some((*status, subsystem.as_str(), host.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        [
            (r.status, "nqn.2026-12.io.example:nope", HOSTNQN),
            (r2.status, NQN, HOSTNQN)
        ]
    );
    assert!(!t.notes.iter().any(|n| matches!(n, Note::Connected { .. })));
}

/// After a disconnect and TIMEWAIT, the target's device holds the QPs and mkeys it held
/// before the first connect: no QP, receive region or bounce region is left behind.
#[test]
fn a_disconnect_leaves_no_qp_or_mkey_on_the_device() {
    let (mut t, mut h, clock) = setup();
    let base = live(&t);
    let (aq, cntlid) = Host::admin(&mut t, &mut h, &clock, 0);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
    let (qps, mkeys) = live(&t);
    assert!(
        qps >= base.0 + 2 && mkeys >= base.1 + 4,
        "{base:?} {qps} {mkeys}"
    );
    assert_eq!(t.nv.regions(), 5);
    for q in [q, aq] {
        let id = h.queues[q].id;
        h.node
            .cm
            .disconnect(clock.now(), id, &mut h.node.stack)
            .unwrap();
    }
    spin(&mut t, &mut h, &clock, |t, _| t.nv.connections() == 0);
    clock.advance(ALL_RETRIES_NS);
    spin(&mut t, &mut h, &clock, |t, _| t.node.cm.counts() == (0, 0));
    assert_eq!(live(&t), base);
    assert_eq!(t.nv.regions(), 1);
}
