//! Guest memory as the device sees it: DMA at bus addresses.
//!
//! The model never touches host memory it was not given: every access is checked against the
//! regions (host tests) or the mapped sections (QEMU guest RAM) first, and an access that is not
//! fully covered fails with a [`DmaError`] before a single byte moves.
//!
//! Two implementations:
//! - [`RegionMemory`]: owned, zeroed host buffers at bus addresses chosen by a bump allocator
//!   (or placed explicitly). It is the backing for a driver's DMA allocator in in-process host tests.
//! - [`MappedMemory`]: sections of file descriptors (QEMU's guest RAM memfds) mapped with `mmap`,
//!   replaced wholesale on every `SYNC_SYSMEM`.
//!
//! Both copy with one `memcpy` per contiguous piece, under a read lock that only a re-map
//! (write lock) ever waits for; [`GuestMemory::copy`] moves bytes from one bus address to another
//! with one `memmove` per piece, without a bounce buffer.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::RwLock;

/// A DMA access outside the memory the host gave the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaError {
    /// Bus address of the first byte of the failed access.
    pub addr: u64,
    /// Length of the failed access in bytes.
    pub len: usize,
}

impl fmt::Display for DmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DMA access outside guest memory: {:#x}+{:#x}",
            self.addr, self.len
        )
    }
}

impl std::error::Error for DmaError {}

/// Memory reachable by the device's DMA engine, addressed by bus address.
///
/// Implementations are shared between the front end (which may replace the mapping) and the
/// device (which may run on its own thread), hence `&self` and `Send + Sync`.
pub trait GuestMemory: Send + Sync {
    /// Copies `buf.len()` bytes starting at bus address `addr` into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError>;

    /// Copies `buf` to bus address `addr`.
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError>;

    /// Reads a big-endian u32 (the byte order of every PRM structure).
    fn read_u32_be(&self, addr: u64) -> Result<u32, DmaError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Writes a big-endian u32.
    fn write_u32_be(&self, addr: u64, value: u32) -> Result<(), DmaError> {
        self.write(addr, &value.to_be_bytes())
    }

    /// Reads a big-endian u64.
    fn read_u64_be(&self, addr: u64) -> Result<u64, DmaError> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_be_bytes(b))
    }

    /// Writes a big-endian u64.
    fn write_u64_be(&self, addr: u64, value: u64) -> Result<(), DmaError> {
        self.write(addr, &value.to_be_bytes())
    }

    /// Writes each `(addr, bytes)` of `parts` in order, as that many [`write`](Self::write)s
    /// would: stops at the first that fails (the earlier ones stay written), and a later part
    /// becomes visible only after the earlier ones (what a CQE needs: its body before its
    /// owner byte). [`RegionMemory`] and [`MappedMemory`] look their map up under one lock.
    fn write_parts(&self, parts: &[(u64, &[u8])]) -> Result<(), DmaError> {
        for &(addr, bytes) in parts {
            self.write(addr, bytes)?;
        }
        Ok(())
    }

    /// Checks that `[addr, addr + len)` is all guest memory, without moving a byte.
    ///
    /// The default reads the range into a scratch buffer; [`RegionMemory`] and
    /// [`MappedMemory`] only look at their maps.
    fn check(&self, addr: u64, len: usize) -> Result<(), DmaError> {
        if len == 0 {
            return Ok(());
        }
        let mut scratch = vec![0u8; len];
        self.read(addr, &mut scratch)
    }

    /// Copies `len` bytes from bus address `src` to bus address `dst` as `memmove` would
    /// (overlapping ranges end up as if the source had been read first).
    ///
    /// Both ranges are checked before a byte moves: on error nothing has been written, and the
    /// error names `src` if the source range is not all guest memory, else `dst`. The default
    /// bounces through a buffer; [`RegionMemory`] and [`MappedMemory`] copy directly, one
    /// `memmove` per piece that is contiguous on both sides.
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        if len == 0 {
            return Ok(());
        }
        let mut bounce = vec![0u8; len];
        self.read(src, &mut bounce)?;
        self.write(dst, &bounce)
    }
}

/// Memory with nothing in it: every access fails. What a device sees before a front end hands
/// it guest memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMemory;

impl GuestMemory for NoMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        Err(DmaError {
            addr,
            len: buf.len(),
        })
    }
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        Err(DmaError {
            addr,
            len: buf.len(),
        })
    }
}

/// One contiguous piece of host memory at a bus address.
trait Piece {
    /// Bus address of the first byte.
    fn start(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> u64;
    /// Host address of the first byte.
    fn host(&self) -> *mut u8;
    /// True once an access faulted because the backing file shrank under the mapping (see
    /// [`sigbus`]); every later access to the piece is a [`DmaError`].
    fn poisoned(&self) -> bool {
        false
    }
}

/// Fails the access if any piece in `pieces` (those it touched) is poisoned. One relaxed load
/// per piece: the price of catching a SIGBUS instead of checking file sizes on every access.
#[inline]
fn check_poison<P: Piece>(pieces: &[P], err: DmaError) -> Result<(), DmaError> {
    if pieces.iter().any(|p| p.poisoned()) {
        Err(err)
    } else {
        Ok(())
    }
}

/// The direction of a copy.
enum Copy<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

impl Copy<'_> {
    fn len(&self) -> usize {
        match self {
            Copy::Read(b) => b.len(),
            Copy::Write(b) => b.len(),
        }
    }
}

thread_local! {
    /// Indexes of pieces recently found by [`last_at_or_below`] on this thread (a packet's
    /// source and destination, the rings): a guess, checked before use.
    static RECENT: std::cell::Cell<[usize; 8]> = const { std::cell::Cell::new([0; 8]) };
}

/// The index of the last piece starting at or below `addr` (pieces sorted by start, not
/// overlapping), as `partition_point` finds it. A recently found piece that contains `addr` is
/// that piece (the next one starts at or after its end), so it is tried first: the data path
/// touches the same few buffers packet after packet.
fn last_at_or_below<P: Piece>(pieces: &[P], addr: u64) -> Option<usize> {
    let mut recent = RECENT.with(|r| r.get());
    for &i in &recent {
        if let Some(p) = pieces.get(i) {
            if p.start() <= addr && addr - p.start() < p.len() {
                return Some(i);
            }
        }
    }
    let i = pieces
        .partition_point(|p| p.start() <= addr)
        .checked_sub(1)?;
    recent.copy_within(0..7, 1);
    recent[0] = i;
    RECENT.with(|r| r.set(recent));
    Some(i)
}

