//! Memory registration of any size and layout against the model: scattered 4 KiB / 2 MiB /
//! 1 GiB chunks, lists too long for one command (MTT keys under an indirect KLM key),
//! unaligned heads and tails with exact byte bounds, a chosen IOVA, the page size reported,
//! batched registration with one command doorbell, rereg, and key unpredictability.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::mr::PhysChunk;
use mlx5::qp::RawSge;
use mlx5::{
    AccessFlags, DmaBuffer, Error, Hal, InvalidInput, MemoryRegion, MrTranslation, QpCaps,
    SendFlags, SendOp, WcStatus,
};
use mlx5_sim::objects::mr::{Access as SimAccess, MrFault};

const SIG: SendFlags = SendFlags::SIGNALED;
const RW: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
);

fn mem_read(sim: &SimHal, bus: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    sim.with_hca(|h| h.memory().read(bus, &mut v))
        .expect("guest read");
    v
}

#[test]
fn one_gib_of_4k_pages_is_an_indirect_key_over_mtt_keys() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    const GIB: u64 = 1 << 30;
    let backing = hal.dma_alloc(GIB as usize, 1 << 21).expect("1 GiB backing");
    let chunks = scattered(backing.bus_addr(), 4096, GIB / 4096);
    let iova = 0x7f00_0000_0000;
    let before = ctx.commands_sent();
    // SAFETY: `backing` outlives the region.
    let mr = unsafe { p.pd.reg_phys(&chunks, iova, RW) }.expect("1 GiB of 4 KiB pages");
    let t = mr.translation_info();
    assert_eq!(
        t,
        MrTranslation {
            page_shift: 12,
            mtt_entries: 262_144,
            mtt_keys: 2,
            klm_entries: 2,
        }
    );
    assert_eq!(mr.translation(), (262_144, 12));
    assert_eq!(
        ctx.commands_sent() - before,
        3,
        "two MTT keys and one KLM key"
    );
    // RDMA WRITE to the first and last byte (and across the inner-key boundary) lands in the
    // right pages; one past the end is a remote access error.
    let src = mr_with(&p, &[0xa5; 64]);
    assert_eq!(
        write_to(&mut p, &src, 1, iova, mr.rkey()),
        WcStatus::Success
    );
    // Virtual page 0 is the LAST chunk (reversed list).
    assert_eq!(mem_read(&sim, backing.bus_addr() + GIB - 4096, 1), [0xa5]);
    assert_eq!(
        write_to(&mut p, &src, 1, iova + GIB - 1, mr.rkey()),
        WcStatus::Success
    );
    assert_eq!(mem_read(&sim, backing.bus_addr() + 4095, 1), [0xa5]);
    // 64 bytes straddling the boundary between the two inner keys (512 MiB).
    let mid = iova + (GIB / 2) - 32;
    assert_eq!(
        write_to(&mut p, &src, 64, mid, mr.rkey()),
        WcStatus::Success
    );
    let pg_lo = GIB / 2 / 4096 - 1; // virtual page index before the boundary
    let bus_lo = backing.bus_addr() + (GIB / 4096 - 1 - pg_lo) * 4096 + 4096 - 32;
    let bus_hi = backing.bus_addr() + (GIB / 4096 - 1 - pg_lo - 1) * 4096;
    assert_eq!(mem_read(&sim, bus_lo, 32), vec![0xa5; 32]);
    assert_eq!(mem_read(&sim, bus_hi, 32), vec![0xa5; 32]);
    let p = qps_in(&ctx, p);
    let mut p = p;
    assert_eq!(
        write_to(&mut p, &src, 1, iova + GIB, mr.rkey()),
        WcStatus::RemAccessErr
    );
    // The inner keys grant no remote right: only the indirect key is an rkey.
    let klm = sim.with_hca(|h| {
        h.mkeys()
            .by_index(mr.rkey() >> 8)
            .and_then(|m| m.klm_entries())
            .expect("indirect key")
    });
    assert_eq!(klm.len(), 2);
    // (After an error the QP is in the error state: fresh QPs in the same PD.)
    let mut q = qps_in(&ctx, p);
    assert_eq!(
        write_to(&mut q, &src, 1, klm[0].2, klm[0].1),
        WcStatus::RemAccessErr,
        "inner MTT key used as an rkey"
    );
    drop(mr);
    // Every key is gone after dereg: the indirect key and both inner keys.
    sim.with_hca(|h| {
        assert!(h.mkeys().by_index(klm[0].1 >> 8).is_none());
        assert!(h.mkeys().by_index(klm[1].1 >> 8).is_none());
    });
    drop(backing);
}

