//! Malformed and hostile capsules get the status Linux's target (`nvmet`) returns for them,
//! and nothing is written outside the namespace. Each case names the Linux function whose
//! answer it checks.

mod common;

use common::*;
use nvmeof::exec::STAGING_LEN;
use nvmeof::rdma_cm_data::RejStatus;
use nvmeof::sgl::Sgl;
use nvmeof::{ExecError, Step};

/// A 1 MiB namespace (2048 blocks of 512 bytes).
const DISK: usize = 1 << 20;

fn status(t: &mut Target, q: nvmeof::QueueId, capsule: &[u8]) -> (u16, u64) {
    let mut host = vec![0u8; 1 << 20];
    let r = run(t, q, capsule, &mut host).expect("a response");
    (r.cqe.status, r.cqe.result)
}

type Target = nvmeof::Target<Disk>;

fn read(nsid: u32, slba: u64, nlb: u16, sgl: Sgl) -> Vec<u8> {
    sqe(
        0x02,
        7,
        nsid,
        &[slba as u32, (slba >> 32) as u32, u32::from(nlb)],
        sgl,
    )
}

#[test]
fn cm_requests_are_checked_as_nvmet_rdma_parse_cm_connect_req_does() {
    let mut t = target(DISK);
    assert_eq!(t.accept(&[]).unwrap_err(), RejStatus::InvalidLen);
    let mut req = cm_req(0, 32, 31);
    req[0] = 1;
    assert_eq!(t.accept(&req).unwrap_err(), RejStatus::InvalidRecfmt);
    // An admin queue deeper than NVME_AQ_DEPTH.
    assert_eq!(
        t.accept(&cm_req(0, 33, 32)).unwrap_err(),
        RejStatus::InvalidHsqsize
    );
    assert_eq!(RejStatus::InvalidHsqsize.to_bytes(), [0, 0, 4, 0]);
    let acc = t.accept(&cm_req(1, 128, 127)).unwrap();
    assert_eq!(
        (acc.recv_depth, acc.send_depth, acc.rep.crqsize),
        (128, 128, 128)
    );
}

#[test]
fn nvmet_req_init_refuses_fused_and_prp_commands() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1);
    let mut c = read(1, 0, 0, keyed(512));
    c[1] = 0x41; // fused, first
    assert_eq!(status(&mut t, q[1], &c).0, 0x6002);
    c[1] = 0x00; // PRPs
    assert_eq!(status(&mut t, q[1], &c).0, 0x6002);
}

#[test]
fn unconnected_queues_take_only_a_connect() {
    // nvmet_parse_connect_cmd: anything else is an invalid opcode.
    let mut t = target(DISK);
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    assert_eq!(status(&mut t, q, &read(1, 0, 0, keyed(512))).0, 0x4001);
    assert_eq!(status(&mut t, q, &set_cc(CC_ENABLE)).0, 0x4001);
    // A failed command before the Connect: queue ID 0, no head to advance.
    let r = run(&mut t, q, &set_cc(CC_ENABLE), &mut []).unwrap();
    assert_eq!((r.cqe.sqid, r.cqe.sqhd), (0, 0));
}

#[test]
fn connect_errors_are_those_of_fabrics_cmd_c() {
    let mut t = target(DISK);
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    // nvmet_execute_admin_connect: the controller ID must be the dynamic one.
    let c = connect(0, 31, 0, 1, NQN, HOSTNQN);
    assert_eq!(status(&mut t, q, &c), (0x4182, 0x1_0010));
    // nvmet_alloc_ctrl: unknown subsystem.
    let c = connect(0, 31, 0, 0xffff, "nqn.2026-12.io.example:nope", HOSTNQN);
    assert_eq!(status(&mut t, q, &c), (0x4182, 0x1_0100));
    // Record format.
    let mut c = connect(0, 31, 0, 0xffff, NQN, HOSTNQN);
    c[40] = 1;
    assert_eq!(status(&mut t, q, &c).0, 0x4180);
    // nvmet_install_queue: a queue of one entry.
    assert_eq!(
        status(&mut t, q, &connect(0, 0, 0, 0xffff, NQN, HOSTNQN)),
        (0x4182, 44)
    );
    // Connect data length other than 1024 (nvmet_check_transfer_len).
    let mut c = connect(0, 31, 0, 0xffff, NQN, HOSTNQN);
    c[24..40].copy_from_slice(&Sgl::in_capsule(0, 512).0);
    assert_eq!(status(&mut t, q, &c).0, 0x400f);
    assert_eq!(t.controllers(), 0);

    // A host the subsystem does not allow (nvmet_host_allowed).
    let mut cfg = capture_config();
    cfg.subsystems[0].allow_any_host = false;
    cfg.subsystems[0].hosts = vec!["nqn.2014-08.org.nvmexpress:uuid:other".into()];
    let mut t2 = nvmeof::Target::new(cfg, vec![nvmeof::RamDisk::new(vec![0u8; DISK], 0)]).unwrap();
    let q2 = t2.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let c = connect(0, 31, 0, 0xffff, NQN, HOSTNQN);
    assert_eq!(status(&mut t2, q2, &c), (0x4184, 0x1_0200));
}

