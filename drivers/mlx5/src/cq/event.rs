//! Completion channels: the completion events the event queue routes to a channel (a CQ's
//! notify state and the channel's queue are [`crate::eq`]'s, below the CQ).

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use core::sync::atomic::Ordering;
use core::time::Duration;

use crate::context::CtxInner;
use crate::eq::ChannelShared;
use crate::error::{Error, Result};
use crate::hal::Hal;

// For the doc links.
#[cfg(doc)]
use super::CompletionQueue;

/// A completion channel (`ibv_comp_channel`): the completion events of the CQs created on it
/// ([`crate::Context::create_cq_with_channel`]), waited for with a deadline. The unikernel has
/// no interrupts: [`CompletionChannel::get_cq_event`] polls the event queue.
pub struct CompletionChannel<H: Hal> {
    pub(super) ctx: Arc<CtxInner<H>>,
    pub(crate) shared: Arc<ChannelShared>,
}

/// A completion event (`ibv_get_cq_event`): the CQ it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    /// The CQ number ([`CompletionQueue::cqn`]).
    pub cqn: u32,
}

impl<H: Hal> CompletionChannel<H> {
    pub(crate) fn new(ctx: &Arc<CtxInner<H>>) -> Self {
        CompletionChannel {
            ctx: ctx.clone(),
            shared: Arc::new(ChannelShared {
                pending: spin::Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// The next completion event without waiting (`None`: none yet). The event queue is
    /// serviced first. Each event counts as unacknowledged on its CQ until
    /// [`CompletionQueue::ack_events`] (`ibv_ack_cq_events`), and advances the CQ's arm
    /// sequence number (rdma-core `mlx5_cq_event`).
    pub fn try_get_cq_event(&self) -> Result<Option<CqEvent>> {
        if let Some(e) = self.pop() {
            return Ok(Some(e));
        }
        let ctx = &self.ctx;
        ctx.with_dev(|d| {
            d.cmd.check_health(&ctx.hal)?;
            d.service_events(&ctx.hal, false)
        })?;
        Ok(self.pop())
    }

    /// Waits up to `timeout` for the next completion event (`ibv_get_cq_event`); fails with
    /// [`Error::Timeout`] when none came. Arm the CQ first ([`CompletionQueue::req_notify_cq`]).
    pub fn get_cq_event(&self, timeout: Duration) -> Result<CqEvent> {
        let hal = &self.ctx.hal;
        let deadline = hal.now().saturating_add(timeout);
        loop {
            if let Some(e) = self.try_get_cq_event()? {
                return Ok(e);
            }
            if hal.now() >= deadline {
                return Err(Error::Timeout);
            }
            hal.relax();
        }
    }

    /// Events queued and not yet taken.
    pub fn pending(&self) -> usize {
        self.shared.pending.lock().len()
    }

    fn pop(&self) -> Option<CqEvent> {
        let mut q = self.shared.pending.lock();
        while let Some(w) = q.pop_front() {
            // A CQ destroyed since its event was queued: the event went with it.
            let Some(n) = w.upgrade() else { continue };
            n.unacked.fetch_add(1, Ordering::AcqRel);
            n.arm_sn.fetch_add(1, Ordering::AcqRel);
            return Some(CqEvent { cqn: n.cqn });
        }
        None
    }
}
