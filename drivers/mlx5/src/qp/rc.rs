//! The RC (reliable connected) service type: what of a QP is RC's and not every type's. The
//! shared plumbing (work queues, states and transitions, doorbells, CQ binding) is the rest
//! of [`super`]; another service type (UD, GSI, raw Ethernet) is a module beside this one.

use super::*;

/// `qpc.log_ack_req_freq` as Linux sets it on every transition (ib/qp.c
/// `__mlx5_ib_modify_qp`: `MLX5_IB_ACK_REQ_FREQ` = 8).
pub(super) const ACK_REQ_FREQ: u32 = 8;

/// `log_sra_max` / `log_rra_max` for `n` outstanding RDMA READs / atomics: rounded up to a
/// power of two, as Linux does since commit 78ed28e08e74 ("RDMA/mlx5: Round
/// max_rd_atomic/max_dest_rd_atomic up instead of down": `fls(n - 1)`); 0 stays 0. A request
/// above the device's `2^log_max` is refused (Linux ib/qp.c `validate_rd_atomic`, "invalid
/// max_rd_atomic value"), never capped.
pub(super) fn log_rd_atomic(n: u8, log_max: u8) -> Result<u32> {
    let max = 1u32 << (log_max as u32).min(31);
    if n as u32 > max {
        return Err(InvalidInput::RdAtomic { requested: n, max }.into());
    }
    Ok(ilog2_ceil(n as u32))
}

/// Linux ib/qp.c mlx5_set_path: "sgid_index (%u) too large" against the port's GID table.
pub(super) fn check_sgid_index(caps: &crate::caps::Caps, index: u8) -> Result<()> {
    if index as u32 >= caps.gid_table_len() {
        return Err(InvalidInput::GidIndex.into());
    }
    Ok(())
}

/// The remote end of a connection, checked before any command: an RC QP connects to neither
/// special QP (0 is SMI, 1 is GSI) nor to a QPN wider than 24 bits, and needs a GID and a
/// MAC to address its packets (the model refuses such a path too, as `NO_ADDRESS_PATH`).
pub(super) fn check_remote(remote: &QpEndpoint) -> Result<()> {
    if remote.qpn < 2 || remote.qpn > 0xff_ffff {
        return Err(InvalidInput::RemoteQpn(remote.qpn).into());
    }
    if remote.gid == [0; 16] || remote.mac == [0; 6] {
        return Err(InvalidInput::RemoteAddress.into());
    }
    Ok(())
}

/// `atomic_caps.atomic_operations` bits (Linux include/linux/mlx5/driver.h
/// `MLX5_ATOMIC_OPS_*`).
pub(super) mod atomic_ops {
    pub const CMP_SWAP: u16 = 1 << 0;
    pub const FETCH_ADD: u16 = 1 << 1;
    pub const EXTENDED_CMP_SWAP: u16 = 1 << 2;
    pub const EXTENDED_FETCH_ADD: u16 = 1 << 3;
}

/// `qpc.atomic_mode` values (Linux include/linux/mlx5/driver.h `MLX5_ATOMIC_MODE_*`):
/// IB-compliant 8-byte atomics, and "up to 8 bytes" (larger sizes are `log2(bytes)`).
pub(super) mod atomic_mode_val {
    pub const IB_COMP: u32 = 1;
    pub const UP_TO_8B: u32 = 3;
}

/// The `atomic_mode` a QP with remote atomic access gets, from the device's atomic caps, or
/// `None` when it has none (Linux ib/qp.c `get_atomic_mode` and `atomic_size_to_mode`).
pub(super) fn atomic_mode(caps: &crate::caps::Caps) -> Option<u32> {
    use atomic_ops::*;
    if !caps.atomic {
        return None;
    }
    let ops = caps.atomic_operations;
    let mut mode = None;
    if ops & (EXTENDED_CMP_SWAP | EXTENDED_FETCH_ADD) != 0 {
        // atomic_size_to_mode: sizes up to 256 bytes; below 16 bytes the 8-byte mode.
        let sizes = caps.atomic_size_qp & 0x1ff;
        if sizes != 0 {
            let log = 15 - sizes.leading_zeros();
            mode = Some(if log > 3 {
                log
            } else {
                atomic_mode_val::UP_TO_8B
            });
        }
    }
    if mode.is_none() && ops & CMP_SWAP != 0 && ops & FETCH_ADD != 0 {
        mode = Some(atomic_mode_val::IB_COMP);
    }
    mode
}
