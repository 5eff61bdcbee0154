//! The unikernel: memory (identity map, huge-page pools, heap, DMA), console and logging, time,
//! exceptions, PCI, and the entry point through which the one linked application starts.
//!
//! Logic that needs no hardware (frame pools, page-table construction, BAR decoding, the
//! command line) builds for the host too and is unit-tested there.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod cmdline;
pub mod line;
pub mod mem;
pub mod pci;

#[cfg(target_os = "none")]
pub mod arch;
#[cfg(target_os = "none")]
pub mod console;
#[cfg(target_os = "none")]
mod entry;
#[cfg(target_os = "none")]
pub mod time;

pub use boot::BootInfo;
/// Memory-map types from the boot code.
pub mod boot_kind {
    pub use boot::{MemoryKind, MemoryRegion};
}

/// Exit codes the kernel itself uses (the application's own codes are 0..=127).
pub const EXIT_PANIC: u32 = 101;
pub const EXIT_EXCEPTION: u32 = 102;
pub const EXIT_BOOT_FAILED: u32 = 103;

/// The application's return value as the run's exit code: QEMU's isa-debug-exit turns a code
/// `c` into process status `(c << 1) | 1`, and statuses are 8 bits, so codes are 0..=127;
/// anything else non-zero becomes 127, never 0.
pub fn exit_code(app: i32) -> u32 {
    match app {
        0..=127 => app as u32,
        _ => 127,
    }
}

/// What the application gets from the kernel.
pub struct AppContext {
    pub boot: &'static BootInfo,
    pub cmdline: cmdline::Cmdline<'static>,
}

/// Names the application's entry function: `fn(&AppContext) -> i32`, 0 for success.
#[macro_export]
macro_rules! entry_point {
    ($main:path) => {
        #[no_mangle]
        pub extern "Rust" fn __unikernel_app_main(ctx: &$crate::AppContext) -> i32 {
            let main: fn(&$crate::AppContext) -> i32 = $main;
            main(ctx)
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn exit_codes_fit_the_debug_exit_encoding() {
        assert_eq!(super::exit_code(0), 0);
        assert_eq!(super::exit_code(3), 3);
        assert_eq!(super::exit_code(-1), 127);
        assert_eq!(super::exit_code(256), 127);
    }
}