/// Fresh connected QPs in `p`'s PD (the old ones are dropped).
fn qps_in(ctx: &mlx5::Context<TestHal>, p: Pair) -> Pair {
    let Pair {
        pd,
        a,
        b,
        cq_a,
        cq_b,
    } = p;
    drop((a, b, cq_a, cq_b));
    pair_with(
        ctx,
        pd,
        &QpCaps::default(),
        &mlx5::QpOptions::default(),
        256,
    )
}

/// A small MR holding `data` at offset 0 (alloc_mr), in `p`'s PD.
fn mr_with(p: &Pair, data: &[u8]) -> MemoryRegion<TestHal> {
    let m = p.pd.alloc_mr(4096, AccessFlags::ALL).expect("mr");
    m.write(0, data).expect("fill");
    m
}

#[test]
fn unaligned_head_and_tail_have_exact_byte_bounds() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    let b = hal.dma_alloc(4 * 4096, 4096).expect("backing");
    let bus = b.bus_addr();
    // 0x123 bytes into page 2, through page 0, ending 0x77 bytes into page 3: three chunks,
    // unaligned start and end, the IOVA with the same page offset as the first chunk.
    let chunks = [
        PhysChunk {
            bus: bus + 2 * 4096 + 0x123,
            len: 4096 - 0x123,
        },
        PhysChunk { bus, len: 4096 },
        PhysChunk {
            bus: bus + 3 * 4096,
            len: 0x77,
        },
    ];
    let len = (4096 - 0x123) + 4096 + 0x77;
    let iova = 0x10_0000_0123;
    // SAFETY: `b` outlives the region.
    let mr = unsafe { p.pd.reg_phys(&chunks, iova, RW) }.expect("unaligned");
    assert_eq!((mr.addr(), mr.len()), (iova, len));
    assert_eq!(mr.translation_info().klm_entries, 0, "one direct MTT key");
    assert_eq!(mr.translation_info().page_shift, 12);
    let src = mr_with(&p, &[0x5c; 16]);
    // First byte, last byte: fine, and they land in the right places.
    assert_eq!(
        write_to(&mut p, &src, 1, iova, mr.rkey()),
        WcStatus::Success
    );
    assert_eq!(mem_read(&sim, bus + 2 * 4096 + 0x123, 1), [0x5c]);
    assert_eq!(
        write_to(&mut p, &src, 1, iova + len - 1, mr.rkey()),
        WcStatus::Success
    );
    assert_eq!(mem_read(&sim, bus + 3 * 4096 + 0x76, 1), [0x5c]);
    // One before the first byte and one past the last: remote access errors.
    let mut p = pair(&ctx, QpCaps::default());
    let src = mr_with(&p, &[0x5c; 16]);
    // SAFETY: as above.
    let mr = unsafe { p.pd.reg_phys(&chunks, iova, RW) }.expect("again");
    assert_eq!(
        write_to(&mut p, &src, 1, iova - 1, mr.rkey()),
        WcStatus::RemAccessErr
    );
    let mut p = pair(&ctx, QpCaps::default());
    let src = mr_with(&p, &[0x5c; 16]);
    // SAFETY: as above.
    let mr = unsafe { p.pd.reg_phys(&chunks, iova, RW) }.expect("again");
    assert_eq!(
        write_to(&mut p, &src, 2, iova + len - 1, mr.rkey()),
        WcStatus::RemAccessErr
    );
    // Local side: the driver refuses an SGE one past either end before the device...
    let lkey = mr.lkey();
    for (addr, n) in [(iova - 1, 1u32), (iova + len, 1)] {
        let g = [RawSge { addr, len: n, lkey }];
        let wr = mlx5::RawSendWr {
            wr_id: 0,
            op: SendOp::Send { imm: None },
            data: mlx5::RawData::Sges(&g),
            flags: SIG,
        };
        // SAFETY: refused before anything is written.
        let e = unsafe { p.a.post_send_raw(&[wr]) };
        assert!(
            matches!(e, Err(Error::Invalid(InvalidInput::OutOfRange))),
            "{e:?}"
        );
    }
    // ... and the model's lkey check has the same exact bounds.
    let pdn = p.pd.pdn();
    sim.with_hca(|h| {
        let t = h.mkeys();
        let r = SimAccess::LOCAL_READ;
        assert!(t.translate(lkey, iova, 1, r, pdn).is_ok());
        assert!(t.translate(lkey, iova + len - 1, 1, r, pdn).is_ok());
        assert_eq!(
            t.translate(lkey, iova - 1, 1, r, pdn),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(lkey, iova + len, 1, r, pdn),
            Err(MrFault::OutOfBounds)
        );
    });
}

