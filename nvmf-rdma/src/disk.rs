//! The disk: one memory region over the namespace's memory, which the core reads and writes
//! as its block backend and the transport names in RDMA READs (into it) and RDMA WRITEs (out
//! of it), zero-copy. The region owns its DMA memory ([`mlx5::ProtectionDomain::alloc_mr`]):
//! one physically contiguous buffer aligned to its size up to 1 GiB, so its translation is
//! one entry of the largest page the size allows (in the unikernel the buffer comes from the
//! identity-mapped 1 GiB / 2 MiB page pools).

use mlx5::hal::Hal;
use mlx5::MemoryRegion;
use nvmeof::{Backend, BackendError};

/// Bytes of zeroes written at a time by [`Backend::write_zeroes`].
const ZERO_CHUNK: usize = 4096;

/// A RAM disk in a memory region: the block backend of the core.
pub struct MrDisk<H: Hal> {
    mr: MemoryRegion<H>,
}

impl<H: Hal> MrDisk<H> {
    /// The disk over `mr` (a region that owns its memory), all of it.
    pub fn new(mr: MemoryRegion<H>) -> Self {
        MrDisk { mr }
    }

    /// The region, for the transport's scatter/gather entries.
    pub fn mr(&self) -> &MemoryRegion<H> {
        &self.mr
    }
}

fn io(_: mlx5::Error) -> BackendError {
    BackendError::OutOfRange
}

impl<H: Hal> Backend for MrDisk<H> {
    fn size(&self) -> u64 {
        self.mr.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.mr.read(offset, out).map_err(io)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        self.mr.write(offset, data).map_err(io)
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        let zero = [0u8; ZERO_CHUNK];
        let end = offset.checked_add(len).ok_or(BackendError::OutOfRange)?;
        if end > self.size() {
            return Err(BackendError::OutOfRange);
        }
        let mut at = offset;
        while at < end {
            let n = (end - at).min(ZERO_CHUNK as u64);
            self.mr.write(at, &zero[..n as usize]).map_err(io)?;
            at += n;
        }
        Ok(())
    }

    /// Keeps the bytes: the namespace does not report that deallocated blocks read as zeroes
    /// (Identify Namespace DLFEAT 0, "not reported": NVMe Base, what they read is
    /// unspecified), so nothing needs writing. Zeroing them would hold the target for the
    /// whole memset: mkfs.ext4 deallocates the whole namespace first, and under TCG zeroing
    /// 1 GiB took the host's keep-alive timeout and more.
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(BackendError::OutOfRange),
        }
    }

    fn flush(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}
