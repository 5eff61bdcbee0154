//! PCI(e): configuration access (ECAM or the legacy 0xCF8/0xCFC ports), enumeration, BAR
//! decoding by size probing, and the capability list.
//!
//! Register offsets are those of the PCI Local Bus / PCIe base specifications (type-0 header).

extern crate alloc;

use alloc::vec::Vec;
use core::fmt;

#[cfg(target_os = "none")]
pub mod platform;

/// Bus/device/function within segment 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bdf {
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02x}:{:02x}.{:x}",
            self.bus, self.device, self.function
        )
    }
}

impl Bdf {
    /// Parses `bb:dd.f` (hex, as lspci prints it), optionally prefixed by `0000:`.
    pub fn parse(s: &str) -> Option<Bdf> {
        let s = s.strip_prefix("0000:").unwrap_or(s);
        let (bus, rest) = s.split_once(':')?;
        let (dev, func) = rest.split_once('.')?;
        let bdf = Bdf {
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(dev, 16).ok()?,
            function: u8::from_str_radix(func, 16).ok()?,
        };
        (bdf.device < 32 && bdf.function < 8).then_some(bdf)
    }
}

pub const REG_VENDOR_DEVICE: u16 = 0x00;
pub const REG_COMMAND_STATUS: u16 = 0x04;
pub const REG_CLASS_REVISION: u16 = 0x08;
pub const REG_HEADER_TYPE: u16 = 0x0c; // byte 2 of this dword
pub const REG_BAR0: u16 = 0x10;
pub const REG_CAP_PTR: u16 = 0x34;
/// Type-1 (bridge) header: secondary bus number (byte 1 of dword 0x18).
pub const REG_SECONDARY_BUS: u16 = 0x19;

pub const COMMAND_IO: u16 = 1 << 0;
pub const COMMAND_MEMORY: u16 = 1 << 1;
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
pub const STATUS_CAP_LIST: u32 = 1 << (16 + 4);

/// Offset of a dword in an ECAM window whose first bus is `bus_start` (PCIe base spec,
/// "Enhanced Configuration Access Mechanism": bus << 20 | device << 15 | function << 12 | reg).
pub fn ecam_offset(bus_start: u8, bdf: Bdf, offset: u16) -> Option<u64> {
    if bdf.bus < bus_start || offset >= 4096 || bdf.device >= 32 || bdf.function >= 8 {
        return None;
    }
    let bus = (bdf.bus - bus_start) as u64;
    Some(bus << 20 | (bdf.device as u64) << 15 | (bdf.function as u64) << 12 | (offset & !3) as u64)
}

/// Dword access to configuration space.
pub trait ConfigAccess {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32;
    fn write32(&self, bdf: Bdf, offset: u16, value: u32);

    fn read16(&self, bdf: Bdf, offset: u16) -> u16 {
        (self.read32(bdf, offset & !3) >> ((offset & 2) * 8)) as u16
    }
    fn read8(&self, bdf: Bdf, offset: u16) -> u8 {
        (self.read32(bdf, offset & !3) >> ((offset & 3) * 8)) as u8
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    Io,
    Mem32,
    Mem64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    pub index: u8,
    pub kind: BarKind,
    pub prefetchable: bool,
    pub addr: u64,
    pub size: u64,
}

impl fmt::Display for Bar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match (self.kind, self.prefetchable) {
            (BarKind::Io, _) => "io",
            (BarKind::Mem32, false) => "mem32",
            (BarKind::Mem32, true) => "mem32p",
            (BarKind::Mem64, false) => "mem64",
            (BarKind::Mem64, true) => "mem64p",
        };
        write!(f, "{}:{}@{:#x}/", self.index, kind, self.addr)?;
        write_size(f, self.size)
    }
}

fn write_size(f: &mut fmt::Formatter<'_>, size: u64) -> fmt::Result {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (unit, name) in UNITS {
        if size >= unit && size.is_multiple_of(unit) {
            return write!(f, "{}{}", size / unit, name);
        }
    }
    write!(f, "{}", size)
}

/// One function found by enumeration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub bdf: Bdf,
    pub vendor: u16,
    pub device: u16,
    /// Class, subclass and programming interface.
    pub class: u32,
    pub header_type: u8,
    pub bars: Vec<Bar>,
}

impl fmt::Display for Function {
    /// The boot-report line: `pci bb:dd.f vvvv:dddd class=cccccc bars=...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pci {} {:04x}:{:04x} class={:06x} bars=",
            self.bdf, self.vendor, self.device, self.class
        )?;
        if self.bars.is_empty() {
            return write!(f, "none");
        }
        for (i, bar) in self.bars.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{bar}")?;
        }
        Ok(())
    }
}

