//! Memory keys: CREATE_MKEY / DESTROY_MKEY / QUERY_MKEY and the address translation the data
//! path uses for every lkey and rkey.
//!
//! An mkey is `mkey_index << 8 | mkc.mkey_7_0`: firmware picks the 24-bit index and returns it in
//! `create_mkey_out.mkey_index`, software picks the 8-bit variant (rdma-core
//! providers/mlx5/mlx5_vfio.c `mlx5_vfio_reg_mr`: `lkey = key | mlx5_idx_to_mkey(mkey_index)`).
//! A key presented on the data path must match both parts.
//!
//! Three access modes are modelled: PA (the address *is* the bus address), MTT (a list of
//! 8-byte page addresses, page size `1 << mkc.log_page_size`, ABSOLUTE log2, `reg_create`) and
//! KLMS (an indirect key: a list of 16-byte `mlx5_ifc_klm_bits` {byte_count, mkey, address},
//! entry `i` mapping the next `byte_count` bytes of the key's range onto `[address,
//! address + byte_count)` of the direct key `mkey`). An indirect key is created directly by
//! CREATE_MKEY with the list in `klm_pas_mtt`, one octoword per entry in
//! `translations_octword_size` / `translations_octword_actual_size` (UCX
//! src/uct/ib/mlx5/dv/ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm` and
//! `uct_ib_mlx5_devx_klm_entry_set`; Linux drivers/infiniband/hw/mlx5/mr.c `mlx5_ib_sg_to_klms`
//! fills the same entries through UMR).
//! [`PagedBuffer`] is the same idea for the `pas[]` lists of CQs and QPs, whose
//! `log_page_size` is RELATIVE to 4 KiB (Linux ib/qp.c `_create_kernel_qp`).

use mlx5_prm::{mkc, mkey, pages};

mod commands;
mod paged;
mod resolve;
mod table;
#[cfg(test)]
mod tests;

pub(crate) use commands::{create_mkey, destroy_mkey, query_mkey};
pub use paged::{PagedBuffer, PasError};
pub use resolve::{page_ranges, Resolved};
pub use table::MkeyTable;