#[test]
fn io_connect_errors_name_the_controller_or_queue() {
    let mut t = target(DISK);
    let qs = connected(&mut t, 0, 1);
    let q = t.accept(&cm_req(2, 128, 127)).unwrap().queue;
    // nvmet_ctrl_find_get: no controller 9; a controller of another host.
    assert_eq!(
        status(&mut t, q, &connect(2, 127, 0, 9, NQN, HOSTNQN)),
        (0x4182, 0x1_0010)
    );
    let other = "nqn.2014-08.org.nvmexpress:uuid:other";
    assert_eq!(
        status(&mut t, q, &connect(2, 127, 0, 1, NQN, other)),
        (0x4182, 0x1_0010)
    );
    // Queue ID above max_qid (128): IPO_IATTR_CONNECT_SQE(qid).
    assert_eq!(
        status(&mut t, q, &connect(129, 127, 0, 1, NQN, HOSTNQN)),
        (0x4182, 42)
    );
    // Deeper than CAP.MQES + 1.
    assert_eq!(
        status(&mut t, q, &connect(2, 128, 0, 1, NQN, HOSTNQN)),
        (0x4182, 1)
    );
    // Queue 1 exists already: a command sequence error (nvmet_install_queue), the controller
    // ID passed back.
    assert_eq!(
        status(&mut t, q, &connect(1, 127, 0, 1, NQN, HOSTNQN)),
        (0x400c, 1)
    );
    // A Connect on a connected queue is no fabrics command an I/O queue runs.
    assert_eq!(
        status(&mut t, qs[1], &connect(1, 127, 0, 1, NQN, HOSTNQN)).0,
        0x6001
    );
    // And on the admin queue neither (nvmet_parse_fabrics_admin_cmd).
    assert_eq!(
        status(&mut t, qs[0], &connect(0, 31, 0, 0xffff, NQN, HOSTNQN)).0,
        0x6001
    );
}

#[test]
fn a_controller_not_enabled_runs_no_admin_or_io_command() {
    // nvmet_check_ctrl_status: CC.EN and CSTS.RDY.
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1);
    assert_eq!(status(&mut t, q[0], &set_cc(0x460060)).0, 0);
    let identify = sqe(0x06, 3, 0, &[1], keyed(4096));
    assert_eq!(status(&mut t, q[0], &identify).0, 0x400c);
    assert_eq!(status(&mut t, q[1], &read(1, 0, 0, keyed(512))).0, 0x400c);
    // Entry sizes other than 64/16 bytes fail the enable: CSTS.CFS (nvmet_start_ctrl).
    assert_eq!(status(&mut t, q[0], &set_cc(0x450061)).0, 0);
    let mut get = sqe(0x7f, 4, 0, &[], no_data());
    get[4] = 0x04;
    get[44] = 0x1c;
    assert_eq!(status(&mut t, q[0], &get), (0, 2));
}

#[test]
fn properties_are_cap_vs_cc_csts_only() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 0);
    let prop = |fctype: u8, attrib: u8, off: u32| {
        let mut b = sqe(0x7f, 5, 0, &[], no_data());
        b[4] = fctype;
        b[40] = attrib;
        b[44..48].copy_from_slice(&off.to_le_bytes());
        b
    };
    assert_eq!(
        status(&mut t, q[0], &prop(0x04, 1, 0)),
        (0, 0x0000_0820_0f00_007f)
    );
    assert_eq!(status(&mut t, q[0], &prop(0x04, 0, 0)).0, 0x6002); // CAP as 4 bytes
    assert_eq!(status(&mut t, q[0], &prop(0x04, 0, 0x20)).0, 0x6002); // NSSR
    assert_eq!(status(&mut t, q[0], &prop(0x00, 0, 0x00)).0, 0x6002); // set CAP
    assert_eq!(status(&mut t, q[0], &prop(0x00, 1, 0x14)).0, 0x6002); // CC as 8 bytes
    assert_eq!(status(&mut t, q[0], &prop(0x08, 0, 0)).0, 0x6001); // Disconnect: not in 6.1
}

