//! The exchange's channel: perftest's `perftest_comm`, a TCP connection
//! (src/perftest_communication.c `ethernet_*`) or with `-R` an rdma_cm connection (`rdma_*`,
//! [`CmLink`]).

use super::*;

/// Why the exchange failed.
#[derive(Debug)]
pub(crate) enum LinkError {
    /// On the TCP connection.
    Tcp(OobError),
    /// On the rdma_cm connection.
    Cm(CmLinkError),
}

impl core::fmt::Display for LinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LinkError::Tcp(e) => write!(f, "{e}"),
            LinkError::Cm(e) => write!(f, "{e}"),
        }
    }
}

/// The channel of `ctx_xchg_data` and `ctx_hand_shake`.
pub(crate) enum Link {
    /// The TCP connection of the exchange, and the IP stack under it.
    Tcp(alloc::boxed::Box<Oob>),
    /// The rdma_cm connection of `-R`, and the CM under both connections.
    Cm(alloc::boxed::Box<CmLink>),
}

impl Link {
    /// Sends `b` (one `write`).
    pub(crate) fn send(&mut self, b: &[u8]) -> Result<(), LinkError> {
        match self {
            Link::Tcp(l) => l.send(b).map_err(LinkError::Tcp),
            Link::Cm(l) => l.send(b).map_err(LinkError::Cm),
        }
    }

    /// Receives the peer's next `n` bytes (one `read` of `n`).
    pub(crate) fn recv(&mut self, n: usize) -> Result<Vec<u8>, LinkError> {
        match self {
            Link::Tcp(l) => l.recv(n).map_err(LinkError::Tcp),
            Link::Cm(l) => l.recv(n).map_err(LinkError::Cm),
        }
    }

    /// Runs the IP stack if it is due ([`Oob::tick`]): for the loops that wait on the HCA.
    #[inline]
    pub(crate) fn tick(&mut self) {
        match self {
            Link::Tcp(l) => l.tick(),
            Link::Cm(l) => l.tick(),
        }
    }

    /// The peer's MAC for its GID ([`Oob::peer_mac`]); with `-R` the CM resolved it.
    pub(crate) fn peer_mac(&mut self, gid: &[u8; 16]) -> Result<[u8; 6], LinkError> {
        match self {
            Link::Tcp(l) => l.peer_mac(gid).map_err(LinkError::Tcp),
            Link::Cm(_) => Err(LinkError::Cm(CmLinkError::Timeout("MAC outside the CM"))),
        }
    }
}
