//! x86_64 specifics: descriptor tables, exceptions, CPU features, PAT, port I/O, exit.

pub mod exceptions;
pub mod gdt;

use raw_cpuid::CpuId;
use x86_64::instructions::port::Port;

/// CPU features the kernel acts on.
#[derive(Clone, Copy, Debug)]
pub struct CpuFeatures {
    pub pages_1g: bool,
    pub pat: bool,
    pub rdrand: bool,
    pub hypervisor: bool,
}

pub fn cpu_features() -> CpuFeatures {
    let cpuid = CpuId::new();
    let fi = cpuid.get_feature_info();
    CpuFeatures {
        pages_1g: cpuid
            .get_extended_processor_and_feature_identifiers()
            .is_some_and(|e| e.has_1gib_pages()),
        pat: fi.as_ref().is_some_and(|f| f.has_pat()),
        rdrand: fi.as_ref().is_some_and(|f| f.has_rdrand()),
        hypervisor: fi.as_ref().is_some_and(|f| f.has_hypervisor()),
    }
}

/// Installs the GDT/TSS and the exception IDT, and masks the legacy PICs (the kernel polls).
pub fn init() {
    gdt::init();
    exceptions::init();
    // SAFETY: ports 0x21/0xA1 are the 8259 PIC data ports; all-ones masks every IRQ line.
    unsafe {
        Port::<u8>::new(0x21).write(0xff);
        Port::<u8>::new(0xa1).write(0xff);
    }
}

/// Programs IA32_PAT so that PWT-only mappings are write-combining (see `mem::paging::Cache`).
pub fn init_pat() -> bool {
    if !cpu_features().pat {
        return false;
    }
    // SAFETY: MSR 0x277 is IA32_PAT, present when CPUID.1:EDX.PAT is set (checked above);
    // entries 0, 3, 4 and 7 keep their defaults, so existing WB/UC mappings keep their meaning.
    unsafe {
        x86_64::registers::model_specific::Msr::new(0x277).write(crate::mem::paging::PAT_VALUE)
    };
    true
}

/// The I/O port of QEMU's `isa-debug-exit` device (the launcher adds `iobase=0xf4,iosize=4`).
pub const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Ends the run with `code`: QEMU exits with `(code << 1) | 1`, which the launcher decodes.
/// On bare metal (no debug-exit device) the CPU halts for good.
pub fn exit(code: u32) -> ! {
    // SAFETY: writing the debug-exit port has no effect other than ending the VM; on hardware
    // without the device the write goes nowhere.
    unsafe { Port::<u32>::new(DEBUG_EXIT_PORT).write(code) };
    halt_forever()
}

pub fn halt_forever() -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}

/// A hardware random number, if the CPU has RDRAND and it delivers within 10 tries
/// (Intel's DRNG guide suggests 10 retries).
pub fn rdrand64() -> Option<u64> {
    if !cpu_features().rdrand {
        return None;
    }
    for _ in 0..10 {
        let value: u64;
        let ok: u8;
        // SAFETY: RDRAND is present (checked above); it only writes the named registers.
        unsafe {
            core::arch::asm!("rdrand {v}", "setc {ok}", v = out(reg) value, ok = out(reg_byte) ok, options(nomem, nostack));
        }
        if ok == 1 {
            return Some(value);
        }
    }
    None
}