/// Whether piece `p` holds all of `[addr, addr + len)`.
#[inline]
fn holds<P: Piece>(p: &P, addr: u64, len: usize) -> bool {
    addr >= p.start() && {
        let off = addr - p.start();
        off < p.len() && len as u64 <= p.len() - off
    }
}

/// The index of the piece that holds all of `[addr, addr + len)` (`len > 0`), if one does.
#[inline]
fn within_one<P: Piece>(pieces: &[P], addr: u64, len: usize) -> Option<usize> {
    let i = last_at_or_below(pieces, addr)?;
    holds(&pieces[i], addr, len).then_some(i)
}

/// Copies between `buf` and piece `p`, which [`holds`] `[addr, addr + buf.len())`: one
/// `memcpy`, failing if the piece is poisoned before or after it.
#[inline]
fn copy_in<P: Piece>(p: &P, addr: u64, mut buf: Copy<'_>) -> Result<(), DmaError> {
    let len = buf.len();
    debug_assert!(holds(p, addr, len));
    let touched = std::slice::from_ref(p);
    check_poison(touched, DmaError { addr, len })?;
    // SAFETY: the caller proved (holds()) that [addr, addr + len) lies inside this piece, whose
    // host memory is valid for its whole length while the caller holds the lock protecting the
    // pieces; `buf` is a distinct Rust buffer of `len` bytes, so the ranges do not overlap.
    unsafe {
        let host = p.host().add((addr - p.start()) as usize);
        match &mut buf {
            Copy::Read(b) => std::ptr::copy_nonoverlapping(host, b.as_mut_ptr(), len),
            Copy::Write(b) => std::ptr::copy_nonoverlapping(b.as_ptr(), host, len),
        }
    }
    // A fault during the copy (the file shrank) was patched over with zero pages.
    check_poison(touched, DmaError { addr, len })
}

/// The pieces (sorted by start, not overlapping) covering `[addr, addr + len)` (`len > 0`):
/// the indexes of the first and the last, or the error if any byte is outside every piece.
fn cover<P: Piece>(pieces: &[P], addr: u64, len: usize) -> Result<(usize, usize), DmaError> {
    let err = DmaError { addr, len };
    let end = addr.checked_add(len as u64).ok_or(err)?;
    // The piece that contains `addr`: the last one starting at or below it.
    let first = last_at_or_below(pieces, addr).ok_or(err)?;
    // The range must be covered by adjacent pieces.
    let mut cur = addr;
    let mut last = first;
    loop {
        let p = pieces.get(last).ok_or(err)?;
        let p_end = p.start() + p.len();
        if p.start() > cur || p_end <= cur {
            return Err(err); // a gap, or `addr` past the end of its piece
        }
        cur = p_end;
        if cur >= end {
            return Ok((first, last));
        }
        last += 1;
    }
}

/// Copies between `buf` and the pieces (sorted by start, not overlapping) covering
/// `[addr, addr + len)`, one `memcpy` per piece. Checks the whole range first: on error nothing
/// has been copied.
fn copy_pieces<P: Piece>(pieces: &[P], addr: u64, mut buf: Copy<'_>) -> Result<(), DmaError> {
    let len = buf.len();
    if len == 0 {
        return Ok(());
    }
    if let Some(i) = within_one(pieces, addr, len) {
        // The common case (a doorbell record, a WQE, a CQE): one piece, one memcpy.
        return copy_in(&pieces[i], addr, buf);
    }
    let (first, last) = cover(pieces, addr, len)?;
    let touched = &pieces[first..=last];
    check_poison(touched, DmaError { addr, len })?;
    let end = addr + len as u64; // cover() proved it does not wrap

    let mut cur = addr;
    let mut done = 0usize;
    for p in &pieces[first..=last] {
        let off = (cur - p.start()) as usize;
        let n = ((p.start() + p.len()).min(end) - cur) as usize;
        // SAFETY: cover() proved [cur, cur + n) lies inside this piece, whose host memory is
        // valid for its whole length while the caller holds the lock protecting `pieces`; `buf`
        // is a distinct Rust buffer of at least done + n bytes, so the ranges do not overlap.
        unsafe {
            let host = p.host().add(off);
            match &mut buf {
                Copy::Read(b) => std::ptr::copy_nonoverlapping(host, b.as_mut_ptr().add(done), n),
                Copy::Write(b) => std::ptr::copy_nonoverlapping(b.as_ptr().add(done), host, n),
            }
        }
        cur += n as u64;
        done += n;
    }
    debug_assert_eq!(done, len);
    // A fault during the copy (the file shrank) was patched over with zero pages: the bytes
    // moved are garbage, so the access fails.
    check_poison(touched, DmaError { addr, len })
}

/// [`GuestMemory::write_parts`] over one lookup of `pieces`: each part as
/// [`copy_pieces`] writes it, in order, with a release fence between two parts so that the
/// stores of the earlier part are ordered before the later one's (as the lock's release and
/// acquire between two separate writes order them).
fn write_parts_in<P: Piece>(pieces: &[P], parts: &[(u64, &[u8])]) -> Result<(), DmaError> {
    // The piece the previous part went to: a CQE's owner byte lies in its body's piece.
    let mut last: Option<usize> = None;
    for (i, &(addr, bytes)) in parts.iter().enumerate() {
        if i > 0 {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        }
        if bytes.is_empty() {
            continue;
        }
        let one = match last {
            Some(k) if holds(&pieces[k], addr, bytes.len()) => Some(k),
            _ => within_one(pieces, addr, bytes.len()),
        };
        match one {
            Some(k) => {
                copy_in(&pieces[k], addr, Copy::Write(bytes))?;
                last = Some(k);
            }
            None => copy_pieces(pieces, addr, Copy::Write(bytes))?,
        }
    }
    Ok(())
}

