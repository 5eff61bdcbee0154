//! The event queue: one EQ for page requests, asynchronous events and the completion events
//! of armed CQs (no command-completion events: commands are polled). The driver polls it; it
//! is also armed, as rdma-core arms its async EQ, so an interrupt-capable HAL can wait for its
//! vector (`eqc.intr` = 0, rdma-core's `MLX5_VFIO_CMD_VEC_IDX`).
//!
//! Sources: rdma-core mlx5_vfio.c `create_map_eq` / `setup_async_eq` / `mlx5_eq_get_eqe` /
//! `eq_update_ci` / `mlx5_vfio_process_async_events`, Linux core/eq.c `create_map_eq` and
//! `gather_async_events_mask`. EQEs start with owner = 1 (Linux `init_eq_buf`); EQE `ci` is the
//! software's iff `(owner & 1) == ((ci >> log2(nent)) & 1)`.
//!
//! Completion events (`MLX5_EVENT_TYPE_COMP`) of a CQ created with a
//! [`crate::CompletionChannel`] go to that channel; those of other CQs are logged with the
//! asynchronous events ([`crate::Context::take_events`]).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use mlx5_prm::{
    create_eq_in, create_eq_out, destroy_eq_in, destroy_eq_out, eq, eqc, event, opcode, pages, uar,
};

use crate::cmd::{get, CmdBuf};
use crate::error::Result;
use crate::hal::{Bar, DmaMem, Hal};
use crate::hca::Device;
use crate::uar::Uar;

/// Entries the EQ is sized for, plus `MLX5_NUM_SPARE_EQE` (Linux include/linux/mlx5/eq.h).
const EQ_NENT: u32 = 64;
/// Asynchronous events the driver keeps (oldest dropped first).
const EVENT_LOG: usize = 64;
/// `eqc.intr`: MSI-X vector 0 (rdma-core mlx5_vfio.c `MLX5_VFIO_CMD_VEC_IDX`).
const EQ_VECTOR: u32 = 0;

/// An asynchronous event the device reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// A completion event of an armed CQ (`MLX5_EVENT_TYPE_COMP`, `comp_event.cq_number`).
    Completion {
        /// The CQ number.
        cqn: u32,
    },
    /// `PORT_CHANGE` with its sub-type (`MLX5_PORT_CHANGE_SUBTYPE_*`).
    PortChange {
        /// Port number.
        port: u8,
        /// Sub-type.
        subtype: u8,
    },
    /// `CQ_ERROR` (overrun or access error) for a CQ.
    CqError {
        /// The CQ number.
        cqn: u32,
        /// The syndrome.
        syndrome: u8,
    },
    /// A QP-affiliated event (`WQ_CATAS_ERROR`, `WQ_ACCESS_ERROR`, `WQ_INVAL_REQ_ERROR`,
    /// `COMM_EST`, `SQ_DRAINED`, `PATH_MIG`, ...).
    Qp {
        /// The event type.
        event_type: u8,
        /// The QP number.
        qpn: u32,
    },
    /// Any other event type.
    Other {
        /// The event type.
        event_type: u8,
        /// The sub-type.
        subtype: u8,
    },
}

/// The EQ.
pub(crate) struct EventQueue<H: Hal> {
    buf: DmaMem<H::Dma>,
    log_nent: u32,
    ci: u32,
    /// EQEs consumed since the consumer index was last written to the doorbell.
    pending_ci: u32,
    pub(crate) eqn: u8,
    uar: Uar,
    pub(crate) events: VecDeque<AsyncEvent>,
    /// True while the EQ is armed: set by the arm doorbell, cleared when an EQE is consumed
    /// (the device disarms the EQ when it writes an EQE to it).
    armed: bool,
    /// Where the completion events of each CQ go (every CQ of the context is listed).
    pub(crate) comp_routes: BTreeMap<u32, Arc<CqNotify>>,
}

