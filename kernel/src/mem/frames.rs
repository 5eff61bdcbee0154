//! Physical frame pools: 1 GiB, 2 MiB and 4 KiB, carved from the memory map.
//!
//! Each pool is a sorted list of disjoint free ranges whose bounds are multiples of the pool's
//! page size, so a request for N physically contiguous pages is a first-fit search. When a
//! smaller pool runs dry it splits one page of the next larger pool.

use boot::{MemoryKind, MemoryRegion};

pub const SIZE_4K: u64 = 1 << 12;
pub const SIZE_2M: u64 = 1 << 21;
pub const SIZE_1G: u64 = 1 << 30;

/// Memory below 1 MiB holds real-mode structures and the BIOS; it is never handed out.
pub const LOW_MEMORY_END: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PageSize {
    Size4K,
    Size2M,
    Size1G,
}

impl PageSize {
    pub const fn bytes(self) -> u64 {
        match self {
            PageSize::Size4K => SIZE_4K,
            PageSize::Size2M => SIZE_2M,
            PageSize::Size1G => SIZE_1G,
        }
    }
}

/// The request could not be met; nothing was allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    pub page_size: PageSize,
    pub pages: u64,
}

impl core::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "out of memory: {} contiguous {:?} pages",
            self.pages, self.page_size
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    pub const fn new(start: u64, end: u64) -> Self {
        Range { start, end }
    }
    pub const fn len(&self) -> u64 {
        self.end - self.start
    }
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

const fn align_up(x: u64, a: u64) -> u64 {
    (x + a - 1) & !(a - 1)
}
const fn align_down(x: u64, a: u64) -> u64 {
    x & !(a - 1)
}

/// A sorted, coalesced set of free ranges with a fixed capacity (no heap: the pools exist
/// before the heap does).
#[derive(Clone)]
pub struct RangeSet<const N: usize> {
    ranges: [Range; N],
    len: usize,
}

impl<const N: usize> Default for RangeSet<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> RangeSet<N> {
    pub const fn new() -> Self {
        RangeSet {
            ranges: [Range::new(0, 0); N],
            len: 0,
        }
    }

    pub fn ranges(&self) -> &[Range] {
        &self.ranges[..self.len]
    }

    pub fn total(&self) -> u64 {
        self.ranges().iter().map(Range::len).sum()
    }

    /// Adds a free range, merging with neighbours. Returns false when the set is full and the
    /// range could not be recorded (the memory is then lost to the allocator, not corrupted).
    pub fn insert(&mut self, r: Range) -> bool {
        if r.is_empty() {
            return true;
        }
        let pos = self.ranges().partition_point(|x| x.start < r.start);
        debug_assert!(
            pos == 0 || self.ranges[pos - 1].end <= r.start,
            "double free"
        );
        debug_assert!(
            pos == self.len || r.end <= self.ranges[pos].start,
            "double free"
        );
        let merge_prev = pos > 0 && self.ranges[pos - 1].end == r.start;
        let merge_next = pos < self.len && self.ranges[pos].start == r.end;
        match (merge_prev, merge_next) {
            (true, true) => {
                self.ranges[pos - 1].end = self.ranges[pos].end;
                self.remove(pos);
            }
            (true, false) => self.ranges[pos - 1].end = r.end,
            (false, true) => self.ranges[pos].start = r.start,
            (false, false) => {
                if self.len == N {
                    return false;
                }
                self.ranges.copy_within(pos..self.len, pos + 1);
                self.ranges[pos] = r;
                self.len += 1;
            }
        }
        true
    }

    fn remove(&mut self, pos: usize) {
        self.ranges.copy_within(pos + 1..self.len, pos);
        self.len -= 1;
    }

    /// Takes `size` bytes aligned to `align` at or above `min_addr`, first fit.
    pub fn take(&mut self, size: u64, align: u64, min_addr: u64) -> Option<u64> {
        for i in 0..self.len {
            let r = self.ranges[i];
            let start = align_up(r.start.max(min_addr), align);
            let Some(end) = start.checked_add(size) else {
                continue;
            };
            if end > r.end {
                continue;
            }
            let head = Range::new(r.start, start);
            let tail = Range::new(end, r.end);
            match (head.is_empty(), tail.is_empty()) {
                (true, true) => self.remove(i),
                (true, false) => self.ranges[i] = tail,
                (false, true) => self.ranges[i] = head,
                (false, false) => {
                    if self.len == N {
                        continue; // cannot split here without losing memory; try further on
                    }
                    self.ranges[i] = head;
                    self.ranges.copy_within(i + 1..self.len, i + 2);
                    self.ranges[i + 1] = tail;
                    self.len += 1;
                }
            }
            return Some(start);
        }
        None
    }
}

/// Totals for the boot report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    pub usable_bytes: u64,
    pub free_4k_bytes: u64,
    pub free_2m: u64,
    pub free_1g: u64,
}

pub struct FramePools {
    small: RangeSet<256>,
    huge_2m: RangeSet<128>,
    huge_1g: RangeSet<64>,
    usable_bytes: u64,
}

