//! NIC receive flow steering: flow tables ([`table`]), flow groups ([`group`]), flow table
//! entries ([`fte`]) and the root of the NIC_RX table type ([`root`]), as Linux
//! drivers/net/ethernet/mellanox/mlx5/core/fs_cmd.c builds them; and the lookup a received
//! Ethernet frame goes through ([`steer`]). Their state (tables holding groups and entries,
//! the root) is [`state`], below the object modules.
//!
//! Only the NIC_RX table type exists (the `flow_table_nic_cap` page advertises `ft_support`
//! for `flow_table_properties_nic_receive` alone, control/caps.rs); only the function's own
//! vport (`other_vport` 0, `vport_number` 0). Table and group ids are 24-bit numbers from 1,
//! unique on the device.
//!
//! # What refuses what
//!
//! Linux destroys steering objects children first (fs_core.c `tree_put_node`: entries, then
//! their group, then the table), so firmware refusing a destroy while something still names
//! the object costs a correct driver nothing and catches a wrong one: DESTROY_FLOW_GROUP is
//! refused while an entry of the group exists, DESTROY_FLOW_TABLE while the table has a group
//! or another table names it (an entry's destination, a miss table), and DESTROY_TIR
//! (objects/tir.rs) while an entry forwards to the TIR, with RES_BUSY (Linux cmd.c
//! `cmd_status_to_err` makes it -EBUSY). The root table itself may be destroyed: Linux
//! fs_core.c `update_root_ft_destroy` leaves the root pointing at a table it then destroys
//! when no other table follows it; the NIC_RX root is unset afterwards.

mod fte;
mod group;
mod root;
mod state;
pub(crate) mod steer;
mod table;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub(crate) use fte::{cmd_delete_fte, cmd_set_fte};
pub(crate) use group::{cmd_create_flow_group, cmd_destroy_flow_group};
pub(crate) use root::cmd_set_flow_table_root;
pub(crate) use table::{cmd_create_flow_table, cmd_destroy_flow_table};

pub(crate) use state::{Dest, FlowSteering};
