//! From a received capsule to a [`Step`], in the order of Linux's target: the checks of
//! `drivers/nvme/target/core.c` `nvmet_req_init` (fused, PSDT), the parse by queue kind
//! (`nvmet_parse_connect_cmd`, `nvmet_parse_admin_cmd`, `nvmet_parse_discovery_cmd`,
//! `nvmet_parse_io_cmd`), the data pointer (`drivers/nvme/target/rdma.c`
//! `nvmet_rdma_map_sgl`), then the command.

use crate::backend::Backend;
use crate::exec::{Dir, ExecError, Local, QueueId, Step, Tag, Transfer, STAGING_LEN};
use crate::queue::{Inflight, Then};
use crate::sgl::{DataPtr, KeyedSgl, SglError};
use crate::sqe::{Sqe, FLAGS_FUSE, FLAGS_PSDT, FLAGS_SGL_METABUF, SQE_LEN};
use crate::status::{self, loc, DNR};
use crate::target::Target;
use crate::{admin, discovery, fabrics, nvm};

/// Largest data transfer of one command: MDTS 8 in 4 KiB pages, as Linux's RDMA target
/// advertises (`drivers/nvme/target/rdma.c` `NVMET_RDMA_MAX_MDTS`).
pub const MAX_TRANSFER: u32 = 1 << 20;

/// A command's data as the data pointer describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Data<'a> {
    /// No data (length 0).
    None,
    /// In-capsule data.
    InCapsule(&'a [u8]),
    /// A remote buffer.
    Keyed(KeyedSgl),
}

impl Data<'_> {
    /// Linux `req->transfer_len`.
    pub(crate) fn len(&self) -> u32 {
        match self {
            Data::None => 0,
            Data::InCapsule(d) => d.len() as u32,
            Data::Keyed(s) => s.len,
        }
    }
}

/// A command being executed.
pub(crate) struct Cmd<'a> {
    pub sqe: Sqe,
    pub data: Data<'a>,
}

impl Cmd<'_> {
    /// Linux `nvmet_check_transfer_len`: the data pointer's length must be `len`, else
    /// `NVME_SC_SGL_INVALID_DATA | DNR`.
    pub(crate) fn check_len(&self, len: u32) -> Result<(), Outcome> {
        if self.data.len() == len {
            Ok(())
        } else {
            Err(Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR))
        }
    }

    /// Linux `nvmet_check_data_len_lte`: the command needs `len` bytes, more than the data
    /// pointer's length is `NVME_SC_SGL_INVALID_DATA | DNR` (a longer one is fine: Linux's
    /// host sends a Dataset Management's ranges as a whole 4 KiB page in the capsule).
    pub(crate) fn check_len_lte(&self, len: u32) -> Result<(), Outcome> {
        if len <= self.data.len() {
            Ok(())
        } else {
            Err(Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR))
        }
    }
}

/// What a command's execution leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Respond now; `loc` is where a failure is in the command ([`loc`]).
    Done { status: u16, result: u64, loc: u16 },
    /// Move `local` to the host's buffer, then respond with success and `result`.
    ToHost { local: Local, result: u64 },
    /// Move the host's buffer to `local`, then finish with `then`.
    FromHost { local: Local, then: Then },
    /// Held (an Asynchronous Event Request).
    Hold,
}

impl Outcome {
    pub(crate) const fn ok(result: u64) -> Outcome {
        Outcome::Done {
            status: 0,
            result,
            loc: loc::NONE,
        }
    }

    /// A failure Linux gives no location.
    pub(crate) const fn fail(status: u16) -> Outcome {
        Outcome::fail_at(status, loc::NONE)
    }

    /// A failure at `loc`: logged, and its CQE has More.
    pub(crate) const fn fail_at(status: u16, loc: u16) -> Outcome {
        Outcome::Done {
            status,
            result: 0,
            loc,
        }
    }
}

