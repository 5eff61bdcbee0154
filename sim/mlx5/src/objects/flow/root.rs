//! The root of the NIC_RX table type: SET_FLOW_TABLE_ROOT, as Linux
//! drivers/net/ethernet/mellanox/mlx5/core/fs_cmd.c `mlx5_cmd_update_root_ft` issues it
//! (fs_core.c `update_root_ft_create` when a table of a lower level than the current root
//! appears). op_mod 0 makes `table_id` the root; op_mod 1 disconnects the root (advertised by
//! `flow_table_properties_nic_receive.reset_root_to_default`), after which received Ethernet
//! frames find no table and are dropped, as before any root was set. `underlay_qpn` is for
//! IPoIB (an InfiniBand port) and refused on this Ethernet port.

use super::state::check_header;
use crate::control::caps::Caps;
use crate::control::result::{fail, get, unset, CmdResult};
use crate::control::syndrome;
use crate::objects::Objects;
use mlx5_prm::{cmd_status, set_flow_table_root, set_flow_table_root_in};

/// SET_FLOW_TABLE_ROOT (0x92f).
pub(crate) fn cmd_set_flow_table_root(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    use set_flow_table_root_in as i;
    check_header!(input, i)?;
    let unsupported = [
        i::TABLE_OF_OTHER_VPORT,
        i::TABLE_VPORT_NUMBER,
        i::UNDERLAY_QPN,
        i::TABLE_ESWITCH_OWNER_VHCA_ID_VALID,
        i::TABLE_ESWITCH_OWNER_VHCA_ID,
    ];
    unset(input, &unsupported, syndrome::ROOT_UNSUPPORTED)?;
    let steering = &mut objects.flow;
    match get(input, i::OP_MOD) as u16 {
        set_flow_table_root::OP_MOD_CONNECT => {
            let id = get(input, i::TABLE_ID);
            steering.table_mut(id)?;
            steering.root = Some(id);
            Ok(())
        }
        set_flow_table_root::OP_MOD_DISCONNECT => {
            steering.root = None;
            Ok(())
        }
        _ => fail(cmd_status::BAD_PARAM_ERR, syndrome::ROOT_OP_MOD),
    }
}
