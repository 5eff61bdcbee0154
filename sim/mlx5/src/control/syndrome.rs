//! Syndromes: one distinct, stable value per check, so a failure in a trace or a driver log
//! points at one line of the model. Firmware syndromes are opaque numbers; these are the
//! model's own. The control plane (this crate's engineer A) uses `0x51xx_xxxx`; the data plane
//! (mr/cq/qp/datapath) uses `0x52xx_xxxx`.
//!
//! | value        | status          | check                                                     |
//! |--------------|-----------------|-----------------------------------------------------------|
//! | 0x5100_0001  | BAD_OP          | opcode not implemented                                    |
//! | 0x5100_0002  | BAD_INP_LEN     | input shorter than the command's `_in` layout             |
//! | 0x5100_0003  | BAD_INP_LEN     | input longer than the command's `_in` layout              |
//! | 0x5100_0004  | BAD_OUTP_LEN    | output shorter than the command's `_out` layout           |
//! | 0x5100_0005  | BAD_PARAM       | `uid` set (no user contexts)                              |
//! | 0x5100_0006  | BAD_PARAM       | reserved header bits (0x20..0x30) set                     |
//! | 0x5100_0007  | BAD_PARAM       | op_mod set where the command defines none                 |
//! | 0x5100_0008  | BAD_SYS_STATE   | command not allowed before ENABLE_HCA / after DISABLE_HCA |
//! | 0x5100_0009  | BAD_SYS_STATE   | object command before INIT_HCA or after TEARDOWN_HCA      |
//! | 0x5100_000a  | BAD_SYS_STATE   | command not allowed once INIT_HCA is done                 |
//! | 0x5100_000b  | NO_RES          | boot pages not given yet                                  |
//! | 0x5101_0001  | BAD_PARAM       | ENABLE/DISABLE_HCA: function_id / embedded_cpu set        |
//! | 0x5101_0002  | BAD_SYS_STATE   | ENABLE_HCA on an enabled function                         |
//! | 0x5101_0003  | BAD_PARAM       | SET_ISSI: unsupported ISSI                                |
//! | 0x5101_0004  | NO_RES          | INIT_HCA: boot/init pages not all given                   |
//! | 0x5101_0005  | BAD_PARAM       | INIT_HCA: sw_owner_id / reserved input set                |
//! | 0x5101_0006  | BAD_PARAM       | TEARDOWN_HCA: unsupported profile                         |
//! | 0x5101_0007  | BAD_SYS_STATE   | DISABLE_HCA while initialized (TEARDOWN_HCA first)        |
//! | 0x5102_0001  | BAD_PARAM       | QUERY/MANAGE_PAGES: op_mod out of range                   |
//! | 0x5102_0002  | BAD_PARAM       | QUERY/MANAGE_PAGES: function_id / embedded_cpu set        |
//! | 0x5102_0003  | BAD_INP_LEN     | MANAGE_PAGES GIVE: input shorter than input_num_entries   |
//! | 0x5102_0004  | BAD_PARAM       | MANAGE_PAGES GIVE: more pages than the device asked for   |
//! | 0x5102_0005  | BAD_PARAM       | MANAGE_PAGES GIVE: page not 4 KiB aligned                 |
//! | 0x5102_0006  | BAD_PARAM       | MANAGE_PAGES GIVE: page already owned / listed twice      |
//! | 0x5102_0007  | BAD_PARAM       | MANAGE_PAGES GIVE: page outside guest memory              |
//! | 0x5102_0008  | BAD_OUTP_LEN    | MANAGE_PAGES TAKE: output too short for the entries       |
//! | 0x5103_0001  | BAD_PARAM       | QUERY/SET_HCA_CAP: cap type not supported                 |
//! | 0x5103_0002  | BAD_PARAM       | QUERY/SET_HCA_CAP: other_function / function_id set       |
//! | 0x5103_0003  | BAD_PARAM       | SET_HCA_CAP: op_mod bit 0 set                             |
//! | 0x5103_0004  | BAD_PARAM       | SET_HCA_CAP: read-only field changed                      |
//! | 0x5103_0005  | BAD_PARAM       | SET_HCA_CAP: settable field above MAX / invalid           |
//! | 0x5104_0001  | BAD_PARAM       | ACCESS_REGISTER: register not supported                   |
//! | 0x5104_0002  | BAD_PARAM       | ACCESS_REGISTER: op_mod not 0 (write) or 1 (read)         |
//! | 0x5104_0003  | BAD_INP_LEN     | ACCESS_REGISTER: register data shorter than the register  |
//! | 0x5104_0004  | BAD_PARAM       | ACCESS_REGISTER: argument set                             |
//! | 0x5104_0005  | BAD_OUTP_LEN    | ACCESS_REGISTER: output shorter than the register         |
//! | 0x5105_0001  | LIM_ERR         | ALLOC_UAR: no free UAR                                    |
//! | 0x5105_0002  | BAD_RES         | DEALLOC_UAR: unknown UAR                                  |
//! | 0x5105_0003  | RES_BUSY        | DEALLOC_UAR: an EQ still uses the UAR                     |
//! | 0x5105_0004  | RES_BUSY        | DEALLOC_UAR: a CQ still uses the UAR                      |
//! | 0x5105_0005  | RES_BUSY        | DEALLOC_UAR: a QP still uses the UAR                      |
//! | 0x5105_0006  | RES_BUSY        | DEALLOC_UAR: an Ethernet SQ still uses the UAR            |
//! | 0x5106_0001  | LIM_ERR         | ALLOC_PD: log_max_pd PDs in use                           |
//! | 0x5106_0002  | BAD_RES         | DEALLOC_PD: unknown PD                                    |
//! | 0x5106_0003  | LIM_ERR         | ALLOC_TRANSPORT_DOMAIN: all in use                        |
//! | 0x5106_0004  | BAD_RES         | DEALLOC_TRANSPORT_DOMAIN: unknown TD                      |
//! | 0x5106_0005  | RES_BUSY        | DEALLOC_PD: an mkey still belongs to the PD               |
//! | 0x5106_0006  | RES_BUSY        | DEALLOC_PD: a QP still belongs to the PD                  |
//! | 0x5106_0007  | RES_BUSY        | DEALLOC_PD: an Ethernet SQ or RQ still belongs to the PD  |
//! | 0x5106_0008  | RES_BUSY        | DEALLOC_TRANSPORT_DOMAIN: a TIS still names the TD        |
//! | 0x5106_0009  | RES_BUSY        | DEALLOC_TRANSPORT_DOMAIN: a TIR still names the TD        |
//! | 0x5107_0001  | LIM_ERR         | CREATE_EQ: log_max_eq EQs in use                          |
//! | 0x5107_0002  | BAD_PARAM       | CREATE_EQ: log_eq_size above log_max_eq_sz                |
//! | 0x5107_0003  | BAD_RES         | CREATE_EQ: uar_page is not an allocated UAR               |
//! | 0x5107_0004  | BAD_INP_LEN     | CREATE_EQ: fewer pas entries than the buffer needs        |
//! | 0x5107_0005  | BAD_PARAM       | CREATE_EQ: pas entry not aligned to the page size         |
//! | 0x5107_0006  | BAD_PARAM       | CREATE_EQ: pas entry outside guest memory                 |
//! | 0x5107_0007  | BAD_PARAM       | CREATE_EQ: reserved eqc field set (status/st/ec/oi)       |
//! | 0x5107_0008  | BAD_RES         | DESTROY/QUERY_EQ: unknown EQ                              |
//! | 0x5107_0009  | BAD_PARAM       | CREATE_EQ: log_page_size / page_offset out of range       |
//! | 0x5107_000a  | RES_BUSY        | DESTROY_EQ: a CQ still sends its events to the EQ         |
//! | 0x5108_0001  | BAD_PARAM       | vport commands: other_vport / vport_number set            |
//! | 0x5108_0002  | BAD_PARAM       | QUERY_VPORT_STATE: op_mod not VNIC (0) or UPLINK (2)       |
//! | 0x5108_0003  | BAD_PARAM       | MODIFY_NIC_VPORT_CONTEXT: field_select bit not supported  |
//! | 0x5108_0004  | IX_ERR          | QUERY/SET_ROCE_ADDRESS: index beyond the GID table        |
//! | 0x5108_0005  | BAD_PARAM       | SET_ROCE_ADDRESS: bad roce_version / roce_l3_type         |
//! | 0x5108_0006  | BAD_PARAM       | QUERY/SET_ROCE_ADDRESS: vhca_port_num not 0 (or 1 with vHCA ports) |
//! | 0x5108_0007  | BAD_PARAM       | MODIFY_NIC_VPORT_CONTEXT: mtu out of range                |
//! | 0x5108_0008  | BAD_PARAM       | QUERY_VPORT_COUNTER: port_num not 0/1; QUERY_Q_COUNTER: counter_set_id not 0 nor allocated |
//! | 0x5110_0001  | LIM_ERR         | ALLOC_Q_COUNTER: max_qp_cnt sets in use (set 0 included) |
//! | 0x5110_0002  | BAD_RES         | DEALLOC_Q_COUNTER: set 0 or a set not allocated          |
//! | 0x5110_0003  | RES_BUSY        | DEALLOC_Q_COUNTER: a QP is still attached to the set     |
//! | 0x5110_0004  | BAD_PARAM       | QUERY_Q_COUNTER: aggregate set                           |
//! | 0x5110_0005  | RES_BUSY        | DEALLOC_Q_COUNTER: an Ethernet RQ still counts into the set |
//!
//! The Ethernet queue objects have their syndromes in their modules:
//! [`crate::objects::tis::syndrome`] (0x5210), [`crate::objects::sq::syndrome`] (0x5211),
//! [`crate::objects::rq::syndrome`] (0x5212), [`crate::objects::tir::syndrome`] (0x5213) and
//! the work queue both queues are built on, [`crate::objects::wq::syndrome`] (0x5214).
//!
//! Releasing an object another object still names fails with RES_BUSY, which Linux turns into
//! -EBUSY (drivers/net/ethernet/mellanox/mlx5/core/cmd.c `cmd_status_to_err`; rdma-core
//! providers/mlx5/mlx5_vfio.c has the same mapping). Linux relies on that refusal: when a
//! process dies, drivers/infiniband/core/rdma_core.c `uverbs_destroy_ufile_hw` destroys its
//! objects in no particular order and retries the ones whose destroy failed
//! (`cleanup_retryable`; devx `devx_obj_cleanup` passes the firmware status through
//! `ib_is_destroy_retryable`), so a CQ is only destroyed after its QPs, a PD after its QPs and
//! mkeys, an EQ after its CQs and a UAR after the queues that ring through it. Transport
//! domains are named by TIS and TIR contexts (`tisc.transport_domain`,
//! `tirc.transport_domain`); Linux releases the transport domain after its TISes
//! (drivers/net/ethernet/mellanox/mlx5/core/en_common.c `mlx5e_destroy_mdev_resources`), and
//! the model refuses it before, as every other release of an object still named.

