//! Protection domains, UARs and transport domains.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_alloc_pd_in_bits`: rdma-core mlx5_ifc.h:5096.
    /// Input of [`crate::opcode::ALLOC_PD`] (0x800).
    struct alloc_pd_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_alloc_pd_out_bits`: rdma-core mlx5_ifc.h:5084.
    /// Output of [`crate::opcode::ALLOC_PD`] (0x800).
    struct alloc_pd_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        PD: 0x48, 0x18;
    }

    /// `mlx5_ifc_dealloc_pd_in_bits`: rdma-core mlx5_ifc.h:5115.
    /// Input of [`crate::opcode::DEALLOC_PD`] (0x801).
    struct dealloc_pd_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        PD: 0x48, 0x18;
    }

    /// `mlx5_ifc_dealloc_pd_out_bits`: rdma-core mlx5_ifc.h:5106.
    /// Output of [`crate::opcode::DEALLOC_PD`] (0x801).
    struct dealloc_pd_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_alloc_uar_in_bits`: rdma-core mlx5_ifc.h:4959.
    /// Input of [`crate::opcode::ALLOC_UAR`] (0x802).
    struct alloc_uar_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_alloc_uar_out_bits`: rdma-core mlx5_ifc.h:4947.
    /// Output of [`crate::opcode::ALLOC_UAR`] (0x802).
    struct alloc_uar_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        UAR: 0x48, 0x18;
    }

    /// `mlx5_ifc_dealloc_uar_in_bits`: rdma-core mlx5_ifc.h:4978.
    /// Input of [`crate::opcode::DEALLOC_UAR`] (0x803).
    struct dealloc_uar_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        UAR: 0x48, 0x18;
    }

    /// `mlx5_ifc_dealloc_uar_out_bits`: rdma-core mlx5_ifc.h:4969.
    /// Output of [`crate::opcode::DEALLOC_UAR`] (0x803).
    struct dealloc_uar_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_alloc_transport_domain_in_bits`: Linux mlx5_ifc.h:9911 (not in rdma-core).
    /// Input of [`crate::opcode::ALLOC_TRANSPORT_DOMAIN`] (0x816).
    struct alloc_transport_domain_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_alloc_transport_domain_out_bits`: rdma-core mlx5_ifc.h:5242.
    /// Output of [`crate::opcode::ALLOC_TRANSPORT_DOMAIN`] (0x816).
    struct alloc_transport_domain_out[0x80] {
        TRANSPORT_DOMAIN: 0x48, 0x18;
    }

    /// `mlx5_ifc_dealloc_transport_domain_in_bits`: rdma-core mlx5_ifc.h:5251.
    /// Input of [`crate::opcode::DEALLOC_TRANSPORT_DOMAIN`] (0x817).
    struct dealloc_transport_domain_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        TRANSPORT_DOMAIN: 0x48, 0x18;
    }

    /// `mlx5_ifc_dealloc_transport_domain_out_bits`: Linux mlx5_ifc.h:9044 (not in rdma-core).
    /// Output of [`crate::opcode::DEALLOC_TRANSPORT_DOMAIN`] (0x817).
    struct dealloc_transport_domain_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }
}
