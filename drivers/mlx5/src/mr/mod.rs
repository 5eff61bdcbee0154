//! Memory keys: CREATE_MKEY / DESTROY_MKEY in MTT mode, with the fewest translation entries.
//!
//! Sources: Linux ib/mr.c (`set_mkc_access_pd_addr_fields`, `reg_create`), rdma-core
//! mlx5_vfio.c `mlx5_vfio_reg_mr`: absolute `log_page_size` (`reg_create`), key = index << 8 |
//! variant (core/mr.c `mlx5_core_create_mkey`), MTT entry format (ib/mem.c
//! `mlx5_ib_populate_pas`), `translations_octword_size` (ib/mr.c `get_octo_len`).
//!
//! Translation planning: the MR's virtual range `[iova, iova + len)` is made of physically
//! contiguous chunks. For a page size `2^s` the range is cut at `2^s`-aligned virtual
//! addresses; that works when every chunk has the same offset inside a page virtually and
//! physically, and chunks meet at page boundaries. Among the sizes that work (4 KiB .. 1 GiB)
//! the planner picks the one with the fewest entries (the smallest such size on a tie), so a
//! contiguous region becomes one entry and a list of 2 MiB huge pages one entry per page.

mod entries;
mod klm;
mod mkey;
mod plan;
mod recent_keys;

use crate::error::{InvalidInput, Result};

pub use entries::Entries;
pub use klm::{plan_reg, Klm, KlmPlan};
pub(crate) use mkey::{mkey_cmd, mkey_from_out, relaxed_ordering, MkeyParams, Xlt};
pub(crate) use plan::one_page;
pub use plan::{plan, PhysChunk, Translation};
pub(crate) use recent_keys::RecentKeys;

/// Smallest translation page: 4 KiB (`MLX5_ADAPTER_PAGE_SHIFT`).
pub const MIN_PAGE_SHIFT: u32 = 12;
/// Largest translation page the planner uses: 1 GiB.
pub const MAX_PAGE_SHIFT: u32 = 30;
/// Most translation entries one registration may need (driver choice): 2^28 MTT entries
/// describe 1 TiB of scattered 4 KiB pages (2 GiB of list in the driver's memory while it is
/// sent, in 2^11 commands); larger regions of small pages are refused before anything is
/// allocated. Regions of larger pages need far fewer entries.
pub const MAX_MTT_ENTRIES: u64 = 1 << 28;
/// Most MTT entries one CREATE_MKEY carries (driver choice): 2^17 entries are a 1 MiB list, a
/// 2 Ki-block mailbox chain. A longer translation is split over several MTT mkeys joined by
/// one indirect KLM mkey (see [`KlmPlan`]), as UCX registers KSM/KLM keys by CREATE_MKEY
/// (src/uct/ib/mlx5/dv/ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm`). Linux instead loads long
/// lists by UMR (ib/umr.c `mlx5r_umr_update_xlt`); this driver's UMR QP ([`crate::umr`])
/// loads only the mkey cache's translations.
pub const MAX_MTT_PER_MKEY: usize = 1 << 17;
/// `MLX5_MAX_KLM_BYTE_COUNT` ([`mlx5_prm::klm::MAX_BYTE_COUNT`]): the most bytes one KLM
/// entry maps; each inner MTT mkey of an indirect key covers at most this much.
pub const MAX_KLM_BYTE_COUNT: u64 = mlx5_prm::klm::MAX_BYTE_COUNT;

