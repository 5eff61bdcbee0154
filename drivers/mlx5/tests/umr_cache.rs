//! The mkey cache against the model: a cached registration is one UMR WQE and no command,
//! batches ring one doorbell per 32 WQEs and fall back to commands for what the cache cannot
//! serve or the device refuses, dereg revokes the key before returning, rereg changes a key in
//! place, and reused keys take a new variant (not guessable from the previous one).

#[allow(dead_code)]
mod common;
mod umr_common;

use common::*;
use mlx5::{AccessFlags, DmaBuffer, Error, Hal, QpCaps, WcStatus};
use mlx5_sim::objects::mr::Access as SimAccess;
use umr_common::{tamper, RW};

#[test]
fn cached_registration_is_one_umr_and_dereg_revokes_before_returning() {
    use mlx5::mr::PhysChunk;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    ctx.enable_mkey_cache(2).expect("cache");
    assert_eq!(ctx.mkey_cache_len(), 6);
    let buf = hal.dma_alloc(64 << 10, 4096).expect("buffer");
    // 16 scattered 4 KiB pages (64 KiB): the smallest class.
    let chunks: Vec<PhysChunk> = scattered(buf.bus_addr(), 4096, 16);
    let iova = 0x6000_0000_0000;
    let cmds = ctx.commands_sent();
    // SAFETY: `buf` outlives the region.
    let mut m = unsafe { p.pd.reg_phys(&chunks, iova, RW) }.expect("cached registration");
    assert_eq!(ctx.commands_sent(), cmds, "no firmware command");
    assert_eq!(ctx.mkey_cache_len(), 5);
    let rkey = m.rkey();
    let src = mr(&p.pd, 4096);
    let data = pattern(4096, 9);
    src.write(0, &data).expect("fill");
    // Into the last page of the region (the first chunk of the reversed list is page 15).
    assert_eq!(
        write_to(&mut p, &src, 4096, iova + 15 * 4096, rkey),
        WcStatus::Success
    );
    let mut got = vec![0u8; 4096];
    sim.with_hca(|h| h.memory().read(buf.bus_addr(), &mut got))
        .expect("read");
    assert_eq!(got, data);
    let cmds = ctx.commands_sent();
    let pooled = ctx.mkey_cache_len(); // `src` took a key from the cache too
    m.dereg().expect("dereg");
    assert_eq!(ctx.commands_sent(), cmds, "dereg is a UMR too");
    assert_eq!(
        ctx.mkey_cache_len(),
        pooled + 1,
        "the key went back to the cache"
    );
    // The peer still holds the old rkey: REM_ACCESS_ERR, and the memory is untouched.
    let mut p2 = pair(&ctx, QpCaps::default());
    let src2 = mr(&p2.pd, 4096);
    src2.write(0, &[0xee; 4096]).expect("fill");
    assert_eq!(
        write_to(&mut p2, &src2, 4096, iova + 15 * 4096, rkey),
        WcStatus::RemAccessErr
    );
    sim.with_hca(|h| h.memory().read(buf.bus_addr(), &mut got))
        .expect("read");
    assert_eq!(got, data);
    // A region too large for any class (513 pages) goes through commands.
    let big = hal.dma_alloc(513 * 4096, 4096).expect("big");
    let bc: Vec<PhysChunk> = scattered(big.bus_addr(), 4096, 513);
    let cmds = ctx.commands_sent();
    // SAFETY: `big` outlives the region.
    let m2 = unsafe { p.pd.reg_phys(&bc, 0x1000, RW) }.expect("by command");
    assert!(ctx.commands_sent() > cmds);
    drop(m2);
}

