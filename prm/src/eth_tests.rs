//! Host unit tests of the Ethernet declarations (queue objects, steering, caps, data path).

use crate::*;

#[test]
fn ethernet_queue_layouts() {
    // create_sq_in: ctx at dword 8; sqc.wq at 0x180 inside it; wq.pas right after the wq.
    assert_eq!(create_sq_in::CTX, Field::new(0x100, sqc::BITS));
    let log_wq_sz = wq::LOG_WQ_SZ.within(sqc::WQ).within(create_sq_in::CTX);
    assert_eq!(log_wq_sz.offset, 0x100 + 0x180 + 0x11b);
    assert_eq!(create_sq_in::BITS, 0x100 + sqc::BITS);
    assert_eq!(wq::PAS.elem(0).offset, wq::BITS);
    // An SQ as Linux core/en_main.c `mlx5e_create_sq` fills it: cqn and tis_num_0 land in
    // context dwords 2 and 11.
    let mut inb = [0u8; create_sq_in::BYTES];
    let ctx = create_sq_in::CTX.bytes_mut(&mut inb).unwrap();
    sqc::CQN.set(ctx, 0x12_3456).unwrap();
    sqc::TIS_NUM_0.set(ctx, 0xab_cdef).unwrap();
    sqc::STATE.set(ctx, sqc_state::RST.into()).unwrap();
    wq::WQ_TYPE
        .within(sqc::WQ)
        .set(ctx, wq_type::CYCLIC.into())
        .unwrap();
    assert_eq!(&inb[0x20 + 8..0x20 + 12], &[0x00, 0x12, 0x34, 0x56]);
    assert_eq!(&inb[0x20 + 44..0x20 + 48], &[0x00, 0xab, 0xcd, 0xef]);
    assert_eq!(inb[0x20 + 0x30], 0x10);
    // rqc and sqc share the wq position; tirc.inline_rqn is dword 7.
    assert_eq!(rqc::WQ, sqc::WQ);
    assert_eq!(tirc::INLINE_RQN, Field::new(0xe8, 0x18));
    assert_eq!(create_tir_in::CTX.offset, 0x100);
    assert_eq!(create_tis_in::CTX, Field::new(0x100, tisc::BITS));
    assert_eq!(modify_rq_in::CTX, modify_sq_in::SQ_CONTEXT);
}

#[test]
fn ethernet_queue_constants() {
    assert_eq!(sqc_state::RDY, rqc_state::RDY);
    assert_eq!(sqc_state::ERR, 3);
    assert_eq!(wq_type::CYCLIC, 1);
    assert_eq!(tirc_disp_type::DIRECT, 0);
    assert_eq!(inline_mode::L2, 1);
    assert_eq!(cap_inline_mode::VPORT_CONTEXT, 1);
    assert_eq!(modify_rq_bitmask::RQ_COUNTER_SET_ID, 8);
}

#[test]
fn steering_layouts() {
    // A rule as Linux core/fs_cmd.c `mlx5_cmd_set_fte` writes it: flow_context at 0x200, the
    // match value inside it, the first destination right after set_fte_in.
    assert_eq!(
        set_fte_in::FLOW_CONTEXT,
        Field::new(0x200, flow_context::BITS)
    );
    assert_eq!(set_fte_in::BYTES, 0x340);
    let dest0 = flow_context::DESTINATION
        .elem(0)
        .within(set_fte_in::FLOW_CONTEXT);
    assert_eq!(dest0.offset, set_fte_in::BITS);
    assert_eq!(
        flow_context::DESTINATION.elem(1).width,
        dest_format_struct::BITS
    );
    let dmac = fte_match_set_lyr_2_4::DMAC_47_16
        .within(fte_match_param::OUTER_HEADERS)
        .within(flow_context::MATCH_VALUE);
    assert_eq!(dmac.offset, 0x200 + 0x40);
    let mut inb = [0u8; create_flow_group_in::BYTES];
    create_flow_group_in::MATCH_CRITERIA_ENABLE
        .set(&mut inb, match_criteria_enable::OUTER_HEADERS.into())
        .unwrap();
    assert_eq!(inb[0x3f], 1);
    assert_eq!(create_flow_group_in::MATCH_CRITERIA.offset, 0x200);
    assert_eq!(fte_match_param::BYTES, 0x200);
    assert_eq!(create_flow_table_in::FLOW_TABLE_CONTEXT.offset, 0xc0);
    assert_eq!(flow_table_type::NIC_RX, 0);
    assert_eq!(flow_destination_type::TIR, 2);
    assert_eq!(flow_context_action::FWD_DEST | flow_context_action::DROP, 6);
}

