//! `DmaMem::alloc` zeroes what the HAL hands it; `DmaMem::alloc_unzeroed` (under
//! `ProtectionDomain::alloc_mr_unzeroed`, the thin RAM disk's region) leaves it as it was.
//! A HAL whose memory holds old bytes shows which is which.

use std::time::Duration;

use mlx5::hal::DmaMem;
use mlx5::{DmaBuffer, Hal, HalError};

/// What the memory held before the driver took it.
const OLD: u8 = 0xee;

/// Heap memory full of [`OLD`], at bus address 0.
struct OldDma {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned by this value alone; the pointer is only handed to DmaMem.
unsafe impl Send for OldDma {}
// SAFETY: as for Send; DmaMem's accesses are its own bounds-checked copies.
unsafe impl Sync for OldDma {}

// SAFETY: `ptr` is a live heap allocation of `len` bytes until drop, and bus address 0 is
// the only buffer of the HAL at a time (each test takes one).
unsafe impl DmaBuffer for OldDma {
    fn bus_addr(&self) -> u64 {
        0
    }
    fn cpu_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for OldDma {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr, self.len);
        // SAFETY: `ptr` came from Box::into_raw of a boxed slice of `len` bytes, once.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// A HAL with no device: only its DMA memory is used.
struct OldHal;

impl Hal for OldHal {
    type Dma = OldDma;
    fn bar0_len(&self) -> usize {
        0
    }
    fn mmio_read32(&self, _: usize) -> [u8; 4] {
        [0; 4]
    }
    fn mmio_write32(&self, _: usize, _: [u8; 4]) {}
    fn mmio_write64(&self, _: usize, _: [u8; 8]) {}
    fn dma_alloc(&self, size: usize, _align: usize) -> Result<OldDma, HalError> {
        let b = vec![OLD; size].into_boxed_slice();
        Ok(OldDma {
            len: b.len(),
            ptr: Box::into_raw(b).cast::<u8>(),
        })
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

fn bytes(m: &DmaMem<OldDma>) -> Vec<u8> {
    let mut b = vec![0x55; m.len()];
    m.read(0, &mut b).unwrap();
    b
}

#[test]
fn alloc_zeroes_the_memory_and_alloc_unzeroed_leaves_it() {
    let m = DmaMem::alloc(&OldHal, 8192, 4096).unwrap();
    assert!(bytes(&m).iter().all(|&b| b == 0));
    let m = DmaMem::alloc_unzeroed(&OldHal, 8192, 4096).unwrap();
    assert!(bytes(&m).iter().all(|&b| b == OLD));
}