#[test]
fn data_pointers_are_mapped_as_nvmet_rdma_map_sgl_does() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1)[1];
    let mut bad = keyed(512);
    bad.0[15] = 0x20; // segment descriptor
    assert_eq!(status(&mut t, q, &read(1, 0, 0, bad)).0, 0x6011);
    bad.0[15] = 0x41; // keyed, offset subtype
    assert_eq!(status(&mut t, q, &read(1, 0, 0, bad)).0, 0x6002);
    bad.0[15] = 0x00; // data block, address subtype
    assert_eq!(status(&mut t, q, &read(1, 0, 0, bad)).0, 0x6002);
    // In-capsule data for a read (nvme_is_write).
    assert_eq!(
        status(&mut t, q, &read(1, 0, 0, Sgl::in_capsule(0, 512))).0,
        0x6002
    );
    // In-capsule data the SEND does not hold.
    let mut w = sqe(0x01, 8, 1, &[0, 0, 0], Sgl::in_capsule(0, 512));
    w.extend(vec![0x55; 100]);
    assert_eq!(status(&mut t, q, &w).0, 0x4016);
    let w = sqe(0x01, 8, 1, &[0, 0, 0], Sgl::in_capsule(u64::MAX, 512));
    assert_eq!(status(&mut t, q, &w).0, 0x4016);
    // Beyond MDTS: nvmet_rdma_map_sgl_keyed's failure (no DNR).
    assert_eq!(
        status(&mut t, q, &read(1, 0, 4095, keyed(2 << 20))).0,
        0x0006
    );
    assert!(t.disk(0).unwrap().bytes().iter().all(|&b| b == 0));
}

#[test]
fn io_commands_stay_inside_the_namespace() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1)[1];
    // Length other than the blocks' (nvmet_check_transfer_len).
    assert_eq!(status(&mut t, q, &read(1, 0, 0, keyed(4096))).0, 0x600f);
    // Past the end, and an LBA that overflows: the block layer's I/O error as nvmet answers it.
    assert_eq!(status(&mut t, q, &read(1, 2047, 1, keyed(1024))).0, 0x6006);
    assert_eq!(
        status(&mut t, q, &read(1, u64::MAX, 0, keyed(512))).0,
        0x6006
    );
    let mut w = sqe(0x01, 9, 1, &[2047, 0, 1], Sgl::in_capsule(0, 1024));
    w.extend(vec![0xaa; 1024]);
    assert_eq!(status(&mut t, q, &w).0, 0x6006);
    let wz = sqe(0x08, 9, 1, &[2040, 0, 8], no_data());
    assert_eq!(status(&mut t, q, &wz).0, 0x6006);
    // No such namespace; an unknown opcode; a fabrics command on an I/O queue.
    assert_eq!(status(&mut t, q, &read(2, 0, 0, keyed(512))).0, 0x600b);
    assert_eq!(
        status(&mut t, q, &sqe(0x05, 9, 1, &[], no_data())).0,
        0x6001
    );
    assert_eq!(status(&mut t, q, &set_cc(0)).0, 0x6001);
    assert!(t.disk(0).unwrap().bytes().iter().all(|&b| b == 0));
}

#[test]
fn writes_complete_once_their_bytes_are_in_the_disk() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1)[1];
    // In-capsule: copied before the response.
    let mut w = sqe(0x01, 10, 1, &[8, 0, 7], Sgl::in_capsule(0, 4096));
    w.extend(vec![0x5a; 4096]);
    assert_eq!(status(&mut t, q, &w).0, 0);
    assert!(t.disk(0).unwrap().bytes()[4096..8192]
        .iter()
        .all(|&b| b == 0x5a));
    // Keyed: an RDMA READ into the disk, then the response.
    let w = sqe(0x01, 11, 1, &[16, 0, 7], keyed(4096));
    let mut staging = vec![0u8; STAGING_LEN];
    let Step::Transfer(tr) = t.submit(q, &w, &mut staging).unwrap() else {
        panic!()
    };
    assert_eq!(
        tr.local,
        nvmeof::Local::Disk {
            disk: 0,
            offset: 8192,
            len: 4096
        }
    );
    assert_eq!(tr.dir, nvmeof::Dir::FromHost);
    do_transfer(&mut t, &tr, &mut staging, &mut vec![0xa5; 4096]);
    let r = t.complete_transfer(q, tr.tag, true, &staging).unwrap();
    assert_eq!(
        (r.cqe.status, r.cqe.cid, r.invalidate),
        (0, 11, Some(0x1234))
    );
    // The tag is spent.
    assert_eq!(
        t.complete_transfer(q, tr.tag, true, &staging),
        Err(ExecError::UnknownTag)
    );
    // Read back, Write Zeroes, Dataset Management deallocate, Flush.
    let mut host = vec![0u8; 4096];
    let r = run(&mut t, q, &read(1, 16, 7, keyed(4096)), &mut host).unwrap();
    assert_eq!(r.cqe.status, 0);
    assert!(host.iter().all(|&b| b == 0xa5));
    assert_eq!(
        status(&mut t, q, &sqe(0x08, 12, 1, &[8, 0, 3], no_data())).0,
        0
    );
    assert!(t.disk(0).unwrap().bytes()[4096..6144]
        .iter()
        .all(|&b| b == 0));
    let mut dsm = sqe(0x09, 13, 1, &[0, 1 << 2], Sgl::in_capsule(0, 16));
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&4u32.to_le_bytes());
    range[8..16].copy_from_slice(&16u64.to_le_bytes());
    dsm.extend(range);
    assert_eq!(status(&mut t, q, &dsm).0, 0);
    assert!(t.disk(0).unwrap().bytes()[8192..10240]
        .iter()
        .all(|&b| b == 0));
    assert!(t.disk(0).unwrap().bytes()[10240..12288]
        .iter()
        .all(|&b| b == 0xa5));
    // A DSM range past the end; two ranges announced, one sent.
    range[8..16].copy_from_slice(&2046u64.to_le_bytes());
    let mut dsm = sqe(0x09, 13, 1, &[0, 1 << 2], Sgl::in_capsule(0, 16));
    dsm.extend(range);
    assert_eq!(status(&mut t, q, &dsm).0, 0x6006);
    let mut dsm = sqe(0x09, 13, 1, &[1, 1 << 2], Sgl::in_capsule(0, 16));
    dsm.extend([0u8; 16]);
    assert_eq!(status(&mut t, q, &dsm).0, 0x600f);
    assert_eq!(status(&mut t, q, &sqe(0x00, 14, 1, &[], no_data())).0, 0);
}

