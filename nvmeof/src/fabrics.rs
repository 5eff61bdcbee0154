//! Fabrics commands: Connect (with its 1024-byte data), Property Get and Property Set, as
//! Linux's target runs them (`drivers/nvme/target/fabrics-cmd.c`; layouts from
//! `include/linux/nvme.h` `struct nvmf_connect_command`, `struct nvmf_connect_data`).

use crate::backend::Backend;
use crate::ctrl::{cstr, reg, CAP, VERSION};
use crate::dispatch::{Cmd, Data, Outcome};
use crate::exec::{Local, QueueId};
use crate::queue::Then;
use crate::sqe::{Sqe, OPC_FABRICS};
use crate::status::{self, ipo_connect_data, ipo_connect_sqe, loc, DNR};
use crate::target::{SubsysRef, Target, DISCOVERY_NQN};

/// Fabrics command types (`nvme.h` `enum nvmf_fabrics_opcode`).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Disconnect (NVMe 2.0; Linux 6.1's target does not take it).
    pub const DISCONNECT: u8 = 0x08;
}

/// Bytes of the Connect data (`struct nvmf_connect_data`).
pub const CONNECT_DATA_LEN: u32 = 1024;
/// Offsets in the Connect data: host ID, controller ID, subsystem NQN, host NQN.
const CD_HOSTID: usize = 0;
const CD_CNTLID: usize = 16;
const CD_SUBSYSNQN: usize = 256;
const CD_HOSTNQN: usize = 512;
/// Connect SQE offsets for the "invalid parameter" result (`IPO_IATTR_CONNECT_SQE`).
const SQE_QID: u16 = 42;
const SQE_SQSIZE: u16 = 44;
/// Connect CATTR bit 2: SQ flow control disabled (`nvme.h` `NVME_CONNECT_DISABLE_SQFLOW`).
const CATTR_DISABLE_SQFLOW: u8 = 1 << 2;
/// The dynamic controller ID a host asks for in an admin Connect.
const CNTLID_DYNAMIC: u16 = 0xffff;

/// The fields of a Connect SQE the Connect runs on (kept while its data is read: a tenth of
/// the SQE in every command in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnectCmd {
    recfmt: u16,
    qid: u16,
    sqsize: u16,
    cattr: u8,
    kato: u32,
}

impl ConnectCmd {
    pub(crate) fn of(sqe: &Sqe) -> ConnectCmd {
        ConnectCmd {
            recfmt: sqe.connect_recfmt(),
            qid: sqe.connect_qid(),
            sqsize: sqe.connect_sqsize(),
            cattr: sqe.connect_cattr(),
            kato: sqe.connect_kato(),
        }
    }
}

/// Linux `nvmet_parse_connect_cmd`: on a queue without a controller only a Connect.
pub(crate) fn parse_connect(sqe: &Sqe) -> Result<(), Outcome> {
    if sqe.opcode() != OPC_FABRICS || sqe.fctype() != fctype::CONNECT {
        return Err(Outcome::fail(status::INVALID_OPCODE | DNR));
    }
    Ok(())
}

/// Linux `nvmet_parse_fabrics_admin_cmd`: Property Get and Set on the admin queue.
pub(crate) fn parse_admin(sqe: &Sqe) -> Result<(), Outcome> {
    match sqe.fctype() {
        fctype::PROPERTY_SET | fctype::PROPERTY_GET => Ok(()),
        _ => Err(Outcome::fail_at(status::INVALID_OPCODE | DNR, loc::FCTYPE)),
    }
}

/// A Connect: its data in the capsule now, or read from the host first.
pub(crate) fn connect<B: Backend>(t: &mut Target<B>, id: QueueId, cmd: &Cmd) -> Outcome {
    if let Err(o) = cmd.check_len(CONNECT_DATA_LEN) {
        return o;
    }
    match cmd.data {
        Data::InCapsule(d) => connect_with(t, id, &ConnectCmd::of(&cmd.sqe), d),
        _ => Outcome::FromHost {
            local: Local::Buf {
                len: CONNECT_DATA_LEN,
            },
            then: Then::Connect(ConnectCmd::of(&cmd.sqe)),
        },
    }
}

