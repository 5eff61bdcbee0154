//! Queue-pair edges against the emulated HCA (issue 7): sizes from the application, the
//! transitions' checks and their rollback, WQE layout details the device is strict about,
//! posting in the Error state, and memory the device may still hold after a garbled reply.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::{
    AccessFlags, ConnectOptions, Error, InvalidInput, QpCaps, QpEndpoint, RecvWr, Remote, SendData,
    SendFlags, SendOp, SendWr, WcStatus,
};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mlx5::hal::{Hal, HalError};

const SIG: SendFlags = SendFlags::SIGNALED;
const STATE_RST: u8 = 0;
const STATE_ERR: u8 = 6;

#[test]
fn absurd_wr_counts_are_typed_errors_not_panics() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let before = ctx.commands_sent();
    for (send, recv) in [
        (u32::MAX, 1),
        (1, u32::MAX),
        ((1 << 31) + 1, 1),
        (1, (1 << 31) + 1),
        (1 << 31, 1),
        (1, 1 << 31),
    ] {
        let r = pd.create_qp(
            &cq,
            &cq,
            &QpCaps {
                max_send_wr: send,
                max_recv_wr: recv,
                max_inline_data: 0,
                ..Default::default()
            },
        );
        assert_eq!(
            r.err(),
            Some(Error::Invalid(InvalidInput::QpCaps)),
            "send {send} recv {recv}"
        );
    }
    assert_eq!(ctx.commands_sent(), before, "refused before any command");
}

#[test]
fn a_one_entry_receive_queue_still_fills_a_basic_block() {
    // Linux set_rq_size / rdma-core: the RQ is at least 64 bytes, so the SQ after it is
    // 64-byte aligned (the model refuses anything else).
    let (_sim, ctx) = open();
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut p = pair(&ctx, caps);
    assert_eq!(p.b.caps().max_recv_wr, 4, "4 receives of 16 bytes");
    let m = mr(&p.pd, 4096);
    m.write(0, &pattern(32, 3)).unwrap();
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[m.sge(1024, 64)],
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&[m.sge(0, 32)]),
        flags: SIG,
    }])
    .unwrap();
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(&mut p.cq_b, 1)[0].status, WcStatus::Success);
    let mut got = [0u8; 32];
    m.read(1024, &mut got).unwrap();
    assert_eq!(got.to_vec(), pattern(32, 3));
}

#[test]
fn the_largest_inline_write_is_one_the_device_takes() {
    // A 1024-byte WQE: max inline = 1024 - (ctrl + raddr + atomic) - 4 = 972 (rdma-core
    // mlx5_calc_sq_size), so an inline RDMA WRITE of that size has ds = 63.
    let (_sim, ctx) = open();
    let caps = QpCaps {
        max_inline_data: 950,
        ..Default::default()
    };
    let mut p = pair(&ctx, caps);
    let max = p.a.caps().max_inline_data as usize;
    assert_eq!(max, 972);
    let dst = mr(&p.pd, 4096);
    let data = pattern(max, 9);
    p.a.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::Write {
            remote: Remote {
                addr: dst.addr() + 100,
                rkey: dst.rkey(),
            },
            imm: None,
        },
        data: SendData::Inline(&data),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::Success), "{w:?}");
    let mut got = vec![0u8; max];
    dst.read(100, &mut got).unwrap();
    assert_eq!(got, data);
    // One byte more is refused by the driver.
    let big = vec![0u8; max + 1];
    assert!(matches!(
        p.a.post_send(&[SendWr {
            wr_id: 4,
            op: SendOp::Send { imm: None },
            data: SendData::Inline(&big),
            flags: SIG,
        }]),
        Err(Error::Invalid(InvalidInput::InlineTooLarge { .. }))
    ));
}

