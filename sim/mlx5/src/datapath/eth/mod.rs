//! The Ethernet data path: send queues ([`tx`]) put frames on the port, receive queues
//! ([`rx`]) take the frames steering hands to a TIR; [`headers`] is what both read of a
//! frame's headers and the checksums they offload.

pub mod headers;
pub mod rx;
pub mod tx;

use mlx5_prm::{event, qp_events};

use crate::datapath::Dp;

/// A DMA failure on an Ethernet work queue: a WQ_CATAS_ERROR event naming queue `n` of
/// `queue_type` (`event_queue_type::SQ` / `RQ`), traced with `why`. The caller moves the queue
/// to ERR.
pub(crate) fn catastrophe_event(dp: &mut Dp<'_>, queue_type: u8, n: u32, why: &str) {
    dp.trace_note(format_args!(
        "work queue {n:#x} (type {queue_type}): catastrophic error: {why}"
    ));
    let mut data = [0u8; qp_events::BYTES];
    let _ = qp_events::TYPE.set(&mut data, queue_type.into());
    let _ = qp_events::QPN_RQN_SQN.set(&mut data, n);
    dp.post_async_event(event::WQ_CATAS_ERROR, 0, &data);
}
