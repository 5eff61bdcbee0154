//! Ethernet receive: a frame steered to a TIR lands in the next receive WQE of the TIR's RQ
//! and completes with a receive CQE.

use crate::datapath::Dp;

/// Why a frame handed to [`deliver`] was not received.
// (Unused until the port's dispatch of non-RoCE frames calls `deliver`.)
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EthRxDrop {
    /// No TIR of that number.
    NoTir,
    /// The TIR's RQ does not exist or is not in RDY.
    RqNotReady,
    /// No receive WQE posted (counted as the Q counter's `out_of_buffer`).
    OutOfBuffer,
}

/// Receives `frame` (an Ethernet frame without FCS) on TIR `tirn`.
#[allow(dead_code)]
pub(crate) fn deliver(dp: &mut Dp<'_>, tirn: u32, frame: &[u8]) -> Result<(), EthRxDrop> {
    let _ = (dp, tirn, frame);
    Err(EthRxDrop::NoTir)
}