#[test]
fn zero_length_receive_sges_are_left_out() {
    let (_sim, ctx) = open();
    let caps = QpCaps {
        max_recv_sge: 3,
        ..Default::default()
    };
    let mut p = pair(&ctx, caps);
    let m = mr(&p.pd, 8192);
    m.write(0, &pattern(100, 7)).unwrap();
    p.b.post_recv(&[RecvWr {
        wr_id: 10,
        sges: &[m.sge(4096, 0), m.sge(5000, 60), m.sge(7000, 40)],
    }])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 11,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&[m.sge(0, 100)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_b, 1);
    assert_eq!((w[0].wr_id, w[0].status), (10, WcStatus::Success), "{w:?}");
    assert_eq!(w[0].byte_len, 100);
    let mut a = [0u8; 60];
    let mut b = [0u8; 40];
    m.read(5000, &mut a).unwrap();
    m.read(7000, &mut b).unwrap();
    let want = pattern(100, 7);
    assert_eq!(&a[..], &want[..60]);
    assert_eq!(&b[..], &want[60..]);
    assert_eq!(wait(&mut p.cq_a, 1)[0].status, WcStatus::Success);
}

#[test]
fn remote_atomics_work_because_atomic_mode_goes_with_rae() {
    // The model answers atomics on a QP without atomic_mode with an Invalid Request NAK.
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    m.write(0, &41u64.to_le_bytes()).unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::FetchAdd {
            remote: Remote {
                addr: m.addr(),
                rkey: m.rkey(),
            },
            add: 1,
        },
        data: SendData::Sges(&[m.sge(64, 8)]),
        flags: SIG,
    }])
    .unwrap();
    let w = wait(&mut p.cq_a, 1);
    assert_eq!(w[0].status, WcStatus::Success, "{w:?}");
    let mut v = [0u8; 8];
    m.read(0, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 42);
}

fn two_qps(
    ctx: &mlx5::Context<TestHal>,
) -> (
    mlx5::ProtectionDomain<TestHal>,
    mlx5::CompletionQueue<TestHal>,
    mlx5::QueuePair<TestHal>,
    mlx5::QueuePair<TestHal>,
) {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let a = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let b = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    (pd, cq, a, b)
}

#[test]
fn bad_connection_parameters_are_refused_before_any_command() {
    let (_sim, ctx) = open();
    let (_pd, _cq, mut a, b) = two_qps(&ctx);
    let good = b.endpoint();
    let o = ConnectOptions::default();
    let before = ctx.commands_sent();
    let cases: [(QpEndpoint, ConnectOptions, InvalidInput); 7] = [
        (QpEndpoint { qpn: 0, ..good }, o, InvalidInput::RemoteQpn(0)),
        (QpEndpoint { qpn: 1, ..good }, o, InvalidInput::RemoteQpn(1)),
        (
            QpEndpoint {
                qpn: 1 << 24,
                ..good
            },
            o,
            InvalidInput::RemoteQpn(1 << 24),
        ),
        (
            QpEndpoint {
                gid: [0; 16],
                ..good
            },
            o,
            InvalidInput::RemoteAddress,
        ),
        (
            QpEndpoint {
                mac: [0; 6],
                ..good
            },
            o,
            InvalidInput::RemoteAddress,
        ),
        (
            good,
            ConnectOptions {
                sgid_index: 200,
                ..o
            },
            InvalidInput::GidIndex,
        ),
        (
            good,
            ConnectOptions {
                max_rd_atomic: 255,
                ..o
            },
            InvalidInput::RdAtomic {
                requested: 255,
                max: 1 << ctx.caps().log_max_ra_req_qp,
            },
        ),
    ];
    for (ep, opts, want) in cases {
        assert_eq!(a.connect(&ep, &opts), Err(Error::Invalid(want)));
        assert_eq!(a.state(), STATE_RST);
    }
    assert_eq!(ctx.commands_sent(), before, "nothing reached the device");
    // The same checks guard the single transitions.
    a.to_init(AccessFlags::ALL).unwrap();
    assert_eq!(
        a.to_rtr(&QpEndpoint { qpn: 0, ..good }, &o),
        Err(Error::Invalid(InvalidInput::RemoteQpn(0)))
    );
    assert_eq!(
        a.to_rtr(
            &good,
            &ConnectOptions {
                max_dest_rd_atomic: 255,
                ..o
            }
        ),
        Err(Error::Invalid(InvalidInput::RdAtomic {
            requested: 255,
            max: 1 << ctx.caps().log_max_ra_res_qp,
        }))
    );
    // A legal one still connects.
    a.to_reset().unwrap();
    a.connect(&good, &o).unwrap();
}

