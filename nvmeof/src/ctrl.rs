//! Controller state: the properties (CAP, VS, CC, CSTS) and what writing CC does, the
//! keep-alive timer, controller IDs, and what a queue's end or a fatal error does to its
//! controller. As Linux's target does it (`drivers/nvme/target/core.c`).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::backend::Backend;
use crate::exec::QueueId;
use crate::target::{ConfigError, SubsysRef, Target, TargetConfig, DISCOVERY_NQN, NQN_SIZE};

/// Property offsets (`include/linux/nvme.h` `NVME_REG_CAP`, `NVME_REG_VS`, `NVME_REG_CC`,
/// `NVME_REG_CSTS`).
pub mod reg {
    /// Controller capabilities, 8 bytes.
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Controller configuration.
    pub const CC: u32 = 0x14;
    /// Controller status.
    pub const CSTS: u32 = 0x1c;
}

/// NVMe version 1.3 (Linux `drivers/nvme/target/nvmet.h` `NVMET_DEFAULT_VS`).
pub const VERSION: u32 = 0x0001_0300;
/// Queue entries per queue (Linux `nvmet.h` `NVMET_QUEUE_SIZE`); CAP.MQES is one less.
pub const QUEUE_SIZE: u16 = 128;
/// CSTS.RDY.
pub const CSTS_RDY: u32 = 1 << 0;
/// CSTS.CFS (controller fatal status).
pub const CSTS_CFS: u32 = 1 << 1;
/// CSTS.SHST = shutdown processing complete.
pub const CSTS_SHST_CMPLT: u32 = 2 << 2;
/// Keep-alive of a discovery controller whose host asked for none (Linux `nvmet.h`
/// `NVMET_DISC_KATO_MS`).
pub const DISC_KATO_MS: u32 = 120_000;
/// Held Asynchronous Event Requests per controller (Linux `nvmet.h` `NVMET_ASYNC_EVENTS`).
pub const ASYNC_EVENTS: usize = 4;
/// Entries of the error log (Linux `nvmet.h` `NVMET_ERROR_LOG_SLOTS`).
pub const ERROR_LOG_SLOTS: usize = 128;
/// Bytes of an error log entry (`include/linux/nvme.h` `struct nvme_error_slot`).
pub const ERROR_SLOT_LEN: usize = 64;
/// Events enabled when a controller is made: namespace attribute and ANA change notices
/// (Linux `nvmet.h` `NVMET_AEN_CFG_OPTIONAL`, set by `nvmet_alloc_ctrl`).
pub const AEN_CFG_OPTIONAL: u32 = (1 << 8) | (1 << 11);

/// CAP as Linux `core.c` `nvmet_init_cap` builds it: CSS NVM (bit 37) and "one or more I/O
/// command sets" (bit 43), TO 15 (7.5 s), MQES `QUEUE_SIZE - 1`.
pub const CAP: u64 = (1 << 37) | (1 << 43) | (15 << 24) | (QUEUE_SIZE as u64 - 1);

/// A controller.
pub(crate) struct Ctrl {
    pub subsys: SubsysRef,
    pub cntlid: u16,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// Keep-alive timeout in seconds (Linux `ctrl->kato`), 0: none.
    pub kato: u32,
    pub cc: u32,
    pub csts: u32,
    pub aen_enabled: u32,
    /// Held Asynchronous Event Requests: queue and command ID.
    pub aers: Vec<(QueueId, u16)>,
    /// The queue of each queue ID.
    pub sqs: Vec<Option<QueueId>>,
    /// A command arrived since the keep-alive timer last ran (Linux `reset_tbkas`).
    pub reset_tbkas: bool,
    /// When the keep-alive timer runs next, in ms.
    pub ka_due: u64,
    /// Torn down; its queues are going.
    pub dead: bool,
    /// Errors logged so far (Linux `ctrl->err_counter`).
    pub err_counter: u64,
    /// The error log's slots, 64 bytes each, slot `err_counter % ERROR_LOG_SLOTS` the newest
    /// (allocated at the first error).
    pub err_slots: Vec<[u8; ERROR_SLOT_LEN]>,
}

impl Ctrl {
    /// CC written (Linux `core.c` `nvmet_update_cc`, `nvmet_start_ctrl`, `nvmet_clear_ctrl`).
    pub(crate) fn update_cc(&mut self, new: u32, now_ms: u64) {
        let en = |cc: u32| cc & 1 != 0;
        let shn = |cc: u32| (cc >> 14) & 3 != 0;
        let old = self.cc;
        self.cc = new;
        if en(new) && !en(old) {
            self.start(now_ms);
        }
        if !en(new) && en(old) {
            self.clear();
        }
        if shn(new) && !shn(old) {
            self.clear();
            self.csts |= CSTS_SHST_CMPLT;
        }
        if !shn(new) && shn(old) {
            self.csts &= !CSTS_SHST_CMPLT;
        }
    }

