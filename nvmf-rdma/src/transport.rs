//! [`NvmfRdma`]: the target core on the verbs. rdma_cm's events open and close connections
//! (one per NVMe queue), the completions of the one CQ drive the core: a receive is a command
//! capsule for [`Target::submit`], an RDMA READ's completion ends a host-to-target transfer,
//! and every response goes out as a SEND (with invalidate when the command's SGL asked).

use alloc::collections::VecDeque;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::qp::Remote;
use mlx5::{
    CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpCaps, QueuePair, SendData,
    SendFlags, SendOp, SendWr, WcStatus, WorkCompletion,
};
use nvmeof::exec::STAGING_LEN;
use nvmeof::rdma_cm_data::RejStatus;
use nvmeof::{Dir, Local, QueueId, Response, Step, Target, TargetConfig, Transfer};
use rdmacm::{CmId, ConnParam, Event, Neighbours, PortSpace, QpInit, RdmaCm};

use crate::conn::{buffers, Conn, Kind, WrId};
use crate::disk::MrDisk;
use crate::{Error, Limits, Note, Why};

/// Work completions taken from the CQ at a time.
const WC_BATCH: usize = 32;

/// The NVMe-oF/RDMA target: the core, its disk, the connections.
pub struct NvmfRdma<H: Hal> {
    target: Target<MrDisk<H>>,
    pd: ProtectionDomain<H>,
    cq: CompletionQueue<H>,
    conns: Vec<Option<Conn<H>>>,
    gens: Vec<u16>,
    notes: VecDeque<Note>,
    wcs: Vec<WorkCompletion>,
    /// Bytes of a receive slot: the SQE and the in-capsule data.
    slot_len: u32,
    staging: Vec<u8>,
    limits: Limits,
    max_init_rd: u8,
}

/// The response's 16 bytes as a SEND (with invalidate of the command's rkey when asked:
/// Linux `drivers/nvme/target/rdma.c` `nvmet_rdma_queue_response`), signaled.
fn resp_wr<'a, H: Hal>(r: &Response, bytes: &'a [u8; 16], wr_id: u64) -> SendWr<'a, H> {
    SendWr {
        wr_id,
        op: match r.invalidate {
            Some(rkey) => SendOp::SendWithInv { rkey },
            None => SendOp::Send { imm: None },
        },
        data: SendData::Inline(bytes),
        flags: SendFlags::SIGNALED,
    }
}

impl<H: Hal> NvmfRdma<H> {
    /// The target of `cfg` on `ctx`, its disk (namespace disk 0) `disk_bytes` of DMA memory in
    /// one region that only the local side may access (the host never gets a key to it).
    pub fn new(
        ctx: &Context<H>,
        cfg: TargetConfig,
        disk_bytes: usize,
        limits: Limits,
    ) -> Result<Self, Error> {
        let dev = ctx.query_device();
        let need = Limits::cq_needed(limits.max_conns);
        if limits.cq_entries < need || need > dev.max_cqe {
            let have = limits.cq_entries.min(dev.max_cqe);
            return Err(Error::CqTooSmall { need, have });
        }
        let pd = ctx.alloc_pd()?;
        let disk = MrDisk::alloc(&pd, disk_bytes)?;
        let slot = 64 + cfg.inline_data_size as usize;
        let target = Target::new(cfg, vec![disk]).map_err(Error::Config)?;
        let cq = ctx.create_cq(limits.cq_entries)?;
        Ok(NvmfRdma {
            target,
            pd,
            cq,
            conns: Vec::new(),
            gens: Vec::new(),
            notes: VecDeque::new(),
            wcs: vec![WorkCompletion::default(); WC_BATCH],
            slot_len: slot as u32,
            staging: vec![0; STAGING_LEN],
            limits,
            max_init_rd: u8::try_from(dev.max_qp_init_rd_atom).unwrap_or(u8::MAX),
        })
    }

