use super::*;
use crate::memory::GuestMemory;

fn table_with(m: Mkey) -> MkeyTable {
    let mut t = MkeyTable::default();
    t.keys.insert(m.index, m);
    t
}

fn mtt_key(start: u64, len: u128, shift: u32, pages: &[u64], access: Access) -> Mkey {
    Mkey {
        index: 0x20,
        variant: 0x5a,
        pd: 3,
        qpn: ANY_QPN,
        access,
        start,
        len,
        free: false,
        umr_en: false,
        en_rinval: false,
        xlt_octowords: 0,
        translation: Translation::Mtt {
            page_shift: shift,
            entries: pages
                .iter()
                .map(|&addr| MttEntry::new(addr, true, true))
                .collect(),
        },
        mkc: [0; mkc::BYTES],
    }
}

const USER: KeyUser = KeyUser { pd: 3, qpn: 7 };
const KEY: u32 = 0x20 << 8 | 0x5a;

#[test]
fn mtt_translation_merges_contiguous_pages() {
    let lr = Access::LOCAL_READ;
    // start in the middle of the first 4 KiB page; pages 1 and 2 contiguous on the bus.
    let t = table_with(mtt_key(
        0x7000_0800,
        3 * 4096,
        12,
        &[0x10_0000, 0x20_0000, 0x20_1000, 0x30_0000],
        lr,
    ));
    let p = t.translate(KEY, 0x7000_0f00, 0x1200, lr, 3).unwrap();
    assert_eq!(p, vec![(0x10_0f00, 0x100), (0x20_0000, 0x1100)]);
    let p = t.translate(KEY, 0x7000_2000, 0x1800, lr, 3).unwrap();
    assert_eq!(p, vec![(0x20_1000, 0x1000), (0x30_0000, 0x800)]);
    // Last byte of the key is fine, one past is not.
    assert!(t.translate(KEY, 0x7000_37ff, 1, lr, 3).is_ok());
    assert_eq!(
        t.translate(KEY, 0x7000_37ff, 2, lr, 3),
        Err(MrFault::OutOfBounds)
    );
    assert_eq!(
        t.translate(KEY, 0x7000_07ff, 1, lr, 3),
        Err(MrFault::OutOfBounds)
    );
    // Wrap-around never passes.
    assert_eq!(
        t.translate(KEY, u64::MAX, 2, lr, 3),
        Err(MrFault::OutOfBounds)
    );
}

/// The pieces of every range of a paged key (page boundaries, one byte, whole key, runs
/// of bus-adjacent pages broken and not) are those of a page-by-page walk.
#[test]
fn mtt_pieces_match_a_page_by_page_walk() {
    let lr = Access::LOCAL_READ;
    let pages = [
        0x10_0000, 0x10_1000, 0x30_0000, 0x30_1000, 0x30_2000, 0x5000,
    ];
    let start = 0x7000_0800u64;
    let t = table_with(mtt_key(start, 6 * 4096 - 0x800, 12, &pages, lr));
    let walk = |va: u64, len: u64| {
        let mut v: Vec<(u64, usize)> = Vec::new();
        for a in va..va + len {
            let off = a - (start & !0xfff);
            let bus = pages[(off >> 12) as usize] + (off & 0xfff);
            match v.last_mut() {
                Some((s, l)) if *s + *l as u64 == bus => *l += 1,
                _ => v.push((bus, 1)),
            }
        }
        v
    };
    let end = start + 6 * 4096 - 0x800;
    let mut vas = vec![start, start + 1, end - 1];
    for p in 1..6u64 {
        let b = (start & !0xfff) + p * 4096;
        vas.extend([b - 1, b, b + 1]);
    }
    for &va in &vas {
        for len in [1u64, 2, 0x7ff, 0x800, 0xfff, 0x1000, 0x1001, 0x2000, 0x3801] {
            if va + len > end {
                continue;
            }
            let got = t.translate(KEY, va, len, lr, 3).unwrap();
            assert_eq!(got, walk(va, len), "va {va:#x} len {len:#x}");
        }
    }
    let all = t.translate(KEY, start, end - start, lr, 3).unwrap();
    assert_eq!(
        all,
        vec![(0x10_0800, 0x1800), (0x30_0000, 0x3000), (0x5000, 0x1000)]
    );
}

