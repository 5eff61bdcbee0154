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

use apps::cmtools::{app_main, Tool};
use kernel::AppContext;

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    app_main(Tool::Udaddy, "udaddy", ctx.cmdline.0)
}