/// The set of `opcodes` (each below 32) as a bit mask, for [`known_opcode`].
pub(crate) const fn opcode_set(opcodes: &[u8]) -> u32 {
    let mut mask = 0;
    let mut i = 0;
    while i < opcodes.len() {
        mask |= 1 << opcodes[i];
        i += 1;
    }
    mask
}

/// Linux `core.c` `nvmet_report_invalid_opcode`: an opcode outside a command set's `known`
/// ones ([`opcode_set`]) is an invalid opcode, located at the opcode.
pub(crate) fn known_opcode(sqe: &Sqe, known: u32) -> Result<(), Outcome> {
    let op = u32::from(sqe.opcode());
    if op < 32 && known & (1 << op) != 0 {
        Ok(())
    } else {
        Err(Outcome::fail_at(status::INVALID_OPCODE | DNR, loc::OPCODE))
    }
}

/// Which command set a parsed command runs in.
enum Route {
    Connect,
    Admin(usize),
    Discovery(usize),
    Io(usize),
}

pub(crate) fn submit<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    capsule: &[u8],
    staging: &mut [u8],
) -> Result<Step, ExecError> {
    let q = t.queue_mut(id)?;
    if q.dying {
        return Err(ExecError::UnknownQueue);
    }
    let ctrl = q.ctrl;
    let qid = q.qid;
    let Some(sqe) = Sqe::from_capsule(capsule) else {
        match ctrl {
            Some(c) => t.fatal(c),
            None => t.kill_queue(id),
        }
        return Err(ExecError::ShortCapsule(capsule.len()));
    };
    let (outcome, invalidate, remote) = run(t, id, ctrl, qid, &sqe, &capsule[SQE_LEN..], staging);
    finish(t, id, &sqe, invalidate, remote, outcome)
}

/// Parse, map the data pointer, execute. Returns the outcome, the rkey the response is to
/// invalidate, and the host's buffer if the data pointer named one.
fn run<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    ctrl: Option<usize>,
    qid: u16,
    sqe: &Sqe,
    in_capsule: &[u8],
    staging: &mut [u8],
) -> (Outcome, Option<u32>, Option<KeyedSgl>) {
    // nvmet_req_init: no fused commands; PSDT must be "SGL, metadata buffer".
    let flags = sqe.flags();
    if flags & FLAGS_FUSE != 0 || flags & FLAGS_PSDT != FLAGS_SGL_METABUF {
        return (
            Outcome::fail_at(status::INVALID_FIELD | DNR, loc::FLAGS),
            None,
            None,
        );
    }
    let route = match parse(t, ctrl, qid, sqe) {
        Ok(r) => r,
        Err(o) => return (o, None, None),
    };
    if let Some(c) = ctrl.and_then(|c| t.ctrls[c].as_mut()) {
        c.reset_tbkas = true;
    }
    let (data, invalidate) = match map_sgl(sqe, in_capsule, t.cfg.inline_data_size) {
        Ok(d) => d,
        Err((st, at)) => return (Outcome::fail_at(st, at), None, None),
    };
    let remote = match data {
        Data::Keyed(sgl) => Some(sgl),
        _ => None,
    };
    let cmd = Cmd { sqe: *sqe, data };
    let out = match route {
        Route::Connect => fabrics::connect(t, id, &cmd),
        Route::Admin(c) => admin::execute(t, id, c, &cmd, staging),
        Route::Discovery(c) => discovery::execute(t, id, c, &cmd, staging),
        Route::Io(c) => nvm::execute(t, c, &cmd),
    };
    (out, invalidate, remote)
}

