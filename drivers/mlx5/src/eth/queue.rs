//! [`EthQueue`]: the objects of [`crate::eth`] put together, opened in mlx5e's order and
//! closed in reverse; a frame is written in place in a transmit buffer (or copied there by
//! [`EthQueue::send`]) and posted with one WQE; receiving takes one completion of the RQ's
//! CQ, hands the frame in place in its buffer and reposts the buffer afterwards.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use mlx5_prm::{
    cap_inline_mode, cmd_hca_cap, flow_table_nic_cap, flow_table_prop_layout, hca_cap,
    nic_vport_context, per_protocol_networking_offload_caps as eth_caps,
    query_nic_vport_context_in, query_nic_vport_context_out, rqc_state, sqc_state,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::counters::CounterSetInner;
use crate::cq::{CompletionQueue, WcStatus, WorkCompletion};
use crate::error::{Error, InvalidInput, Result};
use crate::hal::Hal;
use crate::mr::Access;
use crate::pd::ProtectionDomain;
use crate::region::MemoryRegion;
use crate::uar::Uar;

use super::flow::Steering;
use super::rq::{self, Rq, RqParams};
use super::sq::{self, inline_len, InlineMode, Sq, SqParams};
use super::vport::{self, ListType};
use super::{tir, tis, EthConfig, EthError, ETH_HARD_MTU, ETH_HLEN};

/// An Ethernet queue on the function's NIC vport: send and receive raw frames (see
/// [`crate::eth`]). Made by [`crate::Context::open_eth`]; dropping it destroys its objects.
pub struct EthQueue<H: Hal> {
    /// The context's one queue, given back last.
    _claim: Claim<H>,
    ctx: Arc<CtxInner<H>>,
    mac: [u8; 6],
    /// Largest frame without FCS sent or taken.
    mtu: usize,
    /// Bytes of one transmit buffer and of one receive buffer (the receive WQE's byte count).
    tx_buf: usize,
    rx_buf: usize,
    /// Offset of the first receive buffer in `bufs` (after the transmit buffers).
    rx_at: usize,
    /// The queue's protection domain and its one region holding every buffer.
    pd: Option<ProtectionDomain<H>>,
    bufs: Option<MemoryRegion<H>>,
    lkey: u32,
    iova: u64,
    uar: Option<Uar>,
    tisn: Option<u32>,
    scq: Option<CompletionQueue<H>>,
    rcq: Option<CompletionQueue<H>>,
    sq: Option<Sq<H>>,
    rq: Option<Rq<H>>,
    tirn: Option<u32>,
    steering: Steering,
    /// The vport's address lists were set (cleared on close).
    lists: bool,
    log_max_uc: u8,
    log_max_mc: u8,
    /// Send completions in error since the queue opened, and the last one not yet taken
    /// ([`EthQueue::take_send_error`]).
    send_errors: u64,
    send_error: Option<EthError>,
    /// The good receive completion of the frame [`EthQueue::rx_frame`] handed, its buffer not
    /// posted again yet.
    held: Option<WorkCompletion>,
    /// The RQ's Q counter set (released after the RQ: dropped after `Drop::drop`).
    counter: Option<Arc<CounterSetInner<H>>>,
}

/// The queue may move to another thread (whatever owns the network stack): checked here.
#[allow(dead_code)]
fn is_send<H: Hal>(q: EthQueue<H>) -> impl Send {
    q
}

/// The addresses the queue takes frames for: the port's MAC, broadcast, and the IPv6
/// all-nodes group and the solicited-node group of the MAC's link-local (EUI-64) address
/// (RFC 4291 2.7.1, RFC 2464 7: `33:33` and the group's low 32 bits).
fn addresses(mac: [u8; 6]) -> ([[u8; 6]; 1], [[u8; 6]; 3]) {
    let uc = [mac];
    let mc = [
        [0xff; 6],
        [0x33, 0x33, 0, 0, 0, 1],
        [0x33, 0x33, 0xff, mac[3], mac[4], mac[5]],
    ];
    (uc, mc)
}

/// The context's one Ethernet queue ([`CtxInner::eth_open`]): the vport's address lists and
/// the root of its receive steering are that queue's. Given back when the queue is gone
/// (after its teardown: the field is dropped after `Drop::drop`).
struct Claim<H: Hal>(Arc<CtxInner<H>>);

