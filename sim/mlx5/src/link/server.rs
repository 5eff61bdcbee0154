//! A listening stream link with QEMU's `server=on` behaviour.

use std::time::Instant;

use super::{
    LinkError, StreamAddr, StreamLink, StreamListener, Wait, MAX_FRAME_LEN, MAX_SEND_BACKLOG,
};

/// A listening stream link with QEMU `server=on` semantics: down until a peer connects, one
/// peer at a time, back to listening when that peer goes away (net/stream_data.c
/// `net_stream_data_send` re-arms the listener on end of connection and sets `link_down`).
/// Frames sent while no peer is connected are refused with [`LinkError::Down`].
#[derive(Debug)]
pub struct ServerLink {
    listener: StreamListener,
    pub(super) conn: Option<StreamLink>,
    pub(super) closed: bool,
    max_frame: usize,
    max_backlog: usize,
}

impl ServerLink {
    /// Listens on `addr` (no peer yet).
    pub fn bind(addr: &StreamAddr) -> Result<ServerLink, LinkError> {
        Ok(ServerLink {
            listener: StreamListener::bind(addr)?,
            conn: None,
            closed: false,
            max_frame: MAX_FRAME_LEN,
            max_backlog: MAX_SEND_BACKLOG,
        })
    }

    /// Where peers connect.
    pub fn local_addr(&self) -> Result<StreamAddr, LinkError> {
        self.listener.local_addr()
    }

    /// Whether a peer is connected now.
    pub fn connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Sets the largest frame for this and later connections ([`StreamLink::set_max_frame`]).
    pub fn set_max_frame(&mut self, n: usize) {
        self.max_frame = n.clamp(1, MAX_FRAME_LEN);
        if let Some(c) = &mut self.conn {
            c.set_max_frame(n);
        }
    }

    fn adopt(&mut self, mut c: StreamLink) {
        c.set_max_frame(self.max_frame);
        c.set_max_backlog(self.max_backlog);
        self.conn = Some(c);
    }

    /// What the link's next event is: its peer's ([`StreamLink::wait`]), or with no peer a
    /// peer connecting (the listener readable); nothing once shut down.
    pub(super) fn wait(&self) -> Wait {
        match &self.conn {
            _ if self.closed => Wait::Tick,
            Some(c) => c.wait(),
            None => Wait::Fd {
                fd: self.listener.raw_fd(),
                write: false,
            },
        }
    }

    /// Takes a waiting peer if there is none.
    fn poll_accept(&mut self) -> Result<(), LinkError> {
        if self.closed {
            return Err(LinkError::Down);
        }
        if self.conn.is_none() {
            if let Some(c) = self.listener.try_accept()? {
                self.adopt(c);
            }
        }
        Ok(())
    }

    /// Forgets the connection after a fatal error (the error still goes to the caller, once).
    pub(super) fn check<T>(&mut self, r: Result<T, LinkError>) -> Result<T, LinkError> {
        if let Err(e) = &r {
            if e.is_fatal() {
                self.conn = None;
            }
        }
        r
    }

    pub(super) fn send(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        self.poll_accept()?;
        let r = match &mut self.conn {
            Some(c) => c.send(frame),
            None => return Err(LinkError::Down),
        };
        self.check(r)
    }

    pub(super) fn recv(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        self.poll_accept()?;
        let r = match &mut self.conn {
            Some(c) => c.recv(),
            None => return Ok(None),
        };
        self.check(r)
    }

    pub(super) fn recv_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Vec<u8>>, LinkError> {
        self.poll_accept()?;
        if self.conn.is_none() {
            match self.listener.accept(deadline) {
                Ok(c) => self.adopt(c),
                Err(LinkError::Timeout) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let r = match &mut self.conn {
            Some(c) => c.recv_deadline(deadline),
            None => return Ok(None),
        };
        self.check(r)
    }
}