/// `reg_mr_batch` with the cache: the regions the cache can serve take one UMR WQE each,
/// rung with one doorbell per 32 (no command); the rest go by CREATE_MKEY. Every region
/// carries traffic, and dereg revokes its key before returning.
#[test]
fn batched_registration_from_the_cache_is_umrs_and_the_rest_commands() {
    use mlx5::mr::PhysChunk;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    let src = mr(&p.pd, 4096);
    src.write(0, &pattern(4096, 3)).expect("fill");
    ctx.enable_mkey_cache(20).expect("cache"); // 20 keys in each of 3 classes
    const N: u64 = 70;
    let buf = hal.dma_alloc((N * 4096) as usize, 4096).expect("buffer");
    let chunks: Vec<[PhysChunk; 1]> = one_chunk_each(buf.bus_addr(), 4096, N);
    let iova = |i: u64| 0x4000_0000_0000 + i * 0x10_0000;
    let regions: Vec<(&[PhysChunk], u64, AccessFlags)> = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| (&c[..], iova(i as u64), RW))
        .collect();
    let cmds = ctx.commands_sent();
    // SAFETY: `buf` outlives the regions.
    let mrs: Vec<_> = unsafe { p.pd.reg_mr_batch(&regions) }
        .into_iter()
        .map(|r| r.expect("registered"))
        .collect();
    assert_eq!(ctx.mkey_cache_len(), 0, "all 60 cached keys handed out");
    assert_eq!(
        ctx.commands_sent() - cmds,
        N - 60,
        "one CREATE_MKEY for each region the cache could not serve"
    );
    for (i, m) in mrs.iter().enumerate() {
        assert_eq!(
            write_to(&mut p, &src, 64, iova(i as u64), m.rkey()),
            WcStatus::Success,
            "region {i}"
        );
    }
    let rkeys: Vec<u32> = mrs.iter().map(|m| m.rkey()).collect();
    let cmds = ctx.commands_sent();
    for mut m in mrs {
        m.dereg().expect("dereg");
    }
    assert_eq!(
        ctx.commands_sent() - cmds,
        N - 60,
        "60 revoking UMRs, 10 DESTROY_MKEY"
    );
    assert_eq!(ctx.mkey_cache_len(), 60, "the keys went back to the cache");
    // Cached keys (the first 60) and one by command. An error completion moves the QP to
    // the error state: a fresh pair (and source region in its PD) for each.
    for i in [0, 31, 59, 69] {
        let mut q = pair(&ctx, QpCaps::default());
        let s2 = mr(&q.pd, 4096);
        assert_eq!(
            write_to(&mut q, &s2, 64, iova(i as u64), rkeys[i]),
            WcStatus::RemAccessErr,
            "region {i} after dereg"
        );
    }
}

/// A UMR of a batch that the device refuses (its key is not free) leaves that key, and the
/// keys of the WQEs after it (flushed, not executed), as they were: those regions are
/// registered by command instead, the keys go back to the cache, and the UMR QP is
/// recovered for the next registration.
#[test]
fn a_refused_umr_in_a_batch_falls_back_to_commands() {
    use mlx5::mr::PhysChunk;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    ctx.enable_mkey_cache(1).expect("cache"); // one key per class: 16, 128, 512 entries
    let buf = hal.dma_alloc(200 * 4096, 4096).expect("buffer");
    let pages = |n: u64| -> Vec<PhysChunk> { scattered(buf.bus_addr(), 4096, n) };
    // The 128-entry key: taken by 17 pages, then back in the cache (free, variant kept).
    let p17 = pages(17);
    // SAFETY: `buf` outlives every region.
    let mut m = unsafe { pd.reg_phys(&p17, 0x10_0000, RW) }.expect("from the cache");
    let k128 = m.lkey();
    m.dereg().expect("dereg");
    assert_eq!(ctx.mkey_cache_len(), 3);
    // Enable it behind the cache's back: a UMR with "fail if not free" on it is refused.
    tamper(&ctx, pd.pdn(), k128, buf.bus_addr());
    // Four 4 KiB regions: WQE 0 takes the 16-entry key, WQE 1 the tampered key (refused),
    // WQE 2 the 512-entry key (flushed); the fourth finds the cache empty.
    let one: Vec<[PhysChunk; 1]> = one_chunk_each(buf.bus_addr(), 4096, 4);
    let regions = batch_at(&one, 0x2000_0000, RW);
    let cmds = ctx.commands_sent();
    // SAFETY: as above.
    let mrs: Vec<_> = unsafe { pd.reg_mr_batch(&regions) }
        .into_iter()
        .map(|r| r.expect("registered"))
        .collect();
    let _ = cmds; // the QP's recovery sends commands too (2RST, RST2INIT, ...)
    assert_eq!(
        ctx.mkey_cache_len(),
        2,
        "the refused and the flushed key came back"
    );
    sim.with_hca(|h| {
        // Region 0 holds the cache's 16-entry key (`umr_en`); 1..=3 keys made by command.
        let umr_en: Vec<bool> = mrs
            .iter()
            .map(|m| h.mkeys().by_index(m.lkey() >> 8).expect("key").umr_en)
            .collect();
        assert_eq!(umr_en, [true, false, false, false]);
        let m = h.mkeys().by_index(k128 >> 8).expect("key");
        assert_eq!(
            (m.start, m.len),
            (0x1000, 4096),
            "the refused UMR changed nothing"
        );
        for (i, m) in mrs.iter().enumerate() {
            let got = h
                .mkeys()
                .translate(
                    m.lkey(),
                    regions[i].1,
                    4096,
                    SimAccess::LOCAL_READ,
                    pd.pdn(),
                )
                .expect("translates");
            assert_eq!(got, vec![(one[i][0].bus, 4096)], "region {i}");
        }
    });
    // The UMR QP recovered: 200 pages take the 512-entry key, without a command.
    let p200 = pages(200);
    let cmds = ctx.commands_sent();
    // SAFETY: as above.
    let big = unsafe { pd.reg_phys(&p200, 0x4000_0000, RW) }.expect("from the cache");
    assert_eq!(ctx.commands_sent(), cmds, "a UMR after the recovery");
    drop(big);
    drop(mrs);
}

