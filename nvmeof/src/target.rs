//! The target: its configuration (port, subsystems, namespaces, allowed hosts), the
//! controllers and queues it holds, and the execution API ([`crate::exec`]) over them.

use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::backend::Backend;
use crate::ctrl::{Ctrl, QUEUE_SIZE};
use crate::exec::{Accepted, ExecError, QueueId, Response, Step, Tag, STAGING_LEN};
use crate::nvm::IoStats;
use crate::queue::Queue;
use crate::rdma_cm_data::{CmRep, CmReq, RejStatus, AQ_DEPTH, RECFMT_1_0};

/// How long a CM-accepted queue may go without a successful Connect: 60 s, Linux's admin
/// command timeout (`drivers/nvme/host/core.c` `admin_timeout`, `nvme.h` `NVME_ADMIN_TIMEOUT`), the
/// longest a Linux host waits for a Connect's response (`fabrics.c`
/// `nvmf_connect_admin_queue`; I/O queues wait `NVME_IO_TIMEOUT`, 30 s) before it gives up on
/// the queue itself.
pub const CONNECT_DEADLINE_MS: u64 = 60_000;

/// The discovery subsystem's NQN (`include/linux/nvme.h` `NVME_DISC_SUBSYS_NAME`).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Longest NQN, terminator included (`nvme.h` `NVMF_NQN_SIZE`).
pub const NQN_SIZE: usize = 256;

/// The port the target listens on, as the discovery log page reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Port ID (Linux configfs `ports/N`).
    pub portid: u16,
    /// Transport address, IPv4 dotted quad (`addr_traddr`).
    pub traddr: String,
    /// Transport service ID, the TCP-style port number as text (`addr_trsvcid`, "4420").
    pub trsvcid: String,
}

/// One namespace of a subsystem, on one of the target's disks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Namespace ID, 1 or more.
    pub nsid: u32,
    /// Index into the disks given to [`Target::new`].
    pub disk: u16,
    /// log2 of the logical block size (9: 512 bytes, as Linux's null_blk).
    pub lba_shift: u8,
    /// Namespace UUID (zero: none reported).
    pub uuid: [u8; 16],
    /// Namespace globally unique identifier (zero: none reported).
    pub nguid: [u8; 16],
}

/// An NVM subsystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// Its NQN.
    pub nqn: String,
    /// Serial number (at most 20 bytes, space padded in Identify).
    pub serial: String,
    /// Any host may connect (Linux configfs `attr_allow_any_host`).
    pub allow_any_host: bool,
    /// Host NQNs allowed when not `allow_any_host`.
    pub hosts: Vec<String>,
    /// Its namespaces.
    pub namespaces: Vec<NamespaceConfig>,
}

/// The whole configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetConfig {
    /// The port.
    pub port: PortConfig,
    /// The NVM subsystems (the discovery subsystem is implicit).
    pub subsystems: Vec<SubsystemConfig>,
    /// Model number reported in Identify (space padded to 40 bytes).
    pub model: String,
    /// Firmware revision reported in Identify (space padded to 8 bytes).
    pub firmware: String,
    /// Serial number of the discovery controller (Linux makes a random one per boot).
    pub discovery_serial: String,
    /// Highest I/O queue ID a controller may connect (Linux `subsys->max_qid`).
    pub max_qid: u16,
    /// Bytes of in-capsule data an I/O command may carry (Linux `inline_data_size`, 4096).
    pub inline_data_size: u32,
}

/// Why a configuration is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Subsystem `0` has an NQN that is empty, too long or the discovery NQN.
    BadNqn(usize),
    /// Two subsystems share an NQN.
    DuplicateNqn(usize),
    /// Namespace `nsid` of subsystem `subsys` names a disk that does not exist, has nsid 0 or
    /// a duplicate nsid, or a block size outside 512 B..=4 KiB.
    BadNamespace {
        /// Subsystem index.
        subsys: usize,
        /// The namespace ID.
        nsid: u32,
    },
    /// `max_qid` is 0 or above 1024.
    BadMaxQid(u16),
}

/// What a queue serves ([`Target::queue_info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueInfo<'a> {
    /// The queue ID (0 before the Connect, and for an admin queue).
    pub qid: u16,
    /// The controller, once connected.
    pub cntlid: Option<u16>,
    /// The subsystem's NQN, once connected.
    pub subsystem: Option<&'a str>,
    /// The host's NQN, once connected.
    pub hostnqn: Option<&'a str>,
}

