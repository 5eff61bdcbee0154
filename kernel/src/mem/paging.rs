//! Identity page tables (virt == phys) built with the largest pages that fit.
//!
//! The builder is independent of where tables live: a [`TableStore`] hands out zeroed 4 KiB
//! tables and gives access to them by physical address. On the target that is the frame pool
//! through the identity map; host tests use heap-backed tables.

use x86_64::structures::paging::{PageTable, PageTableFlags as F};
use x86_64::PhysAddr;

use super::frames::{OutOfMemory, SIZE_1G, SIZE_2M, SIZE_4K};

/// Memory type of a mapping, through the PAT layout set by [`PAT_VALUE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    /// RAM.
    WriteBack,
    /// MMIO registers (PCD | PWT -> PAT entry 3 = UC).
    Uncached,
    /// Doorbell / BlueFlame pages (PWT -> PAT entry 1 = WC).
    WriteCombining,
}

/// IA32_PAT (MSR 0x277) value: the power-on default (Intel SDM Vol. 3, 13.12.4, "PAT
/// initialization") except entry 1, which becomes write-combining, as Linux does.
/// Entries from 0: WB(06) WC(01) UC-(07) UC(00) WB(06) WT(04) UC-(07) UC(00).
pub const PAT_VALUE: u64 = 0x0007_0406_0007_0106;

impl Cache {
    fn flags(self) -> F {
        match self {
            Cache::WriteBack => F::empty(),
            Cache::Uncached => F::NO_CACHE | F::WRITE_THROUGH,
            Cache::WriteCombining => F::WRITE_THROUGH,
        }
    }
}

const CACHE_MASK: F = F::NO_CACHE.union(F::WRITE_THROUGH);

/// Where page tables live.
pub trait TableStore {
    /// A zeroed, 4 KiB-aligned table's physical address.
    fn alloc_table(&mut self) -> Result<u64, OutOfMemory>;
    /// The table at `phys`, which came from `alloc_table`.
    fn table(&mut self, phys: u64) -> &mut PageTable;
}

/// Counts of leaf entries written, for the boot log and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapStats {
    pub pages_1g: u64,
    pub pages_2m: u64,
    pub pages_4k: u64,
}

pub struct IdentityMap {
    pml4: u64,
    use_1g: bool,
}

fn index(addr: u64, level: u32) -> usize {
    ((addr >> (12 + 9 * (level - 1))) & 0x1ff) as usize
}

impl IdentityMap {
    pub fn new(store: &mut impl TableStore, use_1g: bool) -> Result<Self, OutOfMemory> {
        Ok(IdentityMap {
            pml4: store.alloc_table()?,
            use_1g,
        })
    }

    /// Physical address of the PML4, for CR3.
    pub fn root(&self) -> u64 {
        self.pml4
    }

    pub fn uses_1g_pages(&self) -> bool {
        self.use_1g
    }

    /// Maps `[start, end)` (rounded out to 4 KiB) with `cache`, replacing what was there and
    /// splitting larger pages that straddle the bounds.
    pub fn map(
        &mut self,
        store: &mut impl TableStore,
        start: u64,
        end: u64,
        cache: Cache,
    ) -> Result<MapStats, OutOfMemory> {
        let mut stats = MapStats::default();
        let mut addr = start & !(SIZE_4K - 1);
        let end = (end + SIZE_4K - 1) & !(SIZE_4K - 1);
        let leaf = F::PRESENT | F::WRITABLE | cache.flags();
        while addr < end {
            let left = end - addr;
            let size = if self.use_1g && addr.is_multiple_of(SIZE_1G) && left >= SIZE_1G {
                SIZE_1G
            } else if addr.is_multiple_of(SIZE_2M) && left >= SIZE_2M {
                SIZE_2M
            } else {
                SIZE_4K
            };
            let level = match size {
                SIZE_1G => 3,
                SIZE_2M => 2,
                _ => 1,
            };
            let table = self.walk_to(store, addr, level)?;
            let entry = &mut store.table(table)[index(addr, level)];
            let flags = if level > 1 { leaf | F::HUGE_PAGE } else { leaf };
            entry.set_addr(PhysAddr::new(addr), flags);
            match level {
                3 => stats.pages_1g += 1,
                2 => stats.pages_2m += 1,
                _ => stats.pages_4k += 1,
            }
            addr += size;
        }
        Ok(stats)
    }

    /// The table at `level` (3 = PDPT, 2 = PD, 1 = PT) covering `addr`, creating tables and
    /// splitting huge pages on the way down.
    fn walk_to(
        &mut self,
        store: &mut impl TableStore,
        addr: u64,
        level: u32,
    ) -> Result<u64, OutOfMemory> {
        let mut table = self.pml4;
        for l in (level + 1..=4).rev() {
            let i = index(addr, l);
            let entry = store.table(table)[i].clone();
            let flags = entry.flags();
            let next = if !flags.contains(F::PRESENT) {
                let t = store.alloc_table()?;
                store.table(table)[i].set_addr(PhysAddr::new(t), F::PRESENT | F::WRITABLE);
                t
            } else if flags.contains(F::HUGE_PAGE) {
                // Split: the new table repeats the huge page's mapping with the next size down.
                let t = store.alloc_table()?;
                let base = entry.addr().as_u64();
                let child = 1u64 << (12 + 9 * (l - 2));
                let child_flags = if l - 1 > 1 {
                    flags
                } else {
                    flags - F::HUGE_PAGE
                };
                let keep = child_flags & (CACHE_MASK | F::PRESENT | F::WRITABLE | F::HUGE_PAGE);
                for (j, e) in store.table(t).iter_mut().enumerate() {
                    e.set_addr(PhysAddr::new(base + j as u64 * child), keep);
                }
                store.table(table)[i].set_addr(PhysAddr::new(t), F::PRESENT | F::WRITABLE);
                t
            } else {
                entry.addr().as_u64()
            };
            table = next;
        }
        Ok(table)
    }

