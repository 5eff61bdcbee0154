//! In-process links: one end of a pair, and loopback.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::time::Instant;

use super::LinkError;

/// One end of an in-process pair.
#[derive(Debug)]
pub struct ChanLink {
    pub(super) tx: Option<mpsc::SyncSender<Vec<u8>>>,
    pub(super) rx: mpsc::Receiver<Vec<u8>>,
}

impl ChanLink {
    pub(super) fn send(&mut self, frame: Vec<u8>) -> Result<(), LinkError> {
        let Some(tx) = &self.tx else {
            return Err(LinkError::Down);
        };
        match tx.try_send(frame) {
            Ok(()) => Ok(()),
            Err(mpsc::TrySendError::Full(_)) => Err(LinkError::Backlog),
            Err(mpsc::TrySendError::Disconnected(_)) => {
                self.tx = None;
                Err(LinkError::Closed)
            }
        }
    }

    pub(super) fn recv(&mut self, deadline: Option<Instant>) -> Result<Option<Vec<u8>>, LinkError> {
        if self.tx.is_none() {
            return Err(LinkError::Down);
        }
        let r = match deadline {
            None => self
                .rx
                .try_recv()
                .map_err(|e| e == mpsc::TryRecvError::Disconnected),
            Some(d) => self
                .rx
                .recv_timeout(d.saturating_duration_since(Instant::now()))
                .map_err(|e| e == mpsc::RecvTimeoutError::Disconnected),
        };
        match r {
            Ok(f) => Ok(Some(f)),
            Err(false) => Ok(None),
            Err(true) => {
                self.tx = None;
                Err(LinkError::Closed)
            }
        }
    }
}

/// A link that receives what it sends.
#[derive(Debug, Default)]
pub struct LoopbackLink {
    pub(super) q: VecDeque<Vec<u8>>,
    pub(super) down: bool,
}
