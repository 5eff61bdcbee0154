//! Typed errors: firmware statuses and syndromes, delivery failures, invalid input caught
//! before anything reaches the device.

use core::fmt;

use mlx5_prm::{cmd_status, delivery_status};

/// Result of a driver operation.
pub type Result<T> = core::result::Result<T, Error>;

/// Command status, byte 0 of a command's output (`MLX5_CMD_STAT_*`, Linux
/// include/linux/mlx5/device.h; rdma-core providers/mlx5/mlx5_ifc.h has the same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmdStatus {
    /// `MLX5_CMD_STAT_INT_ERR`.
    IntErr,
    /// `MLX5_CMD_STAT_BAD_OP_ERR`.
    BadOpErr,
    /// `MLX5_CMD_STAT_BAD_PARAM_ERR`.
    BadParamErr,
    /// `MLX5_CMD_STAT_BAD_SYS_STATE_ERR`.
    BadSysStateErr,
    /// `MLX5_CMD_STAT_BAD_RES_ERR`.
    BadResErr,
    /// `MLX5_CMD_STAT_RES_BUSY`.
    ResBusy,
    /// `MLX5_CMD_STAT_LIM_ERR`.
    LimErr,
    /// `MLX5_CMD_STAT_BAD_RES_STATE_ERR`.
    BadResStateErr,
    /// `MLX5_CMD_STAT_IX_ERR`.
    IxErr,
    /// `MLX5_CMD_STAT_NO_RES_ERR`.
    NoResErr,
    /// `MLX5_CMD_STAT_BAD_INP_LEN_ERR`.
    BadInpLenErr,
    /// `MLX5_CMD_STAT_BAD_OUTP_LEN_ERR`.
    BadOutpLenErr,
    /// `MLX5_CMD_STAT_BAD_QP_STATE_ERR`.
    BadQpStateErr,
    /// `MLX5_CMD_STAT_BAD_PKT_ERR`.
    BadPktErr,
    /// `MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR`.
    BadSizeOutsCqesErr,
    /// A value the PRM does not name.
    Unknown(u8),
}

impl CmdStatus {
    /// Decodes a non-zero status byte.
    pub fn from_raw(v: u8) -> CmdStatus {
        match v {
            cmd_status::INT_ERR => CmdStatus::IntErr,
            cmd_status::BAD_OP_ERR => CmdStatus::BadOpErr,
            cmd_status::BAD_PARAM_ERR => CmdStatus::BadParamErr,
            cmd_status::BAD_SYS_STATE_ERR => CmdStatus::BadSysStateErr,
            cmd_status::BAD_RES_ERR => CmdStatus::BadResErr,
            cmd_status::RES_BUSY => CmdStatus::ResBusy,
            cmd_status::LIM_ERR => CmdStatus::LimErr,
            cmd_status::BAD_RES_STATE_ERR => CmdStatus::BadResStateErr,
            cmd_status::IX_ERR => CmdStatus::IxErr,
            cmd_status::NO_RES_ERR => CmdStatus::NoResErr,
            cmd_status::BAD_INP_LEN_ERR => CmdStatus::BadInpLenErr,
            cmd_status::BAD_OUTP_LEN_ERR => CmdStatus::BadOutpLenErr,
            cmd_status::BAD_QP_STATE_ERR => CmdStatus::BadQpStateErr,
            cmd_status::BAD_PKT_ERR => CmdStatus::BadPktErr,
            cmd_status::BAD_SIZE_OUTS_CQES_ERR => CmdStatus::BadSizeOutsCqesErr,
            other => CmdStatus::Unknown(other),
        }
    }
}

/// Delivery status, `status_own >> 1` of a completed queue entry (`MLX5_CMD_DELIVERY_STAT_*`,
/// Linux core/cmd.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// `SIGNAT_ERR`.
    SignatErr,
    /// `TOK_ERR`.
    TokErr,
    /// `BAD_BLK_NUM_ERR`.
    BadBlkNumErr,
    /// `OUT_PTR_ALIGN_ERR`.
    OutPtrAlignErr,
    /// `IN_PTR_ALIGN_ERR`.
    InPtrAlignErr,
    /// `FW_ERR`.
    FwErr,
    /// `IN_LENGTH_ERR`.
    InLengthErr,
    /// `OUT_LENGTH_ERR`.
    OutLengthErr,
    /// `RES_FLD_NOT_CLR_ERR`.
    ResFldNotClrErr,
    /// `CMD_DESCR_ERR`.
    CmdDescrErr,
    /// A value the PRM does not name.
    Unknown(u8),
}

