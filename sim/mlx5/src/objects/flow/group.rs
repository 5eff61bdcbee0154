//! Flow groups: CREATE_FLOW_GROUP and DESTROY_FLOW_GROUP, as Linux
//! drivers/net/ethernet/mellanox/mlx5/core/fs_cmd.c `mlx5_cmd_create_flow_group` /
//! `mlx5_cmd_destroy_flow_group` issue them.
//!
//! A group owns the flow indexes `start_flow_index..=end_flow_index` of its table (groups of
//! one table do not overlap) and one match criteria: `match_criteria_enable` names the parts
//! of `fte_match_param` its entries match on, `match_criteria` is the mask; an entry matches a
//! packet when the packet's fields and the entry's `match_value` agree on every bit of the
//! mask of an enabled part (bits of a part that is not enabled are not compared).
//!
//! The model evaluates the outer headers' L2-L4 fields mlx5e's tables match on (Linux
//! core/en_fs.c L2 table: `dmac`; core/lib/fs_ttc.c: `ethertype`, `ip_version`,
//! `ip_protocol`, `udp_dport` / `tcp_dport`; en_fs.c VLAN table: `cvlan_tag`, `first_vid`),
//! the source MAC, the ports and addresses ([`SUPPORTED_OUTER`], advertised in the
//! `flow_table_nic_cap` page's `ft_field_support`). A group whose enabled mask covers any
//! other bit is refused (BAD_PARAM): its entries would match on fields the model does not
//! look at.

use super::state::{check_header, FlowGroup, FlowSteering, OUTER_BYTES};
use crate::control::caps::Caps;
use crate::control::result::{fail, get, put, unset, CmdResult};
use crate::control::syndrome;
use crate::objects::Objects;
use mlx5_prm::{
    cmd_status, create_flow_group_in, create_flow_group_out, destroy_flow_group_in,
    fte_match_param, fte_match_set_lyr_2_4 as l24, match_criteria_enable, Field,
};

/// The outer header fields the model evaluates (see the module documentation).
pub(crate) const SUPPORTED_OUTER: [Field; 18] = [
    l24::SMAC_47_16,
    l24::SMAC_15_0,
    l24::ETHERTYPE,
    l24::DMAC_47_16,
    l24::DMAC_15_0,
    l24::FIRST_PRIO,
    l24::FIRST_CFI,
    l24::FIRST_VID,
    l24::IP_PROTOCOL,
    l24::CVLAN_TAG,
    l24::SVLAN_TAG,
    l24::IP_VERSION,
    l24::TCP_SPORT,
    l24::TCP_DPORT,
    l24::UDP_SPORT,
    l24::UDP_DPORT,
    l24::SRC_IPV4_SRC_IPV6,
    l24::DST_IPV4_DST_IPV6,
];

/// Sets every bit of `f` in `buf` (a field of at most 32 bits in one dword, or whole bytes).
pub(crate) fn set_ones(buf: &mut [u8], f: Field) {
    if f.fits_dword() {
        let _ = f.set(buf, f.mask());
    } else if let Ok(b) = f.bytes_mut(buf) {
        b.fill(0xff);
    }
}

/// The mask of [`SUPPORTED_OUTER`].
fn supported_outer() -> [u8; OUTER_BYTES] {
    let mut m = [0u8; OUTER_BYTES];
    for f in SUPPORTED_OUTER {
        set_ones(&mut m, f);
    }
    m
}

/// The group's effective outer mask, or why the criteria are refused.
fn criteria(input: &[u8]) -> Result<[u8; OUTER_BYTES], ()> {
    let enable = get(input, create_flow_group_in::MATCH_CRITERIA_ENABLE) as u8;
    let at = create_flow_group_in::MATCH_CRITERIA.byte_offset();
    let param = &input[at..at + fte_match_param::BYTES];
    // Every other part, when enabled, must mask nothing.
    let parts = [
        (
            match_criteria_enable::MISC_PARAMETERS,
            fte_match_param::MISC_PARAMETERS,
        ),
        (
            match_criteria_enable::INNER_HEADERS,
            fte_match_param::INNER_HEADERS,
        ),
        (
            match_criteria_enable::MISC_PARAMETERS_2,
            fte_match_param::MISC_PARAMETERS_2,
        ),
        (
            match_criteria_enable::MISC_PARAMETERS_3,
            fte_match_param::MISC_PARAMETERS_3,
        ),
        (
            match_criteria_enable::MISC_PARAMETERS_4,
            fte_match_param::MISC_PARAMETERS_4,
        ),
        (
            match_criteria_enable::MISC_PARAMETERS_5,
            fte_match_param::MISC_PARAMETERS_5,
        ),
    ];
    for (bit, f) in parts {
        let b = &param[f.byte_offset()..f.byte_offset() + f.byte_len()];
        if enable & bit != 0 && b.iter().any(|&x| x != 0) {
            return Err(());
        }
    }
    let mut mask = [0u8; OUTER_BYTES];
    if enable & match_criteria_enable::OUTER_HEADERS != 0 {
        let o = fte_match_param::OUTER_HEADERS.byte_offset();
        mask.copy_from_slice(&param[o..o + OUTER_BYTES]);
        let ok = supported_outer();
        if mask.iter().zip(ok).any(|(m, s)| m & !s != 0) {
            return Err(());
        }
    }
    Ok(mask)
}

/// CREATE_FLOW_GROUP (0x933).
pub(crate) fn cmd_create_flow_group(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    use create_flow_group_in as i;
    check_header!(input, i)?;
    // Match definers and e-switch owner ids: not advertised.
    let unsupported = [
        i::GROUP_TYPE,
        i::SOURCE_ESWITCH_OWNER_VHCA_ID_VALID,
        i::MATCH_DEFINER_ID,
    ];
    unset(input, &unsupported, syndrome::FG_UNSUPPORTED)?;
    let steering = &mut objects.flow;
    let table_id = get(input, i::TABLE_ID);
    let (start, end) = (
        get(input, i::START_FLOW_INDEX),
        get(input, i::END_FLOW_INDEX),
    );
    let t = steering.table_mut(table_id)?;
    if start > end || u64::from(end) >= t.size() {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FG_RANGE);
    }
    if t.groups.values().any(|g| start <= g.end && g.start <= end) {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FG_OVERLAP);
    }
    let Ok(outer_mask) = criteria(input) else {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FG_CRITERIA);
    };
    let tables = &steering.tables;
    let taken = |n| tables.values().any(|t| t.groups.contains_key(&n));
    let Some(id) = FlowSteering::next_id(&mut steering.last_group, taken) else {
        return fail(cmd_status::LIM_ERR, syndrome::FG_EXHAUSTED);
    };
    let g = FlowGroup {
        start,
        end,
        outer_mask,
    };
    steering.table_mut(table_id)?.groups.insert(id, g);
    put(out, create_flow_group_out::GROUP_ID, id);
    Ok(())
}

/// DESTROY_FLOW_GROUP (0x934): refused while an entry of the group exists.
pub(crate) fn cmd_destroy_flow_group(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    use destroy_flow_group_in as i;
    check_header!(input, i)?;
    let t = objects.flow.table_mut(get(input, i::TABLE_ID))?;
    let id = get(input, i::GROUP_ID);
    if !t.groups.contains_key(&id) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::FG_UNKNOWN);
    }
    if t.ftes.values().any(|f| f.group == id) {
        return fail(cmd_status::RES_BUSY, syndrome::FG_BUSY);
    }
    t.groups.remove(&id);
    Ok(())
}
