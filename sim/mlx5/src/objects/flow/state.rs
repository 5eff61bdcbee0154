//! The state of NIC receive flow steering: the tables, their groups and entries, and the
//! root (the commands that make and change them are in the object modules beside this one;
//! the lookup is [`super::steer`]). Fields are visible to the flow modules only.

use std::collections::BTreeMap;

use crate::control::result::{err, fail, get, CmdError, CmdResult};
use crate::control::syndrome;
use mlx5_prm::{cmd_status, flow_table_type, fte_match_set_lyr_2_4 as l24, Field};

/// Bytes of `fte_match_set_lyr_2_4` (the outer headers part of `fte_match_param`).
pub(crate) const OUTER_BYTES: usize = l24::BYTES;

/// One NIC_RX flow table.
#[derive(Debug)]
pub(crate) struct FlowTable {
    /// `flow_table_context.level`.
    pub(super) level: u32,
    /// `flow_table_context.log_size`: entry indexes are `0..1 << log_size`.
    pub(super) log_size: u32,
    /// Where a miss goes (`table_miss_action` FWD): a table of a greater level. `None`: the
    /// default miss action, the frame is dropped.
    pub(super) miss: Option<u32>,
    /// The groups, by id.
    pub(super) groups: BTreeMap<u32, FlowGroup>,
    /// The entries, by flow index (a lookup tries them in index order).
    pub(super) ftes: BTreeMap<u32, Fte>,
}

impl FlowTable {
    /// Entry slots.
    pub(super) fn size(&self) -> u64 {
        1u64 << self.log_size
    }
}

/// One flow group.
#[derive(Debug)]
pub(crate) struct FlowGroup {
    /// `start_flow_index`.
    pub(super) start: u32,
    /// `end_flow_index` (inclusive).
    pub(super) end: u32,
    /// The outer headers mask its entries match under (zero when `match_criteria_enable`
    /// leaves the outer headers out: they are then not compared).
    pub(crate) outer_mask: [u8; OUTER_BYTES],
}

impl FlowGroup {
    /// Whether the group owns flow index `i`.
    pub(super) fn owns(&self, i: u32) -> bool {
        (self.start..=self.end).contains(&i)
    }
}

/// Where an entry forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    /// A TIR (its RQ receives the frame).
    Tir(u32),
    /// A flow table of a greater level (the lookup goes on there).
    Table(u32),
}

/// What an entry does with a frame it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// `FWD_DEST` to every destination.
    Forward(Vec<Dest>),
    /// `DROP`.
    Drop,
}

/// One flow table entry.
#[derive(Debug)]
pub(crate) struct Fte {
    /// Its group.
    pub(super) group: u32,
    /// The outer headers of `match_value`, already under the group's mask.
    pub(super) value: [u8; OUTER_BYTES],
    /// What it does.
    pub(super) action: Action,
    /// `flow_tag` (kept; the model's receive CQE does not report it).
    pub(super) flow_tag: u32,
}

impl Fte {
    /// Its destinations (none for DROP).
    pub(super) fn dests(&self) -> &[Dest] {
        match &self.action {
            Action::Forward(d) => d,
            Action::Drop => &[],
        }
    }
}

/// Largest table or group id (24 bits: `create_flow_table_out.table_id`,
/// `create_flow_group_out.group_id`).
const MAX_ID: u32 = 0xff_ffff;

/// The NIC_RX flow tables, the groups and entries in them, and the root.
#[derive(Debug, Default)]
pub(crate) struct FlowSteering {
    pub(super) tables: BTreeMap<u32, FlowTable>,
    /// The NIC_RX root table (SET_FLOW_TABLE_ROOT), where a received frame's lookup starts.
    pub(super) root: Option<u32>,
    /// The last table id handed out (ids are not reused until they wrap).
    pub(super) last_table: u32,
    /// The last group id handed out.
    pub(super) last_group: u32,
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
    pub(super) fn references_table(&self, id: u32) -> bool {
        self.tables.iter().any(|(&tid, t)| {
            tid != id
                && (t.miss == Some(id)
                    || t.ftes
                        .values()
                        .any(|f| f.dests().contains(&Dest::Table(id))))
        })
    }

    /// Table `id`: unknown is BAD_RES.
    pub(super) fn table(&self, id: u32) -> Result<&FlowTable, CmdError> {
        self.tables
            .get(&id)
            .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN))
    }

    /// Table `id`, to change: unknown is BAD_RES.
    pub(super) fn table_mut(&mut self, id: u32) -> Result<&mut FlowTable, CmdError> {
        self.tables
            .get_mut(&id)
            .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN))
    }

    /// The entries of table `id` (tests).
    #[cfg(test)]
    pub(crate) fn entries(&self, id: u32) -> usize {
        self.tables.get(&id).map_or(0, |t| t.ftes.len())
    }

    /// A fresh id after `last` not in use by `taken`.
    pub(super) fn next_id(last: &mut u32, taken: impl Fn(u32) -> bool) -> Option<u32> {
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
        $crate::objects::flow::state::header_ok(
            $input,
            [$m::OTHER_VPORT, $m::VPORT_NUMBER, $m::TABLE_TYPE],
        )
    };
}
pub(crate) use check_header;

/// [`check_header!`] for the fields `[other_vport, vport_number, table_type]`.
pub(super) fn header_ok(
    input: &[u8],
    [other_vport, vport_number, table_type]: [Field; 3],
) -> CmdResult {
    if get(input, other_vport) != 0 || get(input, vport_number) != 0 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FLOW_OTHER_VPORT);
    }
    if get(input, table_type) != u32::from(flow_table_type::NIC_RX) {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::FLOW_TABLE_TYPE);
    }
    Ok(())
}
