//! NIC receive steering for the queue: one flow table at level 0, made the root of NIC
//! receive steering, with one group matching the outer destination MAC and one rule per
//! address forwarding to the queue's TIR (Linux en_fs.c: the L2 table's full-match group,
//! `mlx5e_create_l2_table_groups`, and its rules, `mlx5e_add_l2_flow_rule`; mlx5e puts a
//! traffic-type table between the L2 table and the TIRs, which one TIR does not need). One
//! module per object: [`table`], [`group`], [`rule`].

mod group;
mod rule;
mod table;

use alloc::vec::Vec;

use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

/// `MLX5_FLOW_TABLE_TYPE_NIC_RX` (Linux mlx5_ifc.h; fs_core.h `FS_FT_NIC_RX`).
const TABLE_TYPE: u32 = mlx5_prm::flow_table_type::NIC_RX as u32;
/// `MLX5_MATCH_OUTER_HEADERS` (Linux include/linux/mlx5/device.h), for
/// `match_criteria_enable`.
const MATCH_OUTER_HEADERS: u32 = mlx5_prm::match_criteria_enable::OUTER_HEADERS as u32;

/// `MLX5_FLOW_CONTEXT_ACTION_*` (Linux mlx5_ifc.h).
mod flow_action {
    /// `MLX5_FLOW_CONTEXT_ACTION_FWD_DEST`.
    pub(super) const FWD_DEST: u32 = mlx5_prm::flow_context_action::FWD_DEST as u32;
}

/// `MLX5_IFC_FLOW_DESTINATION_TYPE_*` (Linux mlx5_ifc.h).
mod flow_dest_type {
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_TIR`.
    pub(super) const TIR: u32 = mlx5_prm::flow_destination_type::TIR as u32;
}

/// The 48 bits of `dmac_47_16` and `dmac_15_0` (adjacent) inside the `fte_match_set_lyr_2_4`
/// at `headers`: the six bytes of a MAC, as en_fs.c copies one to
/// `MLX5_ADDR_OF(fte_match_param, ..., outer_headers.dmac_47_16)`.
fn dmac_field(headers: mlx5_prm::Field, dmac_47_16: mlx5_prm::Field) -> mlx5_prm::Field {
    mlx5_prm::Field::new(dmac_47_16.offset, 48).within(headers)
}

/// The steering objects made so far (so that a partial [`Steering::install`] is undone by
/// [`Steering::remove`]).
#[derive(Default)]
pub(super) struct Steering {
    table: Option<u32>,
    root: bool,
    group: Option<u32>,
    /// Entries set, by index.
    rules: Vec<u32>,
}

impl Steering {
    /// Frames whose outer destination MAC is one of `macs` go to TIR `tirn`. Linux's order
    /// (fs_core.c `__mlx5_create_flow_table`: the table, then `connect_flow_table` makes the
    /// lowest-level table the root, `update_root_ft_create`; then the groups and rules).
    pub(super) fn install<H: Hal>(
        &mut self,
        ctx: &CtxInner<H>,
        tirn: u32,
        macs: &[[u8; 6]],
    ) -> Result<()> {
        let n = macs.len().max(1) as u32;
        let log_size = n.next_power_of_two().trailing_zeros();
        let t = table::create(ctx, 0, log_size)?;
        self.table = Some(t);
        table::set_root(ctx, Some(t))?;
        self.root = true;
        let g = group::create_dmac(ctx, t, 0, (1 << log_size) - 1)?;
        self.group = Some(g);
        for (i, mac) in (0u32..).zip(macs) {
            rule::set_dmac_to_tir(ctx, t, g, i, *mac, tirn)?;
            self.rules.push(i);
        }
        Ok(())
    }

    /// Undoes [`Steering::install`] in reverse (en_fs.c `mlx5e_destroy_flow_steering`: the
    /// rules, `mlx5_del_flow_rules`; the groups and the table, `mlx5e_destroy_flow_table`);
    /// the root goes back to the default before its table goes (fs_cmd.c
    /// `mlx5_cmd_update_root_ft` with `disconnect`). Every step is tried; the first error is
    /// returned.
    pub(super) fn remove<H: Hal>(&mut self, ctx: &CtxInner<H>) -> Result<()> {
        let mut first = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        if let Some(t) = self.table {
            while let Some(i) = self.rules.pop() {
                note(rule::delete(ctx, t, i));
            }
            if let Some(g) = self.group.take() {
                note(group::destroy(ctx, t, g));
            }
            if core::mem::take(&mut self.root) {
                note(table::set_root(ctx, None));
            }
            note(table::destroy(ctx, t));
            self.table = None;
        }
        first
    }
}