/// Sizes and decodes the BARs of a type-0 (or the two of a type-1) header.
///
/// Memory and I/O decoding are switched off while a BAR holds all-ones, so the device never
/// answers at a bogus address, then the command register is restored.
pub fn probe_bars(cfg: &impl ConfigAccess, bdf: Bdf, header_type: u8) -> Vec<Bar> {
    let count = match header_type & 0x7f {
        0 => 6,
        1 => 2,
        _ => 0,
    };
    let mut bars = Vec::new();
    let command = cfg.read32(bdf, REG_COMMAND_STATUS);
    cfg.write32(
        bdf,
        REG_COMMAND_STATUS,
        command & !((COMMAND_IO | COMMAND_MEMORY) as u32) & 0xffff,
    );
    let mut i = 0u8;
    while i < count {
        let reg = REG_BAR0 + 4 * i as u16;
        let orig = cfg.read32(bdf, reg);
        cfg.write32(bdf, reg, 0xffff_ffff);
        let mask = cfg.read32(bdf, reg);
        cfg.write32(bdf, reg, orig);
        if orig & 1 == 1 {
            let size_mask = mask & !0x3 & 0xffff;
            if size_mask != 0 {
                let size = (!size_mask & 0xffff) as u64 + 1;
                bars.push(Bar {
                    index: i,
                    kind: BarKind::Io,
                    prefetchable: false,
                    addr: (orig & !0x3) as u64,
                    size,
                });
            }
            i += 1;
            continue;
        }
        let is64 = (orig >> 1) & 0x3 == 0x2 && i + 1 < count;
        let prefetchable = orig & 0x8 != 0;
        let mut addr = (orig & !0xf) as u64;
        let mut size_mask = (mask & !0xf) as u64;
        if is64 {
            let reg_hi = reg + 4;
            let orig_hi = cfg.read32(bdf, reg_hi);
            cfg.write32(bdf, reg_hi, 0xffff_ffff);
            let mask_hi = cfg.read32(bdf, reg_hi);
            cfg.write32(bdf, reg_hi, orig_hi);
            addr |= (orig_hi as u64) << 32;
            size_mask |= (mask_hi as u64) << 32;
        } else {
            size_mask |= 0xffff_ffff_0000_0000;
        }
        if size_mask & 0xffff_ffff != 0 || (is64 && size_mask != 0) {
            let size = (!size_mask).wrapping_add(1);
            if size != 0 {
                let kind = if is64 { BarKind::Mem64 } else { BarKind::Mem32 };
                bars.push(Bar {
                    index: i,
                    kind,
                    prefetchable,
                    addr,
                    size,
                });
            }
        }
        i += if is64 { 2 } else { 1 };
    }
    cfg.write32(bdf, REG_COMMAND_STATUS, command & 0xffff);
    bars
}

/// The capability list: (capability ID, offset) pairs, bounded against loops.
pub fn capabilities(cfg: &impl ConfigAccess, bdf: Bdf) -> Vec<(u8, u16)> {
    let mut caps = Vec::new();
    if cfg.read32(bdf, REG_COMMAND_STATUS) & STATUS_CAP_LIST == 0 {
        return caps;
    }
    let mut ptr = cfg.read8(bdf, REG_CAP_PTR) & !3;
    // At most 48 capabilities fit in the 192 bytes after the header.
    for _ in 0..48 {
        if ptr < 0x40 {
            break;
        }
        let id = cfg.read8(bdf, ptr as u16);
        caps.push((id, ptr as u16));
        ptr = cfg.read8(bdf, ptr as u16 + 1) & !3;
    }
    caps
}

/// Reads the identity of the function at `bdf`, if present.
pub fn probe_function(cfg: &impl ConfigAccess, bdf: Bdf) -> Option<Function> {
    let id = cfg.read32(bdf, REG_VENDOR_DEVICE);
    let vendor = id as u16;
    if vendor == 0xffff || vendor == 0 {
        return None;
    }
    let header_type = cfg.read8(bdf, REG_HEADER_TYPE + 2);
    Some(Function {
        bdf,
        vendor,
        device: (id >> 16) as u16,
        class: cfg.read32(bdf, REG_CLASS_REVISION) >> 8,
        header_type,
        bars: probe_bars(cfg, bdf, header_type),
    })
}

/// Scans bus `root` and, recursively, the secondary bus of every PCI-to-PCI bridge found.
/// Following bridges instead of probing all 256 buses keeps configuration reads (each one a VM
/// exit under virtualisation) to the functions that exist.
pub fn enumerate(cfg: &impl ConfigAccess, root: u8) -> Vec<Function> {
    let mut found = Vec::new();
    let mut visited = [false; 256];
    scan_bus(cfg, root, &mut visited, &mut found);
    found
}

