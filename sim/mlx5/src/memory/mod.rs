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
//! Both copy with one `memcpy` per contiguous piece: [`MappedMemory`] under a read lock that
//! only a re-map (write lock) ever waits for, [`RegionMemory`] on an immutable snapshot of its
//! region list that each thread caches by version (no lock and no atomic read-modify-write per
//! access); [`GuestMemory::copy`] moves bytes from one bus address to another with one
//! `memmove` per piece, without a bounce buffer.

use std::fmt;

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

    /// A [`HostView`] of the region holding bus address `addr`, valid while
    /// [`view_current`](Self::view_current) says so; `None` (the default) when the memory
    /// has no such view ([`MappedMemory`]) or `addr` is not guest memory.
    fn view(&self, addr: u64) -> Option<HostView> {
        let _ = addr;
        None
    }

    /// Whether `v`, resolved by [`view`](Self::view) of this memory, still shows its region:
    /// no region was added or removed since. False (the default) for a memory without views.
    fn view_current(&self, v: &HostView) -> bool {
        let _ = v;
        false
    }

    /// The memory's version now, to check several views against one reading (the accesses
    /// of one doorbell): a view of this memory is current exactly while its version equals
    /// the memory's ([`view_current`](Self::view_current) compares the same two numbers).
    /// Versions are unique in the process and never 0; 0 (the default, for a memory without
    /// views) matches no view.
    fn version(&self) -> u64 {
        0
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

/// Slots of [`RECENT`]: a power of two.
const RECENT_SLOTS: usize = 64;

thread_local! {
    /// Indexes of pieces recently found by [`last_at_or_below`] on this thread, one per slot,
    /// the slot chosen by a hash of the address's 4 KiB page (a packet's source and destination, the
    /// rings, the doorbell records and CQs each keep theirs): a guess, checked before use.
    static RECENT: std::cell::Cell<[usize; RECENT_SLOTS]> =
        const { std::cell::Cell::new([0; RECENT_SLOTS]) };
}

/// The index of the last piece starting at or below `addr` (pieces sorted by start, not
/// overlapping), as `partition_point` finds it. A recently found piece that contains `addr` is
/// that piece (the next one starts at or after its end), so the one last found for an address
/// of the same slot is tried first: the data path touches the same few buffers packet after
/// packet.
#[inline]
fn last_at_or_below<P: Piece>(pieces: &[P], addr: u64) -> Option<usize> {
    // Fibonacci hashing of the page number (the top bits of the product), so buffers laid
    // out at regular strides do not share slots.
    let slot = ((addr >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize;
    let guess = RECENT.with(|r| r.as_array_of_cells()[slot].get());
    if let Some(p) = pieces.get(guess) {
        if p.start() <= addr && addr - p.start() < p.len() {
            return Some(guess);
        }
    }
    let i = pieces
        .partition_point(|p| p.start() <= addr)
        .checked_sub(1)?;
    RECENT.with(|r| r.as_array_of_cells()[slot].set(i));
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
    // host memory is valid for its whole length while the caller keeps it alive (its snapshot,
    // or the lock of the memory); `buf` is a distinct Rust buffer of `len` bytes, so the ranges
    // do not overlap.
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
        // valid for its whole length while `pieces` is kept alive (snapshot or lock); `buf`
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
        // inside piece `d`, whose host memory is valid while the caller keeps `pieces`
        // alive (snapshot or lock); `copy` (memmove) allows the ranges to overlap.
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
        // while `pieces` is kept alive (snapshot or lock); host_run() bounded each chunk to
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

mod mapped;
mod region;
mod view;

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
pub mod sigbus;

pub use mapped::{MappedMemory, MemSection};
pub use region::{AllocError, RegionMemory};
pub use view::{HostView, RingWindow, ViewSlot};

#[cfg(test)]
mod tests;