/// Which subsystem a controller belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubsysRef {
    /// The discovery subsystem.
    Discovery,
    /// An NVM subsystem, by index into the configuration.
    Nvm(usize),
}

/// The NVMe-oF target core. `B` is the disks' backend.
pub struct Target<B> {
    pub(crate) cfg: TargetConfig,
    pub(crate) disks: Vec<B>,
    pub(crate) ctrls: Vec<Option<Ctrl>>,
    pub(crate) queues: Vec<(u32, Option<Queue>)>,
    pub(crate) teardown: VecDeque<QueueId>,
    pub(crate) completions: VecDeque<(QueueId, Response)>,
    pub(crate) now_ms: u64,
    pub(crate) stats: Vec<IoStats>,
}

impl<B: Backend> Target<B> {
    /// A target serving `cfg` over `disks`.
    pub fn new(cfg: TargetConfig, disks: Vec<B>) -> Result<Self, ConfigError> {
        crate::ctrl::check_config(&cfg, &disks)?;
        let disks_len = disks.len();
        Ok(Target {
            cfg,
            disks,
            ctrls: Vec::new(),
            queues: Vec::new(),
            teardown: VecDeque::new(),
            completions: VecDeque::new(),
            now_ms: 0,
            stats: vec![IoStats::default(); disks_len],
        })
    }

