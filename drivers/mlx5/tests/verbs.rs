//! Every verb against the emulated HCA: PD, MR, CQ, QP, all opcodes over loopback RC QPs with
//! data verification, and the invalid inputs refused before anything reaches the device.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{
    AccessFlags, Error, InvalidInput, QpCaps, RecvWr, Remote, SendData, SendFlags, SendOp, SendWr,
    WcOpcode, WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

#[test]
fn pd_and_mr_lifecycle() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut m = pd
        .alloc_mr(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .unwrap();
    assert_eq!(m.len(), 8192);
    assert_eq!(
        m.translation().0,
        1,
        "one contiguous buffer = one translation entry"
    );
    assert_ne!(m.lkey(), 0);
    m.write(100, b"hello").unwrap();
    let mut b = [0u8; 5];
    m.read(100, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    assert_eq!(
        m.write(8190, b"xyz"),
        Err(Error::Invalid(InvalidInput::OutOfRange))
    );
    m.dereg().unwrap();
    // Deregistering twice is harmless (rdma-core tests/test_mr.py test_dereg_mr_twice).
    m.dereg().unwrap();
    assert_eq!(m.lkey(), 0);
    drop(pd);
    ctx.close().unwrap();
}

#[test]
fn bad_access_flags_and_lengths_are_refused_before_any_command() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let before = ctx.commands_sent();
    // rdma-core tests/test_mr.py: remote write / remote atomic without local write.
    for a in [
        AccessFlags::REMOTE_WRITE,
        AccessFlags::REMOTE_ATOMIC,
        AccessFlags(0x1000),
    ] {
        assert_eq!(
            pd.alloc_mr(4096, a).err(),
            Some(Error::Invalid(InvalidInput::AccessFlags))
        );
    }
    assert_eq!(
        pd.alloc_mr(0, AccessFlags::ALL).err(),
        Some(Error::Invalid(InvalidInput::ZeroLength))
    );
    let chunks = [mlx5::mr::PhysChunk {
        bus: 0x1000,
        len: 0x1000,
    }];
    // SAFETY: refused before registration, nothing is ever mapped.
    let r = unsafe { pd.reg_phys(&chunks, u64::MAX - 0x10, AccessFlags::ALL) };
    assert_eq!(r.err(), Some(Error::Invalid(InvalidInput::LengthOverflow)));
    assert_eq!(
        ctx.commands_sent(),
        before,
        "no command for refused registrations"
    );
}

#[test]
fn mkeys_are_random_and_not_recycled() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut variants = std::collections::HashSet::new();
    for _ in 0..32 {
        let mut m = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let k = m.lkey();
        assert!(seen.insert(k), "key {k:#x} came back after dereg");
        variants.insert(k & 0xff);
        m.dereg().unwrap();
    }
    assert!(
        variants.len() > 8,
        "variant bytes look random: {variants:?}"
    );
}

#[test]
fn cq_size_beyond_caps_is_refused_before_any_command() {
    let (_sim, ctx) = open();
    let max = (1u32 << ctx.caps().log_max_cq_sz) - 1;
    let before = ctx.commands_sent();
    match ctx.create_cq(max + 1) {
        Err(Error::Invalid(InvalidInput::CqTooLarge { requested, max: m })) => {
            assert_eq!((requested, m), (max + 1, max));
        }
        other => panic!("expected CqTooLarge, got {:?}", other.err()),
    }
    assert_eq!(
        ctx.create_cq(0).err(),
        Some(Error::Invalid(InvalidInput::ZeroEntries))
    );
    assert_eq!(ctx.commands_sent(), before);
    let cq = ctx.create_cq(100).unwrap();
    assert!(cq.capacity() >= 100);
}

