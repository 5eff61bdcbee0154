//! UMR against the model: a driver-owned UMR QP (`qpc.fre`, connected to itself) enables,
//! loads (inline and by pointer, at translation offsets), changes and revokes `umr_en` keys
//! with one WQE and one CQE each, and the model refuses every malformed or forbidden UMR
//! with an error CQE, leaving the key as it was.

#[allow(dead_code)]
mod common;
mod umr_common;

use common::*;
use mlx5::umr::{flags, mkey_mask as mask, MkeySeg, Umr, INLINE_MAX_MTT, XLT_CHUNK_MTT};
use mlx5::{AccessFlags, DmaBuffer, Error, Hal, QpCaps, WcStatus};
use mlx5_prm::mkey::MTT_PRESENT;
use mlx5_sim::datapath::umr::umr_vendor;
use mlx5_sim::objects::mr::{Access as SimAccess, MrFault};
use umr_common::{enable_seg, ENABLE};

/// `n` 4 KiB pages of `buf`, in reverse order, as MTT entries.
fn pages_rev(buf_bus: u64, n: u64) -> Vec<u64> {
    (0..n)
        .rev()
        .map(|i| (buf_bus + i * 4096) | MTT_PRESENT)
        .collect()
}

fn umr_err(r: mlx5::Result<()>) -> (WcStatus, u8) {
    match r {
        Err(Error::Umr { status, vendor }) => (status, vendor),
        other => panic!("expected a UMR error CQE, got {other:?}"),
    }
}

#[test]
fn umr_enables_a_free_key_and_revokes_it_under_traffic() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    let buf = hal.dma_alloc(4 * 4096, 4096).expect("buffer");
    let key = p.pd.alloc_umr_mkey(INLINE_MAX_MTT as u32).expect("umr key");
    // Free: unusable.
    let before = ctx.commands_sent();
    let iova = 0x5000_0000_0800;
    let mtt = pages_rev(buf.bus_addr(), 4);
    let variant = (key as u8).wrapping_add(7);
    ctx.post_umr(&Umr {
        key,
        check: flags::CHECK_NOT_FREE,
        mask: ENABLE,
        seg: enable_seg(p.pd.pdn(), variant, iova, 3 * 4096),
        mtt: &mtt,
        mtt_offset: 0,
    })
    .expect("enable");
    // The first UMR created the UMR QP (commands); count only what the next one costs.
    let new_key = (key & !0xff) | variant as u32;
    let k2 =
        p.pd.alloc_umr_mkey(INLINE_MAX_MTT as u32)
            .expect("second key");
    let c0 = ctx.commands_sent();
    ctx.post_umr(&Umr {
        key: k2,
        check: flags::CHECK_NOT_FREE,
        mask: ENABLE,
        seg: enable_seg(p.pd.pdn(), k2 as u8, 0x1000, 4096),
        mtt: &pages_rev(buf.bus_addr(), 1),
        mtt_offset: 0,
    })
    .expect("enable second");
    assert_eq!(ctx.commands_sent(), c0, "a UMR sends no firmware command");
    assert!(ctx.commands_sent() > before);

    // The old variant is dead; the new key translates iova 0x800 into the 4th page (reversed).
    sim.with_hca(|h| {
        assert_eq!(
            h.mkeys()
                .translate(key, iova, 16, SimAccess::REMOTE_WRITE, p.pd.pdn()),
            Err(MrFault::VariantMismatch)
        );
        let pieces = h
            .mkeys()
            .translate(
                new_key,
                iova + 0x800 - 0x10,
                0x20,
                SimAccess::REMOTE_WRITE,
                p.pd.pdn(),
            )
            .expect("translates");
        assert_eq!(
            pieces,
            vec![
                (buf.bus_addr() + 3 * 4096 + 0xff0, 0x10),
                (buf.bus_addr() + 2 * 4096, 0x10)
            ]
        );
        // One byte past the end.
        assert_eq!(
            h.mkeys().translate(
                new_key,
                iova + 3 * 4096,
                1,
                SimAccess::REMOTE_WRITE,
                p.pd.pdn()
            ),
            Err(MrFault::OutOfBounds)
        );
    });

    // RDMA WRITE from the peer lands through the UMR-made translation.
    let src = mr(&p.pd, 64);
    let data = pattern(64, 3);
    src.write(0, &data).expect("fill");
    assert_eq!(write_to(&mut p, &src, 64, iova, new_key), WcStatus::Success);
    let mut got = vec![0u8; 64];
    sim.with_hca(|h| h.memory().read(buf.bus_addr() + 3 * 4096 + 0x800, &mut got))
        .expect("read");
    assert_eq!(got, data);

    // Revoke (Linux `mlx5r_umr_revoke_mr`: FREE | PD, free = 1): the peer's old rkey now
    // gets REM_ACCESS_ERR.
    ctx.post_umr(&Umr {
        key: new_key,
        check: 0,
        mask: mask::FREE | mask::PD,
        seg: MkeySeg {
            free: true,
            pd: p.pd.pdn(),
            variant,
            ..MkeySeg::default()
        },
        mtt: &[],
        mtt_offset: 0,
    })
    .expect("revoke");
    let mut p2 = pair(&ctx, QpCaps::default());
    let src2 = mr(&p2.pd, 64);
    assert_eq!(
        write_to(&mut p2, &src2, 64, iova, new_key),
        WcStatus::RemAccessErr
    );
    p.pd.destroy_umr_mkey(k2).expect("destroy");
}

