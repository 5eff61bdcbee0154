//! [`RegionMemory`]: in-process DMA memory for host tests (split out of `memory.rs`).

use std::cell::RefCell;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    copy_pieces, cover, move_pieces, write_parts_in, Copy, DmaError, GuestMemory, HostView, Piece,
};

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
// copy_pieces while a snapshot holding the region is borrowed (or by a test driver through
// host_ptr, whose contract makes it the caller's responsibility), so moving or sharing the
// handle across threads is sound.
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

/// A region as an access sees it: its place and host address, and a reference that keeps its
/// buffer alive while any snapshot holding it is in use.
#[derive(Clone)]
struct Live {
    bus: u64,
    len: u64,
    host: *mut u8,
    _own: Arc<Region>,
}

// SAFETY: `host` points into the buffer `_own` keeps alive; see Region's Send/Sync.
unsafe impl Send for Live {}
// SAFETY: see Send above.
unsafe impl Sync for Live {}

impl Piece for Live {
    #[inline]
    fn start(&self) -> u64 {
        self.bus
    }
    #[inline]
    fn len(&self) -> u64 {
        self.len
    }
    #[inline]
    fn host(&self) -> *mut u8 {
        self.host
    }
}

impl Live {
    fn new(r: Region) -> Live {
        Live {
            bus: r.bus,
            len: r.len(),
            host: r.ptr.as_ptr(),
            _own: Arc::new(r),
        }
    }
}

/// An immutable copy of the region list, as of one version.
type Snapshot = Arc<[Live]>;

struct Regions {
    /// Sorted by bus address (the key), never overlapping.
    list: Vec<Live>,
    /// The bump allocator's next free bus address.
    next: u64,
    /// The version of `list` (what [`RegionMemory::version`] holds), unique in the process.
    version: u64,
    /// `list` as of `version`, built on the first access after a change.
    snap: Option<Snapshot>,
}

/// Versions of region lists: unique in the process (never 0), so a version names one list of
/// one [`RegionMemory`] and a snapshot cached under it can never be taken for another's.
static VERSIONS: AtomicU64 = AtomicU64::new(1);

/// Slots of [`CACHED`] and [`KEPT`]: the memories a thread switches between (one HCA's, or two
/// of a pair) without a lock.
const SNAP_SLOTS: usize = 2;

/// Where a thread finds the region list of one version without a lock: a plain copy of the
/// snapshot's slice pointer, kept valid by the snapshot [`KEPT`] holds in the same slot.
#[derive(Clone, Copy)]
struct Cached {
    /// 0: empty (no list has version 0).
    version: u64,
    ptr: *const Live,
    len: usize,
}

const EMPTY: Cached = Cached {
    version: 0,
    ptr: std::ptr::null(),
    len: 0,
};

/// The snapshots behind [`CACHED`], slot for slot. Dropped at thread exit, after emptying
/// [`CACHED`] (a thread-local without a destructor stays readable to the end).
struct Kept([Option<Snapshot>; SNAP_SLOTS]);

impl Drop for Kept {
    fn drop(&mut self) {
        // Runs before the snapshots themselves are dropped.
        CACHED.with(|c| {
            for slot in c {
                slot.set(EMPTY);
            }
        });
    }
}

thread_local! {
    /// The lists this thread used last, by version, most recent first: an access whose
    /// memory's version is in slot 0 reads it with one thread-local load and a compare (no
    /// lock, no atomic read-modify-write, no destructor check).
    static CACHED: [std::cell::Cell<Cached>; SNAP_SLOTS] =
        const { [std::cell::Cell::new(EMPTY), std::cell::Cell::new(EMPTY)] };
    /// What keeps each slot of [`CACHED`] alive; touched only when slot 0 misses.
    static KEPT: RefCell<Kept> = const { RefCell::new(Kept([None, None])) };
}