#[test]
fn a_connect_with_the_peers_psn_sends_from_it() {
    // rdma_cm's QPs send from the PSN the peer's CM chose (cm.c `cm_init_qp_rts_attr`): A
    // sends from 0x123456, B expects that; B keeps its own random PSN.
    let (_sim, ctx) = open();
    let (pd, mut cq, mut a, mut b) = two_qps(&ctx);
    let (ea, eb) = (a.endpoint(), b.endpoint());
    let oa = ConnectOptions {
        sq_psn: Some(0x0112_3456),
        flow_label: 0x798d5,
        ..ConnectOptions::default()
    };
    a.connect(&eb, &oa).unwrap();
    let ea = QpEndpoint {
        psn: 0x12_3456,
        ..ea
    };
    b.connect(&ea, &ConnectOptions::default()).unwrap();
    assert_eq!(a.psn(), 0x12_3456, "masked to 24 bits and reported");
    assert_eq!(a.query().unwrap().sq_psn, 0x12_3456);
    assert_eq!(b.query().unwrap().rq_psn, 0x12_3456);
    let m = mr(&pd, 64);
    b.post_recv(&[RecvWr {
        wr_id: 7,
        sges: &[m.sge(0, 64)],
    }])
    .unwrap();
    a.post_send(&[SendWr {
        wr_id: 8,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"psn"),
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
    let wcs = wait(&mut cq, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(b.query().unwrap().rq_psn, 0x12_3457);
}

#[test]
fn a_connect_the_device_refuses_is_rolled_back_to_reset() {
    let (_sim, ctx) = open();
    let (_pd, _cq, mut a, b) = two_qps(&ctx);
    // GID index 5 is inside the table but not programmed: INIT2RTR fails in the device.
    let o = ConnectOptions {
        sgid_index: 5,
        ..ConnectOptions::default()
    };
    let e = a.connect(&b.endpoint(), &o).unwrap_err();
    assert!(matches!(e, Error::Command(_)), "{e:?}");
    assert_eq!(a.state(), STATE_RST, "not left in INIT");
    assert_eq!(a.query_state().unwrap(), STATE_RST);
    // And it connects afterwards.
    a.connect(&b.endpoint(), &ConnectOptions::default())
        .unwrap();
}

#[test]
fn posts_in_the_error_state_complete_with_flush_errors() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    p.a.to_err().unwrap();
    p.b.to_err().unwrap();
    assert_eq!(p.a.state(), STATE_ERR);
    // Sends: the generic list path, the one-SGE path and the bound fast path.
    p.a.post_send(&[
        SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote: r,
                imm: None,
            },
            data: SendData::Sges(&[m.sge(0, 8)]),
            flags: SIG,
        },
        SendWr {
            wr_id: 2,
            op: SendOp::Send { imm: None },
            data: SendData::Inline(b"drain"),
            flags: SIG,
        },
    ])
    .unwrap();
    p.a.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::Read { remote: r },
        data: SendData::Sges(&[m.sge(8, 8)]),
        flags: SIG,
    }])
    .unwrap();
    let bm = p.a.bind_mr(&m).unwrap();
    p.a.post_write(4, bm.sge(16, 8), r, SIG).unwrap();
    let w = wait(&mut p.cq_a, 4);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=4)
            .map(|i| (i, WcStatus::WrFlushErr))
            .collect::<Vec<_>>()
    );
    // Receives: flushed too (the device notices them on its next pass).
    p.b.post_recv(&[
        RecvWr {
            wr_id: 7,
            sges: &[m.sge(0, 64)],
        },
        RecvWr {
            wr_id: 8,
            sges: &[m.sge(64, 64)],
        },
    ])
    .unwrap();
    sim.hca.poll();
    let w = wait(&mut p.cq_b, 2);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(7, WcStatus::WrFlushErr), (8, WcStatus::WrFlushErr)]
    );
    // RESET and INIT still refuse sends.
    p.a.to_reset().unwrap();
    assert!(matches!(
        p.a.post_write(5, bm.sge(0, 8), r, SIG),
        Err(Error::Invalid(InvalidInput::QpState { .. }))
    ));
}

/// The test HAL, garbling the reply of the command rung `n` command doorbells after
/// [`GarbleHal::arm`] (CREATE_QP comes after ALLOC_UAR: the fault switch alone only reaches
/// the next command).
#[derive(Clone)]
struct GarbleHal {
    inner: TestHal,
    countdown: Arc<AtomicUsize>,
}

