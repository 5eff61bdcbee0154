//! Queue counter sets ("Q counters"): ALLOC_Q_COUNTER (0x771), DEALLOC_Q_COUNTER (0x772) and
//! QUERY_Q_COUNTER (0x773).
//!
//! A Q counter set collects the RoCE transport counters of the QPs attached to it (Linux
//! net/mlx5 commit "Introduce device queue counters": "A queue counter can collect several
//! statistics for one or more hardware queues (QPs, RQs, etc ..) that the counter is attached
//! to"). A QP is attached through `qpc.counter_set_id`, which Linux
//! drivers/infiniband/hw/mlx5/qp.c `__mlx5_ib_modify_qp` writes on RST2INIT and INIT2RTR, and
//! `__mlx5_ib_qp_set_counter` changes on an RTS QP with RTS2RTS and the
//! `MLX5_QP_OPTPAR_COUNTER_SET_ID` optional parameter (when `rts2rts_qp_counters_set_id` is
//! advertised). Linux allocates one set per port at start (counters.c
//! `mlx5_ib_alloc_counters` → `mlx5_cmd_alloc_q_counter`) and one per bound `rdma_counter`
//! (`mlx5_ib_counter_bind_qp`), and reads a set with QUERY_Q_COUNTER
//! (`mlx5_ib_query_q_counters`: the 32-bit fields of `query_q_counter_out` at their
//! `MLX5_BYTE_OFF`).
//!
//! # The model
//!
//! - At most `cmd_hca_cap.max_qp_cnt` ([`crate::control::caps::MAX_QP_CNT`]) sets exist at once, counting set 0
//!   (Linux core/vport.c `mlx5_vport_max_q_counter_allocator` splits `max_qp_cnt` between its
//!   clients). The field `counter_set_id` is 8 bits wide in `alloc_q_counter_out`,
//!   `dealloc_q_counter_in`, `query_q_counter_in` and the QPC, so ids are 1..=255.
//! - **Set 0 is the port's** (model choice: no source says what firmware reports for it): it
//!   always exists, cannot be allocated or freed, and counts every QP. A QPC whose
//!   `counter_set_id` is 0 counts in set 0 only.
//! - An allocated set counts the QPs attached to it, from the transition that named it to the
//!   move to RESET, the next transition naming another set, or DESTROY_QP. A QPC naming a set
//!   that is not allocated is refused (BAD_PARAM; model choice: strict, as a driver
//!   must never name a set it does not own).
//! - DEALLOC_Q_COUNTER of a set a QP is still attached to is refused with RES_BUSY (model
//!   choice, like every release of an object another one names, hca.rs; Linux never does it:
//!   drivers/infiniband/core/counters.c counts a counter's QPs in its kref, and only
//!   `counter_release`, after the last unbind, calls the driver's `counter_dealloc`).
//! - QUERY_Q_COUNTER reports the `QCounter` counters of roce/counters.rs at
//!   `Counter::q_counter_offset`; `clear` (`query_q_counter_in.clear`) zeroes the reported
//!   counters after the read. `aggregate` is refused (model choice: no aggregation groups).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::control::caps::Caps;
use crate::control::result::CmdResult;
use crate::control::result::{fail, get, put};
use crate::control::syndrome;
use crate::objects::Objects;
use crate::roce::counters::{Counter, PortCounters};
use crate::wire::Port;
use mlx5_prm::{
    alloc_q_counter_out, cmd_hca_cap, cmd_status, dealloc_q_counter_in, query_q_counter_in,
};

/// The allocated counter sets (set 0, the port's, is not in the table).
#[derive(Debug, Default)]
pub struct QCounterTable {
    sets: BTreeMap<u8, Arc<PortCounters>>,
}

impl QCounterTable {
    /// True if `id` is set 0 or an allocated set.
    pub fn exists(&self, id: u8) -> bool {
        id == 0 || self.sets.contains_key(&id)
    }

    /// The counters of allocated set `id` (None for 0 and unknown ids).
    pub fn get(&self, id: u8) -> Option<&Arc<PortCounters>> {
        self.sets.get(&id)
    }