#[test]
fn chosen_iova_with_any_page_offset() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    let b = hal.dma_alloc(2 * 4096, 4096).expect("backing");
    let bus = b.bus_addr();
    let chunks = scattered(bus, 4096, 2);
    // Same page offset (0): one direct key at the chosen IOVA.
    let iova = 0xdead_0000_0000;
    // SAFETY: `b` outlives the regions.
    let mr = unsafe { p.pd.reg_phys_iova(&chunks, iova, RW) }.expect("iova");
    assert_eq!(mr.addr(), iova);
    assert_eq!(mr.translation_info().klm_entries, 0);
    let src = mr_with(&p, &[7; 8]);
    assert_eq!(
        write_to(&mut p, &src, 8, iova + 4096, mr.rkey()),
        WcStatus::Success
    );
    assert_eq!(
        mem_read(&sim, bus, 8),
        vec![7; 8],
        "virtual page 1 is bus page 0"
    );
    // An IOVA whose page offset differs from the memory's (0x321): an MTT key at the
    // memory's own offsets under a one-entry KLM key at the IOVA.
    let odd = 0x1234_5678_9321;
    // SAFETY: as above.
    let mr2 = unsafe { p.pd.reg_phys_iova(&chunks, odd, RW) }.expect("odd iova");
    assert_eq!(
        mr2.translation_info(),
        MrTranslation {
            page_shift: 12,
            mtt_entries: 2,
            mtt_keys: 1,
            klm_entries: 1
        }
    );
    let src = mr_with(&p, &[9; 8]);
    assert_eq!(
        write_to(&mut p, &src, 8, odd + 4096 - 4, mr2.rkey()),
        WcStatus::Success
    );
    assert_eq!(mem_read(&sim, bus + 4096 + 4092, 4), vec![9; 4]);
    assert_eq!(mem_read(&sim, bus, 4), vec![9; 4]);
    assert_eq!(
        write_to(&mut p, &src, 1, odd + 2 * 4096, mr2.rkey()),
        WcStatus::RemAccessErr
    );
    // Bad requests get typed errors before the device.
    let before = ctx.commands_sent();
    // SAFETY: refused before anything reaches the device.
    let e = unsafe { p.pd.reg_phys_iova(&chunks, u64::MAX - 4096, RW) }.err();
    assert_eq!(e, Some(InvalidInput::LengthOverflow.into()));
    // SAFETY: as above.
    let e = unsafe { p.pd.reg_phys_iova(&[], 0, RW) }.err();
    assert_eq!(e, Some(InvalidInput::ZeroLength.into()));
    // A chunk boundary inside a page cannot be translated by pages at any IOVA.
    let split = [
        PhysChunk { bus, len: 0x800 },
        PhysChunk {
            bus: bus + 4096 + 0x800,
            len: 0x800,
        },
    ];
    // SAFETY: as above.
    let e = unsafe { p.pd.reg_phys_iova(&split, 0, RW) }.err();
    assert_eq!(e, Some(InvalidInput::PageList.into()));
    assert_eq!(ctx.commands_sent(), before, "nothing reached the device");
}

#[test]
fn largest_page_size_is_chosen_for_each_layout() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().unwrap();
    let b = hal.dma_alloc(8 << 20, 8 << 20).expect("backing");
    let bus = b.bus_addr();
    let reg = |c: &[PhysChunk], iova| {
        // SAFETY: `b` outlives every region (dropped at the end of the call).
        let m = unsafe { pd.reg_phys(c, iova, AccessFlags::LOCAL_WRITE) }.expect("reg");
        m.translation_info()
    };
    // Contiguous 8 MiB, 8 MiB aligned: one 8 MiB page (the smallest page size that gives
    // the fewest entries, as Linux ib_umem_find_best_pgsz picks).
    let t = reg(&[PhysChunk { bus, len: 8 << 20 }], bus);
    assert_eq!((t.page_shift, t.mtt_entries), (23, 1));
    // 2 MiB pages scattered: 2 MiB each.
    let t = reg(&scattered(bus, 2 << 20, 4), 0x4000_0000);
    assert_eq!((t.page_shift, t.mtt_entries), (21, 4));
    // A 2 MiB chunk then a 4 KiB chunk: the tail may be a partial 2 MiB page (the key's
    // length ends it), so two 2 MiB entries.
    let tail = [
        PhysChunk {
            bus: bus + (4 << 20),
            len: 2 << 20,
        },
        PhysChunk { bus, len: 4096 },
    ];
    let t = reg(&tail, 0x4000_0000);
    assert_eq!((t.page_shift, t.mtt_entries), (21, 2));
    // A 4 KiB chunk then a 2 MiB chunk: the 2 MiB chunk starts 4 KiB into a virtual 2 MiB
    // page, so 4 KiB pages: 1 + 512 entries.
    let head = [tail[1], tail[0]];
    let t = reg(&head, 0x4000_0000);
    assert_eq!((t.page_shift, t.mtt_entries), (12, 513));
    // 64 GiB of 1 GiB pages (not backed: the model does not touch memory at registration):
    // one direct key of 64 entries.
    let gib: Vec<PhysChunk> = (0..64u64)
        .map(|i| PhysChunk {
            bus: (0x100 + 2 * i) << 30,
            len: 1 << 30,
        })
        .collect();
    let t = reg(&gib, 0x40_0000_0000);
    assert_eq!(
        t,
        MrTranslation {
            page_shift: 30,
            mtt_entries: 64,
            mtt_keys: 1,
            klm_entries: 0
        }
    );
}