#[test]
fn umr_loads_long_translations_by_pointer_at_offsets() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    // Three pieces through the staging region: 8192 + 8192 + 3616 entries.
    let n = 2 * XLT_CHUNK_MTT as u64 + 3616;
    let buf = hal.dma_alloc((n * 4096) as usize, 4096).expect("buffer");
    let key = pd.alloc_umr_mkey(n as u32).expect("umr key");
    let mtt = pages_rev(buf.bus_addr(), n);
    let iova = 0x7000_0000_0000;
    ctx.post_umr(&Umr {
        key,
        check: flags::CHECK_NOT_FREE,
        mask: ENABLE,
        seg: enable_seg(pd.pdn(), key as u8, iova, n * 4096),
        mtt: &mtt,
        mtt_offset: 0,
    })
    .expect("enable with a long translation");
    sim.with_hca(|h| {
        for i in [0, 1, 8191, 8192, 16384, n - 1] {
            let got = h
                .mkeys()
                .translate(key, iova + i * 4096, 4096, SimAccess::LOCAL_READ, pd.pdn())
                .expect("page translates");
            assert_eq!(
                got,
                vec![(buf.bus_addr() + (n - 1 - i) * 4096, 4096)],
                "page {i}"
            );
        }
    });
    // Rewrite entries 20..24 only (translation offset 10 octowords), key kept enabled:
    // `CHECK_FREE` ("fail if free") and no mask bits.
    let fresh = hal.dma_alloc(4 * 4096, 4096).expect("more");
    let four: Vec<u64> = (0..4)
        .map(|i| (fresh.bus_addr() + i * 4096) | MTT_PRESENT)
        .collect();
    ctx.post_umr(&Umr {
        key,
        check: flags::CHECK_FREE,
        mask: 0,
        seg: MkeySeg::default(),
        mtt: &four,
        mtt_offset: 20,
    })
    .expect("partial update");
    sim.with_hca(|h| {
        let got = h
            .mkeys()
            .translate(
                key,
                iova + 19 * 4096,
                3 * 4096,
                SimAccess::LOCAL_READ,
                pd.pdn(),
            )
            .expect("translates");
        assert_eq!(
            got,
            vec![
                (buf.bus_addr() + (n - 20) * 4096, 4096),
                (fresh.bus_addr(), 2 * 4096)
            ]
        );
    });
    pd.destroy_umr_mkey(key).expect("destroy");
}

#[test]
fn umr_errors_complete_with_error_cqes_and_leave_the_key() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    let buf = hal.dma_alloc(8 * 4096, 4096).expect("buffer");
    let key = pd.alloc_umr_mkey(4).expect("umr key");
    let mtt = pages_rev(buf.bus_addr(), 4);
    let ok = Umr {
        key,
        check: flags::CHECK_NOT_FREE,
        mask: ENABLE,
        seg: enable_seg(pd.pdn(), key as u8, 0x1000, 4 * 4096),
        mtt: &mtt,
        mtt_offset: 0,
    };
    let prot = WcStatus::LocProtErr;
    // A key created without umr_en (an ordinary MR).
    let plain = mr(&pd, 4096);
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            key: plain.lkey(),
            ..ok
        })),
        (prot, umr_vendor::NOT_UMR_EN)
    );
    // Wrong variant.
    assert_eq!(
        umr_err(ctx.post_umr(&Umr { key: key ^ 1, ..ok })),
        (prot, umr_vendor::BAD_KEY)
    );
    // Translation beyond the key's room (4 entries).
    let five = pages_rev(buf.bus_addr(), 5);
    assert_eq!(
        umr_err(ctx.post_umr(&Umr { mtt: &five, ..ok })),
        (prot, umr_vendor::XLT_RANGE)
    );
    // An unknown PD.
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            seg: enable_seg(0xabcd, key as u8, 0x1000, 4 * 4096),
            ..ok
        })),
        (prot, umr_vendor::BAD_PD)
    );
    // Enabled with pages of its range never loaded.
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            mtt: &mtt[..2],
            ..ok
        })),
        (prot, umr_vendor::XLT_INCOMPLETE)
    );
    // An entry not aligned to the page size.
    let bad = [(buf.bus_addr() + 512) | MTT_PRESENT, 0, 0, 0];
    assert_eq!(
        umr_err(ctx.post_umr(&Umr { mtt: &bad, ..ok })),
        (prot, umr_vendor::XLT_MISALIGNED)
    );
    // A mask bit the model does not implement (MLX5_MKEY_MASK_BSF_EN, bit 12).
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            mask: ENABLE | 1 << 12,
            ..ok
        })),
        (WcStatus::LocQpOpErr, umr_vendor::UNSUPPORTED_MASK)
    );
    // "Fail if free" on the free key.
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            check: flags::CHECK_FREE,
            ..ok
        })),
        (prot, umr_vendor::FREE_STATE)
    );
    // Nothing changed: still free. After all those errors the UMR QP recovered.
    sim.with_hca(|h| assert!(h.mkeys().by_index(key >> 8).expect("key").free));
    ctx.post_umr(&ok).expect("a good UMR after the errors");
    // "Fail if not free" on the now enabled key.
    assert_eq!(umr_err(ctx.post_umr(&ok)), (prot, umr_vendor::FREE_STATE));
    // Input errors never reach the device.
    assert!(matches!(
        ctx.post_umr(&Umr {
            mtt_offset: 1,
            ..ok
        }),
        Err(Error::Invalid(_))
    ));
    drop(plain);
    pd.destroy_umr_mkey(key).expect("destroy");
}