impl FramePools {
    /// Carves the usable memory of `map` into the three pools, leaving out `excluded` ranges
    /// (kernel image, loader structures) and everything below 1 MiB.
    pub fn new(map: &[MemoryRegion], excluded: &[Range]) -> Self {
        let mut pools = FramePools {
            small: RangeSet::new(),
            huge_2m: RangeSet::new(),
            huge_1g: RangeSet::new(),
            usable_bytes: 0,
        };
        for region in map.iter().filter(|r| r.kind == MemoryKind::Usable) {
            pools.usable_bytes += region.len;
            let start = align_up(region.start.max(LOW_MEMORY_END), SIZE_4K);
            let end = align_down(region.end(), SIZE_4K);
            if start < end {
                pools.add_free(Range::new(start, end), excluded);
            }
        }
        pools
    }

    /// Adds `r` minus the excluded ranges.
    fn add_free(&mut self, r: Range, excluded: &[Range]) {
        // Cut the range at every excluded interval; recursion depth is bounded by excluded.len().
        for (i, ex) in excluded.iter().enumerate() {
            let ex_start = align_down(ex.start, SIZE_4K);
            let ex_end = align_up(ex.end, SIZE_4K);
            if ex_start < r.end && r.start < ex_end {
                let rest = &excluded[i + 1..];
                self.add_free(Range::new(r.start, ex_start.max(r.start)), rest);
                self.add_free(Range::new(ex_end.min(r.end), r.end), rest);
                return;
            }
        }
        self.carve(r);
    }

