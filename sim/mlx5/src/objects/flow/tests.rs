//! The flow steering commands (every refusal) and the lookup's decisions.

use super::steer::Steer;
use super::testing::*;
use super::*;
use crate::control::caps;
use crate::control::result::{get, put};
use crate::control::syndrome;
use mlx5_prm::cmd_status;
use mlx5_prm::{
    create_flow_group_in, create_flow_group_out, create_flow_table_in, flow_context,
    flow_context_action as act, flow_destination_type as dt, flow_table_context, fte_match_param,
    fte_match_set_lyr_2_4 as l24, match_criteria_enable as mce, set_flow_table_root_in, set_fte_in,
};

#[test]
fn create_flow_table_checks_its_context() {
    let mut t = T::new();
    let a = t.table(0, 4, None).unwrap();
    let b = t.table(1, 4, None).unwrap();
    assert!(a >= 1 && b != a);
    // Miss to a deeper table is fine; to a shallower one, an unknown one or an unknown
    // action is not.
    t.table(0, 0, Some(b)).unwrap();
    assert_eq!(
        status(t.table(1, 0, Some(b))),
        (cmd_status::BAD_PARAM_ERR, syndrome::FT_MISS)
    );
    assert_eq!(
        status(t.table(0, 0, Some(999))),
        (cmd_status::BAD_PARAM_ERR, syndrome::FT_MISS)
    );
    let mut i = T::table_input(0, 0, None);
    put(
        &mut i,
        flow_table_context::TABLE_MISS_ACTION.within(create_flow_table_in::FLOW_TABLE_CONTEXT),
        2,
    );
    assert_eq!(
        status(t.create_table_with(&i)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FT_MISS)
    );
    // Level and size limits.
    assert!(t
        .table(caps::FT_MAX_LEVEL, caps::FT_LOG_MAX_SIZE, None)
        .is_ok());
    assert_eq!(
        status(t.table(caps::FT_MAX_LEVEL + 1, 0, None)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FT_LEVEL)
    );
    assert_eq!(
        status(t.table(0, caps::FT_LOG_MAX_SIZE + 1, None)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FT_LOG_SIZE)
    );
    // Features not advertised; another table type; another vport.
    for f in [
        flow_table_context::REFORMAT_EN,
        flow_table_context::DECAP_EN,
        flow_table_context::SW_OWNER,
        flow_table_context::TERMINATION_TABLE,
    ] {
        let mut i = T::table_input(0, 0, None);
        put(
            &mut i,
            f.within(create_flow_table_in::FLOW_TABLE_CONTEXT),
            1,
        );
        assert_eq!(
            status(t.create_table_with(&i)),
            (cmd_status::BAD_PARAM_ERR, syndrome::FT_UNSUPPORTED)
        );
    }
    let mut i = T::table_input(0, 0, None);
    put(
        &mut i,
        create_flow_table_in::TABLE_TYPE,
        mlx5_prm::flow_table_type::NIC_TX.into(),
    );
    assert_eq!(
        status(t.create_table_with(&i)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FLOW_TABLE_TYPE)
    );
    let mut i = T::table_input(0, 0, None);
    put(&mut i, create_flow_table_in::OTHER_VPORT, 1);
    put(&mut i, create_flow_table_in::VPORT_NUMBER, 1);
    assert_eq!(
        status(t.create_table_with(&i)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FLOW_OTHER_VPORT)
    );
}

#[test]
fn tables_are_limited_to_log_max_ft_num() {
    let mut t = T::new();
    for _ in 0..1 << caps::FT_LOG_MAX_NUM {
        t.table(0, 0, None).unwrap();
    }
    assert_eq!(
        status(t.table(0, 0, None)),
        (cmd_status::LIM_ERR, syndrome::FT_EXHAUSTED)
    );
}

