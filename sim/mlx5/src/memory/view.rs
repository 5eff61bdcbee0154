//! Host views: one region of guest memory resolved to its host address once, and reused for
//! every access inside it while the memory's version shows that no region was added or
//! removed since ([`GuestMemory::view`], [`GuestMemory::view_current`]).
//!
//! A queue's ring and doorbell record are touched on every WQE and CQE: a [`ViewSlot`] kept
//! with the queue turns such an access into a version compare, a bounds check and one copy.
//! An access outside the view, or after the memory changed (a region freed or allocated),
//! takes the memory's ordinary path, so it succeeds or fails exactly as without the view,
//! and then resolves the view again. Memories without views ([`super::MappedMemory`],
//! [`super::NoMemory`]) always take the ordinary path.

use std::any::Any;
use std::sync::Arc;

use super::{DmaError, GuestMemory};

/// One region of guest memory as the host sees it, valid while its memory's version is
/// `version`.
#[derive(Clone)]
pub struct HostView {
    /// The memory's version when the view was resolved (versions are unique in the
    /// process, so a view can never be taken for another memory's).
    pub(super) version: u64,
    /// Bus address of the region's first byte.
    pub(super) bus: u64,
    /// The region's length in bytes.
    pub(super) len: u64,
    /// Host address of the region's first byte.
    pub(super) host: *mut u8,
    /// Keeps the region's buffer allocated while the view exists (an access that checked
    /// the version just before a concurrent free finishes on memory still allocated, as one
    /// through the memory's own snapshot does).
    pub(super) _keep: Arc<dyn Any + Send + Sync>,
}

// SAFETY: `host` points into the buffer `_keep` keeps alive, which is plain heap memory
// shared with the device as DMA memory is; the view itself is immutable.
unsafe impl Send for HostView {}
// SAFETY: see Send above.
unsafe impl Sync for HostView {}

impl std::fmt::Debug for HostView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HostView({:#x}+{:#x} @v{})",
            self.bus, self.len, self.version
        )
    }
}

impl HostView {
    /// The host address of `[addr, addr + len)` if the view holds all of it.
    #[inline]
    fn host_of(&self, addr: u64, len: usize) -> Option<*mut u8> {
        let off = addr.checked_sub(self.bus)?;
        if off > self.len || len as u64 > self.len - off {
            return None;
        }
        // SAFETY: off + len <= the region's length: the pointer stays inside (or one past)
        // the region's host buffer.
        Some(unsafe { self.host.add(off as usize) })
    }
}

/// A queue's ring as the host sees it: the stretch of its buffer (buffer offsets
/// `lo..lo + len`) around the last access that is contiguous in bus space and inside one
/// region of guest memory, with that region's view. An access inside the stretch is a
/// subtraction, a bounds check and the view's version compare (no page-list walk, no region
/// lookup); any other access takes the queue's ordinary path, and then [`RingWindow::refresh`]
/// resolves the stretch around it again. Reset whenever the queue's buffer is replaced.
#[derive(Debug, Default)]
pub struct RingWindow(Option<Window>);

#[derive(Debug)]
struct Window {
    view: HostView,
    /// Buffer offset of the stretch's first byte.
    lo: u64,
    /// Length of the stretch.
    len: u64,
    /// Where the stretch starts in the view's region (`lo`'s byte is at `view.host + start`).
    start: u64,
}

impl RingWindow {
    /// The host address of buffer bytes `[off, off + len)` if the stretch holds them all and
    /// the memory has not changed since it was resolved: its version is `now`, read from the
    /// memory ([`GuestMemory::version`]) for this access or for the doorbell it belongs to.
    #[inline]
    fn host(&self, now: u64, off: u64, len: usize) -> Option<*mut u8> {
        let w = self.0.as_ref()?;
        // Below `lo`, `d` wraps past `w.len`.
        let d = off.wrapping_sub(w.lo);
        if d > w.len || len as u64 > w.len - d {
            return None;
        }
        // SAFETY: `start + d + len <= start + w.len <= view.len` (the stretch lies inside the
        // view's region, `refresh`): the pointer stays inside the region's host buffer, which
        // the view keeps allocated.
        let host = unsafe { w.view.host.add((w.start + d) as usize) };
        (w.view.version == now).then_some(host)
    }