#[test]
fn ethernet_caps_and_vport_context() {
    // MLX5_CAP_ETH reads the ETHERNET_OFFLOADS page through the cap union.
    assert_eq!(
        hca_cap_union::PER_PROTOCOL_NETWORKING_OFFLOAD_CAPS.width,
        per_protocol_networking_offload_caps::BITS
    );
    assert_eq!(
        per_protocol_networking_offload_caps::WQE_INLINE_MODE,
        Field::new(0x12, 2)
    );
    let nic_rx_ft_support = flow_table_prop_layout::FT_SUPPORT
        .within(flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE);
    assert_eq!(nic_rx_ft_support.offset, 0x200);
    let outer_dmac = flow_table_fields_supported::OUTER_DMAC
        .within(flow_table_prop_layout::FT_FIELD_SUPPORT)
        .within(flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE);
    assert_eq!(outer_dmac.offset, 0x300);
    // The address list follows the context: entry i at 0x800 + 64 i, the MAC at byte 2.
    let mac1 = mac_address_layout::MAC_ADDR_47_32
        .within(nic_vport_context::CURRENT_UC_MAC_ADDRESS.elem(1));
    assert_eq!(mac1.byte_offset(), 0x100 + 8 + 2);
    assert_eq!(
        modify_nic_vport_context_in::BYTES + 2 * mac_address_layout::BYTES,
        0x200 + 16
    );
    // The old linux_layout names are the same bits.
    assert_eq!(
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_47_32,
        Field::new(0x7b0, 0x10)
    );
    assert_eq!(
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_31_0,
        Field::new(0x7c0, 0x20)
    );
    assert_eq!(
        linux_layout::nic_vport_context::MTU,
        Field::new(0x130, 0x10)
    );
    assert_eq!(
        linux_layout::query_nic_vport_context_in::ALLOWED_LIST_TYPE,
        Field::new(0x65, 3)
    );
    let mut ctx = [0u8; nic_vport_context::BYTES];
    nic_vport_context::PROMISC_ALL.set(&mut ctx, 1).unwrap();
    nic_vport_context::ALLOWED_LIST_TYPE
        .set(&mut ctx, nic_vport_list_type::MC.into())
        .unwrap();
    assert_eq!(ctx[0xf0], 0x20 | 0x01);
    assert_eq!(cmd_hca_cap::TS_CQE_TO_DEST_CQN, Field::new(0xb2, 1));
}

#[test]
fn ethernet_data_path() {
    // 18 inline bytes (MLX5E_MIN_INLINE): 2 in the segment, 16 in one more unit.
    assert_eq!(eth_seg::inline_ds(eth_seg::MIN_INLINE_L2), 1);
    assert_eq!(eth_seg::inline_ds(19), 2);
    assert_eq!(eth_seg::inline_ds(2), 0);
    assert_eq!(eth_seg::inline_ds(0), 0);
    assert_eq!(
        eth_seg::INLINE_HDR_START + eth_seg::INLINE_HDR_START_SZ,
        eth_seg::SIZE
    );
    assert_eq!(
        eth_seg::EMPTY_DS_COUNT * wqe::SEND_WQE_DS,
        wqe::ctrl_seg::SIZE + eth_seg::SIZE
    );
    assert_eq!(
        eth_seg::cs_flags::L3_CSUM | eth_seg::cs_flags::L4_CSUM,
        0xc0
    );
    let t = eth_cqe::l4_l3_hdr_type(eth_cqe::l4_hdr_type::UDP, eth_cqe::l3_hdr_type::IPV4, false);
    assert_eq!(t, 0x28);
    assert_eq!(eth_cqe::l4_hdr_type(t), eth_cqe::l4_hdr_type::UDP);
    assert_eq!(eth_cqe::l3_hdr_type(t), eth_cqe::l3_hdr_type::IPV4);
    assert!(!eth_cqe::has_vlan(t));
    assert_eq!(eth_cqe::lro_num_seg(0x0300_0012), 3);
    assert!(eth_cqe::lro_tcppsh(0x40));
    assert_eq!(cqe::offset::L4_L3_HDR_TYPE, 29);
    assert_eq!(cqe::offset::CHECK_SUM, 20);
    assert_eq!(eth_cqe::hds_ip_ext::L3_OK | eth_cqe::hds_ip_ext::L4_OK, 0x6);
}