#[test]
fn qp_states_and_random_psn() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let mut a = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let b = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    // Random 24-bit PSNs: two alike by chance 1 in 2^24, three alike 1 in 2^48 (~4e-15).
    let c = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    assert!(
        !(a.psn() == b.psn() && b.psn() == c.psn()),
        "initial PSNs are random: {:#x} {:#x} {:#x}",
        a.psn(),
        b.psn(),
        c.psn()
    );
    drop(c);
    assert_eq!(a.query_state().unwrap(), 0);
    a.to_init(AccessFlags::ALL).unwrap();
    assert_eq!(a.query_state().unwrap(), 1);
    a.to_rtr(&b.endpoint(), &Default::default()).unwrap();
    assert_eq!(a.query_state().unwrap(), 2);
    a.to_rts(&Default::default()).unwrap();
    assert_eq!(a.query_state().unwrap(), 3);
    a.to_err().unwrap();
    assert_eq!(a.query_state().unwrap(), 6);
    a.to_reset().unwrap();
    assert_eq!(a.query_state().unwrap(), 0);
    // A transition out of order is refused locally.
    assert_eq!(
        a.to_rts(&Default::default()).err(),
        Some(Error::Invalid(InvalidInput::QpState { state: 0 }))
    );
}

#[test]
fn send_and_send_imm_loopback() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let src = mr(&p.pd, 4096);
    let dst = mr(&p.pd, 4096);
    let data = pattern(1000, 7);
    src.write(0, &data).unwrap();
    p.b.post_recv(&[
        RecvWr {
            wr_id: 11,
            sges: &[dst.sge(0, 2048)],
        },
        RecvWr {
            wr_id: 12,
            sges: &[dst.sge(2048, 2048)],
        },
    ])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&[src.sge(0, 1000)]),
        flags: SIG,
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Send {
            imm: Some(0xdead_beef),
        },
        data: SendData::Sges(&[src.sge(0, 100)]),
        flags: SIG,
    }])
    .unwrap();
    let wa = wait(&mut p.cq_a, 2);
    let wb = wait(&mut p.cq_b, 2);
    assert_eq!(wa.len(), 2, "{wa:?}");
    assert_eq!(wb.len(), 2, "{wb:?}");
    assert!(wa
        .iter()
        .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    assert_eq!((wa[0].wr_id, wa[1].wr_id), (1, 2));
    assert_eq!(
        (wb[0].wr_id, wb[0].byte_len, wb[0].imm, wb[0].opcode),
        (11, 1000, None, WcOpcode::Recv)
    );
    assert_eq!(
        (wb[1].wr_id, wb[1].byte_len, wb[1].imm),
        (12, 100, Some(0xdead_beef))
    );
    assert_eq!(wb[0].qp_num, p.b.qpn());
    let mut got = vec![0u8; 1000];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    dst.read(2048, &mut got[..100]).unwrap();
    assert_eq!(&got[..100], &data[..100]);
}

