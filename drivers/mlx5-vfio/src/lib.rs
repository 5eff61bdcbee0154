//! The mlx5 driver's [`Hal`] over Linux VFIO: BAR0 mmapped through `vfio-pci`, DMA memory from
//! 2 MiB huge pages mapped into the IOMMU, a `std` clock, RDRAND when the CPU has it.
//!
//! Two IOVA policies ([`IovaMode`]):
//! - [`IovaMode::Allocated`] (the default, for a real IOMMU): the HAL hands out IOVAs from 4 GiB
//!   up and maps each buffer there; 4 KiB pages are fine, the IOMMU makes them contiguous.
//! - [`IovaMode::Physical`]: IOVA = the physical address of the memory, read from
//!   `/proc/self/pagemap` (like DPDK's `--iova-mode=pa`). For a device that bypasses the IOMMU
//!   (QEMU's `x-pci-proxy-dev` behind an emulated intel-iommu reads guest RAM directly) and for
//!   hosts that want bus addresses equal to physical ones. Every buffer must then be physically
//!   contiguous: one huge page, or a run of huge pages the HAL checked; anything else is refused.
//!   Reading physical addresses needs CAP_SYS_ADMIN (root): without it pagemap shows PFN 0 and
//!   [`VfioHal::open_with`] fails with [`VfioError::NoPhysicalAddress`].
//!
//! In both modes the container, group and device come from `pci-driver` (TYPE1v2 IOMMU), and
//! every buffer is mapped with `VFIO_IOMMU_MAP_DMA` (at IOVA = PA in physical mode).
//!
//! See README.md for binding a ConnectX function to vfio-pci and the examples.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx5::hal::{DmaBuffer, Hal, HalError};
use mlx5::mr::PhysChunk;
use pci_driver::backends::vfio::VfioPciDevice;
use pci_driver::device::PciDevice;
use pci_driver::regions::{MappedOwningPciRegion, Permissions};

/// Size of a huge page, and of the arenas small buffers are carved from.
pub const HUGE_PAGE: usize = 2 << 20;
/// Size of a base page (the granule of /proc/self/pagemap).
const PAGE: usize = 4096;
/// Allocations up to this size come from shared arenas (one IOMMU mapping per arena).
const SMALL_MAX: usize = 64 << 10;
/// Physical mode: how many more mappings a large buffer tries before it is refused as not
/// physically contiguous.
const CONTIGUOUS_TRIES: usize = 4;
/// First IOVA handed out in [`IovaMode::Allocated`] (leaves page 0 unmapped).
const IOVA_BASE: u64 = 1 << 32;

/// How the HAL chooses the device address (IOVA) of a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IovaMode {
    /// IOVAs allocated by the HAL from 4 GiB up (needs an IOMMU that translates).
    #[default]
    Allocated,
    /// IOVA = physical address (`/proc/self/pagemap`, root only); buffers physically contiguous.
    Physical,
}

impl std::str::FromStr for IovaMode {
    type Err = VfioError;
    /// `alloc` / `va` or `pa`, as DPDK spells its `--iova-mode`.
    fn from_str(s: &str) -> Result<Self, VfioError> {
        match s {
            "alloc" | "allocated" | "va" => Ok(IovaMode::Allocated),
            "pa" | "physical" => Ok(IovaMode::Physical),
            _ => Err(VfioError::BadIovaMode),
        }
    }
}

