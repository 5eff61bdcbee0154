//! The errors of the stack.

use core::net::Ipv4Addr;

/// The blocking call that ran out of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// [`crate::Stack::tcp_accept`].
    Accept,
    /// [`crate::Stack::tcp_connect`] (the neighbour answered ARP, the peer not the SYN).
    Connect,
    /// [`crate::Stack::tcp_send_all`]: not all of the data was acknowledged.
    Send,
    /// [`crate::Stack::tcp_recv`] / [`crate::Stack::tcp_recv_exact`].
    Recv,
    /// [`crate::Stack::tcp_close`]: our FIN was not acknowledged.
    Close,
    /// [`crate::Stack::udp_send`]: the datagram did not leave.
    UdpSend,
    /// [`crate::Stack::udp_recv`].
    UdpRecv,
    /// [`crate::Stack::ping`]: no echo reply (the neighbour answered ARP).
    Ping,
}

/// Why [`crate::Stack::new`] refused a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The NIC's MAC is not a unicast address.
    Mac([u8; 6]),
    /// The prefix length is over 32.
    Prefix(u8),
    /// The address is not a unicast address.
    Address(Ipv4Addr),
    /// The gateway is not a unicast address inside the subnet.
    Gateway(Ipv4Addr),
    /// The NIC's MTU cannot carry an IPv4 packet of the minimum size every host takes
    /// (RFC 791: 576 bytes).
    Mtu(usize),
}

/// Why a call of the stack failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetError {
    /// The configuration given to [`crate::Stack::new`] is not usable.
    Config(ConfigError),
    /// The next hop (`ip`: the destination, or the gateway for one outside the subnet) did
    /// not answer ARP before the deadline.
    ArpTimeout {
        /// The address asked for.
        ip: Ipv4Addr,
    },
    /// The destination is outside the subnet and there is no gateway.
    NoRoute {
        /// The destination.
        ip: Ipv4Addr,
    },
    /// The deadline passed before the call was done.
    Timeout(Op),
    /// The peer refused the connection (a RST answered our SYN).
    Refused,
    /// The connection was reset (a RST from the peer, or the connection aborted).
    Reset,
    /// The peer closed its side before the data asked for arrived, or the connection is
    /// closed for sending.
    Closed,
    /// The port is already listened on / bound by this stack.
    PortInUse {
        /// The port.
        port: u16,
    },
    /// Port 0 where a port is needed.
    BadPort,
    /// Every port of the dynamic range is held by a socket of ours.
    NoFreePort,
    /// The payload does not fit in one packet or in the socket's buffer.
    TooLarge {
        /// Its length in bytes.
        len: usize,
        /// The most that fits.
        max: usize,
    },
    /// A received datagram was longer than the caller's buffer; it was dropped.
    Truncated {
        /// The datagram's length in bytes.
        len: usize,
        /// The buffer's length.
        cap: usize,
    },
    /// The handle was made by another stack.
    ForeignHandle,
}

impl From<ConfigError> for NetError {
    fn from(e: ConfigError) -> Self {
        NetError::Config(e)
    }
}
