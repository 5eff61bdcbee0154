//! The admin command set of an NVM controller: Identify, Get Log Page, Set and Get Features,
//! Asynchronous Event Request, Keep Alive, Abort, and the fabrics Property Get / Set routed
//! here, as Linux's target runs them (`drivers/nvme/target/admin-cmd.c`). Data layouts from
//! `include/linux/nvme.h` (`struct nvme_id_ctrl`, `struct nvme_id_ns`, `struct
//! nvme_smart_log`, `struct nvme_effects_log`).

use crate::backend::Backend;
use crate::ctrl::{Ctrl, ASYNC_EVENTS, CSTS_RDY};
use crate::dispatch::{known_opcode, opcode_set, Cmd, Outcome};
use crate::exec::{Local, QueueId};
use crate::fabrics::{self, fctype};
use crate::identify;
use crate::sqe::{Sqe, OPC_FABRICS};
use crate::status::{self, loc, DNR};
use crate::target::{SubsysRef, Target};

/// Admin opcodes (`nvme.h` `enum nvme_admin_opcode`).
pub mod opc {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT: u8 = 0x0c;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// Feature identifiers (`nvme.h` `NVME_FEAT_*`).
pub mod feat {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power management.
    pub const POWER_MGMT: u8 = 0x02;
    /// Temperature threshold.
    pub const TEMP_THRESH: u8 = 0x04;
    /// Error recovery.
    pub const ERR_RECOVERY: u8 = 0x05;
    /// Volatile write cache.
    pub const VOLATILE_WC: u8 = 0x06;
    /// Number of queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Interrupt coalescing.
    pub const IRQ_COALESCE: u8 = 0x08;
    /// Interrupt vector configuration.
    pub const IRQ_CONFIG: u8 = 0x09;
    /// Write atomicity.
    pub const WRITE_ATOMIC: u8 = 0x0a;
    /// Asynchronous event configuration.
    pub const ASYNC_EVENT: u8 = 0x0b;
    /// Keep-alive timer.
    pub const KATO: u8 = 0x0f;
    /// Host identifier.
    pub const HOST_ID: u8 = 0x81;
}

/// Log page identifiers (`nvme.h` `NVME_LOG_*`).
pub mod lid {
    /// Error information.
    pub const ERROR: u8 = 0x01;
    /// SMART / health information.
    pub const SMART: u8 = 0x02;
    /// Firmware slot information.
    pub const FW_SLOT: u8 = 0x03;
    /// Changed namespace list.
    pub const CHANGED_NS: u8 = 0x04;
    /// Commands supported and effects.
    pub const CMD_EFFECTS: u8 = 0x05;
    /// Discovery.
    pub const DISC: u8 = 0x70;
}

/// Asynchronous events an NVM controller reports (Linux `nvmet.h` `NVMET_AEN_CFG_ALL`: the
/// SMART critical warnings spare, temperature, reliability, volatile memory; namespace
/// attributes; ANA change).
pub const AEN_CFG_ALL: u32 = 0x1 | 0x2 | 0x4 | 0x10 | (1 << 8) | (1 << 11);

/// Bytes of the SMART log page.
const SMART_LEN: u32 = 512;
/// Bytes of the changed namespace list (`NVME_MAX_CHANGED_NAMESPACES` entries of 4).
const CHANGED_NS_LEN: u32 = 1024 * 4;

/// Linux `admin-cmd.c` `nvmet_parse_admin_cmd` for an NVM controller: it must be enabled and
/// ready (`core.c` `nvmet_check_ctrl_status`), and the opcode one it runs.
pub(crate) fn parse(ctl: &Ctrl, sqe: &Sqe) -> Result<(), Outcome> {
    if ctl.cc & 1 == 0 || ctl.csts & CSTS_RDY == 0 {
        return Err(Outcome::fail(status::CMD_SEQ_ERROR | DNR));
    }
    use opc::*;
    const KNOWN: u32 = opcode_set(&[
        GET_LOG_PAGE,
        IDENTIFY,
        ABORT,
        SET_FEATURES,
        GET_FEATURES,
        ASYNC_EVENT,
        KEEP_ALIVE,
    ]);
    known_opcode(sqe, KNOWN)
}

/// Runs a parsed admin command of controller `c` (NVM or, for the fabrics ones, discovery).
pub(crate) fn execute<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    c: usize,
    cmd: &Cmd,
    staging: &mut [u8],
) -> Outcome {
    let sqe = &cmd.sqe;
    if sqe.opcode() == OPC_FABRICS {
        return match sqe.fctype() {
            fctype::PROPERTY_GET => fabrics::prop_get(t, c, cmd),
            _ => fabrics::prop_set(t, c, cmd),
        };
    }
    match sqe.opcode() {
        opc::IDENTIFY => identify::execute(t, c, cmd, staging),
        opc::GET_LOG_PAGE => get_log_page(t, c, cmd, staging),
        opc::SET_FEATURES => set_features(t, c, cmd),
        opc::GET_FEATURES => get_features(t, c, cmd, staging),
        opc::ASYNC_EVENT => async_event(t, id, c, cmd),
        opc::KEEP_ALIVE => keep_alive(t, c, cmd),
        // nvmet_execute_abort: nothing is aborted (result bit 0 set).
        _ => cmd.check_len(0).map_or_else(|o| o, |()| Outcome::ok(1)),
    }
}