/// The model changes a key in place only after every check passed: a UMR refused after its
/// translation was read (a bad PD, a page size the kept entries do not fit, a misaligned
/// entry behind good ones) leaves the entries, page size, PD, access and range as they were.
#[test]
fn refused_umrs_on_an_enabled_key_change_nothing() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    let buf = hal.dma_alloc(4 * 4096, 4096).expect("buffer");
    let fresh = hal.dma_alloc(4 * 4096, 4096).expect("fresh");
    let key = pd.alloc_umr_mkey(4).expect("umr key");
    let iova = 0x5000_0000_0000;
    let mtt = pages_rev(buf.bus_addr(), 4);
    ctx.post_umr(&Umr {
        key,
        check: flags::CHECK_NOT_FREE,
        mask: ENABLE,
        seg: enable_seg(pd.pdn(), key as u8, iova, 4 * 4096),
        mtt: &mtt,
        mtt_offset: 0,
    })
    .expect("enable");
    let before = |h: &mut mlx5_sim::Hca| {
        let m = h.mkeys().by_index(key >> 8).expect("key");
        (m.pd, m.access, m.start, m.len, m.free, m.variant)
    };
    let state = sim.with_hca(before);
    let translates_as_before = || {
        sim.with_hca(|h| {
            for i in 0..4u64 {
                let got = h
                    .mkeys()
                    .translate(key, iova + i * 4096, 4096, SimAccess::LOCAL_READ, pd.pdn())
                    .expect("page translates");
                assert_eq!(
                    got,
                    vec![(buf.bus_addr() + (3 - i) * 4096, 4096)],
                    "page {i}"
                );
            }
        });
    };
    let fresh4 = pages_rev(fresh.bus_addr(), 4);
    let change = Umr {
        key,
        check: flags::CHECK_FREE,
        mask: mask::PD | mask::LR | mask::LW | mask::RR | mask::RW | mask::START_ADDR | mask::LEN,
        seg: MkeySeg {
            access: AccessFlags::LOCAL_WRITE,
            ..enable_seg(pd.pdn(), key as u8, iova + 4096, 2 * 4096)
        },
        mtt: &fresh4,
        mtt_offset: 0,
    };
    // New entries, access and range, but an unknown PD.
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            seg: MkeySeg {
                pd: 0xabcd,
                ..change.seg
            },
            ..change
        })),
        (WcStatus::LocProtErr, umr_vendor::BAD_PD)
    );
    translates_as_before();
    // 2 MiB pages: the kept 4 KiB entries are not aligned to them (the buffer's pages are
    // 4 KiB apart, so at most one of them is 2 MiB aligned).
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            mask: mask::PAGE_SIZE,
            seg: MkeySeg {
                log_page_size: 21,
                ..change.seg
            },
            mtt: &[],
            ..change
        })),
        (WcStatus::LocProtErr, umr_vendor::XLT_MISALIGNED)
    );
    translates_as_before();
    // Two good entries, then a misaligned one: none is written.
    let mixed = [
        fresh4[0],
        fresh4[1],
        (fresh.bus_addr() + 0x800) | MTT_PRESENT,
        fresh4[3],
    ];
    assert_eq!(
        umr_err(ctx.post_umr(&Umr {
            mtt: &mixed,
            ..change
        })),
        (WcStatus::LocProtErr, umr_vendor::XLT_MISALIGNED)
    );
    translates_as_before();
    assert_eq!(sim.with_hca(before), state, "fields unchanged");
    // The same change with a good PD applies whole.
    ctx.post_umr(&change).expect("good change");
    sim.with_hca(|h| {
        let got = h
            .mkeys()
            .translate(key, iova + 4096, 2 * 4096, SimAccess::LOCAL_READ, pd.pdn())
            .expect("new range translates");
        assert_eq!(
            got,
            // Entry 0 maps the new start (the entries are `fresh`'s pages in reverse).
            vec![
                (fresh.bus_addr() + 3 * 4096, 4096),
                (fresh.bus_addr() + 2 * 4096, 4096)
            ]
        );
        assert!(h
            .mkeys()
            .translate(key, iova + 4096, 4096, SimAccess::REMOTE_READ, pd.pdn())
            .is_err());
    });
    pd.destroy_umr_mkey(key).expect("destroy");
}