impl GarbleHal {
    fn arm(&self, n: usize) {
        self.countdown.store(n, Ordering::SeqCst);
    }
}

impl Hal for GarbleHal {
    type Dma = SimDma;
    fn bar0_len(&self) -> usize {
        self.inner.bar0_len()
    }
    fn mmio_read32(&self, offset: usize) -> [u8; 4] {
        self.inner.mmio_read32(offset)
    }
    fn mmio_write32(&self, offset: usize, bytes: [u8; 4]) {
        if offset == mlx5_prm::init_seg::CMD_DBELL {
            let c = self.countdown.load(Ordering::SeqCst);
            if c == 1 {
                self.inner
                    .0
                    .with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
            }
            if c > 0 {
                self.countdown.store(c - 1, Ordering::SeqCst);
            }
        }
        self.inner.mmio_write32(offset, bytes)
    }
    fn mmio_write64(&self, offset: usize, bytes: [u8; 8]) {
        self.inner.mmio_write64(offset, bytes)
    }
    fn mmio_copy_bf(&self, offset: usize, src: &[u8; 64]) {
        self.inner.mmio_copy_bf(offset, src)
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Result<SimDma, HalError> {
        self.inner.dma_alloc(size, align)
    }
    fn now(&self) -> Duration {
        self.inner.now()
    }
    fn relax(&self) {
        self.inner.relax()
    }
    fn function_level_reset(&self) -> Result<(), HalError> {
        self.inner.function_level_reset()
    }
}

#[test]
fn a_garbled_create_qp_reply_quarantines_the_buffers() {
    let sim = SimHal::new();
    let hal = GarbleHal {
        inner: TestHal(sim.clone()),
        countdown: Arc::new(AtomicUsize::new(0)),
    };
    let ctx = mlx5::Context::open(hal.clone(), test_config()).expect("bring-up");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let (q0, _) = ctx.quarantined();
    // ALLOC_UAR, then CREATE_QP.
    hal.arm(2);
    let e = pd.create_qp(&cq, &cq, &QpCaps::default()).err();
    assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x500 }));
    let (q1, _) = ctx.quarantined();
    assert_eq!(q1, q0 + 2, "the QP buffer and its doorbell record");
    assert!(ctx.needs_reset());
}

#[test]
fn a_garbled_destroy_qp_reply_quarantines_the_buffers() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let q = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let (q0, _) = ctx.quarantined();
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    let e = q.destroy().err();
    assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x501 }));
    let (q1, _) = ctx.quarantined();
    assert_eq!(q1, q0 + 2, "the QP buffer and its doorbell record");
    assert!(ctx.needs_reset());
}

#[test]
fn a_failed_list_post_names_the_refused_wr() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let m = mr(&p.pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let write = |wr_id, off| SendWr {
        wr_id,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(std::slice::from_ref(Box::leak(Box::new(m.sge(off, 8))))),
        flags: SIG,
    };
    let doorbells = sim.doorbells();
    // The third WR reaches past the region.
    let wrs = [write(1, 0), write(2, 8), write(3, 4090), write(4, 16)];
    assert_eq!(
        p.a.post_send_list(&wrs),
        Err(mlx5::PostError {
            index: 2,
            error: Error::Invalid(InvalidInput::OutOfRange)
        })
    );
    // post_send reports the same error, without the index.
    assert_eq!(
        p.a.post_send(&wrs),
        Err(Error::Invalid(InvalidInput::OutOfRange))
    );
    // The second carries inline data too large.
    let big = vec![0u8; 4096];
    let inl = SendWr {
        wr_id: 9,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(&big),
        flags: SIG,
    };
    let e =
        p.a.post_send_list(&[write(1, 0), inl, write(3, 0)])
            .unwrap_err();
    assert_eq!(e.index, 1);
    assert!(matches!(
        e.error,
        Error::Invalid(InvalidInput::InlineTooLarge { .. })
    ));
    assert_eq!(
        sim.doorbells(),
        doorbells,
        "nothing of a refused list was posted"
    );
    // More WRs than the queue has room for: the first that does not fit.
    let room = p.a.caps().max_send_wr as usize;
    let many: Vec<_> = (0..room as u64 + 3).map(|i| write(i, 0)).collect();
    let e = p.a.post_send_list(&many).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (room, Error::Invalid(InvalidInput::QueueFull))
    );
    // A good list goes through.
    p.a.post_send_list(&[write(1, 0), write(2, 8)]).unwrap();
    assert_eq!(wait(&mut p.cq_a, 2).len(), 2);

    // Receives: the second one lacks LOCAL_WRITE.
    let ro = p.pd.alloc_mr(4096, AccessFlags::REMOTE_READ).unwrap();
    let ok = [m.sge(0, 64)];
    let bad = [ro.sge(0, 64)];
    let e =
        p.b.post_recv_list(&[
            RecvWr {
                wr_id: 1,
                sges: &ok,
            },
            RecvWr {
                wr_id: 2,
                sges: &bad,
            },
        ])
        .unwrap_err();
    assert_eq!(
        e,
        mlx5::PostError {
            index: 1,
            error: Error::Invalid(InvalidInput::LocalAccess)
        }
    );
    let rroom = p.b.caps().max_recv_wr as usize;
    let recvs: Vec<_> = (0..rroom as u64 + 1)
        .map(|wr_id| RecvWr { wr_id, sges: &ok })
        .collect();
    let e = p.b.post_recv_list(&recvs).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (rroom, Error::Invalid(InvalidInput::QueueFull))
    );
}

