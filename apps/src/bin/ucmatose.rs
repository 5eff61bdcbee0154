//! The server side of rdma-core's librdmacm/examples/cmatose.c (installed as `ucmatose`) on
//! rdma_cm, against Linux's client (`cargo run -- --app ucmatose --peer linux --peer-role
//! client --peer-cmd 'ucmatose -s $SERVER'`).
//!
//! Cmdline: `ucmatose [-c CONNECTIONS] [-C COUNT] [-S SIZE] [-p PORT] ip=A.B.C.D/N` (the
//! tool's options, `apps::cmtools`). The run is `apps::cmtools::cmatose`'s, as cmatose.c
//! `run_server`: listen on `-p` (7471) of the TCP port space; accept `-c` connections (1),
//! each with its own CQs, QP and message buffer, its `-C` receives (10) posted before the
//! accept, and refuse any beyond; once all came, SEND `-C` messages of `-S` bytes (100) on
//! each and wait for their completions, then for the client's `-C` replies on each (every one
//! `-S` bytes); then disconnect them all and wait for each disconnect.
#![no_std]
#![no_main]

use apps::cmtools::{self, Tool};
use apps::{cm, oob};
use kernel::{println, AppContext};

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    let args = oob::tool_args(cmdline, "ucmatose");
    let o = match oob::cmdline_role(cmdline).and_then(|r| cmtools::parse(Tool::Cmatose, &args, r)) {
        Ok(o) => o,
        Err(e) => {
            println!("cmatose: {e}");
            return 2;
        }
    };
    let r = cm::run(cmdline, |n| cmtools::cmatose::run_server(n, &o));
    // cmatose.c / udaddy.c `main`.
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            0
        }
        Err(e) => {
            println!("cmatose: FAILED: {e}");
            println!("return status -1");
            1
        }
    }
}
