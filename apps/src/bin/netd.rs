//! The unikernel as a host on the network: the HCA's Ethernet queue with the IP stack on it
//! (apps/src/stack.rs), answering ARP and ping by itself, and a TCP echo server that sends
//! back every byte it receives, byte for byte (RFC 862, the echo service, on TCP).
//!
//! Cmdline: `ip=A.B.C.D/N [port=P] [secs=S] [neigh=A.B.C.D,MAC]`: the node's address; the
//! echo server's TCP port (7, RFC 862's, when absent); how long to run (for ever when absent:
//! the launcher's timeout ends it); a static neighbour entry. With `secs=` it exits 0 when the
//! time is up, after closing what is still open.
//!
//! Output: `netd: up: ...` once listening; for each connection `netd: connection K from
//! A.B.C.D:P` when it is accepted and `netd: connection K from A.B.C.D:P closed: N bytes
//! echoed` (or `reset: N bytes echoed`) when it ends; at the end `netd: done: C connections,
//! N bytes echoed`.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use core::fmt;
use core::net::Ipv4Addr;
use core::time::Duration;

use apps::app::{self, HcaError};
use apps::echo::{EchoServer, Event, ECHO_PORT};
use apps::oob::parse_port;
use apps::stack::{self, KernelNode};
use kernel::cmdline::Cmdline;
use kernel::time::Deadline;
use kernel::{println, AppContext};
use net::NetError;

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    app::exit("netd", parse(ctx.cmdline), |(net, port, secs)| {
        run(&net, port, secs)
    })
}

/// Why the cmdline was refused: the word.
#[derive(Debug)]
enum ArgError<'a> {
    /// A network word.
    Net(stack::NetArgsError<'a>),
    /// `port=`: not a TCP port.
    Port(&'a str),
    /// `secs=`: not a number of seconds.
    Secs(&'a str),
}

impl fmt::Display for ArgError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::Net(e) => write!(f, "{e}"),
            ArgError::Port(v) => write!(f, "port={v}: not a TCP port"),
            ArgError::Secs(v) => write!(f, "secs={v}: not a number of seconds"),
        }
    }
}

/// The node's network words, the echo port (`port=`, 7 when absent) and how long to run
/// (`secs=`, for ever when absent).
fn parse(c: Cmdline<'_>) -> Result<(stack::NetArgs, u16, Option<u64>), ArgError<'_>> {
    let net = stack::net_args(c.0).map_err(ArgError::Net)?;
    let port = match c.get("port") {
        None => ECHO_PORT,
        Some(v) => parse_port(v).ok_or(ArgError::Port(v))?,
    };
    let secs = match c.get("secs") {
        None => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| ArgError::Secs(v))?),
    };
    Ok((net, port, secs))
}

/// Why netd stopped early: each step with the typed error under it.
#[derive(Debug)]
enum NetdError {
    /// Opening, bringing up or closing the HCA.
    Hca(HcaError),
    /// The Ethernet queue or the stack on it did not come up.
    Network(stack::NodeError),
    /// The echo server could not listen on its port.
    Listen { port: u16, err: NetError },
}

impl From<HcaError> for NetdError {
    fn from(e: HcaError) -> Self {
        NetdError::Hca(e)
    }
}

impl fmt::Display for NetdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetdError::Hca(e) => write!(f, "{e}"),
            NetdError::Network(e) => write!(f, "the network: {e:?}"),
            NetdError::Listen { port, err } => write!(f, "listen on {port}: {err:?}"),
        }
    }
}

fn run(net: &stack::NetArgs, port: u16, secs: Option<u64>) -> Result<(), NetdError> {
    app::with_hca(|dev| {
        let mut node = KernelNode::up(dev, net).map_err(NetdError::Network)?;
        serve(&mut node, port, secs)
    })
}

fn serve(node: &mut KernelNode, port: u16, secs: Option<u64>) -> Result<(), NetdError> {
    let end = secs.map(|s| Deadline::after(Duration::from_secs(s)));
    let mut echo = EchoServer::listen(node, port).map_err(|err| NetdError::Listen { port, err })?;
    let ip = Ipv4Addr::from(node.args().ip.addr);
    println!(
        "netd: up: {ip} answers ARP and ping, TCP echo on port {port}, {}",
        match secs {
            Some(s) => format!("for {s} s"),
            None => "until stopped".into(),
        }
    );
    while !end.is_some_and(|d| d.expired()) {
        echo.turn(node, print);
    }
    let (count, total) = echo.close(node, print);
    println!("netd: done: {count} connections, {total} bytes echoed");
    Ok(())
}

/// The line of an event.
fn print(e: Event) {
    match e {
        Event::Accepted { id, from } => {
            println!("netd: connection {id} from {}:{}", from.0, from.1)
        }
        Event::Ended {
            id,
            from,
            bytes,
            err: None,
        } => println!(
            "netd: connection {id} from {}:{} closed: {bytes} bytes echoed",
            from.0, from.1
        ),
        Event::Ended {
            id,
            from,
            bytes,
            err: Some(err),
        } => println!(
            "netd: connection {id} from {}:{} reset: {bytes} bytes echoed ({err:?})",
            from.0, from.1
        ),
    }
}
