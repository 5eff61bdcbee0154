//! The NVMe over Fabrics target core: what a target does with the capsules of a Linux host's
//! `nvme-rdma`, without any device.
//!
//! - [`sqe`], [`cqe`], [`sgl`]: the 64-byte command, the 16-byte completion, the SGL
//!   descriptors of NVMe/RDMA (in-capsule 0x01, keyed 0x40, keyed with invalidate 0x4f);
//! - [`status`]: NVMe status codes as Linux's target `nvmet` returns them;
//! - [`rdma_cm_data`]: the NVMe/RDMA private data of the CM exchange (REQ, REP, REJ);
//! - [`fabrics`]: Connect, Property Get / Set; [`admin`] and [`identify`]: the admin command
//!   set; [`discovery`]: the discovery controller and its log page; [`nvm`]: Read, Write,
//!   Flush, Write Zeroes, Dataset Management;
//! - [`ctrl`]: controller state (CC, CSTS, keep-alive); [`target`]: subsystems, namespaces,
//!   allowed hosts, controllers and queues; [`backend`]: the block backend and a RAM disk;
//! - [`exec`]: the execution API a transport drives: a received capsule in, a [`Step`] out.
//!
//! Every status for a malformed or hostile capsule is the one Linux's target returns (each
//! check names its Linux function); the tests replay the shared capture's whole Linux
//! session byte for byte. Left out, as a single-port RAM appliance does not need them:
//! asymmetric namespace access (ANA), the LBA of a failed DSM range in the error log,
//! asynchronous events (nothing changes: AERs stay held until their queue goes),
//! reservations, write protection, authentication, protection information, referrals,
//! the NVMe 2.0 Disconnect command (6.1's target does not take it either).
//!
//! ```
//! use nvmeof::{RamDisk, Step, Target};
//! # use nvmeof::target::*;
//! # let cfg = TargetConfig {
//! #     port: PortConfig { portid: 1, traddr: "10.0.0.1".into(), trsvcid: "4420".into() },
//! #     subsystems: vec![SubsystemConfig {
//! #         nqn: "nqn.2026-12.io.example:ram".into(), serial: "S".into(),
//! #         allow_any_host: true, hosts: vec![],
//! #         namespaces: vec![NamespaceConfig { nsid: 1, disk: 0, lba_shift: 9,
//! #             uuid: [0; 16], nguid: [0; 16] }],
//! #     }],
//! #     model: "m".into(), firmware: "f".into(), discovery_serial: "d".into(),
//! #     max_qid: 4, inline_data_size: 4096,
//! # };
//! let mut t = Target::new(cfg, vec![RamDisk::new(vec![0u8; 1 << 20], 0)]).unwrap();
//! // The host's REQ for an admin queue: recfmt 0, qid 0, hrqsize 32, hsqsize 31.
//! let acc = t.accept(&[0, 0, 0, 0, 32, 0, 31, 0]).unwrap();
//! assert_eq!((acc.recv_depth, acc.rep.crqsize), (32, 32));
//! // A Property Get before the Connect: an invalid opcode on an unconnected queue.
//! let mut sqe = [0u8; 64];
//! sqe[0] = 0x7f;
//! sqe[1] = 0x40;
//! sqe[4] = 0x04;
//! sqe[63] = 0x40;
//! let mut staging = vec![0u8; nvmeof::exec::STAGING_LEN];
//! let Ok(Step::Respond(r)) = t.submit(acc.queue, &sqe, &mut staging) else { panic!() };
//! assert_eq!(r.cqe.status, 0x4001);
//! ```

#![no_std]
#![deny(missing_docs)]

extern crate alloc;

pub mod admin;
pub mod backend;
pub mod cqe;
pub mod ctrl;
pub mod discovery;
mod dispatch;
pub mod exec;
pub mod fabrics;
pub mod identify;
pub mod nvm;
mod queue;
pub mod rdma_cm_data;
pub mod sgl;
pub mod sqe;
pub mod status;
pub mod target;

pub use backend::{Backend, BackendError, RamDisk};
pub use cqe::Cqe;
pub use dispatch::MAX_TRANSFER;
pub use exec::{Accepted, Dir, ExecError, Local, QueueId, Response, Step, Tag, Transfer};
pub use sgl::KeyedSgl;
pub use target::{Target, TargetConfig};