/// ReDMArk with the cache: keys come out in random order, and a key's variant changes on
/// every reuse. Measures the fraction of next rkeys guessable from the previous one as the
/// no-pool test does (`mr_layouts.rs` `next_rkey_guess_probability`: index + 1, same variant).
#[test]
fn cached_keys_are_unpredictable() {
    use mlx5::mr::PhysChunk;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    ctx.enable_mkey_cache(64).expect("cache");
    let b = hal.dma_alloc(4096, 4096).expect("buffer");
    let c = [PhysChunk {
        bus: b.bus_addr(),
        len: 4096,
    }];
    const N: usize = 4096;
    let cmds = ctx.commands_sent();
    let mut keys = Vec::with_capacity(N);
    for _ in 0..N {
        // SAFETY: `b` outlives every region.
        let mut m = unsafe { pd.reg_phys(&c, 0x1000, AccessFlags::LOCAL_WRITE) }.expect("reg");
        keys.push(m.rkey());
        m.dereg().expect("dereg");
    }
    assert_eq!(
        ctx.commands_sent(),
        cmds,
        "every registration came from the cache"
    );
    let (index_next, full_hits) = next_key_guesses(&keys);
    let same_key_again = keys.windows(2).filter(|w| w[1] == w[0]).count();
    let n = (N - 1) as f64;
    println!(
        "next-rkey guess (pool of 64): index part predictable {:.4}, full key {:.5} ({full_hits}/{})",
        index_next as f64 / n,
        full_hits as f64 / n,
        N - 1
    );
    assert_eq!(
        same_key_again, 0,
        "a key never comes back right after its dereg"
    );
    // The index part: a uniform pick among 64 keys (expected 1/64 = 64 of 4095; far below
    // the 4095 of the sequential firmware).
    assert!(index_next < 200, "{index_next} sequential indices");
    // Each reuse of an index has a new variant.
    let mut last: std::collections::BTreeMap<u32, u32> = Default::default();
    for &k in &keys {
        if let Some(prev) = last.insert(k >> 8, k & 0xff) {
            assert_ne!(prev, k & 0xff, "variant reused for index {:#x}", k >> 8);
        }
    }
    assert!(full_hits < 16, "{full_hits} of {N} guessed");
}

