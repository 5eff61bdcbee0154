//! Test helpers: the flow steering commands as a driver issues them (each input built as
//! Linux fs_cmd.c fills it), frames to steer, and the lookup.

use super::steer::{Packet, Steer};
use super::*;
use crate::control::caps::Caps;
use crate::control::result::{get, put, CmdError, CmdResult};
use crate::objects::Objects;
use crate::roce::{decode, Frame};
use mlx5_prm::{
    create_flow_group_in, create_flow_group_out, create_flow_table_in, create_flow_table_out,
    delete_fte_in, dest_format_struct, destroy_flow_group_in, destroy_flow_table_in, flow_context,
    flow_table_context, fte_match_param, fte_match_set_lyr_2_4 as l24,
    match_criteria_enable as mce, set_flow_table_root_in, set_fte_in,
};

pub(crate) type Handler = fn(&Caps, &mut Objects, &[u8], &mut [u8]) -> CmdResult;

pub(crate) const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
pub(crate) const OTHER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0c];
pub(crate) const BCAST: [u8; 6] = [0xff; 6];

pub(crate) struct T {
    pub(crate) caps: Caps,
    pub(crate) objects: Objects,
}

pub(crate) fn status<V: std::fmt::Debug>(r: Result<V, CmdError>) -> (u8, u32) {
    let e = r.expect_err("refused");
    (e.status, e.syndrome)
}

impl T {
    /// Objects with TIRs 1 to 9 (to RQs of the same numbers) to forward to.
    pub(crate) fn new() -> T {
        let mut objects = Objects::new(MAC);
        for n in 1..=9 {
            objects.tirs.insert_bare(n, n);
        }
        T {
            caps: Caps::connectx5(),
            objects,
        }
    }

    pub(crate) fn run(
        &mut self,
        h: Handler,
        input: &[u8],
        outlen: usize,
    ) -> Result<Vec<u8>, CmdError> {
        let mut out = vec![0u8; outlen];
        h(&self.caps, &mut self.objects, input, &mut out)?;
        Ok(out)
    }

    pub(crate) fn table_input(level: u32, log_size: u32, miss: Option<u32>) -> Vec<u8> {
        let mut i = vec![0u8; create_flow_table_in::BYTES];
        let c = |f: mlx5_prm::Field| f.within(create_flow_table_in::FLOW_TABLE_CONTEXT);
        put(&mut i, c(flow_table_context::LEVEL), level);
        put(&mut i, c(flow_table_context::LOG_SIZE), log_size);
        if let Some(m) = miss {
            put(&mut i, c(flow_table_context::TABLE_MISS_ACTION), 1);
            put(&mut i, c(flow_table_context::TABLE_MISS_ID), m);
        }
        i
    }

    pub(crate) fn create_table_with(&mut self, input: &[u8]) -> Result<u32, CmdError> {
        let out = self.run(cmd_create_flow_table, input, create_flow_table_out::BYTES)?;
        Ok(get(&out, create_flow_table_out::TABLE_ID))
    }

    pub(crate) fn table(
        &mut self,
        level: u32,
        log_size: u32,
        miss: Option<u32>,
    ) -> Result<u32, CmdError> {
        self.create_table_with(&Self::table_input(level, log_size, miss))
    }

    pub(crate) fn group_input(
        table: u32,
        start: u32,
        end: u32,
        enable: u8,
        mask: &[mlx5_prm::Field],
    ) -> Vec<u8> {
        let mut i = vec![0u8; create_flow_group_in::BYTES];
        put(&mut i, create_flow_group_in::TABLE_ID, table);
        put(&mut i, create_flow_group_in::START_FLOW_INDEX, start);
        put(&mut i, create_flow_group_in::END_FLOW_INDEX, end);
        put(
            &mut i,
            create_flow_group_in::MATCH_CRITERIA_ENABLE,
            enable.into(),
        );
        for f in mask {
            let at = f
                .within(fte_match_param::OUTER_HEADERS)
                .within(create_flow_group_in::MATCH_CRITERIA);
            group::set_ones(&mut i, at);
        }
        i
    }

    pub(crate) fn group(
        &mut self,
        table: u32,
        start: u32,
        end: u32,
        mask: &[mlx5_prm::Field],
    ) -> Result<u32, CmdError> {
        let enable = if mask.is_empty() {
            0
        } else {
            mce::OUTER_HEADERS
        };
        let i = Self::group_input(table, start, end, enable, mask);
        let out = self.run(cmd_create_flow_group, &i, create_flow_group_out::BYTES)?;
        Ok(get(&out, create_flow_group_out::GROUP_ID))
    }

