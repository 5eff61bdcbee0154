//! Translation planning: the page size with the fewest entries for a list of chunks.

use crate::error::{InvalidInput, Result};

use alloc::vec::Vec;

use super::{Entries, MAX_MTT_ENTRIES, MAX_PAGE_SHIFT, MIN_PAGE_SHIFT};

/// A physically contiguous piece of memory: bus address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysChunk {
    /// Bus (IOVA) address of the first byte.
    pub bus: u64,
    /// Length in bytes.
    pub len: u64,
}

/// How a region is translated: page shift and one bus address per page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Translation {
    /// log2 of the page size (absolute; Linux ib/mr.c `reg_create`).
    pub page_shift: u32,
    /// The page addresses, in virtual order.
    pub entries: Entries,
}

/// The entries `chunks` at `iova` need at page size `2^s`, `None` when they cannot be
/// translated at that size: the per-chunk walk [`plan`] replaces by one formula (the tests'
/// reference, `planner_matches_trying_every_size`).
#[cfg(test)]
fn count_at(chunks: &[PhysChunk], iova: u64, s: u32) -> Option<u64> {
    let ps = 1u64 << s;
    let mask = ps - 1;
    let mut v = iova;
    let mut n = 0u64;
    let last = chunks.len().checked_sub(1)?;
    for (i, c) in chunks.iter().enumerate() {
        if c.len == 0 {
            return None;
        }
        // The chunk must not wrap the bus address space.
        c.bus.checked_add(c.len)?;
        // Same offset inside the page, virtually and physically.
        if (v & mask) != (c.bus & mask) {
            return None;
        }
        let end = v.checked_add(c.len)?;
        // Interior boundaries must be page boundaries.
        if i > 0 && v & mask != 0 {
            return None;
        }
        if i < last && end & mask != 0 {
            return None;
        }
        n = n.checked_add(end.div_ceil(ps) - (v >> s))?;
        v = end;
    }
    Some(n)
}

/// What one pass over the chunks finds ([`scan`]).
struct Scan {
    /// The largest page shift (at most [`MAX_PAGE_SHIFT`]) at which the chunks can be
    /// translated.
    smax: u32,
    /// The region's end: `iova` plus the chunks' lengths.
    end: u64,
    /// Each chunk's 4 KiB page, when every chunk lies within one 4 KiB page (a list of small
    /// pages): the translation at 4 KiB, written during the pass.
    small: Option<Vec<u64>>,
}

