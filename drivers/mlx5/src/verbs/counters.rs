//! Counters through the context: Q counter sets and the vport's traffic counters
//! ([`crate::counters`]).

use mlx5_prm::{opcode, query_vport_counter_in, query_vport_counter_out};

use super::*;
use crate::counters::{CounterSet, CounterSetInner, VportCounters};

impl<H: Hal> Context<H> {
    /// ALLOC_Q_COUNTER: a new counter set. A device with `max_qp_cnt` 0 has none
    /// ([`Error::Unsupported`], before any command); a device whose sets are all taken fails
    /// the command (`LIM_ERR` on the emulated HCA: [`Error::Command`]). An id of 0 in the
    /// answer is not a set the driver can use ([`Error::BadFirmwareReply`]): Linux treats 0 as
    /// "none allocated" (`mlx5_ib_counter_bind_qp` allocates when `counter->id` is 0).
    pub fn alloc_counter_set(&self) -> Result<CounterSet<H>> {
        Ok(CounterSet {
            inner: Arc::new(CounterSetInner::alloc(self.inner_arc())?),
        })
    }

    /// QUERY_VPORT_COUNTER of the function's own vport; `clear` zeroes the counters after
    /// the read.
    pub fn query_vport_counters(&self, clear: bool) -> Result<VportCounters> {
        let mut c = CmdBuf::new(
            opcode::QUERY_VPORT_COUNTER,
            0,
            query_vport_counter_in::BYTES,
        );
        c.set(query_vport_counter_in::CLEAR, clear.into());
        let mut out = [0u8; query_vport_counter_out::BYTES];
        self.inner_arc().exec(&c, &mut out)?;
        Ok(VportCounters::parse(&out))
    }
}
