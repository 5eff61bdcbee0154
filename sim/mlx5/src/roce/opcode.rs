//! The BTH opcode table: for each opcode the model knows, its IBTA name, which extension headers
//! follow the BTH (and in which order), whether it may carry payload, and where in a message it
//! sits.
//!
//! Sources: IBTA vol. 1 §9.2 Table 35 (opcode encoding: bits 7..5 transport, 4..0 operation) and
//! §9.3 (which headers each packet carries); the same table in Linux
//! drivers/infiniband/sw/rxe/rxe_opcode.c (`rxe_opcode[]`: `.mask` = header set, `.offset` =
//! header order); the CNP from IBTA Annex A17 §A17.9.3 (opcode 0x81, 16 reserved bytes).
//! RD (0x40..) and XRC (0xA0..) opcodes, and IBTA 1.5's FLUSH/ATOMIC_WRITE, are not modelled:
//! a ConnectX-5 RoCE port running the model's QP types never sends them, and the decoder rejects
//! them as [`super::DecodeError::UnknownOpcode`].

/// Extension headers that may follow the BTH, as a bit set. The wire order is the order of the
/// bits, low first (IBTA §9.2: DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; rxe
/// `rxe_opcode[].offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HdrSet(u8);

impl HdrSet {
    /// No extension header.
    pub const NONE: HdrSet = HdrSet(0);
    /// Datagram ETH (8 bytes): Q_Key, source QP (UD).
    pub const DETH: HdrSet = HdrSet(1 << 0);
    /// RDMA ETH (16 bytes): VA, R_Key, DMA length.
    pub const RETH: HdrSet = HdrSet(1 << 1);
    /// Atomic ETH (28 bytes): VA, R_Key, swap/add data, compare data.
    pub const ATOMIC_ETH: HdrSet = HdrSet(1 << 2);
    /// ACK ETH (4 bytes): syndrome, MSN.
    pub const AETH: HdrSet = HdrSet(1 << 3);
    /// Atomic ACK ETH (8 bytes): original remote data.
    pub const ATOMIC_ACK_ETH: HdrSet = HdrSet(1 << 4);
    /// Immediate data (4 bytes).
    pub const IMM_DT: HdrSet = HdrSet(1 << 5);
    /// Invalidate ETH (4 bytes): the R_Key to invalidate.
    pub const IETH: HdrSet = HdrSet(1 << 6);

    /// Both sets' headers.
    pub const fn union(self, o: HdrSet) -> HdrSet {
        HdrSet(self.0 | o.0)
    }
    /// Whether every header of `o` is in `self`.
    pub const fn contains(self, o: HdrSet) -> bool {
        self.0 & o.0 == o.0
    }
    /// Bytes the set occupies after the BTH.
    pub const fn len(self) -> usize {
        let mut n = 0;
        if self.contains(Self::DETH) {
            n += super::DETH_LEN;
        }
        if self.contains(Self::RETH) {
            n += super::RETH_LEN;
        }
        if self.contains(Self::ATOMIC_ETH) {
            n += super::ATOMIC_ETH_LEN;
        }
        if self.contains(Self::AETH) {
            n += super::AETH_LEN;
        }
        if self.contains(Self::ATOMIC_ACK_ETH) {
            n += super::ATOMIC_ACK_ETH_LEN;
        }
        if self.contains(Self::IMM_DT) {
            n += super::IMM_DT_LEN;
        }
        if self.contains(Self::IETH) {
            n += super::IETH_LEN;
        }
        n
    }
    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// The transport service an opcode belongs to (BTH opcode bits 7..5, IBTA §9.2 Table 35).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connection (000).
    Rc,
    /// Unreliable connection (001).
    Uc,
    /// Unreliable datagram (011).
    Ud,
    /// RoCEv2 congestion notification packet (100, Annex A17 §A17.9.3).
    Cnp,
}

/// What the packet does (rxe's RXE_{SEND,WRITE,READ,ATOMIC,ACK}_MASK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A SEND request packet.
    Send,
    /// An RDMA WRITE request packet.
    Write,
    /// An RDMA READ request.
    ReadRequest,
    /// An RDMA READ response packet.
    ReadResponse,
    /// An ACK or NAK (RC_ACKNOWLEDGE).
    Acknowledge,
    /// The response to an atomic (RC_ATOMIC_ACKNOWLEDGE).
    AtomicAcknowledge,
    /// COMPARE_SWAP or FETCH_ADD.
    Atomic,
    /// A congestion notification packet.
    Cnp,
}

/// Where a packet sits in its message (rxe's RXE_START_MASK / RXE_MIDDLE_MASK / RXE_END_MASK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// A single-packet message.
    Only,
}

