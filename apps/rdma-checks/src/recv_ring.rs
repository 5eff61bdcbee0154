//! A perftest-style SEND receiver's receive queue: how many receives it keeps posted and when it
//! reposts them (the unikernel's `perftest` app, apps/src/bin/perftest/recv.rs, uses it as the
//! other side of Linux's `ib_send_bw` and `ib_send_lat`).
//!
//! perftest 4.5 (linux-rdma/perftest, src/perftest_parameters.c, src/perftest_resources.c):
//! - `rx_depth` for SEND tools is `DEF_RX_SEND` = 512 (`init_perftest_params`); with a fixed
//!   iteration count it is capped at `-n` (`force_dependecies`), and an odd value is made even
//!   unless `-a` runs every size ("WA for a bug when rx_depth is odd in SEND"). The receive
//!   queue holds `rx_depth` WQEs (`ctx_init`: `max_recv_wr = rx_depth`; the SRQ's `max_wr`
//!   with `--use_srq`) and the receive CQ `rx_depth` entries (`create_reg_cqs`).
//! - Before each size the server posts `rx_depth` receives (`ctx_set_recv_wqes`, posted
//!   before the handshake that lets the client send).
//! - For every receive completion it posts one receive again at once, before it looks at
//!   anything else, while fewer than `-n` have been posted (`run_iter_bw_server`:
//!   `posted_per_qp + recv_post_list <= iters`; always with `-D`); `run_iter_lat_send` does
//!   the same.
//!
//! So the receive queue never holds fewer than `min(rx_depth, what is still due)` receives
//! once a completion has been taken, and a client that keeps at most `tx_depth` (128) SENDs in
//! flight never meets an empty queue, never draws an RNR NAK.
//!
//! Unlike perftest (whose buffers are `rand()` and whose large receives all land on one
//! address), the receiver here checks every message, so receive `k` has a slot of its own
//! when there are more slots than `rx_depth` ([`RecvRing::exclusive`]): the slot of the
//! message just completed is reposted only `slots - rx_depth` completions later, after the
//! caller has checked it.

use mlx5::{Hal, MemoryRegion, QueuePair, RecvWr};

/// perftest_parameters.h `DEF_RX_SEND`: the receive depth of the SEND tools.
pub const DEF_RX_SEND: u64 = 512;

/// perftest's `rx_depth` for a SEND tool: [`DEF_RX_SEND`], capped at `iters` when the run
/// counts iterations (`None`: `-D`), then made even unless `all_sizes` (`-a`).
pub fn send_rx_depth(iters: Option<u64>, all_sizes: bool) -> u64 {
    let mut d = DEF_RX_SEND;
    if let Some(n) = iters {
        d = d.min(n);
    }
    if d % 2 == 1 && !all_sizes {
        d += 1;
    }
    d.max(1)
}

/// Why the receive queue could not be kept as perftest keeps it.
#[derive(Debug)]
pub enum RecvRingError {
    /// `post_recv` of receive `index` was refused.
    Post { index: u64, err: mlx5::Error },
    /// A completion for receive `got` where `want` was due: an RC receive queue completes in
    /// order.
    OutOfOrder { got: u64, want: u64 },
    /// A completion with nothing posted.
    NothingPosted { got: u64 },
}

/// The receive queue of one size's run: receive `k` (its `wr_id`) lands in slot
/// `k mod slots` of `[base, base + slots * stride)` of the region.
pub struct RecvRing {
    depth: u64,
    want: u64,
    size: u32,
    base: u64,
    stride: u64,
    slots: u64,
    posted: u64,
    done: u64,
}

impl RecvRing {
    /// `depth`: perftest's rx_depth; `want`: the messages due (`u64::MAX` for a timed run);
    /// `size`: each receive's length; `slots` slots of `stride` bytes from `base`.
    pub fn new(depth: u64, want: u64, size: u32, base: u64, stride: u64, slots: u64) -> RecvRing {
        RecvRing {
            depth: depth.max(1),
            want,
            size,
            base,
            stride,
            slots: slots.max(1),
            posted: 0,
            done: 0,
        }
    }

    /// True when every outstanding receive and the message the caller holds have slots of
    /// their own (more slots than `depth`): the caller may check and rewrite the slot of the
    /// completion it was handed until it takes the next one.
    pub fn exclusive(&self) -> bool {
        self.slots > self.depth
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u64 {
        self.posted - self.done
    }

    /// How many slots the receives cycle through.
    pub fn slots(&self) -> u64 {
        self.slots
    }

    /// perftest's depth.
    pub fn depth(&self) -> u64 {
        self.depth
    }

    /// True when at least as many receives are posted as perftest keeps after taking the
    /// completions so far: `min(depth, messages still due)`.
    pub fn keeps_depth(&self) -> bool {
        self.outstanding() >= self.depth.min(self.want.saturating_sub(self.done))
    }

    /// Receives posted so far.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Completions taken so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// The region offset of receive `k`'s slot.
    pub fn slot(&self, k: u64) -> u64 {
        self.base + (k % self.slots) * self.stride
    }

    fn post_one<H: Hal>(
        &mut self,
        qp: &mut QueuePair<H>,
        mr: &MemoryRegion<H>,
    ) -> Result<(), RecvRingError> {
        let k = self.posted;
        let s = [mr.sge(self.slot(k), self.size)];
        qp.post_recv(&[RecvWr { wr_id: k, sges: &s }])
            .map_err(|err| RecvRingError::Post { index: k, err })?;
        self.posted += 1;
        Ok(())
    }

    /// `ctx_set_recv_wqes`: posts `depth` receives (perftest posts rx_depth whatever `-n`;
    /// rx_depth is at most `-n`, or one more when `-n` is odd). Returns how many.
    pub fn post_initial<H: Hal>(
        &mut self,
        qp: &mut QueuePair<H>,
        mr: &MemoryRegion<H>,
    ) -> Result<u64, RecvRingError> {
        while self.posted < self.depth {
            self.post_one(qp, mr)?;
        }
        Ok(self.posted)
    }

    /// Takes the completion of receive `wr_id` and, as `run_iter_bw_server` does before
    /// anything else, posts one receive again while fewer than `want` have been posted.
    /// Returns the offset of the completed receive's slot.
    pub fn complete<H: Hal>(
        &mut self,
        qp: &mut QueuePair<H>,
        mr: &MemoryRegion<H>,
        wr_id: u64,
    ) -> Result<u64, RecvRingError> {
        if self.posted == self.done {
            return Err(RecvRingError::NothingPosted { got: wr_id });
        }
        if wr_id != self.done {
            return Err(RecvRingError::OutOfOrder {
                got: wr_id,
                want: self.done,
            });
        }
        self.done += 1;
        if self.posted < self.want {
            self.post_one(qp, mr)?;
        }
        Ok(self.slot(wr_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_depth_is_perftests() {
        // DEF_RX_SEND, capped at -n, made even without -a; -D keeps 512.
        assert_eq!(send_rx_depth(Some(1000), false), 512);
        assert_eq!(send_rx_depth(Some(100), false), 100);
        assert_eq!(send_rx_depth(Some(5), false), 6);
        assert_eq!(send_rx_depth(Some(5), true), 5);
        assert_eq!(send_rx_depth(None, false), 512);
    }
}