impl DeliveryStatus {
    /// Decodes a non-zero delivery status.
    pub fn from_raw(v: u8) -> DeliveryStatus {
        match v {
            delivery_status::SIGNAT_ERR => DeliveryStatus::SignatErr,
            delivery_status::TOK_ERR => DeliveryStatus::TokErr,
            delivery_status::BAD_BLK_NUM_ERR => DeliveryStatus::BadBlkNumErr,
            delivery_status::OUT_PTR_ALIGN_ERR => DeliveryStatus::OutPtrAlignErr,
            delivery_status::IN_PTR_ALIGN_ERR => DeliveryStatus::InPtrAlignErr,
            delivery_status::FW_ERR => DeliveryStatus::FwErr,
            delivery_status::IN_LENGTH_ERR => DeliveryStatus::InLengthErr,
            delivery_status::OUT_LENGTH_ERR => DeliveryStatus::OutLengthErr,
            delivery_status::RES_FLD_NOT_CLR_ERR => DeliveryStatus::ResFldNotClrErr,
            delivery_status::CMD_DESCR_ERR => DeliveryStatus::CmdDescrErr,
            other => DeliveryStatus::Unknown(other),
        }
    }
}

/// A command the firmware executed and failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdError {
    /// The command's opcode (`MLX5_CMD_OP_*`).
    pub opcode: u16,
    /// The command's op_mod.
    pub op_mod: u16,
    /// The status byte of the output.
    pub status: CmdStatus,
    /// The syndrome dword of the output.
    pub syndrome: u32,
}