#[test]
fn rdma_write_write_imm_and_read() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let local = mr(&p.pd, 8192);
    let remote = mr(&p.pd, 8192);
    let data = pattern(3000, 3);
    local.write(0, &data).unwrap();
    let r = Remote {
        addr: remote.addr() + 100,
        rkey: remote.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 5,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&[local.sge(0, 3000)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].wr_id),
        (WcStatus::Success, WcOpcode::RdmaWrite, 5)
    );
    let mut got = vec![0u8; 3000];
    remote.read(100, &mut got).unwrap();
    assert_eq!(got, data);

    // WRITE with immediate consumes a receive on the responder.
    p.b.post_recv(&[RecvWr {
        wr_id: 77,
        sges: &[],
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 6,
        op: SendOp::Write {
            remote: r,
            imm: Some(42),
        },
        data: SendData::Sges(&[local.sge(0, 64)]),
        flags: SIG,
    }])
    .unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    let wb = wait(&mut p.cq_b, 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].opcode, wb[0].imm, wb[0].byte_len),
        (77, WcOpcode::RecvRdmaWithImm, Some(42), 64)
    );

    // READ back into another part of the local region.
    p.a.post_send(&[SendWr {
        wr_id: 7,
        op: SendOp::Read { remote: r },
        data: SendData::Sges(&[local.sge(4096, 3000)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 3000)
    );
    local.read(4096, &mut got).unwrap();
    assert_eq!(&got[..64], &data[..64]);
    assert_eq!(&got[64..], &data[64..]);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let local = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    // Host-endian 8-byte words (the driver asks for host-endian atomics when the device
    // supports it, Linux main.c handle_hca_cap_atomic).
    remote.write(0, &100u64.to_ne_bytes()).unwrap();
    let r = Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    p.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::FetchAdd { remote: r, add: 5 },
        data: SendData::Sges(&[local.sge(0, 8)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(
        (w[0].status, w[0].opcode),
        (WcStatus::Success, WcOpcode::FetchAdd),
        "{w:?}"
    );
    let mut b = [0u8; 8];
    local.read(0, &mut b).unwrap();
    let old = u64::from_ne_bytes(b);
    remote.read(0, &mut b).unwrap();
    let new = u64::from_ne_bytes(b);
    assert_eq!((old, new), (100, 105));
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::CompareSwap {
            remote: r,
            compare: 105,
            swap: 7,
        },
        data: SendData::Sges(&[local.sge(8, 8)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(
        (w[0].status, w[0].opcode),
        (WcStatus::Success, WcOpcode::CompSwap)
    );
    local.read(8, &mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 105);
    remote.read(0, &mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 7);
    // A failing compare leaves the target alone.
    p.a.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::CompareSwap {
            remote: r,
            compare: 1,
            swap: 9,
        },
        data: SendData::Sges(&[local.sge(16, 8)]),
        flags: SIG,
    }])
    .unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    remote.read(0, &mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 7);
}

#[test]
fn inline_unsignaled_fence_and_batches_ring_one_doorbell() {
    let (sim, ctx) = open();
    let mut p = pair(
        &ctx,
        QpCaps {
            max_inline_data: 128,
            max_send_sge: 2,
            ..Default::default()
        },
    );
    let remote = mr(&p.pd, 4096);
    let local = mr(&p.pd, 4096);
    local.write(0, &pattern(256, 9)).unwrap();
    let r = |off| Remote {
        addr: remote.addr() + off,
        rkey: remote.rkey(),
    };
    let msg = b"inline payload, no lkey needed";
    let wrs = [
        SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote: r(0),
                imm: None,
            },
            data: SendData::Inline(msg),
            flags: SendFlags::NONE,
        },
        SendWr {
            wr_id: 2,
            op: SendOp::Write {
                remote: r(512),
                imm: None,
            },
            data: SendData::Sges(&[local.sge(0, 100), local.sge(100, 156)]),
            flags: SendFlags::NONE,
        },
        SendWr {
            wr_id: 3,
            op: SendOp::Read { remote: r(0) },
            data: SendData::Sges(&[local.sge(1024, 32)]),
            flags: SIG,
        },
        SendWr {
            wr_id: 4,
            op: SendOp::Write {
                remote: r(2048),
                imm: None,
            },
            data: SendData::Inline(b"after the fence"),
            flags: SIG | SendFlags::FENCE,
        },
    ];
    let db_before = {
        let s = sim.stats.lock().unwrap();
        s.writes64 + s.bf_copies
    };
    p.a.post_send(&wrs).unwrap();
    let db_after = {
        let s = sim.stats.lock().unwrap();
        s.writes64 + s.bf_copies
    };
    assert_eq!(db_after - db_before, 1, "one doorbell for a batch of four");
    let w = wait(&mut p.cq_a, 2);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::Success), (4, WcStatus::Success)]
    );
    let mut got = vec![0u8; msg.len()];
    remote.read(0, &mut got).unwrap();
    assert_eq!(&got, msg);
    local.read(1024, &mut got).unwrap();
    assert_eq!(
        &got[..],
        &msg[..],
        "the READ saw the inline WRITE before it"
    );
    let mut g2 = vec![0u8; 256];
    remote.read(512, &mut g2).unwrap();
    assert_eq!(g2, pattern(256, 9));
}