fn scan_bus(
    cfg: &impl ConfigAccess,
    bus: u8,
    visited: &mut [bool; 256],
    found: &mut Vec<Function>,
) {
    if core::mem::replace(&mut visited[bus as usize], true) {
        return; // a misprogrammed bridge must not make the scan loop
    }
    for device in 0..32 {
        let Some(first) = probe_function(
            cfg,
            Bdf {
                bus,
                device,
                function: 0,
            },
        ) else {
            continue;
        };
        let functions = if first.header_type & 0x80 != 0 { 8 } else { 1 };
        let mut next = Some(first);
        for function in 0..functions {
            let f = match next.take() {
                Some(f) => f,
                None => match probe_function(
                    cfg,
                    Bdf {
                        bus,
                        device,
                        function,
                    },
                ) {
                    Some(f) => f,
                    None => continue,
                },
            };
            let bridge_to =
                (f.header_type & 0x7f == 1).then(|| cfg.read8(f.bdf, REG_SECONDARY_BUS));
            found.push(f);
            if let Some(secondary) = bridge_to.filter(|&b| b > bus) {
                scan_bus(cfg, secondary, visited, found);
            }
        }
    }
}

/// Capability ID of PCI Express (PCIe base spec 7.5.3).
pub const CAP_ID_PCIE: u8 = 0x10;
/// PCIe Device Capabilities (cap + 4): Function Level Reset capability, bit 28.
const PCIE_DEVCAP_FLR: u32 = 1 << 28;
/// PCIe Device Control (cap + 8): Initiate Function Level Reset, bit 15.
const PCIE_DEVCTL_FLR: u32 = 1 << 15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlrError {
    /// The function has no PCIe capability or does not advertise FLR.
    Unsupported,
}

/// Function-level reset (PCIe base spec 6.6.2): saves the BARs and the command register,
/// sets Initiate FLR, waits `settle` (the spec allows the function 100 ms), then restores
/// what the reset cleared, as Linux's `pcie_flr` with `pci_save_state`/`pci_restore_state` does.
pub fn function_level_reset(
    cfg: &impl ConfigAccess,
    bdf: Bdf,
    settle: impl FnOnce(),
) -> Result<(), FlrError> {
    let pcie = capabilities(cfg, bdf)
        .into_iter()
        .find(|&(id, _)| id == CAP_ID_PCIE)
        .map(|(_, off)| off)
        .ok_or(FlrError::Unsupported)?;
    if cfg.read32(bdf, pcie + 4) & PCIE_DEVCAP_FLR == 0 {
        return Err(FlrError::Unsupported);
    }
    let saved: [u32; 6] = core::array::from_fn(|i| cfg.read32(bdf, REG_BAR0 + 4 * i as u16));
    let command = cfg.read32(bdf, REG_COMMAND_STATUS) & 0xffff;
    let devctl = cfg.read32(bdf, pcie + 8);
    cfg.write32(bdf, pcie + 8, (devctl & 0xffff) | PCIE_DEVCTL_FLR);
    settle();
    for (i, v) in saved.iter().enumerate() {
        cfg.write32(bdf, REG_BAR0 + 4 * i as u16, *v);
    }
    cfg.write32(bdf, REG_COMMAND_STATUS, command);
    Ok(())
}

/// Enables memory decoding and bus mastering (what a driver needs to use BARs and DMA).
pub fn enable_memory_and_bus_master(cfg: &impl ConfigAccess, bdf: Bdf) {
    let cmd = cfg.read32(bdf, REG_COMMAND_STATUS) & 0xffff;
    cfg.write32(
        bdf,
        REG_COMMAND_STATUS,
        cmd | (COMMAND_MEMORY | COMMAND_BUS_MASTER) as u32,
    );
}

