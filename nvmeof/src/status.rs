//! NVMe status codes, as Linux `include/linux/nvme.h` names them (`NVME_SC_*`: the status code
//! type in bits 8-10, the status code in bits 0-7, More in bit 13, Do Not Retry in bit 14), and
//! as Linux's target `nvmet` returns them.

/// Successful completion.
pub const SUCCESS: u16 = 0x0;
/// Invalid command opcode.
pub const INVALID_OPCODE: u16 = 0x1;
/// Invalid field in command.
pub const INVALID_FIELD: u16 = 0x2;
/// Data transfer error.
pub const DATA_XFER_ERROR: u16 = 0x4;
/// Internal error.
pub const INTERNAL: u16 = 0x6;
/// Command aborted due to SQ deletion.
pub const ABORT_QUEUE: u16 = 0x8;
/// Invalid namespace or format.
pub const INVALID_NS: u16 = 0xb;
/// Command sequence error.
pub const CMD_SEQ_ERROR: u16 = 0xc;
/// Data SGL length invalid.
pub const SGL_INVALID_DATA: u16 = 0xf;
/// SGL descriptor type invalid.
pub const SGL_INVALID_TYPE: u16 = 0x11;
/// SGL offset invalid.
pub const SGL_INVALID_OFFSET: u16 = 0x16;
/// Keep alive timeout invalid.
pub const KA_TIMEOUT_INVALID: u16 = 0x1a;
/// LBA out of range.
pub const LBA_RANGE: u16 = 0x80;
/// Capacity exceeded.
pub const CAP_EXCEEDED: u16 = 0x81;
/// Asynchronous event request limit exceeded (command specific).
pub const ASYNC_LIMIT: u16 = 0x105;
/// Invalid log page (command specific).
pub const INVALID_LOG_PAGE: u16 = 0x109;
/// Feature identifier not saveable (command specific).
pub const FEATURE_NOT_SAVEABLE: u16 = 0x10d;
/// Connect: incompatible format (fabrics command specific).
pub const CONNECT_FORMAT: u16 = 0x180;
/// Connect: controller busy (fabrics command specific).
pub const CONNECT_CTRL_BUSY: u16 = 0x181;
/// Connect: invalid parameters (fabrics command specific).
pub const CONNECT_INVALID_PARAM: u16 = 0x182;
/// Connect: invalid host (fabrics command specific).
pub const CONNECT_INVALID_HOST: u16 = 0x184;
/// More: the error log page has an entry for this command.
pub const MORE: u16 = 0x2000;
/// Do Not Retry.
pub const DNR: u16 = 0x4000;

/// Where in the command a failed field is (the error log's "parameter error location"):
/// byte offsets as Linux's target sets `req->error_loc` (`offsetof` the command structures of
/// `include/linux/nvme.h`). A failure with a location is logged and its CQE has
/// [`MORE`] (Linux `drivers/nvme/target/core.c` `nvmet_set_error`); one without is neither.
pub mod loc {
    /// No location (Linux `NVMET_NO_ERROR_LOC`).
    pub const NONE: u16 = 0xffff;
    /// The opcode.
    pub const OPCODE: u16 = 0;
    /// The flags (fused, PSDT).
    pub const FLAGS: u16 = 1;
    /// The namespace ID.
    pub const NSID: u16 = 4;
    /// The fabrics command type (same byte as the NSID's first).
    pub const FCTYPE: u16 = 4;
    /// The data pointer.
    pub const DPTR: u16 = 24;
    /// Dword 10: CNS, log page ID, feature ID, property attributes.
    pub const CDW10: u16 = 40;
    /// Dword 11: the feature's value, the property's offset.
    pub const CDW11: u16 = 44;
    /// The log page offset.
    pub const LPO: u16 = 48;
}

/// The Connect response's "invalid parameter" location: byte `offset` of the Connect data
/// (Linux `drivers/nvme/target/nvmet.h` `IPO_IATTR_CONNECT_DATA(x)`: bit 16, IATTR, says the
/// offset is in the data; the offset in bits 0-15).
pub const fn ipo_connect_data(offset: u16) -> u64 {
    (1 << 16) | offset as u64
}

/// The Connect response's "invalid parameter" location: byte `offset` of the Connect SQE
/// (Linux `drivers/nvme/target/nvmet.h` `IPO_IATTR_CONNECT_SQE(x)`).
pub const fn ipo_connect_sqe(offset: u16) -> u64 {
    offset as u64
}
