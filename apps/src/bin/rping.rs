//! rdma-core's librdmacm/examples/rping.c on rdma_cm, both roles, against Linux's `rping`
//! (`cargo run -- --app rping --peer linux --peer-cmd 'rping ...'`).
//!
//! Cmdline: `rping -s|-c [-vVd] [-S SIZE] [-C COUNT] [-a ADDR] [-p PORT] ip=A.B.C.D/N
//! [peer=A.B.C.D] [role=server|client]` (rping's own options; `-I` and `-t` are taken and
//! ignored, `-P` and `-q` refused; `role=` wins over `-s`/`-c`). The server listens on `-p`
//! (7174) of rdma_cm's TCP port space at its own address (`ip=`); the client connects to `-a`
//! (or `peer=`).
//!
//! The protocol is `apps::rping`'s, run by `apps::rping::run`: the client advertises its start
//! buffer, the server READs it and says go ahead, the client advertises its sink, the server
//! WRITEs what it read into it and says go ahead; `-C` times (0: until the client
//! disconnects). With `-V` the client compares the two buffers and the server checks each
//! ping's data against rping's pattern (both every byte); `-v` prints the data as rping does.
#![no_std]
#![no_main]

extern crate alloc;

use apps::getopt::OptError;
use apps::{app, cm, oob, rping};
use kernel::AppContext;

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    let cmdline = ctx.cmdline.0;
    let args = oob::tool_args(cmdline, "rping");
    let opts = oob::cmdline_role(cmdline)
        .map_err(OptError::Role)
        .and_then(|role| rping::parse(&args, role));
    app::exit("rping", opts, |o| {
        cm::run(cmdline, |n| rping::run::run(n, &o))
    })
}