#[test]
fn invalid_work_requests_are_refused_before_the_doorbell() {
    let (sim, ctx) = open();
    let mut p = pair(
        &ctx,
        QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_inline_data: 32,
            ..Default::default()
        },
    );
    let m = mr(&p.pd, 4096);
    let ro = p.pd.alloc_mr(4096, AccessFlags::REMOTE_READ).unwrap();
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let doorbells = || {
        let s = sim.stats.lock().unwrap();
        s.writes64 + s.bf_copies
    };
    let before = (doorbells(), ctx.commands_sent());
    let send = |data| SendWr {
        wr_id: 0,
        op: SendOp::Send { imm: None },
        data,
        flags: SIG,
    };
    let two = [m.sge(0, 8), m.sge(8, 8)];
    assert!(matches!(
        p.a.post_send(&[send(SendData::Sges(&two))]),
        Err(Error::Invalid(InvalidInput::TooManySge { .. }))
    ));
    let big = [0u8; 200];
    assert!(matches!(
        p.a.post_send(&[send(SendData::Inline(&big))]),
        Err(Error::Invalid(InvalidInput::InlineTooLarge { .. }))
    ));
    let far = [m.sge(4000, 200)];
    assert_eq!(
        p.a.post_send(&[send(SendData::Sges(&far))]).err(),
        Some(Error::Invalid(InvalidInput::OutOfRange))
    );
    // RDMA READ into a region without local write.
    let rd = SendWr {
        wr_id: 0,
        op: SendOp::Read { remote: r },
        data: SendData::Sges(&[ro.sge(0, 8)]),
        flags: SIG,
    };
    assert_eq!(
        p.a.post_send(&[rd]).err(),
        Some(Error::Invalid(InvalidInput::LocalAccess))
    );
    assert_eq!(
        p.b.post_recv(&[RecvWr {
            wr_id: 0,
            sges: &[ro.sge(0, 8)]
        }])
        .err(),
        Some(Error::Invalid(InvalidInput::LocalAccess))
    );
    // Atomics need exactly one 8-byte local buffer.
    let fa = SendWr {
        wr_id: 0,
        op: SendOp::FetchAdd { remote: r, add: 1 },
        data: SendData::Sges(&[m.sge(0, 4)]),
        flags: SIG,
    };
    assert_eq!(
        p.a.post_send(&[fa]).err(),
        Some(Error::Invalid(InvalidInput::AtomicAlignment))
    );
    // Queue overflow (rdma-core tests: post more than max_send_wr).
    let one = [m.sge(0, 8)];
    let w = send(SendData::Sges(&one));
    let cap = p.a.caps().max_send_wr as usize;
    let many = vec![w; cap + 1];
    assert_eq!(
        p.a.post_send(&many).err(),
        Some(Error::Invalid(InvalidInput::QueueFull))
    );
    let rcap = p.b.caps().max_recv_wr as usize;
    let recvs = vec![
        RecvWr {
            wr_id: 0,
            sges: &[]
        };
        rcap + 1
    ];
    assert_eq!(
        p.b.post_recv(&recvs).err(),
        Some(Error::Invalid(InvalidInput::QueueFull))
    );
    // Raw layer: an lkey that is no MR of this context.
    let bad = [mlx5::qp::RawSge {
        addr: m.addr(),
        len: 8,
        lkey: m.lkey() ^ 0xff00,
    }];
    let raw = mlx5::RawSendWr {
        wr_id: 0,
        op: SendOp::Send { imm: None },
        data: mlx5::RawData::Sges(&bad),
        flags: SIG,
    };
    // SAFETY: refused before anything is written.
    let e = unsafe { p.a.post_send_raw(&[raw]) };
    assert!(matches!(e, Err(Error::Invalid(InvalidInput::BadLkey(_)))));
    assert_eq!(
        (doorbells(), ctx.commands_sent()),
        before,
        "nothing reached the device"
    );
}

