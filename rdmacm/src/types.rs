//! What the API takes and gives: ids, configuration, connection parameters, events, errors,
//! and the neighbour table it asks for MAC addresses.

use alloc::vec::Vec;

use mlx5::mr::Access;
use mlx5::QpCaps;
use rdma_cm::conn::CallError;

/// A communication identifier (librdmacm `struct rdma_cm_id`): one connection, connection
/// request or UD service exchange. Numbered by the [`crate::RdmaCm`] that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CmId(pub u32);

/// How a [`crate::RdmaCm`] is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// Our IPv4 address: the source of connections, the IPv4-mapped GID of the CM's MADs.
    pub ip: [u8; 4],
    /// The GID index that holds `ip`'s RoCE v2 GID (`mlx5::Context::add_ipv4_gid`).
    pub sgid_index: u8,
    /// The largest backlog [`crate::RdmaCm::listen`] takes, at most [`BACKLOG_MAX`]
    /// (librdmacm passes the backlog to the kernel, which caps it at
    /// `net.rdma_ucm.max_backlog`, 1024 by default: Linux `drivers/infiniband/core/ucma.c`
    /// `max_backlog`).
    pub backlog_max: usize,
    /// Path MTU of the connections we start (`enum ib_mtu`: 3 is 1024 bytes; rdma_cm on RoCE
    /// takes the netdev's, cma.c `cma_resolve_iboe_route` → `iboe_get_mtu`: 1024 for an
    /// Ethernet MTU of 1500).
    pub path_mtu: u8,
    /// How long address resolution waits for an ARP reply, in ns (librdmacm callers pass it
    /// to `rdma_resolve_addr`: rping and cmatose 2000 ms).
    pub resolve_timeout_ns: u64,
    /// Receive buffers of the GSI QP (one MAD each).
    pub gsi_recv_slots: usize,
    /// Send buffers of the GSI QP; a MAD sent while all are in flight is dropped (the CM
    /// retries).
    pub gsi_send_slots: usize,
}

/// The largest listen backlog: half the connections the CM tracks
/// ([`crate::MAX_CONNS`], TIMEWAIT included, shared by every listener), so one listener's
/// full backlog leaves room for the requests of the others and for the connections made.
/// Linux has no such table: its cap is `max_backlog` (1024) per listener.
pub const BACKLOG_MAX: usize = 16;

impl CmConfig {
    /// Address `ip` at GID index `sgid_index`, a backlog of at most [`BACKLOG_MAX`], path MTU 1024,
    /// 2 s of address resolution, 64 MAD buffers each way.
    pub const fn new(ip: [u8; 4], sgid_index: u8) -> CmConfig {
        CmConfig {
            ip,
            sgid_index,
            backlog_max: BACKLOG_MAX,
            path_mtu: 3,
            resolve_timeout_ns: 2_000_000_000,
            gsi_recv_slots: 64,
            gsi_send_slots: 64,
        }
    }
}

/// What the application says when connecting or accepting (librdmacm `struct
/// rdma_conn_param`). Its `flow_control` is not here: the REQs and REPs carry 0, as rping's,
/// the cmatose family's and perftest's (rdma-core `librdmacm/examples`, perftest
/// `src/perftest_communication.c` leave it zero; cma.c `cma_connect_ib` / `cma_accept_ib`
/// copy it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnParam<'a> {
    /// Private data for the peer: at most [`CONNECT_PRIVATE_DATA_MAX`] bytes in a connect
    /// (the rdma_cm header takes the rest of the REQ's 92), 196 in an accept.
    pub private_data: &'a [u8],
    /// RDMA READs / atomics we take as responder.
    pub responder_resources: u8,
    /// RDMA READs / atomics we issue as initiator.
    pub initiator_depth: u8,
    /// Transport retries (connect only: the REQ's Retry Count, 3 bits).
    pub retry_count: u8,
    /// RNR retries the peer makes toward us (3 bits; 7 is "for ever").
    pub rnr_retry_count: u8,
}

