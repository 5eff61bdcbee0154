//! TCP: listeners, connections, and the blocking calls on them.
//!
//! A listener is a backlog of smoltcp sockets listening on one port (smoltcp hands an
//! incoming SYN to the first socket in the Listen state that takes it, smoltcp
//! `src/socket/tcp.rs` `Socket::accepts`); accepting takes a socket whose handshake is done
//! and puts a fresh listening one in its place.

use alloc::vec;
use alloc::vec::Vec;
use core::net::Ipv4Addr;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp::{self, State};
use smoltcp::wire::{IpAddress, IpEndpoint};

use crate::error::{NetError, Op};
use crate::nic::Nic;
use crate::stack::Stack;
use crate::Clock;

/// How long a closed connection's socket stays to end the FIN handshake (answer a
/// retransmitted FIN, receive the peer's) before the stack lets go of it, in microseconds.
pub const LINGER_US: u64 = 2_000_000;

/// A port the stack accepts connections on (from [`Stack::tcp_listen`]).
#[derive(Debug)]
pub struct TcpListener {
    stack: u32,
    port: u16,
    backlog: Vec<SocketHandle>,
}

impl TcpListener {
    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// One TCP connection (from [`Stack::tcp_accept`] or [`Stack::tcp_connect`]).
#[derive(Debug)]
pub struct TcpConn {
    stack: u32,
    handle: SocketHandle,
}

/// The error of a connection that can no longer carry data: `Reset` once smoltcp closed it
/// (a RST from the peer, or aborted), `Closed` while it is shutting down.
fn broken(state: State) -> NetError {
    if state == State::Closed {
        NetError::Reset
    } else {
        NetError::Closed
    }
}

impl<N: Nic, C: Clock> Stack<N, C> {
    fn tcp_socket(&self) -> tcp::Socket<'static> {
        let rx = tcp::SocketBuffer::new(vec![0; self.cfg.tcp_rx_buffer]);
        let tx = tcp::SocketBuffer::new(vec![0; self.cfg.tcp_tx_buffer]);
        let mut s = tcp::Socket::new(rx, tx);
        // The calls below send whole messages and wait for them to be acknowledged: Nagle's
        // algorithm would only hold back their last segment.
        s.set_nagle_enabled(false);
        s
    }

    fn listening_socket(&mut self, port: u16) -> SocketHandle {
        let mut s = self.tcp_socket();
        // A fresh socket and a non-zero port: listen cannot fail.
        let _ = s.listen(port);
        self.sockets.add(s)
    }

    fn tcp(&mut self, h: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(h)
    }

    /// Listens on `port`, with [`crate::StackConfig::tcp_backlog`] connections ready to be
    /// accepted at once. [`NetError::PortInUse`] if a TCP socket of ours holds the port.
    pub fn tcp_listen(&mut self, port: u16) -> Result<TcpListener, NetError> {
        if port == 0 {
            return Err(NetError::BadPort);
        }
        if self.port_in_use(port, true) {
            return Err(NetError::PortInUse { port });
        }
        let n = self.cfg.tcp_backlog.max(1);
        let backlog = (0..n).map(|_| self.listening_socket(port)).collect();
        Ok(TcpListener {
            stack: self.id,
            port,
            backlog,
        })
    }

    /// Waits for a connection to `l`'s port whose handshake is done.
    pub fn tcp_accept(&mut self, l: &mut TcpListener, deadline: u64) -> Result<TcpConn, NetError> {
        self.own(l.stack)?;
        self.wait(deadline, Op::Accept, |s| {
            for i in 0..l.backlog.len() {
                match s.tcp(l.backlog[i]).state() {
                    State::Listen | State::SynReceived => {}
                    // Reset during the handshake: listen again.
                    State::Closed => {
                        let _ = s.tcp(l.backlog[i]).listen(l.port);
                    }
                    _ => {
                        let fresh = s.listening_socket(l.port);
                        let handle = core::mem::replace(&mut l.backlog[i], fresh);
                        return Some(Ok(TcpConn {
                            stack: s.id,
                            handle,
                        }));
                    }
                }
            }
            None
        })
    }

    /// Stops listening: connections not yet accepted are reset.
    pub fn tcp_unlisten(&mut self, l: TcpListener) -> Result<(), NetError> {
        self.own(l.stack)?;
        for h in &l.backlog {
            self.tcp(*h).abort();
        }
        self.poll();
        for h in l.backlog {
            self.sockets.remove(h);
        }
        Ok(())
    }