impl<H: Hal> Claim<H> {
    /// Claims the context's queue, refused with [`Error::Busy`] while another is open.
    fn take(ctx: &Arc<CtxInner<H>>) -> Result<Claim<H>> {
        if ctx.eth_open.swap(true, Ordering::AcqRel) {
            return Err(Error::Busy);
        }
        Ok(Claim(ctx.clone()))
    }
}

impl<H: Hal> Drop for Claim<H> {
    fn drop(&mut self) {
        self.0.eth_open.store(false, Ordering::Release);
    }
}

/// `log_max_wq_sz`: log2 of the largest Ethernet work queue.
fn log_max_wq_sz<H: Hal>(ctx: &CtxInner<H>) -> u8 {
    get(&ctx.caps.general_cur, cmd_hca_cap::LOG_MAX_WQ_SZ) as u8
}

/// Opens an Ethernet queue on the context (see [`crate::eth`]).
pub(crate) fn open<H: Hal>(ctx: &Arc<CtxInner<H>>, cfg: &EthConfig) -> Result<EthQueue<H>> {
    if cfg.sq_depth == 0 || cfg.rq_depth == 0 {
        return Err(InvalidInput::ZeroEntries.into());
    }
    let depth = |d: u32| {
        d.checked_next_power_of_two()
            .ok_or(InvalidInput::QueueDepth {
                requested: d,
                max: 1 << 15,
            })
    };
    let (sq_entries, rq_entries) = (depth(cfg.sq_depth)?, depth(cfg.rq_depth)?);
    let claim = Claim::take(ctx)?;
    let gen = &ctx.caps.general_cur;
    // Linux core/dev.c `mlx5_eth_supported`: an Ethernet port with `eth_net_offloads` and
    // `nic_flow_table`.
    if ctx.caps.port_type != hca_cap::port_type::ETH
        || get(gen, cmd_hca_cap::ETH_NET_OFFLOADS) == 0
        || get(gen, cmd_hca_cap::NIC_FLOW_TABLE) == 0
    {
        return Err(Error::Unsupported);
    }
    let hw_mtu = ctx.with_dev(|d| d.query_vport_mtu(&ctx.hal))? as usize;
    // The largest frame without FCS: the netdev MTU (en.h MLX5E_HW2SW_MTU: hw_mtu less
    // MLX5E_ETH_HARD_MTU) plus its Ethernet header.
    let mtu = hw_mtu
        .checked_sub(ETH_HARD_MTU)
        .map(|m| m + ETH_HLEN)
        .ok_or(Error::BadFirmwareReply {
            opcode: mlx5_prm::opcode::QUERY_NIC_VPORT_CONTEXT,
        })?;
    let inline = min_inline(ctx)?;
    check_flow_caps(ctx)?;
    // Receive buffers take a tagged frame of the hardware MTU (linear, power-of-two sized,
    // as en/params.c `mlx5e_build_rq_frags_info` sizes one fragment); transmit buffers the
    // largest frame, in whole cache lines.
    let rx_buf = hw_mtu.next_power_of_two();
    let tx_buf = mtu.next_multiple_of(64);
    let mut q = EthQueue {
        _claim: claim,
        ctx: ctx.clone(),
        mac: ctx.mac,
        mtu,
        tx_buf,
        rx_buf,
        rx_at: sq_entries as usize * tx_buf,
        pd: None,
        bufs: None,
        lkey: 0,
        iova: 0,
        uar: None,
        tisn: None,
        scq: None,
        rcq: None,
        sq: None,
        rq: None,
        tirn: None,
        steering: Steering::default(),
        lists: false,
        log_max_uc: get(gen, cmd_hca_cap::LOG_MAX_CURRENT_UC_LIST) as u8,
        log_max_mc: get(gen, cmd_hca_cap::LOG_MAX_CURRENT_MC_LIST) as u8,
        send_errors: 0,
        send_error: None,
        held: None,
        counter: None,
    };
    // On an error the partly opened queue is dropped: what exists is destroyed.
    q.build(sq_entries, rq_entries, inline)?;
    Ok(q)
}