#[test]
fn admin_commands_answer_as_admin_cmd_c() {
    let mut t = target(DISK);
    let q = connected(&mut t, 5000, 0)[0];
    // Identify: unknown CNS, wrong length, the broadcast NSID for a namespace.
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, 0, &[0x10], keyed(4096))).0,
        0x6002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, 0, &[1], keyed(2048))).0,
        0x600f
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, u32::MAX, &[0], keyed(4096))).0,
        0x600b
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, 9, &[3], keyed(4096))).0,
        0x600b
    );
    // An inactive namespace: all zero, success.
    let mut host = vec![0xffu8; 4096];
    let r = run(&mut t, q, &sqe(0x06, 1, 9, &[0], keyed(4096)), &mut host).unwrap();
    assert_eq!(r.cqe.status, 0);
    assert!(host.iter().all(|&b| b == 0));
    // Get Log Page: unknown page; length other than NUMD's; SMART of another length.
    let glp =
        |lid: u32, numd: u32, len: u32| sqe(0x02, 2, u32::MAX, &[lid | (numd << 16)], keyed(len));
    assert_eq!(status(&mut t, q, &glp(0x0c, 1023, 4096)).0, 0x6002);
    assert_eq!(status(&mut t, q, &glp(0x02, 127, 4096)).0, 0x600f);
    assert_eq!(status(&mut t, q, &glp(0x02, 63, 256)).0, 0x0006);
    assert_eq!(status(&mut t, q, &glp(0x05, 63, 256)).0, 0x600f); // effects: too short
    assert_eq!(status(&mut t, q, &glp(0x01, 15, 64)).0, 0);
    // Features: unknown, number of queues 0xffff, the host ID without EXHID.
    assert_eq!(
        status(&mut t, q, &sqe(0x09, 3, 0, &[0x03], no_data())).0,
        0x6002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x09, 3, 0, &[0x07, 0xffff], no_data())).0,
        0x4002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x09, 3, 0, &[0x07, 3], no_data())),
        (0, 0x7f007f)
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x0a, 3, 0, &[0x81], keyed(16))).0,
        0x6002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x0a, 3, 0, &[0x81, 1], keyed(16))),
        (0, 0)
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x09, 3, 0, &[0x0b, 1 << 31], no_data())).0,
        0x6002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x0a, 3, 0, &[0x0f], no_data())),
        (0, 5000)
    );
    // Keep Alive, Abort; an unknown admin opcode.
    assert_eq!(status(&mut t, q, &sqe(0x18, 4, 0, &[], no_data())).0, 0);
    assert_eq!(status(&mut t, q, &sqe(0x08, 4, 0, &[], no_data())), (0, 1));
    assert_eq!(
        status(&mut t, q, &sqe(0x80, 4, 0, &[], no_data())).0,
        0x6001
    );
    // Four AERs are held, the fifth refused.
    let mut staging = vec![0u8; STAGING_LEN];
    for cid in 20..24 {
        let aer = sqe(0x0c, cid, 0, &[], no_data());
        assert_eq!(t.submit(q, &aer, &mut staging).unwrap(), Step::Hold);
    }
    assert_eq!(
        status(&mut t, q, &sqe(0x0c, 24, 0, &[], no_data())).0,
        0x4105
    );
    assert_eq!(t.take_completion(), None);
}