    /// Number of allocated sets (set 0 not included).
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    /// True if no set is allocated.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

/// Adds `n` to counter `c` of the set QP `qpn` is attached to, if any (the port's set 0 is
/// counted by the caller). The data path calls it only when a counter moved.
pub(crate) fn add_for_qp(objects: &crate::objects::Objects, qpn: u32, c: Counter, n: u64) {
    let Some(id) = objects.qps.get(qpn).map(|q| q.counter_set) else {
        return;
    };
    if let Some(set) = objects.qcounters.get(id) {
        set.add(c, n);
    }
}

/// ALLOC_Q_COUNTER (0x771): the lowest free id.
pub(crate) fn cmd_alloc_q_counter(
    caps: &Caps,
    objects: &mut Objects,
    _input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let limit = caps.general(cmd_hca_cap::MAX_QP_CNT).min(256) as usize;
    // Set 0 takes one of the `max_qp_cnt`.
    if objects.qcounters.sets.len() + 1 >= limit {
        return fail(cmd_status::LIM_ERR, syndrome::Q_COUNTER_LIMIT);
    }
    let Some(id) = (1..=u8::MAX).find(|i| !objects.qcounters.sets.contains_key(i)) else {
        return fail(cmd_status::LIM_ERR, syndrome::Q_COUNTER_LIMIT);
    };
    objects
        .qcounters
        .sets
        .insert(id, Arc::new(PortCounters::new()));
    put(out, alloc_q_counter_out::COUNTER_SET_ID, id.into());
    Ok(())
}

/// DEALLOC_Q_COUNTER (0x772).
pub(crate) fn cmd_dealloc_q_counter(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let id = get(input, dealloc_q_counter_in::COUNTER_SET_ID) as u8;
    if id == 0 || !objects.qcounters.sets.contains_key(&id) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::Q_COUNTER_UNKNOWN);
    }
    if objects.qps.iter().any(|q| q.counter_set == id) {
        return fail(cmd_status::RES_BUSY, syndrome::Q_COUNTER_BUSY);
    }
    if objects.rqs.uses_counter_set(id) {
        return fail(cmd_status::RES_BUSY, syndrome::Q_COUNTER_BUSY_RQ);
    }
    objects.qcounters.sets.remove(&id);
    Ok(())
}

/// QUERY_Q_COUNTER (0x773): set 0 (the port's) or an allocated set.
pub(crate) fn cmd_query_q_counter(
    _caps: &Caps,
    objects: &mut Objects,
    port: &mut Port,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    // other_vport / vport_number: only our own vport.
    if get(input, query_q_counter_in::OTHER_VPORT) != 0
        || get(input, query_q_counter_in::VPORT_NUMBER) != 0
    {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_OTHER);
    }
    if get(input, query_q_counter_in::AGGREGATE) != 0 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::Q_COUNTER_AGGREGATE);
    }
    let id = get(input, query_q_counter_in::COUNTER_SET_ID) as u8;
    let set = if id == 0 {
        port.counters().clone()
    } else {
        match objects.qcounters.get(id) {
            Some(s) => s.clone(),
            None => return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_COUNTER_SET),
        }
    };
    let clear = get(input, query_q_counter_in::CLEAR) != 0;
    for c in Counter::ALL.iter().copied() {
        let Some(at) = c.q_counter_offset() else {
            continue;
        };
        // The PRM fields are 32 bits and wrap.
        out[at..at + 4].copy_from_slice(&(set.get(c) as u32).to_be_bytes());
        if clear {
            set.reset(c);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_zero_always_exists_and_unknown_ids_do_not() {
        let mut t = QCounterTable::default();
        assert!(t.exists(0));
        assert!(!t.exists(1));
        t.sets.insert(1, Arc::new(PortCounters::new()));
        assert!(t.exists(1) && t.get(1).is_some() && t.get(0).is_none());
        assert_eq!(t.len(), 1);
    }
}