/// rdma-core tests/test_mr.py `test_mr_rereg_access` / `_pd` / `_addr` on a cached key:
/// each change is one UMR, no command, and lkey/rkey stay; a translation too long for the
/// key's class falls back to create-then-destroy (new keys).
#[test]
fn cached_mr_rereg_by_umr_keeps_its_keys() {
    use mlx5::mr::PhysChunk;
    use mlx5::Rereg;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let mut p = pair(&ctx, QpCaps::default());
    let src = mr(&p.pd, 4096);
    ctx.enable_mkey_cache(2).expect("cache");
    let b1 = hal.dma_alloc(4096, 4096).expect("b1");
    let b2 = hal.dma_alloc(2 * 4096, 4096).expect("b2");
    let c1 = [PhysChunk {
        bus: b1.bus_addr(),
        len: 4096,
    }];
    let iova = 0x4400_0000_0000;
    // SAFETY: b1 and b2 outlive the region.
    let mut m = unsafe { p.pd.reg_phys(&c1, iova, RW) }.expect("reg");
    let key = m.rkey();
    src.write(0, &pattern(4096, 1)).expect("fill");
    assert_eq!(write_to(&mut p, &src, 64, iova, key), WcStatus::Success);

    // Access: drop REMOTE_WRITE.
    let c = ctx.commands_sent();
    // SAFETY: the buffers the region names (old and new) outlive it; rereg only changes
    // what the device may reach through its keys.
    unsafe {
        m.rereg(Rereg {
            access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
            ..Rereg::default()
        })
    }
    .expect("rereg access");
    assert_eq!(ctx.commands_sent(), c, "rereg by UMR: no command");
    assert_eq!((m.lkey(), m.rkey()), (key, key));
    let mut p2 = pair(&ctx, QpCaps::default());
    let src2 = mr(&p2.pd, 4096);
    assert_eq!(
        write_to(&mut p2, &src2, 64, iova, key),
        WcStatus::RemAccessErr
    );

    // PD: to a new PD (p4's), with REMOTE_WRITE back.
    let mut p4 = pair(&ctx, QpCaps::default());
    let src4 = mr(&p4.pd, 4096);
    let c = ctx.commands_sent();
    // SAFETY: the buffers the region names (old and new) outlive it; rereg only changes
    // what the device may reach through its keys.
    unsafe {
        m.rereg(Rereg {
            pd: Some(&p4.pd),
            access: Some(RW),
            ..Rereg::default()
        })
    }
    .expect("rereg pd");
    assert_eq!(ctx.commands_sent(), c, "rereg by UMR: no command");
    assert_eq!(m.rkey(), key);
    let mut p3 = pair(&ctx, QpCaps::default());
    let src3 = mr(&p3.pd, 4096);
    // A QP of another PD is refused.
    assert_eq!(
        write_to(&mut p3, &src3, 64, iova, key),
        WcStatus::RemAccessErr
    );

    // Translation: two pages of b2 at a new IOVA; writes land there, b1 untouched.
    let c2 = [PhysChunk {
        bus: b2.bus_addr(),
        len: 2 * 4096,
    }];
    let iova2 = 0x4500_0000_0000;
    let mut before = vec![0u8; 4096];
    sim.with_hca(|h| h.memory().read(b1.bus_addr(), &mut before))
        .expect("read");
    let c = ctx.commands_sent();
    // SAFETY: the buffers the region names (old and new) outlive it; rereg only changes
    // what the device may reach through its keys.
    unsafe {
        m.rereg(Rereg {
            translation: Some((&c2, iova2)),
            ..Rereg::default()
        })
    }
    .expect("rereg translation");
    assert_eq!(ctx.commands_sent(), c, "rereg by UMR: no command");
    assert_eq!(m.rkey(), key);
    assert_eq!(m.addr(), iova2);
    let data = pattern(64, 77);
    src4.write(0, &data).expect("fill");
    // p4 is in the MR's PD now.
    assert_eq!(
        write_to(&mut p4, &src4, 64, iova2 + 4096 + 8, key),
        WcStatus::Success
    );
    let mut got = vec![0u8; 64];
    sim.with_hca(|h| h.memory().read(b2.bus_addr() + 4096 + 8, &mut got))
        .expect("read");
    assert_eq!(got, data);
    let mut after = vec![0u8; 4096];
    sim.with_hca(|h| h.memory().read(b1.bus_addr(), &mut after))
        .expect("read");
    assert_eq!(after, before);
    // The old IOVA is out of bounds now.
    assert_eq!(
        write_to(&mut p4, &src4, 8, iova, key),
        WcStatus::RemAccessErr
    );

    // Too long for the key's class (513 pages): create-then-destroy, new keys.
    let big = hal.dma_alloc(513 * 4096, 4096).expect("big");
    let bc: Vec<PhysChunk> = scattered(big.bus_addr(), 4096, 513);
    // SAFETY: the buffers the region names (old and new) outlive it; rereg only changes
    // what the device may reach through its keys.
    unsafe {
        m.rereg(Rereg {
            translation: Some((&bc, 0x1000)),
            ..Rereg::default()
        })
    }
    .expect("rereg by commands");
    assert_ne!(m.rkey(), key);
}

