//! What the UMR tests (umr.rs, umr_cache.rs) share: the access rights and the enable mask of
//! their keys, the mkey segment that enables one, and enabling a cached key behind the cache's
//! back.

use mlx5::umr::{flags, mkey_mask as mask, MkeySeg, Umr};
use mlx5::{AccessFlags, Context, Hal};
use mlx5_prm::mkey::MTT_PRESENT;

pub const RW: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0,
);

/// The mask Linux uses to enable a key with a translation (ib/umr.c
/// `mlx5r_umr_final_update_xlt` with `MLX5_IB_UPD_XLT_ENABLE`).
pub const ENABLE: u64 = mask::KEY
    | mask::FREE
    | mask::LR
    | mask::LW
    | mask::RR
    | mask::RW
    | mask::A
    | mask::PD
    | mask::QPN
    | mask::LEN
    | mask::PAGE_SIZE
    | mask::START_ADDR;

pub fn enable_seg(pd: u32, variant: u8, iova: u64, len: u64) -> MkeySeg {
    MkeySeg {
        free: false,
        pd,
        qpn: 0xff_ffff,
        variant,
        access: RW,
        start: iova,
        len,
        log_page_size: 12,
    }
}

/// Enables free key `key` of PD `pdn` behind the mkey cache's back (4 KiB at 0x1000, on the
/// page at `bus`): the cache's next UMR on it, "fail if not free", is refused.
#[allow(dead_code)] // not every UMR test tampers
pub fn tamper<H: Hal>(ctx: &Context<H>, pdn: u32, key: u32, bus: u64) {
    ctx.post_umr(&Umr {
        key,
        check: flags::CHECK_NOT_FREE,
        mask: ENABLE,
        seg: enable_seg(pdn, key as u8, 0x1000, 4096),
        mtt: &[bus | MTT_PRESENT],
        mtt_offset: 0,
    })
    .expect("tamper");
}
