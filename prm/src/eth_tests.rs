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