/// The parse step: which command set, and the checks Linux makes before the data pointer.
fn parse<B: Backend>(
    t: &Target<B>,
    ctrl: Option<usize>,
    qid: u16,
    sqe: &Sqe,
) -> Result<Route, Outcome> {
    let Some(c) = ctrl else {
        fabrics::parse_connect(sqe)?;
        return Ok(Route::Connect);
    };
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return Err(Outcome::fail(status::INTERNAL | DNR));
    };
    if qid != 0 {
        nvm::parse(t, ctl, sqe)?;
        return Ok(Route::Io(c));
    }
    if sqe.opcode() == crate::sqe::OPC_FABRICS {
        fabrics::parse_admin(sqe)?;
        return Ok(Route::Admin(c));
    }
    if ctl.is_discovery() {
        discovery::parse(ctl, sqe)?;
        return Ok(Route::Discovery(c));
    }
    admin::parse(ctl, sqe)?;
    Ok(Route::Admin(c))
}

/// Linux `nvmet_rdma_map_sgl`, `nvmet_rdma_map_sgl_inline`, `nvmet_rdma_map_sgl_keyed`.
fn map_sgl<'a>(
    sqe: &Sqe,
    in_capsule: &'a [u8],
    inline_data_size: u32,
) -> Result<(Data<'a>, Option<u32>), (u16, u16)> {
    match sqe.sgl().decode() {
        Err(SglError::Subtype(_)) => Err((status::INVALID_FIELD | DNR, loc::DPTR)),
        Err(SglError::Type(_)) => Err((status::SGL_INVALID_TYPE | DNR, loc::DPTR)),
        Ok(DataPtr::InCapsule { offset, len }) => {
            // In-capsule data only for commands that write (nvme_is_write).
            if !is_write(sqe) {
                return Err((status::INVALID_FIELD | DNR, loc::OPCODE));
            }
            // Linux checks offset + len against the port's in-capsule size; the bytes a
            // shorter SEND did not carry are refused here too rather than read stale.
            let room = in_capsule.len().min(inline_data_size as usize) as u64;
            match offset.checked_add(u64::from(len)) {
                Some(end) if end <= room => {}
                _ => return Err((status::SGL_INVALID_OFFSET | DNR, loc::NONE)),
            }
            if len == 0 {
                return Ok((Data::None, None));
            }
            Ok((
                Data::InCapsule(&in_capsule[offset as usize..offset as usize + len as usize]),
                None,
            ))
        }
        Ok(DataPtr::Keyed { sgl, invalidate }) => {
            if sgl.len == 0 {
                return Ok((Data::None, None));
            }
            // Linux fails the buffer allocation / RDMA context beyond what it can map with
            // NVME_SC_INTERNAL (nvmet_rdma_map_sgl_keyed's error_out); here beyond MDTS.
            if sgl.len > MAX_TRANSFER {
                return Err((status::INTERNAL, loc::NONE));
            }
            Ok((Data::Keyed(sgl), invalidate.then_some(sgl.key)))
        }
    }
}

/// Linux `include/linux/nvme.h` `nvme_is_write`: the opcode's bit 0, the fabrics command
/// type's for fabrics commands.
fn is_write(sqe: &Sqe) -> bool {
    if sqe.opcode() == crate::sqe::OPC_FABRICS {
        sqe.fctype() & 1 != 0
    } else {
        sqe.opcode() & 1 != 0
    }
}