/// The device's minimum inline mode (Linux core/vport.c `mlx5_query_min_inline`: the
/// Ethernet caps' `wqe_inline_mode`; for VPORT_CONTEXT the vport's `min_wqe_inline_mode`,
/// L2 when that query fails), and whether CREATE_SQ names it.
fn min_inline<H: Hal>(ctx: &CtxInner<H>) -> Result<(InlineMode, bool)> {
    let caps = cur_caps(ctx, hca_cap::cap_type::ETHERNET_OFFLOADS)?;
    let mode = get(&caps, eth_caps::WQE_INLINE_MODE);
    if mode == cap_inline_mode::L2.into() {
        return Ok((InlineMode::L2, false));
    }
    if mode != cap_inline_mode::VPORT_CONTEXT.into() {
        return Ok((InlineMode::None, false));
    }
    let c = CmdBuf::new(
        mlx5_prm::opcode::QUERY_NIC_VPORT_CONTEXT,
        0,
        query_nic_vport_context_in::BYTES,
    );
    let mut out = vec![0u8; query_nic_vport_context_out::BYTES];
    let mode = match ctx.exec(&c, &mut out) {
        Ok(()) => InlineMode::from_raw(get(
            &out,
            nic_vport_context::MIN_WQE_INLINE_MODE
                .within(query_nic_vport_context_out::NIC_VPORT_CONTEXT),
        )),
        Err(e) if e.device_may_hold() => return Err(e),
        Err(_) => InlineMode::L2,
    };
    Ok((mode, true))
}

/// The current capabilities of type `cap_type` (QUERY_HCA_CAP, [`crate::caps`]).
fn cur_caps<H: Hal>(ctx: &CtxInner<H>, cap_type: u16) -> Result<Vec<u8>> {
    ctx.with_dev(|d| d.query_cap(&ctx.hal, cap_type, hca_cap::OPMOD_GET_CUR))
}

/// NIC receive steering as the queue uses it: Linux core/fs_core.c `mlx5_fs_core_init`
/// (`flow_table_properties_nic_receive.ft_support`), fs_core.c `connect_flow_table` (the
/// root is set only with `modify_root`), and room for the queue's table (`log_max_ft_size`).
fn check_flow_caps<H: Hal>(ctx: &CtxInner<H>) -> Result<()> {
    let caps = cur_caps(ctx, hca_cap::cap_type::FLOW_TABLE)?;
    let rx = |f: mlx5_prm::Field| {
        get(
            &caps,
            f.within(flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE),
        )
    };
    if rx(flow_table_prop_layout::FT_SUPPORT) == 0
        || rx(flow_table_prop_layout::MODIFY_ROOT) == 0
        || rx(flow_table_prop_layout::LOG_MAX_FT_SIZE) < 2
    {
        return Err(Error::Unsupported);
    }
    Ok(())
}

impl<H: Hal> EthQueue<H> {
    /// The objects, in mlx5e's order (see [`crate::eth`]): the resources every queue of a
    /// function shares (en_common.c `mlx5e_create_mdev_resources`), the channel's queues
    /// (en_main.c `mlx5e_open_channel`), then receive steering to them.
    fn build(
        &mut self,
        sq_entries: u32,
        rq_entries: u32,
        inline: (InlineMode, bool),
    ) -> Result<()> {
        let pdn = self.build_resources(rq_entries)?;
        self.build_queues(pdn, sq_entries, rq_entries, inline)?;
        self.build_steering()
    }

    /// A PD, the buffer region (mlx5e's `res->mkey`), a UAR (its `bfreg`) and a TIS on the
    /// context's transport domain (`mlx5e_create_tises`). Returns the PD number.
    fn build_resources(&mut self, rq_entries: u32) -> Result<u32> {
        let ctx = self.ctx.clone();
        let pd = self.pd.insert(ProtectionDomain::alloc_internal(&ctx)?);
        let pdn = pd.inner_arc().pdn;
        let len = self.rx_at + rq_entries as usize * self.rx_buf;
        let bufs = self.bufs.insert(pd.alloc_mr(len, Access::LOCAL_WRITE)?);
        (self.lkey, self.iova) = (bufs.lkey(), bufs.addr());
        self.uar = Some(ctx.with_dev(|d| d.alloc_uar(&ctx.hal))?);
        self.tisn = Some(tis::create(&ctx, ctx.tdn())?);
        // en_main.c mlx5e_create_q_counters: a Q counter set for the RQs, none (0, the
        // default set) when the device has no set to give.
        self.counter = match CounterSetInner::alloc(&ctx) {
            Ok(c) => Some(Arc::new(c)),
            Err(Error::Unsupported | Error::Command(_)) => None,
            Err(e) => return Err(e),
        };
        Ok(pdn)
    }

