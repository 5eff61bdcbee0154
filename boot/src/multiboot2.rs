//! Multiboot2 boot information (the Multiboot2 specification, section 3.6 "Boot information"):
//! a u32 total_size, u32 reserved, then 8-byte aligned tags `{u32 type, u32 size, ...}`
//! ending with a type-0 tag.

use crate::info::{
    BootError, BootInfo, MemoryKind, MemoryRegion, PhysMemory, Protocol, MAX_CMDLINE,
};

/// Value in %eax when a Multiboot2 loader enters the image.
pub const BOOTLOADER_MAGIC: u32 = 0x36d7_6289;
/// First dword of the Multiboot2 header in the image.
pub const HEADER_MAGIC: u32 = 0xe852_50d6;

const TAG_END: u32 = 0;
const TAG_CMDLINE: u32 = 1;
const TAG_MMAP: u32 = 6;
const TAG_ACPI_OLD: u32 = 14;
const TAG_ACPI_NEW: u32 = 15;

/// Upper bound on the info size we accept, against a corrupt total_size.
const MAX_INFO_SIZE: u64 = 1 << 20;

pub fn parse(mem: &impl PhysMemory, addr: u64) -> Result<BootInfo, BootError> {
    let total = mem.read_u32(addr)? as u64;
    if !(16..=MAX_INFO_SIZE).contains(&total) {
        return Err(BootError::Malformed("multiboot2 total_size"));
    }
    let mut info = BootInfo::new(Protocol::Multiboot2);
    // The RSDP copy lives inside the info structure: keep it away from the allocator.
    info.push_reserved(addr, total);

    let end = addr + total;
    let mut tag = addr + 8;
    let mut saw_mmap = false;
    let mut new_rsdp = None;
    let mut old_rsdp = None;
    while tag + 8 <= end {
        let ty = mem.read_u32(tag)?;
        let size = mem.read_u32(tag + 4)? as u64;
        if ty == TAG_END {
            break;
        }
        if size < 8 || tag + size > end {
            return Err(BootError::Malformed("multiboot2 tag size"));
        }
        match ty {
            TAG_CMDLINE => {
                let mut buf = [0u8; MAX_CMDLINE];
                let max = ((size - 8) as usize).min(MAX_CMDLINE);
                let len = mem.read_cstr(tag + 8, &mut buf[..max])?;
                info.set_cmdline(&buf[..len]);
            }
            TAG_MMAP => {
                let entry_size = mem.read_u32(tag + 8)? as u64;
                if entry_size < 24 {
                    return Err(BootError::Malformed("multiboot2 mmap entry_size"));
                }
                let mut e = tag + 16;
                while e + entry_size <= tag + size {
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
                    e += entry_size;
                }
                saw_mmap = true;
            }
            // The tags carry a copy of the RSDP itself; its address is what ACPI parsing needs.
            TAG_ACPI_NEW => new_rsdp = Some(tag + 8),
            TAG_ACPI_OLD => old_rsdp = Some(tag + 8),
            _ => {}
        }
        tag += (size + 7) & !7;
    }
    if !saw_mmap {
        return Err(BootError::NoMemoryMap);
    }
    info.rsdp = new_rsdp.or(old_rsdp);
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::test_support::Buffer;

    fn build(tags: &[(u32, Vec<u8>)]) -> Buffer {
        let mut body = Vec::new();
        for (ty, payload) in tags {
            let size = 8 + payload.len() as u32;
            body.extend_from_slice(&ty.to_le_bytes());
            body.extend_from_slice(&size.to_le_bytes());
            body.extend_from_slice(payload);
            while body.len() % 8 != 0 {
                body.push(0);
            }
        }
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&8u32.to_le_bytes());
        let total = 8 + body.len() as u32;
        let mut m = Buffer::new(0x9000, 0x1000);
        m.put_u32(0x9000, total);
        m.put(0x9008, &body);
        m
    }

    fn mmap_payload(entries: &[(u64, u64, u32)]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&24u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        for (a, l, t) in entries {
            p.extend_from_slice(&a.to_le_bytes());
            p.extend_from_slice(&l.to_le_bytes());
            p.extend_from_slice(&t.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
        }
        p
    }

    #[test]
    fn parses_cmdline_mmap_and_rsdp() {
        let m = build(&[
            (TAG_CMDLINE, b"log=info\0".to_vec()),
            (TAG_ACPI_OLD, b"RSD PTR old-copy....".to_vec()),
            (
                TAG_MMAP,
                mmap_payload(&[
                    (0, 0x9f000, 1),
                    (0x100000, 0x3ff0_0000, 1),
                    (0xfffc0000, 0x40000, 2),
                ]),
            ),
            (TAG_ACPI_NEW, b"RSD PTR new-copy....".to_vec()),
        ]);
        let info = parse(&m, 0x9000).unwrap();
        assert_eq!(info.protocol, Protocol::Multiboot2);
        assert_eq!(info.cmdline(), "log=info");
        assert_eq!(info.memory_map().len(), 3);
        assert_eq!(info.memory_map()[2].kind, MemoryKind::Reserved);
        // The new (ACPI 2.0) RSDP wins; it points inside the info structure, which stays reserved.
        let rsdp = info.rsdp.unwrap();
        let mut sig = [0u8; 8];
        assert!(m.read(rsdp, &mut sig));
        assert_eq!(&sig, b"RSD PTR ");
        let (start, len) = info.reserved()[0];
        assert!(rsdp >= start && rsdp < start + len);
        let mut rest = [0u8; 12];
        assert!(m.read(rsdp + 8, &mut rest));
        assert_eq!(&rest, b"new-copy....");
    }

    #[test]
    fn missing_mmap_and_bad_sizes_are_errors() {
        let m = build(&[(TAG_CMDLINE, b"x\0".to_vec())]);
        assert_eq!(parse(&m, 0x9000).unwrap_err(), BootError::NoMemoryMap);
        let mut m = build(&[(TAG_CMDLINE, b"x\0".to_vec())]);
        m.put_u32(0x9008 + 4, 4000); // tag size past the end
        assert!(matches!(parse(&m, 0x9000), Err(BootError::Malformed(_))));
        let mut m = build(&[]);
        m.put_u32(0x9000, 4);
        assert!(matches!(parse(&m, 0x9000), Err(BootError::Malformed(_))));
    }
}