/// Syndromes of the mkey commands. Real firmware syndromes are opaque 32-bit values that no
/// public source lists; these are the model's own, one per rejection reason, so a test (or a
/// driver log) can tell exactly which check fired. Range 0x5201_xxxx.
pub mod syndrome {
    /// The command input is shorter than the fixed part of its layout.
    pub const INPUT_TOO_SHORT: u32 = 0x5201_0001;
    /// `mkc.pd` names no allocated protection domain.
    pub const BAD_PD: u32 = 0x5201_0003;
    /// Access mode other than PA or MTT.
    pub const UNSUPPORTED_ACCESS_MODE: u32 = 0x5201_0004;
    /// `mkc.log_page_size` outside 12..=31 for an MTT key.
    pub const BAD_LOG_PAGE_SIZE: u32 = 0x5201_0005;
    /// `start_addr + len` wraps past 2^64.
    pub const LENGTH_OVERFLOW: u32 = 0x5201_0006;
    /// `translations_octword_size` / `_actual_size` do not cover the pages `start_addr..+len`
    /// spans.
    pub const MTT_TOO_FEW: u32 = 0x5201_0007;
    /// `translations_octword_actual_size` exceeds `translations_octword_size`.
    pub const MTT_ACTUAL_EXCEEDS_SIZE: u32 = 0x5201_0008;
    /// The input ends before the `translations_octword_actual_size` entries it announces.
    pub const MTT_INPUT_TRUNCATED: u32 = 0x5201_0009;
    /// An MTT entry is not aligned to the key's page size.
    pub const MTT_MISALIGNED: u32 = 0x5201_000a;
    /// KLMS key: `translations_octword_actual_size` above `1 << log_max_klm_list_size`.
    pub const KLM_LIST_TOO_LONG: u32 = 0x5201_0012;
    /// KLMS key: an entry's `byte_count` is 0 or above `MLX5_MAX_KLM_BYTE_COUNT` (2 GiB).
    pub const KLM_BAD_BYTE_COUNT: u32 = 0x5201_0013;
    /// KLMS key: the entries' byte counts do not cover `len`.
    pub const KLM_TOO_SHORT: u32 = 0x5201_0014;
    /// KLMS key with `length64`, or with a zero-length list.
    pub const KLM_BAD_LENGTH: u32 = 0x5201_0015;
    /// `1 << log_max_mkey` keys already exist.
    pub const TOO_MANY_MKEYS: u32 = 0x5201_000b;
    /// DESTROY/QUERY_MKEY of an index that is not allocated.
    pub const UNKNOWN_MKEY: u32 = 0x5201_000c;
    /// `length64` on a key that is not PA (an MTT list cannot cover 2^64 bytes).
    pub const LENGTH64_NOT_PA: u32 = 0x5201_000d;
    /// `len` above `1 << cmd_hca_cap.log_max_mrw_sz`.
    pub const LENGTH_ABOVE_CAP: u32 = 0x5201_000e;
    /// `mkey_umem_valid`: user memory objects are not modelled.
    pub const UMEM_UNSUPPORTED: u32 = 0x5201_000f;
    /// `mkc.qpn` is neither 0xffffff (any QP) nor an existing QP.
    pub const BAD_QPN: u32 = 0x5201_0010;
    /// `mkc.relaxed_ordering_write` / `_read` set while the device does not advertise
    /// `relaxed_ordering_write` / any `relaxed_ordering_read` capability (model choice: no
    /// source says what firmware does with an unadvertised bit; refused here).
    pub const RELAXED_ORDERING_UNSUPPORTED: u32 = 0x5201_0011;
}

/// `mkc.qpn` value meaning "usable from any QP" (rdma-core mlx5_vfio.c
/// `set_mkc_access_pd_addr_fields`: `DEVX_SET(mkc, mkc, qpn, 0xffffff)`).
pub const ANY_QPN: u32 = 0xff_ffff;

/// Smallest MTT page shift: the adapter page (`MLX5_ADAPTER_PAGE_SHIFT`).
pub const MIN_MTT_PAGE_SHIFT: u32 = pages::ADAPTER_PAGE_SHIFT;
/// Largest MTT page shift (`MLX5_MAX_PAGE_SHIFT = 31`, rdma-core providers/mlx5/mlx5_vfio.h:33;
/// also the largest value the 5-bit rdma-core `mkc.log_page_size` holds).
pub const MAX_MTT_PAGE_SHIFT: u32 = 31;

/// mkey indices below this are never handed out: index 1 is `MLX5_INVALID_LKEY` (0x100), the
/// key rdma-core writes to terminate a receive scatter list (rdma-core mlx5dv.h:1262).
const FIRST_INDEX: u32 = 0x10;

/// Access rights, as the `mkc` bits `lr`, `lw`, `rr`, `rw`, `a`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access(pub u8);

impl Access {
    /// Local read (`mkc.lr`): gathers for sends, writes, the source of anything leaving.
    pub const LOCAL_READ: Access = Access(1 << 0);
    /// Local write (`mkc.lw`): receive scatters, RDMA READ and atomic results.
    pub const LOCAL_WRITE: Access = Access(1 << 1);
    /// Remote read (`mkc.rr`): target of an incoming RDMA READ.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// Remote write (`mkc.rw`): target of an incoming RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(1 << 3);
    /// Remote atomic (`mkc.a`): target of an incoming atomic.
    pub const REMOTE_ATOMIC: Access = Access(1 << 4);