/// Fills the staging buffer with `len` bytes, zeroes and then `fill`, for a transfer to the
/// host. A length beyond the staging buffer gets `NVME_SC_INTERNAL`, as Linux's
/// `nvmet_rdma_map_sgl_keyed` answers a buffer it cannot allocate.
pub(crate) fn to_host(
    staging: &mut [u8],
    len: u32,
    result: u64,
    fill: impl FnOnce(&mut [u8]),
) -> Outcome {
    let Some(buf) = staging.get_mut(..len as usize) else {
        return Outcome::fail(status::INTERNAL);
    };
    buf.fill(0);
    fill(buf);
    if len == 0 {
        return Outcome::ok(result);
    }
    Outcome::ToHost {
        local: Local::Buf { len },
        result,
    }
}

/// Linux `nvmet_copy_to_sgl` of `data` at offset 0: the host's buffer must hold it all, else
/// `NVME_SC_SGL_INVALID_DATA | DNR`.
pub(crate) fn copy_to_host(staging: &mut [u8], cmd: &Cmd, data: &[u8]) -> Outcome {
    let len = cmd.data.len();
    if (len as usize) < data.len() {
        return Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR);
    }
    to_host(staging, len, 0, |b| b[..data.len()].copy_from_slice(data))
}

/// Linux `nvmet_get_log_page_len`: (NUMDU:NUMDL + 1) dwords.
pub(crate) fn log_page_len(sqe: &Sqe) -> u64 {
    let numdl = u64::from(sqe.cdw(10) >> 16);
    let numdu = u64::from(sqe.cdw(11) & 0xffff);
    (((numdu << 16) | numdl) + 1) * 4
}

/// Linux `admin-cmd.c` `nvmet_execute_get_log_page`.
fn get_log_page<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd, staging: &mut [u8]) -> Outcome {
    let sqe = &cmd.sqe;
    let len = log_page_len(sqe);
    if u64::from(cmd.data.len()) != len {
        return Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR);
    }
    let len = len as u32;
    match sqe.cdw(10) as u8 {
        lid::ERROR => {
            let Some(ctl) = t.ctrls[c].as_ref() else {
                return Outcome::fail(status::INTERNAL | DNR);
            };
            to_host(staging, len, 0, |b| ctl.error_log(b))
        }
        // One firmware slot, always active: all zero (nvmet_execute_get_log_page_noop).
        lid::FW_SLOT => to_host(staging, len, 0, |_| {}),
        lid::SMART => smart(t, c, cmd, staging),
        lid::CHANGED_NS => {
            // nvmet_execute_get_log_changed_ns: the whole list or NVME_SC_INTERNAL; nothing
            // ever changes here.
            if len != CHANGED_NS_LEN {
                return Outcome::fail(status::INTERNAL);
            }
            to_host(staging, len, 0, |_| {})
        }
        lid::CMD_EFFECTS => {
            // nvmet_execute_get_log_cmd_effects_ns: command set NVM (CSI 0) only.
            if sqe.0[47] != 0 {
                return Outcome::fail(status::INVALID_LOG_PAGE);
            }
            let mut log = [0u8; 4096];
            identify::effects_log(&mut log);
            copy_to_host(staging, cmd, &log)
        }
        _ => Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10),
    }
}

/// Linux `nvmet_execute_get_log_page_smart`: exactly 512 bytes; all namespaces or one.
fn smart<B: Backend>(t: &Target<B>, c: usize, cmd: &Cmd, staging: &mut [u8]) -> Outcome {
    if cmd.data.len() != SMART_LEN {
        return Outcome::fail(status::INTERNAL);
    }
    let Some(SubsysRef::Nvm(s)) = t.ctrls[c].as_ref().map(|c| c.subsys) else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let nsid = cmd.sqe.nsid();
    let nss = &t.cfg.subsystems[s].namespaces;
    if nsid != u32::MAX && !nss.iter().any(|n| n.nsid == nsid) {
        return Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID);
    }
    let mut st = crate::nvm::IoStats::default();
    for n in nss.iter().filter(|n| nsid == u32::MAX || n.nsid == nsid) {
        if let Some(x) = t.stats.get(usize::from(n.disk)) {
            st.add(x);
        }
    }
    let errors = t.ctrls[c].as_ref().map_or(0, |c| c.err_counter);
    to_host(staging, SMART_LEN, 0, |b| {
        // struct nvme_smart_log: data units (thousands of 512-byte units, rounded up), host
        // read and write commands, error log entries.
        b[176..184].copy_from_slice(&errors.to_le_bytes());
        b[32..40].copy_from_slice(&st.sectors_read.div_ceil(1000).to_le_bytes());
        b[48..56].copy_from_slice(&st.sectors_written.div_ceil(1000).to_le_bytes());
        b[64..72].copy_from_slice(&st.reads.to_le_bytes());
        b[80..88].copy_from_slice(&st.writes.to_le_bytes());
    })
}

