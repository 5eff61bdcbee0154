//! What the UMR tests (umr.rs, umr_cache.rs) share: the access rights and the enable mask of
//! their keys, and the mkey segment that enables one.

use mlx5::umr::{mkey_mask as mask, MkeySeg};
use mlx5::AccessFlags;

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
