//! What the apps over rdma_cm share (`rping`, `ucmatose`, `udaddy`): a node with its RoCE v2
//! GID, a protection domain and an [`rdmacm::RdmaCm`], and the loop that keeps the connection
//! manager and the IP stack polled while an app waits for an event or for completions
//! (librdmacm's event channel and the tools' `rdma_get_cm_event`, here polled). Generic over
//! the HCA and the stack, so the host tests run the apps' code over emulated HCAs; in the
//! unikernel `run` brings it up from the cmdline.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt::Arguments;
use core::time::Duration;

use mlx5::{AddressHandle, CompletionQueue, Context, Hal, ProtectionDomain, WorkCompletion};
use net::{Clock, Nic};

use rdmacm::{CmConfig, CmError, CmId, ConnParam, Event, NewQp, PortSpace, RdmaCm};

use crate::stack::Node;

/// `rdma_listen`'s backlog when a tool passes 0 (cmatose.c, udaddy.c): Linux's `ucma_listen`
/// takes the largest, `max_backlog` (1024 by default, drivers/infiniband/core/ucma.c); here
/// the largest rdmacm takes, [`rdmacm::BACKLOG_MAX`] (below the CM's connection table), as
/// [`CmConfig::new`]'s.
pub const BACKLOG: usize = rdmacm::BACKLOG_MAX;

/// How long an app waits for the next step of its peer once they are connected (the tools
/// wait for ever; the launcher's run timeout would end the run anyway).
pub const WAIT: Duration = Duration::from_secs(120);

/// How long a server waits for its first client, and a client for its server to listen: the
/// Linux peer boots under TCG after the unikernel (the host tests' peers are there at once).
pub const FIRST_WAIT: Duration = if cfg!(test) {
    Duration::from_secs(30)
} else {
    crate::oob::FIRST_WAIT
};

/// Where an app's lines go (the console in the unikernel, a buffer in the host tests).
pub type Say = Box<dyn FnMut(Arguments<'_>) + Send>;

/// A node with a connection manager.
pub struct CmNode<'a, H: Hal, N: Nic, C: Clock> {
    /// The HCA.
    pub dev: &'a Context<H>,
    /// The IP stack, which answers ARP for the node's address while the app waits.
    pub node: Node<N, C>,
    /// The protection domain every resource of the app lives in.
    pub pd: ProtectionDomain<H>,
    /// The connection manager.
    pub cm: RdmaCm<H>,
    /// The node's address (`ip=`).
    pub ip: [u8; 4],
    /// The GID index of the node's IPv4-mapped GID.
    pub sgid_index: u8,
    /// Events [`CmNode::poll_cq`] saw while it waited, for [`CmNode::next_event`].
    pending: VecDeque<Event>,
    say: Say,
}

impl<'a, H: Hal, N: Nic, C: Clock> CmNode<'a, H, N, C> {
    /// The node of `dev` on `node`: its IPv4-mapped GID programmed, a PD, an [`RdmaCm`].
    pub fn new(dev: &'a Context<H>, node: Node<N, C>, say: Say) -> Result<Self, AppError> {
        let ip = node.args().ip.addr;
        let sgid =
            crate::oob::ipv4_gid_index(dev, ip).map_err(|e| AppError::Verbs("the IPv4 GID", e))?;
        let sgid_index = u8::try_from(sgid).map_err(|_| AppError::GidIndex(sgid))?;
        let pd = dev
            .alloc_pd()
            .map_err(|e| AppError::Verbs("ibv_alloc_pd", e))?;
        let cm = RdmaCm::new(dev, &pd, &CmConfig::new(ip, sgid_index))
            .map_err(|e| AppError::Cm("rdma_create_event_channel", e))?;
        Ok(CmNode {
            dev,
            node,
            pd,
            cm,
            ip,
            sgid_index,
            pending: VecDeque::new(),
            say,
        })
    }

    /// Prints a line of the app.
    pub fn say(&mut self, a: Arguments<'_>) {
        (self.say)(a)
    }

