//! The neutral boot information handed from the boot protocols to the kernel.

/// Which loader protocol started the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Pvh,
    Multiboot2,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pvh => "pvh",
            Protocol::Multiboot2 => "multiboot2",
        }
    }
}

/// Memory kinds, as the E820 / Multiboot2 / `XEN_HVM_MEMMAP_TYPE_*` codes define them
/// (xen/include/public/arch-x86/hvm/start_info.h; Multiboot2 spec "Memory map" tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    Usable,
    Reserved,
    AcpiReclaimable,
    AcpiNvs,
    Unusable,
    Other(u32),
}

impl MemoryKind {
    pub fn from_e820(code: u32) -> Self {
        match code {
            1 => MemoryKind::Usable,
            2 => MemoryKind::Reserved,
            3 => MemoryKind::AcpiReclaimable,
            4 => MemoryKind::AcpiNvs,
            5 => MemoryKind::Unusable,
            other => MemoryKind::Other(other),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    pub start: u64,
    pub len: u64,
    pub kind: MemoryKind,
}

impl MemoryRegion {
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }
}

pub const MAX_MEMORY_REGIONS: usize = 128;
pub const MAX_CMDLINE: usize = 1024;
pub const MAX_BOOT_RESERVED: usize = 4;

/// Everything the kernel needs from the loader, copied out of the loader's structures.
#[derive(Clone, Debug)]
pub struct BootInfo {
    pub protocol: Protocol,
    regions: [MemoryRegion; MAX_MEMORY_REGIONS],
    region_count: usize,
    cmdline: [u8; MAX_CMDLINE],
    cmdline_len: usize,
    /// Physical address of the ACPI RSDP, if the loader told us.
    pub rsdp: Option<u64>,
    /// Loader structures the kernel still points into (e.g. Multiboot2's copy of the RSDP):
    /// the frame allocator must not hand these out.
    reserved: [(u64, u64); MAX_BOOT_RESERVED],
    reserved_count: usize,
}

/// Errors while reading the loader's structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootError {
    BadMagic(u32),
    Unreadable(u64),
    NoMemoryMap,
    Malformed(&'static str),
}

impl BootInfo {
    pub fn new(protocol: Protocol) -> Self {
        BootInfo {
            protocol,
            regions: [MemoryRegion {
                start: 0,
                len: 0,
                kind: MemoryKind::Reserved,
            }; MAX_MEMORY_REGIONS],
            region_count: 0,
            cmdline: [0; MAX_CMDLINE],
            cmdline_len: 0,
            rsdp: None,
            reserved: [(0, 0); MAX_BOOT_RESERVED],
            reserved_count: 0,
        }
    }

    /// Adds a region; returns false when the table is full (the region is dropped).
    pub fn push_region(&mut self, region: MemoryRegion) -> bool {
        if region.len == 0 {
            return true;
        }
        if self.region_count == MAX_MEMORY_REGIONS {
            return false;
        }
        self.regions[self.region_count] = region;
        self.region_count += 1;
        true
    }

    pub fn memory_map(&self) -> &[MemoryRegion] {
        &self.regions[..self.region_count]
    }

    /// Stores the command line, truncated to [`MAX_CMDLINE`] bytes at a UTF-8 boundary.
    pub fn set_cmdline(&mut self, bytes: &[u8]) {
        let mut len = bytes.len().min(MAX_CMDLINE);
        while core::str::from_utf8(&bytes[..len]).is_err() {
            len -= 1;
        }
        self.cmdline[..len].copy_from_slice(&bytes[..len]);
        self.cmdline_len = len;
    }

    pub fn cmdline(&self) -> &str {
        // Only valid UTF-8 is ever stored (set_cmdline).
        core::str::from_utf8(&self.cmdline[..self.cmdline_len]).unwrap_or("")
    }

    pub fn push_reserved(&mut self, start: u64, len: u64) {
        if self.reserved_count < MAX_BOOT_RESERVED && len > 0 {
            self.reserved[self.reserved_count] = (start, len);
            self.reserved_count += 1;
        }
    }

    /// Loader memory that stays in use: (start, len) pairs.
    pub fn reserved(&self) -> &[(u64, u64)] {
        &self.reserved[..self.reserved_count]
    }
}

/// Read access to physical memory while the loader's structures are parsed.
/// On the target this is a raw read through the identity map; host tests use a byte buffer.
pub trait PhysMemory {
    /// Copies `buf.len()` bytes from physical address `addr`; false if out of range.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    fn read_u32(&self, addr: u64) -> Result<u32, BootError> {
        let mut b = [0u8; 4];
        if self.read(addr, &mut b) {
            Ok(u32::from_le_bytes(b))
        } else {
            Err(BootError::Unreadable(addr))
        }
    }

    fn read_u64(&self, addr: u64) -> Result<u64, BootError> {
        let mut b = [0u8; 8];
        if self.read(addr, &mut b) {
            Ok(u64::from_le_bytes(b))
        } else {
            Err(BootError::Unreadable(addr))
        }
    }

    /// Reads a NUL-terminated string of at most `max` bytes into `out`; returns its length.
    fn read_cstr(&self, addr: u64, out: &mut [u8]) -> Result<usize, BootError> {
        for (i, slot) in out.iter_mut().enumerate() {
            let mut b = [0u8; 1];
            if !self.read(addr + i as u64, &mut b) {
                return Err(BootError::Unreadable(addr + i as u64));
            }
            if b[0] == 0 {
                return Ok(i);
            }
            *slot = b[0];
        }
        Ok(out.len())
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::PhysMemory;

    /// A byte buffer standing for physical memory at `base`.
    pub struct Buffer {
        pub base: u64,
        pub bytes: Vec<u8>,
    }

    impl Buffer {
        pub fn new(base: u64, size: usize) -> Self {
            Buffer {
                base,
                bytes: vec![0; size],
            }
        }
        pub fn put(&mut self, addr: u64, data: &[u8]) {
            let off = (addr - self.base) as usize;
            self.bytes[off..off + data.len()].copy_from_slice(data);
        }
        pub fn put_u32(&mut self, addr: u64, v: u32) {
            self.put(addr, &v.to_le_bytes());
        }
        pub fn put_u64(&mut self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }
    }

    impl PhysMemory for Buffer {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let Some(off) = addr.checked_sub(self.base) else {
                return false;
            };
            let off = off as usize;
            match self.bytes.get(off..off + buf.len()) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    true
                }
                None => false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_truncates_at_utf8_boundary() {
        let mut info = BootInfo::new(Protocol::Pvh);
        let mut long = vec![b'a'; MAX_CMDLINE - 1];
        long.extend_from_slice("é".as_bytes()); // 2 bytes, straddles the limit
        info.set_cmdline(&long);
        assert_eq!(info.cmdline().len(), MAX_CMDLINE - 1);
    }

    #[test]
    fn empty_regions_are_skipped_and_table_is_bounded() {
        let mut info = BootInfo::new(Protocol::Pvh);
        assert!(info.push_region(MemoryRegion {
            start: 0,
            len: 0,
            kind: MemoryKind::Usable
        }));
        assert!(info.memory_map().is_empty());
        for i in 0..MAX_MEMORY_REGIONS as u64 {
            assert!(info.push_region(MemoryRegion {
                start: i << 20,
                len: 4096,
                kind: MemoryKind::Usable
            }));
        }
        assert!(!info.push_region(MemoryRegion {
            start: 1 << 40,
            len: 4096,
            kind: MemoryKind::Usable
        }));
        assert_eq!(info.memory_map().len(), MAX_MEMORY_REGIONS);
    }
}
