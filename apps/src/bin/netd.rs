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

use apps::echo::{EchoServer, Event, ECHO_PORT};
use apps::oob::parse_port;
use apps::stack::{self, KernelNode};
use kernel::time::Deadline;
use kernel::{println, AppContext};
use mlx5::{Context, ContextConfig};
use net::NetError;

kernel::entry_point!(main);

fn main(ctx: &AppContext) -> i32 {
    let c = ctx.cmdline;
    let net = match stack::net_args(c.0) {
        Ok(n) => n,
        Err(e) => {
            println!("netd: {e}");
            return 2;
        }
    };
    let port = match c.get("port") {
        None => ECHO_PORT,
        Some(v) => match parse_port(v) {
            Some(p) => p,
            None => {
                println!("netd: port={v}: not a TCP port");
                return 2;
            }
        },
    };
    let secs = match c.get("secs").map(|v| v.parse::<u64>()) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => {
            println!(
                "netd: secs={}: not a number of seconds",
                c.get("secs").unwrap_or("")
            );
            return 2;
        }
    };
    match run(&net, port, secs) {
        Ok(()) => 0,
        Err(e) => {
            println!("netd: FAILED: {e}");
            1
        }
    }
}

/// Why netd stopped early: each step with the typed error under it.
#[derive(Debug)]
enum NetdError {
    /// No mlx5 function on the PCI bus, or it could not be opened.
    NoDevice(mlx5_kernel::OpenError),
    /// The HCA's bring-up failed.
    BringUp(mlx5::Error),
    /// The Ethernet queue or the stack on it did not come up.
    Network(stack::NodeError),
    /// The echo server could not listen on its port.
    Listen { port: u16, err: NetError },
    /// Closing the HCA was refused.
    Teardown(mlx5::Error),
}

impl fmt::Display for NetdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetdError::NoDevice(e) => write!(f, "no mlx5 function: {e:?}"),
            NetdError::BringUp(e) => write!(f, "bring-up: {e:?}"),
            NetdError::Network(e) => write!(f, "the network: {e:?}"),
            NetdError::Listen { port, err } => write!(f, "listen on {port}: {err:?}"),
            NetdError::Teardown(e) => write!(f, "teardown refused: {e:?}"),
        }
    }
}

fn run(net: &stack::NetArgs, port: u16, secs: Option<u64>) -> Result<(), NetdError> {
    let hal = mlx5_kernel::open_first(None).map_err(NetdError::NoDevice)?;
    let dev = Context::open(hal, ContextConfig::default()).map_err(NetdError::BringUp)?;
    let mut node = KernelNode::up(&dev, net).map_err(NetdError::Network)?;
    let r = serve(&mut node, port, secs);
    drop(node);
    r?;
    dev.close().map_err(|r| NetdError::Teardown(r.error))?;
    Ok(())
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
