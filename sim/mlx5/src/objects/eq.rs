//! Event queues: CREATE/DESTROY/QUERY_EQ and the EQ state. EQE posting with the owner bit and
//! INTx are in the event sink (`events.rs`), the EQ doorbells in [`crate::datapath::doorbell`].
//!
//! The EQ buffer is `64 << log_eq_size` bytes at `page_offset` in the pages listed by `pas`
//! (8-byte big-endian bus addresses, one per `4096 << log_page_size` bytes: log_page_size is
//! RELATIVE to 4 KiB, Linux core/eq.c `create_map_eq`). EQE `i` of pass `p` is written with
//! `owner = p & 1`; software initialises every owner bit to 1 before CREATE_EQ (`init_eq_buf`)
//! and finds entry `ci` valid iff `owner == (ci >> log_eq_size) & 1` (Linux lib/eq.h:65).
//! event_bitmask: 4 big-endian u64 words, type t = bit t % 64 of word t / 64 (`create_map_eq`).
//! Doorbells: the UAR page of `eqc.uar_page`, +0x40 = CI update and arm, +0x48 = CI update
//! only; the value is `(ci & 0xffffff) | eqn << 24` (Linux lib/eq.h:70-71).
//!
//! INTx: an EQE written to an armed EQ raises the line and disarms the EQ (state FIRED); the
//! line stays asserted until software writes that EQ's doorbell. Arming with unconsumed EQEs
//! fires again at once.
//!
//! Doorbell checks: a doorbell names an existing EQ through that EQ's UAR page, and its
//! consumer index lies between the last one written and the producer counter (software cannot
//! have consumed EQEs the device never wrote). No source says what firmware does otherwise;
//! the model (model choice) ignores such a doorbell (no CI update, no arm) and counts it in
//! [`Eq::bad_doorbells`].

use std::collections::BTreeMap;

use std::sync::Arc;

use crate::control::caps::Caps;
use crate::control::result::CmdResult;
use crate::control::result::{fail, get, put};
use crate::control::syndrome;
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::Objects;
use mlx5_prm::eq::state;
use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_eq_in, create_eq_out, destroy_eq_in, eqc, query_eq_in,
    query_eq_out,
};

/// First EQ number CREATE_EQ hands out (0 stays unused, so a forgotten EQ number field in a
/// CQ context is caught).
pub const FIRST_EQN: u32 = 1;
/// Size of an EQE.
pub const EQE_SIZE: u64 = mlx5_prm::eq::EQE_SIZE as u64;
/// Largest EQ page: 4 KiB << 18 = 1 GiB.
pub const MAX_LOG_PAGE_SIZE: u32 = 18;
/// Counters are 24 bits (eqc.consumer_counter / producer_counter, doorbell ci).
pub(crate) const COUNTER_MASK: u32 = 0xff_ffff;

/// One EQ.
#[derive(Clone, Debug)]
pub struct Eq {
    pub eqn: u8,
    pub log_size: u32,
    pub uar: u32,
    pub intr: u32,
    /// log2(page size) - 12.
    pub log_page_size: u32,
    /// Quantized page offset (units of page_size / 64).
    pub page_offset: u32,
    pub pas: Vec<u64>,
    pub bitmask: [u64; 4],
    /// Overrun ignore: keep writing when full.
    pub oi: bool,
    /// `st` = ALWAYS_ARMED: every EQE interrupts, no re-arm needed.
    pub always_armed: bool,
    /// Consumer counter (last doorbell), 24 bits.
    pub cons: u32,
    /// Producer counter, 24 bits.
    pub prod: u32,
    pub armed: bool,
    /// An interrupt was raised for this EQ and software has not written its doorbell since.
    pub irq_pending: bool,
    /// Arm doorbells (UAR + 0x40) accepted.
    pub arms: u32,
    /// Doorbells ignored because their consumer index ran past the producer (model choice).
    pub bad_doorbells: u32,
}

impl Eq {
    pub(crate) fn nent(&self) -> u32 {
        1 << self.log_size
    }

    fn page_shift(&self) -> u32 {
        12 + self.log_page_size
    }

    fn offset_bytes(&self) -> u64 {
        u64::from(self.page_offset) * ((1u64 << self.page_shift()) / 64)
    }