/// The event types the EQ subscribes to: page requests plus Linux's unconditional async set
/// (Linux core/eq.c `gather_async_events_mask`, `MLX5_ASYNC_EVENT_MASK`).
fn event_mask() -> u64 {
    [
        event::PAGE_REQUEST,
        event::PATH_MIG,
        event::COMM_EST,
        event::SQ_DRAINED,
        event::SRQ_LAST_WQE,
        event::SRQ_RQ_LIMIT,
        event::CQ_ERROR,
        event::WQ_CATAS_ERROR,
        event::PATH_MIG_FAILED,
        event::WQ_INVAL_REQ_ERROR,
        event::WQ_ACCESS_ERROR,
        event::SRQ_CATAS_ERROR,
        event::PORT_CHANGE,
    ]
    .iter()
    .fold(0u64, |m, &t| m | event::bitmask_word_bit(t).1)
}

/// A decoded EQE the device handed over.
pub(crate) enum Eqe {
    PageRequest { func_id: u16, num_pages: i32 },
    Event(AsyncEvent),
}

impl<H: Hal> EventQueue<H> {
    /// The CPU address of the next EQE (64-byte aligned) with the owner value that marks it
    /// as software's in bit 0: what [`crate::verbs`] peeks at without the device lock.
    pub(crate) fn peek_word(&self) -> usize {
        let nent = 1u32 << self.log_nent;
        let off = (self.ci & (nent - 1)) as usize * eq::EQE_SIZE;
        // off + EQE_SIZE <= the buffer's nent * EQE_SIZE bytes: inside the allocation.
        let addr = self.buf.ptr() as usize + off;
        addr | ((self.ci >> self.log_nent) & 1) as usize
    }

    /// Number of entries in the ring.
    pub(crate) fn entries(&self) -> usize {
        1usize << self.log_nent
    }

    /// True when the next EQE is software's.
    pub(crate) fn peek_ready(&self) -> bool {
        let nent = 1u32 << self.log_nent;
        let off = (self.ci & (nent - 1)) as usize * eq::EQE_SIZE + eq::EQE_SIZE - 1;
        match self.buf.read_u8(off) {
            Ok(owner) => (owner & 1) as u32 == (self.ci >> self.log_nent) & 1,
            Err(_) => false,
        }
    }