impl Default for ConnParam<'_> {
    /// No private data, one RDMA READ each way, 7 retries of each kind (rdma-core
    /// `librdmacm/examples/rping.c`'s `conn_param`).
    fn default() -> Self {
        ConnParam {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

impl ConnParam<'static> {
    /// What librdmacm's `rdma_accept(id, NULL)` answers: no private data, the responder
    /// resources and initiator depth the connect request asked for, bounded by the device
    /// (rdma-core `librdmacm/cma.c` `rdma_accept` without a `conn_param` takes the request's,
    /// each at most the device's `max_qp_rd_atom` / `max_qp_init_rd_atom`), 7 RNR retries.
    /// [`crate::RdmaCm::accept`] takes the least of these (`u8::MAX` here), the request's and
    /// the device's. For an accept only: a connect would ask the device's most.
    pub const ACCEPT_FROM_REQUEST: Self = ConnParam {
        private_data: &[],
        responder_resources: u8::MAX,
        initiator_depth: u8::MAX,
        retry_count: 7,
        rnr_retry_count: 7,
    };
}

/// Most private data bytes of a connect: the REQ's 92 less the 36 of the rdma_cm header
/// (cma.c `cma_user_data_offset`, librdmacm `rdma_connect` checks the same).
pub const CONNECT_PRIVATE_DATA_MAX: usize =
    rdma_cm::msg::REQ_PRIVATE_DATA_LEN - rdma_cm::rdma_cm::CMA_HDR_LEN;

/// The RC QP a [`CmId`] owns (`rdma_create_qp`'s `ibv_qp_init_attr`, RC only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    /// Queue sizes.
    pub caps: QpCaps,
    /// Remote access the QP allows as responder, set at INIT. Linux gives REMOTE_WRITE, and
    /// REMOTE_READ and REMOTE_ATOMIC when the connection has responder resources (cm.c
    /// `cm_init_qp_init_attr`); here the application says.
    pub access: Access,
}

/// What happened (librdmacm `enum rdma_cm_event_type`), from [`crate::RdmaCm::poll`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A REQ for a port we listen on (`RDMA_CM_EVENT_CONNECT_REQUEST`): give the id a QP
    /// ([`crate::RdmaCm::create_qp`]), post receives, then accept or reject it.
    ConnectRequest {
        /// The new id.
        id: CmId,
        /// The peer's private data after the rdma_cm header.
        private_data: Vec<u8>,
        /// The peer's address (the rdma_cm header's source).
        remote_ip: [u8; 4],
        /// RDMA READs we may issue toward the peer (our initiator depth): the REQ's
        /// Responder Resources, seen from here (cm.c `cm_format_req_event` swaps the two).
        initiator_depth: u8,
        /// RDMA READs the peer will issue toward us (our responder resources): the REQ's
        /// Initiator Depth.
        responder_resources: u8,
    },
    /// The connection carries data (`RDMA_CM_EVENT_ESTABLISHED`): the RTU came (passive) or
    /// the REP came and our RTU went (active).
    Established {
        /// The id.
        id: CmId,
        /// The REP's private data on the active side, empty on the passive side.
        private_data: Vec<u8>,
    },
    /// The peer rejected (`RDMA_CM_EVENT_REJECTED`); the QP is in ERR.
    Rejected {
        /// The id.
        id: CmId,
        /// The REJ's reason (IBTA Table 112; 8: no one listens on the port).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The peer never answered (`RDMA_CM_EVENT_UNREACHABLE`); the QP is in ERR.
    Unreachable {
        /// The id.
        id: CmId,
    },
    /// The REP came but our QP could not be moved to RTS (`RDMA_CM_EVENT_CONNECT_ERROR`): a
    /// REJ went back, the QP is in ERR.
    ConnectError {
        /// The id.
        id: CmId,
    },
    /// The peer's address did not resolve in time (`RDMA_CM_EVENT_ADDR_ERROR`).
    AddrError {
        /// The id.
        id: CmId,
    },
    /// The connection is down (`RDMA_CM_EVENT_DISCONNECTED`); the QP is in ERR.
    Disconnected {
        /// The id.
        id: CmId,
    },
    /// TIMEWAIT is over (`RDMA_CM_EVENT_TIMEWAIT_EXIT`): the QP may be destroyed or reused.
    TimewaitExit {
        /// The id.
        id: CmId,
    },
    /// A SIDR_REQ for a UD port we listen on (`RDMA_CM_EVENT_CONNECT_REQUEST` on a UD id):
    /// answer it with [`crate::RdmaCm::ud_accept`] or [`crate::RdmaCm::ud_reject`].
    UdRequest {
        /// The id of the request.
        id: CmId,
        /// The requester's address.
        remote_ip: [u8; 4],
        /// Its private data after the rdma_cm header.
        private_data: Vec<u8>,
    },
    /// Our [`crate::RdmaCm::ud_resolve`] was answered (`RDMA_CM_EVENT_ESTABLISHED` on a UD
    /// id, with `param.ud`): send to `qpn` with `qkey` through `ah`.
    UdResolved {
        /// The id.
        id: CmId,
        /// The service's UD QP.
        qpn: u32,
        /// Its Q_Key.
        qkey: u32,
        /// An address handle toward the service's host.
        ah: mlx5::AddressHandle,
        /// The SIDR_REP's private data.
        private_data: Vec<u8>,
    },
}

