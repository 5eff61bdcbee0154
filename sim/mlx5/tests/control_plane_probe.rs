//! What Linux's mlx5_core probe asks of the control plane, driven through raw PRM commands:
//! the NIC vport and RoCE addresses, QUERY_ADAPTER and SET_DRIVER_VERSION, and a replay of the
//! probe itself.

mod raw;

use mlx5_prm::*;
use mlx5_sim::control::syndrome as syn;
use mlx5_sim::InProcHca;
use raw::{input, set, up, Raw};

#[test]
fn vport_and_roce_addresses() {
    let mut r = up();
    let d = r.exec(&input(opcode::QUERY_VPORT_STATE, 0, 16), 16);
    d.ok();
    assert_eq!(d.get(query_vport_state_out::STATE), 1);
    r.exec(&input(opcode::QUERY_VPORT_STATE, 1, 16), 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::VPORT_STATE_OP_MOD);
    let q = input(opcode::QUERY_NIC_VPORT_CONTEXT, 0, 16);
    let d = r.exec(&q, query_nic_vport_context_out::BYTES);
    d.ok();
    let ctx = &d.out[16..];
    assert_eq!(nic_vport_context::ROCE_EN.get(ctx), Ok(0));
    assert_eq!(
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_47_32.get(ctx),
        Ok(0x0200)
    );
    assert_eq!(
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_31_0.get(ctx),
        Ok(1)
    );
    // roce_en only changes when field_select says so (Linux core/vport.c
    // `mlx5_nic_vport_update_roce_state`).
    let mut m = input(
        opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        modify_nic_vport_context_in::BYTES,
    );
    let ctx_at = modify_nic_vport_context_in::NIC_VPORT_CONTEXT.offset;
    set(
        &mut m,
        Field::new(ctx_at + nic_vport_context::ROCE_EN.offset, 1),
        1,
    );
    r.exec(&m, 16).ok();
    assert!(!r.dev.with_hca(|h| h.roce_enabled()));
    let fs = modify_nic_vport_context_in::FIELD_SELECT.offset;
    set(
        &mut m,
        Field::new(fs + modify_nic_vport_field_select::ROCE_EN.offset, 1),
        1,
    );
    r.exec(&m, 16).ok();
    assert!(r.dev.with_hca(|h| h.roce_enabled()));
    set(
        &mut m,
        Field::new(fs + modify_nic_vport_field_select::PROMISC.offset, 1),
        1,
    );
    r.exec(&m, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::VPORT_FIELD_SELECT);
    let mut other = q.clone();
    set(&mut other, Field::new(0x40, 1), 1);
    r.exec(&other, query_nic_vport_context_out::BYTES)
        .fails(cmd_status::BAD_PARAM_ERR, syn::VPORT_OTHER);
    // GID table: empty, set a RoCE v2 IPv4-mapped GID, read it back, delete it.
    let mut qa = input(opcode::QUERY_ROCE_ADDRESS, 0, 16);
    set(&mut qa, query_roce_address_in::ROCE_ADDRESS_INDEX, 1);
    let d = r.exec(&qa, query_roce_address_out::BYTES);
    d.ok();
    assert!(d.out[16..48].iter().all(|&b| b == 0));
    let mut sa = input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
    set(&mut sa, set_roce_address_in::ROCE_ADDRESS_INDEX, 1);
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
    sa[16..32].copy_from_slice(&gid);
    sa[16 + 0x12..16 + 0x18].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    let ra = set_roce_address_in::ROCE_ADDRESS.offset;
    set(
        &mut sa,
        Field::new(ra + roce_addr_layout::ROCE_VERSION.offset, 8),
        2,
    );
    r.exec(&sa, 16).ok();
    let d = r.exec(&qa, query_roce_address_out::BYTES);
    d.ok();
    assert_eq!(&d.out[16..32], &gid);
    assert_eq!(r.dev.with_hca(|h| h.roce_gid(1)), Some(gid));
    set(
        &mut sa,
        Field::new(ra + roce_addr_layout::ROCE_VERSION.offset, 8),
        1,
    );
    r.exec(&sa, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::GID_TYPE);
    set(&mut sa, set_roce_address_in::ROCE_ADDRESS_INDEX, 64);
    r.exec(&sa, 16).fails(cmd_status::IX_ERR, syn::GID_INDEX);
    let mut del = input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
    set(&mut del, set_roce_address_in::ROCE_ADDRESS_INDEX, 1);
    r.exec(&del, 16).ok();
    assert_eq!(r.dev.with_hca(|h| h.roce_gid(1)), None);
}