    /// Takes the next EQE, if the device produced one.
    pub(crate) fn next(&mut self, hal: &H) -> Result<Option<Eqe>> {
        if !self.peek_ready() {
            return Ok(None);
        }
        hal.dma_rmb();
        let nent = 1u32 << self.log_nent;
        let base = (self.ci & (nent - 1)) as usize * eq::EQE_SIZE;
        let mut e = [0u8; eq::EQE_SIZE];
        self.buf.read_volatile(base, &mut e)?;
        self.ci = self.ci.wrapping_add(1);
        self.pending_ci += 1;
        self.armed = false;
        // mlx5_eq_update_cc: write the CI at least every MLX5_NUM_SPARE_EQE entries.
        if self.pending_ci >= eq::NUM_SPARE_EQE / 2 {
            self.update_ci(hal)?;
        }
        let ty = e[1];
        let sub = e[3];
        let d = &e[eq::EQE_DATA_OFFSET..];
        let be32 = |o: usize| u32::from_be_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]);
        Ok(Some(match ty {
            // struct mlx5_eqe_page_req: be16 ec_function, be16 func_id, be32 num_pages
            // (Linux device.h:658; core/pagealloc.c `req_pages_handler`).
            event::PAGE_REQUEST => {
                let ec = u16::from_be_bytes([d[0], d[1]]);
                let func_id = u16::from_be_bytes([d[2], d[3]]);
                let num_pages = be32(4) as i32;
                if ec & pages::EC_FUNCTION_MASK != 0 {
                    Eqe::Event(AsyncEvent::Other {
                        event_type: ty,
                        subtype: sub,
                    })
                } else {
                    Eqe::PageRequest { func_id, num_pages }
                }
            }
            // comp_event.cq_number: bit 0xc8, 24 bits (data bytes 25..28).
            event::COMP => Eqe::Event(AsyncEvent::Completion {
                cqn: be32(24) & 0xff_ffff,
            }),
            // port_state_change_event.port_num: bits 0x40..0x44 of the data (the high nibble
            // of data byte 8).
            event::PORT_CHANGE => Eqe::Event(AsyncEvent::PortChange {
                port: d[8] >> 4,
                subtype: sub,
            }),
            // cq_error: cqn at bit 0x8 (24 bits), syndrome at bit 0x58 (data byte 11).
            event::CQ_ERROR => Eqe::Event(AsyncEvent::CqError {
                cqn: be32(0) & 0xff_ffff,
                syndrome: d[11],
            }),
            // qp_events: qpn_rqn_sqn at bit 0xc8 (24 bits, data bytes 25..28).
            event::PATH_MIG
            | event::COMM_EST
            | event::SQ_DRAINED
            | event::SRQ_LAST_WQE
            | event::WQ_CATAS_ERROR
            | event::PATH_MIG_FAILED
            | event::WQ_INVAL_REQ_ERROR
            | event::WQ_ACCESS_ERROR => Eqe::Event(AsyncEvent::Qp {
                event_type: ty,
                qpn: be32(24) & 0xff_ffff,
            }),
            _ => Eqe::Event(AsyncEvent::Other {
                event_type: ty,
                subtype: sub,
            }),
        }))
    }

    /// Writes the consumer index without arming (`(ci & 0xffffff) | eqn << 24` to UAR + 0x48,
    /// rdma-core `eq_update_ci` with arm = 0).
    pub(crate) fn update_ci(&mut self, hal: &H) -> Result<()> {
        if self.pending_ci == 0 {
            return Ok(());
        }
        self.pending_ci = 0;
        hal.dma_wmb();
        Bar(hal).write32(
            self.uar.offset + uar::EQ_DOORBELL_NO_ARM,
            eq::doorbell_value(self.eqn, self.ci),
        )
    }

    /// Writes the consumer index and arms the EQ (`(ci & 0xffffff) | eqn << 24` to UAR + 0x40,
    /// rdma-core `eq_update_ci` with arm = 1, as `setup_async_eq` does after CREATE_EQ and
    /// `mlx5_vfio_process_async_events` after each round).
    pub(crate) fn arm(&mut self, hal: &H) -> Result<()> {
        hal.dma_wmb();
        Bar(hal).write32(
            self.uar.offset + uar::EQ_DOORBELL,
            eq::doorbell_value(self.eqn, self.ci),
        )?;
        self.pending_ci = 0;
        self.armed = true;
        Ok(())
    }

    /// True while the EQ is armed (see [`EventQueue::arm`]).
    pub(crate) fn is_armed(&self) -> bool {
        self.armed
    }

    /// A completion event of CQ `cqn`: to its channel, or to the log (rdma-core
    /// `mlx5_cq_event` advances the CQ's arm sequence number once per event; for a CQ without
    /// a channel the event is delivered here, to the log).
    fn completion_event(&mut self, cqn: u32) {
        match self.comp_routes.get(&cqn) {
            Some(n) => {
                if !n.deliver() {
                    self.log_event(AsyncEvent::Completion { cqn });
                }
            }
            None => self.log_event(AsyncEvent::Completion { cqn }),
        }
    }

    /// Takes QP `qpn`'s events ([`AsyncEvent::Qp`]) out of the log, oldest first; the
    /// others stay.
    pub(crate) fn take_qp_events(&mut self, qpn: u32) -> Vec<AsyncEvent> {
        let mut mine = Vec::new();
        self.events.retain(|e| match e {
            AsyncEvent::Qp { qpn: q, .. } if *q == qpn => {
                mine.push(*e);
                false
            }
            _ => true,
        });
        mine
    }

    pub(crate) fn log_event(&mut self, e: AsyncEvent) {
        if self.events.len() == EVENT_LOG {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }
}

