//! Panics on purpose: the boot test checks the diagnostic and the non-zero exit.
#![no_std]
#![no_main]

kernel::entry_point!(main);

fn main(ctx: &kernel::AppContext) -> i32 {
    let reason = ctx
        .cmdline
        .get("reason")
        .unwrap_or("requested by the panic app");
    panic!("deliberate panic: {reason}");
}
