//! One NVMe queue (one RC connection): its submission queue head, its controller, and the
//! commands in flight between a transfer and its response.

use alloc::vec::Vec;

use crate::cqe::Cqe;
use crate::exec::{ExecError, Response, Tag};
use crate::fabrics::ConnectCmd;

/// Most commands a queue keeps in flight: a host that sends far beyond its queue size is cut
/// off ([`ExecError::Overrun`]) rather than growing the table without bound (Linux
/// `nvmet_rdma_get_rsp` allocates beyond the queue's responses one by one).
pub(crate) const MAX_INFLIGHT: usize = 4096;

/// What completes a command once its transfer is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Then {
    /// Respond with this status and result.
    Done { status: u16, result: u64 },
    /// The Connect data arrived in the staging buffer: run the Connect.
    Connect(ConnectCmd),
    /// The Dataset Management ranges of namespace `nsid` arrived in the staging buffer.
    Dsm { nsid: u32, ranges: u16 },
}

/// A command between its transfer and its response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Inflight {
    pub cid: u16,
    pub invalidate: Option<u32>,
    pub then: Then,
}

/// A queue.
pub(crate) struct Queue {
    /// The controller (slot in `Target::ctrls`) once connected.
    pub ctrl: Option<usize>,
    /// The queue ID once connected (0 before: Linux `nvmet_sq_init`).
    pub qid: u16,
    /// Submission queue size, 1's based (0 before the Connect: no head to advance).
    pub size: u16,
    /// The submission queue head.
    pub sqhd: u16,
    /// The host disabled SQ flow control (Connect CATTR bit 2): head 0xffff in the Connect's
    /// response, 0 after it.
    pub sqhd_disabled: bool,
    /// Being torn down: no more commands.
    pub dying: bool,
    /// When the CM accepted it ([`Target::tick`](crate::Target::tick)'s clock): a queue
    /// still without a controller `CONNECT_DEADLINE_MS` later is torn down.
    pub accepted_ms: u64,
    slots: Vec<Option<Inflight>>,
    free: Vec<u16>,
}

impl Queue {
    pub(crate) fn new(accepted_ms: u64) -> Queue {
        Queue {
            accepted_ms,
            ctrl: None,
            qid: 0,
            size: 0,
            sqhd: 0,
            sqhd_disabled: false,
            dying: false,
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The response to command `cid`: advances the head first, as Linux
    /// `drivers/nvme/target/core.c` `__nvmet_req_complete` / `nvmet_update_sq_head` do.
    pub(crate) fn respond(
        &mut self,
        cid: u16,
        status: u16,
        result: u64,
        invalidate: Option<u32>,
    ) -> Response {
        // With SQ flow control disabled, Linux 6.1 `core.c` `__nvmet_req_complete` skips
        // `nvmet_update_sq_head`: the head stays the 0 of `nvmet_req_init`, except in the
        // Connect's response (0xffff, set by `fabrics::install`).
        let sqhd = if self.sqhd_disabled {
            core::mem::replace(&mut self.sqhd, 0)
        } else {
            if self.size != 0 {
                self.sqhd = ((u32::from(self.sqhd) + 1) % u32::from(self.size)) as u16;
            }
            self.sqhd
        };
        Response {
            cqe: Cqe {
                result,
                sqhd,
                sqid: self.qid,
                cid,
                status,
            },
            invalidate,
        }
    }

    /// Parks a command until its transfer is done.
    pub(crate) fn park(&mut self, f: Inflight) -> Result<Tag, ExecError> {
        if let Some(i) = self.free.pop() {
            self.slots[usize::from(i)] = Some(f);
            return Ok(Tag(i));
        }
        if self.slots.len() >= MAX_INFLIGHT {
            return Err(ExecError::Overrun);
        }
        self.slots.push(Some(f));
        Ok(Tag((self.slots.len() - 1) as u16))
    }

    /// Takes the command parked under `tag`.
    pub(crate) fn unpark(&mut self, tag: Tag) -> Result<Inflight, ExecError> {
        let f = self
            .slots
            .get_mut(tag.index())
            .and_then(Option::take)
            .ok_or(ExecError::UnknownTag)?;
        self.free.push(tag.0);
        Ok(f)
    }
}
