//! The InfiniBand connection manager (CM) and rdma_cm, as Linux hosts speak them on QP 1.
//!
//! This is the pure core: no device, no allocation.
//!
//! - [`mad`]: the common MAD header and the CM class constants (IBTA vol. 1 §13.4, Linux
//!   `include/rdma/ib_mad.h`, `include/rdma/ib_cm.h`);
//! - [`msg`]: every CM message (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP),
//!   decoded and encoded field by field at the offsets of IBTA vol. 1 chapter 12 as Linux
//!   `include/rdma/ibta_vol1_c12.h` declares them, with typed errors for bad input;
//! - [`rdma_cm`]: the rdma_cm private-data header, the service ID rule and the RoCE UDP
//!   source port of a connection's flow label;
//! - [`conn`]: the connection state machine in both roles (listen, connect request,
//!   accept / reject; connect, REP, RTU; DREQ / DREP, retries, TIMEWAIT; SIDR both ways)
//!   over a [`conn::CmTransport`] that sends MADs and moves QPs, with time passed in.
//!
//! ```
//! use rdma_cm::msg::{rej_reason, CmMad, CmMsg, Rej};
//! use rdma_cm::msg::{REJ_ARI_LEN, REJ_PRIVATE_DATA_LEN};
//! use rdma_cm::rdma_cm::PortSpace;
//!
//! // A REJ for a REQ to a port nothing listens on, answering the REQ's exchange.
//! let rej = Rej {
//!     local_comm_id: 0,
//!     remote_comm_id: 0x9c24_9cef,
//!     message_rejected: rdma_cm::msg::msg_response::REQ,
//!     reject_info_length: 0,
//!     reason: rej_reason::INVALID_SERVICE_ID,
//!     ari: [0; REJ_ARI_LEN],
//!     private_data: [0; REJ_PRIVATE_DATA_LEN],
//! };
//! let bytes = CmMad::new(0x2_ef9c_249c, CmMsg::Rej(rej)).to_bytes().unwrap();
//! assert_eq!(CmMad::decode(&bytes).unwrap().msg, CmMsg::Rej(rej));
//! assert_eq!(PortSpace::Tcp.service_id(4420), 0x0106_1144);
//! ```

#![no_std]
#![deny(missing_docs)]

pub mod conn;
mod field;
pub mod mad;
pub mod msg;
pub mod rdma_cm;

pub use mad::{CmError, MadHdr, MAD_LEN};
pub use msg::{CmMad, CmMsg};