impl Position {
    /// Whether the packet starts a message (FIRST or ONLY).
    pub fn is_start(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Whether the packet ends a message (LAST or ONLY).
    pub fn is_end(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// One row of the opcode table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// The BTH opcode byte.
    pub code: u8,
    /// IBTA name with the transport prefix, e.g. `RC_RDMA_WRITE_FIRST`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// What the packet does.
    pub kind: OpKind,
    /// Position in the message.
    pub position: Position,
    /// Extension headers after the BTH.
    pub hdrs: HdrSet,
    /// Whether the packet may carry payload (rxe RXE_PAYLOAD_MASK; the CNP's 16 reserved bytes
    /// count as payload here).
    pub payload: bool,
}

impl OpcodeInfo {
    /// Whether this is a request (sent by a requester) rather than a response.
    pub fn is_request(&self) -> bool {
        matches!(
            self.kind,
            OpKind::Send | OpKind::Write | OpKind::ReadRequest | OpKind::Atomic
        )
    }
}

/// A BTH opcode byte. Constants carry the IBTA names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($( $name:ident = $code:expr, $tr:ident, $kind:ident, $pos:ident, [$($h:ident),*], $pay:expr; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "` (", stringify!($code), ").")]
                pub const $name: Opcode = Opcode($code);
            )*
        }
        /// Every opcode the model knows, in opcode order.
        pub const OPCODES: &[OpcodeInfo] = &[
            $(OpcodeInfo {
                code: $code,
                name: stringify!($name),
                transport: Transport::$tr,
                kind: OpKind::$kind,
                position: Position::$pos,
                hdrs: HdrSet::NONE$(.union(HdrSet::$h))*,
                payload: $pay,
            },)*
        ];
    };
}

// Header sets and payload flags: Linux drivers/infiniband/sw/rxe/rxe_opcode.c `rxe_opcode[]`.
opcodes! {
    RC_SEND_FIRST = 0x00, Rc, Send, First, [], true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, [], true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, [], true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, Send, Last, [IMM_DT], true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, [], true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, Send, Only, [IMM_DT], true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, Write, First, [RETH], true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, Write, Middle, [], true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, Write, Last, [], true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, Write, Last, [IMM_DT], true;
    RC_RDMA_WRITE_ONLY = 0x0a, Rc, Write, Only, [RETH], true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, Rc, Write, Only, [RETH, IMM_DT], true;
    RC_RDMA_READ_REQUEST = 0x0c, Rc, ReadRequest, Only, [RETH], false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, Rc, ReadResponse, First, [AETH], true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, Rc, ReadResponse, Middle, [], true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, Rc, ReadResponse, Last, [AETH], true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, ReadResponse, Only, [AETH], true;
    RC_ACKNOWLEDGE = 0x11, Rc, Acknowledge, Only, [AETH], false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAcknowledge, Only, [AETH, ATOMIC_ACK_ETH], false;
    RC_COMPARE_SWAP = 0x13, Rc, Atomic, Only, [ATOMIC_ETH], false;
    RC_FETCH_ADD = 0x14, Rc, Atomic, Only, [ATOMIC_ETH], false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, Send, Last, [IETH], true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, Send, Only, [IETH], true;
    UC_SEND_FIRST = 0x20, Uc, Send, First, [], true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, [], true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, [], true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, Send, Last, [IMM_DT], true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, [], true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, Send, Only, [IMM_DT], true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, Write, First, [RETH], true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, Write, Middle, [], true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, Write, Last, [], true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, Write, Last, [IMM_DT], true;
    UC_RDMA_WRITE_ONLY = 0x2a, Uc, Write, Only, [RETH], true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, Uc, Write, Only, [RETH, IMM_DT], true;
    UD_SEND_ONLY = 0x64, Ud, Send, Only, [DETH], true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, Send, Only, [DETH, IMM_DT], true;
    CNP = 0x81, Cnp, Cnp, Only, [], true;
}

const fn build_index() -> [u8; 256] {
    let mut idx = [u8::MAX; 256];
    let mut i = 0;
    while i < OPCODES.len() {
        idx[OPCODES[i].code as usize] = i as u8;
        i += 1;
    }
    idx
}

static INDEX: [u8; 256] = build_index();

impl Opcode {
    /// The table row, or `None` for an opcode the model does not know.
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        OPCODES.get(INDEX[self.0 as usize] as usize)
    }
    /// The IBTA name, or `"UNKNOWN"`.
    pub fn name(self) -> &'static str {
        self.info().map_or("UNKNOWN", |i| i.name)
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "UNKNOWN_0x{:02x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for (i, info) in OPCODES.iter().enumerate() {
            assert_eq!(Opcode(info.code).info(), Some(info), "{}", info.name);
            // Transport prefix matches the opcode's top three bits (IBTA Table 35).
            let tr = match info.code >> 5 {
                0 => Transport::Rc,
                1 => Transport::Uc,
                3 => Transport::Ud,
                4 => Transport::Cnp,
                t => panic!("transport {t}"),
            };
            assert_eq!(tr, info.transport, "{}", info.name);
            if i > 0 {
                assert!(OPCODES[i - 1].code < info.code);
            }
            // UC opcodes are the RC SEND/WRITE ones with another prefix.
            if info.transport == Transport::Uc {
                let rc = Opcode(info.code & 0x1f).info().unwrap();
                assert_eq!(rc.name[3..], info.name[3..]);
                assert_eq!(rc.hdrs, info.hdrs);
            }
        }
        assert_eq!(Opcode(0x15).info(), None);
        assert_eq!(Opcode(0x40).info(), None);
        assert_eq!(Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap().hdrs.len(), 12);
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
                .info()
                .unwrap()
                .hdrs
                .len(),
            20
        );
        assert_eq!(Opcode::UD_SEND_ONLY.to_string(), "UD_SEND_ONLY");
        assert_eq!(Opcode(0xa0).to_string(), "UNKNOWN_0xa0");
    }
}