/// One pass over `chunks` at `iova`: the largest working page shift and the region's end,
/// `None` when not even 4 KiB works or a chunk is empty or wraps. The conditions are
/// gathered in bulk: every chunk's virtual-physical difference and every interior boundary
/// (the end of each chunk but the last: the next one starts there) OR'ed into one mask, as
/// Linux ib_umem_find_best_pgsz does; the lengths (less one) and the bus addresses OR'ed
/// into two words that bound them, which shows at the end that nothing wrapped (else
/// [`fits`] tests chunk by chunk). On the way each chunk's 4 KiB page is written down, which
/// is the whole translation of a list of small pages (a second pass then writes nothing); a
/// list of more chunks than [`MAX_MTT_ENTRIES`] writes none.
fn scan(chunks: &[PhysChunk], iova: u64) -> Option<Scan> {
    const MASK4K: u64 = (1 << MIN_PAGE_SHIFT) - 1;
    let (last, inner) = chunks.split_last()?;
    let spec = chunks.len() as u64 <= MAX_MTT_ENTRIES;
    let mut small = Vec::with_capacity(if spec { chunks.len() } else { 0 });
    // (v, mask, lengths less one, bus addresses), wrapping: exact when nothing wraps.
    let mut st = (iova, 0u64, 0u64, 0u64);
    // One chunk but the last; returns the physical 4 KiB page holding v (junk when the
    // offsets differ: then unused).
    let mut step = |c: &PhysChunk| -> u64 {
        let (v, m, lens, buses) = &mut st;
        let end = v.wrapping_add(c.len);
        *lens |= c.len.wrapping_sub(1);
        *buses |= c.bus;
        *m |= (*v ^ c.bus) | end;
        let page = c.bus.wrapping_sub(*v & MASK4K);
        *v = end;
        page
    };
    if spec {
        // Written as the pass goes (a length known in advance: no check per entry).
        small.extend(inner.iter().map(&mut step));
    } else {
        inner.iter().for_each(|c| {
            step(c);
        });
    }
    let (v, mut m, lens, buses) = st;
    let end = v.wrapping_add(last.len);
    // Every length in 1..=2^35 (an empty one is all ones less one), at most 2^28 of them:
    // their sum is in 1..=2^63, so the region wrapped exactly when it ends at or below
    // `iova`; bus addresses below 2^63 do not wrap with such a length. Else chunk by chunk.
    let bounded = (lens | last.len.wrapping_sub(1)) < 1 << 35
        && (buses | last.bus) < 1 << 63
        && chunks.len() as u64 <= 1 << 28;
    let wraps_not = (bounded && end > iova) || fits(chunks, iova);
    if !wraps_not {
        return None;
    }
    m |= v ^ last.bus;
    if spec {
        small.push(last.bus.wrapping_sub(v & MASK4K));
    }
    let smax = m.trailing_zeros().min(MAX_PAGE_SHIFT);
    if smax < MIN_PAGE_SHIFT {
        return None;
    }
    // The chunks' pages tile the region's at every working size (interior boundaries are
    // page boundaries), one page at least per chunk: as many 4 KiB pages as chunks exactly
    // when each chunk lies within one, and then `small` is the translation. No larger working
    // size needs fewer entries (one at least per chunk there too), and on a tie the smaller
    // size wins ([`fewest`]).
    let pages4k = end.div_ceil(1 << MIN_PAGE_SHIFT) - (iova >> MIN_PAGE_SHIFT);
    let one_each = spec && pages4k == chunks.len() as u64;
    Some(Scan {
        smax,
        end,
        small: one_each.then_some(small),
    })
}

/// True when every chunk is non-empty and wraps neither the bus address space nor, in
/// order from `iova`, the region's.
fn fits(chunks: &[PhysChunk], iova: u64) -> bool {
    let mut v = iova;
    chunks.iter().all(|c| {
        let ok = c.len != 0 && c.bus.checked_add(c.len).is_some();
        match v.checked_add(c.len) {
            Some(end) if ok => {
                v = end;
                true
            }
            _ => false,
        }
    })
}