    /// Connects to `ip:port` from a port of the dynamic range. [`NetError::Refused`] if the
    /// peer answers with a RST, [`NetError::ArpTimeout`] if the next hop never answered ARP,
    /// [`NetError::Timeout`] of [`Op::Connect`] if it did but the handshake did not end.
    pub fn tcp_connect(
        &mut self,
        ip: Ipv4Addr,
        port: u16,
        deadline: u64,
    ) -> Result<TcpConn, NetError> {
        if port == 0 {
            return Err(NetError::BadPort);
        }
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return Err(NetError::NoRoute { ip });
        }
        let hop = self.next_hop(ip)?;
        let local = self.ephemeral_port()?;
        let mut sock = self.tcp_socket();
        let remote = IpEndpoint::new(IpAddress::Ipv4(ip), port);
        if sock.connect(self.iface.context(), remote, local).is_err() {
            // Only an unspecified address or port is refused, both excluded above.
            return Err(NetError::NoRoute { ip });
        }
        let h = self.sockets.add(sock);
        let r = self.wait(deadline, Op::Connect, |s| match s.tcp(h).state() {
            State::SynSent | State::SynReceived => None,
            State::Closed => Some(Err(NetError::Refused)),
            _ => Some(Ok(())),
        });
        match r {
            Ok(()) => Ok(TcpConn {
                stack: self.id,
                handle: h,
            }),
            Err(e) => {
                self.tcp(h).abort();
                self.poll();
                self.sockets.remove(h);
                match e {
                    NetError::Timeout(_) if self.neighbour(hop).is_none() => {
                        Err(NetError::ArpTimeout { ip: hop })
                    }
                    e => Err(e),
                }
            }
        }
    }

    /// The peer's address and port.
    pub fn tcp_remote(&mut self, c: &TcpConn) -> Result<(Ipv4Addr, u16), NetError> {
        self.own(c.stack)?;
        let state = self.tcp(c.handle).state();
        match self.tcp(c.handle).remote_endpoint() {
            Some(IpEndpoint {
                addr: IpAddress::Ipv4(a),
                port,
            }) => Ok((a, port)),
            _ => Err(broken(state)),
        }
    }

    /// Queues what of `data` fits in the connection's send buffer now: the count of bytes
    /// taken (0 when the buffer is full), which the stack sends and retransmits as needed
    /// from then on. Never waits: it polls the stack once, so what was queued starts leaving.
    /// [`NetError::Reset`] / [`NetError::Closed`] if the connection can no longer send.
    /// [`Stack::tcp_send_all`] with empty data waits until everything queued is acknowledged.
    pub fn tcp_send(&mut self, c: &TcpConn, data: &[u8]) -> Result<usize, NetError> {
        self.own(c.stack)?;
        let n = self.send_step(c.handle, data)?;
        self.poll();
        Ok(n)
    }

    /// Queues what of `data` fits now: the count, or why the connection can no longer send.
    fn send_step(&mut self, h: SocketHandle, data: &[u8]) -> Result<usize, NetError> {
        let sock = self.tcp(h);
        if !sock.may_send() {
            return Err(broken(sock.state()));
        }
        if data.is_empty() {
            return Ok(0);
        }
        sock.send_slice(data).map_err(|_| broken(sock.state()))
    }

    /// Queues all of `data` in the connection's send buffer, waiting for room as the peer
    /// acknowledges earlier bytes, and returns once the last byte is queued (not yet
    /// acknowledged: [`Stack::tcp_send_all`] waits for that). [`NetError::Reset`] /
    /// [`NetError::Closed`] if the connection can no longer send.
    pub fn tcp_queue_all(
        &mut self,
        c: &TcpConn,
        data: &[u8],
        deadline: u64,
    ) -> Result<(), NetError> {
        self.own(c.stack)?;
        let h = c.handle;
        let mut sent = self.send_step(h, data)?;
        if sent == data.len() {
            self.poll();
            return Ok(());
        }
        self.wait(deadline, Op::Send, |s| {
            match s.send_step(h, &data[sent..]) {
                Ok(n) => {
                    sent += n;
                    (sent == data.len()).then_some(Ok(()))
                }
                Err(e) => Some(Err(e)),
            }
        })?;
        self.poll();
        Ok(())
    }

    /// Sends all of `data` and waits until the peer acknowledged all of it (and everything
    /// queued before it). [`NetError::Reset`] / [`NetError::Closed`] if the connection can no
    /// longer send.
    pub fn tcp_send_all(
        &mut self,
        c: &TcpConn,
        data: &[u8],
        deadline: u64,
    ) -> Result<(), NetError> {
        self.own(c.stack)?;
        let h = c.handle;
        let mut sent = 0;
        self.wait(deadline, Op::Send, |s| {
            let sock = s.tcp(h);
            if sent < data.len() {
                if !sock.may_send() {
                    return Some(Err(broken(sock.state())));
                }
                match sock.send_slice(&data[sent..]) {
                    Ok(n) => sent += n,
                    Err(tcp::SendError::InvalidState) => return Some(Err(broken(sock.state()))),
                }
            }
            if sock.state() == State::Closed {
                return Some(Err(NetError::Reset));
            }
            (sent == data.len() && sock.send_queue() == 0).then_some(Ok(()))
        })
    }

    /// One step of a receive: copies what has arrived into `buf`; `Some(Ok(0))` once the peer
    /// closed its side and everything before was read; `None` if nothing is there yet.
    fn recv_step(&mut self, h: SocketHandle, buf: &mut [u8]) -> Option<Result<usize, NetError>> {
        let sock = self.tcp(h);
        match sock.recv_slice(buf) {
            Ok(0) if sock.may_recv() => None,
            Ok(n) => Some(Ok(n)),
            Err(tcp::RecvError::Finished) => Some(Ok(0)),
            Err(tcp::RecvError::InvalidState) => match sock.state() {
                State::Closed => Some(Err(NetError::Reset)),
                _ => Some(Ok(0)),
            },
        }
    }

    /// Waits for data and copies what has arrived (at most `buf.len()` bytes) into `buf`:
    /// the count, or 0 once the peer closed its side and all it sent was read (or if `buf` is
    /// empty). [`NetError::Reset`] if the connection was reset.
    pub fn tcp_recv(
        &mut self,
        c: &TcpConn,
        buf: &mut [u8],
        deadline: u64,
    ) -> Result<usize, NetError> {
        self.own(c.stack)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let h = c.handle;
        self.wait(deadline, Op::Recv, |s| s.recv_step(h, buf))
    }

    /// Fills all of `buf`. [`NetError::Closed`] if the peer closed its side first (what came
    /// is in `buf`, the rest untouched), [`NetError::Reset`] if the connection was reset.
    pub fn tcp_recv_exact(
        &mut self,
        c: &TcpConn,
        buf: &mut [u8],
        deadline: u64,
    ) -> Result<(), NetError> {
        self.own(c.stack)?;
        let h = c.handle;
        let mut got = 0;
        self.wait(deadline, Op::Recv, |s| loop {
            if got == buf.len() {
                return Some(Ok(()));
            }
            match s.recv_step(h, &mut buf[got..])? {
                Ok(0) => return Some(Err(NetError::Closed)),
                Ok(n) => got += n,
                Err(e) => return Some(Err(e)),
            }
        })
    }

    /// Closes our side: waits until the peer acknowledged all data sent and our FIN, then
    /// leaves the socket to end the handshake for [`LINGER_US`]. On timeout the connection
    /// is aborted (a RST).
    pub fn tcp_close(&mut self, c: TcpConn, deadline: u64) -> Result<(), NetError> {
        self.own(c.stack)?;
        let h = c.handle;
        self.tcp(h).close();
        let r = self.wait(deadline, Op::Close, |s| match s.tcp(h).state() {
            State::FinWait2 | State::TimeWait | State::Closed => Some(Ok(())),
            _ => None,
        });
        match r {
            // Both sides closed: nothing is left to end.
            Ok(()) if self.tcp(h).state() == State::Closed => {
                self.sockets.remove(h);
                Ok(())
            }
            Ok(()) => {
                let until = self.clock.now_us().saturating_add(LINGER_US);
                self.lingering.push((h, until));
                Ok(())
            }
            Err(e) => {
                self.abort_and_remove(h);
                Err(e)
            }
        }
    }

    /// Aborts the connection: sends a RST and lets go of the socket at once.
    pub fn tcp_abort(&mut self, c: TcpConn) -> Result<(), NetError> {
        self.own(c.stack)?;
        self.abort_and_remove(c.handle);
        Ok(())
    }

    fn abort_and_remove(&mut self, h: SocketHandle) {
        self.tcp(h).abort();
        // The RST leaves on this poll, before the socket goes.
        self.poll();
        self.sockets.remove(h);
    }

    /// Lets go of the closed sockets whose handshake ended or whose time is up.
    pub(crate) fn reap(&mut self, now: u64) {
        let mut i = 0;
        while i < self.lingering.len() {
            let (h, until) = self.lingering[i];
            if self.tcp(h).state() == State::Closed || now >= until {
                self.sockets.remove(h);
                self.lingering.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }
}
