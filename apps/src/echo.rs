//! The TCP echo service of `netd` (RFC 862 on TCP: every byte received is sent back), on a
//! [`Node`](crate::stack::Node), serving any number of connections at once, a turn at a time.

use alloc::vec;
use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::time::Duration;

use net::{Clock, NetError, Nic, TcpConn, TcpListener};

use crate::stack::Node;

/// RFC 862: "A server listens for TCP connections on TCP port 7."
pub const ECHO_PORT: u16 = 7;
/// The most one echo takes and sends back at once: each echo waits for its acknowledgement
/// (`net::Stack::tcp_send_all`), so larger pieces take fewer round trips.
pub const ECHO_CHUNK: usize = 32 * 1024;
/// How long one echo may wait for the peer to acknowledge it, and a close for its FIN.
pub const SEND_WAIT: Duration = Duration::from_secs(10);

/// What happened to a connection in a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Connection `id` from `from` was accepted.
    Accepted {
        /// Connections are numbered from 1 in the order they came.
        id: u64,
        /// The peer's address and port.
        from: (Ipv4Addr, u16),
    },
    /// Connection `id` ended after `bytes` were echoed: closed by the peer (or by the end of
    /// the service) when `err` is None, else reset, or an echo not acknowledged in time.
    Ended {
        /// Its number.
        id: u64,
        /// The peer's address and port.
        from: (Ipv4Addr, u16),
        /// The bytes echoed.
        bytes: u64,
        /// Why it ended, if not by a close.
        err: Option<NetError>,
    },
}

/// One open connection.
struct Conn {
    conn: TcpConn,
    id: u64,
    from: (Ipv4Addr, u16),
    /// Bytes echoed (queued for sending) so far.
    bytes: u64,
    /// Received bytes the send buffer had no room for yet; nothing more is read from the
    /// connection until they are queued.
    unsent: Vec<u8>,
}

/// The echo service on one port.
pub struct EchoServer {
    listener: Option<TcpListener>,
    open: Vec<Conn>,
    accepted: u64,
    echoed: u64,
    buf: Vec<u8>,
}

impl EchoServer {
    /// Listens on `port` of `node`.
    pub fn listen<N: Nic, C: Clock>(node: &mut Node<N, C>, port: u16) -> Result<Self, NetError> {
        Ok(EchoServer {
            listener: Some(node.stack().tcp_listen(port)?),
            open: Vec::new(),
            accepted: 0,
            echoed: 0,
            buf: vec![0; ECHO_CHUNK],
        })
    }

    /// Connections accepted so far, and the bytes echoed on those that ended.
    pub fn totals(&self) -> (u64, u64) {
        (self.accepted, self.echoed)
    }

    /// One turn: takes a new connection if one is there, echoes what came on each open one,
    /// ends those the peer closed or that failed. Never waits for the network (each call of
    /// the stack has the deadline "now"; echoes are queued, not waited for). `report` hears
    /// what happened.
    pub fn turn<N: Nic, C: Clock>(&mut self, node: &mut Node<N, C>, mut report: impl FnMut(Event)) {
        let s = node.stack();
        let now = s.now_us();
        if let Some(l) = self.listener.as_mut() {
            if let Ok(conn) = s.tcp_accept(l, now) {
                self.accepted += 1;
                let from = s.tcp_remote(&conn).unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
                let id = self.accepted;
                report(Event::Accepted { id, from });
                self.open.push(Conn {
                    conn,
                    id,
                    from,
                    bytes: 0,
                    unsent: Vec::new(),
                });
            }
        }
        let mut i = 0;
        while i < self.open.len() {
            match echo_some(node, &mut self.open[i], &mut self.buf) {
                Turn::Open => i += 1,
                Turn::Ended(err) => {
                    let c = self.open.swap_remove(i);
                    report(self.end(node, c, err));
                }
            }
        }
    }

    /// Ends the service: closes what is open and stops listening. Returns the connections
    /// accepted and the bytes echoed on all of them.
    pub fn close<N: Nic, C: Clock>(
        mut self,
        node: &mut Node<N, C>,
        mut report: impl FnMut(Event),
    ) -> (u64, u64) {
        for c in core::mem::take(&mut self.open) {
            let e = self.end(node, c, None);
            report(e);
        }
        if let Some(l) = self.listener.take() {
            let _ = node.stack().tcp_unlisten(l);
        }
        self.totals()
    }