/// A cached key deregistered keeps its region allocation in the cache, and its next
/// registration overwrites it: the new PD, IOVA, length, access and translation, a new
/// variant; the old PD is not held by the parked allocation (its DEALLOC_PD goes when its
/// handle does); a handle dropped without dereg also revokes the key and returns it.
#[test]
fn a_reused_cached_region_takes_the_new_registration_whole() {
    use mlx5::mr::PhysChunk;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    ctx.enable_mkey_cache(1).expect("cache");
    let pd1 = ctx.alloc_pd().expect("pd1");
    let pd2 = ctx.alloc_pd().expect("pd2");
    let (pdn1, pdn2) = (pd1.pdn(), pd2.pdn());
    let b = hal.dma_alloc(8192, 4096).expect("buffer");
    let page = |i: u64| {
        [PhysChunk {
            bus: b.bus_addr() + i * 4096,
            len: 4096,
        }]
    };
    let cmds = ctx.commands_sent();
    // SAFETY: `b` outlives every region.
    let mut m1 = unsafe { pd1.reg_phys(&page(0), 0x1000, RW) }.expect("reg 1");
    let k1 = m1.lkey();
    m1.dereg().expect("dereg 1");
    assert_eq!(ctx.commands_sent(), cmds, "from the cache and back");
    drop(pd1);
    assert_eq!(
        ctx.commands_sent(),
        cmds + 1,
        "DEALLOC_PD of pd1 went with its handle"
    );
    let cmds = ctx.commands_sent();
    // SAFETY: as above.
    let m2 = unsafe { pd2.reg_phys(&page(1), 0x9000, AccessFlags::LOCAL_WRITE) }.expect("reg 2");
    let k2 = m2.lkey();
    assert_eq!(ctx.commands_sent(), cmds, "from the cache");
    assert_eq!(k2 >> 8, k1 >> 8, "the one key of its class");
    assert_ne!(k2, k1, "a new variant");
    assert_eq!(m2.addr(), 0x9000);
    assert_eq!(m2.len(), 4096);
    assert_eq!(m2.access(), AccessFlags::LOCAL_WRITE);
    assert_eq!(m2.translation(), (1, 12));
    sim.with_hca(|h| {
        let got = h
            .mkeys()
            .translate(k2, 0x9000, 4096, SimAccess::LOCAL_READ, pdn2)
            .expect("the new registration");
        assert_eq!(got, vec![(b.bus_addr() + 4096, 4096)]);
        assert!(h
            .mkeys()
            .translate(k2, 0x9000, 4096, SimAccess::LOCAL_READ, pdn1)
            .is_err());
        assert!(h
            .mkeys()
            .translate(k1, 0x1000, 4096, SimAccess::LOCAL_READ, pdn2)
            .is_err());
    });
    drop(m2);
    assert_eq!(
        ctx.commands_sent(),
        cmds,
        "a dropped cached region goes back by UMR"
    );
    sim.with_hca(|h| assert!(h.mkeys().by_index(k2 >> 8).expect("key").free, "revoked"));
    // SAFETY: as above.
    let m3 = unsafe { pd2.reg_phys(&page(0), 0x1000, RW) }.expect("reg 3");
    assert_eq!(m3.lkey() >> 8, k1 >> 8, "the key came back to the cache");
    assert_eq!(ctx.commands_sent(), cmds);
    sim.with_hca(|h| {
        let got = h
            .mkeys()
            .translate(m3.lkey(), 0x1000, 4096, SimAccess::LOCAL_READ, pdn2)
            .expect("the third registration");
        assert_eq!(got, vec![(b.bus_addr(), 4096)]);
    });
}