pub const BAD_OPCODE: u32 = 0x5100_0001;
pub const INLEN_SHORT: u32 = 0x5100_0002;
pub const INLEN_LONG: u32 = 0x5100_0003;
pub const OUTLEN_SHORT: u32 = 0x5100_0004;
pub const UID_SET: u32 = 0x5100_0005;
pub const HEADER_RESERVED: u32 = 0x5100_0006;
pub const OP_MOD_SET: u32 = 0x5100_0007;
pub const NOT_ENABLED: u32 = 0x5100_0008;
pub const NOT_INITIALIZED: u32 = 0x5100_0009;
pub const ALREADY_INITIALIZED: u32 = 0x5100_000a;
pub const NO_BOOT_PAGES: u32 = 0x5100_000b;
pub const FUNCTION_ID: u32 = 0x5101_0001;
pub const ALREADY_ENABLED: u32 = 0x5101_0002;
pub const BAD_ISSI: u32 = 0x5101_0003;
pub const INIT_NO_PAGES: u32 = 0x5101_0004;
pub const INIT_RESERVED: u32 = 0x5101_0005;
pub const TEARDOWN_PROFILE: u32 = 0x5101_0006;
pub const DISABLE_WHILE_INIT: u32 = 0x5101_0007;
pub const PAGES_OP_MOD: u32 = 0x5102_0001;
pub const PAGES_FUNCTION: u32 = 0x5102_0002;
pub const PAGES_INLEN: u32 = 0x5102_0003;
pub const PAGES_TOO_MANY: u32 = 0x5102_0004;
pub const PAGES_UNALIGNED: u32 = 0x5102_0005;
pub const PAGES_DUPLICATE: u32 = 0x5102_0006;
pub const PAGES_OUTSIDE: u32 = 0x5102_0007;
pub const PAGES_OUTLEN: u32 = 0x5102_0008;
pub const CAP_TYPE: u32 = 0x5103_0001;
pub const CAP_FUNCTION: u32 = 0x5103_0002;
pub const CAP_SET_OP_MOD: u32 = 0x5103_0003;
pub const CAP_READ_ONLY: u32 = 0x5103_0004;
pub const CAP_ABOVE_MAX: u32 = 0x5103_0005;
pub const REG_UNSUPPORTED: u32 = 0x5104_0001;
pub const REG_OP_MOD: u32 = 0x5104_0002;
pub const REG_INLEN: u32 = 0x5104_0003;
pub const REG_ARGUMENT: u32 = 0x5104_0004;
pub const REG_OUTLEN: u32 = 0x5104_0005;
pub const UAR_EXHAUSTED: u32 = 0x5105_0001;
pub const UAR_UNKNOWN: u32 = 0x5105_0002;
pub const UAR_BUSY: u32 = 0x5105_0003;
pub const UAR_BUSY_CQ: u32 = 0x5105_0004;
pub const UAR_BUSY_QP: u32 = 0x5105_0005;
pub const UAR_BUSY_SQ: u32 = 0x5105_0006;
pub const PD_EXHAUSTED: u32 = 0x5106_0001;
pub const PD_UNKNOWN: u32 = 0x5106_0002;
pub const TD_EXHAUSTED: u32 = 0x5106_0003;
pub const TD_UNKNOWN: u32 = 0x5106_0004;
pub const PD_BUSY_MKEY: u32 = 0x5106_0005;
pub const PD_BUSY_QP: u32 = 0x5106_0006;
pub const PD_BUSY_WQ: u32 = 0x5106_0007;
pub const TD_BUSY_TIS: u32 = 0x5106_0008;
pub const TD_BUSY_TIR: u32 = 0x5106_0009;
pub const EQ_EXHAUSTED: u32 = 0x5107_0001;
pub const EQ_TOO_BIG: u32 = 0x5107_0002;
pub const EQ_BAD_UAR: u32 = 0x5107_0003;
pub const EQ_PAS_SHORT: u32 = 0x5107_0004;
pub const EQ_PAS_UNALIGNED: u32 = 0x5107_0005;
pub const EQ_PAS_OUTSIDE: u32 = 0x5107_0006;
pub const EQ_RESERVED: u32 = 0x5107_0007;
pub const EQ_UNKNOWN: u32 = 0x5107_0008;
pub const EQ_PAGE_GEOMETRY: u32 = 0x5107_0009;
pub const EQ_BUSY: u32 = 0x5107_000a;
pub const VPORT_OTHER: u32 = 0x5108_0001;
pub const VPORT_STATE_OP_MOD: u32 = 0x5108_0002;
pub const VPORT_FIELD_SELECT: u32 = 0x5108_0003;
pub const GID_INDEX: u32 = 0x5108_0004;
pub const GID_TYPE: u32 = 0x5108_0005;
pub const GID_PORT: u32 = 0x5108_0006;
pub const VPORT_MTU: u32 = 0x5108_0007;
pub const VPORT_COUNTER_SET: u32 = 0x5108_0008;
pub const Q_COUNTER_LIMIT: u32 = 0x5110_0001;
pub const Q_COUNTER_UNKNOWN: u32 = 0x5110_0002;
pub const Q_COUNTER_BUSY: u32 = 0x5110_0003;
pub const Q_COUNTER_AGGREGATE: u32 = 0x5110_0004;
pub const Q_COUNTER_BUSY_RQ: u32 = 0x5110_0005;
