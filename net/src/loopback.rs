//! An in-memory Ethernet link: two [`Nic`]s whose frames go to each other, for tests of the
//! stack and of the programs on it. The link can be cut ([`LinkControl::cut`]) to test
//! timeouts; frames sent while it is cut, or while the receiver's queue is full, are lost,
//! as on a wire.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use spin::Mutex;

use crate::nic::{Nic, NicError};

/// How many frames wait in each direction before the link drops more.
pub const QUEUE_FRAMES: usize = 512;

#[derive(Default)]
struct Shared {
    /// Frames toward end A and toward end B.
    to: [Mutex<VecDeque<Vec<u8>>>; 2],
    cut: AtomicBool,
    delivered: AtomicU64,
    lost: AtomicU64,
}

/// One end of the link.
pub struct MemNic {
    mac: [u8; 6],
    mtu: usize,
    /// 0 for end A, 1 for end B.
    end: usize,
    link: Arc<Shared>,
    /// The transmit buffer, and the received frame handed until it is given back.
    tx: Vec<u8>,
    rx: Option<Vec<u8>>,
}

/// Cuts and mends the link, and counts its frames; clones control the same link.
#[derive(Clone)]
pub struct LinkControl(Arc<Shared>);

impl LinkControl {
    /// Cuts the link (`true`: every frame from now on is lost) or mends it.
    pub fn cut(&self, cut: bool) {
        self.0.cut.store(cut, Ordering::Relaxed);
    }

    /// Frames that reached the other end's queue.
    pub fn delivered(&self) -> u64 {
        self.0.delivered.load(Ordering::Relaxed)
    }

    /// Frames lost (link cut, or the receiver's queue full).
    pub fn lost(&self) -> u64 {
        self.0.lost.load(Ordering::Relaxed)
    }
}

/// Two NICs with MACs `a` and `b` and MTU `mtu` (frame bytes without FCS), joined.
pub fn pair(a: [u8; 6], b: [u8; 6], mtu: usize) -> (MemNic, MemNic, LinkControl) {
    let link = Arc::new(Shared::default());
    let end = |mac, end| MemNic {
        mac,
        mtu,
        end,
        link: link.clone(),
        tx: alloc::vec![0; mtu],
        rx: None,
    };
    (end(a, 0), end(b, 1), LinkControl(link.clone()))
}

impl Nic for MemNic {
    /// The link never fails.
    type Error = core::convert::Infallible;

    fn mac(&self) -> [u8; 6] {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    /// The link takes every frame (a full receiver loses it, as on a wire).
    fn can_send(&mut self) -> bool {
        true
    }

    fn tx_buffer(&mut self, len: usize) -> Result<&mut [u8], NicError<Self::Error>> {
        match self.tx.get_mut(..len) {
            Some(buf) => Ok(buf),
            None => Err(NicError::FrameTooLarge { len, max: self.mtu }),
        }
    }

    fn post_tx(&mut self, len: usize) -> Result<(), NicError<Self::Error>> {
        let Some(frame) = self.tx.get(..len) else {
            return Err(NicError::FrameTooLarge { len, max: self.mtu });
        };
        let mut q = self.link.to[1 - self.end].lock();
        if self.link.cut.load(Ordering::Relaxed) || q.len() >= QUEUE_FRAMES {
            self.link.lost.fetch_add(1, Ordering::Relaxed);
        } else {
            q.push_back(frame.to_vec());
            self.link.delivered.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn rx_frame(&mut self) -> Result<Option<&[u8]>, Self::Error> {
        if self.rx.is_none() {
            self.rx = self.link.to[self.end].lock().pop_front();
        }
        Ok(self.rx.as_deref())
    }

    fn rx_done(&mut self) -> Result<(), Self::Error> {
        self.rx = None;
        Ok(())
    }
}
