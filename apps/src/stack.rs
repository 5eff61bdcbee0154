//! The node on the network: the words of the cmdline that place it there (`ip=`, `peer=`,
//! `neigh=`), and [`Node`](crate::stack::Node), the IP stack (`net`) the apps poll while they wait; in the
//! unikernel (`KernelNode`) it runs on the HCA's Ethernet queue and the kernel's clock.

use core::net::Ipv4Addr;
use core::time::Duration;

use kernel::cmdline::{parse_mac, Cmdline, CmdlineError, Ipv4Identity};
use net::{Clock, NetError, Nic, Stack};

#[cfg(target_os = "none")]
pub use kernel_node::*;

/// Where the node stands on the network, from the cmdline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetArgs {
    /// `ip=A.B.C.D/N`: the node's address and prefix (its RoCE v2 GID is the IPv4-mapped one).
    pub ip: Ipv4Identity,
    /// `peer=A.B.C.D`: the other side's address, to connect to when it is the server, and to
    /// resolve when its GID is not an IPv4-mapped one.
    pub peer: Option<[u8; 4]>,
    /// `neigh=A.B.C.D,aa:bb:cc:dd:ee:ff`: a static neighbour entry (none: ARP finds them all).
    pub neigh: Option<([u8; 4], [u8; 6])>,
}

/// A network word of the cmdline that is missing or wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetArgsError<'a> {
    /// `ip=` is required.
    NoIp,
    /// A word whose value does not parse.
    Bad(CmdlineError<'a>),
}

impl core::fmt::Display for NetArgsError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NetArgsError::NoIp => write!(f, "need ip=A.B.C.D/N"),
            NetArgsError::Bad(CmdlineError::BadValue { key, value }) => match *key {
                "neigh" => write!(f, "neigh={value}: not A.B.C.D,aa:bb:cc:dd:ee:ff"),
                k => write!(
                    f,
                    "{k}={value}: not A.B.C.D{}",
                    if k == "ip" { "/N" } else { "" }
                ),
            },
        }
    }
}

