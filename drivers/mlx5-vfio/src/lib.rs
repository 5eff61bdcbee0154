//! The mlx5 driver's [`Hal`] over Linux VFIO: BAR0 mmapped through `vfio-pci`, DMA memory from
//! 2 MiB huge pages mapped into the IOMMU, a `std` clock, RDRAND when the CPU has it.
//!
//! See README.md for binding a ConnectX function to vfio-pci and running
//! `examples/vfio_info.rs`. Nobody on this project has a NIC: nothing runs this in tests.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlx5::hal::{DmaBuffer, Hal, HalError};
use pci_driver::backends::vfio::VfioPciDevice;
use pci_driver::device::PciDevice;
use pci_driver::regions::{MappedOwningPciRegion, Permissions};

/// Size of a huge page, and of the arenas small buffers are carved from.
pub const HUGE_PAGE: usize = 2 << 20;
/// Allocations up to this size come from shared arenas (one IOMMU mapping per arena).
const SMALL_MAX: usize = 64 << 10;
/// First IOVA handed out (leaves page 0 unmapped).
const IOVA_BASE: u64 = 1 << 32;

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
    fn new(len: usize) -> io::Result<Mapping> {
        let len = len.next_multiple_of(HUGE_PAGE);
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let base = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // SAFETY: an anonymous mapping with no address hint; the result is checked.
        let mut p =
            unsafe { libc::mmap(ptr::null_mut(), len, prot, base | libc::MAP_HUGETLB, -1, 0) };
        if p == libc::MAP_FAILED {
            // No huge pages: 4 KiB pages still work, the IOMMU makes the IOVA range contiguous.
            // SAFETY: as above.
            p = unsafe { libc::mmap(ptr::null_mut(), len, prot, base, -1, 0) };
        }
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
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
}

struct Shared {
    dev: VfioPciDevice,
    dma: Mutex<DmaState>,
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

// SAFETY: `ptr` addresses `len` bytes of a live mapping that the IOMMU maps at `iova`; IOVAs are
// handed out by a bump allocator (and reused only for freed blocks of the same arena class), so
// live buffers never overlap.
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
                let _ = self.shared.dev.iommu().unmap(self.iova, m.len);
                drop(m);
            }
            None => {
                let mut st = self.shared.dma.lock().unwrap_or_else(|e| e.into_inner());
                st.free
                    .entry(self.class)
                    .or_default()
                    .push((self.iova, self.ptr as usize));
            }
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
    /// Opens the function at `/sys/bus/pci/devices/<bdf>` (bound to vfio-pci), maps BAR0 and
    /// enables memory space and bus mastering.
    pub fn open(sysfs_path: impl AsRef<Path>) -> io::Result<VfioHal> {
        let dev = VfioPciDevice::open(sysfs_path)?;
        let bar0 = dev
            .bar(0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no BAR0"))?;
        let bar = bar0.map(.., Permissions::ReadWrite)?;
        let cmd = dev.config().command();
        cmd.memory_space_enable().write(true)?;
        cmd.bus_master_enable().write(true)?;
        #[cfg(target_arch = "x86_64")]
        let rdrand = std::arch::is_x86_feature_detected!("rdrand");
        #[cfg(not(target_arch = "x86_64"))]
        let rdrand = false;
        Ok(VfioHal {
            shared: Arc::new(Shared {
                dev,
                dma: Mutex::new(DmaState {
                    next_iova: IOVA_BASE,
                    arenas: Vec::new(),
                    free: BTreeMap::new(),
                    bump: None,
                }),
            }),
            bar,
            t0: Instant::now(),
            rdrand,
        })
    }

    fn reg(&self, offset: usize, n: usize) -> *mut u8 {
        // The driver never passes an offset past BAR0 (Hal contract); stay inside regardless.
        assert!(offset + n <= self.bar.len(), "BAR0 access past its end");
        // SAFETY: offset + n lies inside BAR0 (asserted above).
        unsafe { self.bar.as_mut_ptr().add(offset) }
    }

    fn alloc_iova(st: &mut DmaState, len: usize, align: usize) -> u64 {
        let a = align.max(4096) as u64;
        let iova = st.next_iova.next_multiple_of(a);
        st.next_iova = iova + len as u64;
        iova
    }

    fn map(&self, m: &Mapping, iova: u64) -> Result<(), HalError> {
        // SAFETY: the mapping is live and stays mapped until the buffer that owns it is dropped
        // (which unmaps the IOVA first).
        unsafe {
            self.shared
                .dev
                .iommu()
                .map(iova, m.len, m.ptr, Permissions::ReadWrite)
        }
        .map_err(|_| HalError::Io)
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
        let mut st = self.shared.dma.lock().unwrap_or_else(|e| e.into_inner());
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
                            let map = Mapping::new(HUGE_PAGE).map_err(|_| HalError::OutOfMemory)?;
                            let iova = Self::alloc_iova(&mut st, HUGE_PAGE, HUGE_PAGE);
                            self.map(&map, iova)?;
                            st.arenas.push(Arena { map, iova });
                            (st.arenas.len() - 1, 0)
                        }
                    };
                    st.bump = Some((a, off + class));
                    let ar = &st.arenas[a];
                    (ar.iova + off as u64, ar.map.ptr as usize + off)
                }
            };
            let ptr = addr as *mut u8;
            // SAFETY: the block lies inside a live arena; zero it as the trait promises.
            unsafe { ptr::write_bytes(ptr, 0, class) };
            return Ok(VfioDma {
                shared: self.shared.clone(),
                iova,
                ptr,
                len: size,
                own: None,
                class,
            });
        }
        let map = Mapping::new(size).map_err(|_| HalError::OutOfMemory)?;
        let iova = Self::alloc_iova(&mut st, map.len, align.max(HUGE_PAGE));
        drop(st);
        self.map(&map, iova)?;
        let ptr = map.ptr;
        Ok(VfioDma {
            shared: self.shared.clone(),
            iova,
            ptr,
            len: size,
            own: Some(map),
            class: 0,
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