/// Turns an outcome into the step for the transport.
fn finish<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    sqe: &Sqe,
    invalidate: Option<u32>,
    remote: Option<KeyedSgl>,
    out: Outcome,
) -> Result<Step, ExecError> {
    let cid = sqe.cid();
    let (dir, local, then) = match out {
        Outcome::Done {
            status,
            result,
            loc,
        } => {
            let r = respond(t, id, cid, sqe.nsid(), (status, loc, result), invalidate)?;
            return Ok(Step::Respond(r));
        }
        Outcome::Hold => return Ok(Step::Hold),
        Outcome::ToHost { local, result } => (Dir::ToHost, local, Then::Done { status: 0, result }),
        Outcome::FromHost { local, then } => (Dir::FromHost, local, then),
    };
    // A transfer only follows a keyed data pointer at least as long (the commands check it).
    // A FromHost transfer may move a prefix of the host's buffer, as an RDMA READ may (a keyed
    // DSM reads only its ranges); a staging transfer never exceeds the staging buffer.
    // Anything else would be a bug here, answered as an internal error.
    let q = t.queue_mut(id)?;
    let remote = match remote {
        Some(r)
            if r.len == local.len()
                && !matches!(local, Local::Buf { len } if len as usize > STAGING_LEN) =>
        {
            r
        }
        r => match prefix(dir, local, r) {
            Some(r) => r,
            None => {
                let st = status::INTERNAL | DNR;
                return Ok(Step::Respond(q.respond(cid, st, 0, invalidate)));
            }
        },
    };
    let tag = match q.park(Inflight {
        cid,
        invalidate,
        then,
    }) {
        Ok(tag) => tag,
        Err(e) => {
            match q.ctrl {
                Some(c) => t.fatal(c),
                None => t.kill_queue(id),
            }
            return Err(e);
        }
    };
    Ok(Step::Transfer(Transfer {
        tag,
        dir,
        local,
        remote,
    }))
}

/// The part of the host's buffer a FromHost transfer shorter than it moves (its prefix), or
/// `None`: no buffer, a staging transfer longer than the staging buffer, or a mismatch.
#[cold]
fn prefix(dir: Dir, local: Local, remote: Option<KeyedSgl>) -> Option<KeyedSgl> {
    let r = remote?;
    let fits = match local {
        Local::Buf { len } => len as usize <= STAGING_LEN,
        Local::Disk { .. } => true,
    };
    (fits && dir == Dir::FromHost && local.len() <= r.len).then_some(KeyedSgl {
        len: local.len(),
        ..r
    })
}

pub(crate) fn complete_transfer<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    tag: Tag,
    ok: bool,
    staging: &[u8],
) -> Result<crate::exec::Response, ExecError> {
    let q = t.queue_mut(id)?;
    let f = q.unpark(tag)?;
    if !ok {
        match q.ctrl {
            Some(c) => t.fatal(c),
            None => t.kill_queue(id),
        }
        return Err(ExecError::TransferFailed);
    }
    let internal = (status::INTERNAL | DNR, loc::NONE, 0);
    let (nsid, done) = match f.then {
        Then::Done { status, result } => (0, (status, loc::NONE, result)),
        Then::Connect(cmd) => match fabrics::connect_with(t, id, &cmd, staging) {
            Outcome::Done {
                status,
                result,
                loc,
            } => (0, (status, loc, result)),
            _ => (0, internal),
        },
        Then::Dsm { nsid, ranges } => {
            let ctrl = t.queue_mut(id)?.ctrl;
            let nr = usize::from(ranges);
            match ctrl.map(|c| nvm::dsm_ranges(t, c, nsid, nr, staging)) {
                Some(Outcome::Done {
                    status,
                    result,
                    loc,
                }) => (nsid, (status, loc, result)),
                _ => (nsid, internal),
            }
        }
    };
    respond(t, id, f.cid, nsid, done, f.invalidate)
}

/// The response to command `cid` of namespace `nsid` with (status, error location, result):
/// a failure with a location goes into the controller's error log and its CQE has More
/// (Linux `drivers/nvme/target/core.c` `nvmet_set_error`; not on a queue without a
/// controller).
fn respond<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    cid: u16,
    nsid: u32,
    (status, at, result): (u16, u16, u64),
    invalidate: Option<u32>,
) -> Result<crate::exec::Response, ExecError> {
    let q = t.queue_mut(id)?;
    let mut r = q.respond(cid, status, result, invalidate);
    if status != 0 && at != loc::NONE {
        if let Some(c) = q.ctrl.and_then(|c| t.ctrls[c].as_mut()) {
            c.log_error(r.cqe.sqid, cid, status, at, nsid);
            r.cqe.status |= status::MORE;
        }
    }
    Ok(r)
}