#[test]
fn post_in_reset_or_init_is_refused() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mut q = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let m = mr(&pd, 64);
    let w = SendWr {
        wr_id: 0,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&[m.sge(0, 8)]),
        flags: SIG,
    };
    assert_eq!(
        q.post_send(&[w]).err(),
        Some(Error::Invalid(InvalidInput::QpState { state: 0 }))
    );
    assert_eq!(
        q.post_recv(&[RecvWr {
            wr_id: 0,
            sges: &[m.sge(0, 8)]
        }])
        .err(),
        Some(Error::Invalid(InvalidInput::QpState { state: 0 }))
    );
    q.to_init(AccessFlags::ALL).unwrap();
    assert_eq!(
        q.post_send(&[w]).err(),
        Some(Error::Invalid(InvalidInput::QpState { state: 1 }))
    );
    q.post_recv(&[RecvWr {
        wr_id: 0,
        sges: &[m.sge(0, 8)],
    }])
    .unwrap();
}

#[test]
fn bad_rkey_gives_a_remote_access_error_completion() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey() ^ 0x5a00,
    };
    p.a.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(&[m.sge(0, 16)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].wr_id, w[0].status),
        (9, WcStatus::RemAccessErr),
        "{w:?}"
    );
}

#[test]
fn misaligned_atomic_is_refused_before_the_doorbell() {
    // The responder would answer an unaligned atomic with an Invalid Request NAK (the
    // model does: sim/mlx5/tests/dp_loopback.rs misaligned_atomic_is_an_invalid_request);
    // the driver refuses it before anything reaches the device, as
    // InvalidInput::AtomicAlignment promises (issue 7).
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    let before = sim.doorbells();
    for off in [1, 3, 4] {
        let r = Remote {
            addr: m.addr() + off,
            rkey: m.rkey(),
        };
        for op in [
            SendOp::FetchAdd { remote: r, add: 1 },
            SendOp::CompareSwap {
                remote: r,
                compare: 0,
                swap: 1,
            },
        ] {
            let e = p.a.post_send(&[SendWr {
                wr_id: 4,
                op,
                data: SendData::Sges(&[m.sge(64, 8)]),
                flags: SIG,
            }]);
            assert_eq!(e, Err(Error::Invalid(InvalidInput::AtomicAlignment)));
        }
    }
    assert_eq!(sim.doorbells(), before, "nothing rang");
    // Aligned: executes.
    p.a.post_send(&[SendWr {
        wr_id: 5,
        op: SendOp::FetchAdd {
            remote: Remote {
                addr: m.addr() + 8,
                rkey: m.rkey(),
            },
            add: 1,
        },
        data: SendData::Sges(&[m.sge(64, 8)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::Success), "{w:?}");
}

#[test]
fn error_state_flushes_and_reset_reconnects() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    p.b.post_recv(&[
        RecvWr {
            wr_id: 1,
            sges: &[m.sge(0, 64)],
        },
        RecvWr {
            wr_id: 2,
            sges: &[m.sge(64, 64)],
        },
    ])
    .unwrap();
    p.b.to_err().unwrap();
    let w = wait(&mut p.cq_b, 2);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    p.b.to_reset().unwrap();
    let ea = p.a.endpoint();
    p.b.connect(&ea, &Default::default()).unwrap();
    // a is still connected to b's QPN; b's new PSN is unchanged, so traffic flows again.
    p.b.post_recv(&[RecvWr {
        wr_id: 3,
        sges: &[m.sge(128, 64)],
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"again"),
        flags: SIG,
    }])
    .unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    let w = wait(&mut p.cq_b, 1);
    assert_eq!((w[0].wr_id, w[0].byte_len), (3, 5));
}

#[test]
fn mr_stays_alive_while_a_wr_references_it() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let mut dst = mr(&p.pd, 4096);
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[dst.sge(0, 64)],
    }])
    .unwrap();
    assert_eq!(
        dst.dereg(),
        Err(Error::Busy),
        "posted receive still references the region"
    );
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"x"),
        flags: SIG,
    }])
    .unwrap();
    wait(&mut p.cq_a, 1);
    wait(&mut p.cq_b, 1);
    // The completion was polled; the next post (or this one) releases the reference.
    p.b.post_recv(&[]).unwrap();
    dst.dereg().unwrap();
}