/// Linux `nvmet_execute_admin_connect` / `nvmet_execute_io_connect` with the Connect data.
pub(crate) fn connect_with<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    sqe: &ConnectCmd,
    data: &[u8],
) -> Outcome {
    let Some(d) = data.get(..CONNECT_DATA_LEN as usize) else {
        return Outcome::fail(status::SGL_INVALID_DATA | DNR);
    };
    if sqe.recfmt != 0 {
        return Outcome::fail(status::CONNECT_FORMAT | DNR);
    }
    let cntlid = u16::from_le_bytes([d[CD_CNTLID], d[CD_CNTLID + 1]]);
    // Linux terminates both NQNs at their last byte before it reads them.
    let subsysnqn = cstr(&d[CD_SUBSYSNQN..CD_HOSTNQN - 1]);
    let hostnqn = cstr(&d[CD_HOSTNQN..CD_HOSTNQN + 255]);
    let qid = sqe.qid;
    let invalid = |r: u64| refused(status::CONNECT_INVALID_PARAM | DNR, r);
    if qid == 0 && cntlid != CNTLID_DYNAMIC {
        return invalid(ipo_connect_data(CD_CNTLID as u16));
    }
    // nvmet_find_get_subsys.
    let Some(subsys) = find_subsys(t, subsysnqn) else {
        return invalid(ipo_connect_data(CD_SUBSYSNQN as u16));
    };
    if qid == 0 {
        // nvmet_alloc_ctrl: the host must be allowed (nvmet_host_allowed).
        if !host_allowed(t, subsys, hostnqn) {
            return refused(
                status::CONNECT_INVALID_HOST | DNR,
                ipo_connect_data(CD_HOSTNQN as u16),
            );
        }
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&d[CD_HOSTID..CD_HOSTID + 16]);
        let Some(c) = t.alloc_ctrl(subsys, hostnqn, hostid, sqe.kato) else {
            return Outcome::fail(status::CONNECT_CTRL_BUSY | DNR);
        };
        if let Err(o) = install_queue(t, c, id, sqe) {
            t.ctrls[c] = None;
            return o;
        }
        let cntlid = t.ctrls[c].as_ref().map_or(0, |c| c.cntlid);
        return Outcome::ok(u64::from(cntlid));
    }
    // nvmet_ctrl_find_get: the controller of that ID, for the same host.
    let found = t.ctrls.iter().position(|c| {
        c.as_ref().is_some_and(|c| {
            c.subsys == subsys && c.cntlid == cntlid && !c.dead && c.hostnqn.as_bytes() == hostnqn
        })
    });
    let Some(c) = found else {
        return invalid(ipo_connect_data(CD_CNTLID as u16));
    };
    let max_qid = match subsys {
        SubsysRef::Discovery => 0,
        SubsysRef::Nvm(_) => t.cfg.max_qid,
    };
    if qid > max_qid {
        return invalid(ipo_connect_sqe(SQE_QID));
    }
    if let Err(o) = install_queue(t, c, id, sqe) {
        // "pass back cntlid that had the issue of installing queue"
        return match o {
            Outcome::Done { status, .. } => refused(status, u64::from(cntlid)),
            o => o,
        };
    }
    // The controller ID in the result, as for the admin queue (the capture's I/O Connect).
    Outcome::ok(u64::from(cntlid))
}

/// A refused Connect with its result (the invalid parameter's location, or the controller
/// ID). Never logged: the queue has no controller yet (Linux `nvmet_set_error` logs on
/// `req->sq->ctrl` only).
fn refused(status: u16, result: u64) -> Outcome {
    Outcome::Done {
        status,
        result,
        loc: loc::NONE,
    }
}

fn find_subsys<B: Backend>(t: &Target<B>, nqn: &[u8]) -> Option<SubsysRef> {
    if nqn == DISCOVERY_NQN.as_bytes() {
        return Some(SubsysRef::Discovery);
    }
    let i = t
        .cfg
        .subsystems
        .iter()
        .position(|s| s.nqn.as_bytes() == nqn)?;
    Some(SubsysRef::Nvm(i))
}

/// Linux `core.c` `nvmet_host_allowed`: any host for the discovery subsystem or with
/// `allow_any_host`, else the listed ones.
fn host_allowed<B: Backend>(t: &Target<B>, subsys: SubsysRef, hostnqn: &[u8]) -> bool {
    match subsys {
        SubsysRef::Discovery => true,
        SubsysRef::Nvm(i) => {
            let s = &t.cfg.subsystems[i];
            s.allow_any_host || s.hosts.iter().any(|h| h.as_bytes() == hostnqn)
        }
    }
}