#[test]
fn reg_mr_batch_rings_one_doorbell_for_many_commands() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    let b = hal.dma_alloc(16 * 4096, 4096).expect("backing");
    let bus = b.bus_addr();
    let chunks: Vec<[PhysChunk; 1]> = one_chunk_each(bus, 4096, 16);
    let regions = batch_at(&chunks, 0x1000_0000, RW);
    let (c0, d0) = (ctx.commands_sent(), ctx.command_doorbells());
    // SAFETY: `b` outlives the regions.
    let mrs: Vec<_> = unsafe { p.pd.reg_mr_batch(&regions) }
        .into_iter()
        .map(|r| r.expect("batched registration"))
        .collect();
    assert_eq!(ctx.commands_sent() - c0, 16);
    // The model has 32 slots, the last kept for nested commands: 16 commands, one doorbell.
    assert_eq!(
        ctx.command_doorbells() - d0,
        1,
        "one doorbell write for the batch"
    );
    let keys: std::collections::BTreeSet<u32> = mrs.iter().map(|m| m.rkey()).collect();
    assert_eq!(keys.len(), 16, "distinct keys");
    // Every region works and maps its own page.
    let src = mr_with(&p, &[0x3c; 8]);
    for (i, m) in mrs.iter().enumerate() {
        assert_eq!(
            write_to(&mut p, &src, 8, m.addr() + 8, m.rkey()),
            WcStatus::Success
        );
        assert_eq!(mem_read(&sim, bus + i as u64 * 4096 + 8, 8), vec![0x3c; 8]);
    }
    // 40 regions: two groups of at most 31, two doorbells; a bad request in the middle gets
    // its typed error and the rest register.
    let many: Vec<(&[PhysChunk], u64, AccessFlags)> = (0..40)
        .map(|i| {
            let c = &chunks[i % 16][..];
            let acc = if i == 7 {
                AccessFlags::REMOTE_WRITE // without LOCAL_WRITE: refused
            } else {
                RW
            };
            (c, 0x2000_0000 + i as u64 * 0x10_0000, acc)
        })
        .collect();
    let d1 = ctx.command_doorbells();
    // SAFETY: as above.
    let r = unsafe { p.pd.reg_mr_batch(&many) };
    assert_eq!(r.len(), 40);
    assert_eq!(
        r[7].as_ref().err(),
        Some(&Error::Invalid(InvalidInput::AccessFlags))
    );
    assert_eq!(r.iter().filter(|x| x.is_ok()).count(), 39);
    assert_eq!(ctx.command_doorbells() - d1, 2, "39 commands in two groups");
    // Device errors come back per command: a PD the device does not know.
    drop(r);
    drop(mrs);
}

// ---------------------------------------------------------------------------------------------
// rereg (rdma-core tests/test_mr.py test_mr_rereg_*)
// ---------------------------------------------------------------------------------------------

use mlx5::Rereg;