impl<H: Hal> Device<H> {
    /// CREATE_EQ: one contiguous buffer, one `pas` entry whose page is the whole buffer
    /// (rdma-core `create_map_eq`: log_page_size = log2(size) - 12, RELATIVE to 4 KiB).
    pub(crate) fn create_eq(&mut self, hal: &H, uar: Uar) -> Result<EventQueue<H>> {
        // Constants only: EQ_NENT + NUM_SPARE_EQE = 192, rounded up to 256 entries of 64 B.
        let nent = (EQ_NENT + eq::NUM_SPARE_EQE).next_power_of_two();
        let log_nent = nent.trailing_zeros();
        let size = (nent as usize * eq::EQE_SIZE).max(4096);
        let buf = DmaMem::alloc(hal, size, size)?;
        for i in 0..nent as usize {
            buf.write_u8(i * eq::EQE_SIZE + eq::EQE_SIZE - 1, eq::EQE_OWNER_INIT_VAL)?;
        }
        hal.dma_wmb();
        let mut c = CmdBuf::new(opcode::CREATE_EQ, 0, create_eq_in::PAS.bytes_with(1));
        let ctx = |f: mlx5_prm::Field| f.within(create_eq_in::EQ_CONTEXT_ENTRY);
        // intr: the MSI-X vector the EQ's interrupt goes to; vector 0, as rdma-core
        // mlx5_vfio.c `create_async_eqs` (irq_index = MLX5_VFIO_CMD_VEC_IDX, the first one).
        c.set(ctx(eqc::LOG_EQ_SIZE), log_nent)
            .set(ctx(eqc::UAR_PAGE), uar.index)
            .set(ctx(eqc::INTR), EQ_VECTOR)
            .set(ctx(eqc::LOG_PAGE_SIZE), size.trailing_zeros() - 12);
        // event_bitmask[0] holds types 0..63 (Linux core/eq.c `create_map_eq`).
        c.set64(create_eq_in::EVENT_BITMASK.elem(0), event_mask());
        c.put64(create_eq_in::PAS.byte_offset(), buf.bus());
        let mut out = [0u8; create_eq_out::BYTES];
        if let Err(e) = self.exec(hal, &c, &mut out) {
            // A garbled or missing reply: the device may have made the EQ on this buffer.
            self.release_after(&e, [buf]);
            return Err(e);
        }
        let eqn = get(&out, create_eq_out::EQ_NUMBER) as u8;
        let mut q = EventQueue {
            buf,
            log_nent,
            ci: 0,
            pending_ci: 0,
            eqn,
            uar,
            events: VecDeque::new(),
            armed: false,
            comp_routes: BTreeMap::new(),
        };
        // Tell the device the initial consumer index and arm the EQ (rdma-core
        // setup_async_eq: `eq_update_ci(eq, 0, 1)`).
        if let Err(e) = q.arm(hal) {
            // The EQ exists but cannot be used: take it down; its buffer is freed only once
            // the device gave it back.
            if self.destroy_eq(hal, eqn).is_err() {
                self.hold([q.buf]);
            }
            return Err(e);
        }
        Ok(q)
    }

    /// DESTROY_EQ.
    pub(crate) fn destroy_eq(&mut self, hal: &H, eqn: u8) -> Result<()> {
        let mut c = CmdBuf::new(opcode::DESTROY_EQ, 0, destroy_eq_in::BYTES);
        c.set(destroy_eq_in::EQ_NUMBER, eqn.into());
        let mut out = [0u8; destroy_eq_out::BYTES];
        self.exec(hal, &c, &mut out)
    }