#[test]
fn create_flow_group_checks_range_overlap_and_criteria() {
    let mut t = T::new();
    let ft = t.table(0, 3, None).unwrap();
    let g = t
        .group(ft, 0, 3, &[l24::DMAC_47_16, l24::DMAC_15_0])
        .unwrap();
    assert!(g >= 1);
    assert_eq!(
        status(t.group(ft, 3, 4, &[])),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_OVERLAP)
    );
    assert_eq!(
        status(t.group(ft, 5, 8, &[])),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_RANGE)
    );
    assert_eq!(
        status(t.group(ft, 6, 5, &[])),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_RANGE)
    );
    assert_eq!(
        status(t.group(999, 0, 0, &[])),
        (cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN)
    );
    // Fields the model does not evaluate (TCP flags, TTL) are refused, in the outer headers
    // or in another part that is enabled; masks of a part not enabled are ignored.
    assert_eq!(
        status(t.group(ft, 4, 4, &[l24::TCP_FLAGS])),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_CRITERIA)
    );
    assert_eq!(
        status(t.group(ft, 4, 4, &[l24::TTL_HOPLIMIT])),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_CRITERIA)
    );
    let mut i = T::group_input(ft, 4, 4, mce::MISC_PARAMETERS, &[]);
    let misc = mlx5_prm::fte_match_set_misc::SOURCE_PORT
        .within(fte_match_param::MISC_PARAMETERS)
        .within(create_flow_group_in::MATCH_CRITERIA);
    put(&mut i, misc, 0xffff);
    assert_eq!(
        status(t.run(cmd_create_flow_group, &i, 16)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_CRITERIA)
    );
    put(&mut i, create_flow_group_in::MATCH_CRITERIA_ENABLE, 0);
    t.run(cmd_create_flow_group, &i, 16).unwrap();
    // Match definers are not advertised.
    let mut i = T::group_input(ft, 5, 5, 0, &[]);
    put(&mut i, create_flow_group_in::MATCH_DEFINER_ID, 1);
    assert_eq!(
        status(t.run(cmd_create_flow_group, &i, 16)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FG_UNSUPPORTED)
    );
    // Every supported field at once is fine.
    t.group(ft, 5, 7, &group::SUPPORTED_OUTER).unwrap();
}

#[test]
fn set_fte_checks_index_group_action_and_destinations() {
    let mut t = T::new();
    let ft = t.table(0, 3, None).unwrap();
    let deep = t.table(1, 0, None).unwrap();
    let g = t.group(ft, 0, 3, &[l24::ETHERTYPE]).unwrap();
    let g2 = t.group(ft, 4, 7, &[]).unwrap();
    let tir = [(dt::TIR, 7)];
    t.fte(ft, g, 0, act::FWD_DEST, &tir, &[(l24::ETHERTYPE, 0x0806)])
        .unwrap();
    assert_eq!(t.objects.flow.entries(ft), 1);
    let bad = |t: &mut T, group, index, action, dests: &[(u8, u32)]| {
        status(t.fte(ft, group, index, action, dests, &[]))
    };
    assert_eq!(
        bad(&mut t, g, 0, act::FWD_DEST, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_EXISTS)
    );
    assert_eq!(
        bad(&mut t, g, 4, act::FWD_DEST, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_INDEX)
    );
    assert_eq!(
        bad(&mut t, g2, 1, act::FWD_DEST, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_INDEX)
    );
    assert_eq!(
        bad(&mut t, 999, 1, act::FWD_DEST, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_GROUP)
    );
    assert_eq!(
        bad(&mut t, g, 1, 0, &[]),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_ACTION)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::ALLOW, &[]),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_ACTION)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST | act::COUNT, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_ACTION)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST | act::DROP, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_ACTION)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST, &[]),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_COUNT)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::DROP, &tir),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_COUNT)
    );
    let many = vec![(dt::TIR, 7); (1 << caps::FT_LOG_MAX_DESTINATION) + 1];
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST, &many),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_COUNT)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST, &[(dt::VPORT, 0)]),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_TYPE)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST, &[(dt::FLOW_TABLE, 999)]),
        (cmd_status::BAD_RES_ERR, syndrome::FTE_DEST_TABLE)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST, &[(dt::FLOW_TABLE, ft)]),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_LEVEL)
    );
    assert_eq!(
        bad(
            &mut t,
            g,
            1,
            act::FWD_DEST,
            &[(dt::FLOW_TABLE, deep), (dt::TIR, 7)]
        ),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_DEST_TYPE)
    );
    assert_eq!(
        bad(&mut t, g, 1, act::FWD_DEST, &[(dt::TIR, 99)]),
        (cmd_status::BAD_RES_ERR, syndrome::FTE_DEST_TIR)
    );
}

