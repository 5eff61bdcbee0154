//! The exchange's channel: perftest's `perftest_comm`, a TCP connection
//! (src/perftest_communication.c `ethernet_*`).

use super::*;

/// Why the exchange failed.
#[derive(Debug)]
pub(crate) enum LinkError {
    /// On the TCP connection.
    Tcp(OobError),
}

impl core::fmt::Display for LinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LinkError::Tcp(e) => write!(f, "{e}"),
        }
    }
}

/// The channel of `ctx_xchg_data` and `ctx_hand_shake`.
pub(crate) enum Link {
    /// The TCP connection of the exchange, and the IP stack under it.
    Tcp(Oob),
}

impl Link {
    /// Sends `b` (one `write`).
    pub(crate) fn send(&mut self, b: &[u8]) -> Result<(), LinkError> {
        match self {
            Link::Tcp(l) => l.send(b).map_err(LinkError::Tcp),
        }
    }

    /// Receives the peer's next `n` bytes (one `read` of `n`).
    pub(crate) fn recv(&mut self, n: usize) -> Result<Vec<u8>, LinkError> {
        match self {
            Link::Tcp(l) => l.recv(n).map_err(LinkError::Tcp),
        }
    }

    /// Runs the IP stack if it is due ([`Oob::tick`]): for the loops that wait on the HCA.
    #[inline]
    pub(crate) fn tick(&mut self) {
        match self {
            Link::Tcp(l) => l.tick(),
        }
    }

    /// The peer's MAC for its GID ([`Oob::peer_mac`]).
    pub(crate) fn peer_mac(&mut self, gid: &[u8; 16]) -> Result<[u8; 6], LinkError> {
        match self {
            Link::Tcp(l) => l.peer_mac(gid).map_err(LinkError::Tcp),
        }
    }
}