    /// Whether every right in `need` is in `self`.
    pub const fn contains(self, need: Access) -> bool {
        self.0 & need.0 == need.0
    }
    /// The union of two sets of rights.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }
    /// Whether any local or remote *write* right is in the set.
    const fn writes(self) -> bool {
        self.0 & (Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0
    }
    /// Whether any read right is in the set (atomics read too).
    const fn reads(self) -> bool {
        self.0 & (Self::LOCAL_READ.0 | Self::REMOTE_READ.0 | Self::REMOTE_ATOMIC.0) != 0
    }
}

/// Why a key could not be used for an access. The data path maps these onto CQE syndromes
/// (local protection error for lkeys, remote access error NAKs for rkeys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrFault {
    /// No key with this index.
    UnknownKey,
    /// The index exists but the low 8 bits differ from the key's `mkey_7_0`.
    VariantMismatch,
    /// The key is in the free state (`mkc.free`).
    Free,
    /// The key belongs to another protection domain than the QP.
    PdMismatch,
    /// The key is bound to another QP (`mkc.qpn`).
    QpMismatch,
    /// `va..va+len` is not inside `start_addr..start_addr+len` of the key.
    OutOfBounds,
    /// The key lacks an access right the operation needs.
    AccessDenied,
    /// `pg_access` key whose MTT entry lacks the read or write enable for a page touched.
    PageAccessDenied,
    /// An indirect (KLMS) key's entry names a key that is itself indirect (model choice: one
    /// level of indirection, `cmd_hca_cap.max_indirection` = 1).
    Indirection,
}

/// How a key maps addresses to bus addresses.
#[derive(Clone, Debug)]
pub(crate) enum Translation {
    /// Physical addressing: bus address = virtual address.
    Pa,
    /// Page list: entry `i` maps `[base + i * page, base + (i + 1) * page)` where
    /// `base = start_addr & !(page - 1)`.
    Mtt {
        page_shift: u32,
        /// Page bus addresses (aligned), with the per-page enables.
        entries: Vec<MttEntry>,
    },
    /// Indirect: entry `i` maps `[start + off_i, start + off_i + bcount_i)` onto
    /// `[va_i, va_i + bcount_i)` of key `key_i`, checked when used.
    Klm { entries: Vec<KlmEntry> },
}

/// One KLM entry (`mlx5_ifc_klm_bits`), with its offset inside the indirect key's range.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KlmEntry {
    /// Sum of the byte counts of the entries before this one.
    off: u64,
    bcount: u64,
    key: u32,
    va: u64,
}

/// The translation of an indirect key from `(byte_count, mkey, address)` entries, in order
/// (a window bound by UMR, [`crate::objects::mw`]).
pub(crate) fn klm_translation(list: &[(u64, u32, u64)]) -> Translation {
    let mut off = 0u64;
    let entries = list
        .iter()
        .map(|&(bcount, key, va)| {
            let e = KlmEntry {
                off,
                bcount,
                key,
                va,
            };
            off += bcount;
            e
        })
        .collect();
    Translation::Klm { entries }
}

/// `MLX5_MAX_KLM_BYTE_COUNT` ([`mlx5_prm::klm::MAX_BYTE_COUNT`]): the largest
/// `klm.byte_count`.
pub const MAX_KLM_BYTE_COUNT: u64 = mlx5_prm::klm::MAX_BYTE_COUNT;

/// A page address (aligned, so its low bits are free) with the read enable in bit 0 and the
/// write enable in bit 1: 8 bytes per page, as the MTT itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MttEntry(pub(crate) u64);

