//! Configuration access on the machine: ECAM from the ACPI MCFG table, else the legacy
//! 0xCF8/0xCFC mechanism (the `pc` machine has no MCFG).

extern crate alloc;

use alloc::vec::Vec;
use core::ptr::NonNull;
use spin::Once;
use x86_64::instructions::port::Port;

use super::{Bdf, ConfigAccess, Function};
use crate::mem::{map_physical, Cache, OutOfMemory};

/// One MCFG allocation: segment 0, buses `bus_start..=bus_end` at `base`.
#[derive(Clone, Copy, Debug)]
pub struct EcamRegion {
    pub base: u64,
    pub bus_start: u8,
    pub bus_end: u8,
}

pub enum Access {
    Ecam(EcamRegion),
    Legacy,
}

impl Access {
    fn ecam_addr(r: &EcamRegion, bdf: Bdf, offset: u16) -> Option<u64> {
        if bdf.bus > r.bus_end {
            return None;
        }
        Some(r.base + super::ecam_offset(r.bus_start, bdf, offset)?)
    }

    fn legacy_addr(bdf: Bdf, offset: u16) -> u32 {
        0x8000_0000
            | (bdf.bus as u32) << 16
            | (bdf.device as u32) << 11
            | (bdf.function as u32) << 8
            | (offset as u32 & 0xfc)
    }

    pub fn root_bus(&self) -> u8 {
        match self {
            Access::Ecam(r) => r.bus_start,
            Access::Legacy => 0,
        }
    }
}

impl ConfigAccess for Access {
    fn read32(&self, bdf: Bdf, offset: u16) -> u32 {
        match self {
            Access::Ecam(r) => match Self::ecam_addr(r, bdf, offset) {
                // SAFETY: the ECAM window was mapped uncached at init and the address lies in it.
                Some(a) => unsafe { core::ptr::read_volatile(a as *const u32) },
                None => 0xffff_ffff,
            },
            Access::Legacy => {
                if offset >= 256 {
                    return 0xffff_ffff;
                }
                // SAFETY: 0xCF8/0xCFC are the PCI configuration address/data ports; interrupts
                // are off, so the address/data pair is not interleaved.
                unsafe {
                    Port::<u32>::new(0xcf8).write(Self::legacy_addr(bdf, offset));
                    Port::<u32>::new(0xcfc).read()
                }
            }
        }
    }

    fn write32(&self, bdf: Bdf, offset: u16, value: u32) {
        match self {
            Access::Ecam(r) => {
                if let Some(a) = Self::ecam_addr(r, bdf, offset) {
                    // SAFETY: as in read32.
                    unsafe { core::ptr::write_volatile(a as *mut u32, value) }
                }
            }
            Access::Legacy => {
                if offset < 256 {
                    // SAFETY: as in read32.
                    unsafe {
                        Port::<u32>::new(0xcf8).write(Self::legacy_addr(bdf, offset));
                        Port::<u32>::new(0xcfc).write(value);
                    }
                }
            }
        }
    }
}

/// `acpi` crate handler: tables are read through the identity map.
#[derive(Clone, Copy)]
struct IdentityAcpi;

impl acpi::AcpiHandler for IdentityAcpi {
    unsafe fn map_physical_region<T>(
        &self,
        physical_address: usize,
        size: usize,
    ) -> acpi::PhysicalMapping<Self, T> {
        let ptr = NonNull::new(physical_address as *mut T).expect("ACPI table at address 0");
        // SAFETY: ACPI tables lie in RAM or ACPI regions, which the identity map covers; the
        // crate's caller guarantees a valid T there.
        unsafe { acpi::PhysicalMapping::new(physical_address, ptr, size, size, *self) }
    }

    fn unmap_physical_region<T>(_region: &acpi::PhysicalMapping<Self, T>) {}
}

/// Finds segment 0's ECAM window through the RSDP (given by the loader, else the BIOS search).
pub fn find_ecam(rsdp: Option<u64>) -> Option<EcamRegion> {
    // SAFETY: the RSDP address comes from the loader (or the crate's BIOS-area search, valid on
    // BIOS/SeaBIOS machines), and the identity map covers it.
    let tables = unsafe {
        match rsdp {
            Some(a) => acpi::AcpiTables::from_rsdp(IdentityAcpi, a as usize),
            None => acpi::AcpiTables::search_for_rsdp_bios(IdentityAcpi),
        }
    }
    .ok()?;
    let mcfg = tables.find_table::<acpi::mcfg::Mcfg>().ok()?;
    mcfg.entries()
        .iter()
        .find(|e| e.pci_segment_group == 0)
        .map(|e| EcamRegion {
            base: e.base_address,
            bus_start: e.bus_number_start,
            bus_end: e.bus_number_end,
        })
}

static ACCESS: Once<Access> = Once::new();
static FUNCTIONS: Once<Vec<Function>> = Once::new();

/// Chooses the access method, maps ECAM, and enumerates every bus.
pub fn init(rsdp: Option<u64>) -> Result<&'static [Function], OutOfMemory> {
    let access = match find_ecam(rsdp) {
        Some(r) => {
            let buses = r.bus_end as u64 - r.bus_start as u64 + 1;
            map_physical(r.base, buses << 20, Cache::Uncached)?;
            Access::Ecam(r)
        }
        None => Access::Legacy,
    };
    let access = ACCESS.call_once(|| access);
    let found = super::enumerate(access, access.root_bus());
    Ok(FUNCTIONS.call_once(|| found))
}

pub fn uses_ecam() -> bool {
    matches!(ACCESS.get(), Some(Access::Ecam(_)))
}

pub fn config() -> &'static Access {
    ACCESS.get().expect("PCI initialised at boot")
}

pub fn functions() -> &'static [Function] {
    FUNCTIONS.get().map(Vec::as_slice).unwrap_or(&[])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimError {
    NotFound(Bdf),
    OutOfMemory(OutOfMemory),
}

/// Takes a function for a driver: memory decoding and bus mastering on, BARs mapped uncached.
pub fn claim(bdf: Bdf) -> Result<&'static Function, ClaimError> {
    let f = functions()
        .iter()
        .find(|f| f.bdf == bdf)
        .ok_or(ClaimError::NotFound(bdf))?;
    for bar in f
        .bars
        .iter()
        .filter(|b| b.kind != super::BarKind::Io && b.addr != 0)
    {
        map_physical(bar.addr, bar.size, Cache::Uncached).map_err(ClaimError::OutOfMemory)?;
    }
    super::enable_memory_and_bus_master(config(), bdf);
    Ok(f)
}

/// Function-level reset of a claimed function, waiting the 100 ms the PCIe spec gives it.
pub fn function_level_reset(bdf: Bdf) -> Result<(), super::FlrError> {
    super::function_level_reset(config(), bdf, || {
        crate::time::spin_for(core::time::Duration::from_millis(100))
    })
}