#[test]
fn set_fte_takes_its_destination_list_and_deletes() {
    let mut t = T::new();
    let ft = t.table(0, 3, None).unwrap();
    let deep = t.table(1, 0, None).unwrap();
    let g = t.group(ft, 0, 3, &[l24::ETHERTYPE]).unwrap();
    let g2 = t.group(ft, 4, 7, &[]).unwrap();
    let tir = [(dt::TIR, 7)];
    t.fte(ft, g, 0, act::FWD_DEST, &tir, &[(l24::ETHERTYPE, 0x0806)])
        .unwrap();
    // The destination list must be in the input.
    let mut short = T::fte_input(ft, g, 1, act::FWD_DEST, &tir, &[]);
    short.truncate(set_fte_in::BYTES);
    assert_eq!(
        status(t.run(cmd_set_fte, &short, 16)),
        (cmd_status::BAD_INP_LEN_ERR, syndrome::FTE_INLEN)
    );
    // Counters, reformat, ignore_flow_level: not advertised.
    for f in [
        flow_context::FLOW_COUNTER_LIST_SIZE.within(set_fte_in::FLOW_CONTEXT),
        flow_context::PACKET_REFORMAT_ID.within(set_fte_in::FLOW_CONTEXT),
        flow_context::EXTENDED_DESTINATION.within(set_fte_in::FLOW_CONTEXT),
        set_fte_in::IGNORE_FLOW_LEVEL,
    ] {
        let mut i = T::fte_input(ft, g, 1, act::FWD_DEST, &tir, &[]);
        put(&mut i, f, 1);
        assert_eq!(
            status(t.run(cmd_set_fte, &i, 16)),
            (cmd_status::BAD_PARAM_ERR, syndrome::FTE_UNSUPPORTED)
        );
    }
    let mut i = T::fte_input(ft, g, 1, act::FWD_DEST, &tir, &[]);
    put(&mut i, set_fte_in::OP_MOD, 2);
    assert_eq!(
        status(t.run(cmd_set_fte, &i, 16)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_OP_MOD)
    );
    // The good ones: to a deeper table, a drop, several TIRs.
    t.fte(ft, g, 1, act::FWD_DEST, &[(dt::FLOW_TABLE, deep)], &[])
        .unwrap();
    t.fte(ft, g, 2, act::DROP, &[], &[]).unwrap();
    t.fte(ft, g2, 4, act::FWD_DEST, &[(dt::TIR, 7), (dt::TIR, 8)], &[])
        .unwrap();
    assert_eq!(t.objects.flow.entries(ft), 4);
    assert!(t.objects.flow.references_tir(8) && !t.objects.flow.references_tir(9));
    // Delete: twice is refused.
    t.delete_fte(ft, 4).unwrap();
    assert_eq!(
        status(t.delete_fte(ft, 4)),
        (cmd_status::BAD_RES_ERR, syndrome::FTE_UNKNOWN)
    );
    assert_eq!(
        status(t.delete_fte(999, 0)),
        (cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN)
    );
    assert!(!t.objects.flow.references_tir(8));
}

