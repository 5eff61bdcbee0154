//! The data path's view of the device: the parts a doorbell, a poll of the wire or a QP
//! transition uses, borrowed apart from [`crate::hca::Hca`] once per entry
//! ([`crate::hca::Hca::dp`]), so the data path imports the parts and not the HCA.

use std::sync::Arc;

use crate::control::Control;
use crate::datapath::Doorbells;
use crate::events::{Events, Sink};
use crate::memory::GuestMemory;
use crate::objects::cq::CqTable;
use crate::objects::Objects;
use crate::wire::Port;
use mlx5_prm::Field;

/// The parts of the device the data path uses, borrowed apart.
pub struct Dp<'a> {
    /// Guest memory (every DMA goes through it).
    pub(crate) mem: &'a Arc<dyn GuestMemory>,
    pub(crate) control: &'a mut Control,
    pub(crate) objects: &'a mut Objects,
    pub(crate) events: &'a mut Events,
    pub(crate) doorbells: &'a mut Doorbells,
    /// The port and the wire.
    pub(crate) port: &'a mut Port,
}

impl Dp<'_> {
    /// The object tables, the event sink and the port, borrowed apart (the data path holds
    /// the tables while it posts completions and events and queues packets).
    pub(crate) fn split(&mut self) -> (&mut Objects, Sink<'_>, &mut Port) {
        let sink = Sink {
            events: self.events,
            control: self.control,
            mem: self.mem,
        };
        (self.objects, sink, self.port)
    }

    /// The event sink, borrowed apart from the object tables and the port.
    pub(crate) fn sink(&mut self) -> Sink<'_> {
        self.split().1
    }

    /// The CQ table and the event sink, borrowed apart (posting a CQE).
    pub(crate) fn cqs_and_sink(&mut self) -> (&mut CqTable, Sink<'_>) {
        let (objects, sink, _) = self.split();
        (&mut objects.cqs, sink)
    }

    /// A field of the CURRENT general capabilities (`cmd_hca_cap`).
    pub(crate) fn cap(&self, field: Field) -> u32 {
        self.control.caps.general(field)
    }

    /// The GID at `index` of the RoCE address table, if one is set.
    pub(crate) fn roce_gid(&self, index: u32) -> Option<[u8; 16]> {
        self.objects.vport.gid(index)
    }

    /// The port's MAC address.
    pub(crate) fn mac(&self) -> [u8; 6] {
        self.objects.vport.mac()
    }

    /// Posts an event to every EQ whose event_bitmask asked for `event_type`.
    pub(crate) fn post_async_event(&mut self, event_type: u8, sub_type: u8, data: &[u8]) {
        self.sink().post_async_event(event_type, sub_type, data)
    }

    /// A trace note.
    pub(crate) fn trace(&mut self, args: std::fmt::Arguments<'_>) {
        self.control.trace.note(args);
    }

    /// A trace note (the name the data plane uses).
    pub(crate) fn trace_note(&mut self, args: std::fmt::Arguments<'_>) {
        self.control.trace.note(args);
    }
}