#[test]
fn gids() {
    let (_sim, ctx) = open();
    let (gid, mac, ver) = ctx.query_gid(0).unwrap();
    assert_eq!(gid, mlx5::hca::link_local_gid(ctx.mac()));
    assert_eq!(mac, ctx.mac());
    assert_eq!(ver as u32, mlx5::hca::ROCE_VERSION_2);
    let v4 = mlx5::hca::ipv4_mapped_gid([192, 168, 7, 9]);
    ctx.set_gid(1, v4).unwrap();
    assert_eq!(ctx.query_gid(1).unwrap().0, v4);
}

/// A node's IPv4 identity: `add_ipv4_gid` programs the IPv4-mapped RoCE v2 GID once (the same
/// address again reuses its entry), refuses addresses that cannot be one, and two HCAs joined
/// by real RoCEv2 frames connect and move data over those GIDs, each endpoint carrying GID,
/// QPN, PSN and MAC.
#[test]
fn ipv4_identity_gids_connect_two_hcas() {
    let (sa, sb) = SimHal::pair();
    let ca = mlx5::Context::open(TestHal(sa.clone()), test_config()).expect("bring-up a");
    let cb = mlx5::Context::open(TestHal(sb.clone()), test_config()).expect("bring-up b");
    let ia = ca.add_ipv4_gid([10, 0, 0, 1]).unwrap();
    let ib = cb.add_ipv4_gid([10, 0, 0, 2]).unwrap();
    assert_eq!(
        (ia, ib),
        (1, 1),
        "the first free entry after the default GID"
    );
    assert_eq!(ca.add_ipv4_gid([10, 0, 0, 1]).unwrap(), 1, "reused");
    assert_eq!(ca.add_ipv4_gid([10, 0, 0, 7]).unwrap(), 2);
    let v4 = mlx5::hca::ipv4_mapped_gid([10, 0, 0, 1]);
    let (g, mac, ver) = ca.query_gid(1).unwrap();
    assert_eq!(
        (g, mac, ver as u32),
        (v4, ca.mac(), mlx5::hca::ROCE_VERSION_2)
    );
    for bad in [[0, 0, 0, 0], [224, 0, 0, 1], [255, 255, 255, 255]] {
        assert!(matches!(
            ca.add_ipv4_gid(bad),
            Err(Error::Invalid(InvalidInput::BadIpv4(_)))
        ));
    }

    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (mut qa_cq, mut qb_cq) = (ca.create_cq(16).unwrap(), cb.create_cq(16).unwrap());
    let mut qa = pa.create_qp(&qa_cq, &qa_cq, &QpCaps::default()).unwrap();
    let mut qb = pb.create_qp(&qb_cq, &qb_cq, &QpCaps::default()).unwrap();
    let ea = mlx5::QpEndpoint {
        gid: v4,
        ..qa.endpoint()
    };
    let eb = mlx5::QpEndpoint {
        gid: mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]),
        ..qb.endpoint()
    };
    assert_eq!((ea.mac, eb.mac), (ca.mac(), cb.mac()));
    let oa = mlx5::ConnectOptions {
        sgid_index: ia as u8,
        ..mlx5::ConnectOptions::default()
    };
    let ob = mlx5::ConnectOptions {
        sgid_index: ib as u8,
        ..mlx5::ConnectOptions::default()
    };
    qa.connect(&eb, &oa).unwrap();
    qb.connect(&ea, &ob).unwrap();
    let src = mr(&pa, 16384);
    let dst = mr(&pb, 16384);
    let data = pattern(10_000, 5);
    src.write(0, &data).unwrap();
    let remote = Remote {
        addr: dst.addr(),
        rkey: dst.rkey(),
    };
    qa.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::Write { remote, imm: None },
        data: SendData::Sges(&[src.sge(0, 10_000)]),
        flags: SIG,
    }])
    .unwrap();
    let wc = wait(&mut qa_cq, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::Success));
    let mut got = vec![0u8; 10_000];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // It went over the wire as RoCEv2 frames, which B received.
    let rx = sb.with_hca(|h| {
        h.port()
            .counters()
            .get(mlx5_sim::roce::counters::Counter::RxRoceUnicastFrames)
    });
    assert!(rx >= 3, "{rx} frames");
    let _ = &mut qb_cq;
}

