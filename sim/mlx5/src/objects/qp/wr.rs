//! The send work requests a QP holds between its SQ and its completions: one slot per send
//! WQE handed to the transport (or completed locally), in SQ order, with its resolved local
//! buffers. QP state; the RC data path fills and completes them.

use std::sync::Arc;

/// How one send WQE stands with the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotKind {
    /// Posted to the requester as `wr_id`.
    Posted,
    /// A NOP: completes (successfully) when it reaches the head.
    Nop,
    /// Failed before reaching the transport: completes in order with (syndrome, vendor), then
    /// the QP goes to ERR.
    Failed(u8, u8),
}

/// One send WQE handed to the transport (or completed locally), in SQ order.
#[derive(Clone, Debug)]
pub(crate) struct WrSlot {
    pub wr_id: u64,
    pub wqe_index: u16,
    pub opcode: u8,
    pub signaled: bool,
    pub byte_len: u32,
    pub kind: SlotKind,
    /// Where the message's bytes are, resolved when the WQE was taken from the SQ.
    pub payload: Option<WrPayload>,
}

/// A work request's local buffers, resolved once when its WQE is taken from the SQ (every lkey
/// checked then, as before any byte moves), so that each packet of the message does not fetch,
/// parse and translate the WQE again. Model choice: a memory key invalidated while its WQE is
/// outstanding does not fault the packets still to send (no source says when a ConnectX
/// re-translates a gather list during a message).
/// Cloning one is one reference count (no outer `Arc` around it: one allocation less per
/// message).
#[derive(Clone, Debug)]
pub(crate) enum WrPayload {
    /// The message bytes themselves (a WQE with inline data, copied from the SQ at once).
    Bytes(Arc<[u8]>),
    /// Guest bus pieces, in message order: the gather list of a SEND / WRITE (local read),
    /// the scatter list of a READ or an atomic's result buffer (local write).
    Pieces(Arc<[(u64, usize)]>),
}

impl WrPayload {
    /// The pieces covering message bytes `off..off + len`, or `None` when the message is
    /// shorter. (An iterator: each packet of a message walks it, so nothing is allocated.)
    #[inline]
    pub(crate) fn sub_pieces(
        pieces: &[(u64, usize)],
        off: usize,
        len: usize,
    ) -> Option<impl Iterator<Item = (u64, usize)> + '_> {
        let end = off.checked_add(len)?;
        let mut at = 0usize;
        let covered = end == 0
            || pieces.iter().any(|&(_, n)| {
                at += n;
                at >= end
            });
        if !covered {
            return None;
        }
        Some(
            pieces
                .iter()
                .scan(0usize, move |at, &(bus, n)| {
                    let start = *at;
                    if start >= end {
                        return None;
                    }
                    *at += n;
                    Some((start, bus, n))
                })
                .filter_map(move |(start, bus, n)| {
                    let (lo, hi) = (start.max(off), (start + n).min(end));
                    (lo < hi).then(|| (bus + (lo - start) as u64, hi - lo))
                }),
        )
    }
}
