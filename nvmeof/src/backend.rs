//! The block backend under a namespace, and a RAM backend.
//!
//! The core checks every range against [`Backend::size`] before it calls the backend or hands
//! the transport a [`Local::Disk`](crate::exec::Local::Disk): a backend sees only ranges inside
//! itself.

/// Why a backend operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendError {
    /// The range is not inside the disk (a core bug if it ever shows).
    OutOfRange,
    /// The medium failed the operation.
    Io,
}

/// A disk: bytes addressed by offset. Logical blocks are the core's business.
pub trait Backend {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError>;
    /// Stores `data` at `offset`; done when it returns (RAM: the bytes are there).
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError>;
    /// Zeroes `len` bytes at `offset`.
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), BackendError>;
    /// Deallocates `len` bytes at `offset`; they read back as zeroes (the namespace
    /// advertises it in DLFEAT). The default zeroes them.
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.write_zeroes(offset, len)
    }
    /// Makes everything written durable (RAM: nothing to do).
    fn flush(&mut self) -> Result<(), BackendError>;
}

/// A disk in memory: any byte storage (a `Vec<u8>` in tests; the identity-mapped huge pages
/// of the appliance, one memory region for the transport, whose bus address it carries).
pub struct RamDisk<M> {
    mem: M,
    bus_addr: u64,
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> RamDisk<M> {
    /// A disk over `mem`, which the device sees at `bus_addr` (0 where nothing DMAs).
    pub fn new(mem: M, bus_addr: u64) -> Self {
        RamDisk { mem, bus_addr }
    }

    /// The device's address of byte 0: a [`Local::Disk`](crate::exec::Local::Disk) at
    /// `offset` is `bus_addr() + offset`.
    pub fn bus_addr(&self) -> u64 {
        self.bus_addr
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.mem.as_ref()
    }

    /// The bytes, writable (what an RDMA READ into the disk does, in tests).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.as_mut()
    }

    fn range(&self, offset: u64, len: u64) -> Result<core::ops::Range<usize>, BackendError> {
        let size = self.mem.as_ref().len() as u64;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(offset as usize..end as usize),
            _ => Err(BackendError::OutOfRange),
        }
    }
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> Backend for RamDisk<M> {
    fn size(&self) -> u64 {
        self.mem.as_ref().len() as u64
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let r = self.range(offset, out.len() as u64)?;
        out.copy_from_slice(&self.mem.as_ref()[r]);
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let r = self.range(offset, data.len() as u64)?;
        self.mem.as_mut()[r].copy_from_slice(data);
        Ok(())
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        let r = self.range(offset, len)?;
        self.mem.as_mut()[r].fill(0);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BackendError> {
        Ok(())
    }
}