impl MttEntry {
    pub(crate) fn new(addr: u64, read: bool, write: bool) -> MttEntry {
        MttEntry(addr | (write as u64) << 1 | read as u64)
    }
    /// The entry of a raw big-endian-decoded MTT entry `raw` (`mlx5_ifc_mtt_bits`: ptag
    /// above bit 8, wr_en bit 1, rd_en bit 0), with the enables in `forced` added (both
    /// when the key has no `pg_access`): [`MttEntry::new`] of the page address and the two
    /// enables, in three operations (a CREATE_MKEY of a large region decodes 2^17 of them).
    pub(crate) fn from_mtt(raw: u64, forced: u64) -> MttEntry {
        MttEntry((raw & !0xfc) | (forced & 3))
    }
    pub(crate) fn addr(self) -> u64 {
        self.0 & !0xff
    }
    pub(crate) fn read(self) -> bool {
        self.0 & 1 != 0
    }
    pub(crate) fn write(self) -> bool {
        self.0 & 2 != 0
    }
}

/// One memory key.
#[derive(Clone, Debug)]
pub struct Mkey {
    /// 24-bit index (the key without its variant byte).
    pub index: u32,
    /// `mkc.mkey_7_0`.
    pub variant: u8,
    /// `mkc.pd`.
    pub pd: u32,
    /// `mkc.qpn` ([`ANY_QPN`] = any).
    pub qpn: u32,
    /// `mkc.lr/lw/rr/rw/a`.
    pub access: Access,
    /// `mkc.start_addr`.
    pub start: u64,
    /// Length in bytes; 2^64 for `length64`.
    pub len: u128,
    /// `mkc.free`.
    pub free: bool,
    /// `mkc.umr_en`: UMR WQEs may modify the key ([`crate::datapath::umr`]).
    pub umr_en: bool,
    /// `mkc.en_rinval`: the key may be invalidated remotely (SEND_WITH_INVALIDATE); Linux
    /// ib/mr.c `mlx5_ib_alloc_mw` sets it for type 2 memory windows ([`crate::objects::mw`]).
    pub en_rinval: bool,
    /// `mkc.translations_octword_size` as created: the room for translation entries a UMR
    /// may load (two 8-byte MTT entries per octoword).
    pub xlt_octowords: u32,
    pub(crate) translation: Translation,
    /// The mkc as created (returned by QUERY_MKEY).
    pub(crate) mkc: [u8; mkc::BYTES],
}

impl Mkey {
    /// The full key (`index << 8 | variant`).
    pub fn key(&self) -> u32 {
        mkey::from_index(self.index, self.variant)
    }

    /// The bus ranges `(addr, len)` the key's bytes translate to (`start_addr..+len` through
    /// the MTT; `None` for a PA key).
    pub fn dma_ranges(&self) -> Option<Vec<(u64, u64)>> {
        let Translation::Mtt {
            page_shift,
            entries,
        } = &self.translation
        else {
            return None;
        };
        let pages: Vec<u64> = entries.iter().map(|e| e.addr()).collect();
        let off = self.start & ((1u64 << page_shift) - 1);
        let len = u64::try_from(self.len).unwrap_or(u64::MAX);
        Some(page_ranges(&pages, *page_shift, off, len))
    }

    /// `(log2 page size, page bus addresses)` of an MTT key; `None` for a PA key.
    pub fn mtt_pages(&self) -> Option<(u32, Vec<u64>)> {
        match &self.translation {
            Translation::Mtt {
                page_shift,
                entries,
            } => Some((*page_shift, entries.iter().map(|e| e.addr()).collect())),
            _ => None,
        }
    }

    /// `(byte_count, mkey, address)` of each KLM entry of an indirect key; `None` otherwise.
    pub fn klm_entries(&self) -> Option<Vec<(u64, u32, u64)>> {
        match &self.translation {
            Translation::Klm { entries } => {
                Some(entries.iter().map(|e| (e.bcount, e.key, e.va)).collect())
            }
            _ => None,
        }
    }

    /// The mkc as CREATE_MKEY gave it.
    pub fn mkc(&self) -> &[u8] {
        &self.mkc
    }
}

/// Who is using a key, for the PD / QP checks.
#[derive(Clone, Copy, Debug)]
pub struct KeyUser {
    /// The QP's protection domain.
    pub pd: u32,
    /// The QP's number.
    pub qpn: u32,
}
