//! The object tables: every object a command creates (PD / TD, UAR, memory key, CQ, QP, Q
//! counter set) and the NIC vport's context. One part of [`crate::hca::Hca`]: commands and
//! the data path borrow the tables they use.

use counter::QCounterTable;
use pd::{PdTable, TdTable};
use uar::UarTable;
use vport::Vport;
pub mod counter;
pub mod cq;
pub mod eq;
pub(crate) mod flow;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod uar;
pub mod vport;

/// The object tables.
pub(crate) struct Objects {
    /// Memory keys.
    pub(crate) mkeys: mr::MkeyTable,
    /// Completion queues.
    pub(crate) cqs: cq::CqTable,
    /// Queue pairs.
    pub(crate) qps: qp::QpTable,
    pub(crate) uars: UarTable,
    pub(crate) pds: PdTable,
    pub(crate) tds: TdTable,
    pub(crate) vport: Vport,
    /// Queue counter sets (ALLOC_Q_COUNTER).
    pub(crate) qcounters: QCounterTable,
    /// NIC receive flow steering (flow tables, groups, entries, the root).
    pub(crate) flow: flow::FlowSteering,
}

impl Objects {
    /// No objects, the vport with permanent address `mac`.
    pub(crate) fn new(mac: [u8; 6]) -> Objects {
        Objects {
            mkeys: Default::default(),
            cqs: Default::default(),
            qps: Default::default(),
            uars: UarTable::default(),
            pds: PdTable::default(),
            tds: TdTable::default(),
            vport: Vport::new(mac),
            qcounters: Default::default(),
            flow: Default::default(),
        }
    }
}