/// Verbs access flags (`IBV_ACCESS_*` values, libibverbs verbs.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(2);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// `IBV_ACCESS_MW_BIND` (libibverbs verbs.h; Linux `IB_ACCESS_MW_BIND`): memory windows
    /// may be bound to the region (IB spec C10-73, rxe rxe_mw.c `rxe_check_bind_mw`). No mkc
    /// field carries it (Linux ib/mr.c `set_mkc_access_pd_addr_fields` does not map it): the
    /// driver checks it when a window is bound ([`crate::mw`]).
    pub const MW_BIND: Access = Access(1 << 4);
    /// `IBV_ACCESS_ZERO_BASED` (libibverbs verbs.h): a window bound with it is addressed from 0
    /// (rdma-core qp.c `set_umr_mkey_seg`: `start_addr = 0`). Window access only; a region
    /// registered with it is refused.
    pub const ZERO_BASED: Access = Access(1 << 5);
    /// `IBV_ACCESS_RELAXED_ORDERING` (= `IBV_ACCESS_OPTIONAL_FIRST`, 1 << 20): the device may
    /// reorder its PCIe writes / reads of the region. Optional: set in the mkey where the
    /// device supports it, ignored where it does not.
    pub const RELAXED_ORDERING: Access = Access(1 << 20);
    /// `IBV_ACCESS_OPTIONAL_RANGE` (libibverbs verbs.h: bits 20..29): flags a device may
    /// lack; libibverbs and the kernel mask them instead of failing the registration
    /// (`ibv_reg_mr` routes them to `ibv_reg_mr_iova2`; ib_core `IB_ACCESS_OPTIONAL`).
    pub const OPTIONAL_RANGE: Access = Access(0x3ff0_0000);
    /// Every mandatory access right.
    pub const ALL: Access = Access(15);
    /// No access beyond local read.
    pub const NONE: Access = Access(0);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }

    /// The verbs rule (Linux include/rdma/ib_verbs.h `ib_check_mr_access`): remote write and
    /// remote atomic need local write; unknown bits are refused, except the optional ones
    /// ([`Access::OPTIONAL_RANGE`]), which a device may ignore.
    pub fn validate(self) -> Result<()> {
        if self.0 & !(Access::ALL.0 | Access::MW_BIND.0 | Access::OPTIONAL_RANGE.0) != 0 {
            return Err(InvalidInput::AccessFlags.into());
        }
        if (self.contains(Access::REMOTE_WRITE) || self.contains(Access::REMOTE_ATOMIC))
            && !self.contains(Access::LOCAL_WRITE)
        {
            return Err(InvalidInput::AccessFlags.into());
        }
        Ok(())
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// Checks a registration request before anything is sent or allocated: access flags, a
/// non-zero length, no wrap of `iova + len`, and the device's largest region
/// (`1 << log_max_mrw_sz`, the limit CREATE_MKEY enforces; 64 or more: no limit).
pub(crate) fn check_request(len: u64, iova: u64, access: Access, log_max_mrw_sz: u8) -> Result<()> {
    access.validate()?;
    if len == 0 {
        return Err(InvalidInput::ZeroLength.into());
    }
    if iova.checked_add(len).is_none() {
        return Err(InvalidInput::LengthOverflow.into());
    }
    if log_max_mrw_sz < 64 {
        let max = 1u64 << log_max_mrw_sz;
        if len > max {
            return Err(InvalidInput::MrTooLarge { len, max }.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_rules() {
        assert!(Access::REMOTE_WRITE.validate().is_err());
        assert!(Access::REMOTE_ATOMIC.validate().is_err());
        assert!((Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .validate()
            .is_ok());
        assert!(Access::REMOTE_READ.validate().is_ok());
        assert!(Access(0x100).validate().is_err());
        // Optional flags pass (a device that lacks them ignores them); bits above the
        // optional range do not.
        assert!((Access::LOCAL_WRITE | Access::RELAXED_ORDERING)
            .validate()
            .is_ok());
        assert!(Access(1 << 29).validate().is_ok());
        assert!(Access(1 << 30).validate().is_err());
        assert_eq!(check_request(1 << 20, 0, Access::NONE, 20), Ok(()));
        assert_eq!(
            check_request((1 << 20) + 1, 0, Access::NONE, 20),
            Err(InvalidInput::MrTooLarge {
                len: (1 << 20) + 1,
                max: 1 << 20
            }
            .into())
        );
        assert_eq!(check_request(u64::MAX, 0, Access::NONE, 64), Ok(()));
        assert_eq!(
            check_request(0, 0, Access::NONE, 0),
            Err(InvalidInput::ZeroLength.into())
        );
        assert_eq!(
            check_request(16, u64::MAX - 4, Access::NONE, 0),
            Err(InvalidInput::LengthOverflow.into())
        );
    }
}
