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
use alloc::string::String;
use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::time::Duration;

use apps::oob::parse_port;
use apps::stack::{self, KernelNode};
use kernel::time::Deadline;
use kernel::{println, AppContext};
use mlx5::{Context, ContextConfig};
use net::{NetError, TcpConn};

kernel::entry_point!(main);

/// RFC 862: "A server listens for TCP connections on TCP port 7."
const ECHO_PORT: u16 = 7;
/// The most one echo takes and sends back at once: each echo waits for its acknowledgement
/// (`net::Stack::tcp_send_all`), so larger pieces take fewer round trips.
const ECHO_CHUNK: usize = 32 * 1024;
/// How long one echo may wait for the peer to acknowledge it, and a close for its FIN.
const SEND_WAIT: Duration = Duration::from_secs(10);

/// One open connection.
struct Echo {
    conn: TcpConn,
    id: u64,
    from: (Ipv4Addr, u16),
    bytes: u64,
}

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

fn run(net: &stack::NetArgs, port: u16, secs: Option<u64>) -> Result<(), String> {
    let hal = mlx5_kernel::open_first(None).map_err(|e| format!("no mlx5 function: {e:?}"))?;
    let dev =
        Context::open(hal, ContextConfig::default()).map_err(|e| format!("bring-up: {e:?}"))?;
    let mut node = KernelNode::up(&dev, net).map_err(|e| format!("the network: {e:?}"))?;
    let r = serve(&mut node, port, secs);
    drop(node);
    r?;
    dev.close().map_err(|_| "teardown refused")?;
    Ok(())
}

fn serve(node: &mut KernelNode, port: u16, secs: Option<u64>) -> Result<(), String> {
    let end = secs.map(|s| Deadline::after(Duration::from_secs(s)));
    let mut l = node
        .stack()
        .tcp_listen(port)
        .map_err(|e| format!("listen on {port}: {e:?}"))?;
    let ip = Ipv4Addr::from(node.args().ip.addr);
    println!(
        "netd: up: {ip} answers ARP and ping, TCP echo on port {port}, {}",
        match secs {
            Some(s) => format!("for {s} s"),
            None => "until stopped".into(),
        }
    );
    let mut open: Vec<Echo> = Vec::new();
    let (mut count, mut total) = (0u64, 0u64);
    let mut buf = alloc::vec![0u8; ECHO_CHUNK];
    while !end.is_some_and(|d| d.expired()) {
        let s = node.stack();
        // Deadline "now": each call polls the stack once and returns what is there.
        let now = s.now_us();
        if let Ok(conn) = s.tcp_accept(&mut l, now) {
            count += 1;
            let from = s.tcp_remote(&conn).unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
            println!("netd: connection {count} from {}:{}", from.0, from.1);
            open.push(Echo {
                conn,
                id: count,
                from,
                bytes: 0,
            });
        }
        let mut i = 0;
        while i < open.len() {
            let turn = echo_some(node, &mut open[i], &mut buf);
            if turn == Turn::Open {
                i += 1;
                continue;
            }
            let e = open.swap_remove(i);
            total += e.bytes;
            match turn {
                Turn::Failed(err) => {
                    println!(
                        "netd: connection {} from {}:{} reset: {} bytes echoed ({err:?})",
                        e.id, e.from.0, e.from.1, e.bytes
                    );
                    let _ = node.stack().tcp_abort(e.conn);
                }
                _ => finish(node, e, "closed"),
            }
        }
    }
    for e in open {
        total += e.bytes;
        finish(node, e, "closed at the end");
    }
    let _ = node.stack().tcp_unlisten(l);
    println!("netd: done: {count} connections, {total} bytes echoed");
    Ok(())
}

/// What a turn of a connection left it as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Turn {
    /// Still open.
    Open,
    /// The peer closed its side and everything it sent was echoed.
    Closed,
    /// Reset, or an echo not acknowledged in time.
    Failed(NetError),
}

/// Echoes what has come on `e`.
fn echo_some(node: &mut KernelNode, e: &mut Echo, buf: &mut [u8]) -> Turn {
    let s = node.stack();
    let now = s.now_us();
    match s.tcp_recv(&e.conn, buf, now) {
        Ok(0) => Turn::Closed,
        Ok(k) => {
            let d = node.deadline(SEND_WAIT);
            match node.stack().tcp_send_all(&e.conn, &buf[..k], d) {
                Ok(()) => {
                    e.bytes += k as u64;
                    Turn::Open
                }
                Err(err) => Turn::Failed(err),
            }
        }
        Err(NetError::Timeout(_)) => Turn::Open,
        Err(err) => Turn::Failed(err),
    }
}

/// Closes `e` (our FIN, acknowledged or not) and prints its line.
fn finish(node: &mut KernelNode, e: Echo, how: &str) {
    let d = node.deadline(SEND_WAIT);
    let _ = node.stack().tcp_close(e.conn, d);
    println!(
        "netd: connection {} from {}:{} {how}: {} bytes echoed",
        e.id, e.from.0, e.from.1, e.bytes
    );
}