    /// The connection manager's clock: the stack's, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.node.now_us().saturating_mul(1000)
    }

    /// Polls the stack (when due) and the connection manager once.
    pub fn turn(&mut self) -> Option<Event> {
        self.node.tick();
        let now = self.now_ns();
        self.cm.poll(now, self.node.stack())
    }

    /// The next event (one [`CmNode::poll_cq`] put aside first), waiting up to `wait`.
    pub fn next_event(&mut self, wait: Duration) -> Option<Event> {
        if let Some(e) = self.pending.pop_front() {
            return Some(e);
        }
        let deadline = self.node.deadline(wait);
        loop {
            if let Some(e) = self.turn() {
                return Some(e);
            }
            if self.node.now_us() >= deadline {
                return None;
            }
            core::hint::spin_loop();
        }
    }

    /// An event if one is there, without waiting (a put-aside one first).
    pub fn try_event(&mut self) -> Option<Event> {
        self.pending.pop_front().or_else(|| self.turn())
    }

    /// `rdma_accept`.
    pub fn accept(&mut self, id: CmId, p: &ConnParam<'_>) -> Result<(), CmError> {
        let now = self.now_ns();
        self.cm.accept(now, id, p, self.node.stack())
    }

    /// `rdma_reject` with no private data.
    pub fn reject(&mut self, id: CmId) -> Result<(), CmError> {
        let now = self.now_ns();
        self.cm.reject(now, id, &[], self.node.stack())
    }

    /// `rdma_disconnect`.
    pub fn disconnect(&mut self, id: CmId) -> Result<(), CmError> {
        let now = self.now_ns();
        self.cm.disconnect(now, id, self.node.stack())
    }

    /// `rdma_destroy_id` (its QP goes once the device gave it back).
    pub fn destroy_id(&mut self, id: CmId) -> Result<(), CmError> {
        let now = self.now_ns();
        self.cm.destroy_id(now, id, self.node.stack())
    }

    /// `rdma_resolve_addr` + `rdma_resolve_route` + `rdma_create_qp` + `rdma_connect` to
    /// `port` of `ps` at `dst`, the QP of `send_cq`/`recv_cq` in the node's PD.
    pub fn connect(
        &mut self,
        dst: [u8; 4],
        port: u16,
        ps: PortSpace,
        cqs: (&CompletionQueue<H>, &CompletionQueue<H>),
        init: rdmacm::QpInit,
        p: &ConnParam<'_>,
    ) -> Result<CmId, CmError> {
        let now = self.now_ns();
        let qp = NewQp {
            pd: &self.pd,
            send_cq: cqs.0,
            recv_cq: cqs.1,
            init,
        };
        self.cm
            .connect(now, dst, port, ps, &qp, p, self.node.stack())
    }

    /// `rdma_accept` of a UD id: the SIDR answer with UD QP `qpn` and its `qkey`.
    pub fn ud_accept(&mut self, id: CmId, qpn: u32, qkey: u32) -> Result<(), CmError> {
        let now = self.now_ns();
        self.cm
            .ud_accept(now, id, qpn, qkey, &[], self.node.stack())
    }

    /// `rdma_reject` of a UD id.
    pub fn ud_reject(&mut self, id: CmId) -> Result<(), CmError> {
        let now = self.now_ns();
        self.cm.ud_reject(now, id, self.node.stack())
    }

    /// An address handle toward `ip`, its MAC by ARP (waiting up to `wait`).
    pub fn create_ah(&mut self, ip: [u8; 4], wait: Duration) -> Result<AddressHandle, AppError> {
        self.node
            .resolve(ip, wait)
            .map_err(|err| AppError::Resolve { ip, err })?;
        self.cm
            .create_ah(ip, self.node.stack())
            .map_err(|e| AppError::Cm("ibv_create_ah", e))
    }

    /// Polls `cq` until `n` completions came or `wait` passed, the connection manager and the
    /// stack kept polled meanwhile; their events are put aside for [`CmNode::next_event`].
    pub fn poll_cq(
        &mut self,
        cq: &mut CompletionQueue<H>,
        n: usize,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>, mlx5::Error> {
        let deadline = self.node.deadline(wait);
        crate::stack::poll_cq_with(
            self,
            cq,
            n,
            deadline,
            |s| s.node.now_us(),
            |s| {
                if let Some(e) = s.turn() {
                    s.pending.push_back(e);
                }
            },
        )
    }
}

/// What `rdma_accept(id, NULL)` answers (librdmacm cma.c `rdma_accept` with no conn_param:
/// the request's depths as the event gives them, from the acceptor's side; retry and RNR retry
/// counts 7, `ucma_copy_conn_param_to_kern`).
pub fn accept_defaults(initiator_depth: u8, responder_resources: u8) -> ConnParam<'static> {
    ConnParam {
        private_data: &[],
        responder_resources,
        initiator_depth,
        retry_count: 7,
        rnr_retry_count: 7,
    }
}