/// The host address of bus address `addr` and the bytes of its piece from there on (forward)
/// or up to there (`backward`: `addr` is an exclusive end). Only called for addresses
/// [`cover`] proved to be inside the pieces.
fn host_run<P: Piece>(pieces: &[P], addr: u64, backward: bool) -> Option<(*mut u8, u64)> {
    let probe = if backward { addr.checked_sub(1)? } else { addr };
    let i = last_at_or_below(pieces, probe)?;
    let p = &pieces[i];
    let off = addr - p.start();
    if off > p.len() || (!backward && off == p.len()) {
        return None;
    }
    let avail = if backward { off } else { p.len() - off };
    // SAFETY: off <= the piece's length, so the pointer stays inside (or one past) the piece's
    // host memory.
    Some((unsafe { p.host().add(off as usize) }, avail))
}

/// `memmove` of `len` bytes from bus address `src` to `dst` inside the pieces. Both ranges are
/// checked first (source first: its error wins); then the copy runs in chunks contiguous on both
/// sides, back to front when `dst` lies inside the source range, so overlap behaves like
/// `memmove` on the bus address space. (Two sections mapping the same file bytes at different
/// bus addresses are not detected; each chunk is still a `memmove`, so nothing worse than
/// mixed bytes can come of it.)
fn move_pieces<P: Piece>(pieces: &[P], src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
    if len == 0 {
        return Ok(());
    }
    let (sf, sl) = cover(pieces, src, len)?;
    let (df, dl) = cover(pieces, dst, len)?;
    check_poison(&pieces[sf..=sl], DmaError { addr: src, len })?;
    check_poison(&pieces[df..=dl], DmaError { addr: dst, len })?;
    if sf == sl && df == dl {
        // One piece on each side (a packet's payload, typically): one memmove.
        let (s, d) = (&pieces[sf], &pieces[df]);
        // SAFETY: cover() proved [src, src + len) lies inside piece `s` and [dst, dst + len)
        // inside piece `d`, whose host memory is valid while the caller holds the lock
        // protecting `pieces`; `copy` (memmove) allows the ranges to overlap.
        unsafe {
            std::ptr::copy(
                s.host().add((src - s.start()) as usize),
                d.host().add((dst - d.start()) as usize),
                len,
            );
        }
        check_poison(&pieces[sf..=sl], DmaError { addr: src, len })?;
        return check_poison(&pieces[df..=dl], DmaError { addr: dst, len });
    }
    let n64 = len as u64;
    let backward = dst > src && dst < src + n64;
    let mut done = 0u64;
    while done < n64 {
        let (s, d) = if backward {
            (src + n64 - done, dst + n64 - done)
        } else {
            (src + done, dst + done)
        };
        let err = DmaError { addr: src, len };
        let (sp, sa) = host_run(pieces, s, backward).ok_or(err)?;
        let (dp, da) = host_run(pieces, d, backward).ok_or(DmaError { addr: dst, len })?;
        let k = sa.min(da).min(n64 - done);
        if k == 0 {
            return Err(err); // cannot happen after cover(); never loop forever
        }
        // SAFETY: cover() proved both ranges lie inside the pieces, whose host memory is valid
        // while the caller holds the lock protecting `pieces`; host_run() bounded each chunk to
        // one piece on each side. `copy` (memmove) allows the chunks to overlap.
        unsafe {
            if backward {
                std::ptr::copy(sp.sub(k as usize), dp.sub(k as usize), k as usize);
            } else {
                std::ptr::copy(sp, dp, k as usize);
            }
        }
        done += k;
    }
    check_poison(&pieces[sf..=sl], DmaError { addr: src, len })?;
    check_poison(&pieces[df..=dl], DmaError { addr: dst, len })
}

// ---------------------------------------------------------------------------------------------
// RegionMemory
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// MappedMemory
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// SIGBUS: a file that shrinks under its mapping
// ---------------------------------------------------------------------------------------------

/// Survives guest RAM that shrinks under the device.
///
/// A section is checked against its file's size when it is mapped, but the peer that sent the
/// descriptor can truncate the file afterwards; touching a mapped page past the new end then
/// raises SIGBUS, which would kill the whole server. Checking the size before every access
/// would cost a system call per DMA, so instead every live mapping is registered here, and a
/// process-wide SIGBUS handler recognises a fault inside one: it maps a private zero page over
/// the faulting page (`MAP_FIXED`), so the interrupted access completes, and marks the mapping
/// poisoned. The access that faulted, and every later one to that mapping, then fails with a
/// [`DmaError`]; the front end sees [`MappedMemory::poisoned`] and drops the client.
///
/// A fault anywhere else goes to the handler that was installed before (Rust's own, which
/// reports stack overflows), or to the default action.
pub mod sigbus {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::OnceLock;

    /// Most mappings registered at once (QEMU sends at most 8 sections per SYNC_SYSMEM; a
    /// replace holds the old and the new set for a moment).
    pub const SLOTS: usize = 256;

    struct Slot {
        /// Host address range `[start, end)`; `end == 0` while free or being filled.
        start: AtomicUsize,
        end: AtomicUsize,
        /// 1 while the slot is taken.
        taken: AtomicBool,
        /// Set by the handler: an access to this mapping faulted.
        hit: AtomicBool,
    }

