//! [`MappedMemory`]: guest RAM sections mapped from file descriptors (split out of
//! `memory.rs`).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::RwLock;

use super::{
    copy_pieces, cover, move_pieces, sigbus, write_parts_in, Copy, DmaError, GuestMemory, Piece,
};

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
