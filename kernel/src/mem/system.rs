//! The machine's memory, set up once at boot: frame pools, the live identity map, the heap,
//! and DMA buffers for drivers.

use boot::{BootInfo, MemoryKind};
use spin::Mutex;
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::{PageTable, PhysFrame};
use x86_64::PhysAddr;

use super::frames::{
    FramePools, OutOfMemory, PageSize, PoolStats, Range, SIZE_1G, SIZE_2M, SIZE_4K,
};
use super::paging::{Cache, IdentityMap, MapStats, TableStore};

static FRAMES: Mutex<Option<FramePools>> = Mutex::new(None);
static PAGING: Mutex<Option<IdentityMap>> = Mutex::new(None);

#[global_allocator]
static HEAP: linked_list_allocator::LockedHeap = linked_list_allocator::LockedHeap::empty();

extern "C" {
    static __kernel_start: u8;
    static __kernel_end: u8;
}

/// Page tables come from the 4 KiB pool and are reached through the identity map.
struct PoolTables<'a>(&'a mut FramePools);

impl TableStore for PoolTables<'_> {
    fn alloc_table(&mut self) -> Result<u64, OutOfMemory> {
        let phys = self.0.alloc(PageSize::Size4K, 1)?;
        // SAFETY: the frame was just taken from the pool (nobody else owns it) and lies in RAM
        // that is identity-mapped by both the early and the final tables.
        unsafe { core::ptr::write_bytes(phys as *mut u8, 0, SIZE_4K as usize) };
        Ok(phys)
    }

    fn table(&mut self, phys: u64) -> &mut PageTable {
        // SAFETY: `phys` came from alloc_table above, so it is an identity-mapped, 4 KiB-aligned
        // frame owned by the page tables; the PAGING lock serialises all access.
        unsafe { &mut *(phys as *mut PageTable) }
    }
}

/// What memory setup found, for the boot report.
#[derive(Clone, Copy, Debug)]
pub struct MemoryReport {
    pub pools: PoolStats,
    pub pages_1g: bool,
    pub map: MapStats,
    pub heap_bytes: u64,
}

/// Builds the pools and the identity map, switches CR3, and starts the heap.
pub fn init(info: &BootInfo, use_1g: bool) -> Result<MemoryReport, OutOfMemory> {
    // Linker-script symbols: only their addresses are used.
    let kernel = Range::new(
        core::ptr::addr_of!(__kernel_start) as u64,
        core::ptr::addr_of!(__kernel_end) as u64,
    );
    let mut excluded = [Range::default(); 1 + boot::info::MAX_BOOT_RESERVED];
    excluded[0] = kernel;
    for (slot, &(start, len)) in excluded[1..].iter_mut().zip(info.reserved()) {
        *slot = Range::new(start, start + len);
    }
    let mut pools = FramePools::new(info.memory_map(), &excluded);

    let mut store = PoolTables(&mut pools);
    let mut map = IdentityMap::new(&mut store, use_1g)?;
    // Everything below 4 GiB first as uncached (MMIO holes: PCI BARs, ECAM, LAPIC, IOAPIC),
    // then each memory-map region with its own type on top.
    let mut stats = map.map(&mut store, 0, 4 << 30, Cache::Uncached)?;
    for r in info.memory_map() {
        let cache = match r.kind {
            MemoryKind::Usable | MemoryKind::AcpiReclaimable | MemoryKind::AcpiNvs => {
                Cache::WriteBack
            }
            _ => Cache::Uncached,
        };
        let s = map.map(&mut store, r.start, r.end(), cache)?;
        stats.pages_1g += s.pages_1g;
        stats.pages_2m += s.pages_2m;
        stats.pages_4k += s.pages_4k;
    }
    crate::arch::init_pat();
    let root = PhysFrame::from_start_address(PhysAddr::new(map.root()))
        .expect("page table root is 4 KiB aligned");
    // SAFETY: the new tables identity-map all RAM (including this code, its stack and data) and
    // the MMIO below 4 GiB, exactly as the early tables did for the range they covered.
    unsafe { Cr3::write(root, Cr3Flags::empty()) };

    // Heap: 1/16 of usable RAM, between 4 and 64 MiB, as contiguous 2 MiB pages.
    let usable = pools.stats().usable_bytes;
    let heap_pages = (usable / 16 / SIZE_2M).clamp(2, 32);
    let heap = pools.alloc(PageSize::Size2M, heap_pages)?;
    // SAFETY: the range was just taken from the pool, is identity-mapped write-back RAM, and is
    // handed to the allocator for good.
    unsafe {
        HEAP.lock()
            .init(heap as *mut u8, (heap_pages * SIZE_2M) as usize)
    };

    let report = MemoryReport {
        pools: pools.stats(),
        pages_1g: use_1g,
        map: stats,
        heap_bytes: heap_pages * SIZE_2M,
    };
    *FRAMES.lock() = Some(pools);
    *PAGING.lock() = Some(map);
    Ok(report)
}

