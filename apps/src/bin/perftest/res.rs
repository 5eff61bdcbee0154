//! What the run uses on the device, and waiting for a completion.

use super::*;

/// Everything the run uses on the device. Fields drop in order: the QP (with `-R` the
/// exchange's link, whose CM holds the QP) before its CQs, the CQs before their channels, then
/// the region.
pub(crate) struct Res {
    /// The test's QP; with `-R` the CM in [`Res::link`] holds it ([`Res::qp`]).
    pub(crate) qp: Option<QueuePair<KernelHal>>,
    /// The exchange's channel (TCP with the IP stack under it, or rdma_cm), polled while the
    /// run waits.
    pub(crate) link: Link,
    pub(crate) scq: CompletionQueue<H>,
    pub(crate) rcq: CompletionQueue<H>,
    pub(crate) sch: Option<CompletionChannel<H>>,
    pub(crate) rch: Option<CompletionChannel<H>>,
    pub(crate) mr: MemoryRegion<H>,
    pub(crate) lay: Layout,
    /// `-e`: completion events taken; completions there at the first poll; completions there
    /// right after arming the CQ.
    pub(crate) events: [u64; 3],
    /// The receive slots hold a peer's bytes, not the pattern: a run with shared slots puts
    /// no pattern back (`recv::take_recv`).
    pub(crate) recv_dirty: bool,
}

type H = KernelHal;

impl Res {
    /// The test's QP.
    #[inline]
    pub(crate) fn qp(&mut self) -> Result<&mut QueuePair<H>, Error<'static>> {
        test_qp(&mut self.qp, &mut self.link)
    }

    /// The test's QP and the region.
    pub(crate) fn qp_mr(
        &mut self,
    ) -> Result<(&mut QueuePair<H>, &MemoryRegion<H>), Error<'static>> {
        Ok((test_qp(&mut self.qp, &mut self.link)?, &self.mr))
    }

    /// The next send completion ([`wait_cq`] of the send CQ).
    pub(crate) fn wait_send(&mut self) -> Result<WorkCompletion, Error<'static>> {
        let ch = self.sch.as_ref();
        wait_cq(&mut self.scq, ch, &mut self.events, None, &mut self.link)?
            .ok_or(Error::NoCompletion)
    }

    /// The next receive completion ([`wait_cq`] of the receive CQ), `None` when `stop`
    /// reached its end first.
    pub(crate) fn wait_recv(
        &mut self,
        stop: Option<&Clock>,
    ) -> Result<Option<WorkCompletion>, Error<'static>> {
        let ch = self.rch.as_ref();
        wait_cq(&mut self.rcq, ch, &mut self.events, stop, &mut self.link)
    }
}

/// The test's QP: [`Res::qp`] from the fields, for callers that hold the region meanwhile.
#[inline]
pub(crate) fn test_qp<'a>(
    qp: &'a mut Option<QueuePair<H>>,
    link: &'a mut Link,
) -> Result<&'a mut QueuePair<H>, Error<'static>> {
    match (qp, link) {
        (Some(qp), _) => Ok(qp),
        (None, Link::Cm(l)) => l.test_qp().ok_or(Error::NoTestQp { rdma_cm: true }),
        (None, Link::Tcp(_)) => Err(Error::NoTestQp { rdma_cm: false }),
    }
}

/// The next completion of `cq`, by polling or, with a channel (`-e`), by arming the CQ and
/// waiting for its completion event (perftest `ctx_notify_events`). `None` when `stop` reached
/// its end first. The IP stack under `link` is kept polled meanwhile ([`Link::tick`]).
pub(crate) fn wait_cq(
    cq: &mut CompletionQueue<H>,
    ch: Option<&CompletionChannel<H>>,
    events: &mut [u64; 3],
    stop: Option<&Clock>,
    link: &mut Link,
) -> Result<Option<WorkCompletion>, Error<'static>> {
    let deadline = Deadline::after(WAIT);
    let mut wc = [WorkCompletion::default(); 1];
    let mut waited = false;
    loop {
        if cq.poll(&mut wc).map_err(|e| Error::Verbs("poll", e))? == 1 {
            if ch.is_some() && !waited {
                events[1] += 1;
            }
            return Ok(Some(wc[0]));
        }
        if stop.is_some_and(|c| c.phase() == Phase::End) {
            return Ok(None);
        }
        if deadline.expired() {
            return Err(Error::NoCompletion);
        }
        link.tick();
        match ch {
            None => core::hint::spin_loop(),
            Some(ch) => {
                cq.req_notify_cq(false)
                    .map_err(|e| Error::Verbs("req_notify_cq", e))?;
                if cq.poll(&mut wc).map_err(|e| Error::Verbs("poll", e))? == 1 {
                    events[2] += 1;
                    return Ok(Some(wc[0]));
                }
                // ibv_get_cq_event, with the stack polled while no event has come.
                let ev = loop {
                    match ch.try_get_cq_event() {
                        Ok(None) if deadline.expired() => break Err(mlx5::Error::Timeout),
                        Ok(None) => link.tick(),
                        Ok(Some(ev)) => break Ok(ev),
                        Err(e) => break Err(e),
                    }
                };
                match ev {
                    Ok(ev) if ev.cqn == cq.cqn() => {
                        cq.ack_events(1)
                            .map_err(|e| Error::Verbs("ack_cq_events", e))?;
                        events[0] += 1;
                        waited = true;
                    }
                    Ok(ev) => {
                        return Err(Error::OtherCq {
                            got: ev.cqn,
                            want: cq.cqn(),
                        })
                    }
                    Err(e) => return Err(Error::Verbs("get_cq_event", e)),
                }
            }
        }
    }
}

/// `wc` unless it is in error; `what` names its work request.
pub(crate) fn ok_wc(wc: &WorkCompletion, what: &'static str) -> Result<(), Error<'static>> {
    if wc.status != WcStatus::Success {
        return Err(Error::Completion { what, wc: *wc });
    }
    Ok(())
}