/// In-process DMA memory for host tests: zeroed host buffers placed at bus addresses.
///
/// [`alloc`](Self::alloc) hands out bus addresses from a bump allocator that never reuses an
/// address and leaves an unmapped guard gap of [`RegionMemory::GUARD`] bytes after every
/// allocation, so overruns and use-after-free are DMA errors instead of silent corruption.
/// [`insert`](Self::insert) places a buffer at a chosen bus address.
///
/// Accesses do not take a lock: every change of the region list publishes a new version
/// number, and an access uses the immutable snapshot of the list its thread cached for the
/// version it reads (taking the lock only to build or fetch one after a change). A snapshot
/// keeps its regions' buffers alive, so an access that read the version just before a
/// [`free`](Self::free) finishes on memory still allocated, as if it had run before it (as one
/// holding a read lock would have); every access that starts after `free` returns reads the
/// new version and fails. A freed buffer goes back to the host allocator once no thread's
/// cache holds a snapshot with it (a thread keeps the last two lists it used until it needs
/// another one, or exits).
pub struct RegionMemory {
    inner: Mutex<Regions>,
    /// `inner.version`, readable without the lock (stored after the list changed, under it).
    version: AtomicU64,
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
        let version = VERSIONS.fetch_add(1, Ordering::Relaxed);
        RegionMemory {
            inner: Mutex::new(Regions {
                list: Vec::new(),
                next: base,
                version,
                snap: None,
            }),
            version: AtomicU64::new(version),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Regions> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a change of `g.list`: a new version, whose snapshot is built on first use.
    fn changed(&self, g: &mut Regions) {
        g.version = VERSIONS.fetch_add(1, Ordering::Relaxed);
        g.snap = None;
        // Release: a thread that reads this version and then takes the lock for its snapshot
        // sees the list as changed (the lock orders that too); one that still reads the old
        // version uses the old snapshot, whose buffers it keeps alive.
        self.version.store(g.version, Ordering::Release);
    }

    /// The current version and its snapshot, under the lock.
    fn current(g: &mut Regions) -> (u64, Snapshot) {
        let snap = g
            .snap
            .get_or_insert_with(|| Arc::from(g.list.as_slice()))
            .clone();
        (g.version, snap)
    }

    /// Runs `f` on the region list: the snapshot this thread cached for the current version, or
    /// (after a change) the current one, fetched under the lock and cached.
    ///
    /// `f` is one of this module's copy functions, which never access guest memory themselves:
    /// nothing can replace this thread's cache while `f` runs on a list from it.
    #[inline]
    fn with_list<T>(&self, f: impl FnOnce(&[Live]) -> T) -> T {
        // Acquire: pairs with the Release store in `changed`, so a snapshot built for this
        // version (under the lock) is what this thread then finds or fetches.
        let v = self.version.load(Ordering::Acquire);
        let c = CACHED.with(|c| c[0].get());
        if c.version == v {
            // SAFETY: slot 0 of CACHED is a copy of the slice of the snapshot in slot 0 of this
            // thread's KEPT (both are only changed together, by `refresh` on this thread, which
            // `f` cannot reach, and KEPT's drop empties CACHED first); that snapshot is
            // immutable and alive while KEPT holds it.
            let list = unsafe { std::slice::from_raw_parts(c.ptr, c.len) };
            return f(list);
        }
        match self.refresh(v) {
            Ok(()) => {
                let c = CACHED.with(|c| c[0].get());
                // SAFETY: as above: `refresh` just put this slice and its snapshot in slot 0.
                let list = unsafe { std::slice::from_raw_parts(c.ptr, c.len) };
                f(list)
            }
            // The thread's cache is going (thread exit) or busy: the current snapshot alone.
            Err(snap) => f(&snap),
        }
    }

    /// Puts the list of version `v` (or, if it changed again since, the current one) in slot 0
    /// of this thread's cache. Fails with the current snapshot if the cache is unusable.
    #[cold]
    fn refresh(&self, v: u64) -> Result<(), Snapshot> {
        let r = KEPT.try_with(|k| {
            let Ok(mut k) = k.try_borrow_mut() else {
                return false;
            };
            CACHED.with(|c| {
                if c[1].get().version == v && k.0[1].is_some() {
                    c[0].swap(&c[1]);
                    k.0.swap(0, 1);
                    return;
                }
                // Fetched under the lock: possibly an even newer version (then this access
                // runs after that change, which is as good).
                let (nv, snap) = Self::current(&mut self.lock());
                let entry = Cached {
                    version: nv,
                    ptr: snap.as_ptr(),
                    len: snap.len(),
                };
                // Slot 1 is evicted: its pointer goes before its snapshot does.
                c[1].set(c[0].get());
                c[0].set(entry);
                k.0.rotate_right(1);
                k.0[0] = Some(snap);
            });
            true
        });
        if r == Ok(true) {
            return Ok(());
        }
        Err(Self::current(&mut self.lock()).1)
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

    fn place(&self, g: &mut Regions, region: Region) -> Result<(), AllocError> {
        let start = region.bus;
        let end = start
            .checked_add(region.len())
            .ok_or(AllocError::AddressInUse)?;
        let list = &mut g.list;
        let i = list.partition_point(|r| r.bus < start);
        if i > 0 && list[i - 1].bus + list[i - 1].len > start {
            return Err(AllocError::AddressInUse);
        }
        if i < list.len() && list[i].bus < end {
            return Err(AllocError::AddressInUse);
        }
        list.insert(i, Live::new(region));
        self.changed(g);
        Ok(())
    }

    /// Allocates `size` zeroed bytes whose bus address (and host address) is aligned to `align`
    /// (a power of two). Returns the bus address.
    pub fn alloc(&self, size: usize, align: usize) -> Result<u64, AllocError> {
        let align = align.max(1);
        if !align.is_power_of_two() {
            return Err(AllocError::BadLayout);
        }
        let mut g = self.lock();
        let a = align as u64;
        let bus = g.next.checked_add(a - 1).ok_or(AllocError::AddressInUse)? & !(a - 1);
        let region = Self::new_region(bus, size, align)?;
        let next = bus
            .checked_add(size as u64)
            .and_then(|e| e.checked_add(Self::GUARD))
            .ok_or(AllocError::AddressInUse)?;
        self.place(&mut g, region)?;
        g.next = next;
        Ok(bus)
    }

    /// Places a copy of `data` at bus address `bus`. Fails if it overlaps another region.
    /// The bump allocator is not moved: mixing `insert` and `alloc` is the caller's affair.
    pub fn insert(&self, bus: u64, data: &[u8]) -> Result<(), AllocError> {
        let region = Self::new_region(bus, data.len(), 8)?;
        // SAFETY: the region was just allocated with data.len() bytes and is not shared yet.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), region.ptr.as_ptr(), data.len()) };
        self.place(&mut self.lock(), region)
    }

    /// Frees the region that starts at bus address `bus`. Returns false if there is none.
    /// Later accesses to it are DMA errors (bus addresses are never reused by `alloc`).
    pub fn free(&self, bus: u64) -> bool {
        let removed = {
            let mut g = self.lock();
            match g.list.binary_search_by_key(&bus, |r| r.bus) {
                Ok(i) => {
                    let r = g.list.remove(i);
                    self.changed(&mut g);
                    Some(r)
                }
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
        let g = self.lock();
        let i = g.list.partition_point(|r| r.bus <= bus).checked_sub(1)?;
        let r = &g.list[i];
        let off = bus - r.bus;
        if off.checked_add(len as u64)? > r.len {
            return None;
        }
        // SAFETY: off < region size (or == it for len 0), so the result stays inside (or one past)
        // the allocation.
        NonNull::new(unsafe { r.host.add(off as usize) })
    }

    /// Number of live regions.
    pub fn region_count(&self) -> usize {
        self.lock().list.len()
    }
}

impl GuestMemory for RegionMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        self.with_list(|l| copy_pieces(l, addr, Copy::Read(buf)))
    }
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        self.with_list(|l| copy_pieces(l, addr, Copy::Write(buf)))
    }
    fn write_parts(&self, parts: &[(u64, &[u8])]) -> Result<(), DmaError> {
        self.with_list(|l| write_parts_in(l, parts))
    }
    fn check(&self, addr: u64, len: usize) -> Result<(), DmaError> {
        if len == 0 {
            return Ok(());
        }
        self.with_list(|l| cover(l, addr, len).map(|_| ()))
    }
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        self.with_list(|l| move_pieces(l, src, dst, len))
    }
    fn view(&self, addr: u64) -> Option<HostView> {
        // The version first: if the list changes after this load, the view's version is
        // already stale and `view_current` refuses it (never a view newer than its version).
        let version = self.version.load(Ordering::Acquire);
        self.with_list(|l| {
            let i = l.partition_point(|r| r.bus <= addr).checked_sub(1)?;
            let r = &l[i];
            (addr - r.bus < r.len).then(|| HostView {
                version,
                bus: r.bus,
                len: r.len,
                host: r.host,
                _keep: r._own.clone(),
            })
        })
    }
    #[inline]
    fn version(&self) -> u64 {
        // Acquire: as `view_current`.
        self.version.load(Ordering::Acquire)
    }
    #[inline]
    fn view_current(&self, v: &HostView) -> bool {
        // Acquire: pairs with the Release store in `changed`, as `with_list` does.
        self.version.load(Ordering::Acquire) == v.version
    }
}