#[test]
fn rereg_access_only() {
    let (_sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let mut m = p.pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    m.write(0, &[0x11; 64]).unwrap();
    let (old_key, old_addr) = (m.rkey(), m.addr());
    // SAFETY: no new translation.
    unsafe {
        m.rereg(Rereg {
            access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
            ..Rereg::default()
        })
    }
    .expect("rereg access");
    assert_ne!(m.rkey(), old_key, "keys change (destroy + create)");
    assert_eq!(m.addr(), old_addr);
    assert_eq!(
        m.access(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
    );
    // The buffer stayed with the region.
    let mut got = [0u8; 64];
    m.read(0, &mut got).unwrap();
    assert_eq!(got, [0x11; 64]);
    // Remote read allowed; remote write now refused.
    let dst = p.pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    assert_eq!(
        read_from(&mut p, &dst, 64, m.addr(), m.rkey()),
        WcStatus::Success
    );
    let mut b = [0u8; 64];
    dst.read(0, &mut b).unwrap();
    assert_eq!(b, [0x11; 64]);
    assert_eq!(
        write_to(&mut p, &dst, 8, m.addr(), m.rkey()),
        WcStatus::RemAccessErr
    );
    // The old key is gone.
    let mut p = qps_in(&ctx, p);
    assert_eq!(
        write_to(&mut p, &dst, 8, old_addr, old_key),
        WcStatus::RemAccessErr
    );
}

#[test]
fn rereg_pd_moves_the_region() {
    let (_sim, ctx) = open();
    let p1 = pair(&ctx, QpCaps::default());
    let mut p2 = pair(&ctx, QpCaps::default());
    let mut m = p1.pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let src2 = mr_with(&p2, &[0x22; 8]);
    // In PD 1 the region is not usable from PD 2's QPs.
    assert_eq!(
        write_to(&mut p2, &src2, 8, m.addr(), m.rkey()),
        WcStatus::RemAccessErr
    );
    // SAFETY: no new translation.
    unsafe {
        m.rereg(Rereg {
            pd: Some(&p2.pd),
            ..Rereg::default()
        })
    }
    .expect("rereg pd");
    let mut p2 = qps_in(&ctx, p2);
    assert_eq!(
        write_to(&mut p2, &src2, 8, m.addr(), m.rkey()),
        WcStatus::Success
    );
    let mut got = [0u8; 8];
    m.read(0, &mut got).unwrap();
    assert_eq!(got, [0x22; 8]);
    // And no longer from PD 1's.
    let mut p1 = p1;
    let src1 = mr_with(&p1, &[0x33; 8]);
    assert_eq!(
        write_to(&mut p1, &src1, 8, m.addr(), m.rkey()),
        WcStatus::RemAccessErr
    );
    // PD 1 can now be freed while the region lives on in PD 2.
    drop(src1);
    drop(p1);
    assert_eq!(m.len(), 4096);
}

#[test]
fn rereg_translation_pd_and_access_together() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let p1 = pair(&ctx, QpCaps::default());
    let mut p2 = pair(&ctx, QpCaps::default());
    let a = hal.dma_alloc(4096, 4096).unwrap();
    let b = hal.dma_alloc(2 * 4096, 4096).unwrap();
    let ca = [PhysChunk {
        bus: a.bus_addr(),
        len: 4096,
    }];
    // SAFETY: `a` and `b` outlive the region.
    let mut m = unsafe { p1.pd.reg_phys(&ca, 0x1000_0000, AccessFlags::LOCAL_WRITE) }.unwrap();
    let cb = scattered(b.bus_addr(), 4096, 2);
    // SAFETY: as above.
    unsafe {
        m.rereg(Rereg {
            translation: Some((&cb, 0x2000_0800)),
            pd: Some(&p2.pd),
            access: Some(RW),
        })
    }
    .expect("rereg all");
    assert_eq!((m.addr(), m.len()), (0x2000_0800, 8192));
    // The IOVA's page offset (0x800) differs from the memory's (0): an indirect key; byte
    // 0xff8 of the region is byte 0xff8 of the first chunk (bus page 1 of `b`), and 16
    // bytes from there cross into the second chunk (bus page 0).
    assert_eq!(m.translation_info().klm_entries, 1);
    let src = mr_with(&p2, &[0x44; 16]);
    assert_eq!(
        write_to(&mut p2, &src, 16, 0x2000_0800 + 0xff8, m.rkey()),
        WcStatus::Success
    );
    assert_eq!(
        mem_read(&sim, b.bus_addr() + 4096 + 0xff8, 8),
        vec![0x44; 8]
    );
    assert_eq!(mem_read(&sim, b.bus_addr(), 8), vec![0x44; 8]);
    assert_eq!(
        mem_read(&sim, a.bus_addr(), 16),
        vec![0; 16],
        "old memory untouched"
    );
}

#[test]
fn failed_rereg_leaves_the_region_as_it_was() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    let mut m = p.pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    let key = m.rkey();
    let before = ctx.commands_sent();
    // Input errors: nothing changed, nothing sent.
    // SAFETY: refused before anything reaches the device.
    let e = unsafe { m.rereg(Rereg::default()) };
    assert_eq!(e, Err(InvalidInput::NothingToChange.into()));
    // SAFETY: as above.
    let e = unsafe {
        m.rereg(Rereg {
            access: Some(AccessFlags::REMOTE_WRITE),
            ..Rereg::default()
        })
    };
    assert_eq!(e, Err(InvalidInput::AccessFlags.into()));
    // SAFETY: as above.
    let e = unsafe {
        m.rereg(Rereg {
            translation: Some((&[], 0)),
            ..Rereg::default()
        })
    };
    assert_eq!(e, Err(InvalidInput::ZeroLength.into()));
    assert_eq!(ctx.commands_sent(), before);
    // A device error creating the new key (a delivery error on CREATE_MKEY).
    sim.with_hca(|h| h.faults_mut().next_delivery_status = Some(0x7));
    // SAFETY: no new translation.
    let e = unsafe {
        m.rereg(Rereg {
            access: Some(AccessFlags::LOCAL_WRITE),
            ..Rereg::default()
        })
    };
    assert!(matches!(e, Err(Error::Delivery { .. })), "{e:?}");
    // The MR is as it was: same key, same rights, still works.
    assert_eq!((m.rkey(), m.access()), (key, AccessFlags::ALL));
    let src = mr_with(&p, &[0x55; 8]);
    assert_eq!(
        write_to(&mut p, &src, 8, m.addr(), m.rkey()),
        WcStatus::Success
    );
    // A region bound to a QP (the fast path references it) is busy: refused, unchanged.
    let h = p.a.bind_mr(&m).expect("bind");
    // SAFETY: no new translation.
    let e = unsafe {
        m.rereg(Rereg {
            access: Some(AccessFlags::LOCAL_WRITE),
            ..Rereg::default()
        })
    };
    assert_eq!(e, Err(Error::Busy));
    assert_eq!((m.rkey(), m.access()), (key, AccessFlags::ALL));
    p.a.unbind_mr(h).expect("unbind");
    m.dereg().unwrap();
    // SAFETY: no new translation.
    let e = unsafe {
        m.rereg(Rereg {
            access: Some(AccessFlags::LOCAL_WRITE),
            ..Rereg::default()
        })
    };
    assert_eq!(
        e,
        Err(Error::Closed),
        "a deregistered region cannot be re-registered"
    );
}