/// Why an app over rdma_cm (`rping`, `ucmatose`, `udaddy`) failed: the typed error of the
/// layer that refused, with the call it refused (librdmacm's or libibverbs' name), or what the
/// app waited for and did not get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppError {
    /// A call of the connection manager failed.
    Cm(&'static str, CmError),
    /// A verb of the driver failed.
    Verbs(&'static str, mlx5::Error),
    /// The node's GID index does not fit rdma_cm's 8 bits.
    GidIndex(u16),
    /// An address did not answer ARP (or the stack failed otherwise).
    Resolve {
        /// The address asked for.
        ip: [u8; 4],
        /// What the stack said.
        err: net::NetError,
    },
    /// Nothing came in time: what was waited for, and how long.
    NoEvent {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// Fewer than asked for came in time.
    Short {
        /// The connection (the tools' node index), when the count is one connection's.
        conn: Option<usize>,
        /// What was counted.
        what: &'static str,
        /// How many came.
        got: usize,
        /// How many were due.
        want: usize,
        /// How long was waited.
        waited: Duration,
    },
    /// An event of the connection manager that ends what was waited for.
    Event(&'static str, Event),
    /// A completion in error, or of another length than due.
    Completion {
        /// The connection (the tools' node index), when there are several.
        conn: Option<usize>,
        /// The completion.
        wc: WorkCompletion,
    },
    /// A completion of an operation this side does not post.
    Unexpected(mlx5::WcOpcode),
    /// rping's protocol was broken.
    Proto(crate::rping::ProtoError),
    /// A ping's data is not what was sent (rping `-V`): the ping, and whose check.
    Data {
        /// The ping.
        ping: u32,
        /// The side that checked.
        server: bool,
    },
    /// The run ended after `got` pings where `-C` asked for `want`.
    Pings {
        /// Pings done.
        got: u32,
        /// `-C`.
        want: u32,
    },
    /// rping's server disconnected before the client's pings were done.
    PeerGone {
        /// Pings done.
        after: u32,
    },
    /// `-a` names an address that is not this node's (`ip=`).
    NotOwnAddress([u8; 4]),
    /// A client with neither `-a` nor `peer=`.
    NoServer,
    /// Something the run set up itself is missing (its QP, a buffer, the reply's address).
    Missing(&'static str),
    /// No connection of the `-c` came.
    NoConnection,
    /// udaddy's message is larger than the port's active MTU (`verify_test_params`).
    TooLargeForMtu {
        /// `-S`.
        size: u32,
        /// The active MTU in bytes.
        mtu: u32,
    },
    /// A UD message without the client's QPN as immediate data.
    NoImmediate,
    /// The GRH area of a UD message holds no IPv4 header.
    NoIpv4Grh,
    /// The NVMe-oF target could not be made or could not listen: the step, and why.
    Target(&'static str, nvmf_rdma::Error),
    /// The disk size does not fit this machine's address space.
    DiskSize(u64),
}

impl core::fmt::Display for AppError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ip = |a: &[u8; 4]| core::net::Ipv4Addr::from(*a);
        match self {
            AppError::Cm(call, e) => write!(f, "{call}: {e:?}"),
            AppError::Verbs(call, e) => write!(f, "{call}: {e:?}"),
            AppError::GidIndex(i) => write!(f, "GID index {i}"),
            AppError::Resolve { ip: a, err } => write!(f, "resolving {}: {err:?}", ip(a)),
            AppError::NoEvent { what, waited } => write!(f, "no {what} in {waited:?}"),
            AppError::Short {
                conn,
                what,
                got,
                want,
                waited,
            } => {
                if let Some(i) = conn {
                    write!(f, "connection {i}: ")?;
                }
                write!(f, "{got} of {want} {what} in {waited:?}")
            }
            AppError::Event(what, e) => write!(f, "{} while {what}", event_line(e)),
            AppError::Completion { conn, wc } => {
                if let Some(i) = conn {
                    write!(f, "connection {i}: ")?;
                }
                write!(
                    f,
                    "cq completion {:?} of {} B (wr {}, vendor syndrome {:#x})",
                    wc.status, wc.byte_len, wc.wr_id, wc.vendor_err
                )
            }
            AppError::Unexpected(op) => write!(f, "an unexpected {op:?} completion"),
            AppError::Proto(e) => write!(f, "{e}"),
            AppError::Data { ping, server: true } => {
                write!(f, "ping {ping}: the data read is not rping's")
            }
            AppError::Data {
                ping,
                server: false,
            } => write!(f, "ping {ping}: data mismatch!"),
            AppError::Pings { got, want } => write!(f, "{got} pings, not -C {want}"),
            AppError::PeerGone { after } => {
                write!(f, "the server disconnected after {after} pings")
            }
            AppError::NotOwnAddress(a) => write!(f, "-a {}: not this node's address (ip=)", ip(a)),
            AppError::NoServer => write!(f, "as client, need -a ADDR (or peer=)"),
            AppError::Missing(what) => write!(f, "no {what}"),
            AppError::NoConnection => write!(f, "no connection"),
            AppError::TooLargeForMtu { size, mtu } => {
                write!(f, "message_size {size} is larger than active mtu {mtu}")
            }
            AppError::NoImmediate => write!(f, "a message without immediate data"),
            AppError::NoIpv4Grh => write!(f, "the GRH area holds no IPv4 header"),
            AppError::Target(step, e) => write!(f, "{step}: {e:?}"),
            AppError::DiskSize(b) => {
                write!(f, "a disk of {b} bytes does not fit the address space")
            }
        }
    }
}

/// An event in rping.c's words (`rping_cma_event_handler`): its name, a REJ's reason.
pub fn event_line(e: &Event) -> EventLine<'_> {
    EventLine(e)
}

/// [`event_line`]'s text.
pub struct EventLine<'a>(&'a Event);

impl core::fmt::Display for EventLine<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Event::Rejected { reason, .. } => {
                write!(f, "cma event RDMA_CM_EVENT_REJECTED, error {reason}")
            }
            e => write!(f, "cma event {}", event_str(e)),
        }
    }
}

