//! PVH boot: `struct hvm_start_info`, passed in %ebx.
//! Layout: xen/include/public/arch-x86/hvm/start_info.h (also torvalds/linux
//! include/xen/interface/hvm/start_info.h). Version 1 added the memory map.

use crate::info::{
    BootError, BootInfo, MemoryKind, MemoryRegion, PhysMemory, Protocol, MAX_CMDLINE,
};

/// `XEN_HVM_START_MAGIC_VALUE` ("xEn3" with the 0x80 bit of the "E" set).
pub const START_MAGIC: u32 = 0x336e_c578;
/// `XEN_ELFNOTE_PHYS32_ENTRY`: the ELF note type carrying the 32-bit entry address.
pub const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

const OFF_MAGIC: u64 = 0;
const OFF_VERSION: u64 = 4;
const OFF_CMDLINE_PADDR: u64 = 24;
const OFF_RSDP_PADDR: u64 = 32;
const OFF_MEMMAP_PADDR: u64 = 40;
const OFF_MEMMAP_ENTRIES: u64 = 48;
/// `struct hvm_memmap_table_entry`: u64 addr, u64 size, u32 type, u32 reserved.
const MEMMAP_ENTRY_SIZE: u64 = 24;

/// Parses the start info at `addr`. Addresses of zero mean "not present" (start_info.h).
pub fn parse(mem: &impl PhysMemory, addr: u64) -> Result<BootInfo, BootError> {
    let magic = mem.read_u32(addr + OFF_MAGIC)?;
    if magic != START_MAGIC {
        return Err(BootError::BadMagic(magic));
    }
    let version = mem.read_u32(addr + OFF_VERSION)?;
    let mut info = BootInfo::new(Protocol::Pvh);

    let cmdline = mem.read_u64(addr + OFF_CMDLINE_PADDR)?;
    if cmdline != 0 {
        let mut buf = [0u8; MAX_CMDLINE];
        let len = mem.read_cstr(cmdline, &mut buf)?;
        info.set_cmdline(&buf[..len]);
    }
    let rsdp = mem.read_u64(addr + OFF_RSDP_PADDR)?;
    info.rsdp = (rsdp != 0).then_some(rsdp);

    if version < 1 {
        return Err(BootError::NoMemoryMap);
    }
    let memmap = mem.read_u64(addr + OFF_MEMMAP_PADDR)?;
    let entries = mem.read_u32(addr + OFF_MEMMAP_ENTRIES)? as u64;
    if memmap == 0 || entries == 0 {
        return Err(BootError::NoMemoryMap);
    }
    for i in 0..entries {
        let e = memmap + i * MEMMAP_ENTRY_SIZE;
        let region = MemoryRegion {
            start: mem.read_u64(e)?,
            len: mem.read_u64(e + 8)?,
            kind: MemoryKind::from_e820(mem.read_u32(e + 16)?),
        };
        if !info.push_region(region) {
            return Err(BootError::Malformed(
                "more memory map entries than the kernel keeps",
            ));
        }
    }
    // Everything is copied out: nothing of the start info stays referenced.
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::test_support::Buffer;

    fn start_info(version: u32) -> Buffer {
        let mut m = Buffer::new(0x1000, 0x2000);
        m.put_u32(0x1000, START_MAGIC);
        m.put_u32(0x1004, version);
        m.put_u64(0x1000 + 24, 0x1800);
        m.put(0x1800, b"log=debug app=x\0");
        m.put_u64(0x1000 + 32, 0xf5a40);
        m.put_u64(0x1000 + 40, 0x1400);
        m.put_u32(0x1000 + 48, 3);
        let entries: [(u64, u64, u32); 3] = [
            (0, 0x9fc00, 1),
            (0xf0000, 0x10000, 2),
            (0x100000, 0x7ff0_0000, 1),
        ];
        for (i, (a, s, t)) in entries.iter().enumerate() {
            let e = 0x1400 + 24 * i as u64;
            m.put_u64(e, *a);
            m.put_u64(e + 8, *s);
            m.put_u32(e + 16, *t);
        }
        m
    }

    #[test]
    fn parses_version_1() {
        let m = start_info(1);
        let info = parse(&m, 0x1000).unwrap();
        assert_eq!(info.protocol, Protocol::Pvh);
        assert_eq!(info.cmdline(), "log=debug app=x");
        assert_eq!(info.rsdp, Some(0xf5a40));
        let map = info.memory_map();
        assert_eq!(map.len(), 3);
        assert_eq!(map[1].kind, MemoryKind::Reserved);
        assert_eq!(
            map[2],
            MemoryRegion {
                start: 0x100000,
                len: 0x7ff0_0000,
                kind: MemoryKind::Usable
            }
        );
    }

    #[test]
    fn rejects_bad_magic_and_missing_map() {
        let mut m = start_info(1);
        m.put_u32(0x1000, 0xdead_beef);
        assert_eq!(
            parse(&m, 0x1000).unwrap_err(),
            BootError::BadMagic(0xdead_beef)
        );
        let m = start_info(0);
        assert_eq!(parse(&m, 0x1000).unwrap_err(), BootError::NoMemoryMap);
    }

    #[test]
    fn unreadable_memory_is_an_error() {
        let mut m = start_info(1);
        m.put_u64(0x1000 + 40, 0x10_0000); // memmap outside the buffer
        assert!(matches!(parse(&m, 0x1000), Err(BootError::Unreadable(_))));
    }
}