#[test]
fn sq_sig_all_signals_every_send() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(64).unwrap();
    let opts = mlx5::QpOptions {
        sq_sig_all: true,
        ..Default::default()
    };
    let mut a = pd
        .create_qp_with(&cq, &cq, &QpCaps::default(), &opts)
        .unwrap();
    let mut b = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let o = ConnectOptions::default();
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &o).unwrap();
    b.connect(&ea, &o).unwrap();
    let m = mr(&pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    // Unsignaled WRs through every path: one-SGE, list, inline, bound fast path.
    let w = |wr_id| SendWr {
        wr_id,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(std::slice::from_ref(Box::leak(Box::new(m.sge(0, 8))))),
        flags: SendFlags::NONE,
    };
    a.post_send(&[w(1)]).unwrap();
    a.post_send(&[w(2), w(3)]).unwrap();
    a.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Inline(b"x"),
        flags: SendFlags::NONE,
    }])
    .unwrap();
    let bm = a.bind_mr(&m).unwrap();
    a.post_write(5, bm.sge(0, 8), r, SendFlags::NONE).unwrap();
    let got = wait(&mut cq, 5);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert!(a.query().unwrap().sq_sig_all);
    // Without the option, unsignaled WRs stay silent.
    b.post_send(&[w(9)]).unwrap();
    let mut wc = [mlx5::WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
}

#[test]
fn query_reports_state_caps_and_what_the_transitions_set() {
    let (_sim, ctx) = open();
    let caps = QpCaps {
        max_send_wr: 10,
        max_recv_wr: 3,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 40,
    };
    let p = pair(&ctx, caps);
    let q = p.a.query().unwrap();
    assert_eq!(q.state, 3, "RTS");
    assert_eq!(q.cap, p.a.caps());
    assert!(q.cap.max_send_wr >= 10 && q.cap.max_recv_wr >= 3);
    assert!(!q.sq_sig_all);
    let o = ConnectOptions::default();
    assert_eq!(q.max_rd_atomic, o.max_rd_atomic as u32);
    assert_eq!(q.max_dest_rd_atomic, o.max_dest_rd_atomic as u32);
    assert_eq!(q.dest_qp_num, p.b.qpn());
    assert_eq!(q.sq_psn, p.a.psn());
    assert_eq!(q.rq_psn, p.b.psn());
    assert_eq!(q.path_mtu, o.mtu as u8);
    assert_eq!((q.retry_cnt, q.rnr_retry), (o.retry_cnt, o.rnr_retry));
    assert_eq!(q.timeout, o.timeout);
    assert_eq!(
        q.access,
        AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC
    );
    // atomic_mode with rae (IB_COMP for the model's plain CMP_SWAP + FETCH_ADD caps), and
    // Linux's ACK request frequency.
    assert_eq!(q.atomic_mode, 1);
    assert_eq!(q.log_ack_req_freq, 8);
}