/// An event's name, as librdmacm's `rdma_event_str` spells the matching one.
pub fn event_str(e: &Event) -> &'static str {
    match e {
        Event::ConnectRequest { .. } | Event::UdRequest { .. } => "RDMA_CM_EVENT_CONNECT_REQUEST",
        Event::Established { .. } => "RDMA_CM_EVENT_ESTABLISHED",
        Event::Rejected { .. } => "RDMA_CM_EVENT_REJECTED",
        Event::Unreachable { .. } => "RDMA_CM_EVENT_UNREACHABLE",
        Event::AddrError { .. } => "RDMA_CM_EVENT_ADDR_ERROR",
        Event::ConnectError { .. } => "RDMA_CM_EVENT_CONNECT_ERROR",
        Event::UdResolved { .. } => "RDMA_CM_EVENT_ESTABLISHED",
        Event::Disconnected { .. } => "RDMA_CM_EVENT_DISCONNECTED",
        Event::TimewaitExit { .. } => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    }
}

#[cfg(target_os = "none")]
pub use kernel_run::*;

/// The unikernel's node with a connection manager, from the cmdline.
#[cfg(target_os = "none")]
mod kernel_run {
    use alloc::boxed::Box;

    use kernel::println;
    use mlx5_kernel::KernelHal;

    use super::{AppError, CmNode};
    use crate::app::{self, HcaError};
    use crate::stack::{self, KernelClock, KernelNic, KernelNode, NetArgsError, NodeError};

    /// The apps' node with a connection manager in the unikernel.
    pub type KernelCmNode<'a> = CmNode<'a, KernelHal, KernelNic, KernelClock>;

    /// Why a run in the unikernel failed: bringing the node up, the app, or the teardown.
    #[derive(Debug)]
    pub enum RunError<'c> {
        /// The cmdline's network words.
        NetArgs(NetArgsError<'c>),
        /// Opening, bringing up or closing the HCA.
        Hca(HcaError),
        /// The Ethernet queue or the stack.
        Network(NodeError),
        /// The app (or its node's PD and connection manager).
        App(AppError),
    }

    impl From<HcaError> for RunError<'_> {
        fn from(e: HcaError) -> Self {
            RunError::Hca(e)
        }
    }

    impl core::fmt::Display for RunError<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            match self {
                RunError::NetArgs(e) => write!(f, "{e}"),
                RunError::Hca(e) => write!(f, "{e}"),
                RunError::Network(e) => write!(f, "the network: {e:?}"),
                RunError::App(e) => write!(f, "{e}"),
            }
        }
    }

    /// Runs `run` on a node placed by the cmdline's network words, with the HCA opened and
    /// closed around it ([`app::with_hca`]); its lines go to the console.
    pub fn run<'c>(
        cmdline: &'c str,
        run: impl FnOnce(&mut KernelCmNode<'_>) -> Result<(), AppError>,
    ) -> Result<(), RunError<'c>> {
        let net = stack::net_args(cmdline).map_err(RunError::NetArgs)?;
        app::with_hca(|dev| {
            let node = KernelNode::up(dev, &net).map_err(RunError::Network)?;
            let mut n =
                CmNode::new(dev, node, Box::new(|a| println!("{a}"))).map_err(RunError::App)?;
            run(&mut n).map_err(RunError::App)
        })
    }
}

/// `say!(node, "fmt", args)`: a line of the app through [`CmNode::say`].
macro_rules! say {
    ($n:expr, $($t:tt)*) => {
        $n.say(format_args!($($t)*))
    };
}
pub(crate) use say;