#[test]
fn query_adapter_and_driver_version() {
    let mut r = up();
    let d = r.exec(
        &input(opcode::QUERY_ADAPTER, 0, 16),
        query_adapter_out::BYTES,
    );
    d.ok();
    let blk = &d.out[16..];
    assert_eq!(
        query_adapter_param_block::IEEE_VENDOR_ID.get(blk),
        Ok(0x0002c9)
    );
    let mut v = input(opcode::SET_DRIVER_VERSION, 0, set_driver_version_in::BYTES);
    v[16..16 + 11].copy_from_slice(b"rust,mlx5,1");
    r.exec(&v, 16).ok();
    assert_eq!(
        r.dev.with_hca(|h| h.driver_version().map(str::to_owned)),
        Some("rust,mlx5,1".to_owned())
    );
}

#[test]
fn linux_probe_replay() {
    // drivers/net/ethernet/mellanox/mlx5/core (Debian 6.1), per the project's probe notes.
    let dev = InProcHca::deterministic();
    // Registers before any command.
    let fw = dev.reg32(0x0);
    assert_eq!(fw & 0xffff, 16, "fw major");
    assert_eq!(dev.reg32(0x1fc) >> 31, 0);
    assert_eq!(dev.reg32(0x4) >> 16, 5);
    let lsz = dev.reg32(0x14) & 0xff;
    assert_eq!((lsz >> 4, lsz & 0xf), (5, 6));
    assert_eq!(
        dev.reg32(0xffc),
        0,
        "cmd_q_init_to 0: Linux keeps its own timeouts (no DTOR)"
    );
    // Health poll registers.
    assert_eq!(dev.reg32(0x238) >> 31, 0);
    assert_eq!(dev.reg32(0x23c) >> 16 & 0xff, 0);
    let mut r = Raw::new(dev);
    // mlx5_function_enable.
    r.enable_hca().ok();
    let d = r.exec(&input(opcode::QUERY_ISSI, 0, 16), query_issi_out::BYTES);
    d.ok();
    assert_ne!(d.get(query_issi_out::SUPPORTED_ISSI_DW0) & 2, 0);
    let mut s = input(opcode::SET_ISSI, 0, 16);
    set(&mut s, set_issi_in::CURRENT_ISSI, 1);
    r.exec(&s, 16).ok();
    let boot = r.query_pages(1);
    r.alloc_and_give(boot as usize);
    // mlx5_function_open: host endianness, caps.
    r.host_endianness().ok();
    let gen_cur = Raw::cap_bytes(r.query_cap(0, true).ok());
    let gen_max = Raw::cap_bytes(r.query_cap(0, false).ok());
    // handle_hca_cap (main.c:771): copy CUR, then its edits.
    let mut set_cap = gen_cur.clone();
    cmd_hca_cap::PKEY_TABLE_SIZE.set(&mut set_cap, 0).unwrap();
    let lmq = cmd_hca_cap::LOG_MAX_QP.get(&gen_max).unwrap().min(18);
    cmd_hca_cap::LOG_MAX_QP.set(&mut set_cap, lmq).unwrap();
    cmd_hca_cap::CMDIF_CHECKSUM.set(&mut set_cap, 0).unwrap();
    cmd_hca_cap::DRAIN_SIGERR.set(&mut set_cap, 1).unwrap();
    cmd_hca_cap::LOG_UAR_PAGE_SZ.set(&mut set_cap, 0).unwrap();
    if cmd_hca_cap::CACHE_LINE_128BYTE.get(&gen_max).unwrap() != 0 {
        cmd_hca_cap::CACHE_LINE_128BYTE
            .set(&mut set_cap, 0)
            .unwrap();
    }
    r.set_cap(0, &set_cap).ok();
    // handle_hca_cap_atomic (main.c:615): zeroed page + host endianness mode.
    assert_eq!(cmd_hca_cap::ATOMIC.get(&gen_cur), Ok(1));
    r.query_cap(3, true).ok();
    let amax = Raw::cap_bytes(r.query_cap(3, false).ok());
    let acur = Raw::cap_bytes(r.query_cap(3, true).ok());
    assert_eq!(
        atomic_caps::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.get(&acur),
        Ok(1)
    );
    let _ = amax;
    let mut z = vec![0u8; 4096];
    atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE
        .set(&mut z, 1)
        .unwrap();
    r.set_cap(3, &z).ok();
    // handle_hca_cap_odp (pg): every ODP max is 0, so no SET.
    assert_eq!(cmd_hca_cap::PG.get(&gen_cur), Ok(1));
    let omax = Raw::cap_bytes(r.query_cap(2, false).ok());
    assert!(omax.iter().all(|&b| b == 0));
    r.query_cap(2, true).ok();
    // handle_hca_cap_roce: sw_r_roce_src_udp_port is 0 in CUR, 1 in MAX: set it.
    let rcur = Raw::cap_bytes(r.query_cap(4, true).ok());
    let rmax = Raw::cap_bytes(r.query_cap(4, false).ok());
    assert_eq!(roce_cap::SW_R_ROCE_SRC_UDP_PORT.get(&rcur), Ok(0));
    assert_eq!(roce_cap::SW_R_ROCE_SRC_UDP_PORT.get(&rmax), Ok(1));
    let mut rset = rcur.clone();
    roce_cap::SW_R_ROCE_SRC_UDP_PORT.set(&mut rset, 1).unwrap();
    r.set_cap(4, &rset).ok();
    // handle_hca_cap_2 (hca_cap_2): queried; nothing to set.
    assert_eq!(cmd_hca_cap::HCA_CAP_2.get(&gen_max), Ok(1));
    r.query_cap(0x20, true).ok();
    r.query_cap(0x20, false).ok();
    // Init pages, INIT_HCA (Linux's 32-byte init_hca_in), SET_DRIVER_VERSION.
    let init = r.query_pages(2);
    r.alloc_and_give(init as usize);
    r.exec(&input(opcode::INIT_HCA, 0, 32), 16).ok();
    assert_eq!(cmd_hca_cap::DRIVER_VERSION.get(&gen_cur), Ok(1));
    let mut v = input(opcode::SET_DRIVER_VERSION, 0, set_driver_version_in::BYTES);
    v[16..16 + 5].copy_from_slice(b"linux");
    r.exec(&v, 16).ok();
    // mlx5_query_hca_caps: GENERAL again, then every advertised type; the non-advertised
    // types stay unasked (their gating caps are 0).
    let gen = Raw::cap_bytes(r.query_cap(0, true).ok());
    for (gate, t) in [
        (cmd_hca_cap::HCA_CAP_2, 0x20),
        (cmd_hca_cap::PG, 2),
        (cmd_hca_cap::ATOMIC, 3),
        (cmd_hca_cap::ROCE, 4),
        // Linux core/fw.c `mlx5_query_hca_caps`: ETHERNET_OFFLOADS when `eth_net_offloads`.
        (cmd_hca_cap::ETH_NET_OFFLOADS, 1),
    ] {
        assert_eq!(gate.get(&gen), Ok(1));
        r.query_cap(t, true).ok();
    }
    for gate in [
        cmd_hca_cap::IPOIB_ENHANCED_OFFLOADS,
        cmd_hca_cap::NIC_FLOW_TABLE,
        cmd_hca_cap::VPORT_GROUP_MANAGER,
        cmd_hca_cap::ESWITCH_MANAGER,
        cmd_hca_cap::QOS,
        cmd_hca_cap::DEBUG,
        cmd_hca_cap::NVMF_TARGET_OFFLOAD,
        cmd_hca_cap::DEVICE_MEMORY,
        cmd_hca_cap::CRYPTO,
        cmd_hca_cap::PCAM_REG,
        cmd_hca_cap::MCAM_REG,
        cmd_hca_cap::QCAM_REG,
    ] {
        assert_eq!(gate.get(&gen), Ok(0), "{gate:?} advertised");
    }
    assert_eq!(cmd_hca_cap::GENERAL_OBJ_TYPES.get64(&gen), Ok(0));
    // mlx5_init_once: QUERY_ADAPTER. mlx5_load: ALLOC_UAR, then the command EQ.
    r.exec(
        &input(opcode::QUERY_ADAPTER, 0, 16),
        query_adapter_out::BYTES,
    )
    .ok();
    let uar = r.alloc_uar();
    let (eqn, buf) = r.create_eq(uar, 7, &[event::CMD]);
    r.eq_doorbell(uar, eqn, 0, true);
    r.exec(&input(opcode::NOP, 0, 16), 16).ok();
    assert_eq!(r.eqe(buf, 0)[1], event::CMD);
}
