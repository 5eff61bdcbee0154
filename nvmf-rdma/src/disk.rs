//! The disk: one memory region over the namespace's memory, which the core reads and writes
//! as its block backend and the transport names in RDMA READs (into it) and RDMA WRITEs (out
//! of it), zero-copy. The region owns its DMA memory
//! ([`mlx5::ProtectionDomain::alloc_mr_unzeroed`]): one physically contiguous buffer aligned
//! to its size up to 1 GiB, so its translation is one entry of the largest page the size
//! allows (in the unikernel the buffer comes from the identity-mapped 1 GiB / 2 MiB page
//! pools).
//!
//! The disk is thin ([`nvmeof::backend::ChunkMap`]): its memory is not zeroed at start, each
//! chunk is zeroed by the CPU on its first touch, before the core hands its range to the
//! transport (so before the RDMA READ into it or the RDMA WRITE out of it is posted).

use core::cell::Cell;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::{MemoryRegion, ProtectionDomain};
use nvmeof::backend::ChunkMap;
use nvmeof::{Backend, BackendError};

/// Bytes of zeroes written at a time when the disk zeroes a range.
const ZERO_CHUNK: usize = 4096;

/// A thin RAM disk in a memory region: the block backend of the core.
pub struct MrDisk<H: Hal> {
    mr: MemoryRegion<H>,
    map: ChunkMap,
    /// The driver's last error ([`BackendError::Device`] says only that there was one).
    failed: Cell<Option<mlx5::Error>>,
}

impl<H: Hal> MrDisk<H> {
    /// A disk of `bytes` in a region of `pd` that only the local side may access (the host
    /// never gets a key to it), its memory not zeroed (it reads as zeros until written).
    pub fn alloc(pd: &ProtectionDomain<H>, bytes: usize) -> Result<Self, mlx5::Error> {
        Ok(Self::new(pd.alloc_mr_unzeroed(bytes, Access::LOCAL_WRITE)?))
    }

    /// The disk over `mr` (a region that owns its memory), all of it. Nothing of what the
    /// region holds is ever served: it reads as zeros until written.
    pub fn new(mr: MemoryRegion<H>) -> Self {
        let map = ChunkMap::new(mr.len());
        MrDisk {
            mr,
            map,
            failed: Cell::new(None),
        }
    }

    /// The region, for the transport's scatter/gather entries.
    pub fn mr(&self) -> &MemoryRegion<H> {
        &self.mr
    }

    /// The driver's error behind the last [`BackendError::Device`], if any.
    pub fn device_error(&self) -> Option<mlx5::Error> {
        self.failed.get()
    }

    /// Keeps the driver's error `e`: a device failure, not a range the core got wrong.
    fn io(&self, e: mlx5::Error) -> BackendError {
        self.failed.set(Some(e));
        BackendError::Device
    }

    /// Which chunks were written.
    pub fn chunks(&self) -> &ChunkMap {
        &self.map
    }

    /// [`ChunkMap::touch`] over the region.
    #[inline]
    fn touch(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        let (mr, failed) = (&self.mr, &self.failed);
        self.map.touch(offset, len, |at, n| {
            zero(mr, at, n)
                .inspect_err(|e| failed.set(Some(*e)))
                .map_err(|_| BackendError::Device)
        })
    }
}

/// Zeroes `len` bytes of `mr` at `at`.
fn zero<H: Hal>(mr: &MemoryRegion<H>, at: u64, len: u64) -> Result<(), mlx5::Error> {
    let zeros = [0u8; ZERO_CHUNK];
    let end = at + len;
    let mut at = at;
    while at < end {
        let n = (end - at).min(ZERO_CHUNK as u64);
        mr.write(at, &zeros[..n as usize])?;
        at += n;
    }
    Ok(())
}

impl<H: Hal> Backend for MrDisk<H> {
    fn size(&self) -> u64 {
        self.mr.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.mr.read(offset, out).map_err(|e| self.io(e))?;
        self.map.hide_unwritten(offset, out);
        Ok(())
    }

    // inline: the transport bench's in-capsule write, 2,448 instructions inlined, 2,468 not.
    #[inline]
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        self.touch(offset, data.len() as u64)?;
        self.mr.write(offset, data).map_err(|e| self.io(e))
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        for (at, n) in self.map.unmap(offset, len)?.into_iter().flatten() {
            zero(&self.mr, at, n).map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    /// Whole chunks become unwritten (they read as zeros again, at no cost); the bytes of a
    /// chunk deallocated in part are kept: the namespace does not report that deallocated
    /// blocks read as zeroes (Identify Namespace DLFEAT 0, as Linux's target leaves it:
    /// `drivers/nvme/target/admin-cmd.c` `nvmet_execute_identify_ns`; NVMe Base: what they
    /// read is then unspecified), so nothing needs writing.
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.map.unmap(offset, len).map(|_| ())
    }

    fn flush(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    #[inline]
    fn prepare(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.touch(offset, len)
    }
}