    /// Copies buffer bytes `[off, off + N)` into `buf` if the stretch holds them and the
    /// memory's version is `now` (true), as a read of the same bytes through the memory would;
    /// false: nothing was read.
    #[inline]
    pub fn read<const N: usize>(&self, now: u64, off: u64, buf: &mut [u8; N]) -> bool {
        let Some(host) = self.host(now, off, N) else {
            return false;
        };
        // SAFETY: `host` proved the N bytes lie inside the view's live region; `buf` is a
        // distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(host, buf.as_mut_ptr(), N) };
        true
    }

    /// [`RingWindow::read`] of `buf.len()` bytes.
    #[inline]
    pub fn read_slice(&self, now: u64, off: u64, buf: &mut [u8]) -> bool {
        let Some(host) = self.host(now, off, buf.len()) else {
            return false;
        };
        // SAFETY: as in `read`: `host` proved the bytes lie inside the view's live region;
        // `buf` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(host, buf.as_mut_ptr(), buf.len()) };
        true
    }

    /// Writes `body` at buffer offset `off`, then the byte `last` right after it (visible
    /// only after `body`), if the stretch holds all `N + 1` bytes and the memory's version is
    /// `now` (true), as [`ViewSlot::write_split`] does; false: nothing was written.
    #[inline]
    pub fn write_split<const N: usize>(
        &self,
        now: u64,
        off: u64,
        body: &[u8; N],
        last: u8,
    ) -> bool {
        let Some(host) = self.host(now, off, N + 1) else {
            return false;
        };
        // SAFETY: as in `read`: the N + 1 bytes lie inside the view's live region; `body` is
        // a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(body.as_ptr(), host, N);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            host.add(N).write(last);
        }
        true
    }

    /// After an access at buffer offset `off` of `buf` went through the ordinary path:
    /// resolves the stretch around it (none when `off` is not guest memory).
    #[cold]
    #[inline(never)]
    pub fn refresh(
        &mut self,
        mem: &dyn GuestMemory,
        buf: &crate::objects::mr::PagedBuffer,
        off: u64,
    ) {
        self.0 = None;
        let Some((lo, hi, bus_lo)) = buf.contiguous_at(off) else {
            return;
        };
        let bus = bus_lo + (off - lo);
        let Some(view) = mem.view(bus) else {
            return;
        };
        // The stretch clipped to the view's region (which holds `bus`).
        let first = bus_lo.max(view.bus);
        let end = (bus_lo + (hi - lo)).min(view.bus.saturating_add(view.len));
        if end <= first {
            return;
        }
        self.0 = Some(Window {
            lo: lo + (first - bus_lo),
            len: end - first,
            start: first - view.bus,
            view,
        });
    }

    /// Forgets the stretch (the queue's buffer was replaced).
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

/// A cached [`HostView`] of the region a queue last touched (its ring, its doorbell record).
#[derive(Debug, Default)]
pub struct ViewSlot(Option<HostView>);

impl ViewSlot {
    /// The host address of `[addr, addr + len)` through the cached view, if it holds the
    /// range and `mem` has not changed since it was resolved.
    #[inline]
    fn fast(&self, mem: &dyn GuestMemory, addr: u64, len: usize) -> Option<*mut u8> {
        let v = self.0.as_ref()?;
        let host = v.host_of(addr, len)?;
        mem.view_current(v).then_some(host)
    }

    /// After an access through `mem`'s own path succeeded: resolves the view of the region
    /// holding `addr` for the next access.
    #[cold]
    fn refresh(&mut self, mem: &dyn GuestMemory, addr: u64) {
        self.0 = mem.view(addr);
    }

