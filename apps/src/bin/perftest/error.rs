//! Why a run failed: the step, with the typed error of the layer under it, or the check of the
//! data that did not hold.

use apps::app::HcaError;
use apps::stack::{NetArgsError, NodeError};
use rdma_checks::recv_ring::RecvRingError;

use super::*;

/// Why a run failed.
#[derive(Debug)]
pub(crate) enum Error<'a> {
    /// A network word of the cmdline.
    NetArgs(NetArgsError<'a>),
    /// The cmdline names no side this can be (a client without `peer=`).
    Side(OobError),
    /// Opening, bringing up or closing the HCA.
    Hca(HcaError),
    /// A call of the driver failed: which one.
    Verbs(&'static str, mlx5::Error),
    /// Posting work request `k` failed.
    PostSend(u64, mlx5::Error),
    /// The network did not come up.
    Network(NodeError),
    /// The exchange's channel failed: in what (opening it, the peer's MAC, the test's
    /// rdma_cm connection).
    Link(&'static str, LinkError),
    /// An exchange of the run's messages failed (`ctx_xchg_data`, `ctx_hand_shake`): which.
    Xchg(&'static str, LinkError),
    /// A size of the run does not fit where it goes: what, and the size.
    TooLarge(&'static str, u64),
    /// The peer's MTU is not an IBV_MTU enum.
    GarbledMtu,
    /// The peer's keys do not parse.
    GarbledKeys,
    /// A field of the peer's report is not 8 bytes: how many came.
    GarbledReport(usize),
    /// The peer's last message was not `"done"`.
    NoDone,
    /// ib_atomic_lat, which perftest does not build.
    AtomicLat,
    /// Without `-R` there is no test QP; with it, the CM holds it no more.
    NoTestQp {
        /// With `-R`.
        rdma_cm: bool,
    },
    /// No completion within [`WAIT`].
    NoCompletion,
    /// A completion event for another CQ (`-e`).
    OtherCq {
        /// The event's CQ.
        got: u32,
        /// The CQ armed.
        want: u32,
    },
    /// A completion in error: of what.
    Completion {
        /// What the work request was.
        what: &'static str,
        /// The completion.
        wc: WorkCompletion,
    },
    /// The completion of another work request than the next one due.
    OutOfOrder {
        /// The completion's.
        got: u64,
        /// The one due.
        due: u64,
    },
    /// Posting the first `n` receives failed.
    PostRecvs(u64, RecvRingError),
    /// Posting a receive again after a message failed.
    Repost(RecvRingError),
    /// The byte at `off` did not become `want` within [`WAIT`] (ib_write_lat's poll).
    NeverBecame {
        /// Where.
        off: u64,
        /// The count awaited.
        want: u8,
    },
    /// Message `n` came with `len` bytes, not `size`.
    Length {
        /// The receive's work request.
        n: u64,
        /// Its bytes.
        len: u32,
        /// `-s`.
        size: u64,
    },
    /// After message `after` fewer receives were posted than perftest's `rx_depth` keeps.
    DepthNotKept {
        /// The message.
        after: u64,
        /// Receives posted.
        posted: u64,
        /// perftest's rx_depth.
        depth: u64,
    },
    /// `-e`: a side that waits for completions took no completion event.
    NoEvents,
    /// A check of the data did not hold.
    Check(Check),
}

/// A check of what the peer did to this side's buffer, or gave back, that did not hold.
#[derive(Debug)]
pub(crate) enum Check {
    /// This side's own source half changed at byte `0`.
    SourceChanged(u64),
    /// `bad` of `of` READs of `size` bytes returned other bytes than the first.
    ReadsDiffer { bad: u64, of: u64, size: u64 },
    /// `bad` of `of` atomics' results are not the arithmetic ones.
    Atomics { bad: u64, of: u64, op: AtomicOp },
    /// ib_write_lat's last byte holds `got`, not the final count `want`.
    LastByte { got: u8, want: u8 },
    /// Byte `0` of the WRITE target is not perftest's 0.
    NotZero(u64),
    /// The peer's ib_write_lat WRITEs reached byte `0` beyond the message.
    Beyond(u64),
    /// `differ` of `of` messages of `size` bytes differ from the first.
    MessagesDiffer { differ: u64, of: u64, size: u64 },
    /// The peer's messages of `size` bytes left the pattern as it was.
    NothingLanded { size: u64 },
    /// Only `landed` of `of` received bytes checked differ from the pattern they overwrote.
    TooFewLanded { landed: u64, of: u64 },
    /// The peer's READs changed byte `0` of this side's buffer.
    ReadChanged(u64),
    /// A CMP_AND_SWAP (compare 0, swap 0) changed a word.
    SwapChanged,
    /// Word `word` was added to `got` times, not `want` of `total`.
    WordAdds {
        word: u64,
        got: u64,
        want: u64,
        total: u64,
    },
    /// `total` FETCH_AND_ADDs landed where the peer reported `reported`.
    AddsLanded { total: u64, reported: u64 },
    /// The peer's atomics changed byte `0`, outside the words perftest targets.
    AtomicsOutside(u64),
    /// The peer's WRITEs reached byte `0`, where perftest writes nothing.
    WritesOutside(u64),
    /// Only `landed` of `total` bytes were written by the peer.
    WritesLanded { landed: u64, total: u64 },
}

impl From<HcaError> for Error<'_> {
    fn from(e: HcaError) -> Self {
        Error::Hca(e)
    }
}

impl From<Check> for Error<'_> {
    fn from(c: Check) -> Self {
        Error::Check(c)
    }
}

impl core::fmt::Display for Error<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::NetArgs(e) => write!(f, "{e}"),
            Error::Side(e) => write!(f, "{e}"),
            Error::Hca(e) => write!(f, "{e}"),
            Error::Verbs(w, e) => write!(f, "{w}: {e:?}"),
            Error::PostSend(k, e) => write!(f, "post_send {k}: {e:?}"),
            Error::Network(e) => write!(f, "the network: {e:?}"),
            Error::Link(w, e) => write!(f, "{w}: {e}"),
            Error::Xchg(w, e) => write!(f, "exchange of the {w}: {e}"),
            Error::TooLarge(w, n) => write!(f, "{w} {n} does not fit"),
            Error::GarbledMtu => write!(f, "garbled MTU"),
            Error::GarbledKeys => write!(f, "the peer's keys are garbled"),
            Error::GarbledReport(n) => write!(f, "a report field of {n} bytes, not 8"),
            Error::NoDone => write!(f, "the peer did not say done"),
            Error::AtomicLat => write!(f, "ib_atomic_lat is not supported"),
            Error::NoTestQp { rdma_cm: false } => write!(f, "no test QP"),
            Error::NoTestQp { rdma_cm: true } => write!(f, "the test's QP is gone"),
            Error::NoCompletion => write!(f, "no completion in {WAIT:?}"),
            Error::OtherCq { got, want } => {
                write!(f, "completion event for CQ {got:#x}, not {want:#x}")
            }
            Error::Completion { what, wc } => write!(
                f,
                "{what} {} in error: {:?} (vendor syndrome {:#x})",
                wc.wr_id, wc.status, wc.vendor_err
            ),
            Error::OutOfOrder { got, due } => {
                write!(f, "completion of work request {got} where {due} was due")
            }
            Error::PostRecvs(n, e) => write!(f, "posting the first {n} receives: {e:?}"),
            Error::Repost(e) => write!(f, "reposting a receive: {e:?}"),
            Error::NeverBecame { off, want } => {
                write!(f, "byte {off} never became {want} in {WAIT:?}")
            }
            Error::Length { n, len, size } => write!(f, "message {n}: {len} bytes, not {size}"),
            Error::DepthNotKept {
                after,
                posted,
                depth,
            } => write!(
                f,
                "after message {after}: {posted} receives posted, fewer than perftest's rx_depth {depth} keeps"
            ),
            Error::NoEvents => write!(f, "-e: no completion event was taken"),
            Error::Check(c) => write!(f, "{c}"),
        }
    }
}