// ---------------------------------------------------------------------------------------------
// Unpredictable keys (ReDMArk)
// ---------------------------------------------------------------------------------------------

/// A 4 KiB DMA page (kept alive by the caller while regions name it) as a one-chunk list.
fn one_page(sim: &std::sync::Arc<SimHal>) -> (SimDma, [PhysChunk; 1]) {
    let b = TestHal(sim.clone()).dma_alloc(4096, 4096).unwrap();
    let c = [PhysChunk {
        bus: b.bus_addr(),
        len: 4096,
    }];
    (b, c)
}

/// Measures how often the next rkey can be guessed from the previous one. The model hands
/// out mkey indices in sequence, as the hardware does (ReDMArk measured the same on real
/// mlx5), so the index part is always `prev + 1`; the variant byte is random per key. The
/// best single guess from the previous key is `(prev_index + 1) << 8 | v` for any fixed `v`:
/// it hits when the random variant happens to be `v`, i.e. 1/256 of the time.
#[test]
fn next_rkey_guess_probability() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let (_b, c) = one_page(&sim);
    const N: usize = 4096;
    let mut keys = Vec::with_capacity(N);
    for _ in 0..N {
        // SAFETY: `_b` outlives every region.
        let mut m = unsafe { pd.reg_phys(&c, 0x1000, AccessFlags::LOCAL_WRITE) }.unwrap();
        keys.push(m.rkey());
        m.dereg().unwrap();
    }
    // Best fixed-variant guess: prev index + 1 with the same variant as the previous key.
    let (index_next, full_hits) = next_key_guesses(&keys);
    let n = (N - 1) as f64;
    println!(
        "next-rkey guess (no pool): index part predictable {:.4}, full key {:.5} ({full_hits}/{}), 1/256 = {:.5}",
        index_next as f64 / n,
        full_hits as f64 / n,
        N - 1,
        1.0 / 256.0
    );
    assert_eq!(index_next, N - 1, "the model allocates indices in sequence");
    // A bound far above 1/256 (16 sigma) so that chance cannot fail it: it fails only if the
    // variant were predictable.
    assert!(full_hits < 16 + 16 * 4, "{full_hits} of {N} guessed");
    // Every variant value occurs (the variant is not constant or narrow).
    let variants: std::collections::BTreeSet<u32> = keys.iter().map(|k| k & 0xff).collect();
    assert!(variants.len() > 200, "{} distinct variants", variants.len());
}

