//! The NIC vport's address lists: MODIFY_NIC_VPORT_CONTEXT with `field_select.addresses_list`
//! (Linux core/vport.c `mlx5_modify_nic_vport_mac_list`, which en_fs.c
//! `mlx5e_vport_context_update_addr_list` calls for the unicast and the multicast list).

use mlx5_prm::{
    modify_nic_vport_context_in, modify_nic_vport_context_out, modify_nic_vport_field_select,
    opcode,
};

use crate::cmd::CmdBuf;
use crate::context::CtxInner;
use crate::error::{InvalidInput, Result};
use crate::hal::Hal;

use super::pending::nic_vport_context;

/// `MLX5_NVPRT_LIST_TYPE_*` (Linux include/linux/mlx5/device.h `enum mlx5_list_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListType {
    /// `MLX5_NVPRT_LIST_TYPE_UC`.
    Unicast = 0,
    /// `MLX5_NVPRT_LIST_TYPE_MC`.
    Multicast = 1,
}

/// Bytes of one `mac_address_layout` entry of `current_uc_mac_address[]`; the MAC is its last
/// six (vport.c: `MLX5_ADDR_OF(..., current_uc_mac_address[i]) + 2`).
const ENTRY: usize = 8;

/// Sets the vport's `list` address list to `macs`, refused when longer than the device allows
/// (vport.c: `1 << log_max_current_uc_list` / `log_max_current_mc_list`, -ENOSPC); an empty
/// list clears it (as en_fs.c does when the netdev goes down).
pub(super) fn set_mac_list<H: Hal>(
    ctx: &CtxInner<H>,
    list: ListType,
    macs: &[[u8; 6]],
    log_max: u8,
) -> Result<()> {
    let max = 1usize << log_max.min(16);
    if macs.len() > max {
        return Err(InvalidInput::TooManyAddresses {
            given: macs.len(),
            max,
        }
        .into());
    }
    // The list is `nic_vport_context.current_uc_mac_address[]`, after the context's fixed
    // part, which ends the command's fixed part.
    let at = modify_nic_vport_context_in::BYTES;
    let mut c = CmdBuf::new(opcode::MODIFY_NIC_VPORT_CONTEXT, 0, at + macs.len() * ENTRY);
    let v = |f: mlx5_prm::Field| f.within(modify_nic_vport_context_in::NIC_VPORT_CONTEXT);
    c.set(
        modify_nic_vport_field_select::ADDRESSES_LIST
            .within(modify_nic_vport_context_in::FIELD_SELECT),
        1,
    )
    .set(v(nic_vport_context::ALLOWED_LIST_TYPE), list as u32)
    .set(v(nic_vport_context::ALLOWED_LIST_SIZE), macs.len() as u32);
    for (i, mac) in macs.iter().enumerate() {
        let e = at + i * ENTRY + 2;
        c.buf[e..e + 6].copy_from_slice(mac);
    }
    let mut out = [0u8; modify_nic_vport_context_out::BYTES];
    ctx.exec(&c, &mut out)
}