/// Input the driver refuses before any command or doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidInput {
    /// Access flags that verbs rejects (REMOTE_WRITE / REMOTE_ATOMIC without LOCAL_WRITE).
    AccessFlags,
    /// A zero-length registration.
    ZeroLength,
    /// `rereg` asked to change nothing (`ibv_rereg_mr` with no `IBV_REREG_MR_CHANGE_*` flag).
    NothingToChange,
    /// `addr + len` overflows, or the length exceeds what an mkey can describe.
    LengthOverflow,
    /// A page list whose pages are not aligned to the page size, or an unsupported page size.
    PageList,
    /// A CQ larger than the device allows.
    CqTooLarge {
        /// Entries requested.
        requested: u32,
        /// Largest number of entries the device supports.
        max: u32,
    },
    /// A CQ resize to fewer entries than completions not polled yet (the firmware's
    /// `BAD_SIZE_OUTS_CQES_ERR`, refused before the command).
    CqTooSmall {
        /// Entries requested.
        requested: u32,
        /// Completions waiting to be polled.
        outstanding: u32,
    },
    /// Zero entries requested for a queue.
    ZeroEntries,
    /// More entries requested for a work queue than the device's `log_max_wq_sz` allows (an
    /// Ethernet queue, [`crate::eth`]).
    QueueDepth {
        /// Entries requested.
        requested: u32,
        /// The most the device takes.
        max: u32,
    },
    /// QP capabilities beyond the device or driver limits.
    QpCaps,
    /// More SGEs in a work request than the queue was created for.
    TooManySge {
        /// SGEs in the request.
        given: usize,
        /// The queue's maximum.
        max: usize,
    },
    /// Inline data larger than the queue's inline capacity.
    InlineTooLarge {
        /// Bytes requested.
        given: usize,
        /// The queue's maximum.
        max: usize,
    },
    /// Inline data on an opcode that carries no local data (RDMA READ, atomics).
    InlineNotAllowed,
    /// The send or receive queue has no room for the batch.
    QueueFull,
    /// The QP is not in a state that allows the operation.
    QpState {
        /// Current state (`MLX5_QP_STATE_*`).
        state: u8,
    },
    /// An lkey that is not a live memory region of this context.
    BadLkey(u32),
    /// An SGE that reaches beyond its memory region.
    OutOfRange,
    /// A memory region without the local access the operation needs (LOCAL_WRITE for receive
    /// buffers and RDMA READ / atomic targets).
    LocalAccess,
    /// A memory region of another context.
    ForeignObject,
    /// An atomic operation whose remote or local address is not 8-byte aligned, or whose local
    /// buffer is not 8 bytes.
    AtomicAlignment,
    /// A QP attached to a CQ of another context, or a CQ already owned elsewhere.
    BadCq,
    /// A GID index beyond the device's GID table.
    GidIndex,
    /// No free entry left in the GID table for a new address.
    GidTableFull,
    /// An IPv4 address that cannot be a node's identity (0.0.0.0, multicast, broadcast).
    BadIpv4([u8; 4]),
    /// A port number the device does not have (ports count from 1).
    Port(u8),
    /// A memory region longer than the device's `log_max_mrw_sz` allows.
    MrTooLarge {
        /// Bytes requested.
        len: u64,
        /// Largest region the device supports, in bytes.
        max: u64,
    },
    /// A registration whose translation needs more entries than one CREATE_MKEY carries in
    /// this driver ([`crate::mr::MAX_MTT_ENTRIES`]).
    TooManyTranslations {
        /// Entries the region needs at its best page size.
        entries: u64,
        /// The driver's limit.
        max: u64,
    },
    /// A [`crate::qp::BoundMr`] handle that names no live binding of this QP (unbound, or
    /// made by another QP).
    UnboundRegion,
    /// A remote QP number an RC QP cannot connect to: 0 or 1 (the special QPs) or wider than
    /// 24 bits.
    RemoteQpn(u32),
    /// A memory-window WQE (BIND_MW, LOCAL_INV) on a QP whose send WQEs cannot hold it:
    /// create the QP with [`crate::qp::QpOptions::mw_bind`].
    NoMwRoom,
    /// A memory-window verb for the other window type: the bind verb
    /// ([`crate::QueuePair::bind_mw`]) binds type 1 windows, the BIND_MW work request
    /// ([`crate::QueuePair::post_bind_mw`]) type 2 (libibverbs `ibv_bind_mw`: EINVAL).
    MwType,
    /// The window, the region and the QP are not all in one protection domain (libibverbs
    /// `ibv_bind_mw`: EPERM; IB spec C10-72).
    PdMismatch,
    /// Binding a window to a region registered without [`crate::mr::Access::MW_BIND`] (IB spec
    /// C10-73).
    MwBindNotAllowed,
    /// Window access flags that cannot be granted: bits other than remote read / write /
    /// atomic, local write and zero-based; remote write or atomic (or local write) over a
    /// region without local write (IB spec C10-74); zero-based on a type 1 window (rdma-core
    /// `mlx5_bind_mw`: EINVAL).
    MwAccess,
    /// The remote GID or MAC is all zero: no address path.
    RemoteAddress,
    /// A send on a datagram QP (UD, GSI) without a destination: datagram sends go through
    /// `QueuePair::post_ud_send` (an `ibv_send_wr` for a UD QP carries `wr.ud`).
    NoDestination,
    /// A datagram destination given to a connected QP (`QueuePair::post_ud_send` on RC).
    NotDatagram,
    /// An operation the QP's service type does not have: RDMA, atomics, invalidates and
    /// memory windows on a datagram QP (IBTA §9.8.3: UD has SEND only; rdma-core verbs.c
    /// `sq_overhead` gives `IBV_QPT_UD` SEND, SEND_WITH_IMM and TSO), or a connected QP's
    /// transitions on one.
    ServiceType,
    /// The context already has its GSI QP (one QP1 per port: Linux hw/mlx5/gsi.c keeps one
    /// per port in `devr.ports[].gsi`).
    GsiExists,
    /// `max_rd_atomic` / `max_dest_rd_atomic` above what the device allows (Linux ib/qp.c
    /// "invalid max_rd_atomic value").
    RdAtomic {
        /// The requested number of outstanding RDMA READs / atomics.
        requested: u8,
        /// The device's limit.
        max: u32,
    },
}