    /// Processes every EQE the device produced: page requests are satisfied at once (on a
    /// command slot of their own when `nested`), other events are logged.
    pub(crate) fn service_events(&mut self, hal: &H, nested: bool) -> Result<usize> {
        let mut n = 0;
        // A device that keeps producing events must not hold the caller here forever: one
        // call consumes at most two laps of the ring; the rest waits for the next call.
        let budget = self.eq.as_ref().map_or(0, |q| 2 * q.entries());
        // A failure while serving one EQE (a page request the driver refuses or cannot
        // allocate for) still ends the round: the consumer index goes back and the EQ is
        // re-armed, or an interrupt-driven HAL would never hear from this EQ again.
        let mut failed = None;
        while n < budget {
            let e = match self.eq.as_mut() {
                Some(q) => q.next(hal)?,
                None => return Ok(n),
            };
            let Some(e) = e else { break };
            n += 1;
            let r = match e {
                // rdma-core mlx5_vfio_handle_page_req_event.
                Eqe::PageRequest { func_id, num_pages } if num_pages > 0 => {
                    self.give_pages(hal, func_id, num_pages as u32, nested)
                }
                Eqe::PageRequest { func_id, num_pages } if num_pages < 0 => self
                    .reclaim_pages(hal, func_id, num_pages.unsigned_abs(), nested)
                    .map(|_| ()),
                Eqe::PageRequest { .. } => Ok(()),
                Eqe::Event(ev) => {
                    if let Some(q) = self.eq.as_mut() {
                        match ev {
                            AsyncEvent::Completion { cqn } => q.completion_event(cqn),
                            _ => q.log_event(ev),
                        }
                    }
                    Ok(())
                }
            };
            if let Err(e) = r {
                failed = Some(e);
                break;
            }
        }
        if let Some(q) = self.eq.as_mut() {
            // rdma-core mlx5_vfio_process_async_events: the consumer index with arm at the
            // end of each round (`eq_update_ci(eq, cc, 1)`); only needed when the device
            // disarmed the EQ, i.e. an EQE was consumed.
            if q.is_armed() {
                q.update_ci(hal)?;
            } else {
                q.arm(hal)?;
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}

/// A CQ's completion-event state, shared by the CQ, the event queue's routing table and the
/// CQ's [`CompletionChannel`](crate::cq::CompletionChannel).
pub(crate) struct CqNotify {
    pub(crate) cqn: u32,
    /// rdma-core `mlx5_cq.arm_sn`: the sequence number the arm doorbell carries; advanced once
    /// per completion event (rdma-core cq.c `mlx5_cq_event`, which libibverbs
    /// `ibv_get_cq_event` calls), never by arming.
    pub(crate) arm_sn: AtomicU32,
    /// Events handed out by the channel and not yet acknowledged ([`CompletionQueue::ack_events`](crate::cq::CompletionQueue::ack_events)).
    pub(crate) unacked: AtomicU32,
    pub(crate) channel: Option<Arc<ChannelShared>>,
}

impl CqNotify {
    /// A completion event of this CQ was consumed from the EQ: queued on the channel (its
    /// sequence number advances when the channel hands it out), or, without a channel,
    /// delivered to the event log by the caller (false; the sequence number advances now).
    pub(crate) fn deliver(self: &Arc<Self>) -> bool {
        match &self.channel {
            Some(c) => {
                c.pending.lock().push_back(Arc::downgrade(self));
                true
            }
            None => {
                self.arm_sn.fetch_add(1, Ordering::AcqRel);
                false
            }
        }
    }
}

/// A completion channel's queue of completion events.
pub(crate) struct ChannelShared {
    pub(crate) pending: spin::Mutex<VecDeque<Weak<CqNotify>>>,
}

#[cfg(test)]
mod tests {
    use crate::test_hal::{test_config, SimHal, TestHal};

    use crate::error::Error;

    #[test]
    fn a_garbled_create_eq_reply_quarantines_the_eq_buffer() {
        let sim = SimHal::new();
        let hal = TestHal(sim.clone());
        let o = crate::hca::open(&hal, &test_config()).expect("bring-up");
        let mut dev = o.dev;
        assert_eq!(dev.quarantine.stats(), (0, 0));
        // The device makes a second EQ, but its reply comes back garbled.
        sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
        let e = dev.create_eq(&hal, o.uar).err();
        assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x301 }));
        // 256 EQEs of 64 bytes the device may write: set aside, not freed.
        assert_eq!(dev.quarantine.stats(), (1, 256 * 64));
        // A refused CREATE_EQ (firmware status) took nothing: freed.
        sim.with_hca(|h| h.update_faults(|f| f.next_delivery_status = Some(0x6)));
        assert!(dev.create_eq(&hal, o.uar).is_err());
        assert_eq!(dev.quarantine.stats(), (1, 256 * 64));
        let _ = crate::hca::close(&hal, &mut dev, o.uar, o.tdn);
    }
}