/// `(max_qid - 1)` in both halves: what Linux answers for Number of Queues, whatever the host
/// asked (`nvmet_execute_set_features`, `nvmet_execute_get_features`).
fn num_queues_result<B: Backend>(t: &Target<B>) -> u64 {
    let n = u64::from(t.cfg.max_qid - 1);
    n | (n << 16)
}

/// Linux `nvmet_set_feat_kato`: the timer in whole seconds, restarted.
pub(crate) fn set_kato<B: Backend>(t: &mut Target<B>, c: usize, cdw11: u32) -> Outcome {
    let now = t.now_ms;
    let Some(ctl) = t.ctrls[c].as_mut() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    ctl.kato = cdw11.div_ceil(1000);
    ctl.restart_keep_alive(now);
    Outcome::ok(u64::from(ctl.kato))
}

/// Linux `nvmet_set_feat_async_event`: only events of `mask`.
pub(crate) fn set_aen<B: Backend>(t: &mut Target<B>, c: usize, cdw11: u32, mask: u32) -> Outcome {
    if cdw11 & !mask != 0 {
        return Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW11);
    }
    if let Some(ctl) = t.ctrls[c].as_mut() {
        ctl.aen_enabled = cdw11;
    }
    Outcome::ok(u64::from(cdw11))
}

/// Linux `admin-cmd.c` `nvmet_execute_set_features`.
fn set_features<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd) -> Outcome {
    if let Err(o) = cmd.check_len_lte(0) {
        return o;
    }
    let cdw11 = cmd.sqe.cdw(11);
    match cmd.sqe.cdw(10) as u8 {
        feat::NUM_QUEUES => {
            if cdw11 >> 16 == 0xffff || cdw11 & 0xffff == 0xffff {
                return Outcome::fail(status::INVALID_FIELD | DNR);
            }
            Outcome::ok(num_queues_result(t))
        }
        feat::KATO => set_kato(t, c, cdw11),
        feat::ASYNC_EVENT => set_aen(t, c, cdw11, AEN_CFG_ALL),
        feat::HOST_ID => Outcome::fail(status::CMD_SEQ_ERROR | DNR),
        _ => Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10),
    }
}

/// Linux `admin-cmd.c` `nvmet_execute_get_features`: events, write cache, queues, keep-alive
/// and host ID (the mandatory arbitration, power, temperature, error recovery, interrupt and
/// atomicity features are `#if 0` there: an invalid field).
fn get_features<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd, staging: &mut [u8]) -> Outcome {
    let fid = cmd.sqe.cdw(10) as u8;
    // nvmet_feat_data_len: the host identifier is 16 bytes, everything else none.
    let data_len = if fid == feat::HOST_ID { 16 } else { 0 };
    if let Err(o) = cmd.check_len(data_len) {
        return o;
    }
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    match fid {
        feat::ASYNC_EVENT => Outcome::ok(u64::from(ctl.aen_enabled)),
        feat::VOLATILE_WC => Outcome::ok(1),
        feat::NUM_QUEUES => Outcome::ok(num_queues_result(t)),
        feat::KATO => Outcome::ok(u64::from(ctl.kato) * 1000),
        feat::HOST_ID => {
            // The 128-bit host identifier only (EXHID, cdw11 bit 0).
            if cmd.sqe.cdw(11) & 1 == 0 {
                return Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW11);
            }
            let hostid = ctl.hostid;
            copy_to_host(staging, cmd, &hostid)
        }
        _ => Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10),
    }
}

/// Linux `nvmet_execute_async_event`: held, up to `NVMET_ASYNC_EVENTS` at once.
pub(crate) fn async_event<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    c: usize,
    cmd: &Cmd,
) -> Outcome {
    if let Err(o) = cmd.check_len(0) {
        return o;
    }
    let Some(ctl) = t.ctrls[c].as_mut() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    if ctl.aers.len() >= ASYNC_EVENTS {
        return Outcome::fail(status::ASYNC_LIMIT | DNR);
    }
    ctl.aers.push((id, cmd.sqe.cid()));
    Outcome::Hold
}

/// Linux `nvmet_execute_keep_alive`: restarts the timer; refused without one.
pub(crate) fn keep_alive<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd) -> Outcome {
    if let Err(o) = cmd.check_len(0) {
        return o;
    }
    let now = t.now_ms;
    let Some(ctl) = t.ctrls[c].as_mut() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    if ctl.kato == 0 {
        return Outcome::fail(status::KA_TIMEOUT_INVALID);
    }
    ctl.restart_keep_alive(now);
    Outcome::ok(0)
}
