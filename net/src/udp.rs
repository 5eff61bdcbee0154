//! UDP: bound sockets, datagrams out and in.

use alloc::vec;
use core::net::Ipv4Addr;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::wire::{IpAddress, IpEndpoint};

use crate::error::{NetError, Op};
use crate::nic::Nic;
use crate::stack::Stack;
use crate::Clock;

/// The headers under a UDP payload in one frame: Ethernet, IPv4 without options, UDP.
const HEADERS: usize = 14 + 20 + 8;

/// A bound UDP port (from [`Stack::udp_bind`]).
#[derive(Debug)]
pub struct UdpSocket {
    stack: u32,
    port: u16,
    handle: SocketHandle,
}

impl UdpSocket {
    /// The local port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// What [`Stack::udp_recv`] received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The payload's length, at the start of the caller's buffer.
    pub len: usize,
    /// The sender's address.
    pub from: Ipv4Addr,
    /// The sender's port.
    pub port: u16,
}

impl<N: Nic, C: Clock> Stack<N, C> {
    fn udp(&mut self, h: SocketHandle) -> &mut udp::Socket<'static> {
        self.sockets.get_mut::<udp::Socket>(h)
    }

    /// Binds `port` (0: a free port of the dynamic range). [`NetError::PortInUse`] if a UDP
    /// socket of ours holds it.
    pub fn udp_bind(&mut self, port: u16) -> Result<UdpSocket, NetError> {
        let port = match port {
            0 => self.ephemeral_port()?,
            p if self.port_in_use(p, false) => return Err(NetError::PortInUse { port: p }),
            p => p,
        };
        let (n, bytes) = (self.cfg.udp_packets.max(1), self.cfg.udp_buffer);
        let buf = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; n], vec![0; bytes]);
        let mut sock = udp::Socket::new(buf(), buf());
        // A fresh socket and a non-zero port: bind cannot fail.
        let _ = sock.bind(port);
        Ok(UdpSocket {
            stack: self.id,
            port,
            handle: self.sockets.add(sock),
        })
    }

    /// The largest payload [`Stack::udp_send`] takes: one frame (no IP fragmentation) and
    /// the socket's buffer.
    pub fn udp_max_payload(&self) -> usize {
        (self.dev.nic().mtu() - HEADERS).min(self.cfg.udp_buffer)
    }

    /// Sends one datagram to `ip:port` and waits until it left (the next hop's MAC known, the
    /// frame handed to the NIC). [`NetError::TooLarge`] over [`Stack::udp_max_payload`],
    /// [`NetError::ArpTimeout`] if the next hop never answered ARP (the datagram is dropped).
    pub fn udp_send(
        &mut self,
        u: &UdpSocket,
        to: (Ipv4Addr, u16),
        data: &[u8],
        deadline: u64,
    ) -> Result<(), NetError> {
        self.own(u.stack)?;
        let (ip, port) = to;
        if port == 0 {
            return Err(NetError::BadPort);
        }
        let max = self.udp_max_payload();
        if data.len() > max {
            return Err(NetError::TooLarge {
                len: data.len(),
                max,
            });
        }
        if ip.is_unspecified() {
            return Err(NetError::NoRoute { ip });
        }
        let hop = if ip.is_broadcast() {
            ip
        } else {
            self.next_hop(ip)?
        };
        let h = u.handle;
        let remote = IpEndpoint::new(IpAddress::Ipv4(ip), port);
        let mut queued = false;
        let r = self.wait(deadline, Op::UdpSend, |s| {
            let sock = s.udp(h);
            if !queued {
                // Full: the earlier datagrams have not left yet; try again after a poll.
                queued = sock.send_slice(data, remote).is_ok();
            }
            (queued && sock.send_queue() == 0).then_some(Ok(()))
        });
        match r {
            Err(NetError::Timeout(_)) if queued => {
                // Do not leave it to go out later, unasked: reopen the socket empty.
                let sock = self.udp(h);
                sock.close();
                let _ = sock.bind(u.port);
                if !ip.is_broadcast() && self.neighbour(hop).is_none() {
                    return Err(NetError::ArpTimeout { ip: hop });
                }
                Err(NetError::Timeout(Op::UdpSend))
            }
            r => r,
        }
    }

    /// Waits for one datagram and copies it to the start of `buf`. [`NetError::Truncated`] if
    /// it was longer than `buf` (it is dropped).
    pub fn udp_recv(
        &mut self,
        u: &UdpSocket,
        buf: &mut [u8],
        deadline: u64,
    ) -> Result<Datagram, NetError> {
        self.own(u.stack)?;
        let h = u.handle;
        self.wait(deadline, Op::UdpRecv, |s| {
            let (payload, meta) = s.udp(h).recv().ok()?;
            let IpAddress::Ipv4(from) = meta.endpoint.addr;
            let port = meta.endpoint.port;
            let Some(dst) = buf.get_mut(..payload.len()) else {
                return Some(Err(NetError::Truncated {
                    len: payload.len(),
                    cap: buf.len(),
                }));
            };
            dst.copy_from_slice(payload);
            Some(Ok(Datagram {
                len: payload.len(),
                from,
                port,
            }))
        })
    }

    /// Closes the socket; datagrams not yet received are dropped.
    pub fn udp_close(&mut self, u: UdpSocket) -> Result<(), NetError> {
        self.own(u.stack)?;
        self.sockets.remove(u.handle);
        Ok(())
    }
}
