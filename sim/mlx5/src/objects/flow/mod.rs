//! NIC receive flow steering: flow tables ([`table`]), flow groups ([`group`]), flow table
//! entries ([`fte`]) and the root of the NIC_RX table type ([`root`]), as Linux
//! drivers/net/ethernet/mellanox/mlx5/core/fs_cmd.c builds them; and the lookup a received
//! Ethernet frame goes through ([`steer`]).
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
//! or another table names it (an entry's destination, a miss table), with RES_BUSY (Linux
//! cmd.c `cmd_status_to_err` makes it -EBUSY). The root table itself may be destroyed: Linux
//! fs_core.c `update_root_ft_destroy` leaves the root pointing at a table it then destroys
//! when no other table follows it; the NIC_RX root is unset afterwards.

mod fte;
mod group;
mod root;
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

use std::collections::BTreeMap;

use crate::control::result::{fail, get, CmdResult};
use crate::control::syndrome;
use mlx5_prm::{cmd_status, flow_table_type, Field};

pub(crate) use fte::Dest;
use table::FlowTable;

/// Largest table or group id (24 bits: `create_flow_table_out.table_id`,
/// `create_flow_group_out.group_id`).
const MAX_ID: u32 = 0xff_ffff;

/// The NIC_RX flow tables, the groups and entries in them, and the root.
#[derive(Debug, Default)]
pub(crate) struct FlowSteering {
    tables: BTreeMap<u32, FlowTable>,
    /// The NIC_RX root table (SET_FLOW_TABLE_ROOT), where a received frame's lookup starts.
    root: Option<u32>,
    /// The last table id handed out (ids are not reused until they wrap).
    last_table: u32,
    /// The last group id handed out.
    last_group: u32,
}

impl FlowSteering {
    /// The NIC_RX root table, if one is set.
    #[cfg(test)]
    pub(crate) fn root(&self) -> Option<u32> {
        self.root
    }

    /// Whether an entry forwards to TIR `tirn` (a TIR destroy is refused while one does).
    pub(crate) fn references_tir(&self, tirn: u32) -> bool {
        self.tables
            .values()
            .flat_map(|t| t.ftes.values())
            .any(|f| f.dests().contains(&Dest::Tir(tirn)))
    }

    /// Whether another table names table `id`: an entry's destination or a miss table.
    fn references_table(&self, id: u32) -> bool {
        self.tables.iter().any(|(&tid, t)| {
            tid != id
                && (t.miss == Some(id)
                    || t.ftes
                        .values()
                        .any(|f| f.dests().contains(&Dest::Table(id))))
        })
    }

    /// A fresh id after `last` not in use by `taken`.
    fn next_id(last: &mut u32, taken: impl Fn(u32) -> bool) -> Option<u32> {
        for _ in 0..MAX_ID {
            *last = if *last >= MAX_ID { 1 } else { *last + 1 };
            if !taken(*last) {
                return Some(*last);
            }
        }
        None
    }
}

/// Checks the header fields every flow steering command carries (`other_vport`,
/// `vport_number`, `table_type`; Linux mlx5_ifc.h `*_flow_*_in`) in the input layout `$m`:
/// the function's own vport, the NIC_RX table type.
macro_rules! check_header {
    ($input:expr, $m:ident) => {
        $crate::objects::flow::header_ok(
            $input,
            [$m::OTHER_VPORT, $m::VPORT_NUMBER, $m::TABLE_TYPE],
        )
    };
}
pub(crate) use check_header;

/// [`check_header!`] for the fields `[other_vport, vport_number, table_type]`.
fn header_ok(input: &[u8], [other_vport, vport_number, table_type]: [Field; 3]) -> CmdResult {
    if get(input, other_vport) != 0 || get(input, vport_number) != 0 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FLOW_OTHER_VPORT);
    }
    if get(input, table_type) != u32::from(flow_table_type::NIC_RX) {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FLOW_TABLE_TYPE);
    }
    Ok(())
}
