//! Reads unmapped memory on purpose: the boot test checks the page-fault diagnostic.
#![no_std]
#![no_main]

kernel::entry_point!(main);

/// 64 TiB: canonical, and far above anything the identity map covers.
const UNMAPPED: u64 = 0x4000_0000_0000;

fn main(_ctx: &kernel::AppContext) -> i32 {
    // SAFETY: none; this access is meant to fault and end the run with the exception report.
    let v = unsafe { core::ptr::read_volatile(UNMAPPED as *const u64) };
    kernel::println!("fault app: read {v:#x} from unmapped memory?!");
    1
}