#[test]
fn the_discovery_controller_runs_six_commands() {
    let mut t = target(DISK);
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let disc = "nqn.2014-08.org.nvmexpress.discovery";
    let r = run(
        &mut t,
        q,
        &connect(0, 31, 0, 0xffff, disc, HOSTNQN),
        &mut [],
    )
    .unwrap();
    assert_eq!((r.cqe.status, r.cqe.result), (0, 1));
    // Not ready yet: an invalid opcode (nvmet_parse_discovery_cmd).
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, 0, &[1], keyed(4096))).0,
        0x6001
    );
    // Enabled without I/O queue entry sizes: a discovery controller does not check them
    // (nvmet_start_ctrl).
    assert_eq!(status(&mut t, q, &set_cc(1)).0, 0);
    // Identify other than the controller: an invalid opcode (nvmet_execute_disc_identify).
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, 1, &[0], keyed(4096))).0,
        0x6001
    );
    // The log page: another page, an unaligned offset, a read past its end (zeros).
    let glp = |lid: u32, off: u32| sqe(0x02, 2, 0, &[lid | (255 << 16), 0, off], keyed(1024));
    assert_eq!(status(&mut t, q, &glp(0x01, 0)).0, 0x6002);
    assert_eq!(status(&mut t, q, &glp(0x70, 2)).0, 0x6002);
    let mut host = vec![0xffu8; 1024];
    let r = run(&mut t, q, &glp(0x70, 1 << 20), &mut host).unwrap();
    assert_eq!(r.cqe.status, 0);
    assert!(host.iter().all(|&b| b == 0));
    // Features: keep-alive (120 s for a discovery controller asked for none) and events.
    assert_eq!(
        status(&mut t, q, &sqe(0x0a, 3, 0, &[0x0f], no_data())),
        (0, 120_000)
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x09, 3, 0, &[0x0b, 0x100], no_data())).0,
        0x6002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x09, 3, 0, &[0x07, 0], no_data())).0,
        0x6002
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x01, 3, 0, &[], no_data())).0,
        0x6001
    );
    // No I/O queue for a discovery controller (max_qid 0).
    let io = t.accept(&cm_req(1, 32, 31)).unwrap().queue;
    assert_eq!(
        status(&mut t, io, &connect(1, 31, 0, 1, disc, HOSTNQN)),
        (0x4182, 42)
    );
}

#[test]
fn a_short_capsule_or_a_failed_transfer_tears_the_controller_down() {
    let mut t = target(DISK);
    let qs = connected(&mut t, 0, 2);
    let mut staging = vec![0u8; STAGING_LEN];
    assert_eq!(
        t.submit(qs[2], &[0u8; 40], &mut staging),
        Err(ExecError::ShortCapsule(40))
    );
    let mut gone: Vec<_> = std::iter::from_fn(|| t.take_teardown()).collect();
    gone.sort_by_key(|q| q.index());
    assert_eq!(gone, qs);
    // Dying queues take no more commands; closed, nothing is left.
    assert_eq!(
        t.submit(qs[0], &set_cc(0), &mut staging),
        Err(ExecError::UnknownQueue)
    );
    for q in &qs {
        t.close(*q);
    }
    assert_eq!((t.controllers(), t.queues()), (0, 0));
    // A new connection works, with controller ID 1 again.
    let qs = connected(&mut t, 0, 1);
    let Step::Transfer(tr) = t
        .submit(qs[1], &read(1, 0, 7, keyed(4096)), &mut staging)
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(
        t.complete_transfer(qs[1], tr.tag, false, &staging),
        Err(ExecError::TransferFailed)
    );
    assert_eq!(std::iter::from_fn(|| t.take_teardown()).count(), 2);
    // A staging buffer too small is the transport's mistake, not the host's.
    let mut small = [0u8; 16];
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    assert_eq!(
        t.submit(q, &set_cc(0), &mut small),
        Err(ExecError::StagingTooSmall(16))
    );
}

