//! Completion posting: a CQE written to its CQ with the data-plane fault switches applied, the
//! completion or CQ-error event it produces posted to the event sink, and the CQ arm doorbell
//! (the CQ ring and its arming state are [`crate::objects::cq`]).

use mlx5_prm::{comp_event, cq_error, event};

use crate::datapath::Dp;
use crate::events::Sink;
use crate::objects::cq::{CqEvent, CqTable, Cqe, CqeFaults, INDEX_MASK};

/// Posts the event a CQE write produced.
fn post_event(sink: &mut Sink, cqn: u32, ev: CqEvent) {
    match ev {
        CqEvent::None => {}
        CqEvent::Completion { eqn } => {
            let mut data = [0u8; comp_event::BYTES];
            let _ = comp_event::CQ_NUMBER.set(&mut data, cqn);
            if !sink.post_eqe(eqn, event::COMP, 0, &data) {
                sink.trace(format_args!(
                    "CQ {cqn:#x}: completion event lost, EQ {eqn:#x} full or gone"
                ));
            }
        }
        CqEvent::Error { syndrome } => {
            let mut data = [0u8; cq_error::BYTES];
            let _ = cq_error::CQN.set(&mut data, cqn);
            let _ = cq_error::SYNDROME.set(&mut data, syndrome as u32);
            sink.trace(format_args!(
                "CQ {cqn:#x}: CQ error, syndrome {syndrome:#x}"
            ));
            sink.post_async_event(event::CQ_ERROR, 0, &data);
        }
    }
}

/// Writes a CQE to CQ `cqn`, applying the data-plane fault switches, and posts the resulting
/// completion or CQ-error event. Returns false if the CQ does not exist or is in error.
pub fn post_cqe(hca: &mut Dp<'_>, cqn: u32, c: &Cqe) -> bool {
    let (cqs, mut sink) = hca.cqs_and_sink();
    post_cqe_to(cqs, &mut sink, cqn, c)
}

/// [`post_cqe`] on the CQ table and the event sink alone.
pub(crate) fn post_cqe_to(cqs: &mut CqTable, sink: &mut Sink, cqn: u32, c: &Cqe) -> bool {
    let now = sink.mem.version();
    write_cqe(cqs, sink, cqn, c, now)
}

/// [`post_cqe`], inlined into a caller whose every completion goes through it (a UMR's),
/// with the memory's version read already (`now`, [`crate::memory::GuestMemory::version`],
/// for the doorbell the CQE belongs to).
#[inline(always)]
pub(crate) fn post_cqe_inline(hca: &mut Dp<'_>, cqn: u32, c: &Cqe, now: u64) -> bool {
    let (cqs, mut sink) = hca.cqs_and_sink();
    write_cqe(cqs, &mut sink, cqn, c, now)
}

/// [`post_cqe`] on the CQ table and the event sink alone (the data path holds the rest).
#[inline(always)]
pub(crate) fn write_cqe(cqs: &mut CqTable, sink: &mut Sink, cqn: u32, c: &Cqe, now: u64) -> bool {
    let f = {
        let faults = &mut sink.control.faults;
        let f = CqeFaults {
            stuck_owner: faults.stuck_cq_owner == Some(cqn),
            corrupt: faults.corrupt_next_cqe,
            duplicate: faults.duplicate_next_cqe,
        };
        faults.corrupt_next_cqe = false;
        faults.duplicate_next_cqe = false;
        f
    };
    let Some(cq) = cqs.get_mut(cqn) else {
        return false;
    };
    if cq.in_error {
        return false;
    }
    let ev = cq.write_at(sink.mem, now, c, f);
    if ev == CqEvent::None {
        return true;
    }
    let ok = !matches!(ev, CqEvent::Error { .. });
    post_event(sink, cqn, ev);
    ok
}

/// The CQ arm doorbell (UAR offset 0x20): `value = (sn << 28 | cmd | ci) << 32 | cqn`.
pub fn arm_doorbell(hca: &mut Dp<'_>, value: u64) {
    let cqn = (value as u32) & INDEX_MASK;
    let hi = (value >> 32) as u32;
    let Some(cq) = hca.objects.cqs.get_mut(cqn) else {
        hca.trace_note(format_args!(
            "CQ arm doorbell for unknown CQ {cqn:#x} ignored"
        ));
        return;
    };
    let ev = cq.arm(hi);
    post_event(&mut hca.sink(), cqn, ev);
}
