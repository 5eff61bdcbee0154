//! librdmacm's API on the mlx5 driver: connections the way Linux makes them, over QP 1.
//!
//! [`RdmaCm`] owns the GSI QP (QP 1, `gsi`), runs the CM state machine of the `rdma-cm`
//! crate on the MADs it receives (both roles: REQ/REP/RTU, REJ, MRA, DREQ/DREP, TIMEWAIT,
//! SIDR), moves each id's RC QP through INIT, RTR and RTS with what the exchange settled,
//! and resolves peers' MACs through the IP stack's neighbour table ([`Neighbours`], ARP).
//! Its calls follow librdmacm's (rdma-core `librdmacm/cma.c`): [`RdmaCm::listen`],
//! [`RdmaCm::create_qp`], [`RdmaCm::accept`], [`RdmaCm::reject`], [`RdmaCm::connect`]
//! (`rdma_resolve_addr` + `rdma_resolve_route` + `rdma_connect`), [`RdmaCm::disconnect`],
//! [`RdmaCm::destroy_id`]; UD services: listen on [`rdma_cm::rdma_cm::PortSpace::Udp`],
//! [`RdmaCm::ud_accept`], [`RdmaCm::ud_resolve`]. Events come from [`RdmaCm::poll`]
//! (`rdma_get_cm_event`), which never waits: call it in the program's loop with the time in
//! nanoseconds, and poll the IP stack in the same loop.
//!
//! Every wait has a deadline: address resolution ([`CmConfig::resolve_timeout_ns`]), REQ,
//! REP and DREQ retries and TIMEWAIT (the CM's timers, rdma_cm's values: 20 → ~4 s per try,
//! 15 tries), MADs waiting for a MAC.
//!
//! Where it differs from librdmacm: the calls that send (accept, reject, disconnect,
//! destroy_id, connect) take the neighbour table, since a MAD or a QP's path needs the peer's
//! MAC; `connect` creates the id's QP itself ([`NewQp`]); QPs go to INIT when created, as
//! librdmacm's `rdma_create_qp` moves them, so receives can be posted at once. Limits: IPv4
//! only (rdma_cm headers of IPv6 are rejected), port 1, one CM per HCA (one GSI QP), no
//! alternate paths (LAP/APR); the device's communication-established event is not read
//! here: an application that sees data on an accepted QP before ESTABLISHED says so with
//! [`RdmaCm::notify_established`] (`rdma_notify`), else the REP's retries bring the RTU
//! again; REQs and REPs carry End-to-End Flow Control 0.
//!
//! Layers: `types` (the API's types, the neighbour table), `arp` (waiting for a MAC), `gsi`
//! (QP 1's MADs in and out), `id` (an id's record), `link` (what the CM drives: MADs and QP
//! moves), `service` (the ids and the calls every id shares), `active` (connect, address
//! resolution), `ud` (SIDR).
//!
//! ```no_run
//! use mlx5::hal::Hal;
//! use rdmacm::{CmConfig, ConnParam, Event, Neighbours, QpInit, RdmaCm};
//! use rdma_cm::rdma_cm::PortSpace;
//!
//! /// A server that accepts every connection on port 7174 (rping's) and echoes nothing.
//! fn serve<H: Hal>(
//!     ctx: &mlx5::Context<H>,
//!     nb: &mut dyn Neighbours,
//!     now_ns: impl Fn() -> u64,
//! ) -> Result<(), rdmacm::CmError> {
//!     let pd = ctx.alloc_pd()?;
//!     let cq = ctx.create_cq(64)?;
//!     let sgid = ctx.add_ipv4_gid([10, 0, 0, 1])? as u8;
//!     let mut cm = RdmaCm::new(ctx, &pd, &CmConfig::new([10, 0, 0, 1], sgid))?;
//!     cm.listen(PortSpace::Tcp, 7174, 8)?;
//!     loop {
//!         // (poll the IP stack here too)
//!         match cm.poll(now_ns(), nb) {
//!             Some(Event::ConnectRequest { id, .. }) => {
//!                 let init = QpInit { caps: mlx5::QpCaps::default(), access: mlx5::mr::Access::ALL };
//!                 cm.create_qp(id, &pd, &cq, &cq, &init)?;
//!                 // post receives on cm.qp(id) here
//!                 cm.accept(now_ns(), id, &ConnParam::default(), nb)?;
//!             }
//!             Some(Event::Established { id, .. }) => { /* cm.qp(id) carries data */ let _ = id; }
//!             Some(Event::Disconnected { id }) => cm.destroy_id(now_ns(), id, nb)?,
//!             _ => {}
//!         }
//!     }
//! }
//! ```

#![no_std]
#![deny(missing_docs)]

extern crate alloc;

mod active;
mod arp;
mod gsi;
mod id;
mod link;
mod service;
mod types;
mod ud;

pub use active::NewQp;
pub use gsi::{GsiCounters, RECV_BYTES};
pub use service::{RdmaCm, MAX_CONNS, POLL_BUDGET};
pub use types::{
    CmConfig, CmError, CmId, ConnParam, Event, MoveError, Neighbours, QpInit,
    CONNECT_PRIVATE_DATA_MAX,
};

/// Re-exported: the port spaces of [`RdmaCm::listen`] and [`RdmaCm::connect`].
pub use rdma_cm::rdma_cm::PortSpace;