#[test]
fn keep_alive_expiry_frees_the_controller_and_its_queues() {
    let mut t = target(DISK);
    t.tick(1_000);
    let qs = connected(&mut t, 5000, 1);
    // Commands within each period keep it (traffic based keep-alive, TBKAS).
    t.tick(5_999);
    assert_eq!(t.take_teardown(), None);
    assert_eq!(status(&mut t, qs[1], &read(1, 0, 0, keyed(512))).0, 0);
    t.tick(6_000);
    assert_eq!(t.take_teardown(), None);
    t.tick(10_999);
    assert_eq!(t.take_teardown(), None);
    // A period without a command: the controller goes.
    t.tick(11_000);
    let mut gone: Vec<_> = std::iter::from_fn(|| t.take_teardown()).collect();
    gone.sort_by_key(|q| q.index());
    assert_eq!(gone, qs);
    for q in &qs {
        t.close(*q);
    }
    assert_eq!((t.controllers(), t.queues()), (0, 0));
    // Keep Alive restarts the timer too.
    let qs = connected(&mut t, 5000, 0);
    t.tick(15_000);
    assert_eq!(status(&mut t, qs[0], &sqe(0x18, 4, 0, &[], no_data())).0, 0);
    t.tick(19_999);
    assert_eq!(t.take_teardown(), None);
}

#[test]
fn failures_with_a_location_are_logged_and_have_more() {
    // nvmet_set_error: a failure with an error location goes into the controller's error
    // log and its CQE has More; one without (here Number of Queues 0xffff) is neither.
    let mut t = target(DISK);
    let qs = connected(&mut t, 0, 1);
    assert_eq!(
        status(&mut t, qs[1], &sqe(0x05, 0x77, 1, &[], no_data())).0,
        0x6001
    );
    assert_eq!(
        status(&mut t, qs[0], &sqe(0x09, 3, 0, &[0x07, 0xffff], no_data())).0,
        0x4002
    );
    let mut log = vec![0xffu8; 128];
    let glp = sqe(0x02, 9, 0, &[0x01 | (31 << 16)], keyed(128));
    assert_eq!(run(&mut t, qs[0], &glp, &mut log).unwrap().cqe.status, 0);
    // struct nvme_error_slot: count 1, SQ 1, command 0x77, status (over the phase bit)
    // invalid opcode + DNR, location the opcode, namespace 1; then an empty slot.
    let mut want = [0u8; 64];
    want[0] = 1;
    want[8] = 1;
    want[10] = 0x77;
    want[12..14].copy_from_slice(&(0x4001u16 << 1).to_le_bytes());
    want[24] = 1;
    assert_eq!(log[..64], want);
    assert!(log[64..].iter().all(|&b| b == 0));
    // The SMART log counts it.
    let mut smart = vec![0u8; 512];
    let glp = sqe(0x02, 10, u32::MAX, &[0x02 | (127 << 16)], keyed(512));
    assert_eq!(run(&mut t, qs[0], &glp, &mut smart).unwrap().cqe.status, 0);
    assert_eq!(smart[176], 1);
    // Unconnected queues have no controller to log in: no More.
    let q = t.accept(&cm_req(2, 16, 15)).unwrap().queue;
    assert_eq!(status(&mut t, q, &read(1, 0, 0, keyed(512))).0, 0x4001);
    // The events a new controller has enabled (nvmet_alloc_ctrl: NVMET_AEN_CFG_OPTIONAL).
    assert_eq!(
        status(&mut t, qs[0], &sqe(0x0a, 3, 0, &[0x0b], no_data())),
        (0, 0x900)
    );
}

#[test]
fn get_features_answers_the_five_features_nvmet_runs() {
    // nvmet_execute_get_features: arbitration, power management, temperature threshold,
    // error recovery, interrupt coalescing / vector and write atomicity are `#if 0`.
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 0)[0];
    for fid in [0x01, 0x02, 0x04, 0x05, 0x08, 0x09, 0x0a, 0x84] {
        let s = status(&mut t, q, &sqe(0x0a, 3, 0, &[fid], no_data()));
        assert_eq!(s.0, 0x6002, "feature {fid:#x}");
    }
    assert_eq!(
        status(&mut t, q, &sqe(0x0a, 3, 0, &[0x06], no_data())),
        (0, 1)
    );
    assert_eq!(
        status(&mut t, q, &sqe(0x0a, 3, 0, &[0x07], no_data())),
        (0, 0x7f007f)
    );
}

#[test]
fn queue_info_names_the_controller_subsystem_and_host() {
    let mut t = target(DISK);
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let info = t.queue_info(q).unwrap();
    assert_eq!(
        (info.qid, info.cntlid, info.subsystem, info.hostnqn),
        (0, None, None, None)
    );
    assert_eq!(
        status(&mut t, q, &connect(0, 31, 0, 0xffff, NQN, HOSTNQN)),
        (0, 1)
    );
    let info = t.queue_info(q).unwrap();
    assert_eq!(
        (info.cntlid, info.subsystem, info.hostnqn),
        (Some(1), Some(NQN), Some(HOSTNQN))
    );
    t.close(q);
    assert_eq!(t.queue_info(q), None);
}