    /// Bus address of entry `index` (< nent).
    pub(crate) fn entry_addr(&self, index: u32) -> Option<u64> {
        let o = self.offset_bytes() + u64::from(index) * EQE_SIZE;
        let page = (o >> self.page_shift()) as usize;
        let base = *self.pas.get(page)?;
        Some(base + (o & ((1u64 << self.page_shift()) - 1)))
    }

    /// Subscribed to event `t`.
    pub fn wants(&self, t: u8) -> bool {
        let (w, bit) = mlx5_prm::event::bitmask_word_bit(t);
        self.bitmask[w as usize] & bit != 0
    }

    pub(crate) fn used(&self) -> u32 {
        self.prod.wrapping_sub(self.cons) & COUNTER_MASK
    }

    fn state(&self) -> u8 {
        if self.always_armed {
            state::ALWAYS_ARMED
        } else if self.armed {
            state::ARMED
        } else {
            state::FIRED
        }
    }
}

/// The EQs.
#[derive(Debug, Default)]
pub struct EqTable {
    eqs: BTreeMap<u8, Eq>,
}

impl EqTable {
    /// The bus ranges of every EQ's buffer.
    pub(crate) fn dma_ranges(&self) -> Vec<(u8, u64, u64)> {
        let mut v = Vec::new();
        for e in self.eqs.values() {
            let len = EQE_SIZE << e.log_size;
            for (a, l) in
                crate::objects::mr::page_ranges(&e.pas, e.page_shift(), e.offset_bytes(), len)
            {
                v.push((e.eqn, a, l));
            }
        }
        v
    }

    /// EQ `eqn`.
    pub(crate) fn get_mut(&mut self, eqn: u8) -> Option<&mut Eq> {
        self.eqs.get_mut(&eqn)
    }

    /// Every EQ, by number.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Eq> {
        self.eqs.values()
    }

    /// The EQ with this number.
    pub fn get(&self, eqn: u8) -> Option<&Eq> {
        self.eqs.get(&eqn)
    }

    /// Number of EQs.
    pub fn len(&self) -> usize {
        self.eqs.len()
    }

    /// True if there is none.
    pub fn is_empty(&self) -> bool {
        self.eqs.is_empty()
    }

    /// Some EQ subscribes to event `t`.
    pub fn subscribed(&self, t: u8) -> bool {
        self.eqs.values().any(|e| e.wants(t))
    }

    /// Some EQ rings its doorbell through UAR `uar`.
    pub fn uses_uar(&self, uar: u32) -> bool {
        self.eqs.values().any(|e| e.uar == uar)
    }

    pub(crate) fn irq_pending(&self) -> bool {
        self.eqs.values().any(|e| e.irq_pending)
    }
}

/// The INTx line follows the EQs: raised while one has an interrupt pending.
pub(crate) fn update_intx(eqs: &EqTable, intx: &mut Intx) {
    if eqs.irq_pending() {
        intx.raise();
    } else {
        intx.lower();
    }
}