/// A context on a model with 2^5 mkey indices (the 16 or so left to regions are reused
/// every few registrations).
fn small_mkey_space() -> (std::sync::Arc<SimHal>, mlx5::Context<TestHal>) {
    use mlx5_prm::cmd_hca_cap;
    let sim = SimHal::new();
    sim.with_hca(|h| {
        let g = &mut h.caps_mut().general;
        cmd_hca_cap::LOG_MAX_MKEY.set(&mut g.max[..], 5).unwrap();
        cmd_hca_cap::LOG_MAX_MKEY.set(&mut g.cur[..], 5).unwrap();
    });
    let cfg = mlx5::ContextConfig {
        reset_function: false,
        ..test_config()
    };
    let ctx = mlx5::Context::open(TestHal(sim.clone()), cfg).expect("bring-up");
    (sim, ctx)
}

/// No key comes back right after its region was destroyed, even where the device reuses
/// indices at once: a model with 16 usable mkey indices wraps every 16 registrations, and the
/// driver takes a new key when index and random variant both match a recently destroyed key.
#[test]
fn no_key_reuse_right_after_destroy() {
    let (sim, ctx) = small_mkey_space();
    let pd = ctx.alloc_pd().unwrap();
    let (_b, c) = one_page(&sim);
    let mut recent: std::collections::VecDeque<u32> = Default::default();
    let mut reused_index = 0;
    for _ in 0..600 {
        // SAFETY: `_b` outlives every region.
        let mut m = unsafe { pd.reg_phys(&c, 0x1000, AccessFlags::LOCAL_WRITE) }.unwrap();
        let k = m.rkey();
        assert!(
            !recent.contains(&k),
            "key {k:#x} reused within 256 destroys"
        );
        if recent.iter().any(|r| r >> 8 == k >> 8) {
            reused_index += 1;
        }
        m.dereg().unwrap();
        if recent.len() == 256 {
            recent.pop_front();
        }
        recent.push_back(k);
    }
    assert!(
        reused_index > 500,
        "the device did reuse indices ({reused_index})"
    );
}

/// The collision avoidance of `no_key_reuse_right_after_destroy` with the odds stacked: the
/// random source is scripted so that the first key and its next four replacements all name
/// a recently destroyed key (every usable index has been destroyed with variants 100..=104).
/// The driver keeps drawing until the key is fresh (variant 105); it used to give up after
/// four tries and hand out the recent key, which that test hit about once in 2500 runs
/// (5 collisions in a row at 1/16 each, ~590 registrations a run).
#[test]
fn key_avoidance_keeps_drawing_past_five_collisions() {
    let (sim, ctx) = small_mkey_space();
    let pd = ctx.alloc_pd().unwrap();
    let (_b, c) = one_page(&sim);
    let script = |v: &[u64]| sim.random_script.lock().unwrap().extend(v.iter().copied());
    let reg_dereg = |variant: u64| {
        script(&[variant]);
        // SAFETY: `_b` outlives every region.
        let mut m = unsafe { pd.reg_phys(&c, 0x1000, AccessFlags::LOCAL_WRITE) }.unwrap();
        let k = m.rkey();
        m.dereg().unwrap();
        assert!(sim.random_script.lock().unwrap().is_empty(), "one draw");
        assert_eq!(u64::from(k & 0xff), variant, "the scripted variant");
        k
    };
    // The usable indices: distinct variants never collide, so each registration is one key.
    let first: Vec<u32> = (0..40).map(reg_dereg).collect();
    let indices: std::collections::BTreeSet<u32> = first.iter().map(|k| k >> 8).collect();
    assert!(
        indices.len() < 40,
        "the device reuses indices: {indices:x?}"
    );
    // Every usable index destroyed with variants 100..=104 (40 + 5 * n keys: all recent).
    let mut recent: Vec<u32> = first;
    for v in 100..105 {
        for _ in 0..indices.len() {
            recent.push(reg_dereg(v));
        }
    }
    assert!(recent.len() <= 256);
    let covered: std::collections::BTreeSet<u32> = recent.iter().map(|k| k >> 8).collect();
    assert_eq!(covered, indices);
    // First variant 100, each retry +1 (`variant + 1 + r % 255` with r = 0): 100..=104 all
    // collide whatever index the device picks; 105 is fresh.
    script(&[100, 0, 0, 0, 0, 0, 0, 0]);
    // SAFETY: `_b` outlives the region.
    let m = unsafe { pd.reg_phys(&c, 0x1000, AccessFlags::LOCAL_WRITE) }.unwrap();
    let k = m.rkey();
    assert!(!recent.contains(&k), "key {k:#x} was destroyed recently");
    assert_eq!(k & 0xff, 105, "the first fresh variant");
    sim.random_script.lock().unwrap().clear();
}