#[test]
fn a_port_without_in_capsule_data_refuses_it_and_does_not_advertise_it() {
    // nvmet_rdma_map_sgl_inline: offset + length beyond the port's inline_data_size;
    // nvmet_execute_identify_ctrl: SGLS bit 20 only with in-capsule data, IOCCSZ 4.
    let mut cfg = capture_config();
    cfg.inline_data_size = 0;
    let mut t = nvmeof::Target::new(cfg, vec![nvmeof::RamDisk::new(vec![0u8; DISK], 0)]).unwrap();
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let c = connect(0, 31, 0, 0xffff, NQN, HOSTNQN);
    assert_eq!(status(&mut t, q, &c).0, 0x4016);
    // The same Connect with its data read from the host (keyed SGL) is taken.
    let mut host = connect(0, 31, 0, 0xffff, NQN, HOSTNQN)[64..].to_vec();
    let mut k = sqe(0x7f, 0, 0, &[0, 31], keyed(1024));
    k[4] = 0x01;
    let mut staging = vec![0u8; STAGING_LEN];
    let Step::Transfer(tr) = t.submit(q, &k, &mut staging).unwrap() else {
        panic!()
    };
    do_transfer(&mut t, &tr, &mut staging, &mut host);
    assert_eq!(
        t.complete_transfer(q, tr.tag, true, &staging)
            .unwrap()
            .cqe
            .status,
        0
    );
    assert_eq!(status(&mut t, q, &set_cc(CC_ENABLE)).0, 0);
    let mut id = vec![0u8; 4096];
    let r = run(&mut t, q, &sqe(0x06, 2, 0, &[1], keyed(4096)), &mut id).unwrap();
    assert_eq!(r.cqe.status, 0);
    assert_eq!(id[536..540], [0x05, 0, 0, 0]);
    assert_eq!(id[1792..1796], [4, 0, 0, 0]);
}

/// Review finding: a keyed Dataset Management longer than the staging buffer. Linux
/// `io-cmd-bdev.c` `nvmet_bdev_execute_discard` copies only the (NR + 1) * 16 bytes of ranges
/// (`nvmet_copy_from_sgl`) and answers success, so the target reads only that prefix.
#[test]
fn a_keyed_dsm_reads_only_its_ranges_however_long_the_buffer() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1)[1];
    for len in [8192u32, 65536] {
        // Blocks 0..16 written with 0xa5 (a keyed write, so the thin disk counts them written).
        let w = sqe(0x01, 19, 1, &[0, 0, 15], keyed(8192));
        assert_eq!(run(&mut t, q, &w, &mut [0xa5; 8192]).unwrap().cqe.status, 0);
        // Two ranges (NR = 1): blocks 0..4 and 8..12.
        let dsm = sqe(0x09, 20, 1, &[1, 1 << 2], keyed(len));
        let mut host = vec![0u8; len as usize];
        host[4..8].copy_from_slice(&4u32.to_le_bytes());
        host[20..24].copy_from_slice(&4u32.to_le_bytes());
        host[24..32].copy_from_slice(&8u64.to_le_bytes());
        let mut staging = vec![0u8; STAGING_LEN];
        let Step::Transfer(tr) = t.submit(q, &dsm, &mut staging).unwrap() else {
            panic!("a keyed DSM reads its ranges")
        };
        assert_eq!(tr.dir, nvmeof::Dir::FromHost);
        assert_eq!(tr.local, nvmeof::Local::Buf { len: 32 });
        assert_eq!(tr.remote.len, 32, "a prefix of the host's {len} bytes");
        do_transfer(&mut t, &tr, &mut staging, &mut host);
        let r = t.complete_transfer(q, tr.tag, true, &staging).unwrap();
        assert_eq!(r.cqe.status, 0);
        let d = t.disk(0).unwrap().bytes();
        assert!(d[..2048].iter().all(|&b| b == 0));
        assert!(d[2048..4096].iter().all(|&b| b == 0xa5));
        assert!(d[4096..6144].iter().all(|&b| b == 0));
    }
    // 256 ranges (the spec's largest NR) fill the staging buffer exactly.
    let dsm = sqe(0x09, 21, 1, &[0xff, 1 << 2], keyed(65536));
    let mut staging = vec![0u8; STAGING_LEN];
    let Step::Transfer(tr) = t.submit(q, &dsm, &mut staging).unwrap() else {
        panic!()
    };
    assert_eq!(tr.local, nvmeof::Local::Buf { len: 4096 });
    let r = t.complete_transfer(q, tr.tag, true, &staging).unwrap();
    assert_eq!(r.cqe.status, 0);
    // NR's reserved bits: Linux reads cmd->dsm.nr whole (`nvmet_dsm_len`); with one range of
    // data for 257 ranges the copy fails as there: SGL_INVALID_DATA | DNR (with MORE: logged).
    let mut dsm = sqe(0x09, 22, 1, &[0x100, 1 << 2], Sgl::in_capsule(0, 16));
    dsm.extend([0u8; 16]);
    assert_eq!(status(&mut t, q, &dsm).0, 0x600f);
    // 257 ranges in a long enough keyed buffer do not fit staging: refused as an invalid NR.
    let dsm = sqe(0x09, 23, 1, &[0x100, 1 << 2], keyed(65536));
    assert_eq!(status(&mut t, q, &dsm).0, 0x6002);
}