#[test]
fn set_fte_modify_changes_action_destinations_and_tag_only() {
    use mlx5_prm::set_fte::modify_enable_mask as m;
    let mut t = T::new();
    let ft = t.table(0, 1, None).unwrap();
    let g = t.group(ft, 0, 1, &[l24::ETHERTYPE]).unwrap();
    t.fte(
        ft,
        g,
        0,
        act::FWD_DEST,
        &[(dt::TIR, 7)],
        &[(l24::ETHERTYPE, 0x0806)],
    )
    .unwrap();
    t.root(0, ft).unwrap();
    let modify = |t: &mut T, mask: u32, action, dests: &[(u8, u32)], group| {
        let mut i = T::fte_input(ft, group, 0, action, dests, &[(l24::ETHERTYPE, 0x0800)]);
        put(&mut i, set_fte_in::OP_MOD, 1);
        put(&mut i, set_fte_in::MODIFY_ENABLE_MASK, mask);
        t.run(cmd_set_fte, &i, 16).map(drop)
    };
    modify(
        &mut t,
        1 << m::DESTINATION_LIST,
        act::FWD_DEST,
        &[(dt::TIR, 9)],
        g,
    )
    .unwrap();
    // The match stays ARP (the modify's value is ignored), the destination is the new one.
    assert_eq!(t.steer(&arp(MAC)), Steer::Deliver(&[Dest::Tir(9)]));
    modify(&mut t, 1 << m::ACTION, act::DROP, &[], g).unwrap();
    assert_eq!(t.steer(&arp(MAC)), Steer::Dropped);
    assert_eq!(
        status(modify(&mut t, 1 << m::FLOW_COUNTERS, act::DROP, &[], g)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_UNSUPPORTED)
    );
    assert_eq!(
        status(modify(&mut t, 1 << m::ACTION, act::DROP, &[], g + 1)),
        (cmd_status::BAD_PARAM_ERR, syndrome::FTE_GROUP)
    );
    t.delete_fte(ft, 0).unwrap();
    assert_eq!(
        status(modify(&mut t, 1 << m::ACTION, act::DROP, &[], g)),
        (cmd_status::BAD_RES_ERR, syndrome::FTE_UNKNOWN)
    );
}

#[test]
fn destroys_are_refused_while_in_use() {
    let mut t = T::new();
    let ft = t.table(0, 1, None).unwrap();
    let deep = t.table(1, 0, None).unwrap();
    let missed_to = t.table(2, 0, None).unwrap();
    let via_miss = t.table(1, 0, Some(missed_to)).unwrap();
    let g = t.group(ft, 0, 1, &[]).unwrap();
    t.fte(ft, g, 0, act::FWD_DEST, &[(dt::FLOW_TABLE, deep)], &[])
        .unwrap();
    t.root(0, ft).unwrap();
    assert_eq!(
        status(t.destroy_group(ft, g)),
        (cmd_status::RES_BUSY, syndrome::FG_BUSY)
    );
    assert_eq!(
        status(t.destroy_table(ft)),
        (cmd_status::RES_BUSY, syndrome::FT_BUSY_GROUP)
    );
    assert_eq!(
        status(t.destroy_table(deep)),
        (cmd_status::RES_BUSY, syndrome::FT_BUSY_REFERENCED)
    );
    assert_eq!(
        status(t.destroy_table(missed_to)),
        (cmd_status::RES_BUSY, syndrome::FT_BUSY_REFERENCED)
    );
    assert_eq!(
        status(t.destroy_group(ft, g + 1)),
        (cmd_status::BAD_RES_ERR, syndrome::FG_UNKNOWN)
    );
    // Children first, as Linux fs_core.c does: then everything goes, the root with it.
    t.delete_fte(ft, 0).unwrap();
    t.destroy_group(ft, g).unwrap();
    t.destroy_table(deep).unwrap();
    assert_eq!(t.objects.flow.root(), Some(ft));
    t.destroy_table(ft).unwrap();
    assert_eq!(t.objects.flow.root(), None);
    t.destroy_table(via_miss).unwrap();
    t.destroy_table(missed_to).unwrap();
    assert_eq!(
        status(t.destroy_table(ft)),
        (cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN)
    );
}

#[test]
fn set_flow_table_root_connects_and_disconnects() {
    let mut t = T::new();
    let ft = t.table(0, 0, None).unwrap();
    assert_eq!(
        status(t.root(0, 999)),
        (cmd_status::BAD_RES_ERR, syndrome::FT_UNKNOWN)
    );
    assert_eq!(
        status(t.root(2, ft)),
        (cmd_status::BAD_PARAM_ERR, syndrome::ROOT_OP_MOD)
    );
    let mut i = vec![0u8; set_flow_table_root_in::BYTES];
    put(&mut i, set_flow_table_root_in::TABLE_ID, ft);
    put(&mut i, set_flow_table_root_in::UNDERLAY_QPN, 5);
    assert_eq!(
        status(t.run(cmd_set_flow_table_root, &i, 16)),
        (cmd_status::BAD_PARAM_ERR, syndrome::ROOT_UNSUPPORTED)
    );
    assert_eq!(t.objects.flow.root(), None);
    t.root(0, ft).unwrap();
    assert_eq!(t.objects.flow.root(), Some(ft));
    t.root(1, 0).unwrap();
    assert_eq!(t.objects.flow.root(), None);
}

