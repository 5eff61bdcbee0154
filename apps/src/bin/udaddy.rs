//! The server side of rdma-core's librdmacm/examples/udaddy.c on rdma_cm's UDP port space
//! (SIDR), against Linux's client (`cargo run -- --app udaddy --peer linux --peer-role client
//! --peer-cmd 'udaddy -s $SERVER'`).
//!
//! Cmdline: `udaddy [-c CONNECTIONS] [-C COUNT] [-S SIZE] ip=A.B.C.D/N` (the tool's options,
//! `apps::cmtools`; the port is udaddy's fixed 7174). The run is `apps::cmtools::udaddy`'s,
//! as udaddy.c `run_server`: answer `-c` SIDR requests (1), each with a UD QP of its own, its
//! `-C` receives (10) of `-S` bytes (100) and the 40-byte GRH room posted before the answer;
//! receive `-C` messages on each (SEND with immediate: the client's QPN), address the reply
//! from the first (udaddy.c `create_reply_ah`: the GRH area's IPv4 source, the immediate,
//! this QP's Q_Key), and SEND `-C` replies with this QP's number as immediate.
#![no_std]
#![no_main]

use apps::cmtools::{self, Tool};
use apps::{cm, oob};
use kernel::{println, AppContext};

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    let args = oob::tool_args(cmdline, "udaddy");
    let o = match oob::cmdline_role(cmdline).and_then(|r| cmtools::parse(Tool::Udaddy, &args, r)) {
        Ok(o) => o,
        Err(e) => {
            println!("udaddy: {e}");
            return 2;
        }
    };
    let r = cm::run(cmdline, |n| cmtools::udaddy::run_server(n, &o));
    // cmatose.c / udaddy.c `main`.
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            0
        }
        Err(e) => {
            println!("udaddy: FAILED: {e}");
            println!("return status -1");
            1
        }
    }
}