    /// The CQs, the SQ and the RQ, each moved to RDY (en_main.c `mlx5e_open_txqsq`,
    /// `mlx5e_open_rq`), the receive ring filled (`mlx5e_activate_rq`, then NAPI's
    /// `mlx5e_post_rx_wqes`) and the TIR to the RQ.
    fn build_queues(
        &mut self,
        pdn: u32,
        sq_entries: u32,
        rq_entries: u32,
        inline: (InlineMode, bool),
    ) -> Result<()> {
        let ctx = self.ctx.clone();
        let (uar, tisn) = (
            self.uar.ok_or(Error::Internal)?,
            self.tisn.ok_or(Error::Internal)?,
        );
        let scq = self.scq.insert(crate::cq::create(&ctx, sq_entries, None)?);
        let sq = self.sq.insert(sq::create(
            &ctx,
            &SqParams {
                cqn: scq.cqn(),
                tisn,
                pdn,
                uar_index: uar.index,
                uar_offset: uar.offset,
                entries: sq_entries,
                inline: inline.0,
                set_min_inline: inline.1,
                log_max_wq_sz: log_max_wq_sz(&ctx),
            },
        )?);
        scq.shared.attach(&sq.shared);
        sq.modify(&ctx, sqc_state::RST, sqc_state::RDY)?;
        let rcq = self.rcq.insert(crate::cq::create(&ctx, rq_entries, None)?);
        let rq = self.rq.insert(rq::create(
            &ctx,
            &RqParams {
                cqn: rcq.cqn(),
                pdn,
                entries: rq_entries,
                counter_set: self.counter.as_ref().map_or(0, |c| c.id),
                log_max_wq_sz: log_max_wq_sz(&ctx),
            },
        )?);
        rcq.shared.attach(&rq.shared);
        rq.modify(&ctx, rqc_state::RST, rqc_state::RDY)?;
        let rqn = rq.rqn;
        self.refill()?;
        self.tirn = Some(tir::create(&ctx, ctx.tdn(), rqn)?);
        Ok(())
    }

    /// The flow table, its group and rules to the TIR (en_fs.c), then the vport's address
    /// lists (en_fs.c `mlx5e_vport_context_update`).
    fn build_steering(&mut self) -> Result<()> {
        let ctx = self.ctx.clone();
        let tirn = self.tirn.ok_or(Error::Internal)?;
        let (uc, mc) = addresses(self.mac);
        let mut all = Vec::with_capacity(uc.len() + mc.len());
        all.extend_from_slice(&uc);
        all.extend_from_slice(&mc);
        self.steering.install(&ctx, tirn, &all)?;
        self.lists = true;
        vport::set_mac_list(&ctx, ListType::Unicast, &uc, self.log_max_uc)?;
        vport::set_mac_list(&ctx, ListType::Multicast, &mc, self.log_max_mc)
    }

    /// The send CQ's number (for the tests' faults).
    #[cfg(test)]
    pub(super) fn send_cqn(&self) -> Option<u32> {
        self.scq.as_ref().map(|c| c.cqn())
    }

    /// Rewrites the byte count of every receive WQE in the ring to `len` (the tests' receive
    /// buffers too small for a frame).
    #[cfg(test)]
    pub(super) fn shrink_rx_wqes(&self, len: u32) -> Result<()> {
        let rq = self.rq.as_ref().ok_or(Error::Closed)?;
        for i in 0..=rq.mask() {
            let at =
                i as usize * mlx5_prm::wqe::data_seg::SIZE + mlx5_prm::wqe::data_seg::BYTE_COUNT;
            rq.ring()?.write_be32(at, len)?;
        }
        Ok(())
    }