/// Everything that can go wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The hardware-access layer failed.
    Hal(HalError),
    /// `initializing` did not clear before the deadline.
    FirmwareInitTimeout,
    /// The command interface revision is not 5.
    CmdIfRev {
        /// The revision the device reports.
        found: u16,
    },
    /// `cmdq_addr_l_sz` reports a queue the driver cannot use (no slot, or entries that do not
    /// fit one page).
    CmdQueueLayout {
        /// log2 of the number of entries.
        log_size: u8,
        /// log2 of the entry stride.
        log_stride: u8,
    },
    /// The firmware executed a command and reported a failure.
    Command(CmdError),
    /// The firmware could not deliver a command (`status_own >> 1` non-zero).
    Delivery {
        /// The command's opcode.
        opcode: u16,
        /// The delivery status.
        status: DeliveryStatus,
    },
    /// A command did not complete before its deadline.
    CommandTimeout {
        /// The command's opcode.
        opcode: u16,
    },
    /// The device reports a fatal health state; every later call fails the same way.
    DeviceFatal {
        /// The health syndrome (`health.synd`), or 0xff when the PCI link reads all ones,
        /// 0xfe when the NIC interface is disabled and 0xfd when the health counter stopped.
        syndrome: u8,
    },
    /// The firmware answered with something the driver cannot accept (e.g. a page it never
    /// gave, more entries than asked for, an out-of-range index).
    BadFirmwareReply {
        /// The command's opcode.
        opcode: u16,
    },
    /// The device does not support ISSI 1.
    IssiUnsupported,
    /// A needed capability is missing.
    Unsupported,
    /// Input refused before anything reached the device.
    Invalid(InvalidInput),
    /// An object is still in use (e.g. deregistering an MR that in-flight WRs reference).
    Busy,
    /// The context has been closed.
    Closed,
    /// The device asked for more firmware pages than the driver gives (the request was
    /// answered with MANAGE_PAGES CANT_GIVE, as Linux pagealloc.c `page_notify_fail` does).
    PageRequestTooLarge {
        /// Pages the device asked for.
        requested: u32,
        /// Pages the device already holds.
        held: u32,
        /// The driver's limit on pages held ([`crate::pages::MAX_FW_PAGES`]).
        max: u32,
    },
    /// A driver bug caught at run time (a PRM field outside its command buffer) instead of a
    /// panic.
    Internal,
    /// A wait (e.g. for a completion event) reached its deadline.
    Timeout,
    /// A UMR WQE ([`crate::umr`]) completed with an error CQE.
    Umr {
        /// The completion's status.
        status: crate::wc::WcStatus,
        /// Its vendor syndrome.
        vendor: u8,
    },
}

/// A destroy or close the driver refused: the object comes back, still usable, with the
/// reason (e.g. [`Error::Busy`]).
pub struct Refused<T> {
    /// The object, as it was before the call.
    pub object: T,
    /// Why it was refused.
    pub error: Error,
}

impl<T> Refused<T> {
    /// The object back.
    pub fn into_inner(self) -> T {
        self.object
    }
}

impl<T> fmt::Debug for Refused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Refused({:?})", self.error)
    }
}

impl<T> fmt::Display for Refused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused: {}", self.error)
    }
}

impl<T> From<Refused<T>> for Error {
    /// The reason; the object is dropped (which destroys it when it can be).
    fn from(r: Refused<T>) -> Error {
        r.error
    }
}

impl Error {
    /// True when the device may have taken (and may still write) the memory a failed command
    /// named: the reply was garbled or never came, or the device died. A firmware status
    /// error, a delivery error, a HAL error or refused input means the device did not take it.
    /// Memory for which this holds is quarantined, never freed (`CtxInner::release_after`).
    pub fn device_may_hold(&self) -> bool {
        matches!(
            self,
            Error::BadFirmwareReply { .. }
                | Error::CommandTimeout { .. }
                | Error::DeviceFatal { .. }
        )
    }
}

impl From<HalError> for Error {
    fn from(e: HalError) -> Self {
        Error::Hal(e)
    }
}

impl From<InvalidInput> for Error {
    fn from(e: InvalidInput) -> Self {
        Error::Invalid(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Command(c) => write!(
                f,
                "command {:#x} ({}) failed: {:?}, syndrome {:#x}",
                c.opcode,
                mlx5_prm::opcode::name(c.opcode).unwrap_or("?"),
                c.status,
                c.syndrome
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Why the hardware-access layer failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HalError {
    /// The operation is not supported by this HAL (e.g. function-level reset).
    Unsupported,
    /// No DMA memory of that size and alignment.
    OutOfMemory,
    /// Size zero or an alignment that is not a power of two.
    BadLayout,
    /// An MMIO offset outside BAR0.
    OutOfBar,
    /// The platform reported an I/O error.
    Io,
}