    /// Listens on the configured port of rdma_cm's TCP port space (Linux's nvmet-rdma:
    /// `rdma_create_id(.., RDMA_PS_TCP, ..)`, `rdma_bind_addr`, `rdma_listen`), with a
    /// backlog of `max_conns`, at most rdma_cm's [`rdmacm::BACKLOG_MAX`].
    pub fn listen(&mut self, cm: &mut RdmaCm<H>) -> Result<(), Error> {
        let backlog = self.limits.max_conns.clamp(1, rdmacm::BACKLOG_MAX);
        cm.listen(PortSpace::Tcp, self.limits.port, backlog)?;
        Ok(())
    }

    /// The core (its disks, controllers, queues).
    pub fn target(&self) -> &Target<MrDisk<H>> {
        &self.target
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// Memory regions the transport holds: the disk's, and two per connection (receive
    /// slots, bounce slots: `conn.rs` `buffers`).
    pub fn regions(&self) -> usize {
        1 + 2 * self.connections()
    }

    /// What happened since the last call (a line each for the appliance's log).
    pub fn take_note(&mut self) -> Option<Note> {
        self.notes.pop_front()
    }

    /// Runs the target once: rdma_cm's events, the CQ's completions, the core's timers
    /// (keep-alive) and what they ask for. Never waits; returns how much it did (0: idle).
    pub fn poll(&mut self, cm: &mut RdmaCm<H>, nb: &mut dyn Neighbours, now_ns: u64) -> usize {
        let mut work = 0;
        while let Some(ev) = cm.poll(now_ns, nb) {
            work += 1;
            self.on_event(cm, nb, now_ns, ev);
        }
        let n = match self.cq.poll(&mut self.wcs) {
            Ok(n) => n,
            Err(e) => {
                self.notes.push_back(Note::DeviceError(e));
                0
            }
        };
        for k in 0..n {
            let wc = self.wcs[k];
            self.on_wc(cm, nb, now_ns, &wc);
        }
        self.target.tick(now_ns / 1_000_000);
        self.drain(cm, nb, now_ns);
        work + n
    }

    fn find(&self, id: CmId) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.id == id))
    }

    fn by_queue(&self, q: QueueId) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.queue == q))
    }

    fn on_event(&mut self, cm: &mut RdmaCm<H>, nb: &mut dyn Neighbours, now: u64, ev: Event) {
        match ev {
            Event::ConnectRequest {
                id,
                private_data,
                remote_ip,
                initiator_depth,
                ..
            } => self.on_request(cm, nb, now, id, &private_data, remote_ip, initiator_depth),
            Event::Established { id, .. } => {
                if let Some(c) = self.find(id).and_then(|i| self.conns[i].as_mut()) {
                    c.established = true;
                }
            }
            Event::Disconnected { id } => self.end(cm, nb, now, id, Why::Host),
            Event::Rejected { id, .. }
            | Event::Unreachable { id }
            | Event::ConnectError { id }
            | Event::AddrError { id }
            | Event::TimewaitExit { id } => self.end(cm, nb, now, id, Why::Cm),
            Event::UdRequest { .. } | Event::UdResolved { .. } => {}
        }
    }

    /// The connection of `id` is over (or the id never became one).
    fn end(&mut self, cm: &mut RdmaCm<H>, nb: &mut dyn Neighbours, now: u64, id: CmId, why: Why) {
        match self.find(id) {
            Some(i) => self.drop_conn(cm, nb, now, i, why),
            None => {
                let _ = cm.destroy_id(now, id, nb);
            }
        }
    }

    /// Refuses a connection request with the NVMe/RDMA reject status (REJ Consumer
    /// Defined with `struct nvme_rdma_cm_rej`: Linux `nvmet_rdma_cm_reject`).
    fn refuse(
        &mut self,
        cm: &mut RdmaCm<H>,
        nb: &mut dyn Neighbours,
        now: u64,
        id: CmId,
        ip: [u8; 4],
        status: RejStatus,
    ) {
        let _ = cm.reject(now, id, &status.to_bytes(), nb);
        let _ = cm.destroy_id(now, id, nb);
        self.notes.push_back(Note::Rejected { ip, status });
    }

    #[allow(clippy::too_many_arguments)]
    fn on_request(
        &mut self,
        cm: &mut RdmaCm<H>,
        nb: &mut dyn Neighbours,
        now: u64,
        id: CmId,
        private: &[u8],
        ip: [u8; 4],
        initiator_depth: u8,
    ) {
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(s) => s,
            None if self.conns.len() < self.limits.max_conns => {
                self.conns.push(None);
                self.gens.push(0);
                self.conns.len() - 1
            }
            None => return self.refuse(cm, nb, now, id, ip, RejStatus::NoRsc),
        };
        let acc = match self.target.accept(private) {
            Ok(a) => a,
            Err(st) => return self.refuse(cm, nb, now, id, ip, st),
        };
        // The CQ holds `max_conns` queues of at most QUEUE_SIZE entries (`Limits::cq_needed`):
        // a deeper one is refused as the core refuses it (NVMe/RDMA `INVALID_HSQSIZE`).
        if acc.recv_depth > u32::from(nvmeof::ctrl::QUEUE_SIZE) {
            self.target.close(acc.queue);
            return self.refuse(cm, nb, now, id, ip, RejStatus::InvalidHsqsize);
        }
        let slot_len = self.slot_len;
        let r = buffers(&self.pd, acc.recv_depth, slot_len).map(|b| {
            self.gens[slot] = self.gens[slot].wrapping_add(1);
            let gen = self.gens[slot];
            Conn::new(id, acc.queue, gen, ip, b, acc.recv_depth, slot_len)
        });
        let conn = r.map_err(Error::from).and_then(|c| {
            self.open_qp(cm, slot, &c)?;
            let rep = acc.rep.to_bytes();
            let p = ConnParam {
                private_data: &rep,
                // Linux `nvmet_rdma_cm_accept`: no responder resources; as many RDMA READs
                // as the host takes (the event's initiator depth: the REQ's Responder
                // Resources, cm.c `cm_format_req_event`) and the device issues.
                responder_resources: 0,
                initiator_depth: initiator_depth.min(self.max_init_rd),
                retry_count: 7,
                rnr_retry_count: 7,
            };
            cm.accept(now, id, &p, nb)?;
            Ok(c)
        });
        match conn {
            Ok(c) => self.conns[slot] = Some(c),
            Err(_) => {
                // Linux `nvmet_rdma_alloc_queue`: a queue the device cannot make is refused
                // with NVME_RDMA_CM_NO_RSC.
                self.target.close(acc.queue);
                self.refuse(cm, nb, now, id, ip, RejStatus::NoRsc);
            }
        }
    }

    /// The connection's QP (send queue: a WRITE or READ and a response per command) with
    /// its receives posted for the whole queue depth, so the host never meets RNR.
    fn open_qp(&self, cm: &mut RdmaCm<H>, slot: usize, c: &Conn<H>) -> Result<(), Error> {
        let caps = QpCaps {
            max_send_wr: 2 * c.depth + 1,
            max_recv_wr: c.depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        };
        let init = QpInit {
            caps,
            access: Access(0),
        };
        cm.create_qp(c.id, &self.pd, &self.cq, &self.cq, &init)?;
        let qp = cm.qp(c.id).ok_or(Error::Cm(rdmacm::CmError::NoQp))?;
        for s in 0..c.depth as usize {
            c.post_recv(qp, slot, s)?;
        }
        Ok(())
    }

    /// Connection `i` is over: its queue leaves the core, its id is destroyed (its QP goes
    /// once the device gave it back: rdmacm keeps it through TIMEWAIT), its buffers with it.
    fn drop_conn(
        &mut self,
        cm: &mut RdmaCm<H>,
        nb: &mut dyn Neighbours,
        now: u64,
        i: usize,
        why: Why,
    ) {
        let Some(c) = self.conns[i].take() else {
            return;
        };
        let (qid, cntlid) = self
            .target
            .queue_info(c.queue)
            .map_or((0, None), |q| (q.qid, q.cntlid));
        self.target.close(c.queue);
        let _ = cm.destroy_id(now, c.id, nb);
        self.notes.push_back(Note::Disconnected {
            ip: c.ip,
            qid,
            cntlid,
            why,
        });
    }

    // inline(never): one call per completion, the toggle point of the instruction bench
    // (benches/io.rs).
    #[inline(never)]
    fn on_wc(
        &mut self,
        cm: &mut RdmaCm<H>,
        nb: &mut dyn Neighbours,
        now: u64,
        wc: &WorkCompletion,
    ) {
        let Some(w) = WrId::decode(wc.wr_id) else {
            return;
        };
        let i = usize::from(w.conn);
        if !matches!(self.conns.get(i), Some(Some(c)) if c.gen == w.gen) {
            return;
        }
        if wc.status != WcStatus::Success {
            if wc.status != WcStatus::WrFlushErr {
                self.notes.push_back(Note::Transport {
                    ip: self.conns[i].as_ref().map_or([0; 4], |c| c.ip),
                    status: wc.status,
                });
            }
            return self.drop_conn(cm, nb, now, i, Why::Transport);
        }
        let r = match w.kind {
            Kind::Recv => self.on_capsule(cm, i, usize::from(w.index), wc.byte_len),
            Kind::Read => self.on_read_done(cm, i, usize::from(w.index)),
            Kind::Resp => Ok(()),
        };
        if let Err(e) = r {
            let ip = self.conns[i].as_ref().map_or([0; 4], |c| c.ip);
            match e {
                Error::Exec(error) => self.notes.push_back(Note::Fatal { ip, error }),
                Error::Overrun { tag } => self.notes.push_back(Note::Overrun { ip, tag }),
                _ => {}
            }
            self.drop_conn(cm, nb, now, i, Why::Transport);
        }
    }

    /// A command capsule in receive slot `slot` of connection `i`.
    fn on_capsule(
        &mut self,
        cm: &mut RdmaCm<H>,
        i: usize,
        slot: usize,
        len: u32,
    ) -> Result<(), Error> {
        let c = self.conns[i].as_mut().ok_or(Error::Gone)?;
        if !c.established {
            // The first capsule may come before the RTU (rdma_notify, as nvmet-rdma's
            // `nvmet_rdma_recv_done` sees IB_EVENT_COMM_EST through the QP's event handler).
            let _ = cm.notify_established(c.id);
            c.established = true;
        }
        let n = len.min(c.slot_len) as usize;
        // The core reads the capsule where it landed; its receive is reposted once the core
        // is done with it and before anything answers it, as Linux `nvmet_rdma_queue_response`
        // reposts `rsp->cmd` right before it posts the response.
        // SAFETY: the receive of `slot` completed and is reposted only below, after the
        // slice's last use; nothing else writes receive slots (their region has no remote
        // access, and the transport never writes it).
        let capsule = unsafe { c.recv.bytes(slot as u64 * u64::from(c.slot_len), n)? };
        let connect = is_connect(capsule);
        let step = self.target.submit(c.queue, capsule, &mut self.staging);
        let refused = match (connect, &step) {
            (true, Ok(Step::Respond(r))) if r.cqe.status != 0 => {
                Some((r.cqe.status, connect_nqns(in_capsule_data(capsule))))
            }
            _ => None,
        };
        let qp = cm.qp(c.id).ok_or(Error::Gone)?;
        c.post_recv(qp, i, slot)?;
        match step? {
            Step::Transfer(t) if connect => c.connect_read = Some(t.tag.index()),
            _ => {}
        }
        self.on_step(cm, i, step?)?;
        if let Some((status, nqns)) = refused {
            self.refused(i, status, nqns);
        }
        self.announce(i);
        Ok(())
    }

    /// The Connect of connection `i` succeeded: say so once.
    fn announce(&mut self, i: usize) {
        let Some(c) = self.conns[i].as_mut() else {
            return;
        };
        if c.announced {
            return;
        }
        let Some(info) = self.target.queue_info(c.queue) else {
            return;
        };
        let Some(cntlid) = info.cntlid else {
            return;
        };
        c.announced = true;
        self.notes.push_back(Note::Connected {
            ip: c.ip,
            qid: info.qid,
            cntlid,
            subsystem: info.subsystem.unwrap_or_default().to_string(),
            host: info.hostnqn.unwrap_or_default().to_string(),
        });
    }

    /// What the core said to do for a command of connection `i`.
    fn on_step(&mut self, cm: &mut RdmaCm<H>, i: usize, step: Step) -> Result<(), Error> {
        let c = self.conns[i].as_mut().ok_or(Error::Gone)?;
        let qp = cm.qp(c.id).ok_or(Error::Gone)?;
        match step {
            Step::Hold => Ok(()),
            Step::Respond(r) => post_resp(qp, c, i, &r),
            Step::Transfer(t) => {
                let tag = t.tag.index();
                let off = c.bounce_at(tag).ok_or(Error::Overrun { tag })?;
                let local = match t.local {
                    Local::Disk {
                        disk: 0,
                        offset,
                        len,
                    } => (None, offset, len),
                    // A bounce slot and the staging buffer are STAGING_LEN bytes each.
                    Local::Buf { len } if len as usize > STAGING_LEN => {
                        return Err(Error::Overrun { tag })
                    }
                    Local::Buf { len } => (Some(()), off, len),
                    Local::Disk { .. } => return Err(Error::Gone),
                };
                let remote = Remote {
                    addr: t.remote.addr,
                    rkey: t.remote.key,
                };
                if t.dir == Dir::FromHost {
                    c.reads[tag] = Some(t);
                    let disk = self.target.disk(0).ok_or(Error::Gone)?.mr();
                    let mr = if local.0.is_some() { &c.bounce } else { disk };
                    let sge = [mr.sge(local.1, local.2)];
                    return Ok(qp.post_send(&[SendWr {
                        wr_id: c.wr(i, Kind::Read, tag),
                        op: SendOp::Read { remote },
                        data: SendData::Sges(&sge),
                        flags: SendFlags::SIGNALED,
                    }])?);
                }
                if local.0.is_some() {
                    let data = self.staging.get(..local.2 as usize);
                    c.bounce.write(off, data.ok_or(Error::Overrun { tag })?)?;
                }
                // RC keeps the order: the response may follow the WRITE at once.
                let r = self
                    .target
                    .complete_transfer(c.queue, t.tag, true, &self.staging)?;
                let disk = self.target.disk(0).ok_or(Error::Gone)?.mr();
                let mr: &MemoryRegion<H> = if local.0.is_some() { &c.bounce } else { disk };
                let sge = [mr.sge(local.1, local.2)];
                let bytes = r.cqe.to_bytes();
                // The WRITE, unsignaled, carries its response's id: a completion comes only
                // when it fails, and then names the connection, so its status is noted.
                let id = c.wr(i, Kind::Resp, tag);
                Ok(qp.post_send(&[
                    SendWr {
                        wr_id: id,
                        op: SendOp::Write { remote, imm: None },
                        data: SendData::Sges(&sge),
                        flags: SendFlags::NONE,
                    },
                    resp_wr(&r, &bytes, id),
                ])?)
            }
        }
    }

    /// The RDMA READ of command `tag` of connection `i` completed: its bytes are in the disk
    /// (or the bounce slot, copied to the staging buffer); the command runs and answers.
    fn on_read_done(&mut self, cm: &mut RdmaCm<H>, i: usize, tag: usize) -> Result<(), Error> {
        let c = self.conns[i].as_mut().ok_or(Error::Gone)?;
        let t: Transfer = c
            .reads
            .get_mut(tag)
            .and_then(Option::take)
            .ok_or(Error::Gone)?;
        if let Local::Buf { len } = t.local {
            let off = c.bounce_at(tag).ok_or(Error::Overrun { tag })?;
            let buf = self.staging.get_mut(..len as usize);
            c.bounce.read(off, buf.ok_or(Error::Overrun { tag })?)?;
        }
        let r = self
            .target
            .complete_transfer(c.queue, t.tag, true, &self.staging)?;
        let qp = cm.qp(c.id).ok_or(Error::Gone)?;
        post_resp(qp, c, i, &r)?;
        if c.connect_read == Some(tag) {
            c.connect_read = None;
            if r.cqe.status != 0 {
                let nqns = connect_nqns(Some(&self.staging));
                self.refused(i, r.cqe.status, nqns);
            }
        }
        self.announce(i);
        Ok(())
    }

    /// The Connect of connection `i` was refused with `status`: say so.
    fn refused(&mut self, i: usize, status: u16, (subsystem, host): (String, String)) {
        let Some(c) = self.conns[i].as_ref() else {
            return;
        };
        self.notes.push_back(Note::ConnectRefused {
            ip: c.ip,
            status,
            subsystem,
            host,
        });
    }

    /// Held commands the core completed, and the queues whose controller died.
    fn drain(&mut self, cm: &mut RdmaCm<H>, nb: &mut dyn Neighbours, now: u64) {
        while let Some((q, r)) = self.target.take_completion() {
            let Some(i) = self.by_queue(q) else { continue };
            let ok = match (self.conns[i].as_ref(), ()) {
                (Some(c), ()) => match cm.qp(c.id) {
                    Some(qp) => post_resp(qp, c, i, &r).is_ok(),
                    None => false,
                },
                (None, ()) => true,
            };
            if !ok {
                self.drop_conn(cm, nb, now, i, Why::Transport);
            }
        }
        while let Some(q) = self.target.take_teardown() {
            match self.by_queue(q) {
                Some(i) => self.drop_conn(cm, nb, now, i, Why::Controller),
                None => self.target.close(q),
            }
        }
    }
}