    /// Walks the tables for `addr`: the mapped physical address, page size and cache type.
    pub fn translate(&self, store: &mut impl TableStore, addr: u64) -> Option<(u64, u64, Cache)> {
        let mut table = self.pml4;
        for l in (1..=4).rev() {
            let e = store.table(table)[index(addr, l)].clone();
            let flags = e.flags();
            if !flags.contains(F::PRESENT) {
                return None;
            }
            if l == 1 || flags.contains(F::HUGE_PAGE) {
                let size = 1u64 << (12 + 9 * (l - 1));
                let cache = match (
                    flags.contains(F::NO_CACHE),
                    flags.contains(F::WRITE_THROUGH),
                ) {
                    (true, true) => Cache::Uncached,
                    (false, true) => Cache::WriteCombining,
                    _ => Cache::WriteBack,
                };
                return Some((e.addr().as_u64() + (addr & (size - 1)), size, cache));
            }
            table = e.addr().as_u64();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct HeapTables {
        tables: HashMap<u64, Box<PageTable>>,
        next: u64,
    }

    impl TableStore for HeapTables {
        fn alloc_table(&mut self) -> Result<u64, OutOfMemory> {
            self.next += SIZE_4K;
            let phys = 0x7000_0000_0000 + self.next;
            self.tables.insert(phys, Box::new(PageTable::new()));
            Ok(phys)
        }
        fn table(&mut self, phys: u64) -> &mut PageTable {
            self.tables.get_mut(&phys).expect("unknown table")
        }
    }

    #[test]
    fn uses_1g_pages_when_allowed() {
        let mut s = HeapTables::default();
        let mut m = IdentityMap::new(&mut s, true).unwrap();
        let st = m.map(&mut s, 0, 4 << 30, Cache::WriteBack).unwrap();
        assert_eq!(
            st,
            MapStats {
                pages_1g: 4,
                pages_2m: 0,
                pages_4k: 0
            }
        );
        assert_eq!(
            m.translate(&mut s, 0x1234_5678),
            Some((0x1234_5678, SIZE_1G, Cache::WriteBack))
        );
        assert_eq!(s.tables.len(), 2); // PML4 + PDPT
    }

    #[test]
    fn uses_2m_pages_without_1g_support() {
        let mut s = HeapTables::default();
        let mut m = IdentityMap::new(&mut s, false).unwrap();
        let st = m.map(&mut s, 0, 5 << 30, Cache::WriteBack).unwrap();
        assert_eq!(st.pages_2m, 5 * 512);
        assert_eq!(st.pages_1g, 0);
        assert_eq!(
            m.translate(&mut s, (4 << 30) + 0x10),
            Some(((4 << 30) + 0x10, SIZE_2M, Cache::WriteBack))
        );
    }

    #[test]
    fn remapping_splits_huge_pages_and_keeps_neighbours() {
        let mut s = HeapTables::default();
        let mut m = IdentityMap::new(&mut s, true).unwrap();
        m.map(&mut s, 0, 4 << 30, Cache::Uncached).unwrap();
        // RAM from 1 MiB to 0xbffe_0000 becomes write-back: edges need 4K pages.
        let st = m
            .map(&mut s, 0x10_0000, 0xbffe_0000, Cache::WriteBack)
            .unwrap();
        assert!(st.pages_4k > 0 && st.pages_2m > 0 && st.pages_1g == 1);
        assert_eq!(
            m.translate(&mut s, 0x5000).map(|t| t.2),
            Some(Cache::Uncached)
        );
        assert_eq!(
            m.translate(&mut s, 0x10_0000),
            Some((0x10_0000, SIZE_4K, Cache::WriteBack))
        );
        assert_eq!(
            m.translate(&mut s, 0x4000_0000),
            Some((0x4000_0000, SIZE_1G, Cache::WriteBack))
        );
        assert_eq!(
            m.translate(&mut s, 0xbffe_0000).map(|t| t.2),
            Some(Cache::Uncached)
        );
        assert_eq!(
            m.translate(&mut s, 0xbffd_f000).map(|t| t.2),
            Some(Cache::WriteBack)
        );
        assert_eq!(
            m.translate(&mut s, 0xfee0_0000),
            Some((0xfee0_0000, SIZE_1G, Cache::Uncached))
        );
        // A write-combining doorbell page inside an uncached BAR.
        m.map(&mut s, 0xfe00_1000, 0xfe00_2000, Cache::WriteCombining)
            .unwrap();
        assert_eq!(
            m.translate(&mut s, 0xfe00_1800),
            Some((0xfe00_1800, SIZE_4K, Cache::WriteCombining))
        );
        assert_eq!(
            m.translate(&mut s, 0xfe00_2000).map(|t| t.2),
            Some(Cache::Uncached)
        );
    }

    #[test]
    fn far_mappings_get_their_own_tables() {
        let mut s = HeapTables::default();
        let mut m = IdentityMap::new(&mut s, false).unwrap();
        m.map(
            &mut s,
            0x80_0000_0000,
            0x80_0000_0000 + 32 * 1024 * 1024,
            Cache::Uncached,
        )
        .unwrap();
        assert!(m.translate(&mut s, 0x80_0000_0000).is_some());
        assert!(m.translate(&mut s, 0x40_0000_0000).is_none());
        assert!(m.translate(&mut s, 0x80_0200_0000).is_none());
    }
}
