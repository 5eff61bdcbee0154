//! The event sink: the event queues (EQE and async-event posting, see [`crate::eq`]) and the
//! INTx line they raise. One part of [`crate::hca::Hca`].

use crate::eq::EqTable;
use crate::pci::Intx;

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