/// Review finding: with SQ flow control disabled (Connect CATTR bit 2), only the Connect's
/// response carries SQHD 0xffff (Linux 6.1 `fabrics-cmd.c` `nvmet_install_queue`); later
/// responses keep `nvmet_req_init`'s 0, as `core.c` `__nvmet_req_complete` skips
/// `nvmet_update_sq_head`.
#[test]
fn sqhd_is_0xffff_only_in_the_connect_response_without_sq_flow_control() {
    let mut t = target(DISK);
    let q = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let mut c = connect(0, 31, 0, 0xffff, NQN, HOSTNQN);
    c[46] = 1 << 2;
    let mut host = vec![0u8; 64];
    let r = run(&mut t, q, &c, &mut host).unwrap();
    assert_eq!((r.cqe.status, r.cqe.sqhd), (0, 0xffff));
    for _ in 0..3 {
        let r = run(&mut t, q, &set_cc(CC_ENABLE), &mut host).unwrap();
        assert_eq!((r.cqe.status, r.cqe.sqhd), (0, 0));
    }
}

/// Review finding: Identify CNS 06h (I/O command set specific controller) with CSI 0 (NVM).
/// The recorded Linux 6.1 nvmet-rdma session (tests/data/nvmeof_session.txt) answers it with
/// 4096 zero bytes and success (`admin-cmd.c` `nvmet_execute_identify_ctrl_nvm`); another CSI
/// (ZNS, not served) is `nvmet_req_cns_error_complete`'s INVALID_FIELD | DNR at the CNS.
#[test]
fn identify_cns_06h_answers_zeroes_for_nvm_as_linux_nvmet() {
    let mut t = target(DISK);
    let q = connected(&mut t, 0, 1)[0];
    let mut host = vec![0xffu8; 4096];
    let r = run(&mut t, q, &sqe(0x06, 1, 0, &[6], keyed(4096)), &mut host).unwrap();
    assert_eq!(r.cqe.status, 0);
    assert!(host.iter().all(|&b| b == 0));
    assert_eq!(
        status(&mut t, q, &sqe(0x06, 1, 0, &[6, 2 << 24], keyed(4096))).0,
        0x6002
    );
}

/// Review finding: an I/O queue's REQ deeper than the target advertises (CAP.MQES + 1 = 128)
/// is rejected at once with the NVMe/RDMA reject statuses, not given 8001 receives.
#[test]
fn an_io_queue_req_deeper_than_mqes_is_rejected() {
    let mut t = target(DISK);
    assert_eq!(
        t.accept(&cm_req(1, 128, 8000)).unwrap_err(),
        RejStatus::InvalidHsqsize
    );
    assert_eq!(
        t.accept(&cm_req(1, 128, 128)).unwrap_err(),
        RejStatus::InvalidHsqsize
    );
    assert_eq!(
        t.accept(&cm_req(1, 129, 127)).unwrap_err(),
        RejStatus::InvalidHrqsize
    );
    let a = t.accept(&cm_req(1, 128, 127)).unwrap();
    assert_eq!(a.recv_depth, 128);
    assert_eq!(t.queues(), 1);
}

/// Review finding: a queue that never sends a Connect has no keep-alive timer; it is torn down
/// `CONNECT_DEADLINE_MS` after the CM accepted it, through `take_teardown`. A connected
/// queue is not.
#[test]
fn a_queue_that_never_connects_is_torn_down_at_the_deadline() {
    use nvmeof::target::CONNECT_DEADLINE_MS;
    let mut t = target(DISK);
    t.tick(1_000);
    let qs = connected(&mut t, 0, 1);
    let bare = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    t.tick(1_000 + CONNECT_DEADLINE_MS - 1);
    assert_eq!(t.take_teardown(), None);
    t.tick(1_000 + CONNECT_DEADLINE_MS);
    assert_eq!(t.take_teardown(), Some(bare));
    assert_eq!(t.take_teardown(), None);
    t.close(bare);
    assert_eq!((t.queues(), t.controllers()), (qs.len(), 1));
    // Once torn down it takes nothing more.
    t.tick(10 * CONNECT_DEADLINE_MS);
    assert_eq!(t.take_teardown(), None);
}
