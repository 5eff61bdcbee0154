//! The NIC vport's address lists: MODIFY_NIC_VPORT_CONTEXT with `field_select.addresses_list`
//! (Linux core/vport.c `mlx5_modify_nic_vport_mac_list`, which en_fs.c
//! `mlx5e_vport_context_update_addr_list` calls for the unicast and the multicast list).

use mlx5_prm::{
    mac_address_layout, modify_nic_vport_context_in, modify_nic_vport_context_out,
    modify_nic_vport_field_select, nic_vport_context, nic_vport_list_type, opcode,
};

use crate::cmd::CmdBuf;
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

/// `MLX5_NVPRT_LIST_TYPE_*` (Linux include/linux/mlx5/device.h `enum mlx5_list_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum ListType {
    /// `MLX5_NVPRT_LIST_TYPE_UC`.
    Unicast = nic_vport_list_type::UC,
    /// `MLX5_NVPRT_LIST_TYPE_MC`.
    Multicast = nic_vport_list_type::MC,
}

/// Sets the vport's `list` address list to `macs`, the most important first: a list longer
/// than the device takes (`1 << log_max_current_uc_list` / `log_max_current_mc_list`) loses
/// its tail, as en_fs.c `mlx5e_vport_context_update_addr_list` trims it ("some addresses will
/// be dropped"; `mlx5e_fill_addr_array` puts the own address, or broadcast, first). An empty
/// list clears it (as en_fs.c does when the netdev goes down).
pub(super) fn set_mac_list<H: Hal>(
    ctx: &CtxInner<H>,
    list: ListType,
    macs: &[[u8; 6]],
    log_max: u8,
) -> Result<()> {
    let macs = &macs[..macs.len().min(1usize << log_max.min(16))];
    let v = |f: mlx5_prm::Field| f.within(modify_nic_vport_context_in::NIC_VPORT_CONTEXT);
    // The list is `nic_vport_context.current_uc_mac_address[]`, which follows the context
    // (and ends the command): one `mac_address_layout` per address, the MAC in its last six
    // bytes (vport.c: `MLX5_ADDR_OF(..., current_uc_mac_address[i]) + 2`).
    let list_f = nic_vport_context::CURRENT_UC_MAC_ADDRESS;
    let len = modify_nic_vport_context_in::NIC_VPORT_CONTEXT.byte_offset()
        + list_f.bytes_with(macs.len());
    let mut c = CmdBuf::new(opcode::MODIFY_NIC_VPORT_CONTEXT, 0, len);
    c.set(
        modify_nic_vport_field_select::ADDRESSES_LIST
            .within(modify_nic_vport_context_in::FIELD_SELECT),
        1,
    )
    .set(v(nic_vport_context::ALLOWED_LIST_TYPE), list as u32)
    .set(v(nic_vport_context::ALLOWED_LIST_SIZE), macs.len() as u32);
    let mac_f = mlx5_prm::Field::new(mac_address_layout::MAC_ADDR_47_32.offset, 48);
    for (i, mac) in (0u32..).zip(macs) {
        c.bytes(mac_f.within(v(list_f.elem(i))), mac);
    }
    let mut out = [0u8; modify_nic_vport_context_out::BYTES];
    ctx.exec(&c, &mut out)
}