    /// The configuration.
    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }

    /// Disk `i`.
    pub fn disk(&self, i: usize) -> Option<&B> {
        self.disks.get(i)
    }

    /// Disk `i`, writable.
    pub fn disk_mut(&mut self, i: usize) -> Option<&mut B> {
        self.disks.get_mut(i)
    }

    /// A CM connect request with the NVMe private data `private` (after the rdma_cm header):
    /// a new queue, or the reject status (Linux `drivers/nvme/target/rdma.c`
    /// `nvmet_rdma_parse_cm_connect_req`: no data, another record format, an admin queue
    /// deeper than `NVME_AQ_DEPTH`; beyond Linux, an I/O queue deeper than `QUEUE_SIZE`). The
    /// queue belongs to no controller until its Connect,
    /// whose queue ID decides (Linux does not compare it with the REQ's either).
    pub fn accept(&mut self, private: &[u8]) -> Result<Accepted, RejStatus> {
        let req = CmReq::parse(private)?;
        let recv_depth = u32::from(req.hsqsize) + 1;
        if req.qid == 0 && recv_depth > AQ_DEPTH {
            return Err(RejStatus::InvalidHsqsize);
        }
        // An I/O queue deeper than CAP.MQES + 1 (`QUEUE_SIZE`) could never be connected (the
        // Connect's MQES check) but would cost `recv_depth` receives and buffers until then.
        // Linux 6.1 leaves this unchecked ("XXX" in `nvmet_rdma_parse_cm_connect_req`) and gives
        // each queue its own CQ; here the reject statuses the NVMe/RDMA transport binding
        // defines for it (`include/linux/nvme-rdma.h` `NVME_RDMA_CM_INVALID_HSQSIZE` /
        // `_HRQSIZE`). The Connect's SQSIZE is not compared with HSQSIZE, as in Linux.
        if req.qid != 0 && recv_depth > u32::from(QUEUE_SIZE) {
            return Err(RejStatus::InvalidHsqsize);
        }
        if req.qid != 0 && req.hrqsize > QUEUE_SIZE {
            return Err(RejStatus::InvalidHrqsize);
        }
        let queue = self.insert_queue(Queue::new(self.now_ms));
        Ok(Accepted {
            queue,
            qid: req.qid,
            rep: CmRep {
                recfmt: RECFMT_1_0,
                crqsize: recv_depth as u16,
            },
            recv_depth,
            send_depth: u32::from(req.hrqsize),
        })
    }

    fn insert_queue(&mut self, q: Queue) -> QueueId {
        if let Some(i) = self.queues.iter().position(|(_, s)| s.is_none()) {
            let slot = &mut self.queues[i];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(q);
            return QueueId {
                index: i as u32,
                gen: slot.0,
            };
        }
        self.queues.push((0, Some(q)));
        QueueId {
            index: (self.queues.len() - 1) as u32,
            gen: 0,
        }
    }

    pub(crate) fn queue_mut(&mut self, id: QueueId) -> Result<&mut Queue, ExecError> {
        match self.queues.get_mut(id.index()) {
            Some((gen, Some(q))) if *gen == id.gen => Ok(q),
            _ => Err(ExecError::UnknownQueue),
        }
    }

    /// A received capsule (SQE and in-capsule data) on queue `q`; `staging` is the buffer of
    /// a [`Local::Buf`](crate::exec::Local::Buf) transfer, kept by the transport until the
    /// command's response is sent. See [`crate::exec`].
    pub fn submit(
        &mut self,
        q: QueueId,
        capsule: &[u8],
        staging: &mut [u8],
    ) -> Result<Step, ExecError> {
        if staging.len() < STAGING_LEN {
            return Err(ExecError::StagingTooSmall(staging.len()));
        }
        crate::dispatch::submit(self, q, capsule, staging)
    }

    /// The transfer of command `tag` on queue `q` is done (`ok`) or failed; `staging` holds
    /// what an RDMA READ into [`Local::Buf`](crate::exec::Local::Buf) brought. Returns the
    /// response to send.
    pub fn complete_transfer(
        &mut self,
        q: QueueId,
        tag: Tag,
        ok: bool,
        staging: &[u8],
    ) -> Result<Response, ExecError> {
        crate::dispatch::complete_transfer(self, q, tag, ok, staging)
    }

    /// The connection of queue `q` is gone: the queue leaves its controller (held
    /// Asynchronous Event Requests are dropped), and a controller without queues is freed
    /// (Linux `drivers/nvme/target/core.c` `nvmet_sq_destroy`).
    pub fn close(&mut self, q: QueueId) {
        crate::ctrl::close_queue(self, q);
    }

    /// The time, in milliseconds from any origin: controllers whose keep-alive timer expired
    /// are torn down (their queues go to [`Target::take_teardown`]).
    /// A queue that has not connected to a controller `CONNECT_DEADLINE_MS` after the CM
    /// accepted it is torn down as well.
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        crate::ctrl::keep_alive(self);
        self.connect_deadline();
    }

    /// Queues without a controller past [`CONNECT_DEADLINE_MS`] go to the teardown queue: no
    /// keep-alive timer covers them, and each holds a connection slot and its buffers.
    fn connect_deadline(&mut self) {
        for i in 0..self.queues.len() {
            let (gen, Some(q)) = &self.queues[i] else {
                continue;
            };
            let late = self.now_ms.saturating_sub(q.accepted_ms) >= CONNECT_DEADLINE_MS;
            if q.ctrl.is_none() && !q.dying && late {
                let id = QueueId {
                    index: i as u32,
                    gen: *gen,
                };
                self.kill_queue(id);
            }
        }
    }

    /// A queue the transport is to disconnect (then [`Target::close`] it).
    pub fn take_teardown(&mut self) -> Option<QueueId> {
        self.teardown.pop_front()
    }

    /// A response that completes a held command (an Asynchronous Event Request), and its
    /// queue.
    pub fn take_completion(&mut self) -> Option<(QueueId, Response)> {
        self.completions.pop_front()
    }

    /// What queue `q` serves, for the appliance's log lines: its queue ID, and once its
    /// Connect succeeded, the controller, subsystem and host.
    pub fn queue_info(&self, q: QueueId) -> Option<QueueInfo<'_>> {
        let queue = match self.queues.get(q.index()) {
            Some((gen, Some(queue))) if *gen == q.gen => queue,
            _ => return None,
        };
        let ctrl = queue.ctrl.and_then(|c| self.ctrls[c].as_ref());
        Some(QueueInfo {
            qid: queue.qid,
            cntlid: ctrl.map(|c| c.cntlid),
            subsystem: ctrl.map(|c| match c.subsys {
                SubsysRef::Discovery => DISCOVERY_NQN,
                SubsysRef::Nvm(i) => self.cfg.subsystems[i].nqn.as_str(),
            }),
            hostnqn: ctrl.map(|c| c.hostnqn.as_str()),
        })
    }

    /// Live controllers.
    pub fn controllers(&self) -> usize {
        self.ctrls.iter().filter(|c| c.is_some()).count()
    }

    /// What the disk `i` has served (the SMART log's counters).
    pub fn stats(&self, i: usize) -> Option<IoStats> {
        self.stats.get(i).copied()
    }

    /// Open queues.
    pub fn queues(&self) -> usize {
        self.queues.iter().filter(|(_, q)| q.is_some()).count()
    }
}