    #[allow(clippy::declare_interior_mutable_const)]
    const FREE: Slot = Slot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        taken: AtomicBool::new(false),
        hit: AtomicBool::new(false),
    };
    static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

    /// The SIGBUS action found when the handler was installed.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
    /// Faults the handler turned into zero pages (all mappings, for tests and logs).
    static CAUGHT: AtomicUsize = AtomicUsize::new(0);

    const PAGE: usize = 4096;

    /// Installs the handler once per process. Idempotent; fails only if `sigaction` does.
    fn install() -> std::io::Result<()> {
        static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
        let r = INSTALLED.get_or_init(|| {
            // SAFETY: sigaction structs are plain C data for which all-zero is valid; the new
            // action points at an extern "C" handler with the SA_SIGINFO signature, and the old
            // action is saved before any fault can reach the handler (it only reads PREVIOUS
            // after that).
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                    return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
                }
                let _ = PREVIOUS.set(old);
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = handler as *const () as usize;
                act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
                libc::sigemptyset(&mut act.sa_mask);
                if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
                }
            }
            Ok(())
        });
        r.map_err(std::io::Error::from_raw_os_error)
    }

    /// Registers host range `[start, start + len)`; returns its slot.
    pub(super) fn register(start: usize, len: usize) -> std::io::Result<usize> {
        install()?;
        for (i, s) in TABLE.iter().enumerate() {
            if s.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                s.hit.store(false, Ordering::Relaxed);
                s.start.store(start, Ordering::Relaxed);
                s.end.store(start.saturating_add(len), Ordering::Release);
                return Ok(i);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            "too many guest memory mappings to guard against SIGBUS",
        ))
    }

    /// Unregisters a slot (before its range is unmapped).
    pub(super) fn release(slot: usize) {
        let s = &TABLE[slot];
        s.end.store(0, Ordering::Release);
        s.start.store(0, Ordering::Relaxed);
        s.taken.store(false, Ordering::Release);
    }

    /// True once an access inside the slot's range faulted.
    #[inline]
    pub(super) fn hit(slot: usize) -> bool {
        TABLE[slot].hit.load(Ordering::Relaxed)
    }

    /// Faults caught so far in this process.
    pub fn caught() -> usize {
        CAUGHT.load(Ordering::Relaxed)
    }

    /// The handler. Async-signal-safe: atomics, one `mmap`, one `sigaction`.
    extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        for s in TABLE.iter() {
            let end = s.end.load(Ordering::Acquire);
            let start = s.start.load(Ordering::Relaxed);
            if end == 0 || addr < start || addr >= end {
                continue;
            }
            let page = addr & !(PAGE - 1);
            // SAFETY: `page` lies in a live mapping this process made (the slot is registered
            // from mmap until before munmap, and accesses happen only in between); replacing
            // that one page by private anonymous memory touches no other object. The owner
            // unmaps the whole range later, which covers this page too.
            let p = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                s.hit.store(true, Ordering::Relaxed);
                CAUGHT.fetch_add(1, Ordering::Relaxed);
                return; // the access is retried and now completes
            }
            break;
        }
        // Not ours: hand it to the previous action.
        let Some(prev) = PREVIOUS.get() else {
            return default_action(sig);
        };
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            default_action(sig);
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
            // signature; we pass it exactly what the kernel gave us.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        } else {
            // SAFETY: a plain handler takes the signal number only.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }

    /// Restores the default action; the faulting access is retried and kills the process as
    /// an unhandled SIGBUS would have.
    fn default_action(sig: libc::c_int) {
        // SAFETY: all-zero sigaction with SIG_DFL is valid; sigaction is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// One guest RAM section as QEMU describes it in `SYNC_SYSMEM`.
#[derive(Debug)]
pub struct MemSection {
    /// Guest physical (bus) address of the first byte.
    pub gpa: u64,
    /// Length in bytes.
    pub size: u64,
    /// Offset of the first byte in the file.
    pub offset: u64,
    /// The file (a memfd for QEMU's `memory-backend-memfd`). Closed when the section is replaced.
    pub fd: OwnedFd,
}

/// Host page size assumed for `mmap` offset alignment (x86-64 Linux base pages).
const PAGE: u64 = 4096;

/// A live `mmap` of one section.
struct Mapping {
    gpa: u64,
    size: u64,
    /// Host address of the byte at `gpa`.
    host: *mut u8,
    /// What `munmap` needs.
    map_base: *mut libc::c_void,
    map_len: usize,
    /// Its registration with the SIGBUS handler ([`sigbus`]).
    slot: usize,
    _fd: OwnedFd,
}

// SAFETY: the mapping is MAP_SHARED memory owned by this handle until drop; it is only accessed
// through copy_pieces under the MappedMemory lock, so the handle can move between threads.
unsafe impl Send for Mapping {}
// SAFETY: see Send above.
unsafe impl Sync for Mapping {}

impl Piece for Mapping {
    fn start(&self) -> u64 {
        self.gpa
    }
    fn len(&self) -> u64 {
        self.size
    }
    fn host(&self) -> *mut u8 {
        self.host
    }
    #[inline]
    fn poisoned(&self) -> bool {
        sigbus::hit(self.slot)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        sigbus::release(self.slot);
        // SAFETY: map_base/map_len are exactly what mmap returned/was given, unmapped once; no
        // reader can hold a pointer into it (readers hold the lock the owner was removed under).
        unsafe {
            libc::munmap(self.map_base, self.map_len);
        }
        // _fd closes itself.
    }
}

impl Mapping {
    fn new(s: MemSection) -> io::Result<Mapping> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "section gpa={:#x} size={:#x} offset={:#x}: {what}",
                    s.gpa, s.size, s.offset
                ),
            )
        };
        if s.size == 0 {
            return Err(bad("empty"));
        }
        if s.gpa.checked_add(s.size).is_none() {
            return Err(bad("wraps the address space"));
        }
        let file_end = s
            .offset
            .checked_add(s.size)
            .ok_or_else(|| bad("offset overflows"))?;
        // Never map past the end of a regular file: touching such a page raises SIGBUS.
        let file = File::from(s.fd.try_clone()?);
        let meta = file.metadata()?;
        drop(file);
        if meta.is_file() && file_end > meta.len() {
            return Err(bad(&format!(
                "extends past the end of the file ({:#x} bytes)",
                meta.len()
            )));
        }
        let delta = s.offset % PAGE;
        let map_off = s.offset - delta;
        let map_len = usize::try_from(s.size + delta).map_err(|_| bad("too large"))?;
        let off = libc::off_t::try_from(map_off).map_err(|_| bad("offset too large"))?;
        // SAFETY: a fresh shared mapping chosen by the kernel (addr NULL) of a descriptor we own;
        // it aliases no Rust object. The result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                s.fd.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let slot = match sigbus::register(p as usize, map_len) {
            Ok(slot) => slot,
            Err(e) => {
                // SAFETY: p/map_len are exactly what mmap returned/was given; nothing uses it.
                unsafe { libc::munmap(p, map_len) };
                return Err(e);
            }
        };
        // SAFETY: delta < PAGE <= map_len, so the pointer stays inside the mapping.
        let host = unsafe { (p as *mut u8).add(delta as usize) };
        Ok(Mapping {
            gpa: s.gpa,
            size: s.size,
            host,
            map_base: p,
            map_len,
            slot,
            _fd: s.fd,
        })
    }
}