    /// Ends `c`: our FIN (acknowledged or not) after a close, a RST after a failure.
    fn end<N: Nic, C: Clock>(
        &mut self,
        node: &mut Node<N, C>,
        c: Conn,
        err: Option<NetError>,
    ) -> Event {
        self.echoed += c.bytes;
        let (id, from, bytes) = (c.id, c.from, c.bytes);
        let d = node.deadline(SEND_WAIT);
        let _ = match err {
            None => node.stack().tcp_close(c.conn, d),
            Some(_) => node.stack().tcp_abort(c.conn),
        };
        Event::Ended {
            id,
            from,
            bytes,
            err,
        }
    }
}

/// What a turn left a connection as.
enum Turn {
    /// Still open.
    Open,
    /// Closed by the peer, everything it sent echoed (None), or failed.
    Ended(Option<NetError>),
}

/// Echoes what has come on `c`: first queues what an earlier turn could not, then, once
/// nothing is left over, reads and queues what came since, keeping what does not fit.
fn echo_some<N: Nic, C: Clock>(node: &mut Node<N, C>, c: &mut Conn, buf: &mut [u8]) -> Turn {
    let s = node.stack();
    if !c.unsent.is_empty() {
        match s.tcp_send(&c.conn, &c.unsent) {
            Ok(n) => {
                c.unsent.drain(..n);
                c.bytes += n as u64;
            }
            Err(err) => return Turn::Ended(Some(err)),
        }
        if !c.unsent.is_empty() {
            return Turn::Open;
        }
    }
    let now = s.now_us();
    match s.tcp_recv(&c.conn, buf, now) {
        Ok(0) => Turn::Ended(None),
        Ok(k) => match s.tcp_send(&c.conn, &buf[..k]) {
            Ok(n) => {
                c.bytes += n as u64;
                c.unsent.extend_from_slice(&buf[n..k]);
                Turn::Open
            }
            Err(err) => Turn::Ended(Some(err)),
        },
        Err(NetError::Timeout(_)) => Turn::Open,
        Err(err) => Turn::Ended(Some(err)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use std::vec::Vec;

    use super::*;
    use crate::testnet::nodes;

    /// Every byte value, `n` times over.
    fn pattern(n: usize) -> Vec<u8> {
        (0..n * 256).map(|i| i as u8).collect()
    }

    #[test]
    fn two_connections_at_once_get_every_byte_back_and_each_is_reported() {
        let (mut a, mut b) = nodes("ip=10.0.0.2/24", "ip=10.0.0.1/24");
        let done = AtomicBool::new(false);
        let (events, totals, echoed) = std::thread::scope(|sc| {
            let server = sc.spawn(|| {
                let mut echo = EchoServer::listen(&mut a, ECHO_PORT).unwrap();
                let mut events = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    echo.turn(&mut a, |e| events.push(e));
                }
                let totals = echo.close(&mut a, |e| events.push(e));
                (events, totals)
            });
            let s = b.stack();
            let d = |s: &mut net::Stack<_, _>| s.now_us() + 10_000_000;
            let ip = Ipv4Addr::new(10, 0, 0, 2);
            let dl = d(s);
            let c1 = s.tcp_connect(ip, ECHO_PORT, dl).unwrap();
            let dl = d(s);
            let c2 = s.tcp_connect(ip, ECHO_PORT, dl).unwrap();
            let data = pattern(64);
            let mut echoed = [vec![0u8; data.len()], vec![0u8; 1000]];
            // Interleaved: a piece on one, a piece on the other.
            for (k, piece) in data.chunks(1000).enumerate() {
                let dl = d(s);
                s.tcp_send_all(&c1, piece, dl).unwrap();
                s.tcp_recv_exact(&c1, &mut echoed[0][k * 1000..k * 1000 + piece.len()], dl)
                    .unwrap();
                if k == 3 {
                    s.tcp_send_all(&c2, &data[..1000], dl).unwrap();
                    s.tcp_recv_exact(&c2, &mut echoed[1], dl).unwrap();
                }
            }
            let dl = d(s);
            s.tcp_close(c2, dl).unwrap();
            s.tcp_close(c1, dl).unwrap();
            // Until the server has seen both closes.
            let end = b.deadline(Duration::from_millis(300));
            while b.stack().now_us() < end {
                b.poll();
            }
            done.store(true, Ordering::SeqCst);
            let (events, totals) = server.join().unwrap();
            (events, totals, echoed)
        });
        let data = pattern(64);
        assert!(echoed[0] == data, "connection 1's echo differs");
        assert_eq!(echoed[1], data[..1000]);
        assert_eq!(totals, (2, data.len() as u64 + 1000));
        let accepted: Vec<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Accepted { id, from } => {
                    assert_eq!(from.0, Ipv4Addr::new(10, 0, 0, 1));
                    Some(*id)
                }
                _ => None,
            })
            .collect();
        assert_eq!(accepted, [1, 2]);
        let mut ended: Vec<(u64, u64, Option<NetError>)> = events
            .iter()
            .filter_map(|e| match *e {
                Event::Ended { id, bytes, err, .. } => Some((id, bytes, err)),
                _ => None,
            })
            .collect();
        ended.sort_by_key(|e| e.0);
        assert_eq!(ended, [(1, data.len() as u64, None), (2, 1000, None)]);
    }

    /// A client that sends without reading fills the server's send buffer: the server keeps
    /// what it could not queue and reads no more until it is queued, and every byte comes
    /// back in order once the client reads.
    #[test]
    fn a_client_that_does_not_read_holds_the_echo_back_and_loses_nothing() {
        let (mut a, mut b) = nodes("ip=10.0.0.2/24", "ip=10.0.0.1/24");
        let done = AtomicBool::new(false);
        // Eight times a 64 KiB send or receive buffer.
        let data = pattern(2048);
        let (most_unsent, totals, echoed) = std::thread::scope(|sc| {
            let server = sc.spawn(|| {
                let mut echo = EchoServer::listen(&mut a, ECHO_PORT).unwrap();
                let mut most_unsent = 0;
                while !done.load(Ordering::SeqCst) {
                    echo.turn(&mut a, |_| {});
                    let unsent = echo.open.iter().map(|c| c.unsent.len()).max();
                    most_unsent = most_unsent.max(unsent.unwrap_or(0));
                }
                (most_unsent, echo.close(&mut a, |_| {}))
            });
            let dl = b.deadline(Duration::from_secs(10));
            let s = b.stack();
            let c = s
                .tcp_connect(Ipv4Addr::new(10, 0, 0, 2), ECHO_PORT, dl)
                .unwrap();
            // Only sending, until nothing more fits anywhere for 300 ms.
            let mut sent = 0;
            let mut moved = s.now_us();
            while sent < data.len() && s.now_us() < moved + 300_000 {
                let n = s.tcp_send(&c, &data[sent..]).unwrap();
                if n > 0 {
                    moved = s.now_us();
                }
                sent += n;
            }
            assert!(sent < data.len(), "everything fit without reading");
            // Then reading it all back, sending the rest as room comes.
            let mut echoed = Vec::new();
            let mut buf = vec![0u8; 4096];
            while echoed.len() < data.len() {
                assert!(s.now_us() < dl, "the echo stopped at {}", echoed.len());
                sent += s.tcp_send(&c, &data[sent..]).unwrap();
                let now = s.now_us();
                match s.tcp_recv(&c, &mut buf, now) {
                    Ok(0) => panic!("the server closed"),
                    Ok(k) => echoed.extend_from_slice(&buf[..k]),
                    Err(NetError::Timeout(_)) => {}
                    Err(e) => panic!("{e:?}"),
                }
            }
            let dl = b.deadline(Duration::from_secs(10));
            b.stack().tcp_close(c, dl).unwrap();
            done.store(true, Ordering::SeqCst);
            let (most_unsent, totals) = server.join().unwrap();
            (most_unsent, totals, echoed)
        });
        assert!(most_unsent > 0, "the server's send buffer never filled");
        assert!(echoed == data, "the echo differs");
        assert_eq!(totals, (1, data.len() as u64));
    }
}