/// Why a QP move the CM asked for failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveError {
    /// The driver refused it.
    Verbs(mlx5::Error),
    /// No id of ours owns this QP number.
    NoQp(u32),
    /// The peer's MAC is not in the neighbour table (its IPv4 address).
    NoNeighbour([u8; 4]),
    /// A path MTU other than 256..4096 (`enum ib_mtu` 1..=5).
    PathMtu(u8),
}

/// Why a call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmError {
    /// The driver failed (creating the GSI QP, a connection's QP, an address handle).
    Verbs(mlx5::Error),
    /// The CM state machine refused the call.
    Cm(CallError<MoveError>),
    /// No such id.
    NoSuchId,
    /// The id is not in a state that allows the call.
    WrongState,
    /// The id has no QP (accept and connect need one).
    NoQp,
    /// A backlog of 0 or above [`CmConfig::backlog_max`] (or [`BACKLOG_MAX`]).
    Backlog(usize),
    /// The peer's address did not resolve (no ARP reply before the deadline).
    AddressUnresolved([u8; 4]),
    /// Private data longer than the message carries (the most it carries).
    PrivateData(usize),
}

impl From<mlx5::Error> for CmError {
    fn from(e: mlx5::Error) -> Self {
        CmError::Verbs(e)
    }
}

impl From<CallError<MoveError>> for CmError {
    fn from(e: CallError<MoveError>) -> Self {
        CmError::Cm(e)
    }
}

/// The IP neighbour table rdma_cm resolves addresses with (Linux `rdma_resolve_ip` asks the
/// kernel's neighbour table and sends an ARP request when it has no entry).
pub trait Neighbours {
    /// The MAC to send to for `ip` now, if known.
    fn lookup(&mut self, ip: [u8; 4]) -> Option<[u8; 6]>;
    /// Asks for `ip`'s MAC (one ARP request); the answer shows in a later
    /// [`Neighbours::lookup`].
    fn solicit(&mut self, ip: [u8; 4]);
}

/// The IP stack's table: `lookup` is [`net::Stack::next_hop_mac`], `solicit` is
/// [`net::Stack::solicit`]. The stack learns answers only in its own poll: poll it in the
/// same loop as [`crate::RdmaCm::poll`].
impl<N: net::Nic, C: net::Clock> Neighbours for net::Stack<N, C> {
    fn lookup(&mut self, ip: [u8; 4]) -> Option<[u8; 6]> {
        self.next_hop_mac(ip.into())
    }
    fn solicit(&mut self, ip: [u8; 4]) {
        net::Stack::solicit(self, ip.into())
    }
}