/// Why the VFIO layer failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum VfioError {
    /// Opening the VFIO container, group or device (`pci-driver`) failed.
    Open(io::Error),
    /// The function has no BAR0.
    NoBar0,
    /// BAR0 could not be mmapped.
    MapBar(io::Error),
    /// Enabling memory space / bus mastering in config space failed.
    Config(io::Error),
    /// mmap of DMA memory failed (e.g. no free huge pages).
    Mmap { len: usize, err: io::Error },
    /// `/proc/self/pagemap` could not be read.
    Pagemap(io::Error),
    /// `/proc/self/pagemap` shows no physical addresses: reading them needs CAP_SYS_ADMIN.
    NoPhysicalAddress,
    /// A page of the range is not present (not populated) in memory.
    NotPresent { addr: usize },
    /// Physical mode: the buffer is not one physically contiguous run at the needed alignment.
    NotContiguous { addr: usize, len: usize },
    /// A range to pin that is empty or not page-aligned.
    BadRange { addr: usize, len: usize },
    /// `VFIO_IOMMU_MAP_DMA` refused the mapping.
    MapDma {
        iova: u64,
        len: usize,
        err: io::Error,
    },
    /// An IOVA mode other than `alloc` or `pa`.
    BadIovaMode,
}

impl fmt::Display for VfioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioError::Open(e) => write!(f, "vfio open: {e}"),
            VfioError::NoBar0 => write!(f, "the function has no BAR0"),
            VfioError::MapBar(e) => write!(f, "mmap of BAR0: {e}"),
            VfioError::Config(e) => write!(f, "config space write: {e}"),
            VfioError::Mmap { len, err } => write!(f, "mmap of {len} bytes of DMA memory: {err}"),
            VfioError::Pagemap(e) => write!(f, "/proc/self/pagemap: {e}"),
            VfioError::NoPhysicalAddress => write!(
                f,
                "/proc/self/pagemap shows no physical addresses (needs CAP_SYS_ADMIN: run as root)"
            ),
            VfioError::NotPresent { addr } => write!(f, "page at {addr:#x} is not present"),
            VfioError::NotContiguous { addr, len } => {
                write!(f, "{len} bytes at {addr:#x} are not physically contiguous")
            }
            VfioError::BadRange { addr, len } => {
                write!(f, "{len} bytes at {addr:#x}: empty or not page-aligned")
            }
            VfioError::MapDma { iova, len, err } => {
                write!(
                    f,
                    "VFIO_IOMMU_MAP_DMA of {len} bytes at IOVA {iova:#x}: {err}"
                )
            }
            VfioError::BadIovaMode => write!(f, "IOVA mode must be alloc or pa"),
        }
    }
}

impl std::error::Error for VfioError {}

