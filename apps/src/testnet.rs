//! What the host tests of the network parts share: nodes on an in-memory link, on a clock of
//! `std::time`.

use std::time::{Duration, Instant};

use net::loopback::{self, MemNic};
use net::{Clock, Stack, StackConfig};

use crate::stack::{net_args, Node};

/// Microseconds since the clock was made; waits yield to the other threads.
#[derive(Clone, Copy)]
pub struct StdClock(Instant);

impl Clock for StdClock {
    fn now_us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
    fn relax(&self) {
        std::thread::yield_now();
    }
}

pub type TestNode = Node<MemNic, StdClock>;
pub const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0x0b];

/// Node A (placed by the cmdline words `cmd_a`) and node B (`cmd_b`) on one link.
pub fn nodes(cmd_a: &str, cmd_b: &str) -> (TestNode, TestNode) {
    let (na, nb, _link) = loopback::pair(MAC_A, MAC_B, 1514);
    let clock = StdClock(Instant::now());
    let node = |nic, cmd| {
        let args = net_args(cmd).unwrap();
        let cfg = StackConfig::new(args.ip.addr.into(), args.ip.prefix_len);
        Node::new(Stack::new(nic, clock, &cfg).unwrap(), &args)
    };
    (node(na, cmd_a), node(nb, cmd_b))
}

/// Polls `node` for `ms` milliseconds (it answers ARP and refuses connections meanwhile).
pub fn idle(node: &mut TestNode, ms: u64) {
    let end = node.deadline(Duration::from_millis(ms));
    while node.stack().now_us() < end {
        node.poll();
        std::thread::yield_now();
    }
}

/// A node with a connection manager over an emulated HCA (the stack on its Ethernet queue).
pub type HcaCmNode<'a> =
    crate::cm::CmNode<'a, crate::sim::TestHal, mlx5::EthQueue<crate::sim::TestHal>, StdClock>;

/// Runs `f` on a node with a connection manager over the emulated HCA `sim`, placed by the
/// cmdline words `cmd`; the lines it says are returned with its result.
pub fn on_hca<R>(
    sim: std::sync::Arc<crate::sim::SimHal>,
    cmd: &str,
    f: impl FnOnce(&mut HcaCmNode<'_>) -> R,
) -> (R, std::vec::Vec<std::string::String>) {
    use std::sync::{Arc, Mutex};
    let ctx = mlx5::Context::open(crate::sim::TestHal(sim), crate::sim::test_config()).unwrap();
    let eth = ctx.open_eth(&mlx5::EthConfig::default()).unwrap();
    let args = net_args(cmd).unwrap();
    let cfg = StackConfig::new(args.ip.addr.into(), args.ip.prefix_len);
    let stack = Stack::new(eth, StdClock(Instant::now()), &cfg).unwrap();
    let lines = Arc::new(Mutex::new(std::vec::Vec::new()));
    let out = lines.clone();
    let say = alloc::boxed::Box::new(move |a: core::fmt::Arguments<'_>| {
        let l = std::format!("{a}");
        std::eprintln!("{l}");
        out.lock().unwrap().push(l);
    });
    let mut n = crate::cm::CmNode::new(&ctx, Node::new(stack, &args), say).unwrap();
    let r = f(&mut n);
    drop(n);
    let lines = lines.lock().unwrap().clone();
    (r, lines)
}