impl core::fmt::Display for Check {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Check::SourceChanged(at) => {
                write!(f, "this side's source buffer changed at byte {at}")
            }
            Check::ReadsDiffer { bad, of, size } => write!(
                f,
                "{bad} of {of} READs of {size} B returned other bytes than the first"
            ),
            Check::Atomics { bad, of, op } => {
                write!(f, "{bad} of {of} {op:?} results are not the arithmetic ones")
            }
            Check::LastByte { got, want } => {
                write!(f, "the last byte holds {got}, not the final count {want}")
            }
            Check::NotZero(i) => write!(f, "byte {i} of the WRITE target is not perftest's 0"),
            Check::Beyond(i) => {
                write!(f, "the peer's WRITEs reached byte {i} beyond the message")
            }
            Check::MessagesDiffer { differ, of, size } => write!(
                f,
                "{differ} of {of} messages of {size} B differ from the first (perftest sends one unchanged buffer)"
            ),
            Check::NothingLanded { size } => write!(
                f,
                "the peer's {size}-byte messages left the pattern as it was"
            ),
            Check::TooFewLanded { landed, of } => write!(
                f,
                "only {landed} of {of} received bytes checked differ from the pattern they overwrote"
            ),
            Check::ReadChanged(i) => write!(
                f,
                "the peer's READs changed byte {i} of this side's buffer"
            ),
            Check::SwapChanged => {
                write!(f, "a CMP_AND_SWAP (compare 0, swap 0) changed a word")
            }
            Check::WordAdds {
                word,
                got,
                want,
                total,
            } => write!(
                f,
                "word {word} was added to {got} times, not {want} of {total}"
            ),
            Check::AddsLanded { total, reported } => write!(
                f,
                "{total} FETCH_AND_ADDs landed, the peer reported {reported}"
            ),
            Check::AtomicsOutside(b) => write!(
                f,
                "the peer's atomics changed byte {b}, outside the words perftest targets"
            ),
            Check::WritesOutside(b) => write!(
                f,
                "the peer's WRITEs reached byte {b}, where perftest writes nothing"
            ),
            Check::WritesLanded { landed, total } => {
                write!(f, "only {landed} of {total} bytes were written by the peer")
            }
        }
    }
}