/// Whether `capsule` is a Fabrics Connect (opcode 0x7f, fctype 0x01: `include/linux/nvme.h`
/// `nvme_fabrics_command`, `nvme_fabrics_type_connect`).
fn is_connect(capsule: &[u8]) -> bool {
    capsule.first() == Some(&0x7f) && capsule.get(4) == Some(&0x01)
}

/// The in-capsule data of `capsule`, if its SGL is an in-capsule data block (descriptor
/// type 0x01, offset subtype: `include/linux/nvme.h` `NVME_SGL_FMT_DATA_DESC`,
/// `NVME_SGL_FMT_OFFSET`), from its offset on.
fn in_capsule_data(capsule: &[u8]) -> Option<&[u8]> {
    let sgl = capsule.get(24..40)?;
    if sgl[15] != 0x01 {
        return None;
    }
    let off = u64::from_le_bytes(sgl[..8].try_into().ok()?);
    capsule.get(64usize.checked_add(usize::try_from(off).ok()?)?..)
}

/// The subsystem and host NQNs of Connect data `data` (`include/linux/nvme.h`
/// `nvmf_connect_data`: `subsysnqn` at 256, `hostnqn` at 512, 256 bytes each, NUL-padded);
/// empty where the data is absent or not text.
fn connect_nqns(data: Option<&[u8]>) -> (String, String) {
    let field = |at: usize| {
        let b = data.and_then(|d| d.get(at..at + 256)).unwrap_or(&[]);
        let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
        core::str::from_utf8(&b[..end])
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    (field(256), field(512))
}

/// Posts response `r` on connection `c` (index `i`).
fn post_resp<H: Hal>(
    qp: &mut QueuePair<H>,
    c: &Conn<H>,
    i: usize,
    r: &Response,
) -> Result<(), Error> {
    let bytes = r.cqe.to_bytes();
    qp.post_send(&[resp_wr(r, &bytes, c.wr(i, Kind::Resp, 0))])?;
    Ok(())
}

/// A note's host address, for the appliance's lines.
pub fn fmt_ip(ip: [u8; 4]) -> String {
    alloc::format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}