#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// A function's config space with BAR size masks, for host tests.
    pub struct FakeFunction {
        pub space: [u32; 64],
        /// Per BAR register: writable bits (size mask); 0 = unimplemented.
        pub bar_masks: [u32; 6],
    }

    #[derive(Default)]
    pub struct FakeBus {
        pub functions: RefCell<HashMap<Bdf, FakeFunction>>,
    }

    impl FakeBus {
        pub fn add(
            &self,
            bdf: Bdf,
            vendor_device: u32,
            class: u32,
            header: u8,
            bars: [(u32, u32); 6],
        ) {
            let mut space = [0u32; 64];
            space[0] = vendor_device;
            space[2] = class << 8;
            space[3] = (header as u32) << 16;
            let mut masks = [0; 6];
            for (i, (value, mask)) in bars.iter().enumerate() {
                space[4 + i] = *value;
                masks[i] = *mask;
            }
            self.functions.borrow_mut().insert(
                bdf,
                FakeFunction {
                    space,
                    bar_masks: masks,
                },
            );
        }
    }

    impl ConfigAccess for FakeBus {
        fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
            match self.functions.borrow().get(&bdf) {
                Some(f) => f.space[(offset / 4) as usize],
                None => 0xffff_ffff,
            }
        }
        fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
            if let Some(f) = self.functions.borrow_mut().get_mut(&bdf) {
                let i = (offset / 4) as usize;
                if (4..10).contains(&i) {
                    let mask = f.bar_masks[i - 4];
                    let ro = f.space[i] & !mask;
                    f.space[i] = (value & mask) | ro;
                } else if i == 1 {
                    f.space[1] = (f.space[1] & 0xffff_0000) | (value & 0xffff);
                } else if i != 0 && i != 2 && i != 3 {
                    f.space[i] = value;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeBus;
    use super::*;

    const NO_BAR: (u32, u32) = (0, 0);

    #[test]
    fn decodes_32_64_io_and_prefetchable_bars() {
        let bus = FakeBus::default();
        let bdf = Bdf {
            bus: 0,
            device: 3,
            function: 0,
        };
        bus.add(
            bdf,
            0x1017_15b3,
            0x020700,
            0,
            [
                // 64-bit prefetchable 32 MiB at 0x8_0000_0000 (BAR0+BAR1)
                (0x0000_000c, !((32u32 << 20) - 1)),
                (0x0000_0008, 0xffff_ffff),
                // 32-bit 4 KiB
                (0xfebf_0000, 0xffff_f000),
                // I/O 64 bytes
                (0xc001, 0xffff_ffc1),
                NO_BAR,
                NO_BAR,
            ],
        );
        let f = probe_function(&bus, bdf).unwrap();
        assert_eq!(f.bars.len(), 3);
        assert_eq!(
            f.bars[0],
            Bar {
                index: 0,
                kind: BarKind::Mem64,
                prefetchable: true,
                addr: 0x8_0000_0000,
                size: 32 << 20
            }
        );
        assert_eq!(
            f.bars[1],
            Bar {
                index: 2,
                kind: BarKind::Mem32,
                prefetchable: false,
                addr: 0xfebf_0000,
                size: 4096
            }
        );
        assert_eq!(
            f.bars[2],
            Bar {
                index: 3,
                kind: BarKind::Io,
                prefetchable: false,
                addr: 0xc000,
                size: 64
            }
        );
        // The BARs were restored after probing.
        assert_eq!(bus.read32(bdf, REG_BAR0 + 8), 0xfebf_0000);
        assert_eq!(
            f.to_string(),
            "pci 00:03.0 15b3:1017 class=020700 bars=0:mem64p@0x800000000/32M,2:mem32@0xfebf0000/4K,3:io@0xc000/64"
        );
    }

    #[test]
    fn enumerates_multifunction_devices_only_when_flagged() {
        let bus = FakeBus::default();
        let none = [NO_BAR; 6];
        bus.add(
            Bdf {
                bus: 0,
                device: 0,
                function: 0,
            },
            0x29c0_8086,
            0x060000,
            0,
            none,
        );
        bus.add(
            Bdf {
                bus: 0,
                device: 1,
                function: 1,
            },
            0x1111_1234,
            0x030000,
            0,
            none,
        ); // hidden
        bus.add(
            Bdf {
                bus: 0,
                device: 31,
                function: 0,
            },
            0x2918_8086,
            0x060100,
            0x80,
            none,
        );
        bus.add(
            Bdf {
                bus: 0,
                device: 31,
                function: 3,
            },
            0x2930_8086,
            0x0c0500,
            0,
            none,
        );
        let found = enumerate(&bus, 0);
        let bdfs: Vec<String> = found.iter().map(|f| f.bdf.to_string()).collect();
        assert_eq!(bdfs, ["00:00.0", "00:1f.0", "00:1f.3"]);
        assert_eq!(
            found[0].to_string(),
            "pci 00:00.0 8086:29c0 class=060000 bars=none"
        );
    }

    #[test]
    fn follows_bridges_to_secondary_buses() {
        let bus = FakeBus::default();
        let none = [NO_BAR; 6];
        let bridge = Bdf {
            bus: 0,
            device: 1,
            function: 0,
        };
        bus.add(bridge, 0x0001_1b36, 0x060400, 1, none);
        bus.functions.borrow_mut().get_mut(&bridge).unwrap().space[0x18 / 4] = 0x0005_0500; // sec=5
        bus.add(
            Bdf {
                bus: 5,
                device: 0,
                function: 0,
            },
            0x1017_15b3,
            0x020700,
            0,
            none,
        );
        bus.add(
            Bdf {
                bus: 7,
                device: 0,
                function: 0,
            },
            0x1017_15b3,
            0x020700,
            0,
            none,
        ); // unreachable
        let bdfs: Vec<String> = enumerate(&bus, 0)
            .iter()
            .map(|f| f.bdf.to_string())
            .collect();
        assert_eq!(bdfs, ["00:01.0", "05:00.0"]);
    }

    #[test]
    fn capability_walk_is_bounded() {
        let bus = FakeBus::default();
        let bdf = Bdf {
            bus: 0,
            device: 2,
            function: 0,
        };
        bus.add(bdf, 0x1017_15b3, 0x020700, 0, [NO_BAR; 6]);
        {
            let mut fns = bus.functions.borrow_mut();
            let f = fns.get_mut(&bdf).unwrap();
            f.space[1] |= STATUS_CAP_LIST;
            f.space[0x34 / 4] = 0x40;
            f.space[0x40 / 4] = 0x0000_6010; // PCIe cap, next 0x60
            f.space[0x60 / 4] = 0x0000_4001; // PM cap, next 0x40: a loop
        }
        let caps = capabilities(&bus, bdf);
        assert_eq!(&caps[..3], &[(0x10, 0x40), (0x01, 0x60), (0x10, 0x40)]);
        assert_eq!(caps.len(), 48);
    }

    #[test]
    fn flr_needs_the_capability_and_restores_bars() {
        let bus = FakeBus::default();
        let bdf = Bdf {
            bus: 0,
            device: 4,
            function: 0,
        };
        bus.add(
            bdf,
            0x1017_15b3,
            0x020700,
            0,
            [
                (0xfc00_0000, !((32u32 << 20) - 1)),
                NO_BAR,
                NO_BAR,
                NO_BAR,
                NO_BAR,
                NO_BAR,
            ],
        );
        {
            let mut fns = bus.functions.borrow_mut();
            let f = fns.get_mut(&bdf).unwrap();
            f.space[1] |= STATUS_CAP_LIST | 0x6;
            f.space[0x34 / 4] = 0x60;
            f.space[0x60 / 4] = 0x0002_0010; // PCIe cap, end of list
        }
        assert_eq!(
            function_level_reset(&bus, bdf, || {}),
            Err(FlrError::Unsupported)
        );
        bus.functions.borrow_mut().get_mut(&bdf).unwrap().space[0x64 / 4] = PCIE_DEVCAP_FLR;
        let mut reset_seen = false;
        let r = function_level_reset(&bus, bdf, || {
            // The device would clear its BARs here.
            let mut fns = bus.functions.borrow_mut();
            let f = fns.get_mut(&bdf).unwrap();
            reset_seen = f.space[0x68 / 4] & PCIE_DEVCTL_FLR != 0;
            f.space[4] = 0;
            f.space[1] &= 0xffff_0000;
        });
        assert_eq!(r, Ok(()));
        assert!(reset_seen);
        assert_eq!(bus.read32(bdf, REG_BAR0), 0xfc00_0000);
        assert_eq!(bus.read32(bdf, REG_COMMAND_STATUS) & 0x6, 0x6);
    }

    #[test]
    fn ecam_offsets() {
        let bdf = Bdf {
            bus: 3,
            device: 0x1f,
            function: 7,
        };
        assert_eq!(
            ecam_offset(0, bdf, 0x10),
            Some(3 << 20 | 0x1f << 15 | 7 << 12 | 0x10)
        );
        assert_eq!(
            ecam_offset(2, bdf, 0x13),
            Some(1 << 20 | 0x1f << 15 | 7 << 12 | 0x10)
        );
        assert_eq!(ecam_offset(4, bdf, 0), None);
        assert_eq!(ecam_offset(0, bdf, 4096), None);
    }

    #[test]
    fn bdf_parsing() {
        assert_eq!(
            Bdf::parse("0000:3b:00.1"),
            Some(Bdf {
                bus: 0x3b,
                device: 0,
                function: 1
            })
        );
        assert_eq!(
            Bdf::parse("00:1f.3"),
            Some(Bdf {
                bus: 0,
                device: 31,
                function: 3
            })
        );
        assert_eq!(Bdf::parse("00:20.0"), None);
        assert_eq!(Bdf::parse("junk"), None);
    }
}
