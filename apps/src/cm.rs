//! What the apps over rdma_cm share (`rping`, `ucmatose`, `udaddy`): a node with its RoCE v2
//! GID, a protection domain and an [`rdmacm::RdmaCm`], and the loop that keeps the connection
//! manager and the IP stack polled while an app waits for an event or for completions
//! (librdmacm's event channel and the tools' `rdma_get_cm_event`, here polled). Generic over
//! the HCA and the stack, so the host tests run the apps' code over emulated HCAs; in the
//! unikernel `run` brings it up from the cmdline.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Arguments;
use core::time::Duration;

use mlx5::{AddressHandle, CompletionQueue, Context, Hal, ProtectionDomain, WorkCompletion};
use net::{Clock, Nic};

use rdmacm::{CmConfig, CmError, CmId, ConnParam, Event, NewQp, PortSpace, RdmaCm};

use crate::stack::Node;

/// `rdma_listen`'s backlog when a tool passes 0: Linux's `ucma_listen` takes the largest,
/// `max_backlog` (1024 by default, drivers/infiniband/core/ucma.c), as [`CmConfig::new`]'s.
pub const BACKLOG: usize = 1024;

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
    pub fn new(dev: &'a Context<H>, node: Node<N, C>, say: Say) -> Result<Self, String> {
        let ip = node.args().ip.addr;
        let sgid =
            crate::oob::ipv4_gid_index(dev, ip).map_err(|e| format!("the IPv4 GID: {e:?}"))?;
        let sgid_index = u8::try_from(sgid).map_err(|_| format!("GID index {sgid}"))?;
        let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e:?}"))?;
        let cm = RdmaCm::new(dev, &pd, &CmConfig::new(ip, sgid_index))
            .map_err(|e| format!("rdma_cm: {e:?}"))?;
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
    pub fn create_ah(&mut self, ip: [u8; 4], wait: Duration) -> Result<AddressHandle, String> {
        self.node
            .resolve(ip, wait)
            .map_err(|e| format!("resolving {}: {e:?}", core::net::Ipv4Addr::from(ip)))?;
        self.cm
            .create_ah(ip, self.node.stack())
            .map_err(|e| format!("the address handle: {e:?}"))
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
    use alloc::format;
    use alloc::string::String;

    use kernel::println;
    use mlx5::{Context, ContextConfig};
    use mlx5_kernel::KernelHal;

    use super::CmNode;
    use crate::stack::{self, KernelClock, KernelNic, KernelNode};

    /// The apps' node with a connection manager in the unikernel.
    pub type KernelCmNode<'a> = CmNode<'a, KernelHal, KernelNic, KernelClock>;

    /// Runs `app` on a node placed by the cmdline's network words, with the HCA opened and
    /// closed around it; its lines go to the console.
    pub fn run(
        cmdline: &str,
        app: impl FnOnce(&mut KernelCmNode<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let net = stack::net_args(cmdline).map_err(|e| format!("{e}"))?;
        let hal = mlx5_kernel::open_first(None).map_err(|e| format!("no mlx5 function: {e:?}"))?;
        let dev =
            Context::open(hal, ContextConfig::default()).map_err(|e| format!("bring-up: {e:?}"))?;
        let r = KernelNode::up(&dev, &net)
            .map_err(|e| format!("the network: {e:?}"))
            .and_then(|node| CmNode::new(&dev, node, Box::new(|a| println!("{a}"))))
            .and_then(|mut n| app(&mut n));
        dev.close().map_err(|_| "teardown refused")?;
        r
    }
}

/// `say!(node, "fmt", args)`: a line of the app through [`CmNode::say`].
macro_rules! say {
    ($n:expr, $($t:tt)*) => {
        $n.say(format_args!($($t)*))
    };
}
pub(crate) use say;