/// An anonymous mapping (huge pages when possible), unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain process memory owned by this value.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` rounded up to huge pages; 4 KiB pages only if `fallback` allows.
    fn new(len: usize, fallback: bool) -> Result<Mapping, VfioError> {
        let len = len
            .checked_next_multiple_of(HUGE_PAGE)
            .ok_or(VfioError::BadRange { addr: 0, len })?;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let base = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // SAFETY: an anonymous mapping with no address hint; the result is checked.
        let mut p =
            unsafe { libc::mmap(ptr::null_mut(), len, prot, base | libc::MAP_HUGETLB, -1, 0) };
        if p == libc::MAP_FAILED && fallback {
            // No huge pages: 4 KiB pages still work, the IOMMU makes the IOVA range contiguous.
            // SAFETY: as above.
            p = unsafe { libc::mmap(ptr::null_mut(), len, prot, base, -1, 0) };
        }
        if p == libc::MAP_FAILED {
            return Err(VfioError::Mmap {
                len,
                err: io::Error::last_os_error(),
            });
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// `/proc/self/pagemap`: one little-endian u64 per 4 KiB virtual page; bit 63 present, bits
/// 0-54 the PFN, shown as 0 without CAP_SYS_ADMIN (Linux Documentation/admin-guide/mm/pagemap.rst).
struct Pagemap(File);

impl Pagemap {
    const PRESENT: u64 = 1 << 63;
    const PFN_MASK: u64 = (1 << 55) - 1;

    fn open() -> Result<Pagemap, VfioError> {
        File::open("/proc/self/pagemap")
            .map(Pagemap)
            .map_err(VfioError::Pagemap)
    }

    /// Physical addresses of the 4 KiB pages of `[addr, addr + len)` (page-aligned).
    fn phys(&self, addr: usize, len: usize) -> Result<Vec<u64>, VfioError> {
        let n = len / PAGE;
        let mut raw = vec![0u8; n * 8];
        self.0
            .read_exact_at(&mut raw, (addr / PAGE * 8) as u64)
            .map_err(VfioError::Pagemap)?;
        raw.chunks_exact(8)
            .enumerate()
            .map(|(i, b)| {
                let e = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                let at = addr + i * PAGE;
                if e & Self::PRESENT == 0 {
                    return Err(VfioError::NotPresent { addr: at });
                }
                match e & Self::PFN_MASK {
                    0 => Err(VfioError::NoPhysicalAddress),
                    pfn => Ok(pfn * PAGE as u64),
                }
            })
            .collect()
    }

    /// The maximal physically contiguous runs of `[addr, addr + len)`: (offset, pa, len).
    fn runs(&self, addr: usize, len: usize) -> Result<Vec<(usize, u64, usize)>, VfioError> {
        let pas = self.phys(addr, len)?;
        let mut runs: Vec<(usize, u64, usize)> = Vec::new();
        for (i, &pa) in pas.iter().enumerate() {
            match runs.last_mut() {
                Some((_, start, l)) if *start + *l as u64 == pa => *l += PAGE,
                _ => runs.push((i * PAGE, pa, PAGE)),
            }
        }
        Ok(runs)
    }

    /// The physical address of `[addr, addr + len)` if it is one contiguous run.
    fn contiguous(&self, addr: usize, len: usize) -> Result<u64, VfioError> {
        match self.runs(addr, len)?.as_slice() {
            [(0, pa, l)] if *l == len => Ok(*pa),
            _ => Err(VfioError::NotContiguous { addr, len }),
        }
    }
}

struct Arena {
    map: Mapping,
    iova: u64,
}

struct DmaState {
    next_iova: u64,
    /// Small-buffer arenas and free lists per power-of-two size class.
    arenas: Vec<Arena>,
    free: BTreeMap<usize, Vec<(u64, usize)>>, // class -> (iova, host address)
    bump: Option<(usize, usize)>,             // (arena index, offset)
    /// Why the last allocation failed (the `Hal` error type carries no detail).
    last_error: Option<VfioError>,
}

struct Shared {
    dev: VfioPciDevice,
    mode: IovaMode,
    pagemap: Option<Pagemap>,
    dma: Mutex<DmaState>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, DmaState> {
        self.dma.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Maps `len` bytes at `ptr` for the device at `iova` (VFIO_IOMMU_MAP_DMA, which pins).
    ///
    /// # Safety
    /// The memory must stay mapped until [`Shared::unmap`] of the same IOVA range.
    unsafe fn map(&self, iova: u64, ptr: *const u8, len: usize) -> Result<(), VfioError> {
        // SAFETY: the caller keeps the memory mapped until the IOVA range is unmapped.
        unsafe { self.dev.iommu().map(iova, len, ptr, Permissions::ReadWrite) }
            .map_err(|err| VfioError::MapDma { iova, len, err })
    }

    fn unmap(&self, iova: u64, len: usize) {
        let _ = self.dev.iommu().unmap(iova, len);
    }

    /// The device address for `m` (whose every byte is needed at an `align` boundary).
    fn place(&self, st: &mut DmaState, m: &Mapping, align: usize) -> Result<u64, VfioError> {
        match (self.mode, &self.pagemap) {
            (IovaMode::Physical, Some(pm)) => {
                let pa = pm.contiguous(m.ptr as usize, m.len)?;
                if pa % align as u64 != 0 {
                    return Err(VfioError::NotContiguous {
                        addr: m.ptr as usize,
                        len: m.len,
                    });
                }
                Ok(pa)
            }
            _ => {
                let a = align.max(PAGE) as u64;
                let iova = st.next_iova.next_multiple_of(a);
                st.next_iova = iova + m.len as u64;
                Ok(iova)
            }
        }
    }
}

/// A DMA buffer from [`VfioHal::dma_alloc`].
pub struct VfioDma {
    shared: Arc<Shared>,
    iova: u64,
    ptr: *mut u8,
    len: usize,
    /// `Some` for a dedicated mapping, `None` for a block of a small-buffer arena (`class`).
    own: Option<Mapping>,
    class: usize,
}

// SAFETY: the buffer is process memory mapped for the device; see DmaBuffer below.
unsafe impl Send for VfioDma {}
// SAFETY: as above.
unsafe impl Sync for VfioDma {}

// SAFETY: `ptr` addresses `len` bytes of a live mapping that the IOMMU maps at `iova`. In
// allocated mode IOVAs come from a bump allocator (and are reused only for freed blocks of the
// same arena class); in physical mode the IOVA is the memory's own physical address, checked
// contiguous, and two live mappings never share a physical page. So live buffers never overlap.
unsafe impl DmaBuffer for VfioDma {
    fn bus_addr(&self) -> u64 {
        self.iova
    }
    fn cpu_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for VfioDma {
    fn drop(&mut self) {
        match self.own.take() {
            Some(m) => {
                self.shared.unmap(self.iova, m.len);
                drop(m);
            }
            None => {
                let mut st = self.shared.state();
                st.free
                    .entry(self.class)
                    .or_default()
                    .push((self.iova, self.ptr as usize));
            }
        }
    }
}

/// Caller-owned memory mapped for the device by [`VfioHal::pin`]: unmapped (and unpinned) on
/// drop. Deregister every memory region built on it first.
pub struct PinnedMemory {
    shared: Arc<Shared>,
    ptr: *mut u8,
    len: usize,
    /// (iova, length) of each VFIO mapping.
    maps: Vec<(u64, usize)>,
    chunks: Vec<PhysChunk>,
}

// SAFETY: only addresses and IOVA bookkeeping; the memory itself belongs to the caller.
unsafe impl Send for PinnedMemory {}
// SAFETY: as above.
unsafe impl Sync for PinnedMemory {}

impl PinnedMemory {
    /// The device's view of the memory in order: what `ProtectionDomain::reg_phys` takes.
    pub fn chunks(&self) -> &[PhysChunk] {
        &self.chunks
    }
    /// The number of `VFIO_IOMMU_MAP_DMA` calls the pinning took.
    pub fn mappings(&self) -> usize {
        self.maps.len()
    }
    /// CPU address of the first byte.
    pub fn cpu_ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false (empty ranges are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedMemory {
    fn drop(&mut self) {
        for &(iova, len) in &self.maps {
            self.shared.unmap(iova, len);
        }
    }
}

/// The VFIO HAL.
pub struct VfioHal {
    shared: Arc<Shared>,
    bar: MappedOwningPciRegion,
    t0: Instant,
    rdrand: bool,
}

impl VfioHal {
    /// [`VfioHal::open_with`] in [`IovaMode::Allocated`].
    pub fn open(sysfs_path: impl AsRef<Path>) -> Result<VfioHal, VfioError> {
        Self::open_with(sysfs_path, IovaMode::Allocated)
    }

    /// Opens the function at `/sys/bus/pci/devices/<bdf>` (bound to vfio-pci), maps BAR0 and
    /// enables memory space and bus mastering. In [`IovaMode::Physical`] it first checks that
    /// `/proc/self/pagemap` shows physical addresses.
    pub fn open_with(sysfs_path: impl AsRef<Path>, mode: IovaMode) -> Result<VfioHal, VfioError> {
        let pagemap = match mode {
            IovaMode::Physical => {
                let pm = Pagemap::open()?;
                // A populated page of our own: PFN 0 means no CAP_SYS_ADMIN.
                let probe = Mapping::new(HUGE_PAGE, true)?;
                pm.phys(probe.ptr as usize, PAGE)?;
                Some(pm)
            }
            IovaMode::Allocated => None,
        };
        let dev = VfioPciDevice::open(sysfs_path).map_err(VfioError::Open)?;
        let bar0 = dev.bar(0).ok_or(VfioError::NoBar0)?;
        let bar = bar0
            .map(.., Permissions::ReadWrite)
            .map_err(VfioError::MapBar)?;
        let cmd = dev.config().command();
        cmd.memory_space_enable()
            .write(true)
            .map_err(VfioError::Config)?;
        cmd.bus_master_enable()
            .write(true)
            .map_err(VfioError::Config)?;
        #[cfg(target_arch = "x86_64")]
        let rdrand = std::arch::is_x86_feature_detected!("rdrand");
        #[cfg(not(target_arch = "x86_64"))]
        let rdrand = false;
        Ok(VfioHal {
            shared: Arc::new(Shared {
                dev,
                mode,
                pagemap,
                dma: Mutex::new(DmaState {
                    next_iova: IOVA_BASE,
                    arenas: Vec::new(),
                    free: BTreeMap::new(),
                    bump: None,
                    last_error: None,
                }),
            }),
            bar,
            t0: Instant::now(),
            rdrand,
        })
    }

    /// The IOVA policy.
    pub fn iova_mode(&self) -> IovaMode {
        self.shared.mode
    }

    /// Why the last failed `dma_alloc` failed (taken: the next call returns `None`).
    pub fn take_last_error(&self) -> Option<VfioError> {
        self.shared.state().last_error.take()
    }

    /// Maps caller-owned memory (e.g. a hugetlbfs file mapping) for the device: the pinning
    /// step of a memory registration. Allocated mode: one `VFIO_IOMMU_MAP_DMA` at a fresh IOVA.
    /// Physical mode: one per physically contiguous run, at IOVA = its physical address.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be a live, populated, page-aligned mapping of this process that
    /// stays mapped (and is not reused for anything the device must not see) until the
    /// returned [`PinnedMemory`] is dropped.
    pub unsafe fn pin(&self, ptr: *mut u8, len: usize) -> Result<PinnedMemory, VfioError> {
        let addr = ptr as usize;
        if len == 0 || !addr.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) {
            return Err(VfioError::BadRange { addr, len });
        }
        let mut pinned = PinnedMemory {
            shared: self.shared.clone(),
            ptr,
            len,
            maps: Vec::new(),
            chunks: Vec::new(),
        };
        let runs = match (self.shared.mode, &self.shared.pagemap) {
            (IovaMode::Physical, Some(pm)) => pm.runs(addr, len)?,
            _ => {
                let mut st = self.shared.state();
                let iova = st.next_iova.next_multiple_of(HUGE_PAGE as u64);
                st.next_iova = iova + len as u64;
                vec![(0, iova, len)]
            }
        };
        for (off, iova, l) in runs {
            // SAFETY: inside the caller's range, which stays mapped while `pinned` lives
            // (its drop unmaps every IOVA range first).
            unsafe { self.shared.map(iova, ptr.add(off), l) }?;
            pinned.maps.push((iova, l));
            pinned.chunks.push(PhysChunk {
                bus: iova,
                len: l as u64,
            });
        }
        Ok(pinned)
    }

    fn reg(&self, offset: usize, n: usize) -> *mut u8 {
        // The driver never passes an offset past BAR0 (Hal contract); stay inside regardless.
        assert!(offset + n <= self.bar.len(), "BAR0 access past its end");
        // SAFETY: offset + n lies inside BAR0 (asserted above).
        unsafe { self.bar.as_mut_ptr().add(offset) }
    }

    fn alloc(&self, size: usize, align: usize) -> Result<VfioDma, VfioError> {
        let sh = &self.shared;
        // Physical mode needs huge pages: a 4 KiB-page arena is not contiguous.
        let fallback = sh.mode == IovaMode::Allocated;
        let mut st = sh.state();
        if size <= SMALL_MAX && align <= SMALL_MAX {
            let class = size.max(align).next_power_of_two().max(64);
            let (iova, addr) = match st.free.get_mut(&class).and_then(Vec::pop) {
                Some(b) => b,
                None => {
                    // Carve from the current arena (class-aligned), or map a new one.
                    let fits = |st: &DmaState| {
                        st.bump.and_then(|(a, off)| {
                            let off = off.next_multiple_of(class);
                            (off + class <= HUGE_PAGE).then_some((a, off))
                        })
                    };
                    let (a, off) = match fits(&st) {
                        Some(x) => x,
                        None => {
                            let map = Mapping::new(HUGE_PAGE, fallback)?;
                            let iova = sh.place(&mut st, &map, HUGE_PAGE)?;
                            // SAFETY: the arena lives as long as the HAL's shared state.
                            unsafe { sh.map(iova, map.ptr, map.len) }?;
                            st.arenas.push(Arena { map, iova });
                            (st.arenas.len() - 1, 0)
                        }
                    };
                    st.bump = Some((a, off + class));
                    let ar = &st.arenas[a];
                    (ar.iova + off as u64, ar.map.ptr as usize + off)
                }
            };
            return Ok(VfioDma {
                shared: sh.clone(),
                iova,
                ptr: addr as *mut u8,
                len: size,
                own: None,
                class,
            });
        }
        // Physical mode: a run of huge pages that is not contiguous (or misaligned) is held
        // while a few more are tried, so the next mmap gets other pages; then all go back.
        let mut misses = Vec::new();
        let (map, iova) = loop {
            let map = Mapping::new(size, fallback)?;
            match sh.place(&mut st, &map, align.max(HUGE_PAGE)) {
                Ok(iova) => break (map, iova),
                Err(VfioError::NotContiguous { .. }) if misses.len() < CONTIGUOUS_TRIES => {
                    misses.push(map)
                }
                Err(e) => return Err(e),
            }
        };
        drop(misses);
        drop(st);
        // SAFETY: the mapping moves into the buffer, whose drop unmaps the IOVA first.
        unsafe { sh.map(iova, map.ptr, map.len) }?;
        let ptr = map.ptr;
        Ok(VfioDma {
            shared: sh.clone(),
            iova,
            ptr,
            len: size,
            own: Some(map),
            class: 0,
        })
    }
}

impl Hal for VfioHal {
    type Dma = VfioDma;

    fn bar0_len(&self) -> usize {
        self.bar.len()
    }
    fn mmio_read32(&self, offset: usize) -> [u8; 4] {
        // SAFETY: 4-byte aligned register inside BAR0 (checked by the driver).
        unsafe { ptr::read_volatile(self.reg(offset, 4) as *const u32) }.to_ne_bytes()
    }
    fn mmio_write32(&self, offset: usize, bytes: [u8; 4]) {
        // SAFETY: as above.
        unsafe { ptr::write_volatile(self.reg(offset, 4) as *mut u32, u32::from_ne_bytes(bytes)) }
    }
    fn mmio_write64(&self, offset: usize, bytes: [u8; 8]) {
        // SAFETY: 8-byte aligned doorbell inside BAR0; one 64-bit store.
        unsafe { ptr::write_volatile(self.reg(offset, 8) as *mut u64, u64::from_ne_bytes(bytes)) }
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Result<VfioDma, HalError> {
        if size == 0 || !align.is_power_of_two() {
            return Err(HalError::BadLayout);
        }
        self.alloc(size, align).map_err(|e| {
            let h = match e {
                VfioError::MapDma { .. } | VfioError::Pagemap(_) => HalError::Io,
                _ => HalError::OutOfMemory,
            };
            self.shared.state().last_error = Some(e);
            h
        })
    }
    fn now(&self) -> Duration {
        self.t0.elapsed()
    }
    fn relax(&self) {
        std::hint::spin_loop();
    }
    fn random_u64(&self) -> Option<u64> {
        #[cfg(target_arch = "x86_64")]
        if self.rdrand {
            let mut v = 0u64;
            // SAFETY: the CPU supports RDRAND (checked at open).
            if unsafe { core::arch::x86_64::_rdrand64_step(&mut v) } == 1 {
                return Some(v);
            }
        }
        None
    }
    fn function_level_reset(&self) -> Result<(), HalError> {
        self.shared.dev.reset().map_err(|_| HalError::Io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iova_mode_parses_dpdk_spellings() {
        assert_eq!("pa".parse::<IovaMode>().ok(), Some(IovaMode::Physical));
        assert_eq!("alloc".parse::<IovaMode>().ok(), Some(IovaMode::Allocated));
        assert!(matches!(
            "x".parse::<IovaMode>(),
            Err(VfioError::BadIovaMode)
        ));
    }

    /// Physical addresses: root sees PFNs (and a huge page is one run); anyone else gets the
    /// typed error, never a zero address.
    #[test]
    fn pagemap_gives_physical_addresses_or_a_typed_error() {
        let pm = Pagemap::open().expect("/proc/self/pagemap");
        let m = Mapping::new(HUGE_PAGE, true).expect("mmap");
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        match pm.phys(m.ptr as usize, m.len) {
            Ok(pas) => {
                assert!(root, "PFNs visible without root");
                assert!(pas.iter().all(|&pa| pa != 0 && pa % PAGE as u64 == 0));
                let runs = pm.runs(m.ptr as usize, m.len).unwrap();
                assert_eq!(runs.iter().map(|r| r.2).sum::<usize>(), m.len);
            }
            Err(e) => assert!(matches!(e, VfioError::NoPhysicalAddress) && !root, "{e}"),
        }
    }

    /// A hugetlb page, where one can be had, is one physically contiguous run.
    #[test]
    fn a_huge_page_is_one_physical_run() {
        let Ok(m) = Mapping::new(HUGE_PAGE, false) else {
            eprintln!("SKIPPED a_huge_page_is_one_physical_run: no free 2 MiB huge page");
            return;
        };
        let pm = Pagemap::open().expect("/proc/self/pagemap");
        match pm.contiguous(m.ptr as usize, m.len) {
            Ok(pa) => assert_eq!(pa % HUGE_PAGE as u64, 0),
            Err(VfioError::NoPhysicalAddress) => {
                eprintln!(
                    "SKIPPED a_huge_page_is_one_physical_run: pagemap shows no PFNs (not root)"
                )
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Two separately faulted 4 KiB pages are (almost surely) not adjacent: `contiguous`
    /// refuses what pagemap shows split.
    #[test]
    fn split_runs_are_refused() {
        let pm = Pagemap::open().expect("/proc/self/pagemap");
        let len = 64 * PAGE;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // SAFETY: an anonymous 4 KiB-page mapping with no address hint; checked below.
        let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        let m = Mapping {
            ptr: p as *mut u8,
            len,
        };
        match pm.runs(m.ptr as usize, m.len) {
            Ok(runs) if runs.len() > 1 => assert!(matches!(
                pm.contiguous(m.ptr as usize, m.len),
                Err(VfioError::NotContiguous { .. })
            )),
            Ok(_) => eprintln!("SKIPPED split_runs_are_refused: the mapping is one run"),
            Err(VfioError::NoPhysicalAddress) => {
                eprintln!("SKIPPED split_runs_are_refused: pagemap shows no PFNs (not root)")
            }
            Err(e) => panic!("{e}"),
        }
    }
}