/// The page size of [`plan`] for the region `[iova, end)` whose largest working page shift
/// is `smax`: the smallest size with the fewest entries ("the smallest page size that results
/// in the minimum number of required pages", Linux ib_umem_find_best_pgsz), and that count.
///
/// At every working size the chunks' boundaries inside the region are page boundaries, so
/// their pages tile the region's: the count at size `2^s` is the pages `[iova, end)` spans,
/// `ceil(end / 2^s) - floor(iova / 2^s)`, the per-chunk sum without walking the chunks. A
/// larger working size never needs more entries: bisection between 4 KiB and `smax`.
fn fewest(iova: u64, end: u64, smax: u32) -> Result<(u32, u64)> {
    let count = |s: u32| end.div_ceil(1u64 << s) - (iova >> s);
    let nmax = count(smax);
    let (mut lo, mut hi) = (MIN_PAGE_SHIFT, smax);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if count(mid) == nmax {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    // Bounded before anything is allocated for the list.
    if nmax > MAX_MTT_ENTRIES {
        return Err(InvalidInput::TooManyTranslations {
            entries: nmax,
            max: MAX_MTT_ENTRIES,
        }
        .into());
    }
    Ok((lo, nmax))
}

/// Plans the translation of `[iova, iova + total)` made of `chunks` in order: one pass to
/// find the largest working page size (`scan`), the size from a formula (`fewest`), one
/// pass writing the entries (none for a list of small pages: the scan wrote them).
pub fn plan(chunks: &[PhysChunk], iova: u64) -> Result<Translation> {
    plan_to(chunks, iova).map(|(t, _)| t)
}

/// [`plan`], and the region's end (`iova` plus the chunks' lengths, which it proved do not
/// wrap).
pub(super) fn plan_to(chunks: &[PhysChunk], iova: u64) -> Result<(Translation, u64)> {
    if let [c] = chunks {
        // `plan_one` refuses an `iova + len` that wraps.
        return plan_one(c, iova).map(|t| (t, iova.wrapping_add(c.len)));
    }
    let sc = scan(chunks, iova).ok_or(InvalidInput::PageList)?;
    let end = sc.end;
    let (s, n) = fewest(iova, end, sc.smax)?;
    if let Some(small) = sc.small {
        // `fewest` at a largest size of 4 KiB: 4 KiB, one entry per chunk.
        debug_assert_eq!((s, n), (MIN_PAGE_SHIFT, small.len() as u64));
        let t = Translation {
            page_shift: s,
            entries: small.into(),
        };
        return Ok((t, end));
    }
    let ps = 1u64 << s;
    let mut entries = Vec::with_capacity(n as usize);
    let mut v = iova;
    for c in chunks {
        let end = v + c.len;
        // Physical address of the page holding v.
        let first = c.bus - (v & (ps - 1));
        // The pages of [v, end) (`end > v`: no chunk is empty), by shifts: `ps` is a power
        // of two the compiler does not know of.
        let pages = ((end - 1) >> s) - (v >> s) + 1;
        if pages == 1 {
            entries.push(first);
        } else {
            // Past the last page this may wrap (a chunk ending in the top page); unused then.
            entries.extend((0..pages).map(|i| first.wrapping_add(i * ps)));
        }
        v = end;
    }
    let t = Translation {
        page_shift: s,
        entries: entries.into(),
    };
    Ok((t, end))
}

/// [`plan`] of one chunk (the common small registration), without the general walk: the
/// same conditions, sizes and entries (`one_chunk_plan_matches_the_general_walk`).
pub(super) fn plan_one(c: &PhysChunk, iova: u64) -> Result<Translation> {
    if c.len == 0 || c.bus.checked_add(c.len).is_none() {
        return Err(InvalidInput::PageList.into());
    }
    let end = iova.checked_add(c.len).ok_or(InvalidInput::PageList)?;
    // Same offset inside the page, virtually and physically (`scan` of one chunk).
    let smax = (iova ^ c.bus).trailing_zeros().min(MAX_PAGE_SHIFT);
    if smax < MIN_PAGE_SHIFT {
        return Err(InvalidInput::PageList.into());
    }
    let nmax = end.div_ceil(1u64 << smax) - (iova >> smax);
    if nmax == 1 {
        let (s, first) = one_page_of(c, iova, end);
        return Ok(Translation {
            page_shift: s,
            entries: Entries::one(first),
        });
    }
    let (lo, nmax) = fewest(iova, end, smax)?;
    let ps = 1u64 << lo;
    let first = c.bus - (iova & (ps - 1));
    // Past the last page this may wrap (a chunk ending in the top page); unused then.
    let entries: Vec<u64> = (0..nmax).map(|i| first.wrapping_add(i * ps)).collect();
    Ok(Translation {
        page_shift: lo,
        entries: entries.into(),
    })
}

/// One page (every small registration): the smallest size whose page holds both the first
/// and the last byte of `[iova, end)`, i.e. above the highest bit in which their addresses
/// differ (at most the largest size the chunk allows, whose single page holds them); the same
/// size the bisection of [`plan_one`] finds (`one_chunk_plan_matches_the_general_walk`).
/// `(page shift, the page's bus address)`.
#[inline]
fn one_page_of(c: &PhysChunk, iova: u64, end: u64) -> (u32, u64) {
    let s = one_page_shift(iova, end);
    (s, c.bus - (iova & ((1u64 << s) - 1)))
}

/// [`one_page_of`]'s page shift: the smallest (at least 4 KiB) whose page holds both the
/// first and the last byte of `[iova, end)` (`end > iova`).
#[inline]
fn one_page_shift(iova: u64, end: u64) -> u32 {
    let differ = iova ^ (end - 1);
    (u64::BITS - differ.leading_zeros()).max(MIN_PAGE_SHIFT)
}

/// [`plan`] of one chunk that one page translates: `Some((page shift, entry))` exactly when
/// `plan(&[*c], iova)` is a translation of one entry, and then that page size and entry
/// (`one_page_is_the_plan_of_one_entry`); `None` for everything else (more pages, or a
/// chunk `plan` refuses), which the general planner then handles.
#[inline]
pub(crate) fn one_page(c: &PhysChunk, iova: u64) -> Option<(u32, u64)> {
    if c.len == 0 {
        return None;
    }
    c.bus.checked_add(c.len)?;
    let end = iova.checked_add(c.len)?;
    // The largest page size the chunk allows: the same offset inside the page, virtually
    // and physically.
    let smax = (iova ^ c.bus).trailing_zeros().min(MAX_PAGE_SHIFT);
    // One page at that size (`plan_one`'s `nmax == 1`, with `smax` at least 4 KiB) exactly
    // when the smallest size whose page holds the first and the last byte (at least 4 KiB)
    // is not above it: the pages of size `smax` the region touches are those from
    // `iova >> smax` to `(end - 1) >> smax`, one when the two addresses differ in no bit at
    // or above `smax`.
    let s = one_page_shift(iova, end);
    if s > smax {
        return None;
    }
    // `iova` and `c.bus` agree in the low `smax` (>= s) bits: no underflow.
    Some((s, c.bus - (iova & ((1u64 << s) - 1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The general walk of `plan`, without the one-chunk shortcut.
    fn plan_walk(chunks: &[PhysChunk], iova: u64) -> Result<Translation> {
        let smax = scan(chunks, iova).ok_or(InvalidInput::PageList)?.smax;
        let nmax = count_at(chunks, iova, smax).ok_or(InvalidInput::PageList)?;
        let s = (MIN_PAGE_SHIFT..=smax)
            .find(|&s| count_at(chunks, iova, s) == Some(nmax))
            .ok_or(InvalidInput::PageList)?;
        let ps = 1u64 << s;
        let c = chunks[0];
        let first = c.bus - (iova & (ps - 1));
        Ok(Translation {
            page_shift: s,
            entries: (0..nmax).map(|i| first.wrapping_add(i * ps)).collect(),
        })
    }

    /// Offsets around page and huge-page edges (4 KiB, 2 MiB, 1 GiB), for the chunks' bus
    /// addresses and the IOVAs of the tests below.
    const EDGE_OFFS: [u64; 9] = [
        0,
        1,
        0x123,
        0xfff,
        0x1000,
        0x1_f000,
        0x20_0000,
        0x1f_ffff,
        0x4000_0000,
    ];

    /// [`one_page`] answers exactly for the one-chunk plans of one entry, with that plan's
    /// page size and entry, and stays out of everything else (more pages, refusals), over
    /// offsets, lengths and IOVAs around page and huge-page edges and the address-space top.
    #[test]
    fn one_page_is_the_plan_of_one_entry() {
        let offs = EDGE_OFFS;
        let lens = [
            0u64, 1, 0xfff, 0x1000, 0x1001, 0x2000, 0x2_0000, 0x20_0000, 0x20_0001,
        ];
        let bases = [0x8000_0000u64, u64::MAX - 0x1fff];
        let mut some = 0;
        for base in bases {
            for bus_off in offs {
                for iova_off in offs {
                    for len in lens {
                        let c = PhysChunk {
                            bus: base.wrapping_add(bus_off),
                            len,
                        };
                        for iova in [0x7f00_0000_0000 + iova_off, base.wrapping_add(iova_off)] {
                            let want = match plan(&[c], iova) {
                                Ok(t) if t.entries.len() == 1 => Some((t.page_shift, t.entries[0])),
                                _ => None,
                            };
                            assert_eq!(one_page(&c, iova), want, "{c:?} at {iova:#x}");
                            some += want.is_some() as usize;
                        }
                    }
                }
            }
        }
        assert!(some > 100, "the one-page case was exercised ({some})");
    }

    /// One chunk: the shortcut gives what the general walk gives (page size, entries, and
    /// the refusals), over offsets, lengths and IOVAs around page and huge-page edges.
    #[test]
    fn one_chunk_plan_matches_the_general_walk() {
        let offs = EDGE_OFFS;
        let lens = [
            1u64,
            0xfff,
            0x1000,
            0x1001,
            0x2_0000,
            0x20_0000,
            0x20_0001,
            0x4000_0000,
        ];
        for bus_off in offs {
            for iova_off in offs {
                for len in lens {
                    let c = [PhysChunk {
                        bus: 0x8000_0000 + bus_off,
                        len,
                    }];
                    let iova = 0x7f00_0000_0000 + iova_off;
                    let fast = plan(&c, iova);
                    let walk = plan_walk(&c, iova);
                    match (&fast, &walk) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "{bus_off:#x} {iova_off:#x} {len:#x}"),
                        (Err(_), Err(_)) => {}
                        _ => panic!("{bus_off:#x} {iova_off:#x} {len:#x}: {fast:?} vs {walk:?}"),
                    }
                }
            }
        }
        let empty = [PhysChunk {
            bus: 0x1000,
            len: 0,
        }];
        assert!(plan(&empty, 0x1000).is_err());
        let wraps = [PhysChunk {
            bus: u64::MAX - 0xfff,
            len: 0x2000,
        }];
        assert!(plan(&wraps, 0x1000).is_err());
    }

    #[test]
    fn contiguous_region_is_one_entry() {
        let t = plan(
            &[PhysChunk {
                bus: 0x4020_0000,
                len: 2 << 20,
            }],
            0x4020_0000,
        )
        .unwrap();
        assert_eq!(t.entries, alloc::vec![0x4020_0000]);
        assert_eq!(t.page_shift, 21);
        let t = plan(
            &[PhysChunk {
                bus: 0x1_0000_0000,
                len: 64 << 20,
            }],
            0x1_0000_0000,
        )
        .unwrap();
        assert_eq!(t.entries.len(), 1);
        assert_eq!(t.page_shift, 26);
        let t = plan(
            &[PhysChunk {
                bus: 0x4000_0000,
                len: 1 << 30,
            }],
            0x4000_0000,
        )
        .unwrap();
        assert_eq!((t.entries.len(), t.page_shift), (1, 30));
        // 4 GiB contiguous: four 1 GiB entries.
        let t = plan(
            &[PhysChunk {
                bus: 0x1_0000_0000,
                len: 4 << 30,
            }],
            0x1_0000_0000,
        )
        .unwrap();
        assert_eq!((t.entries.len(), t.page_shift), (4, 30));
    }

    #[test]
    fn huge_pages_are_one_entry_each() {
        let pages: Vec<PhysChunk> = [0x8000_0000u64, 0x4000_0000, 0x1_2340_0000]
            .iter()
            .map(|&b| PhysChunk {
                bus: b,
                len: 2 << 20,
            })
            .collect();
        let t = plan(&pages, 0x7f00_0000_0000).unwrap();
        assert_eq!(t.page_shift, 21);
        assert_eq!(
            t.entries,
            alloc::vec![0x8000_0000, 0x4000_0000, 0x1_2340_0000]
        );
    }

    #[test]
    fn small_pages_and_offsets() {
        // Two 4 KiB pages, scattered, region starting 0x100 into the first.
        let t = plan(
            &[
                PhysChunk {
                    bus: 0x5100,
                    len: 0xf00,
                },
                PhysChunk {
                    bus: 0x9000,
                    len: 0x800,
                },
            ],
            0x1100,
        )
        .unwrap();
        assert_eq!(t.page_shift, 12);
        assert_eq!(t.entries, alloc::vec![0x5000, 0x9000]);
        // Mismatched offsets cannot be translated.
        assert!(plan(
            &[PhysChunk {
                bus: 0x5100,
                len: 0x100
            }],
            0x1200
        )
        .is_err());
        // A chunk boundary inside a page cannot either.
        assert!(plan(
            &[
                PhysChunk {
                    bus: 0x5000,
                    len: 0x800
                },
                PhysChunk {
                    bus: 0x9800,
                    len: 0x800
                }
            ],
            0
        )
        .is_err());
    }

    #[test]
    fn absurd_plans_are_refused_before_allocating() {
        // A 2^62-byte chunk in 4 KiB pages would be a 2^50-entry list: refused, not allocated.
        let r = plan(
            &[PhysChunk {
                bus: 0x1000,
                len: 1 << 62,
            }],
            0x1000,
        );
        assert!(
            matches!(
                r,
                Err(crate::Error::Invalid(
                    InvalidInput::TooManyTranslations { .. }
                ))
            ),
            "{r:?}"
        );
        // A chunk in the top pages of the bus address space: planned without overflow.
        let t = plan(
            &[PhysChunk {
                bus: u64::MAX - 0x17ff,
                len: 0x1100,
            }],
            0x1800,
        )
        .unwrap();
        assert_eq!(t.entries, alloc::vec![u64::MAX - 0x1fff, u64::MAX - 0xfff]);
        // A chunk that wraps the bus address space cannot be translated.
        assert!(plan(
            &[PhysChunk {
                bus: u64::MAX - 0xfff,
                len: 0x2000,
            }],
            0
        )
        .is_err());
    }

    /// The translation by trying every page size with the per-chunk walk (`count_at`) and
    /// listing each chunk's pages: what `plan` was before it counted by formula and wrote
    /// the list in one pass.
    fn plan_reference(c: &[PhysChunk], iova: u64) -> Option<Translation> {
        let mut best: Option<(u64, u32)> = None;
        for s in MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT {
            if let Some(n) = count_at(c, iova, s) {
                if best.is_none_or(|(bn, _)| n < bn) {
                    best = Some((n, s));
                }
            }
        }
        let (_, s) = best?;
        let ps = 1u64 << s;
        let mut entries = Vec::new();
        let mut v = iova;
        for ch in c {
            let end = v + ch.len;
            let mut p = ch.bus - (v & (ps - 1));
            for _ in (v >> s)..end.div_ceil(ps) {
                entries.push(p);
                p = p.wrapping_add(ps);
            }
            v = end;
        }
        Some(Translation {
            page_shift: s,
            entries: entries.into(),
        })
    }

    /// Lists whose every chunk lies within one 4 KiB page (the scan writes their translation
    /// itself): the same translation as listing every chunk's pages, scattered or adjacent,
    /// with unaligned heads and tails, at IOVAs that allow larger page sizes, and the
    /// refusals (a gap inside a page, mismatched offsets).
    #[test]
    fn small_page_lists_match_the_reference() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut small = 0;
        for _ in 0..2000 {
            let n = 2 + (rnd() % 40) as usize;
            let adjacent = rnd() % 4 == 0;
            let base = (rnd() % (1 << 36)) << 12;
            let mut chunks: Vec<PhysChunk> = (0..n as u64)
                .map(|i| PhysChunk {
                    bus: if adjacent {
                        base + (i << 12)
                    } else {
                        (rnd() % (1 << 36)) << 12
                    },
                    len: 4096,
                })
                .collect();
            match rnd() % 4 {
                0 => {
                    let off = rnd() % 4096;
                    chunks[0].bus += off;
                    chunks[0].len -= off;
                }
                1 => {
                    let l = n - 1;
                    chunks[l].len -= rnd() % 4096;
                }
                // A chunk boundary inside a page: refused.
                2 if rnd() % 4 == 0 => chunks[n / 2].len -= 1 + rnd() % 4095,
                _ => {}
            }
            let iova = match rnd() % 3 {
                0 => chunks[0].bus,
                1 => ((rnd() % (1 << 30)) << 12) | (chunks[0].bus & 0xfff),
                // Mismatched offsets, most of the time.
                _ => rnd() % (1 << 45),
            };
            let got = plan(&chunks, iova).ok();
            assert_eq!(
                got,
                plan_reference(&chunks, iova),
                "{chunks:x?} at {iova:#x}"
            );
            small += got.is_some_and(|t| t.page_shift == MIN_PAGE_SHIFT) as usize;
        }
        assert!(small > 500, "lists of small pages were planned ({small})");
        // One-page chunks at a larger working size (8 KiB: offsets agree, the boundary is
        // 8 KiB-aligned): as many entries there, so 4 KiB, as the reference.
        let two = [
            PhysChunk {
                bus: 0x1_1800,
                len: 0x800,
            },
            PhysChunk {
                bus: 0x1_2000,
                len: 0x800,
            },
        ];
        let t = plan(&two, 0x1800).unwrap();
        assert_eq!(
            (t.page_shift, &t.entries[..]),
            (12, &[0x1_1000, 0x1_2000][..])
        );
        assert_eq!(Some(t), plan_reference(&two, 0x1800));
    }

    /// Layouts outside the scan's quick bounds (bus addresses from 2^63, chunks above 2^35
    /// bytes, empty chunks, wrapping the bus or the region's address space): decided chunk
    /// by chunk, as the reference does.
    #[test]
    fn layouts_beyond_the_quick_bounds_match_the_reference() {
        let c = |bus: u64, len: u64| PhysChunk { bus, len };
        let top = u64::MAX - 0xfff; // the last 4 KiB page
        let cases: [(&[PhysChunk], u64); 8] = [
            // High bus addresses, valid.
            (&[c(1 << 63, 0x1000), c((1 << 63) + 0x5000, 0x1000)], 0x1000),
            (&[c(top - 0x1000, 0x1000), c(top - 0x3000, 0x800)], 0x7000),
            // The last chunk ends at 2^64: wraps the bus space.
            (&[c(top - 0x1000, 0x1000), c(top, 0x1000)], 0x1000),
            // 64 GiB chunks (1 GiB pages), valid.
            (&[c(1 << 40, 1 << 36), c(1 << 38, 1 << 36)], 1 << 30),
            // An empty chunk among others.
            (
                &[c(0x1000, 0x1000), c(0x3000, 0), c(0x5000, 0x1000)],
                0x1000,
            ),
            // The region wraps past 2^64.
            (&[c(0x1000, 0x1000), c(0x3000, 0x1000)], u64::MAX - 0x1fff),
            (&[c(0x1000, 0x1000), c(0x3000, 0x1000)], u64::MAX - 0xfff),
            // Lengths that sum past 2^64 (each wraps nothing alone).
            (&[c(0x1000, 1 << 63), c(0x1000, 1 << 63)], 0x1000),
        ];
        for (chunks, iova) in cases {
            let got = plan(chunks, iova).ok();
            assert_eq!(
                got,
                plan_reference(chunks, iova),
                "{chunks:x?} at {iova:#x}"
            );
        }
        assert!(plan(cases[0].0, cases[0].1).is_ok());
        assert!(plan(cases[3].0, cases[3].1).is_ok());
    }

    /// The one-pass planner picks what trying every page size picks (fewest entries, the
    /// smallest size on a tie), on random layouts of mixed page sizes and offsets.
    #[test]
    fn planner_matches_trying_every_size() {
        let brute = |c: &[PhysChunk], iova: u64| {
            let mut best: Option<(u64, u32)> = None;
            for s in MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT {
                if let Some(n) = count_at(c, iova, s) {
                    if best.is_none_or(|(bn, _)| n < bn) {
                        best = Some((n, s));
                    }
                }
            }
            best
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..800 {
            let n = 1 + (rnd() % 5) as usize;
            let mut chunks = Vec::new();
            for _ in 0..n {
                let shift = [12u64, 16, 21, 30][(rnd() % 4) as usize];
                let pages = 1 + rnd() % 3;
                let bus = (rnd() % (1 << 40)) & !((1 << shift) - 1);
                chunks.push(PhysChunk {
                    bus,
                    len: pages << shift,
                });
            }
            // Sometimes an unaligned head or tail.
            if rnd() % 3 == 0 {
                let off = rnd() % chunks[0].len.min(4096);
                chunks[0].bus += off;
                chunks[0].len -= off;
            }
            if rnd() % 3 == 0 {
                let l = chunks.len() - 1;
                let cut = rnd() % chunks[l].len.min(4096);
                chunks[l].len -= cut;
            }
            let iova = match rnd() % 3 {
                0 => chunks[0].bus,
                1 => (rnd() % (1 << 45)) & !((1 << 30) - 1) | (chunks[0].bus & ((1 << 30) - 1)),
                _ => rnd() % (1 << 45),
            };
            let got = plan(&chunks, iova)
                .ok()
                .map(|t| (t.entries.len() as u64, t.page_shift));
            assert_eq!(got, brute(&chunks, iova), "{chunks:x?} at {iova:#x}");
            // The same entries as listing every chunk's pages at that size.
            assert_eq!(
                plan(&chunks, iova).ok(),
                plan_reference(&chunks, iova),
                "{chunks:x?} at {iova:#x}"
            );
        }
    }
}
