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

    /// Copies `buf.len()` bytes at bus address `addr` into `buf`, as `mem.read` does.
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