/// Linux `fabrics-cmd.c` `nvmet_install_queue`: a size of at least 2 (0's based 1) and for I/O
/// queues at most CAP.MQES + 1, a queue ID not yet in use; then the queue belongs to the
/// controller.
fn install_queue<B: Backend>(
    t: &mut Target<B>,
    c: usize,
    id: QueueId,
    sqe: &ConnectCmd,
) -> Result<(), Outcome> {
    let qid = sqe.qid;
    let sqsize = sqe.sqsize;
    let invalid_size = refused(
        status::CONNECT_INVALID_PARAM | DNR,
        ipo_connect_sqe(SQE_SQSIZE),
    );
    if sqsize == 0 {
        return Err(invalid_size);
    }
    let Some(ctl) = t.ctrls[c].as_mut() else {
        return Err(Outcome::fail(status::INTERNAL | DNR));
    };
    // Linux `fabrics-cmd.c` `nvmet_install_queue` ("qid %u has already been created"):
    // CMD_SEQ_ERROR | DNR; its error_loc (qid) is not logged, the queue has no controller yet
    // (`core.c` `nvmet_set_error` returns early), so no MORE bit.
    if ctl.sqs.get(usize::from(qid)).is_none_or(Option::is_some) {
        return Err(Outcome::fail(status::CMD_SEQ_ERROR | DNR));
    }
    // CAP.MQES bounds the I/O queues only ("for fabrics, this value applies to only the I/O
    // Submission Queues"; the admin queue is bounded by the CM's NVME_AQ_DEPTH check).
    if qid != 0 && u64::from(sqsize) > (CAP & 0xffff) {
        return Err(invalid_size);
    }
    ctl.sqs[usize::from(qid)] = Some(id);
    let q = t
        .queue_mut(id)
        .map_err(|_| Outcome::fail(status::INTERNAL | DNR))?;
    q.ctrl = Some(c);
    q.qid = qid;
    q.size = sqsize + 1;
    q.sqhd_disabled = sqe.cattr & CATTR_DISABLE_SQFLOW != 0;
    // Linux 6.1 `fabrics-cmd.c` `nvmet_install_queue`: with SQ flow control disabled, the
    // Connect's response carries SQHD 0xffff; `Queue::respond` hands it out once, then 0.
    q.sqhd = if q.sqhd_disabled { 0xffff } else { 0 };
    Ok(())
}

/// Linux `fabrics-cmd.c` `nvmet_execute_prop_get`: CAP as 8 bytes, VS, CC, CSTS as 4.
pub(crate) fn prop_get<B: Backend>(t: &Target<B>, c: usize, cmd: &Cmd) -> Outcome {
    if let Err(o) = cmd.check_len(0) {
        return o;
    }
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let sqe = &cmd.sqe;
    let val = if sqe.prop_attrib() & 1 != 0 {
        match sqe.prop_offset() {
            reg::CAP => Some(CAP),
            _ => None,
        }
    } else {
        match sqe.prop_offset() {
            reg::VS => Some(u64::from(VERSION)),
            reg::CC => Some(u64::from(ctl.cc)),
            reg::CSTS => Some(u64::from(ctl.csts)),
            _ => None,
        }
    };
    // Linux names the offset for a bad 8-byte property, the attributes for a bad 4-byte one.
    let at = if sqe.prop_attrib() & 1 != 0 {
        loc::CDW11
    } else {
        loc::CDW10
    };
    match val {
        Some(v) => Outcome::ok(v),
        None => Outcome::fail_at(status::INVALID_FIELD | DNR, at),
    }
}

/// Linux `fabrics-cmd.c` `nvmet_execute_prop_set`: only CC, as 4 bytes.
pub(crate) fn prop_set<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd) -> Outcome {
    if let Err(o) = cmd.check_len(0) {
        return o;
    }
    let now = t.now_ms;
    let Some(ctl) = t.ctrls[c].as_mut() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let sqe = &cmd.sqe;
    if sqe.prop_attrib() & 1 != 0 {
        return Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10);
    }
    if sqe.prop_offset() != reg::CC {
        return Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW11);
    }
    ctl.update_cc(sqe.prop_value() as u32, now);
    Outcome::ok(0)
}