    /// SET_FLOW_TABLE_ENTRY input: `value` in the outer headers, `dests` as (type, id).
    pub(crate) fn fte_input(
        table: u32,
        group: u32,
        index: u32,
        action: u16,
        dests: &[(u8, u32)],
        value: &[(mlx5_prm::Field, u32)],
    ) -> Vec<u8> {
        let mut i = vec![0u8; set_fte_in::BYTES + dests.len() * dest_format_struct::BYTES];
        put(&mut i, set_fte_in::TABLE_ID, table);
        put(&mut i, set_fte_in::FLOW_INDEX, index);
        let fc = |f: mlx5_prm::Field| f.within(set_fte_in::FLOW_CONTEXT);
        put(&mut i, fc(flow_context::GROUP_ID), group);
        put(&mut i, fc(flow_context::ACTION), action.into());
        put(
            &mut i,
            fc(flow_context::DESTINATION_LIST_SIZE),
            dests.len() as u32,
        );
        for (f, v) in value {
            let at = f
                .within(fte_match_param::OUTER_HEADERS)
                .within(flow_context::MATCH_VALUE)
                .within(set_fte_in::FLOW_CONTEXT);
            put(&mut i, at, *v);
        }
        let base = fc(flow_context::DESTINATION.as_field()).byte_offset();
        for (k, (t, id)) in dests.iter().enumerate() {
            let d = &mut i[base + k * 8..base + k * 8 + 8];
            put(d, dest_format_struct::DESTINATION_TYPE, (*t).into());
            put(d, dest_format_struct::DESTINATION_ID, *id);
        }
        i
    }

    pub(crate) fn fte(
        &mut self,
        table: u32,
        group: u32,
        index: u32,
        action: u16,
        dests: &[(u8, u32)],
        value: &[(mlx5_prm::Field, u32)],
    ) -> CmdResult {
        let i = Self::fte_input(table, group, index, action, dests, value);
        self.run(cmd_set_fte, &i, 16).map(drop)
    }

    pub(crate) fn delete_fte(&mut self, table: u32, index: u32) -> CmdResult {
        let mut i = vec![0u8; delete_fte_in::BYTES];
        put(&mut i, delete_fte_in::TABLE_ID, table);
        put(&mut i, delete_fte_in::FLOW_INDEX, index);
        self.run(cmd_delete_fte, &i, 16).map(drop)
    }

    pub(crate) fn destroy_group(&mut self, table: u32, group: u32) -> CmdResult {
        let mut i = vec![0u8; destroy_flow_group_in::BYTES];
        put(&mut i, destroy_flow_group_in::TABLE_ID, table);
        put(&mut i, destroy_flow_group_in::GROUP_ID, group);
        self.run(cmd_destroy_flow_group, &i, 16).map(drop)
    }

    pub(crate) fn destroy_table(&mut self, table: u32) -> CmdResult {
        let mut i = vec![0u8; destroy_flow_table_in::BYTES];
        put(&mut i, destroy_flow_table_in::TABLE_ID, table);
        self.run(cmd_destroy_flow_table, &i, 16).map(drop)
    }

    pub(crate) fn root(&mut self, op_mod: u32, table: u32) -> CmdResult {
        let mut i = vec![0u8; set_flow_table_root_in::BYTES];
        put(&mut i, set_flow_table_root_in::OP_MOD, op_mod);
        put(&mut i, set_flow_table_root_in::TABLE_ID, table);
        self.run(cmd_set_flow_table_root, &i, 16).map(drop)
    }

    pub(crate) fn steer(&self, frame: &[u8]) -> Steer<'_> {
        let Ok(Frame::Other(o)) = decode(frame) else {
            panic!("not an Ethernet frame the port passes on");
        };
        self.objects.flow.lookup(&Packet::of(&o))
    }
}

pub(crate) fn mac_value(m: [u8; 6]) -> [(mlx5_prm::Field, u32); 2] {
    [
        (
            l24::DMAC_47_16,
            u32::from_be_bytes([m[0], m[1], m[2], m[3]]),
        ),
        (l24::DMAC_15_0, u16::from_be_bytes([m[4], m[5]]).into()),
    ]
}

/// An Ethernet II frame to `dst` of `ethertype` carrying `payload`.
pub(crate) fn eth(dst: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&OTHER);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An IPv4 frame to `dst` of protocol `proto` whose transport header starts with the ports.
pub(crate) fn ipv4(dst: [u8; 6], proto: u8, sport: u16, dport: u16) -> Vec<u8> {
    let mut ip = vec![
        0x45, 0, 0, 40, 0, 0, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    let sum = crate::roce::ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip.extend_from_slice(&sport.to_be_bytes());
    ip.extend_from_slice(&dport.to_be_bytes());
    ip.extend_from_slice(&[0; 16]);
    eth(dst, 0x0800, &ip)
}

pub(crate) fn arp(dst: [u8; 6]) -> Vec<u8> {
    eth(dst, 0x0806, &[0u8; 28])
}