/// A region one page translates takes the cache's lean path: no command, the key translates
/// exactly the region's bytes (unaligned, inside one page) at the page size the general plan
/// gives, and the region allocation parked with the key (here one that held a 16-entry list)
/// takes the one-page plan whole. A UMR the device refuses on that path leaves the key as it
/// was, back in the cache, and the region is registered by command instead.
#[test]
fn a_one_page_registration_from_the_cache_and_its_refusal() {
    use mlx5::mr::PhysChunk;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    ctx.enable_mkey_cache(1).expect("cache"); // one key per class: 16, 128, 512 entries
    let buf = hal.dma_alloc(32 * 4096, 4096).expect("buffer");
    // The 16-entry key, parked with a region allocation whose translation has 16 entries.
    let p16: Vec<PhysChunk> = scattered(buf.bus_addr(), 4096, 16);
    // SAFETY: `buf` outlives every region.
    let mut m = unsafe { pd.reg_phys(&p16, 0x10_0000, RW) }.expect("from the cache");
    let k16 = m.lkey();
    assert_eq!(m.translation_info().mtt_entries, 16);
    m.dereg().expect("dereg");
    // 0x100 bytes at page offset 0x123, at an IOVA with the same page offset.
    let one = [PhysChunk {
        bus: buf.bus_addr() + 20 * 4096 + 0x123,
        len: 0x100,
    }];
    let iova = 0x7000_0000_0123;
    let cmds = ctx.commands_sent();
    // SAFETY: as above.
    let m = unsafe { pd.reg_phys(&one, iova, RW) }.expect("from the cache");
    assert_eq!(ctx.commands_sent(), cmds, "no firmware command");
    assert_eq!(m.lkey() >> 8, k16 >> 8, "the smallest class's key");
    assert_ne!(m.lkey(), k16, "with a new variant");
    let plan = mlx5::mr::plan_reg(&one, iova, 16).expect("plan");
    let t = m.translation_info();
    assert_eq!(
        (t.page_shift, t.mtt_entries, t.mtt_keys, t.klm_entries),
        (plan.tr.page_shift, 1, 1, 0),
        "the general plan's page size, one entry, one key"
    );
    sim.with_hca(|h| {
        let got = h
            .mkeys()
            .translate(m.lkey(), iova, 0x100, SimAccess::LOCAL_READ, pd.pdn())
            .expect("translates");
        assert_eq!(got, vec![(one[0].bus, 0x100)]);
        // One byte before and one past the region are outside the key.
        for (at, n) in [(iova - 1, 1), (iova + 0x100, 1)] {
            assert!(h
                .mkeys()
                .translate(m.lkey(), at, n, SimAccess::LOCAL_READ, pd.pdn())
                .is_err());
        }
    });
    let k = m.lkey();
    drop(m);
    assert_eq!(ctx.mkey_cache_len(), 3);
    // Enable the free key behind the cache's back: the next enabling UMR is refused.
    tamper(&ctx, pd.pdn(), k, buf.bus_addr());
    let cmds = ctx.commands_sent();
    // SAFETY: as above.
    let m = unsafe { pd.reg_phys(&one, iova, RW) }.expect("by command");
    assert!(ctx.commands_sent() > cmds, "CREATE_MKEY after the refusal");
    assert_eq!(ctx.mkey_cache_len(), 3, "the refused key came back");
    sim.with_hca(|h| {
        assert!(!h.mkeys().by_index(m.lkey() >> 8).expect("key").umr_en);
        let tampered = h.mkeys().by_index(k >> 8).expect("key");
        assert_eq!(
            (tampered.start, tampered.len),
            (0x1000, 4096),
            "the refused UMR changed nothing"
        );
        let got = h
            .mkeys()
            .translate(m.lkey(), iova, 0x100, SimAccess::LOCAL_READ, pd.pdn())
            .expect("translates");
        assert_eq!(got, vec![(one[0].bus, 0x100)]);
    });
    assert_eq!(m.translation_info().mtt_entries, 1);
}

/// Contiguous pieces merged: `(bus, len)` runs, so that translations compare whatever their
/// page size.
fn merged(v: Vec<(u64, usize)>) -> Vec<(u64, usize)> {
    let mut out: Vec<(u64, usize)> = Vec::new();
    for (a, n) in v {
        match out.last_mut() {
            Some(l) if l.0 + l.1 as u64 == a => l.1 += n,
            _ => out.push((a, n)),
        }
    }
    out
}

