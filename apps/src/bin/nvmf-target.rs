//! The storage appliance: an NVMe over Fabrics target on RDMA that Linux mounts with `nvme
//! connect -t rdma` (docs/storage-appliance.md).
//!
//! Cmdline: `ip=A.B.C.D/N [port=4420] [nqn=NQN] [serial=S] [size=BYTES|NK|NM|NG]
//! [hosts=NQN,NQN|any]` (`apps::nvmf`). It prints what it serves, then a line per
//! connection, disconnection and error, and serves until stopped.
#![no_std]
#![no_main]

extern crate alloc;

use apps::{cm, nvmf};
use kernel::{println, AppContext};

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    let args = match nvmf::parse(cmdline) {
        Ok(a) => a,
        Err(e) => {
            println!("nvmf-target: {e}");
            return 2;
        }
    };
    match cm::run(cmdline, |n| nvmf::serve(n, &args)) {
        Ok(()) => 0,
        Err(e) => {
            println!("nvmf-target: FAILED: {e}");
            1
        }
    }
}
