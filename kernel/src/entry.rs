//! `kernel_main`: from the boot code to the application, and the exit path.

use boot::BootInfo;
use spin::Once;

use crate::cmdline::Cmdline;
use crate::{arch, console, mem, pci, println, time, AppContext};

static BOOT_INFO: Once<BootInfo> = Once::new();

extern "Rust" {
    /// Defined by the application through [`crate::entry_point!`].
    fn __unikernel_app_main(ctx: &AppContext) -> i32;
}

#[no_mangle]
pub extern "Rust" fn kernel_main(info: BootInfo) -> ! {
    console::init();
    arch::init();
    let info = BOOT_INFO.call_once(|| info);
    let cmdline = Cmdline(info.cmdline());
    let (tsc_hz, tsc_source) = time::init();
    console::init_log(cmdline.log_level());
    let features = arch::cpu_features();
    log::debug!("cpu: {features:?}, tsc {tsc_hz} Hz from {tsc_source:?}");

    println!(
        "boot: protocol={} cmdline=\"{}\"",
        info.protocol.name(),
        info.cmdline()
    );

    // 1 GiB pages only where the CPU advertises them (and the cmdline does not forbid them).
    let use_1g = features.pages_1g && cmdline.get("pages") != Some("2m");
    let report = match mem::system::init(info, use_1g) {
        Ok(r) => r,
        Err(e) => fail(
            crate::EXIT_BOOT_FAILED,
            format_args!("memory setup failed: {e}"),
        ),
    };
    log::debug!(
        "identity map: {:?}, heap {} MiB",
        report.map,
        report.heap_bytes >> 20
    );
    println!(
        "memory: usable={} MiB, identity map with {} pages, huge pages free: {} x 2M, {} x 1G",
        report.pools.usable_bytes >> 20,
        if report.pages_1g { "1G" } else { "2M" },
        report.pools.free_2m,
        report.pools.free_1g
    );

    let functions = match pci::platform::init(info.rsdp) {
        Ok(f) => f,
        Err(e) => fail(
            crate::EXIT_BOOT_FAILED,
            format_args!("PCI setup failed: {e}"),
        ),
    };
    log::debug!(
        "pci: {} functions via {}",
        functions.len(),
        if pci::platform::uses_ecam() {
            "ECAM"
        } else {
            "0xCF8"
        }
    );
    for f in functions {
        println!("{f}");
    }
    log::info!("boot to app: {} us", time::micros_since_boot());

    let ctx = AppContext {
        boot: info,
        cmdline,
    };
    // SAFETY: the symbol is defined by the linked application (entry_point! checks its type).
    let code = unsafe { __unikernel_app_main(&ctx) };
    let code = crate::exit_code(code);
    println!("app: exit={code}");
    arch::exit(code)
}

fn fail(code: u32, what: core::fmt::Arguments<'_>) -> ! {
    println!("boot failed: {what}");
    arch::exit(code)
}

#[no_mangle]
pub extern "Rust" fn kernel_boot_failed(what: &str, detail: u64) -> ! {
    console::init();
    fail(
        crate::EXIT_BOOT_FAILED,
        format_args!("{what} ({detail:#x})"),
    )
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    let mut out = console::Emergency;
    match info.location() {
        Some(l) => {
            let _ = writeln!(
                out,
                "\npanic: {} at {}:{}:{}",
                info.message(),
                l.file(),
                l.line(),
                l.column()
            );
        }
        None => {
            let _ = writeln!(out, "\npanic: {}", info.message());
        }
    }
    arch::exit(crate::EXIT_PANIC)
}