    /// Splits a free range into 4K head, 2M run up to 1G alignment, 1G pages, 2M run, 4K tail.
    fn carve(&mut self, r: Range) {
        if r.is_empty() {
            return;
        }
        let s2 = align_up(r.start, SIZE_2M).min(r.end);
        let e2 = align_down(r.end, SIZE_2M).max(s2);
        self.small.insert(Range::new(r.start, s2));
        self.small.insert(Range::new(e2, r.end));
        let s1 = align_up(s2, SIZE_1G).min(e2);
        let e1 = align_down(e2, SIZE_1G).max(s1);
        self.huge_2m.insert(Range::new(s2, s1));
        self.huge_2m.insert(Range::new(e1, e2));
        self.huge_1g.insert(Range::new(s1, e1));
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            usable_bytes: self.usable_bytes,
            free_4k_bytes: self.small.total(),
            free_2m: self.huge_2m.total() / SIZE_2M,
            free_1g: self.huge_1g.total() / SIZE_1G,
        }
    }

    /// `pages` physically contiguous pages of `size`, anywhere.
    pub fn alloc(&mut self, size: PageSize, pages: u64) -> Result<u64, OutOfMemory> {
        self.alloc_aligned_above(size, pages, size.bytes(), 0)
    }

    /// `pages` contiguous pages of `size`, aligned to `align` (at least the page size), at or
    /// above `min_addr`. A pool that is short splits a page of the next larger pool.
    pub fn alloc_aligned_above(
        &mut self,
        size: PageSize,
        pages: u64,
        align: u64,
        min_addr: u64,
    ) -> Result<u64, OutOfMemory> {
        let oom = OutOfMemory {
            page_size: size,
            pages,
        };
        let bytes = pages.checked_mul(size.bytes()).ok_or(oom)?;
        if pages == 0 || !align.is_power_of_two() {
            return Err(oom);
        }
        let align = align.max(size.bytes());
        loop {
            let got = match size {
                PageSize::Size4K => self.small.take(bytes, align, min_addr),
                PageSize::Size2M => self.huge_2m.take(bytes, align, min_addr),
                PageSize::Size1G => self.huge_1g.take(bytes, align, min_addr),
            };
            if let Some(addr) = got {
                return Ok(addr);
            }
            // Refill from the next pool up with enough room for the whole request.
            match size {
                PageSize::Size1G => return Err(oom),
                PageSize::Size2M => {
                    let n = bytes.div_ceil(SIZE_1G);
                    let a = self
                        .huge_1g
                        .take(n * SIZE_1G, SIZE_1G, min_addr)
                        .ok_or(oom)?;
                    self.huge_2m.insert(Range::new(a, a + n * SIZE_1G));
                }
                PageSize::Size4K => {
                    let n = bytes.div_ceil(SIZE_2M);
                    let a = self
                        .alloc_aligned_above(PageSize::Size2M, n, SIZE_2M, min_addr)
                        .map_err(|_| oom)?;
                    self.small.insert(Range::new(a, a + n * SIZE_2M));
                }
            }
        }
    }

    /// Returns pages to their pool. The caller passes what it was given.
    pub fn free(&mut self, addr: u64, size: PageSize, pages: u64) {
        let r = Range::new(addr, addr + pages * size.bytes());
        let recorded = match size {
            PageSize::Size4K => self.small.insert(r),
            PageSize::Size2M => self.huge_2m.insert(r),
            PageSize::Size1G => self.huge_1g.insert(r),
        };
        if !recorded {
            log::warn!("frame pool full: {:#x}+{:#x} leaked", r.start, r.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usable(start: u64, len: u64) -> MemoryRegion {
        MemoryRegion {
            start,
            len,
            kind: MemoryKind::Usable,
        }
    }

    /// QEMU q35 with 5 GiB: 2 GiB below the hole, 3 GiB above 4 GiB.
    fn q35_5g() -> [MemoryRegion; 4] {
        [
            usable(0, 0x9fc00),
            MemoryRegion {
                start: 0x9fc00,
                len: 0x400,
                kind: MemoryKind::Reserved,
            },
            usable(0x100000, 0x8000_0000 - 0x100000),
            usable(0x1_0000_0000, 3 << 30),
        ]
    }

    #[test]
    fn carving_respects_low_memory_kernel_and_alignment() {
        let kernel = Range::new(0x100000, 0x180000);
        let pools = FramePools::new(&q35_5g(), &[kernel]);
        let st = pools.stats();
        assert_eq!(
            st.usable_bytes,
            0x9fc00 + 0x8000_0000 - 0x100000 + (3 << 30)
        );
        // Low RAM: 1.5 MiB of 4K (0x180000..0x200000 is 0.5 MiB), then 2M pages to 1 GiB,
        // one 1 GiB page at 1 GiB; high RAM: 3 x 1 GiB.
        assert_eq!(st.free_4k_bytes, 0x200000 - 0x180000);
        assert_eq!(st.free_2m, (SIZE_1G - SIZE_2M) / SIZE_2M);
        assert_eq!(st.free_1g, 4);
        // Nothing handed out overlaps the kernel or low memory.
        for r in pools
            .small
            .ranges()
            .iter()
            .chain(pools.huge_2m.ranges())
            .chain(pools.huge_1g.ranges())
        {
            assert!(r.start >= 0x180000, "{r:?}");
        }
    }

    #[test]
    fn excluded_range_in_the_middle_splits_pools() {
        let map = [usable(0, 64 << 20)];
        let hole = Range::new(0x0100_1000, 0x0100_3000); // inside a 2M page at 16 MiB
        let pools = FramePools::new(&map, &[hole]);
        for r in pools.small.ranges().iter().chain(pools.huge_2m.ranges()) {
            assert!(r.end <= hole.start || r.start >= hole.end, "{r:?} overlaps");
        }
        // 1..2 MiB is 4K frames; the 2M page holding the hole became 4K frames around it.
        assert_eq!(pools.stats().free_4k_bytes, 0x10_0000 + SIZE_2M - 0x2000);
    }

    #[test]
    fn alloc_above_4g_and_splitting() {
        let mut pools = FramePools::new(&q35_5g(), &[]);
        let a = pools
            .alloc_aligned_above(PageSize::Size2M, 1, SIZE_2M, 4 << 30)
            .unwrap();
        assert!(a >= 4 << 30 && a.is_multiple_of(SIZE_2M));
        // That split a 1G page: 511 more 2M pages appeared.
        assert_eq!(pools.stats().free_1g, 3);
        let b = pools.alloc(PageSize::Size1G, 2).unwrap();
        assert_eq!(b % SIZE_1G, 0);
        pools.free(b, PageSize::Size1G, 2);
        pools.free(a, PageSize::Size2M, 1);
        assert_eq!(pools.stats().free_1g, 3);
    }

    #[test]
    fn small_allocations_with_alignment() {
        let mut pools = FramePools::new(&[usable(0, 16 << 20)], &[]);
        let x = pools.alloc(PageSize::Size4K, 1).unwrap();
        let y = pools
            .alloc_aligned_above(PageSize::Size4K, 3, 0x10000, 0)
            .unwrap();
        assert_eq!(y % 0x10000, 0);
        assert_ne!(x, y);
        pools.free(x, PageSize::Size4K, 1);
        pools.free(y, PageSize::Size4K, 3);
    }

    #[test]
    fn out_of_memory_is_an_error_and_changes_nothing() {
        let mut pools = FramePools::new(&[usable(0, 8 << 20)], &[]);
        let before = pools.stats();
        assert_eq!(
            pools.alloc(PageSize::Size1G, 1),
            Err(OutOfMemory {
                page_size: PageSize::Size1G,
                pages: 1
            })
        );
        assert!(pools.alloc(PageSize::Size2M, 100).is_err());
        assert!(pools.alloc(PageSize::Size4K, u64::MAX).is_err());
        assert!(pools.alloc(PageSize::Size4K, 0).is_err());
        assert_eq!(pools.stats(), before);
    }

    #[test]
    fn rangeset_merges_neighbours() {
        let mut s: RangeSet<4> = RangeSet::new();
        assert!(s.insert(Range::new(0x3000, 0x4000)));
        assert!(s.insert(Range::new(0x1000, 0x2000)));
        assert!(s.insert(Range::new(0x2000, 0x3000)));
        assert_eq!(s.ranges(), &[Range::new(0x1000, 0x4000)]);
        assert_eq!(s.take(0x1000, 0x1000, 0x2000), Some(0x2000));
        assert_eq!(
            s.ranges(),
            &[Range::new(0x1000, 0x2000), Range::new(0x3000, 0x4000)]
        );
    }
}