/// The batch on a model that runs commands on its own thread (completions arrive while the
/// driver polls), and a device error on one command of a batch: that region gets the error,
/// the others register.
#[test]
fn reg_mr_batch_threaded_model_and_a_failing_slot() {
    let sim = SimHal::threaded();
    let ctx = mlx5::Context::open(TestHal(sim.clone()), test_config()).expect("bring-up");
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().unwrap();
    let b = hal.dma_alloc(8 * 65536, 65536).expect("backing");
    let chunks: Vec<[PhysChunk; 1]> = one_chunk_each(b.bus_addr(), 65536, 8);
    let regions: Vec<(&[PhysChunk], u64, AccessFlags)> =
        chunks.iter().map(|c| (&c[..], c[0].bus, RW)).collect();
    let d0 = ctx.command_doorbells();
    // SAFETY: `b` outlives the regions.
    let mrs = unsafe { pd.reg_mr_batch(&regions) };
    assert!(
        mrs.iter().all(|m| m.is_ok()),
        "{:?}",
        mrs.iter().map(|m| m.as_ref().err()).collect::<Vec<_>>()
    );
    assert_eq!(ctx.command_doorbells() - d0, 1);
    for (m, c) in mrs.iter().zip(&chunks) {
        let m = m.as_ref().unwrap();
        assert_eq!((m.addr(), m.len()), (c[0].bus, 65536));
        assert_eq!(m.translation_info().mtt_entries, 1);
    }
    drop(mrs);
    // The model delivers the first slot it runs with a delivery error.
    sim.with_hca(|h| h.faults_mut().next_delivery_status = Some(0x7));
    // SAFETY: as above.
    let mrs = unsafe { pd.reg_mr_batch(&regions) };
    assert!(
        matches!(mrs[0], Err(Error::Delivery { .. })),
        "{:?}",
        mrs[0].as_ref().err()
    );
    assert!(mrs[1..].iter().all(|m| m.is_ok()));
}

/// The indirect key's CREATE_MKEY fails at the device (here: the model's KLM list cap lowered
/// after the driver read it): the inner MTT keys already created are destroyed, the error is
/// the device's, and nothing is left on the device.
#[test]
fn failed_indirect_key_destroys_its_inner_keys() {
    use mlx5_prm::cmd_hca_cap;
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let live = || sim.with_hca(|h| h.mkeys().len());
    let before = live();
    // 2^17 + 1 pages (not backed: registration touches no memory, and this region is never
    // used): two MTT keys and a two-entry KLM key.
    let chunks: Vec<PhysChunk> = (0..(1u64 << 17) + 1)
        .map(|i| PhysChunk {
            bus: (1 << 40) + i * 8192,
            len: 4096,
        })
        .collect();
    sim.with_hca(|h| {
        let g = &mut h.caps_mut().general;
        cmd_hca_cap::LOG_MAX_KLM_LIST_SIZE
            .set(&mut g.cur[..], 0)
            .unwrap();
    });
    let c0 = ctx.commands_sent();
    // SAFETY: never used for DMA; refused by the device.
    let e = unsafe { pd.reg_phys(&chunks, 0x1000_0000, AccessFlags::LOCAL_WRITE) }.err();
    assert!(
        matches!(e, Some(Error::Command(ref c)) if c.syndrome == mlx5_sim::objects::mr::syndrome::KLM_LIST_TOO_LONG),
        "{e:?}"
    );
    assert_eq!(
        ctx.commands_sent() - c0,
        5,
        "2 creates, the failed KLM create, 2 destroys"
    );
    assert_eq!(live(), before, "no key left behind");
    assert_eq!(ctx.quarantined().0, 0, "nothing held: the device said no");
}

/// The test HAL's random source: scripted values come out first to last, and with none left
/// (or none scripted) it has no source (`None`), whichever way the queue was emptied.
#[test]
fn scripted_random_values_then_none() {
    use mlx5::hal::Hal;
    let sim = SimHal::new();
    let hal = TestHal(sim.clone());
    assert_eq!(hal.random_u64(), None, "nothing scripted");
    sim.random_script.lock().unwrap().extend([7, 9]);
    assert_eq!(hal.random_u64(), Some(7));
    assert_eq!(hal.random_u64(), Some(9));
    assert_eq!(hal.random_u64(), None, "script used up");
    sim.random_script.lock().unwrap().push_back(3);
    sim.random_script.lock().unwrap().clear();
    assert_eq!(hal.random_u64(), None, "script cleared");
    sim.random_script.lock().unwrap().push_back(5);
    assert_eq!(hal.random_u64(), Some(5));
}