/// mlx5e's shape: an L2 table (own MAC, broadcast, then a catch-all at the highest index)
/// forwarding to a TTC-like table that sorts by EtherType / IP protocol / port.
#[test]
fn lookup_takes_the_first_matching_entry_and_follows_tables() {
    let mut t = T::new();
    assert_eq!(t.steer(&arp(MAC)), Steer::NoRoot);
    let l2 = t.table(0, 3, None).unwrap();
    let ttc = t.table(1, 3, None).unwrap();
    let full = t
        .group(l2, 0, 1, &[l24::DMAC_47_16, l24::DMAC_15_0])
        .unwrap();
    let any = t.group(l2, 7, 7, &[]).unwrap();
    let to_ttc = [(dt::FLOW_TABLE, ttc)];
    t.fte(l2, full, 0, act::FWD_DEST, &to_ttc, &mac_value(MAC))
        .unwrap();
    t.fte(l2, full, 1, act::FWD_DEST, &to_ttc, &mac_value(BCAST))
        .unwrap();
    t.root(0, l2).unwrap();
    // In the TTC table: UDP to port 7 -> TIR 3, any TCP -> TIR 2, ARP -> TIR 1, the rest missed.
    let udp_port = t
        .group(
            ttc,
            0,
            0,
            &[l24::ETHERTYPE, l24::IP_PROTOCOL, l24::UDP_DPORT],
        )
        .unwrap();
    let proto = t
        .group(ttc, 1, 1, &[l24::ETHERTYPE, l24::IP_PROTOCOL])
        .unwrap();
    let etype = t.group(ttc, 2, 2, &[l24::ETHERTYPE]).unwrap();
    t.fte(
        ttc,
        udp_port,
        0,
        act::FWD_DEST,
        &[(dt::TIR, 3)],
        &[
            (l24::ETHERTYPE, 0x0800),
            (l24::IP_PROTOCOL, 17),
            (l24::UDP_DPORT, 7),
        ],
    )
    .unwrap();
    t.fte(
        ttc,
        proto,
        1,
        act::FWD_DEST,
        &[(dt::TIR, 2)],
        &[(l24::ETHERTYPE, 0x0800), (l24::IP_PROTOCOL, 6)],
    )
    .unwrap();
    t.fte(
        ttc,
        etype,
        2,
        act::FWD_DEST,
        &[(dt::TIR, 1)],
        &[(l24::ETHERTYPE, 0x0806)],
    )
    .unwrap();
    let tir = |n| {
        Steer::Deliver(match n {
            1 => &[Dest::Tir(1)],
            2 => &[Dest::Tir(2)],
            _ => &[Dest::Tir(3)],
        })
    };
    assert_eq!(t.steer(&arp(MAC)), tir(1));
    assert_eq!(t.steer(&arp(BCAST)), tir(1));
    assert_eq!(t.steer(&ipv4(MAC, 6, 1234, 80)), tir(2));
    assert_eq!(t.steer(&ipv4(MAC, 17, 1234, 7)), tir(3));
    assert_eq!(t.steer(&ipv4(MAC, 17, 1234, 8)), Steer::Missed);
    assert_eq!(t.steer(&eth(MAC, 0x88b5, &[0; 46])), Steer::Missed);
    // Another unicast MAC misses the L2 table...
    assert_eq!(t.steer(&arp(OTHER)), Steer::Missed);
    // ... until the catch-all (at a higher index than the full-MAC entries) takes it; the
    // own MAC still goes through its own entry first.
    t.fte(l2, any, 7, act::DROP, &[], &[]).unwrap();
    assert_eq!(t.steer(&arp(OTHER)), Steer::Dropped);
    assert_eq!(t.steer(&arp(MAC)), tir(1));
}

