//! The event sink: the event queues (EQE and async-event posting, see [`crate::objects::eq`]) and the
//! INTx line they raise. One part of [`crate::hca::Hca`].

use std::sync::Arc;

use crate::control::result::put;
use crate::control::Control;
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::eq::{EqTable, COUNTER_MASK};
use mlx5_prm::{eqe, health};

/// The EQs and the interrupt line.
pub(crate) struct Events {
    pub(crate) eqs: EqTable,
    pub(crate) intx: Intx,
}

impl Events {
    /// No EQs, INTx on `intx`.
    pub(crate) fn new(intx: Intx) -> Events {
        Events {
            eqs: EqTable::default(),
            intx,
        }
    }

    /// The INTx line follows the EQs: raised while one has an interrupt pending.
    pub(crate) fn update_intx(&mut self) {
        crate::objects::eq::update_intx(&self.eqs, &mut self.intx);
    }
}

/// What posting an event reaches: the EQs and INTx, guest memory (the EQ buffers) and the
/// control plane (dead firmware posts nothing, an async EQ overrun is fatal health, notes go
/// to the trace). Borrowed apart from the rest of the device, so that the data path can post
/// completions while it holds the object tables.
pub(crate) struct Sink<'a> {
    pub(crate) events: &'a mut Events,
    pub(crate) control: &'a mut Control,
    pub(crate) mem: &'a Arc<dyn GuestMemory>,
}

impl Sink<'_> {
    /// Writes one EQE into EQ `eqn` ([`crate::hca::Hca::post_eqe`]).
    pub(crate) fn post_eqe(&mut self, eqn: u32, event_type: u8, sub_type: u8, data: &[u8]) -> bool {
        post_eqe(self, eqn, event_type, sub_type, data)
    }

    /// Posts an event to every EQ that asked for it ([`crate::hca::Hca::post_async_event`]).
    pub(crate) fn post_async_event(&mut self, event_type: u8, sub_type: u8, data: &[u8]) {
        post_async_event(self, event_type, sub_type, data)
    }

    /// A trace note.
    pub(crate) fn trace(&mut self, args: std::fmt::Arguments<'_>) {
        self.control.trace.note(args);
    }
}

/// Writes an EQE regardless of the health state. False if the EQ is missing, full (without
/// `oi`) or its buffer is not reachable.
fn write_eqe(sink: &mut Sink, eqn: u32, event_type: u8, sub_type: u8, data: &[u8]) -> bool {
    let Ok(eqn) = u8::try_from(eqn) else {
        return false;
    };
    let Some(eq) = sink.events.eqs.get_mut(eqn) else {
        return false;
    };
    if eq.used() >= eq.nent() && !eq.oi {
        return false;
    }
    let index = eq.prod & (eq.nent() - 1);
    let Some(addr) = eq.entry_addr(index) else {
        return false;
    };
    let mut e = [0u8; eqe::BYTES];
    put(&mut e, eqe::EVENT_TYPE, event_type.into());
    put(&mut e, eqe::EVENT_SUB_TYPE, sub_type.into());
    let d = eqe::EVENT_DATA.byte_offset();
    let n = data.len().min(eqe::EVENT_DATA.byte_len());
    e[d..d + n].copy_from_slice(&data[..n]);
    let owner = ((eq.prod >> eq.log_size) & 1) as u8;
    // The body first, the owner byte last: software polls the owner bit.
    let mem = sink.mem;
    if mem.write(addr, &e[..eqe::BYTES - 1]).is_err()
        || mem.write(addr + eqe::BYTES as u64 - 1, &[owner]).is_err()
    {
        return false;
    }
    eq.prod = (eq.prod + 1) & COUNTER_MASK;
    if eq.armed || eq.always_armed {
        eq.armed = false;
        eq.irq_pending = true;
        sink.events.intx.raise();
    }
    true
}

/// [`crate::hca::Hca::post_eqe`]: nothing is posted by dead firmware.
fn post_eqe(sink: &mut Sink, eqn: u32, event_type: u8, sub_type: u8, data: &[u8]) -> bool {
    if sink.control.dead() {
        return false;
    }
    write_eqe(sink, eqn, event_type, sub_type, data)
}

/// [`crate::hca::Hca::post_async_event`].
fn post_async_event(sink: &mut Sink, event_type: u8, sub_type: u8, data: &[u8]) {
    let targets: Vec<u8> = sink
        .events
        .eqs
        .iter()
        .filter(|e| e.wants(event_type))
        .map(|e| e.eqn)
        .collect();
    for eqn in targets {
        if !write_eqe(sink, eqn.into(), event_type, sub_type, data)
            && sink.control.health.fatal().is_none()
        {
            // An async EQ that cannot take the event has overrun: fatal firmware error.
            let synd = health::syndrome::ASYNCHRONOUS_EQ_BUF_OVERRUN;
            sink.control.health.set_fatal(synd, 0);
            sink.control.faults.fatal_health = Some(synd);
            sink.trace(format_args!(
                "EQ {eqn} overrun posting event {event_type:#x}: fatal"
            ));
        }
    }
}
