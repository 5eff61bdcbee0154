//! What the apps over rdma_cm share (`rping`, `ucmatose`, `udaddy`): the node brought up with
//! its RoCE v2 GID, a protection domain and an [`rdmacm::RdmaCm`] on it, and the loop that keeps
//! the connection manager and the IP stack polled while an app waits for an event or for
//! completions (librdmacm's event channel and the tools' `rdma_get_cm_event`, here polled).

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use kernel::time;
use mlx5::{CompletionQueue, Context, ContextConfig, ProtectionDomain, WorkCompletion};
use mlx5_kernel::KernelHal;
use rdmacm::{CmConfig, ConnParam, Event, RdmaCm};

use crate::stack::{self, KernelNode, NetArgs};

/// The HCA of the apps.
pub type Hal = KernelHal;

/// `rdma_listen`'s backlog when a tool passes 0: Linux's `ucma_listen` takes the largest,
/// `max_backlog` (1024 by default, drivers/infiniband/core/ucma.c), as [`CmConfig::new`]'s.
pub const BACKLOG: usize = 1024;

/// A node with a connection manager.
pub struct CmNode<'a> {
    /// The HCA.
    pub dev: &'a Context<Hal>,
    /// The IP stack, which answers ARP for the node's address while the app waits.
    pub node: KernelNode,
    /// The protection domain every resource of the app lives in.
    pub pd: ProtectionDomain<Hal>,
    /// The connection manager.
    pub cm: RdmaCm<Hal>,
    /// The node's address (`ip=`).
    pub ip: [u8; 4],
    /// The GID index of the node's IPv4-mapped GID.
    pub sgid_index: u8,
    /// Events [`CmNode::poll_cq`] saw while it waited, for [`CmNode::next_event`].
    pending: VecDeque<Event>,
}

/// Runs `app` on a node placed by the cmdline's network words, with the HCA opened and
/// closed around it.
pub fn run(
cmdline: &str,
app: impl FnOnce(&mut CmNode<'_>) -> Result<(), String>,
) -> Result<(), String> {
let net = stack::net_args(cmdline).map_err(|e| format!("{e}"))?;
let hal = mlx5_kernel::open_first(None).map_err(|e| format!("no mlx5 function: {e:?}"))?;
let dev = Context::open(hal, ContextConfig::default())
    .map_err(|e| format!("bring-up: {e:?}"))?;
let r = CmNode::up(&dev, &net).and_then(|mut n| app(&mut n));
dev.close().map_err(|_| "teardown refused")?;
r
}

/// The clock of the connection manager: nanoseconds since boot.
pub fn now_ns() -> u64 {
    time::micros_since_boot().saturating_mul(1000)
}

impl<'a> CmNode<'a> {
    fn up(dev: &'a Context<Hal>, net: &NetArgs) -> Result<CmNode<'a>, String> {
        let ip = net.ip.addr;
        let sgid = crate::oob::ipv4_gid_index(dev, ip).map_err(|e| format!("the IPv4 GID: {e:?}"))?;
        let sgid_index = u8::try_from(sgid).map_err(|_| format!("GID index {sgid}"))?;
        let pd = dev.alloc_pd().map_err(|e| format!("alloc_pd: {e:?}"))?;
        let node = KernelNode::up(dev, net).map_err(|e| format!("the network: {e:?}"))?;
        let cfg = CmConfig::new(ip, sgid_index);
        let cm = RdmaCm::new(dev, &pd, &cfg).map_err(|e| format!("rdma_cm: {e:?}"))?;
        Ok(CmNode {
            dev,
            node,
            pd,
            cm,
            ip,
            sgid_index,
            pending: VecDeque::new(),
        })
    }

    /// Polls the stack (when due) and the connection manager once.
    pub fn turn(&mut self) -> Option<Event> {
        self.node.tick();
        self.cm.poll(now_ns(), self.node.stack())
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
            if self.node.stack().now_us() >= deadline {
                return None;
            }
            core::hint::spin_loop();
        }
    }

    /// An event if one is there, without waiting (a put-aside one first).
    pub fn try_event(&mut self) -> Option<Event> {
        self.pending.pop_front().or_else(|| self.turn())
    }

    /// Polls `cq` until `n` completions came or `wait` passed, the connection manager and the
    /// stack kept polled meanwhile; their events are put aside for [`CmNode::next_event`].
    pub fn poll_cq(
        &mut self,
        cq: &mut CompletionQueue<Hal>,
        n: usize,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>, mlx5::Error> {
        let deadline = self.node.deadline(wait);
        let mut v = Vec::with_capacity(n.min(64));
        let mut buf = [WorkCompletion::default(); 16];
        while v.len() < n {
            let k = cq.poll(&mut buf[..(n - v.len()).min(16)])?;
            v.extend_from_slice(&buf[..k]);
            if k == 0 {
                if self.node.stack().now_us() >= deadline {
                    break;
                }
                if let Some(e) = self.turn() {
                    self.pending.push_back(e);
                }
                core::hint::spin_loop();
            }
        }
        Ok(v)
    }
}

/// What `rdma_accept(id, NULL)` answers (librdmacm cma.c `rdma_accept` with no conn_param:
/// the request's depths as the event gives them, from the acceptor's side; retry and RNR retry
/// counts 7, `ucma_copy_conn_param_to_kern`) with `private_data`.
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
        Event::ConnectRequest { .. } => "RDMA_CM_EVENT_CONNECT_REQUEST",
        Event::Established { .. } => "RDMA_CM_EVENT_ESTABLISHED",
        Event::Rejected { .. } => "RDMA_CM_EVENT_REJECTED",
        Event::Unreachable { .. } => "RDMA_CM_EVENT_UNREACHABLE",
        Event::AddrError { .. } => "RDMA_CM_EVENT_ADDR_ERROR",
        Event::Disconnected { .. } => "RDMA_CM_EVENT_DISCONNECTED",
        Event::TimewaitExit { .. } => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
        Event::UdRequest { .. } => "RDMA_CM_EVENT_CONNECT_REQUEST",
    }
}