    /// The port's MAC address (the source of the frames the queue sends, the unicast
    /// destination it receives).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The largest frame, without FCS, the queue sends and takes: the vport's MTU less a VLAN
    /// tag and the FCS (1514 for the usual 1500-byte IP MTU).
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Sends one frame (destination MAC first, no FCS; the device pads short ones): copies it
    /// into the next transmit buffer ([`EthQueue::send_with`]), so `frame` may be reused as
    /// soon as this returns.
    pub fn send(&mut self, frame: &[u8]) -> core::result::Result<(), EthError> {
        self.send_with(frame.len(), |buf| buf.copy_from_slice(frame))
    }

    /// Sends a frame of `len` bytes that `f` writes in place, straight into the next transmit
    /// buffer (no copy): [`EthQueue::tx_buffer`], `f`, [`EthQueue::post_tx`]. `f` runs only
    /// once the frame has room, so a refusal leaves it unrun.
    pub fn send_with<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> core::result::Result<R, EthError> {
        let r = f(self.tx_buffer(len)?);
        self.post_tx(len)?;
        Ok(r)
    }

    /// The next transmit buffer, `len` bytes, for a frame to be written in place and sent by
    /// [`EthQueue::post_tx`]. Completions of earlier frames are collected first (one in error
    /// brings the SQ back to RDY and is kept for [`EthQueue::take_send_error`]);
    /// [`EthError::QueueFull`] when every slot is still the device's.
    pub fn tx_buffer(&mut self, len: usize) -> core::result::Result<&mut [u8], EthError> {
        self.ctx.check_alive()?;
        if len > self.mtu {
            return Err(EthError::FrameTooLarge { len, max: self.mtu });
        }
        if len < ETH_HLEN {
            return Err(EthError::FrameTooShort { len, min: ETH_HLEN });
        }
        self.reap_sends()?;
        let sq = self.sq.as_ref().ok_or(Error::Closed)?;
        if sq.outstanding() >= sq.entries {
            return Err(EthError::QueueFull);
        }
        let off = (sq.head & (sq.entries - 1)) as usize * self.tx_buf;
        let mem = self.bufs.as_ref().ok_or(Error::Closed)?.mem()?;
        // SAFETY: the slot at the SQ's head is free (fewer than `entries` frames outstanding:
        // its last send completed, or it was never posted), so the device neither reads nor
        // writes it until `post_tx` posts it; the slice borrows the queue mutably, so nothing
        // else touches the queue, nor views the slot, while it lives.
        Ok(unsafe { mem.bytes_mut(off, len)? })
    }

    /// Whether a frame has room now: completions are collected first (as
    /// [`EthQueue::tx_buffer`] does) and a dead or closed queue reads as room, so that the
    /// send reports why it cannot.
    pub fn can_send(&mut self) -> bool {
        if self.ctx.check_alive().is_err() || self.reap_sends().is_err() {
            return true;
        }
        self.sq
            .as_ref()
            .is_none_or(|sq| sq.outstanding() < sq.entries)
    }

    /// Posts the frame of `len` bytes written in the transmit buffer [`EthQueue::tx_buffer`]
    /// gave (as en_tx.c `mlx5e_sq_xmit_wqe`: the inline headers are copied from the buffer
    /// into the WQE, the data segment names the rest in place).
    pub fn post_tx(&mut self, len: usize) -> core::result::Result<(), EthError> {
        self.post_frame(len, self.lkey)
    }

    /// Posts the WQE of the frame of `len` bytes in the next transmit buffer, its headers
    /// inline and the data segment naming the rest with key `lkey`.
    fn post_frame(&mut self, len: usize, lkey: u32) -> core::result::Result<(), EthError> {
        if len > self.mtu {
            return Err(EthError::FrameTooLarge { len, max: self.mtu });
        }
        if len < ETH_HLEN {
            return Err(EthError::FrameTooShort { len, min: ETH_HLEN });
        }
        let sq = self.sq.as_mut().ok_or(Error::Closed)?;
        if sq.outstanding() >= sq.entries {
            return Err(EthError::QueueFull);
        }
        let off = (sq.head & (sq.entries - 1)) as usize * self.tx_buf;
        let mem = self.bufs.as_ref().ok_or(Error::Closed)?.mem()?;
        let hal = &self.ctx.hal;
        let addr = self.iova + off as u64;
        // SAFETY: the slot is free (checked above) and not yet posted: the device does not
        // touch it while the WQE is built from it; `&mut self` excludes every other view.
        let frame = unsafe { mem.bytes(off, len)? };
        let ihs = inline_len(sq.inline, frame);
        let rest = (len - ihs) as u32;
        sq.post(hal, &frame[..ihs], lkey, addr + ihs as u64, rest)?;
        Ok(())
    }

