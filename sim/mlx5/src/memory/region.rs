//! [`RegionMemory`]: in-process DMA memory for host tests (split out of `memory.rs`).

use std::fmt;
use std::ptr::NonNull;
use std::sync::RwLock;

use super::{copy_pieces, cover, move_pieces, write_parts_in, Copy, DmaError, GuestMemory, Piece};

/// Why [`RegionMemory::alloc`] or [`RegionMemory::insert`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// Size zero, alignment not a power of two, or a layout the host cannot allocate.
    BadLayout,
    /// The host allocator returned nothing.
    OutOfMemory,
    /// The bus address range is taken or does not fit in 64 bits.
    AddressInUse,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::BadLayout => f.write_str("bad size or alignment"),
            AllocError::OutOfMemory => f.write_str("host out of memory"),
            AllocError::AddressInUse => f.write_str("bus address range in use"),
        }
    }
}

impl std::error::Error for AllocError {}

/// A heap buffer with a bus address. Freed on drop.
struct Region {
    bus: u64,
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: a Region exclusively owns its heap buffer; the raw pointer is only dereferenced by
// copy_pieces under the RegionMemory lock (or by a test driver through host_ptr, whose contract
// makes it the caller's responsibility), so moving or sharing the handle across threads is sound.
unsafe impl Send for Region {}
// SAFETY: see Send above; &Region exposes no interior mutability of its own.
unsafe impl Sync for Region {}

impl Piece for Region {
    fn start(&self) -> u64 {
        self.bus
    }
    fn len(&self) -> u64 {
        self.layout.size() as u64
    }
    fn host(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: ptr was returned by alloc_zeroed with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

struct Regions {
    /// Sorted by bus address (the key), never overlapping.
    list: Vec<Region>,
    /// The bump allocator's next free bus address.
    next: u64,
}

/// In-process DMA memory for host tests: zeroed host buffers placed at bus addresses.
///
/// [`alloc`](Self::alloc) hands out bus addresses from a bump allocator that never reuses an
/// address and leaves an unmapped guard gap of [`RegionMemory::GUARD`] bytes after every
/// allocation, so overruns and use-after-free are DMA errors instead of silent corruption.
/// [`insert`](Self::insert) places a buffer at a chosen bus address.
pub struct RegionMemory {
    inner: RwLock<Regions>,
}

impl Default for RegionMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl RegionMemory {
    /// Bus address where [`new`](Self::new) starts allocating: above 4 GiB, so 32-bit truncation
    /// bugs in a driver show up as DMA errors.
    pub const DEFAULT_BASE: u64 = 0x1_0000_0000;
    /// Unmapped bytes left after every allocation.
    pub const GUARD: u64 = 0x1000;

    /// Empty memory allocating from [`DEFAULT_BASE`](Self::DEFAULT_BASE).
    pub fn new() -> Self {
        Self::with_base(Self::DEFAULT_BASE)
    }

    /// Empty memory allocating from bus address `base`.
    pub fn with_base(base: u64) -> Self {
        RegionMemory {
            inner: RwLock::new(Regions {
                list: Vec::new(),
                next: base,
            }),
        }
    }

    fn read_lock(&self) -> std::sync::RwLockReadGuard<'_, Regions> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_lock(&self) -> std::sync::RwLockWriteGuard<'_, Regions> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn new_region(bus: u64, size: usize, align: usize) -> Result<Region, AllocError> {
        if size == 0 {
            return Err(AllocError::BadLayout);
        }
        let layout =
            std::alloc::Layout::from_size_align(size, align).map_err(|_| AllocError::BadLayout)?;
        // SAFETY: layout has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(AllocError::OutOfMemory)?;
        Ok(Region { bus, ptr, layout })
    }

    fn place(list: &mut Vec<Region>, region: Region) -> Result<(), AllocError> {
        let start = region.bus;
        let end = start
            .checked_add(region.len())
            .ok_or(AllocError::AddressInUse)?;
        let i = list.partition_point(|r| r.bus < start);
        if i > 0 && list[i - 1].bus + list[i - 1].len() > start {
            return Err(AllocError::AddressInUse);
        }
        if i < list.len() && list[i].bus < end {
            return Err(AllocError::AddressInUse);
        }
        list.insert(i, region);
        Ok(())
    }

    /// Allocates `size` zeroed bytes whose bus address (and host address) is aligned to `align`
    /// (a power of two). Returns the bus address.
    pub fn alloc(&self, size: usize, align: usize) -> Result<u64, AllocError> {
        let align = align.max(1);
        if !align.is_power_of_two() {
            return Err(AllocError::BadLayout);
        }
        let mut g = self.write_lock();
        let a = align as u64;
        let bus = g.next.checked_add(a - 1).ok_or(AllocError::AddressInUse)? & !(a - 1);
        let region = Self::new_region(bus, size, align)?;
        let next = bus
            .checked_add(size as u64)
            .and_then(|e| e.checked_add(Self::GUARD))
            .ok_or(AllocError::AddressInUse)?;
        Self::place(&mut g.list, region)?;
        g.next = next;
        Ok(bus)
    }

    /// Places a copy of `data` at bus address `bus`. Fails if it overlaps another region.
    /// The bump allocator is not moved: mixing `insert` and `alloc` is the caller's affair.
    pub fn insert(&self, bus: u64, data: &[u8]) -> Result<(), AllocError> {
        let region = Self::new_region(bus, data.len(), 8)?;
        // SAFETY: the region was just allocated with data.len() bytes and is not shared yet.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), region.ptr.as_ptr(), data.len()) };
        Self::place(&mut self.write_lock().list, region)
    }

    /// Frees the region that starts at bus address `bus`. Returns false if there is none.
    /// Later accesses to it are DMA errors (bus addresses are never reused by `alloc`).
    pub fn free(&self, bus: u64) -> bool {
        let removed = {
            let mut g = self.write_lock();
            match g.list.binary_search_by_key(&bus, |r| r.bus) {
                Ok(i) => Some(g.list.remove(i)),
                Err(_) => None,
            }
        };
        removed.is_some()
    }

    /// Host pointer to `len` bytes at bus address `bus`, if they lie inside one region.
    ///
    /// The pointer stays valid until that region is freed or this `RegionMemory` is dropped; the
    /// device may read and write the same bytes concurrently (that is what DMA memory is), so a
    /// driver must use volatile or atomic accesses and its own ordering, as on hardware.
    pub fn host_ptr(&self, bus: u64, len: usize) -> Option<NonNull<u8>> {
        let g = self.read_lock();
        let i = g.list.partition_point(|r| r.bus <= bus).checked_sub(1)?;
        let r = &g.list[i];
        let off = bus - r.bus;
        if off.checked_add(len as u64)? > r.len() {
            return None;
        }
        // SAFETY: off < region size (or == it for len 0), so the result stays inside (or one past)
        // the allocation.
        NonNull::new(unsafe { r.ptr.as_ptr().add(off as usize) })
    }

    /// Number of live regions.
    pub fn region_count(&self) -> usize {
        self.read_lock().list.len()
    }
}

impl GuestMemory for RegionMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        copy_pieces(&self.read_lock().list, addr, Copy::Read(buf))
    }
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        copy_pieces(&self.read_lock().list, addr, Copy::Write(buf))
    }
    fn write_parts(&self, parts: &[(u64, &[u8])]) -> Result<(), DmaError> {
        write_parts_in(&self.read_lock().list, parts)
    }
    fn check(&self, addr: u64, len: usize) -> Result<(), DmaError> {
        if len == 0 {
            return Ok(());
        }
        cover(&self.read_lock().list, addr, len).map(|_| ())
    }
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        move_pieces(&self.read_lock().list, src, dst, len)
    }
}