    /// Linux `nvmet_start_ctrl`: the entry sizes of an I/O controller must be 64 / 16 bytes
    /// (a discovery controller's are not checked), MPS and AMS 0, the command set NVM (0) or
    /// "all I/O command sets" (6); else CSTS.CFS.
    fn start(&mut self, now_ms: u64) {
        let cc = self.cc;
        let iosqes = (cc >> 16) & 0xf;
        let iocqes = (cc >> 20) & 0xf;
        let mps = (cc >> 7) & 0xf;
        let ams = (cc >> 11) & 0x7;
        let css = (cc >> 4) & 0x7;
        let entries = self.is_discovery() || (iosqes == 6 && iocqes == 4);
        if !entries || mps != 0 || ams != 0 || !(css == 0 || css == 6) {
            self.csts = CSTS_CFS;
            return;
        }
        self.csts = CSTS_RDY;
        self.restart_keep_alive(now_ms);
    }

    /// Linux `nvmet_clear_ctrl`.
    fn clear(&mut self) {
        self.csts &= !CSTS_RDY;
        self.cc = 0;
    }

    /// Linux `mod_delayed_work(.., &ctrl->ka_work, ctrl->kato * HZ)`.
    pub(crate) fn restart_keep_alive(&mut self, now_ms: u64) {
        if self.kato != 0 {
            self.ka_due = now_ms + u64::from(self.kato) * 1000;
        }
    }

    pub(crate) fn is_discovery(&self) -> bool {
        self.subsys == SubsysRef::Discovery
    }

    /// Logs a failed command (Linux `core.c` `nvmet_set_error`): count, queue, command ID,
    /// status (over the phase bit), parameter error location, LBA (0), namespace.
    pub(crate) fn log_error(&mut self, sqid: u16, cid: u16, status: u16, loc: u16, nsid: u32) {
        if self.err_slots.is_empty() {
            self.err_slots = vec![[0; ERROR_SLOT_LEN]; ERROR_LOG_SLOTS];
        }
        self.err_counter += 1;
        let e = &mut self.err_slots[(self.err_counter % ERROR_LOG_SLOTS as u64) as usize];
        e.fill(0);
        e[0..8].copy_from_slice(&self.err_counter.to_le_bytes());
        e[8..10].copy_from_slice(&sqid.to_le_bytes());
        e[10..12].copy_from_slice(&cid.to_le_bytes());
        e[12..14].copy_from_slice(&(status << 1).to_le_bytes());
        e[14..16].copy_from_slice(&loc.to_le_bytes());
        e[24..28].copy_from_slice(&nsid.to_le_bytes());
    }

    /// The error log page into `buf` (Linux `admin-cmd.c`
    /// `nvmet_execute_get_log_page_error`): the newest slot first, going back, as many whole
    /// entries as fit.
    pub(crate) fn error_log(&self, buf: &mut [u8]) {
        if self.err_slots.is_empty() {
            return;
        }
        let mut slot = (self.err_counter % ERROR_LOG_SLOTS as u64) as usize;
        for out in buf.chunks_exact_mut(ERROR_SLOT_LEN).take(ERROR_LOG_SLOTS) {
            out.copy_from_slice(&self.err_slots[slot]);
            slot = slot.checked_sub(1).unwrap_or(ERROR_LOG_SLOTS - 1);
        }
    }
}

/// C string of a fixed NQN field: up to the first NUL (all of it without one), as Linux
/// compares them with `strncmp(.., NVMF_NQN_SIZE)`.
pub(crate) fn cstr(field: &[u8]) -> &[u8] {
    let n = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..n]
}

pub(crate) fn check_config<B: Backend>(cfg: &TargetConfig, disks: &[B]) -> Result<(), ConfigError> {
    if cfg.max_qid == 0 || cfg.max_qid > 1024 {
        return Err(ConfigError::BadMaxQid(cfg.max_qid));
    }
    for (i, s) in cfg.subsystems.iter().enumerate() {
        if s.nqn.is_empty()
            || s.nqn.len() >= NQN_SIZE
            || s.nqn == DISCOVERY_NQN
            || s.nqn.contains('\0')
        {
            return Err(ConfigError::BadNqn(i));
        }
        if cfg.subsystems[..i].iter().any(|o| o.nqn == s.nqn) {
            return Err(ConfigError::DuplicateNqn(i));
        }
        for (j, ns) in s.namespaces.iter().enumerate() {
            let bad = ns.nsid == 0
                || ns.nsid == u32::MAX
                || usize::from(ns.disk) >= disks.len()
                || !(9..=12).contains(&ns.lba_shift)
                || s.namespaces[..j].iter().any(|o| o.nsid == ns.nsid);
            if bad {
                return Err(ConfigError::BadNamespace {
                    subsys: i,
                    nsid: ns.nsid,
                });
            }
        }
    }
    Ok(())
}