/// `reg_mr_batch` with the cache over every kind of region at once: one-page regions and a
/// three-chunk region from the cache (one UMR each), a 20-page region (too long to go inline)
/// and an unaligned region at an IOVA of another page offset (an indirect key) by command, a
/// zero-length and a badly flagged region refused with their typed errors. Every region
/// translates exactly its own bytes.
#[test]
fn a_mixed_batch_gives_every_region_its_registration() {
    use mlx5::mr::PhysChunk;
    use mlx5::InvalidInput;
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let pd = ctx.alloc_pd().expect("pd");
    ctx.enable_mkey_cache(4).expect("cache");
    let buf = hal.dma_alloc(64 * 4096, 4096).expect("buffer");
    let b = buf.bus_addr();
    let page = |i: u64| PhysChunk {
        bus: b + i * 4096,
        len: 4096,
    };
    let one_a = [page(0)];
    let three = [page(5), page(3), page(9)];
    let twenty: Vec<PhysChunk> = (20..40u64).rev().map(page).collect();
    let unaligned = [PhysChunk {
        bus: b + 41 * 4096 + 0x10,
        len: 0x100,
    }];
    let one_b = [page(50)];
    let empty = [PhysChunk { bus: b, len: 0 }];
    let regions: Vec<(&[PhysChunk], u64, AccessFlags)> = vec![
        (&one_a[..], 0x1000_0000, RW),
        (&three[..], 0x2000_0000, RW),
        (&twenty[..], 0x3000_0000, RW),
        (&unaligned[..], 0x4000_0123, RW),
        (&empty[..], 0x5000_0000, RW),
        (&one_b[..], 0x6000_0000, AccessFlags::REMOTE_WRITE), // without LOCAL_WRITE
        (&one_b[..], 0x7000_0000, RW),
    ];
    let pooled = ctx.mkey_cache_len();
    // SAFETY: `buf` outlives the regions.
    let r = unsafe { pd.reg_mr_batch(&regions) };
    assert_eq!(r.len(), regions.len());
    assert_eq!(
        r[4].as_ref().err(),
        Some(&Error::Invalid(InvalidInput::ZeroLength))
    );
    assert_eq!(
        r[5].as_ref().err(),
        Some(&Error::Invalid(InvalidInput::AccessFlags))
    );
    assert_eq!(
        ctx.mkey_cache_len(),
        pooled - 3,
        "three regions from the cache"
    );
    let info: Vec<(usize, usize)> = [0, 1, 2, 3, 6]
        .iter()
        .map(|&i| {
            let t = r[i].as_ref().expect("registered").translation_info();
            (t.mtt_entries, t.klm_entries)
        })
        .collect();
    assert_eq!(info[..3], [(1, 0), (3, 0), (20, 0)]);
    assert!(info[3].1 >= 1, "the unaligned region is an indirect key");
    assert_eq!(info[4], (1, 0));
    sim.with_hca(|h| {
        for (i, cached) in [(0, true), (1, true), (2, false), (3, false), (6, true)] {
            let m = r[i].as_ref().expect("registered");
            let k = h.mkeys().by_index(m.lkey() >> 8).expect("key");
            assert_eq!(k.umr_en, cached, "region {i}: from the cache or not");
            let (chunks, iova, _) = regions[i];
            let total: u64 = chunks.iter().map(|c| c.len).sum();
            let got = h
                .mkeys()
                .translate(m.lkey(), iova, total, SimAccess::LOCAL_READ, pd.pdn())
                .expect("translates");
            let want: Vec<(u64, usize)> = chunks.iter().map(|c| (c.bus, c.len as usize)).collect();
            assert_eq!(merged(got), merged(want), "region {i}");
            for (at, n) in [(iova - 1, 1), (iova + total, 1)] {
                assert!(
                    h.mkeys()
                        .translate(m.lkey(), at, n, SimAccess::LOCAL_READ, pd.pdn())
                        .is_err(),
                    "region {i}: outside its bytes at {at:#x}"
                );
            }
        }
    });
}