/// The network words of `cmdline`.
pub fn net_args(cmdline: &str) -> Result<NetArgs, NetArgsError<'_>> {
    let c = Cmdline(cmdline);
    let ip = c
        .ipv4()
        .map_err(NetArgsError::Bad)?
        .ok_or(NetArgsError::NoIp)?;
    let bad = |key, value| NetArgsError::Bad(CmdlineError::BadValue { key, value });
    let addr = |v: &str| v.parse::<core::net::Ipv4Addr>().ok().map(|a| a.octets());
    let peer = match c.get("peer") {
        Some(v) => Some(addr(v).ok_or(bad("peer", v))?),
        None => None,
    };
    let neigh = match c.get("neigh") {
        Some(v) => {
            let (a, m) = v.split_once(',').ok_or(bad("neigh", v))?;
            Some((
                addr(a).ok_or(bad("neigh", v))?,
                parse_mac(m).ok_or(bad("neigh", v))?,
            ))
        }
        None => None,
    };
    Ok(NetArgs { ip, peer, neigh })
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:A.B.C.D`, RFC 4291 2.5.5.2, the RoCE v2
/// GID of an IPv4 address), None for any other GID.
pub fn gid_ipv4(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let (head, v4) = gid.split_at(12);
    (head == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).then(|| [v4[0], v4[1], v4[2], v4[3]])
}

/// How often [`Node::tick`] polls the stack at most. Frequent enough for everything the stack
/// answers while an app waits on the HCA: Linux re-probes a STALE neighbour entry in use (after
/// `DELAY_PROBE_TIME`) with unicast ARP requests `RETRANS_TIME` apart and gives it up after
/// `UCAST_PROBES` unanswered ones (net/core/neighbour.c `neigh_timer_handler`; net/ipv4/arp.c
/// `arp_tbl`: 5 s, 1 s, 3), which would stop rxe's RoCE frames to this node; TCP's timers run
/// in tens of milliseconds.
pub const TICK: Duration = Duration::from_millis(1);

/// `d` in microseconds, as the stack's clock counts (saturating).
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The node on the network: the stack, with `neigh=` of the cmdline in it. It answers ARP and
/// ping, and carries TCP, only while polled: [`Node::poll`], or [`Node::tick`] in the loops
/// that wait for the HCA.
pub struct Node<N: Nic, C: Clock> {
    stack: Stack<N, C>,
    args: NetArgs,
    /// When [`Node::tick`] polls next, on the stack's clock.
    next_poll: u64,
}

impl<N: Nic, C: Clock> Node<N, C> {
    /// The node of `stack`, placed by `args` (its static neighbour added).
    pub fn new(mut stack: Stack<N, C>, args: &NetArgs) -> Self {
        if let Some((ip, mac)) = args.neigh {
            stack.add_neighbour(Ipv4Addr::from(ip), mac);
        }
        let m = stack.mac();
        log::info!(
            "net: {}/{} on {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}{}",
            stack.ip(),
            args.ip.prefix_len,
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            if args.neigh.is_some() {
                ", a static neighbour"
            } else {
                ""
            }
        );
        let next_poll = stack.now_us();
        Node {
            stack,
            args: *args,
            next_poll,
        }
    }

    /// The cmdline's network words.
    pub fn args(&self) -> &NetArgs {
        &self.args
    }

    /// The stack.
    pub fn stack(&mut self) -> &mut Stack<N, C> {
        &mut self.stack
    }

    /// Runs the stack once ([`Stack::poll`]).
    pub fn poll(&mut self) {
        self.stack.poll();
        self.next_poll = self.stack.now_us().saturating_add(micros(TICK));
    }

    /// Runs the stack if [`TICK`] has passed since it last ran: for the loops that wait for
    /// the HCA, where it costs a read of the clock when it is not due.
    #[inline]
    pub fn tick(&mut self) {
        if self.stack.now_us() >= self.next_poll {
            self.poll();
        }
    }

    /// The stack's clock, in microseconds.
    pub fn now_us(&self) -> u64 {
        self.stack.now_us()
    }

    /// The clock's time `d` from now, as the stack's deadlines are.
    pub fn deadline(&self, d: Duration) -> u64 {
        self.stack.now_us().saturating_add(micros(d))
    }

    /// The MAC of `ip` by ARP (or the static neighbour), waiting up to `wait`.
    pub fn resolve(&mut self, ip: [u8; 4], wait: Duration) -> Result<[u8; 6], NetError> {
        let deadline = self.deadline(wait);
        self.stack.resolve(Ipv4Addr::from(ip), deadline)
    }
}

/// Polls `cq` until `n` completions came or `now(cx)` reached `deadline`, with `idle(cx)`
/// between empty polls (the waits that keep the node's stack, and more, polled).
pub fn poll_cq_with<T, H: mlx5::Hal>(
    cx: &mut T,
    cq: &mut mlx5::CompletionQueue<H>,
    n: usize,
    deadline: u64,
    now: impl Fn(&T) -> u64,
    mut idle: impl FnMut(&mut T),
) -> Result<alloc::vec::Vec<mlx5::WorkCompletion>, mlx5::Error> {
    let mut v = alloc::vec::Vec::with_capacity(n.min(64));
    let mut buf = [mlx5::WorkCompletion::default(); 16];
    while v.len() < n {
        let k = cq.poll(&mut buf[..(n - v.len()).min(16)])?;
        v.extend_from_slice(&buf[..k]);
        if k == 0 {
            if now(cx) >= deadline {
                break;
            }
            idle(cx);
            core::hint::spin_loop();
        }
    }
    Ok(v)
}

/// The node of the unikernel: the stack on the HCA's Ethernet queue and the kernel's clock.
#[cfg(target_os = "none")]
mod kernel_node {
    use core::net::Ipv4Addr;

    use kernel::time;
    use mlx5::{Context, EthConfig, EthQueue};
    use mlx5_kernel::KernelHal;
    use net::{NetError, Stack, StackConfig};

    use super::{NetArgs, Node};

    /// The kernel's clock for the stack: microseconds since boot, from the TSC.
    pub struct KernelClock;

    impl net::Clock for KernelClock {
        fn now_us(&self) -> u64 {
            time::micros_since_boot()
        }
    }

    /// The NIC of the apps: the HCA's Ethernet queue.
    pub type KernelNic = EthQueue<KernelHal>;

    /// The node of the apps: over the HCA's Ethernet queue, on the kernel's clock.
    pub type KernelNode = Node<KernelNic, KernelClock>;

    /// Why the node could not come up.
    #[derive(Debug)]
    pub enum NodeError {
        /// Opening the HCA's Ethernet queue failed.
        Eth(mlx5::Error),
        /// The stack refused the configuration.
        Stack(NetError),
    }

    impl KernelNode {
        /// Opens the Ethernet queue of `dev` and puts the stack on it, placed by `args`.
        pub fn up(dev: &Context<KernelHal>, args: &NetArgs) -> Result<KernelNode, NodeError> {
            let eth = dev
                .open_eth(&EthConfig::default())
                .map_err(NodeError::Eth)?;
            let cfg = StackConfig::new(Ipv4Addr::from(args.ip.addr), args.ip.prefix_len);
            let stack = Stack::new(eth, KernelClock, &cfg).map_err(NodeError::Stack)?;
            Ok(Node::new(stack, args))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_words_parse_and_bad_ones_are_named() {
        let a = net_args("pingpong -s 8 role=client ip=10.0.0.2/24 peer=10.0.0.1").unwrap();
        assert_eq!(a.ip.addr, [10, 0, 0, 2]);
        assert_eq!(a.ip.prefix_len, 24);
        assert_eq!(a.peer, Some([10, 0, 0, 1]));
        assert_eq!(a.neigh, None);
        let a = net_args("ip=10.0.0.2/24 neigh=10.0.0.1,02:00:00:00:00:01").unwrap();
        assert_eq!(a.neigh, Some(([10, 0, 0, 1], [2, 0, 0, 0, 0, 1])));
        assert_eq!(net_args("peer=10.0.0.1"), Err(NetArgsError::NoIp));
        for (line, key) in [
            ("ip=10.0.0.2/24 peer=10.0.0", "peer"),
            ("ip=10.0.0.2/24 neigh=10.0.0.1", "neigh"),
            ("ip=10.0.0.2/24 neigh=10.0.0.1,02:00:00:00:01", "neigh"),
            ("ip=10.0.0.2/40", "ip"),
        ] {
            match net_args(line) {
                Err(NetArgsError::Bad(CmdlineError::BadValue { key: k, .. })) => {
                    assert_eq!(k, key, "{line}")
                }
                r => panic!("{line}: {r:?}"),
            }
        }
        assert_eq!(
            alloc::format!("{}", net_args("ip=1.2.3.4 peer=x").unwrap_err()),
            "peer=x: not A.B.C.D"
        );
    }

    #[test]
    fn an_ipv4_mapped_gid_gives_its_address() {
        assert_eq!(
            gid_ipv4(&mlx5::hca::ipv4_mapped_gid([10, 0, 0, 1])),
            Some([10, 0, 0, 1])
        );
        let mut link_local = [0u8; 16];
        link_local[..2].copy_from_slice(&[0xfe, 0x80]);
        assert_eq!(gid_ipv4(&link_local), None);
    }
}