/// CREATE_EQ (0x301).
pub(crate) fn cmd_create_eq(
    caps: &Caps,
    objects: &mut Objects,
    eqs: &mut EqTable,
    _intx: &mut Intx,
    mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let ctx_at = create_eq_in::EQ_CONTEXT_ENTRY.byte_offset();
    let ctx = &input[ctx_at..ctx_at + eqc::BYTES];
    let st = get(ctx, eqc::ST) as u8;
    if get(ctx, eqc::STATUS) != 0
        || get(ctx, eqc::EC) != 0
        || (st != 0 && st != state::ALWAYS_ARMED)
    {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::EQ_RESERVED);
    }
    let log_size = get(ctx, eqc::LOG_EQ_SIZE);
    if log_size > caps.general(cmd_hca_cap::LOG_MAX_EQ_SZ) {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::EQ_TOO_BIG);
    }
    let log_page_size = get(ctx, eqc::LOG_PAGE_SIZE);
    if log_page_size > MAX_LOG_PAGE_SIZE {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::EQ_PAGE_GEOMETRY);
    }
    let uar = get(ctx, eqc::UAR_PAGE);
    if !objects.uars.contains(uar) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::EQ_BAD_UAR);
    }
    let mut eq = Eq {
        eqn: 0,
        log_size,
        uar,
        intr: get(ctx, eqc::INTR),
        log_page_size,
        page_offset: get(ctx, eqc::PAGE_OFFSET),
        pas: Vec::new(),
        bitmask: [0; 4],
        oi: get(ctx, eqc::OI) != 0,
        always_armed: st == state::ALWAYS_ARMED,
        cons: 0,
        prod: 0,
        armed: false,
        irq_pending: false,
        arms: 0,
        bad_doorbells: 0,
    };
    let page = 1u64 << eq.page_shift();
    let end = eq.offset_bytes() + (EQE_SIZE << log_size);
    let npages = end.div_ceil(page) as usize;
    if input.len() < create_eq_in::PAS.bytes_with(npages) {
        return fail(cmd_status::BAD_INP_LEN_ERR, syndrome::EQ_PAS_SHORT);
    }
    for i in 0..npages {
        let a = create_eq_in::PAS.elem(i as u32).get64(input).unwrap_or(0);
        if a & (page - 1) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::EQ_PAS_UNALIGNED);
        }
        // The part of this page the EQ uses must be guest memory.
        let first = if i == 0 { eq.offset_bytes() } else { 0 };
        let last = (end - i as u64 * page).min(page) - 1;
        let mut b = [0u8; 1];
        if mem.read(a + first, &mut b).is_err() || mem.read(a + last, &mut b).is_err() {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::EQ_PAS_OUTSIDE);
        }
        eq.pas.push(a);
    }
    for (w, word) in eq.bitmask.iter_mut().enumerate() {
        *word = create_eq_in::EVENT_BITMASK
            .elem(w as u32)
            .get64(input)
            .unwrap_or(0);
    }
    let limit = 1u32 << caps.general(cmd_hca_cap::LOG_MAX_EQ);
    let Some(eqn) = (FIRST_EQN..FIRST_EQN + limit)
        .filter_map(|n| u8::try_from(n).ok())
        .find(|n| !eqs.eqs.contains_key(n))
    else {
        return fail(cmd_status::LIM_ERR, syndrome::EQ_EXHAUSTED);
    };
    eq.eqn = eqn;
    eqs.eqs.insert(eqn, eq);
    put(out, create_eq_out::EQ_NUMBER, eqn.into());
    Ok(())
}

fn eqn_of(input: &[u8], f: mlx5_prm::Field) -> u8 {
    get(input, f) as u8
}

/// DESTROY_EQ (0x302).
pub(crate) fn cmd_destroy_eq(
    _caps: &Caps,
    objects: &mut Objects,
    eqs: &mut EqTable,
    intx: &mut Intx,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let eqn = eqn_of(input, destroy_eq_in::EQ_NUMBER);
    if !eqs.eqs.contains_key(&eqn) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::EQ_UNKNOWN);
    }
    // Refused while a CQ sends its completion events here (`cqc.c_eqn`): see `control::syndrome`.
    if objects.cqs.uses_eq(eqn.into()) {
        return fail(cmd_status::RES_BUSY, syndrome::EQ_BUSY);
    }
    eqs.eqs.remove(&eqn);
    update_intx(eqs, intx);
    Ok(())
}

/// QUERY_EQ (0x303).
pub(crate) fn cmd_query_eq(
    _caps: &Caps,
    _objects: &mut Objects,
    eqs: &mut EqTable,
    _intx: &mut Intx,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let eqn = eqn_of(input, query_eq_in::EQ_NUMBER);
    let Some(eq) = eqs.get(eqn) else {
        return fail(cmd_status::BAD_RES_ERR, syndrome::EQ_UNKNOWN);
    };
    let at = query_eq_out::EQ_CONTEXT_ENTRY.byte_offset();
    let ctx = &mut out[at..at + eqc::BYTES];
    put(ctx, eqc::ST, eq.state().into());
    put(ctx, eqc::OI, eq.oi.into());
    put(ctx, eqc::LOG_EQ_SIZE, eq.log_size);
    put(ctx, eqc::UAR_PAGE, eq.uar);
    put(ctx, eqc::INTR, eq.intr);
    put(ctx, eqc::LOG_PAGE_SIZE, eq.log_page_size);
    put(ctx, eqc::PAGE_OFFSET, eq.page_offset);
    put(ctx, eqc::CONSUMER_COUNTER, eq.cons);
    put(ctx, eqc::PRODUCER_COUNTER, eq.prod);
    let _ = query_eq_out::EVENT_BITMASK.set64(out, eq.bitmask[0]);
    for (i, a) in eq.pas.iter().enumerate() {
        // Only as many pas entries as the output has room for.
        let _ = query_eq_out::PAS.elem(i as u32).set64(out, *a);
    }
    Ok(())
}