/// A table that misses hands the frame to its miss table; TCP ports and the IP version are
/// matched.
#[test]
fn lookup_follows_miss_tables_and_matches_tcp_ports() {
    let mut t = T::new();
    // The last table takes everything to TIRs 4 and 5; the one before drops ARP and sends
    // its misses there.
    let last = t.table(2, 0, None).unwrap();
    let lg = t.group(last, 0, 0, &[]).unwrap();
    let both = [(dt::TIR, 4), (dt::TIR, 5)];
    t.fte(last, lg, 0, act::FWD_DEST, &both, &[]).unwrap();
    let ttc = t.table(1, 0, Some(last)).unwrap();
    let tg = t.group(ttc, 0, 0, &[l24::ETHERTYPE]).unwrap();
    t.fte(ttc, tg, 0, act::DROP, &[], &[(l24::ETHERTYPE, 0x0806)])
        .unwrap();
    t.root(0, ttc).unwrap();
    assert_eq!(t.steer(&arp(MAC)), Steer::Dropped);
    let to_both = Steer::Deliver(&[Dest::Tir(4), Dest::Tir(5)]);
    assert_eq!(t.steer(&ipv4(MAC, 17, 1, 8)), to_both);
    // An empty root table that misses to the one before: the same.
    let l2 = t.table(0, 0, Some(ttc)).unwrap();
    t.root(0, l2).unwrap();
    assert_eq!(t.steer(&arp(MAC)), Steer::Dropped);
    assert_eq!(t.steer(&ipv4(MAC, 17, 1, 8)), to_both);
    // TCP ports are matched too.
    let tcp = t.table(0, 0, None).unwrap();
    let tg = t
        .group(tcp, 0, 0, &[l24::TCP_DPORT, l24::IP_VERSION])
        .unwrap();
    t.fte(
        tcp,
        tg,
        0,
        act::FWD_DEST,
        &[(dt::TIR, 6)],
        &[(l24::TCP_DPORT, 7), (l24::IP_VERSION, 4)],
    )
    .unwrap();
    t.root(0, tcp).unwrap();
    assert_eq!(
        t.steer(&ipv4(MAC, 6, 9, 7)),
        Steer::Deliver(&[Dest::Tir(6)])
    );
    assert_eq!(t.steer(&ipv4(MAC, 6, 7, 9)), Steer::Missed);
    assert_eq!(
        t.steer(&ipv4(MAC, 17, 9, 7)),
        Steer::Missed,
        "UDP port 7 is not TCP port 7"
    );
}

/// Bits of an entry's value outside its group's mask do not take part in the match.
#[test]
fn an_entry_matches_under_its_groups_mask_only() {
    let mut t = T::new();
    let ft = t.table(0, 0, None).unwrap();
    let g = t.group(ft, 0, 0, &[l24::ETHERTYPE]).unwrap();
    t.fte(
        ft,
        g,
        0,
        act::FWD_DEST,
        &[(dt::TIR, 1)],
        &[(l24::ETHERTYPE, 0x0806), (l24::IP_PROTOCOL, 6)],
    )
    .unwrap();
    t.root(0, ft).unwrap();
    assert_eq!(t.steer(&arp(MAC)), Steer::Deliver(&[Dest::Tir(1)]));
    // Criteria not enabled are not compared: a group with a mask but enable 0 matches all.
    let ft2 = t.table(0, 0, None).unwrap();
    let i = T::group_input(ft2, 0, 0, 0, &[l24::ETHERTYPE]);
    let out = t
        .run(cmd_create_flow_group, &i, create_flow_group_out::BYTES)
        .unwrap();
    let g2 = get(&out, create_flow_group_out::GROUP_ID);
    t.fte(
        ft2,
        g2,
        0,
        act::FWD_DEST,
        &[(dt::TIR, 2)],
        &[(l24::ETHERTYPE, 0x0800)],
    )
    .unwrap();
    t.root(0, ft2).unwrap();
    assert_eq!(t.steer(&arp(MAC)), Steer::Deliver(&[Dest::Tir(2)]));
}