#[test]
fn context_with_a_umr_qp_closes() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().expect("pd");
    let key = pd.alloc_umr_mkey(2).expect("key");
    ctx.post_umr(&Umr {
        key,
        check: flags::CHECK_FREE,
        mask: 0,
        seg: MkeySeg::default(),
        mtt: &[],
        mtt_offset: 0,
    })
    .map(|_| ())
    .unwrap_or_else(|e| assert!(matches!(e, Error::Umr { .. })));
    pd.destroy_umr_mkey(key).expect("destroy");
    drop(pd);
    assert!(
        ctx.close().is_ok(),
        "the UMR QP does not keep the context alive"
    );
}

/// A UMR-opcode WQE (here a BIND_MW) taken from the SQ while an earlier work request of its
/// QP is still outstanding executes then, but completes only after that request: completions
/// come in SQ order. (The model completes a UMR at once only when nothing is ahead of it.)
/// The SEND waits on RNR NAKs (no receive posted, `rnr_retry` 7 retries forever) until a
/// receive is posted; the model's timers run on `poll`.
#[test]
fn a_umr_wqe_behind_an_outstanding_send_completes_after_it() {
    use mlx5::{MwBind, MwType, QpOptions, RecvWr, SendData, SendFlags, SendOp, SendWr};
    let (sim, ctx) = open();
    let opts = QpOptions {
        mw_bind: true,
        ..QpOptions::default()
    };
    let pd = ctx.alloc_pd().expect("pd");
    let mut p = pair_with(&ctx, pd, &QpCaps::default(), &opts, 64);
    let bindable = AccessFlags(AccessFlags::ALL.0 | AccessFlags::MW_BIND.0);
    let target = p.pd.alloc_mr(8192, bindable).expect("target");
    let src = mr(&p.pd, 4096);
    let dst = mr(&p.pd, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).expect("window");
    src.write(0, b"in order").expect("write");
    p.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send { imm: None },
        data: SendData::Sges(&[src.sge(0, 8)]),
        flags: SendFlags::SIGNALED,
    }])
    .expect("post send");
    let mut wc = [mlx5::WorkCompletion::default(); 4];
    sim.hca.poll();
    assert_eq!(
        p.cq_a.poll(&mut wc).expect("poll"),
        0,
        "the SEND waits (RNR)"
    );
    let bind = MwBind {
        mr: &target,
        addr: target.addr(),
        len: 4096,
        access: AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0),
    };
    let rkey =
        p.a.post_bind_mw(2, &mut mw, &bind, SendFlags::SIGNALED)
            .expect("post bind");
    // Executed when taken (the window is bound), not completed: the SEND is ahead of it.
    sim.with_hca(|h| assert!(!h.mkeys().by_index(rkey >> 8).expect("window").free));
    sim.hca.poll();
    assert_eq!(
        p.cq_a.poll(&mut wc).expect("poll"),
        0,
        "the bind's completion waits behind the SEND"
    );
    p.b.post_recv(&[RecvWr {
        wr_id: 5,
        sges: &[dst.sge(0, 4096)],
    }])
    .expect("post recv");
    let mut got = Vec::new();
    for _ in 0..10_000 {
        sim.hca.poll();
        let n = p.cq_a.poll(&mut wc).expect("poll");
        got.extend(wc[..n].iter().map(|w| (w.wr_id, w.status, w.opcode)));
        if got.len() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, mlx5::WcOpcode::Send),
            (2, WcStatus::Success, mlx5::WcOpcode::BindMw)
        ]
    );
    assert_eq!(one(&mut p.cq_b).byte_len, 8);
    let mut back = [0u8; 8];
    dst.read(0, &mut back).expect("read");
    assert_eq!(&back, b"in order");
}