pub fn pool_stats() -> PoolStats {
    FRAMES
        .lock()
        .as_ref()
        .map(|p| p.stats())
        .expect("memory initialised at boot")
}

/// Identity-maps `[start, start + len)` with `cache` (PCI BARs: uncached; doorbells: WC).
pub fn map_physical(start: u64, len: u64, cache: Cache) -> Result<(), OutOfMemory> {
    let mut paging = PAGING.lock();
    let mut frames = FRAMES.lock();
    let (Some(map), Some(pools)) = (paging.as_mut(), frames.as_mut()) else {
        return Err(OutOfMemory {
            page_size: PageSize::Size4K,
            pages: 1,
        });
    };
    map.map(&mut PoolTables(pools), start, start + len, cache)?;
    x86_64::instructions::tlb::flush_all();
    Ok(())
}

/// Physically contiguous memory owned like a `Box`: freed to its pool on drop.
/// The bus address equals the physical and virtual address (identity map, no IOMMU).
#[derive(Debug)]
pub struct DmaBuffer {
    addr: u64,
    len: usize,
    page_size: PageSize,
    pages: u64,
}

impl DmaBuffer {
    pub fn bus_addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
    /// The page size the buffer was carved from (1 GiB, 2 MiB or 4 KiB).
    pub fn page_size(&self) -> PageSize {
        self.page_size
    }

    /// The CPU's view of the buffer.
    ///
    /// # Safety
    /// No device may be writing the buffer while the slice is alive.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the buffer is owned, identity-mapped RAM of `len` bytes; the caller excludes
        // concurrent device writes.
        unsafe { core::slice::from_raw_parts_mut(self.as_ptr(), self.len) }
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        if let Some(pools) = FRAMES.lock().as_mut() {
            pools.free(self.addr, self.page_size, self.pages);
        }
    }
}

/// Allocates `size` bytes of physically contiguous memory aligned to `align`, optionally
/// zeroed. Sizes of 2 MiB and up come from the huge-page pools.
pub fn alloc_dma(size: usize, align: usize, zeroed: bool) -> Result<DmaBuffer, OutOfMemory> {
    alloc_dma_above(size, align, zeroed, 0)
}

/// As [`alloc_dma`], at or above physical address `min_addr`.
pub fn alloc_dma_above(
    size: usize,
    align: usize,
    zeroed: bool,
    min_addr: u64,
) -> Result<DmaBuffer, OutOfMemory> {
    let size = size.max(1) as u64;
    let page_size = if size >= SIZE_1G && size.is_multiple_of(SIZE_1G) {
        PageSize::Size1G
    } else if size >= SIZE_2M || align as u64 >= SIZE_2M {
        PageSize::Size2M
    } else {
        PageSize::Size4K
    };
    let pages = size.div_ceil(page_size.bytes());
    let addr = FRAMES
        .lock()
        .as_mut()
        .ok_or(OutOfMemory { page_size, pages })?
        .alloc_aligned_above(page_size, pages, align.max(1) as u64, min_addr)?;
    let len = (pages * page_size.bytes()) as usize;
    if zeroed {
        // SAFETY: freshly allocated, identity-mapped RAM owned by nobody else.
        unsafe { core::ptr::write_bytes(addr as *mut u8, 0, len) };
    }
    Ok(DmaBuffer {
        addr,
        len,
        page_size,
        pages,
    })
}