    /// [`ViewSlot::read`] with the memory's version read already (`now`, from
    /// [`GuestMemory::version`] for the doorbell this access belongs to): through the view
    /// when it holds the range and its version is `now`, else as `mem.read`.
    #[inline]
    ///
    /// `mem` is dereferenced only when the view does not serve the read (an `Arc` of the
    /// memory is passed as it is).
    pub fn read_at<'m, M: std::ops::Deref<Target = dyn GuestMemory + 'm> + ?Sized>(
        &mut self,
        now: u64,
        mem: &M,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), DmaError> {
        if let Some(v) = self.0.as_ref().filter(|v| v.version == now) {
            if let Some(host) = v.host_of(addr, buf.len()) {
                // SAFETY: as in `read`: the range lies inside the view's region, whose
                // buffer the view keeps allocated, and the memory's version was the view's
                // when `now` was read; `buf` is a distinct Rust buffer.
                unsafe { std::ptr::copy_nonoverlapping(host, buf.as_mut_ptr(), buf.len()) };
                return Ok(());
            }
        }
        self.read(&**mem, addr, buf)
    }

    /// Copies `buf.len()` bytes at bus address `addr` into `buf`, as `mem.read` does.
    #[inline]
    pub fn read(
        &mut self,
        mem: &dyn GuestMemory,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), DmaError> {
        if let Some(host) = self.fast(mem, addr, buf.len()) {
            // SAFETY: `fast` proved the range lies inside the view's region, whose buffer the
            // view keeps allocated, and that the memory still has it (its version is
            // unchanged); `buf` is a distinct Rust buffer.
            unsafe { std::ptr::copy_nonoverlapping(host, buf.as_mut_ptr(), buf.len()) };
            return Ok(());
        }
        mem.read(addr, buf)?;
        self.refresh(mem, addr);
        Ok(())
    }

    /// Writes `body` at bus address `addr`, then the byte `last` right after it, as
    /// `mem.write_parts(&[(addr, body), (addr + N, &[last])])` does (`last` becomes visible
    /// only after `body`: a CQE's owner byte after the rest of it), through the view when it
    /// holds all `N + 1` bytes.
    #[inline]
    pub fn write_split<const N: usize>(
        &mut self,
        mem: &dyn GuestMemory,
        addr: u64,
        body: &[u8; N],
        last: u8,
    ) -> Result<(), DmaError> {
        if let Some(host) = self.fast(mem, addr, N + 1) {
            // SAFETY: as in `read`: `fast` proved the N + 1 bytes lie inside the view's live
            // region; `body` is a distinct Rust buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(body.as_ptr(), host, N);
                std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                host.add(N).write(last);
            }
            return Ok(());
        }
        let last = [last];
        self.write_parts(mem, &[(addr, &body[..]), (addr + N as u64, &last[..])])
    }

    /// Writes each `(addr, bytes)` of `parts` in order, as `mem.write_parts` does: through
    /// the view (with a release fence between two parts, so a later part becomes visible
    /// only after the earlier ones) when it holds every part, else through `mem`.
    pub fn write_parts(
        &mut self,
        mem: &dyn GuestMemory,
        parts: &[(u64, &[u8])],
    ) -> Result<(), DmaError> {
        if let Some(v) = self.0.as_ref() {
            if parts.iter().all(|&(a, b)| v.host_of(a, b.len()).is_some()) && mem.view_current(v) {
                for (i, &(addr, bytes)) in parts.iter().enumerate() {
                    if i > 0 {
                        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                    }
                    if let Some(host) = v.host_of(addr, bytes.len()) {
                        // SAFETY: as in `read`: inside the view's live region; `bytes` is
                        // a distinct Rust buffer.
                        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), host, bytes.len()) };
                    }
                }
                return Ok(());
            }
        }
        mem.write_parts(parts)?;
        if let Some(&(addr, _)) = parts.first() {
            self.refresh(mem, addr);
        }
        Ok(())
    }
}