#[test]
fn rd_atomic_rounds_up_to_a_power_of_two() {
    let (_sim, ctx) = open();
    let (_pd, _cq, mut a, b) = two_qps(&ctx);
    let o = ConnectOptions {
        max_rd_atomic: 3,
        max_dest_rd_atomic: 5,
        ..ConnectOptions::default()
    };
    a.connect(&b.endpoint(), &o).unwrap();
    let q = a.query().unwrap();
    assert_eq!((q.max_rd_atomic, q.max_dest_rd_atomic), (4, 8));
}

#[test]
fn a_destroyed_qps_completions_leave_the_shared_cq() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(64).unwrap();
    let other = ctx.create_cq(64).unwrap();
    let o = ConnectOptions::default();
    let mut a = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let mut c = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let mut d = pd.create_qp(&other, &other, &QpCaps::default()).unwrap();
    let mut e = pd.create_qp(&other, &other, &QpCaps::default()).unwrap();
    let (ea, ec, ed, ee) = (a.endpoint(), c.endpoint(), d.endpoint(), e.endpoint());
    a.connect(&ed, &o).unwrap();
    d.connect(&ea, &o).unwrap();
    c.connect(&ee, &o).unwrap();
    e.connect(&ec, &o).unwrap();
    let m = mr(&pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let w = |wr_id| SendWr {
        wr_id,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(std::slice::from_ref(Box::leak(Box::new(m.sge(0, 8))))),
        flags: SIG,
    };
    // a's completions, then c's, then a's again: interleaved in the CQ.
    a.post_send(&[w(1), w(2)]).unwrap();
    c.post_send(&[w(10)]).unwrap();
    a.post_send(&[w(3)]).unwrap();
    c.post_send(&[w(11)]).unwrap();
    a.destroy().unwrap();
    let got = wait(&mut cq, 2);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    let mut wc = [mlx5::WorkCompletion::default(); 8];
    assert_eq!(
        cq.poll(&mut wc).unwrap(),
        0,
        "no BadCqe left behind: {wc:?}"
    );
    // The CQ keeps working.
    c.post_send(&[w(12)]).unwrap();
    assert_eq!(wait(&mut cq, 1)[0].wr_id, 12);
}

#[test]
fn a_qp_moved_to_reset_leaves_no_completions_behind() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(64).unwrap();
    let other = ctx.create_cq(64).unwrap();
    let o = ConnectOptions::default();
    let mut a = pd.create_qp(&cq, &cq, &QpCaps::default()).unwrap();
    let mut d = pd.create_qp(&other, &other, &QpCaps::default()).unwrap();
    let (ea, ed) = (a.endpoint(), d.endpoint());
    a.connect(&ed, &o).unwrap();
    d.connect(&ea, &o).unwrap();
    let m = mr(&pd, 4096);
    let r = Remote {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let w = |wr_id| SendWr {
        wr_id,
        op: SendOp::Write {
            remote: r,
            imm: None,
        },
        data: SendData::Sges(std::slice::from_ref(Box::leak(Box::new(m.sge(0, 8))))),
        flags: SIG,
    };
    a.post_send(&[w(1), w(2), w(3)]).unwrap();
    // Receives flushed by 2ERR land in the CQ too.
    a.post_recv(&[RecvWr {
        wr_id: 4,
        sges: &[m.sge(0, 8)],
    }])
    .unwrap();
    a.to_err().unwrap();
    a.to_reset().unwrap();
    // Reconnected and used again before anyone polled: the new WQE counters start at 0,
    // as the stale CQEs' did. The peer restarts too: its responder already took a's first
    // PSNs, and an RC connection restarts on both ends (a requester that starts over at the
    // same PSN against a responder that moved on only hears ACKs beyond what it sent, which
    // it ignores, IBTA 9.7.5.1.4 / rxe_comp.c check_psn, until its retries run out).
    d.to_err().unwrap();
    d.to_reset().unwrap();
    d.connect(&ea, &o).unwrap();
    a.connect(&ed, &o).unwrap();
    a.post_send(&[w(77)]).unwrap();
    let got = wait(&mut cq, 1);
    assert_eq!(
        (got[0].wr_id, got[0].status),
        (77, WcStatus::Success),
        "{got:?}"
    );
    let mut wc = [mlx5::WorkCompletion::default(); 8];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "nothing stale: {wc:?}");
}
