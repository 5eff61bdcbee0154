//! NIC vport context, vport state and RoCE addresses (GID table).
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_nic_vport_context_bits`: rdma-core mlx5_ifc.h:3507 declares only `roce_en`; the
    /// fields after `@linux` are Linux mlx5_ifc.h:4226. The address lists follow the context
    /// (`current_uc_mac_address`): MODIFY_NIC_VPORT_CONTEXT's input grows by one
    /// [`crate::mac_address_layout`] per address (Linux core/vport.c
    /// `mlx5_modify_nic_vport_mac_list`).
    struct nic_vport_context[0x800] {
        ROCE_EN: 0x1f, 0x1;
        @linux
        /// [`crate::inline_mode`] the vport's SQs must honour when the Ethernet caps say
        /// `wqe_inline_mode` = `VPORT_CONTEXT` (Linux core/vport.c
        /// `mlx5_query_nic_vport_min_inline`).
        MIN_WQE_INLINE_MODE: 0x5, 0x3;
        DISABLE_MC_LOCAL_LB: 0x1d, 0x1;
        DISABLE_UC_LOCAL_LB: 0x1e, 0x1;
        ARM_CHANGE_EVENT: 0x20, 0x1;
        EVENT_ON_MTU: 0x3b, 0x1;
        EVENT_ON_PROMISC_CHANGE: 0x3c, 0x1;
        EVENT_ON_VLAN_CHANGE: 0x3d, 0x1;
        EVENT_ON_MC_ADDRESS_CHANGE: 0x3e, 0x1;
        EVENT_ON_UC_ADDRESS_CHANGE: 0x3f, 0x1;
        VHCA_ID_TYPE: 0x40, 0x1;
        AFFILIATION_CRITERIA: 0x4c, 0x4;
        AFFILIATED_VHCA_ID: 0x50, 0x10;
        SD_GROUP: 0x101, 0x3;
        /// The vport's MTU in bytes, Ethernet header, one VLAN tag and FCS included (Linux
        /// core/vport.c `mlx5_query_nic_vport_mtu`; mlx5e subtracts them, core/en.h
        /// `MLX5E_HW2SW_MTU`).
        MTU: 0x130, 0x10;
        SYSTEM_IMAGE_GUID: 0x140, 0x40;
        PORT_GUID: 0x180, 0x40;
        NODE_GUID: 0x1c0, 0x40;
        QKEY_VIOLATION_COUNTER: 0x340, 0x10;
        /// Receive every unicast frame (Linux core/vport.c `mlx5_modify_nic_vport_promisc`).
        PROMISC_UC: 0x780, 0x1;
        /// Receive every multicast frame.
        PROMISC_MC: 0x781, 0x1;
        /// Receive every frame.
        PROMISC_ALL: 0x782, 0x1;
        /// [`crate::nic_vport_list_type`] of the address list that follows the context.
        ALLOWED_LIST_TYPE: 0x785, 0x3;
        /// Number of `current_uc_mac_address` entries, at most `1 << log_max_current_uc_list` /
        /// `log_max_current_mc_list` (Linux core/vport.c `mlx5_modify_nic_vport_mac_list`).
        ALLOWED_LIST_SIZE: 0x794, 0xc;
        /// The function's MAC address ([`crate::mac_address_layout`]; Linux core/vport.c
        /// `mlx5_query_nic_vport_mac_address`).
        PERMANENT_ADDRESS: 0x7a0, crate::mac_address_layout::BITS;
        /// The address list, one [`crate::mac_address_layout`] each (the unicast or multicast
        /// list, as `allowed_list_type` says; broadcast is in the multicast list, Linux
        /// core/en_fs.c `mlx5e_vport_context_update_addr_list`).
        CURRENT_UC_MAC_ADDRESS: 0x800, 0x0, [0x40];
    }

    /// `mlx5_ifc_mac_address_layout_bits`: Linux mlx5_ifc.h:2379 (not in rdma-core). The 6 bytes
    /// of the address in wire order start at byte 2 (Linux core/vport.c copies to `&addr[2]`).
    struct mac_address_layout[0x40] {
        MAC_ADDR_47_32: 0x10, 0x10;
        MAC_ADDR_31_0: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_nic_vport_context_in_bits`: rdma-core mlx5_ifc.h:3525.
    /// Input of [`crate::opcode::QUERY_NIC_VPORT_CONTEXT`] (0x754).
    struct query_nic_vport_context_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        @linux
        // Linux mlx5_ifc.h:6161.
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        /// Which address list ([`crate::nic_vport_list_type`]) the output carries after the
        /// context (Linux core/vport.c `mlx5_query_nic_vport_mac_list`).
        ALLOWED_LIST_TYPE: 0x65, 0x3;
    }

    /// `mlx5_ifc_query_nic_vport_context_out_bits`: rdma-core mlx5_ifc.h:3514.
    /// Output of [`crate::opcode::QUERY_NIC_VPORT_CONTEXT`] (0x754).
    struct query_nic_vport_context_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        NIC_VPORT_CONTEXT: 0x80, crate::nic_vport_context::BITS;
    }

    /// `mlx5_ifc_modify_nic_vport_context_in_bits`: rdma-core mlx5_ifc.h:4904.
    /// Input of [`crate::opcode::MODIFY_NIC_VPORT_CONTEXT`] (0x755).
    struct modify_nic_vport_context_in[0x1000] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        /// Set `field_select.roce_en` together with `nic_vport_context.roce_en` to enable
        /// RoCE on an Ethernet port (Linux core/vport.c `mlx5_nic_vport_update_roce_state`).
        FIELD_SELECT: 0x60, crate::modify_nic_vport_field_select::BITS;
        NIC_VPORT_CONTEXT: 0x800, crate::nic_vport_context::BITS;
    }

    /// `mlx5_ifc_modify_nic_vport_context_out_bits`: rdma-core mlx5_ifc.h:4877.
    /// Output of [`crate::opcode::MODIFY_NIC_VPORT_CONTEXT`] (0x755).
    struct modify_nic_vport_context_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_modify_nic_vport_field_select_bits`: rdma-core mlx5_ifc.h:4886.
    struct modify_nic_vport_field_select[0x20] {
        AFFILIATION: 0x12, 0x1;
        DISABLE_UC_LOCAL_LB: 0x14, 0x1;
        DISABLE_MC_LOCAL_LB: 0x15, 0x1;
        NODE_GUID: 0x16, 0x1;
        PORT_GUID: 0x17, 0x1;
        MIN_INLINE: 0x18, 0x1;
        MTU: 0x19, 0x1;
        CHANGE_EVENT: 0x1a, 0x1;
        PROMISC: 0x1b, 0x1;
        PERMANENT_ADDRESS: 0x1c, 0x1;
        ADDRESSES_LIST: 0x1d, 0x1;
        ROCE_EN: 0x1e, 0x1;
    }

    /// `mlx5_ifc_query_vport_state_in_bits`: Linux mlx5_ifc.h:5559 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_VPORT_STATE`] (0x750).
    struct query_vport_state_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
    }

    /// `mlx5_ifc_query_vport_state_out_bits`: Linux mlx5_ifc.h:5463 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_VPORT_STATE`] (0x750).
    struct query_vport_state_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        ADMIN_STATE: 0x78, 0x4;
        STATE: 0x7c, 0x4;
    }

    /// `mlx5_ifc_query_vport_counter_in_bits`: Linux mlx5_ifc.h:5643.
    /// Input of [`crate::opcode::QUERY_VPORT_COUNTER`] (0x770).
    struct query_vport_counter_in[0x100] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        PORT_NUM: 0x4c, 0x4;
        VPORT_NUMBER: 0x50, 0x10;
        CLEAR: 0xc0, 0x1;
    }

    /// `mlx5_ifc_query_vport_counter_out_bits`: Linux mlx5_ifc.h:5602. Each class is a
    /// `mlx5_ifc_traffic_counter_bits` (mlx5_ifc.h:3901): 64-bit `packets`, then 64-bit
    /// `octets`. Output of [`crate::opcode::QUERY_VPORT_COUNTER`].
    struct query_vport_counter_out[0x1080] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        RECEIVED_ERRORS: 0x80, 0x80;
        TRANSMIT_ERRORS: 0x100, 0x80;
        RECEIVED_IB_UNICAST: 0x180, 0x80;
        TRANSMITTED_IB_UNICAST: 0x200, 0x80;
        RECEIVED_IB_MULTICAST: 0x280, 0x80;
        TRANSMITTED_IB_MULTICAST: 0x300, 0x80;
        RECEIVED_ETH_BROADCAST: 0x380, 0x80;
        TRANSMITTED_ETH_BROADCAST: 0x400, 0x80;
        RECEIVED_ETH_UNICAST: 0x480, 0x80;
        TRANSMITTED_ETH_UNICAST: 0x500, 0x80;
        RECEIVED_ETH_MULTICAST: 0x580, 0x80;
        TRANSMITTED_ETH_MULTICAST: 0x600, 0x80;
        LOCAL_LOOPBACK: 0x680, 0x80;
    }

    /// `mlx5_ifc_query_q_counter_in_bits`: Linux mlx5_ifc.h:6096.
    /// Input of [`crate::opcode::QUERY_Q_COUNTER`] (0x773).
    struct query_q_counter_in[0x100] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        CLEAR: 0xc0, 0x1;
        AGGREGATE: 0xc1, 0x1;
        COUNTER_SET_ID: 0xf8, 0x8;
    }

    /// `mlx5_ifc_query_q_counter_out_bits`: Linux mlx5_ifc.h:5987 (32-bit counters; their
    /// byte offsets are the model's `roce::counters::Counter::q_counter_offset`).
    /// Output of [`crate::opcode::QUERY_Q_COUNTER`].
    struct query_q_counter_out[0x800] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        RX_WRITE_REQUESTS: 0x80, 0x20;
        RX_READ_REQUESTS: 0xc0, 0x20;
        RX_ATOMIC_REQUESTS: 0x100, 0x20;
        RX_DCT_CONNECT: 0x140, 0x20;
        OUT_OF_BUFFER: 0x180, 0x20;
        OUT_OF_SEQUENCE: 0x1c0, 0x20;
        DUPLICATE_REQUEST: 0x200, 0x20;
        RNR_NAK_RETRY_ERR: 0x240, 0x20;
        PACKET_SEQ_ERR: 0x280, 0x20;
        IMPLIED_NAK_SEQ_ERR: 0x2c0, 0x20;
        LOCAL_ACK_TIMEOUT_ERR: 0x300, 0x20;
        REQ_RNR_RETRIES_EXCEEDED: 0x380, 0x20;
        REQ_TRANSPORT_RETRIES_EXCEEDED: 0x5a0, 0x20;
        ROCE_ADP_RETRANS: 0x640, 0x20;
        ROCE_ADP_RETRANS_TO: 0x660, 0x20;
    }

    /// `mlx5_ifc_alloc_q_counter_in_bits`: Linux mlx5_ifc.h:9933 (not in rdma-core).
    /// Input of [`crate::opcode::ALLOC_Q_COUNTER`] (0x771).
    struct alloc_q_counter_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_alloc_q_counter_out_bits`: rdma-core mlx5_ifc.h:5368 (rdma-core leaves the
    /// first 64 bits reserved; Linux names them `status` / `syndrome` as in every output).
    /// Output of [`crate::opcode::ALLOC_Q_COUNTER`].
    struct alloc_q_counter_out[0x80] {
        COUNTER_SET_ID: 0x58, 0x8;
    }

    /// `mlx5_ifc_dealloc_q_counter_in_bits`: rdma-core mlx5_ifc.h:5377.
    /// Input of [`crate::opcode::DEALLOC_Q_COUNTER`] (0x772).
    struct dealloc_q_counter_in[0x80] {
        OPCODE: 0x0, 0x10;
        COUNTER_SET_ID: 0x58, 0x8;
    }

    /// `mlx5_ifc_dealloc_q_counter_out_bits`: Linux mlx5_ifc.h:9066 (not in rdma-core).
    /// Output of [`crate::opcode::DEALLOC_Q_COUNTER`].
    struct dealloc_q_counter_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_roce_addr_layout_bits`: rdma-core mlx5_ifc.h:4204.
    struct roce_addr_layout[0x100] {
        SOURCE_L3_ADDRESS: 0x0, 0x80;
        VLAN_VALID: 0x83, 0x1;
        VLAN_ID: 0x84, 0xc;
        SOURCE_MAC_47_32: 0x90, 0x10;
        SOURCE_MAC_31_0: 0xa0, 0x20;
        ROCE_L3_TYPE: 0xd4, 0x4;
        ROCE_VERSION: 0xd8, 0x8;
    }

    /// `mlx5_ifc_query_roce_address_in_bits`: rdma-core mlx5_ifc.h:4232.
    /// Input of [`crate::opcode::QUERY_ROCE_ADDRESS`] (0x760).
    struct query_roce_address_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        ROCE_ADDRESS_INDEX: 0x40, 0x10;
        VHCA_PORT_NUM: 0x5c, 0x4;
    }

    /// `mlx5_ifc_query_roce_address_out_bits`: rdma-core mlx5_ifc.h:4221.
    /// Output of [`crate::opcode::QUERY_ROCE_ADDRESS`] (0x760).
    struct query_roce_address_out[0x180] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        ROCE_ADDRESS: 0x80, crate::roce_addr_layout::BITS;
    }

    /// `mlx5_ifc_set_roce_address_in_bits`: Linux mlx5_ifc.h:5137 (not in rdma-core).
    /// Input of [`crate::opcode::SET_ROCE_ADDRESS`] (0x761).
    struct set_roce_address_in[0x180] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        ROCE_ADDRESS_INDEX: 0x40, 0x10;
        VHCA_PORT_NUM: 0x5c, 0x4;
        ROCE_ADDRESS: 0x80, crate::roce_addr_layout::BITS;
    }

    /// `mlx5_ifc_set_roce_address_out_bits`: Linux mlx5_ifc.h:5128 (not in rdma-core).
    /// Output of [`crate::opcode::SET_ROCE_ADDRESS`] (0x761).
    struct set_roce_address_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }
}