/// Guest RAM shared by QEMU as file descriptors, mapped into this process.
///
/// [`replace`](Self::replace) swaps in a whole new set of sections (QEMU's `SYNC_SYSMEM`); the
/// old mappings are unmapped and their descriptors closed once no access is in flight.
/// Accesses that cross from one section into an adjacent one (gpa-contiguous) work piecewise;
/// any byte outside every section makes the whole access fail.
#[derive(Default)]
pub struct MappedMemory {
    sections: RwLock<Vec<Mapping>>,
}

impl MappedMemory {
    /// No memory mapped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces every mapping by `sections` (empty ones are skipped). All or nothing: if a section
    /// is invalid (overlapping another, past the end of its file) or cannot be mapped, the memory ends up
    /// empty and the error says why. Every descriptor passed in is closed either way, now
    /// (on error) or at the next replace.
    pub fn replace(&self, sections: Vec<MemSection>) -> io::Result<()> {
        let built = Self::build(sections);
        let (new, result) = match built {
            Ok(v) => (v, Ok(())),
            Err(e) => (Vec::new(), Err(e)),
        };
        let old = {
            let mut g = self.sections.write().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *g, new)
        };
        drop(old); // munmap + close, outside the lock
        result
    }

    fn build(sections: Vec<MemSection>) -> io::Result<Vec<Mapping>> {
        let mut maps = Vec::with_capacity(sections.len());
        // Empty sections map nothing (their descriptors are closed here).
        for s in sections.into_iter().filter(|s| s.size != 0) {
            maps.push(Mapping::new(s)?);
        }
        maps.sort_by_key(|m| m.gpa);
        for w in maps.windows(2) {
            if w[0].gpa + w[0].size > w[1].gpa {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "sections overlap: {:#x}+{:#x} and {:#x}+{:#x}",
                        w[0].gpa, w[0].size, w[1].gpa, w[1].size
                    ),
                ));
            }
        }
        Ok(maps)
    }

    /// Unmaps everything (and closes the descriptors).
    pub fn clear(&self) {
        // Cannot fail with no sections.
        let _ = self.replace(Vec::new());
    }

    /// True if an access to a mapped section faulted because its file shrank (a SIGBUS
    /// caught by [`sigbus`]). The memory stays poisoned until the next
    /// [`replace`](Self::replace) or [`clear`](Self::clear); the front end should treat it
    /// as a lost client.
    pub fn poisoned(&self) -> bool {
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        g.iter().any(|m| m.poisoned())
    }

    /// The mapped sections as (gpa, size), sorted by gpa.
    pub fn sections(&self) -> Vec<(u64, u64)> {
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        g.iter().map(|m| (m.gpa, m.size)).collect()
    }
}

