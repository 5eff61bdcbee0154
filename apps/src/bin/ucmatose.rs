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

use apps::cmtools::{app_main, Tool};
use kernel::AppContext;

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    app_main(Tool::Cmatose, "ucmatose", ctx.cmdline.0)
}
