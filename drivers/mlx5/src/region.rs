//! A memory region's state ([`MrInner`], shared by its handle, the QPs that hold it bound
//! or in flight, and the mkey cache) and its public handle ([`MemoryRegion`], whose verbs are
//! in [`crate::verbs`]).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::AtomicBool;

use crate::hal::{DmaMem, Hal};
use crate::mr::{Access, KlmPlan};
use crate::pd::PdInner;

/// MR state, kept alive by the handle and by in-flight WRs.
pub(crate) struct MrInner<H: Hal> {
    pub(crate) pd: Arc<PdInner<H>>,
    pub(crate) key: u32,
    /// `key` as a data segment holds it (`key.to_be()`).
    pub(crate) key_be: u32,
    pub(crate) iova: u64,
    pub(crate) len: u64,
    pub(crate) access: Access,
    /// The MTT keys under an indirect key (empty for a direct MTT key).
    pub(crate) inner_keys: Vec<u32>,
    pub(crate) plan: KlmPlan,
    pub(crate) buf: Option<DmaMem<H::Dma>>,
    pub(crate) destroyed: AtomicBool,
    /// The key came from the mkey cache (its size class): dereg revokes it by UMR and
    /// returns it ([`crate::umr`]).
    pub(crate) pooled: Option<u8>,
}

impl<H: Hal> MrInner<H> {
    /// Whether the region is an indirect (KLM) key over MTT keys.
    pub(crate) fn is_indirect(&self) -> bool {
        !self.inner_keys.is_empty()
    }
}

/// A registered memory region.
pub struct MemoryRegion<H: Hal> {
    pub(crate) inner: Option<Arc<MrInner<H>>>,
}