    /// [`EthQueue::send`] with the data segment's key replaced (the tests' bad WQEs).
    #[cfg(test)]
    pub(super) fn send_with_lkey(
        &mut self,
        frame: &[u8],
        lkey: u32,
    ) -> core::result::Result<(), EthError> {
        self.tx_buffer(frame.len())?.copy_from_slice(frame);
        self.post_frame(frame.len(), lkey)
    }

    /// Collects the send completions there are (mlx5e's `mlx5e_poll_tx_cq`): the slots of the
    /// frames they cover are free again. A completion in error brings the SQ back to RDY and
    /// is counted and kept for [`EthQueue::take_send_error`] (as mlx5e counts `cqe_err` and
    /// goes on); only a failed recovery is an error here.
    fn reap_sends(&mut self) -> Result<()> {
        if let Some(e) = self.poll_sends()? {
            self.send_errors += 1;
            self.send_error = Some(e);
            self.recover_sq()?;
        }
        Ok(())
    }

    /// Send completions in error since the queue opened ([`EthError::SendFailed`]: an
    /// earlier frame was lost; the SQ was brought back and sending went on).
    pub fn send_errors(&self) -> u64 {
        self.send_errors
    }

    /// The last send completion in error not taken yet, taken.
    pub fn take_send_error(&mut self) -> Option<EthError> {
        self.send_error.take()
    }

    /// Polls the send CQ empty; the first completion in error, if any.
    fn poll_sends(&mut self) -> Result<Option<EthError>> {
        let cq = self.scq.as_mut().ok_or(Error::Closed)?;
        let mut wc = [WorkCompletion::default(); 16];
        let mut failed = None;
        loop {
            let n = cq.poll(&mut wc)?;
            for w in &wc[..n] {
                if w.status != WcStatus::Success && failed.is_none() {
                    failed = Some(EthError::SendFailed {
                        status: w.status,
                        vendor_err: w.vendor_err,
                    });
                }
            }
            if n < wc.len() {
                return Ok(failed);
            }
        }
    }

    /// Brings an SQ in error back as en/reporter_tx.c `mlx5e_tx_reporter_err_cqe_recover`
    /// does: only if QUERY_SQ says ERR; every frame posted completes (flushed) first, within
    /// `MLX5_TO_FLUSH_ON_ERROR_MS` (lib/tout.c: 2 s; `mlx5e_wait_for_sq_flush`), then ERR to
    /// RST to RDY (en/health.c `mlx5e_health_sq_to_ready`) and the counters start over.
    fn recover_sq(&mut self) -> Result<()> {
        const FLUSH_ON_ERROR: core::time::Duration = core::time::Duration::from_millis(2000);
        let ctx = self.ctx.clone();
        let sq = self.sq.as_ref().ok_or(Error::Closed)?;
        if sq.query_state(&ctx)? != sqc_state::ERR {
            return Ok(());
        }
        let deadline = ctx.hal.now().saturating_add(FLUSH_ON_ERROR);
        while self.sq.as_ref().ok_or(Error::Closed)?.outstanding() != 0 {
            if ctx.hal.now() >= deadline {
                return Err(Error::Timeout);
            }
            self.poll_sends()?;
            ctx.hal.relax();
        }
        let sq = self.sq.as_mut().ok_or(Error::Closed)?;
        sq.modify(&ctx, sqc_state::ERR, sqc_state::RST)?;
        sq.restart()?;
        sq.modify(&ctx, sqc_state::RST, sqc_state::RDY)?;
        Ok(())
    }

    /// Frames the device dropped because no receive buffer was posted: the `out_of_buffer`
    /// counter of the queue's Q counter set (Linux en_stats.c `rx_out_of_buffer`), a 32-bit
    /// count that wraps. [`crate::Error::Unsupported`] when the device gave the queue no set.
    pub fn rx_out_of_buffer(&self) -> Result<u32> {
        let set = self.counter.as_ref().ok_or(Error::Unsupported)?;
        Ok(set.query(false)?.out_of_buffer)
    }