impl<B: Backend> Target<B> {
    /// A new controller (Linux `core.c` `nvmet_alloc_ctrl` once the subsystem and host are
    /// checked): the lowest free controller ID from 1 (Linux's `cntlid_ida`), keep-alive
    /// timer running.
    pub(crate) fn alloc_ctrl(
        &mut self,
        subsys: SubsysRef,
        hostnqn: &[u8],
        hostid: [u8; 16],
        kato_ms: u32,
    ) -> Option<usize> {
        let cntlid =
            (1..=0xffefu16).find(|id| !self.ctrls.iter().flatten().any(|c| c.cntlid == *id))?;
        let kato_ms = if subsys == SubsysRef::Discovery && kato_ms == 0 {
            DISC_KATO_MS
        } else {
            kato_ms
        };
        let mut c = Ctrl {
            subsys,
            cntlid,
            hostnqn: String::from_utf8_lossy(hostnqn).into_owned(),
            hostid,
            kato: kato_ms.div_ceil(1000),
            cc: 0,
            csts: 0,
            aen_enabled: AEN_CFG_OPTIONAL,
            aers: Vec::new(),
            sqs: vec![None; usize::from(self.cfg.max_qid) + 1],
            reset_tbkas: false,
            ka_due: 0,
            dead: false,
            err_counter: 0,
            err_slots: Vec::new(),
        };
        c.restart_keep_alive(self.now_ms);
        let slot = match self.ctrls.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.ctrls.push(None);
                self.ctrls.len() - 1
            }
        };
        self.ctrls[slot] = Some(c);
        Some(slot)
    }

    /// A fatal controller error (Linux `core.c` `nvmet_ctrl_fatal_error`): CSTS.CFS, and
    /// every queue of the controller is to be disconnected.
    pub(crate) fn fatal(&mut self, ctrl: usize) {
        let Some(c) = self.ctrls.get_mut(ctrl).and_then(Option::as_mut) else {
            return;
        };
        c.csts |= CSTS_CFS;
        c.dead = true;
        let qs: Vec<QueueId> = c.sqs.iter().flatten().copied().collect();
        for q in qs {
            self.kill_queue(q);
        }
    }

    /// Marks a queue for disconnection (once).
    pub(crate) fn kill_queue(&mut self, id: QueueId) {
        if let Ok(q) = self.queue_mut(id) {
            if !q.dying {
                q.dying = true;
                self.teardown.push_back(id);
            }
        }
    }
}

/// A queue is gone (Linux `core.c` `nvmet_sq_destroy`): the admin queue's held AERs are
/// dropped, the queue leaves its controller, the controller resets its traffic-based
/// keep-alive, and a controller without queues is freed.
pub(crate) fn close_queue<B: Backend>(t: &mut Target<B>, id: QueueId) {
    let Some((gen, slot)) = t.queues.get_mut(id.index()) else {
        return;
    };
    if *gen != id.gen {
        return;
    }
    let Some(q) = slot.take() else {
        return;
    };
    t.teardown.retain(|x| *x != id);
    t.completions.retain(|(x, _)| *x != id);
    let Some(ci) = q.ctrl else {
        return;
    };
    let Some(c) = t.ctrls.get_mut(ci).and_then(Option::as_mut) else {
        return;
    };
    c.aers.retain(|(x, _)| *x != id);
    if let Some(s) = c.sqs.get_mut(usize::from(q.qid)) {
        if *s == Some(id) {
            *s = None;
        }
    }
    c.reset_tbkas = true;
    if c.sqs.iter().all(Option::is_none) {
        t.ctrls[ci] = None;
    }
}

/// The keep-alive timers (Linux `core.c` `nvmet_keep_alive_timer`): a controller that saw a
/// command in the period runs another one; one that did not is torn down.
pub(crate) fn keep_alive<B: Backend>(t: &mut Target<B>) {
    let now = t.now_ms;
    let mut expired = Vec::new();
    for (i, c) in t.ctrls.iter_mut().enumerate() {
        let Some(c) = c else { continue };
        if c.kato == 0 || c.dead || now < c.ka_due {
            continue;
        }
        if c.reset_tbkas {
            c.reset_tbkas = false;
            c.restart_keep_alive(now);
        } else {
            expired.push(i);
        }
    }
    for i in expired {
        t.fatal(i);
    }
}
