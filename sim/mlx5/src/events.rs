//! The event sink: the event queues (EQE and async-event posting, see [`crate::objects::eq`]) and the
//! INTx line they raise. One part of [`crate::hca::Hca`].

use std::sync::Arc;

use crate::control::Control;
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::eq::EqTable;

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
        crate::objects::eq::post_eqe(self, eqn, event_type, sub_type, data)
    }

    /// Posts an event to every EQ that asked for it ([`crate::hca::Hca::post_async_event`]).
    pub(crate) fn post_async_event(&mut self, event_type: u8, sub_type: u8, data: &[u8]) {
        crate::objects::eq::post_async_event(self, event_type, sub_type, data)
    }

    /// A trace note.
    pub(crate) fn trace(&mut self, args: std::fmt::Arguments<'_>) {
        self.control.trace.note(args);
    }
}
