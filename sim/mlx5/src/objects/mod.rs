//! The object tables: every object a command creates (PD / TD, UAR, memory key, CQ, QP, Q
//! counter set, the Ethernet queues: TIS, SQ, RQ, TIR) and the NIC vport's context. One part of [`crate::hca::Hca`]: commands and
//! the data path borrow the tables they use.

use counter::QCounterTable;
use pd::{PdTable, TdTable};
use uar::UarTable;
use vport::Vport;
pub mod counter;
pub mod cq;
pub mod eq;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod rq;
pub mod sq;
pub mod tir;
pub mod tis;
pub mod uar;
pub mod vport;
pub mod wq;

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
    /// Transport interface send objects.
    pub(crate) tises: tis::TisTable,
    /// Ethernet send queues.
    pub(crate) sqs: sq::SqTable,
    /// Ethernet receive queues.
    pub(crate) rqs: rq::RqTable,
    /// Transport interface receive objects.
    pub(crate) tirs: tir::TirTable,
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
            tises: Default::default(),
            sqs: Default::default(),
            rqs: Default::default(),
            tirs: Default::default(),
        }
    }

    /// A number for a new QP, SQ or RQ: the three share one number space, so the QPN a send
    /// doorbell names (`qpn_ds` of the ctrl segment, [`crate::datapath::sq_doorbell`]) is one
    /// queue's.
    pub(crate) fn alloc_queue_number(&mut self) -> u32 {
        loop {
            let n = self.qps.alloc_qpn();
            if !self.sqs.contains(n) && !self.rqs.contains(n) {
                return n;
            }
        }
    }
}