#[test]
fn completion_events_only_for_armed_cqs() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let w = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Inline(b"x"),
        flags: SIG,
    };
    p.a.post_send(&[w]).unwrap();
    assert_eq!(wait(&mut p.cq_a, 1).len(), 1);
    ctx.poll_events().unwrap();
    let ev = ctx.take_events();
    assert!(
        !ev.iter()
            .any(|e| matches!(e, mlx5::Event::Completion { .. })),
        "unarmed CQ raised {ev:?}"
    );
    p.cq_a.arm(false).unwrap();
    p.a.post_send(&[w]).unwrap();
    assert_eq!(wait(&mut p.cq_a, 1).len(), 1);
    ctx.poll_events().unwrap();
    let ev = ctx.take_events();
    assert!(
        ev.contains(&mlx5::Event::Completion { cqn: p.cq_a.cqn() }),
        "armed CQ event missing: {ev:?}"
    );
}

/// A signaled RDMA WRITE of `sge` to `r`.
fn write_wr<'a>(wr_id: u64, sge: &'a [mlx5::Sge<'a, TestHal>], r: Remote) -> SendWr<'a, TestHal> {
    SendWr {
        wr_id,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(sge),
        flags: SIG,
    }
}

#[test]
fn generic_posts_hold_each_region_until_its_last_wr_completed() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let mut a = mr(&p.pd, 4096);
    let mut b = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    let r = Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    let (sa, sb) = ([a.sge(0, 8)], [b.sge(0, 8)]);
    // Two WRs on `b` (the second one on the path that only compares the region with the
    // previous post's); only the first completion is polled.
    p.a.post_send(&[write_wr(1, &sb, r)]).unwrap();
    p.a.post_send(&[write_wr(2, &sb, r)]).unwrap();
    let mut one = [mlx5::WorkCompletion::default(); 1];
    assert_eq!(p.cq_a.poll(&mut one).unwrap(), 1);
    assert_eq!(one[0].wr_id, 1);
    // A post on `a` sweeps: `b` is still named by WR 2, `a` by this one.
    p.a.post_send(&[write_wr(3, &sa, r)]).unwrap();
    assert_eq!(b.dereg(), Err(Error::Busy), "WR 2 is outstanding");
    assert_eq!(a.dereg(), Err(Error::Busy), "WR 3 is outstanding");
    let w = wait(&mut p.cq_a, 2);
    assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2, 3]);
    p.a.release_completed();
    b.dereg().unwrap();
    a.dereg().unwrap();
}

#[test]
fn a_region_of_another_context_is_refused_after_fast_posts_too() {
    let (_sim, ctx) = open();
    let (_sim2, ctx2) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let local = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    let pd2 = ctx2.alloc_pd().unwrap();
    let foreign = mr(&pd2, 4096);
    let r = Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    let (sl, sf) = ([local.sge(0, 8)], [foreign.sge(0, 8)]);
    p.a.post_send(&[write_wr(1, &sl, r)]).unwrap();
    p.a.post_send(&[write_wr(2, &sl, r)]).unwrap();
    assert_eq!(
        p.a.post_send(&[write_wr(3, &sf, r)]).err(),
        Some(Error::Invalid(InvalidInput::ForeignObject))
    );
    p.a.post_send(&[write_wr(4, &sl, r)]).unwrap();
    let w = wait(&mut p.cq_a, 3);
    assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 4]);
}