    /// Frames sent and not completed yet (completions are collected by the sends; this
    /// collects them too).
    pub fn sends_in_flight(&mut self) -> core::result::Result<u32, EthError> {
        self.reap_sends()?;
        Ok(self.sq.as_ref().map_or(0, |s| s.outstanding()))
    }

    /// One received frame, handed to `f` (without FCS), or `None` when none is there. Errors
    /// (a dead device, a receive completed in error) read as `None`:
    /// [`EthQueue::try_recv`] reports them.
    pub fn recv<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.try_recv(f).ok().flatten()
    }

    /// [`EthQueue::recv`] with its errors: a receive that completed in error is reported
    /// (its buffer posted again). `f` reads the frame in place ([`EthQueue::rx_frame`]), and
    /// its buffer is posted again once `f` returns ([`EthQueue::rx_done`]).
    pub fn try_recv<R>(
        &mut self,
        f: impl FnOnce(&[u8]) -> R,
    ) -> core::result::Result<Option<R>, EthError> {
        let Some(frame) = self.rx_frame()? else {
            return Ok(None);
        };
        let r = f(frame);
        self.rx_done()?;
        Ok(Some(r))
    }

    /// The next received frame (without FCS), in place in its receive buffer, or `None` when
    /// none is there. Its completion is kept, and the buffer not posted again, until
    /// [`EthQueue::rx_done`]: until then this returns the same frame. As en_rx.c
    /// `mlx5e_skb_from_cqe_linear` builds the skb over the buffer; the CQ poll's read
    /// barrier (`dma_rmb` in `mlx5_cqwq_get_cqe`) orders the frame's bytes after the
    /// completion. Errors as [`EthQueue::try_recv`]'s.
    pub fn rx_frame(&mut self) -> core::result::Result<Option<&[u8]>, EthError> {
        if self.held.is_none() {
            self.held = self.rx_completion()?;
        }
        let Some(w) = self.held else {
            return Ok(None);
        };
        let at = self.rx_at + w.wr_id as usize * self.rx_buf;
        let mem = self.bufs.as_ref().ok_or(Error::Closed)?.mem()?;
        // SAFETY: the buffer's completion was taken (the device wrote it and is done with it)
        // and the buffer is posted again only by `rx_done` or `try_recv`, which need the
        // queue mutably: the slice, which borrows the queue, is gone by then. Nothing writes
        // a receive buffer from the CPU.
        Ok(Some(unsafe { mem.bytes(at, w.byte_len as usize)? }))
    }

    /// Gives back the frame [`EthQueue::rx_frame`] handed: its buffer is posted again.
    /// Nothing when no frame is held.
    pub fn rx_done(&mut self) -> core::result::Result<(), EthError> {
        if self.held.take().is_some() {
            self.refill()?;
        }
        Ok(())
    }

    /// The next good receive completion, polled and taken. One in error, or naming more bytes than its buffer holds (which the
    /// device never writes past: a CQE the driver cannot take), is reported after the RQ
    /// is brought back or refilled.
    fn rx_completion(&mut self) -> core::result::Result<Option<WorkCompletion>, EthError> {
        self.ctx.check_alive()?;
        let cq = self.rcq.as_mut().ok_or(Error::Closed)?;
        let mut wc = [WorkCompletion::default()];
        if cq.poll(&mut wc)? == 0 {
            return Ok(None);
        }
        let w = wc[0];
        if w.status != WcStatus::Success {
            self.recover_rq()?;
            return Err(EthError::RecvFailed {
                status: w.status,
                vendor_err: w.vendor_err,
            });
        }
        if w.byte_len as usize > self.rx_buf {
            self.refill()?;
            return Err(EthError::RecvFailed {
                status: WcStatus::BadCqe,
                vendor_err: 0,
            });
        }
        Ok(Some(w))
    }

    /// After a receive completed in error: an RQ the error moved to ERR is brought back as
    /// en/reporter_rx.c `mlx5e_rx_reporter_err_rq_cqe_recover` does (en_main.c
    /// `mlx5e_flush_rq`: ERR to RST, its posted buffers and its CQ's completions dropped, RST
    /// to RDY), then filled again; otherwise the ring is refilled.
    fn recover_rq(&mut self) -> Result<()> {
        let ctx = self.ctx.clone();
        let rq = self.rq.as_mut().ok_or(Error::Closed)?;
        if rq.query_state(&ctx)? != rqc_state::ERR {
            return self.refill();
        }
        rq.modify(&ctx, rqc_state::ERR, rqc_state::RST)?;
        // en_main.c mlx5e_flush_rq_cq: what the CQ holds is dropped.
        let cq = self.rcq.as_mut().ok_or(Error::Closed)?;
        let mut wc = [WorkCompletion::default(); 16];
        while cq.poll(&mut wc)? == wc.len() {}
        rq.restart()?;
        rq.modify(&ctx, rqc_state::RST, rqc_state::RDY)?;
        self.refill()
    }

    /// Posts a buffer in every free slot of the RQ and hands them to the device, as en_rx.c
    /// `mlx5e_post_rx_wqes` fills what `mlx5_wq_cyc_missing` counts: never a WQE the device
    /// still holds (a completion the poller could not match, such as a garbled CQE, frees
    /// no slot).
    fn refill(&mut self) -> Result<()> {
        let rq = self.rq.as_mut().ok_or(Error::Closed)?;
        let (rx_at, rx_buf, iova) = (self.rx_at, self.rx_buf, self.iova);
        let addr = |i: u32| iova + (rx_at + i as usize * rx_buf) as u64;
        let missing = rq.missing();
        for _ in 0..missing {
            rq.write(self.lkey, addr, rx_buf as u32)?;
        }
        if missing != 0 {
            rq.publish(&self.ctx.hal)?;
        }
        Ok(())
    }

    /// Destroys everything in reverse order of [`EthQueue::build`]. A work queue the device
    /// may still use (its destroy failed) keeps what it references: its CQ, the TIS, the
    /// UAR and the buffer region are then never destroyed or freed.
    fn teardown(&mut self) -> Result<()> {
        let ctx = self.ctx.clone();
        let mut first = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        if core::mem::take(&mut self.lists) {
            note(vport::set_mac_list(
                &ctx,
                ListType::Unicast,
                &[],
                self.log_max_uc,
            ));
            note(vport::set_mac_list(
                &ctx,
                ListType::Multicast,
                &[],
                self.log_max_mc,
            ));
        }
        note(self.steering.remove(&ctx));
        if let Some(t) = self.tirn.take() {
            note(tir::destroy(&ctx, t));
        }
        let mut held = false;
        if let Some(mut rq) = self.rq.take() {
            let r = rq.destroy(&ctx);
            held |= r.is_err();
            Self::release_cq(self.rcq.take(), &rq.shared, r.is_err());
            note(r);
        }
        if let Some(mut sq) = self.sq.take() {
            let r = sq.destroy(&ctx);
            held |= r.is_err();
            Self::release_cq(self.scq.take(), &sq.shared, r.is_err());
            note(r);
        }
        // CQs made before a work queue was.
        drop((self.rcq.take(), self.scq.take()));
        if held {
            // The device may still read the TIS, ring the UAR's queue and use the buffers.
            core::mem::forget(self.bufs.take());
            core::mem::forget(self.pd.take());
            return first;
        }
        if let Some(t) = self.tisn.take() {
            note(tis::destroy(&ctx, t));
        }
        if let Some(u) = self.uar.take() {
            note(ctx.with_dev(|d| d.dealloc_uar(&ctx.hal, u.index)));
        }
        drop(self.bufs.take());
        drop(self.pd.take());
        first
    }

    /// Stops routing a destroyed work queue's completions to its CQ and destroys the CQ; a
    /// CQ whose work queue the device may still use is kept for good.
    fn release_cq(cq: Option<CompletionQueue<H>>, q: &Arc<crate::qp::WqShared>, held: bool) {
        if let Some(cq) = cq {
            cq.shared.detach(q);
            if held {
                core::mem::forget(cq);
            }
        }
    }

    /// Closes the queue now, reporting the first failure (dropping it does the same and
    /// ignores them).
    pub fn close(mut self) -> Result<()> {
        self.teardown()
    }
}

impl<H: Hal> Drop for EthQueue<H> {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}