/// The per-page read and write enables of an MTT (UMR can clear them page by page): a
/// range is refused exactly when one of its pages lacks an enable the access needs.
#[test]
fn mtt_page_enables_refuse_exactly_the_pages_without_them() {
    let all = Access::LOCAL_READ
        .union(Access::LOCAL_WRITE)
        .union(Access::REMOTE_READ)
        .union(Access::REMOTE_WRITE)
        .union(Access::REMOTE_ATOMIC);
    let mut m = mtt_key(
        0x7000_0000,
        4 * 4096,
        12,
        &[0x1000, 0x2000, 0x3000, 0x4000],
        all,
    );
    // Page 1 without read, page 2 without write, page 3 without either.
    let enables = [(true, true), (false, true), (true, false), (false, false)];
    if let Translation::Mtt { entries, .. } = &mut m.translation {
        for (e, &(r, w)) in entries.iter_mut().zip(&enables) {
            *e = MttEntry::new(e.addr(), r, w);
        }
    }
    let t = table_with(m);
    let needs = [
        Access::LOCAL_READ,
        Access::LOCAL_WRITE,
        Access::REMOTE_READ,
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
    ];
    for first in 0..4u64 {
        for last in first..4u64 {
            let va = 0x7000_0000 + first * 4096 + 8;
            let len = (last - first) * 4096 + 8;
            for need in needs {
                let ok = (first..=last).all(|p| {
                    let (r, w) = enables[p as usize];
                    (!need.reads() || r) && (!need.writes() || w)
                });
                let got = t.translate(KEY, va, len, need, 3);
                if ok {
                    assert!(got.is_ok(), "pages {first}..={last} {need:?}: {got:?}");
                } else {
                    assert_eq!(
                        got,
                        Err(MrFault::PageAccessDenied),
                        "pages {first}..={last} {need:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn key_checks() {
    let t = table_with(mtt_key(
        0x1000,
        4096,
        12,
        &[0x5000],
        Access::LOCAL_READ.union(Access::REMOTE_READ),
    ));
    let ok = t.resolve(KEY, 0x1000, 16, Access::REMOTE_READ, USER);
    assert!(ok.is_ok());
    assert_eq!(
        t.resolve(KEY ^ 1, 0x1000, 16, Access::LOCAL_READ, USER)
            .err(),
        Some(MrFault::VariantMismatch)
    );
    assert_eq!(
        t.resolve(KEY + 0x100, 0x1000, 16, Access::LOCAL_READ, USER)
            .err(),
        Some(MrFault::UnknownKey)
    );
    assert_eq!(
        t.resolve(KEY, 0x1000, 16, Access::REMOTE_WRITE, USER).err(),
        Some(MrFault::AccessDenied)
    );
    assert_eq!(
        t.resolve(KEY, 0x1000, 16, Access::LOCAL_WRITE, USER).err(),
        Some(MrFault::AccessDenied)
    );
    let other_pd = KeyUser { pd: 4, qpn: 7 };
    assert_eq!(
        t.resolve(KEY, 0x1000, 16, Access::LOCAL_READ, other_pd)
            .err(),
        Some(MrFault::PdMismatch)
    );
}

#[test]
fn pa_key_and_length64() {
    let mut m = mtt_key(0, 1 << 64, 12, &[], Access::LOCAL_READ);
    m.translation = Translation::Pa;
    let t = table_with(m);
    assert_eq!(
        t.translate(KEY, 0xffff_ffff_ffff_f000, 0x1000, Access::LOCAL_READ, 3),
        Ok(vec![(0xffff_ffff_ffff_f000, 0x1000)])
    );
    assert_eq!(
        t.translate(KEY, 0xffff_ffff_ffff_f001, 0x1000, Access::LOCAL_READ, 3),
        Err(MrFault::OutOfBounds)
    );
}

#[test]
fn paged_buffer_offsets() {
    let mut pas = Vec::new();
    for a in [0x1000u64, 0x9000, 0x3000] {
        pas.extend_from_slice(&a.to_be_bytes());
    }
    // page_offset 32 of 4 KiB pages = 2048 bytes into the first page.
    let b = PagedBuffer::new(&pas, 0, 32, 8192).unwrap();
    let mem = crate::memory::RegionMemory::with_base(0x100000);
    mem.insert(0x1000, &[0u8; 4096]).unwrap();
    mem.insert(0x9000, &[0u8; 4096]).unwrap();
    mem.insert(0x3000, &[0u8; 4096]).unwrap();
    b.write(&mem, 2040, &[7u8; 16]).unwrap();
    assert_eq!(mem.read_u64_be(0x1ff8).unwrap(), 0x0707_0707_0707_0707);
    assert_eq!(mem.read_u64_be(0x9000).unwrap(), 0x0707_0707_0707_0707);
    assert!(b.write(&mem, 8190, &[0u8; 4]).is_err());
    assert_eq!(
        PagedBuffer::new(&pas[..16], 0, 32, 8192).err(),
        Some(PasError::TooFewPages)
    );
}

/// The key table's generation changes with every access that may change a key, stays
/// with reads, and no two tables (nor two states of one) share one.
#[test]
fn key_table_generation_moves_with_every_change() {
    let mut t = MkeyTable::default();
    let other = MkeyTable::default();
    let g0 = t.generation();
    assert_ne!(g0, other.generation());
    t.keys.insert(
        0x20,
        mtt_key(0x1000, 0x1000, 12, &[0x5000], Access::LOCAL_READ),
    );
    let g1 = t.generation();
    assert_ne!(g1, g0);
    let _ = t.resolve(KEY, 0x1000, 16, Access::LOCAL_READ, USER);
    let _ = t.by_index(0x20);
    assert_eq!(t.generation(), g1, "reads leave it");
    let _ = t.keys.get_mut(&0x20);
    let g2 = t.generation();
    assert_ne!(g2, g1);
    t.keys.values_mut().for_each(|_| ());
    let g3 = t.generation();
    assert_ne!(g3, g2);
    t.keys.remove(&0x20);
    let g4 = t.generation();
    assert_ne!(g4, g3);
    t.clear();
    assert!(![g0, g1, g2, g3, g4, other.generation()].contains(&t.generation()));
}

/// The key table finds each key by its index whatever page it lies in (the first index, a
/// page boundary, the last 24-bit index), replaces and removes exactly the one named,
/// counts them, frees a page with its last key (a later key there is found again), and lists
/// them in index order.
#[test]
fn key_map_finds_replaces_and_removes_exactly_the_key_named() {
    let key = |index: u32, start: u64| Mkey {
        index,
        ..mtt_key(start, 0x1000, 12, &[], Access::LOCAL_READ)
    };
    let mut t = MkeyTable::default();
    let indices = [FIRST_INDEX, 0xff, 0x100, 0x101, 0x1_0000, 0xff_ffff];
    for (n, &i) in indices.iter().enumerate() {
        assert!(t.keys.insert(i, key(i, n as u64)).is_none());
        assert_eq!(t.len(), n + 1);
    }
    for (n, &i) in indices.iter().enumerate() {
        assert_eq!(
            t.by_index(i).map(|m| (m.index, m.start)),
            Some((i, n as u64))
        );
        assert!(t.keys.contains_key(&i));
    }
    for i in [
        0,
        FIRST_INDEX + 1,
        0xfe,
        0x102,
        0x1ff,
        0xff_fffe,
        0x100_0000,
        u32::MAX,
    ] {
        assert!(t.by_index(i).is_none(), "index {i:#x}");
        assert!(t.keys.get_mut(&i).is_none());
        assert!(t.keys.remove(&i).is_none());
    }
    // Replacing returns the old key; the count stays.
    assert_eq!(
        t.keys.insert(0x100, key(0x100, 99)).map(|m| m.start),
        Some(2)
    );
    assert_eq!(t.len(), indices.len());
    if let Some(m) = t.keys.get_mut(&0x101) {
        m.start = 77;
    }
    assert_eq!(t.by_index(0x101).map(|m| m.start), Some(77));
    assert_eq!(t.by_index(0x100).map(|m| m.start), Some(99));
    // In index order.
    let order: Vec<u32> = t.iter().map(|m| m.index).collect();
    assert_eq!(order, indices);
    // The page of 0x100..0x1ff emptied (freed), then used again.
    assert_eq!(t.keys.remove(&0x100).map(|m| m.start), Some(99));
    assert_eq!(t.keys.remove(&0x101).map(|m| m.start), Some(77));
    assert!(t.by_index(0x100).is_none() && t.by_index(0x101).is_none());
    assert_eq!(t.len(), indices.len() - 2);
    assert!(t.keys.insert(0x1fe, key(0x1fe, 5)).is_none());
    assert_eq!(t.by_index(0x1fe).map(|m| m.start), Some(5));
    assert_eq!(t.by_index(0xff).map(|m| m.start), Some(1));
    for m in t.keys.values_mut() {
        m.free = true;
    }
    assert!(t.iter().all(|m| m.free) && t.iter().count() == t.len());
    t.clear();
    assert!(t.is_empty() && t.by_index(FIRST_INDEX).is_none() && t.iter().count() == 0);
}

/// The bulk decoding of an MTT entry is the entry of its address and enables: the low byte's
/// other bits dropped, the enables kept with `pg_access` and both set without.
#[test]
fn mtt_entry_from_raw_is_address_and_enables() {
    for addr in [0u64, 0x1000, 0x7fff_ffff_f000, 0xffff_ffff_ffff_f000] {
        for low in [0u64, 1, 2, 3, 0xfc, 0xfd, 0xfe, 0xff, 0x5a] {
            let raw = addr | low;
            for pg_access in [false, true] {
                let forced = if pg_access { 0 } else { 3 };
                let want = MttEntry::new(
                    addr,
                    !pg_access || raw & mkey::MTT_READ != 0,
                    !pg_access || raw & mkey::MTT_WRITE != 0,
                );
                let got = MttEntry::from_mtt(raw, forced);
                assert_eq!(got.0, want.0, "{raw:#x} pg_access {pg_access}");
            }
        }
    }
}
