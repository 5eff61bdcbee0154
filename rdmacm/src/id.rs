//! An id's record: its state, its connection in the CM, its QP; and what an id waiting for a
//! neighbour's MAC will send.

use alloc::vec::Vec;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::QueuePair;
use rdma_cm::conn::{ConnId, SidrTicket};
use rdma_cm::rdma_cm::PortSpace;

use crate::arp::ArpWait;
use crate::types::CmId;

/// Where an id is (librdmacm's `enum rdma_cm_state` as far as the API shows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IdState {
    /// A REQ not answered yet.
    Requested,
    /// Active: waiting for the peer's MAC before the REQ goes.
    Resolving(Plan, ArpWait),
    /// Active: REQ sent.
    Connecting,
    /// Passive: accepted, waiting for the peer's MAC before the QP moves and the REP goes.
    AcceptPending(Deferred, ArpWait),
    /// Passive: REP sent, waiting for the RTU.
    Accepting,
    /// Connected.
    Established,
    /// DREQ sent, or DREQ received: waiting for TIMEWAIT to end.
    Disconnected,
    /// A SIDR_REQ not answered yet.
    UdRequested(SidrTicket),
    /// Over (rejected, unreachable, TIMEWAIT done): only `destroy_id` is left.
    Closed,
}

/// An accept waiting for the peer's MAC: what `RdmaCm::accept` was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Deferred {
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) rnr_retry_count: u8,
}

/// One id.
pub(crate) struct Id<H: Hal> {
    pub(crate) handle: CmId,
    pub(crate) conn: Option<ConnId>,
    pub(crate) qp: Option<QueuePair<H>>,
    pub(crate) access: Access,
    pub(crate) remote_ip: [u8; 4],
    pub(crate) state: IdState,
}

/// What a connecting id sends once its peer's MAC is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) port: u16,
    pub(crate) ps: PortSpace,
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    /// A SIDR_REQ rather than a REQ.
    pub(crate) ud: bool,
}