impl GuestMemory for MappedMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        copy_pieces(&g, addr, Copy::Read(buf))
    }
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        copy_pieces(&g, addr, Copy::Write(buf))
    }
    fn write_parts(&self, parts: &[(u64, &[u8])]) -> Result<(), DmaError> {
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        write_parts_in(&g, parts)
    }
    fn check(&self, addr: u64, len: usize) -> Result<(), DmaError> {
        if len == 0 {
            return Ok(());
        }
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        cover(&g, addr, len).map(|_| ())
    }
    fn copy(&self, src: u64, dst: u64, len: usize) -> Result<(), DmaError> {
        let g = self.sections.read().unwrap_or_else(|e| e.into_inner());
        move_pieces(&g, src, dst, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    #[test]
    fn region_alloc_read_write() {
        let m = RegionMemory::new();
        let a = m.alloc(100, 64).unwrap();
        assert_eq!(a % 64, 0);
        let b = m.alloc(4096, 4096).unwrap();
        assert_eq!(b % 4096, 0);
        assert!(b >= a + 100 + RegionMemory::GUARD);
        // Zeroed.
        assert_eq!(m.read_u64_be(a).unwrap(), 0);
        m.write_u32_be(a + 4, 0x1122_3344).unwrap();
        let mut raw = [0u8; 8];
        m.read(a, &mut raw).unwrap();
        assert_eq!(raw, [0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
        m.write_u64_be(b + 4088, 0xdead_beef_0bad_f00d).unwrap();
        assert_eq!(m.read_u64_be(b + 4088).unwrap(), 0xdead_beef_0bad_f00d);
        // The host pointer sees the same bytes.
        let p = m.host_ptr(a + 4, 4).unwrap();
        // SAFETY: 4 bytes inside a live region, no concurrent device access in this test.
        let got = unsafe { std::slice::from_raw_parts(p.as_ptr(), 4) };
        assert_eq!(got, &[0x11, 0x22, 0x33, 0x44]);
    }

    /// The recently-found-piece guess (`last_at_or_below`) never answers for a region that
    /// moved in the list or went away: indexes shift under it when a region is inserted
    /// below, and a freed region's index then names a neighbour.
    #[test]
    fn region_lookups_survive_regions_moving_and_going() {
        let m = RegionMemory::new();
        let r: Vec<u64> = (0..3).map(|_| m.alloc(4096, 4096).unwrap()).collect();
        for (i, &a) in r.iter().enumerate() {
            m.write(a, &[i as u8 + 1; 4096]).unwrap();
        }
        let byte = |a: u64| {
            let mut b = [0u8; 1];
            m.read(a, &mut b).map(|_| b[0])
        };
        assert_eq!(byte(r[1] + 7), Ok(2));
        // A region below every other one: each index moves up by one.
        m.insert(0x1000, &[9; 64]).unwrap();
        assert_eq!(byte(r[1] + 7), Ok(2));
        assert_eq!(byte(r[0]), Ok(1));
        assert_eq!(byte(0x1000), Ok(9));
        // Gone: its old index now names r[2].
        assert!(m.free(r[1]));
        assert!(byte(r[1] + 7).is_err());
        assert_eq!(byte(r[2] + 4095), Ok(3));
        // One-piece-each-side copies still land where they should.
        m.copy(r[0] + 16, r[2] + 32, 100).unwrap();
        assert_eq!(byte(r[2] + 32), Ok(1));
        assert_eq!(byte(r[2] + 131), Ok(1));
        assert_eq!(byte(r[2] + 132), Ok(3));
        assert!(m.copy(r[0], r[1], 8).is_err());
    }

    /// `write_parts` (one lock for several writes) behaves as the writes one after another:
    /// every part lands, across pieces too; a part that fails stops the sequence with its own
    /// error, the earlier parts staying written and the later ones not; the trait's default
    /// (one `write` per part) does the same.
    #[test]
    fn write_parts_is_writes_in_order() {
        let fresh: [&dyn Fn() -> Box<dyn GuestMemory>; 2] = [&|| Box::new(three_pieces()), &|| {
            Box::new(Bounce(three_pieces()))
        }];
        for make in fresh {
            // Two parts, the first across a piece boundary (0x1101), the second in another piece.
            let m = make();
            let mut want = snapshot(&*m);
            m.write_parts(&[(0x10fc, &[1u8; 8][..]), (0x1250, &[2u8; 3][..])])
                .unwrap();
            want[0xfc..0x104].fill(1);
            want[0x250..0x253].fill(2);
            assert_eq!(snapshot(&*m), want);
            // The second part runs past the end of guest memory (0x1301): the first part is
            // written, the second and third are not.
            let m = make();
            let mut want = snapshot(&*m);
            let e = m
                .write_parts(&[
                    (0x1010, &[7u8; 4][..]),
                    (0x12ff, &[9u8; 4][..]),
                    (0x1020, &[8u8; 4][..]),
                ])
                .unwrap_err();
            assert_eq!(
                e,
                DmaError {
                    addr: 0x12ff,
                    len: 4
                }
            );
            want[0x10..0x14].fill(7);
            assert_eq!(snapshot(&*m), want);
        }
    }

    #[test]
    fn region_errors_instead_of_crashing() {
        let m = RegionMemory::new();
        let a = m.alloc(64, 8).unwrap();
        let mut buf = [0u8; 16];
        // Overrun into the guard gap.
        assert_eq!(
            m.read(a + 56, &mut buf),
            Err(DmaError {
                addr: a + 56,
                len: 16
            })
        );
        // Below every region.
        assert!(m.read(0, &mut buf).is_err());
        // Wrap-around.
        assert!(m.write(u64::MAX - 3, &buf).is_err());
        // A failed write changes nothing.
        assert!(m.write(a + 60, &[0xff; 8]).is_err());
        assert_eq!(m.read_u32_be(a + 60).unwrap(), 0);
        // Use after free.
        assert!(m.free(a));
        assert!(!m.free(a));
        assert!(m.read(a, &mut buf).is_err());
        assert_eq!(m.region_count(), 0);
        // Bad layouts.
        assert_eq!(m.alloc(0, 8), Err(AllocError::BadLayout));
        assert_eq!(m.alloc(8, 3), Err(AllocError::BadLayout));
        // Zero-length access is always fine.
        assert!(m.read(12345, &mut []).is_ok());
    }

    #[test]
    fn region_insert_adjacent_is_piecewise() {
        let m = RegionMemory::with_base(0x10_0000);
        m.insert(0x1000, &[1u8; 0x100]).unwrap();
        m.insert(0x1100, &[2u8; 0x100]).unwrap();
        assert_eq!(
            m.insert(0x10f0, &[0u8; 0x20]),
            Err(AllocError::AddressInUse)
        );
        let mut buf = [0u8; 4];
        m.read(0x10fe, &mut buf).unwrap();
        assert_eq!(buf, [1, 1, 2, 2]);
        m.write(0x10ff, &[9, 9]).unwrap();
        m.read(0x10fe, &mut buf).unwrap();
        assert_eq!(buf, [1, 9, 9, 2]);
        // A gap after the second region.
        m.insert(0x1300, &[3u8; 0x10]).unwrap();
        assert!(m.read(0x11fe, &mut buf).is_err());
    }

    #[test]
    fn region_is_shareable_across_threads() {
        let m = Arc::new(RegionMemory::new());
        let a = m.alloc(4096, 4096).unwrap();
        let dev = {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..512u64 {
                    m.write_u64_be(a + i * 8, i).unwrap();
                }
            })
        };
        dev.join().unwrap();
        for i in 0..512u64 {
            assert_eq!(m.read_u64_be(a + i * 8).unwrap(), i);
        }
    }

    fn tmpfile(len: u64) -> File {
        let path = std::env::temp_dir().join(format!(
            "mlx5-sim-mem-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f.set_len(len).unwrap();
        f
    }

    fn section(f: &File, gpa: u64, size: u64, offset: u64) -> MemSection {
        MemSection {
            gpa,
            size,
            offset,
            fd: OwnedFd::from(f.try_clone().unwrap()),
        }
    }

    #[test]
    fn mapped_piecewise_and_errors() {
        use std::os::unix::fs::FileExt;
        let mut f = tmpfile(0x4000);
        f.write_all(b"hello").unwrap();
        let m = MappedMemory::new();
        // Two adjacent sections mapping the file in reverse order, and a third with a gap.
        m.replace(vec![
            section(&f, 0x10_0000, 0x2000, 0x2000),
            section(&f, 0x10_2000, 0x1000, 0x0),
            section(&f, 0x20_0000, 0x800, 0x1800), // unaligned offset is fine
        ])
        .unwrap();
        assert_eq!(
            m.sections(),
            vec![(0x10_0000, 0x2000), (0x10_2000, 0x1000), (0x20_0000, 0x800)]
        );
        let mut b = [0u8; 5];
        m.read(0x10_2000, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        // Crossing the boundary between the two adjacent sections.
        m.write(0x10_1ffe, &[1, 2, 3, 4]).unwrap();
        let mut fb = [0u8; 2];
        f.read_exact_at(&mut fb, 0x3ffe).unwrap();
        assert_eq!(fb, [1, 2]);
        f.read_exact_at(&mut fb, 0x0).unwrap();
        assert_eq!(fb, [3, 4]);
        // Unaligned offset section.
        f.write_all_at(&[7, 7, 7], 0x1800).unwrap();
        m.read(0x20_0000, &mut b[..3]).unwrap();
        assert_eq!(&b[..3], &[7, 7, 7]);
        // Past the end of the adjacent pair, and across the gap.
        assert!(m.read(0x10_2ffe, &mut b).is_err());
        assert!(m.read(0x20_07fe, &mut b).is_err());
        assert!(m.read(0xf_fffe, &mut b).is_err());

        // A section past the end of the file is refused (it would SIGBUS), leaving nothing mapped.
        assert!(m.replace(vec![section(&f, 0, 0x8000, 0)]).is_err());
        assert!(m.sections().is_empty());
        assert!(m.read(0x10_2000, &mut b).is_err());
        // Overlapping sections are refused.
        assert!(m
            .replace(vec![
                section(&f, 0, 0x2000, 0),
                section(&f, 0x1000, 0x1000, 0)
            ])
            .is_err());
        m.clear();
    }

    /// Only `read`/`write`: exercises the trait's default `check` and `copy`.
    struct Bounce(RegionMemory);

    impl GuestMemory for Bounce {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
            self.0.read(addr, buf)
        }
        fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
            self.0.write(addr, buf)
        }
    }

    /// Three adjacent regions of odd sizes at 0x1000 (one bus-contiguous range of 0x301 bytes
    /// made of three pieces), then a gap, then a fourth region.
    fn three_pieces() -> RegionMemory {
        let m = RegionMemory::with_base(0x10_0000);
        let pattern = |n: usize, k: u8| {
            (0..n)
                .map(|i| (i as u8).wrapping_mul(7) ^ k)
                .collect::<Vec<_>>()
        };
        m.insert(0x1000, &pattern(0x101, 1)).unwrap();
        m.insert(0x1101, &pattern(0xff, 2)).unwrap();
        m.insert(0x1200, &pattern(0x101, 3)).unwrap();
        m.insert(0x2000, &pattern(0x40, 4)).unwrap();
        m
    }

    fn snapshot(m: &dyn GuestMemory) -> Vec<u8> {
        let mut v = vec![0u8; 0x301];
        m.read(0x1000, &mut v).unwrap();
        v
    }

    /// A byte-by-byte reference: every byte of 0x1000..0x2100 either present or not, an access
    /// failing before any byte moves if one of its bytes is not.
    struct Bytes(std::sync::Mutex<Vec<Option<u8>>>);

    impl Bytes {
        const BASE: u64 = 0x1000;
        fn of(m: &RegionMemory) -> Bytes {
            let v = (Self::BASE..0x2100)
                .map(|a| {
                    let mut b = [0u8];
                    m.read(a, &mut b).ok().map(|_| b[0])
                })
                .collect();
            Bytes(std::sync::Mutex::new(v))
        }
        fn range(&self, addr: u64, len: usize) -> Result<std::ops::Range<usize>, DmaError> {
            let err = DmaError { addr, len };
            let v = self.0.lock().unwrap();
            let at = addr.checked_sub(Self::BASE).ok_or(err)? as usize;
            let r = at..at + len;
            match v.get(r.clone()) {
                Some(s) if s.iter().all(Option::is_some) => Ok(r),
                _ => Err(err),
            }
        }
    }

    impl GuestMemory for Bytes {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
            let r = self.range(addr, buf.len())?;
            let v = self.0.lock().unwrap();
            for (d, s) in buf.iter_mut().zip(&v[r]) {
                *d = s.unwrap();
            }
            Ok(())
        }
        fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
            let r = self.range(addr, buf.len())?;
            let mut v = self.0.lock().unwrap();
            for (d, s) in v[r].iter_mut().zip(buf) {
                *d = Some(*s);
            }
            Ok(())
        }
    }

    /// Accesses that end exactly at a piece's end, start exactly at the next piece, or run one
    /// byte past it, and `write_parts` whose next part leaves the previous part's piece, give
    /// the bytes and errors of a byte-by-byte reference (single-piece accesses take a shorter
    /// path than those across pieces).
    #[test]
    fn piece_edges_match_a_byte_by_byte_reference() {
        let (m, b) = (three_pieces(), Bytes::of(&three_pieces()));
        for (addr, len) in [
            (0x1000, 0x101),
            (0x10f0, 0x11),
            (0x10f0, 0x12),
            (0x1101, 0xff),
            (0x1101, 0x100),
            (0x12f0, 0x11),
            (0x12f0, 0x12),
            (0x1301, 1),
            (0xfff, 2),
            (0x1fff, 2),
            (0x2000, 0x40),
            (0x2000, 0x41),
            (0x203f, 1),
        ] {
            let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
            assert_eq!(
                m.read(addr, &mut x),
                b.read(addr, &mut y),
                "read {addr:#x}+{len:#x}"
            );
            assert_eq!(x, y, "read {addr:#x}+{len:#x}");
            let w: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            assert_eq!(
                m.write(addr, &w),
                b.write(addr, &w),
                "write {addr:#x}+{len:#x}"
            );
            assert_eq!(snapshot(&m), snapshot(&b), "write {addr:#x}+{len:#x}");
        }
        let parts: [(u64, &[u8]); 6] = [
            (0x10c0, &[1; 0x3f]),
            (0x10ff, &[2; 1]),
            (0x1100, &[3; 4]),
            (0x1101, &[4; 0]),
            (0x1180, &[5; 0x80]),
            (0x1190, &[6; 2]),
        ];
        let (m, b) = (three_pieces(), Bytes::of(&three_pieces()));
        m.write_parts(&parts).unwrap();
        b.write_parts(&parts).unwrap();
        assert_eq!(snapshot(&m), snapshot(&b));
        let bad: [(u64, &[u8]); 3] = [(0x2010, &[6; 8]), (0x2038, &[7; 9]), (0x2000, &[8; 1])];
        let (m, b) = (three_pieces(), Bytes::of(&three_pieces()));
        assert_eq!(
            m.write_parts(&bad),
            Err(DmaError {
                addr: 0x2038,
                len: 9
            })
        );
        assert_eq!(b.write_parts(&bad), m.write_parts(&bad));
        let (mut x, mut y) = ([0u8; 0x40], [0u8; 0x40]);
        m.read(0x2000, &mut x).unwrap();
        b.read(0x2000, &mut y).unwrap();
        assert_eq!(x, y);
    }

    #[test]
    fn copy_is_memmove_across_pieces_in_both_directions() {
        // Every (src, dst, len) on a grid, against memmove on a flat copy, for the native
        // RegionMemory copy and the trait's bounce default.
        let offsets = [
            0u64, 1, 0xfe, 0x100, 0x101, 0x150, 0x1ff, 0x200, 0x201, 0x280,
        ];
        let lens = [1usize, 2, 0x10, 0x100, 0x102, 0x180];
        for native in [true, false] {
            for &so in &offsets {
                for &do_ in &offsets {
                    for &len in &lens {
                        if so + len as u64 > 0x301 || do_ + len as u64 > 0x301 {
                            continue;
                        }
                        let m: Box<dyn GuestMemory> = if native {
                            Box::new(three_pieces())
                        } else {
                            Box::new(Bounce(three_pieces()))
                        };
                        let mut want = snapshot(&*m);
                        want.copy_within(so as usize..so as usize + len, do_ as usize);
                        m.copy(0x1000 + so, 0x1000 + do_, len).unwrap();
                        assert_eq!(
                            snapshot(&*m),
                            want,
                            "src +{so:#x} dst +{do_:#x} len {len:#x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn copy_checks_both_ranges_before_moving() {
        for native in [true, false] {
            let m: Box<dyn GuestMemory> = if native {
                Box::new(three_pieces())
            } else {
                Box::new(Bounce(three_pieces()))
            };
            let before = snapshot(&*m);
            // Source runs into the gap after 0x1301: names the source, nothing written.
            assert_eq!(
                m.copy(0x12f0, 0x1000, 0x20),
                Err(DmaError {
                    addr: 0x12f0,
                    len: 0x20
                })
            );
            // Destination runs into the gap: names the destination, nothing written.
            assert_eq!(
                m.copy(0x1000, 0x12f0, 0x20),
                Err(DmaError {
                    addr: 0x12f0,
                    len: 0x20
                })
            );
            // Both bad: the source is named.
            assert_eq!(
                m.copy(0x3000, 0x4000, 8),
                Err(DmaError {
                    addr: 0x3000,
                    len: 8
                })
            );
            // Wrapping ranges fail instead of overflowing.
            assert!(m.copy(u64::MAX - 3, 0x1000, 8).is_err());
            assert!(m.copy(0x1000, u64::MAX - 3, 8).is_err());
            assert_eq!(snapshot(&*m), before);
            // check() agrees with the maps, and zero-length is always fine.
            assert!(m.check(0x1000, 0x301).is_ok());
            assert_eq!(
                m.check(0x1000, 0x302),
                Err(DmaError {
                    addr: 0x1000,
                    len: 0x302
                })
            );
            assert!(m.check(0xdead, 0).is_ok());
            assert!(m.copy(0xdead, 0xbeef, 0).is_ok());
            // Across the gap into the fourth region is refused; inside it is fine.
            assert!(m.copy(0x2000, 0x1300, 2).is_err());
            assert!(m.copy(0x2000, 0x2010, 0x30).is_ok());
        }
    }

    /// Issue 7 (hostile input 2): a file truncated after it was mapped used to kill the
    /// process with SIGBUS on the next access. The fault is now caught: the access fails with
    /// a DmaError, the memory reports itself poisoned, and the process lives on.
    #[test]
    fn truncated_file_is_a_dma_error_not_sigbus() {
        let f = tmpfile(0x4000);
        let m = MappedMemory::new();
        m.replace(vec![section(&f, 0x10_0000, 0x4000, 0)]).unwrap();
        m.write(0x10_0000, &[0x5a; 16]).unwrap();
        assert!(!m.poisoned());
        let caught = sigbus::caught();
        f.set_len(0x1000).unwrap(); // the peer shrinks its memfd under us
                                    // The first page is still backed: fine.
        let mut b = [0u8; 16];
        m.read(0x10_0000, &mut b).unwrap();
        assert_eq!(b, [0x5a; 16]);
        // Past the new end: read, write and copy fail instead of raising SIGBUS.
        assert_eq!(
            m.read(0x10_2000, &mut b),
            Err(DmaError {
                addr: 0x10_2000,
                len: 16
            })
        );
        assert!(sigbus::caught() > caught);
        assert!(m.poisoned());
        assert!(m.write(0x10_3000, &[1; 8]).is_err());
        assert!(m.copy(0x10_0000, 0x10_3800, 8).is_err());
        // Every access to the poisoned mapping fails now, even to the page that is backed.
        assert!(m.read(0x10_0000, &mut b).is_err());
        // A new SYNC_SYSMEM starts clean.
        m.replace(vec![section(&f, 0x20_0000, 0x1000, 0)]).unwrap();
        assert!(!m.poisoned());
        m.read(0x20_0000, &mut b).unwrap();
        assert_eq!(b, [0x5a; 16]);
        m.clear();
    }

    #[test]
    fn mapped_copy_between_sections() {
        use std::os::unix::fs::FileExt;
        let f = tmpfile(0x3000);
        let bytes: Vec<u8> = (0..0x3000u32).map(|i| (i % 251) as u8).collect();
        f.write_all_at(&bytes, 0).unwrap();
        let m = MappedMemory::new();
        // gpa 0x10_0000.. maps file 0x1000..0x3000, gpa 0x10_2000.. maps file 0..0x1000.
        m.replace(vec![
            section(&f, 0x10_0000, 0x2000, 0x1000),
            section(&f, 0x10_2000, 0x1000, 0x0),
        ])
        .unwrap();
        let read_all = |m: &MappedMemory| {
            let mut v = vec![0u8; 0x3000];
            m.read(0x10_0000, &mut v).unwrap();
            v
        };
        let mut want = read_all(&m);
        // Overlapping, backwards, across the section boundary.
        want.copy_within(0x1f00..0x2100, 0x1f80);
        m.copy(0x10_1f00, 0x10_1f80, 0x200).unwrap();
        assert_eq!(read_all(&m), want);
        // Overlapping, forwards.
        want.copy_within(0x1f80..0x2180, 0x1f00);
        m.copy(0x10_1f80, 0x10_1f00, 0x200).unwrap();
        assert_eq!(read_all(&m), want);
        // Past the end: refused, nothing moved.
        assert!(m.copy(0x10_0000, 0x10_2f00, 0x200).is_err());
        assert_eq!(read_all(&m), want);
        m.clear();
        assert!(m.copy(0x10_0000, 0x10_0100, 1).is_err());
    }
}
