//! perftest's `-R`: both connections made by rdma_cm (linux-rdma/perftest 4.5-0.17,
//! src/perftest_communication.c), on the unikernel's librdmacm (`rdmacm`).
//!
//! - The exchange (`use_rdma_cm`, `create_comm_struct` / `establish_connection`): an RC
//!   connection to the tool's port (`-p`, 18515) in the TCP port space
//!   (`rdma_client_connect` / `rdma_server_connect`). Each `ctx_xchg_data` or
//!   `ctx_hand_shake` message is one signaled SEND of exactly its bytes, and each side keeps
//!   one receive of `sizeof(struct pingpong_dest)` (56) bytes posted, posted again after each
//!   message is read (`rdma_write_data`, `rdma_read_data`, `post_one_recv_wqe`); the server
//!   posts it before `rdma_accept` (the QP is in INIT from its creation, as librdmacm's
//!   `rdma_create_qp` leaves it), which it does not wait out (no ESTABLISHED is awaited on
//!   that side); the client at ESTABLISHED (perftest: before `rdma_connect`; see
//!   [`CmLink::open`]'s tries). Connection parameters: no RDMA READs,
//!   `retry_count` 7, `rnr_retry_count` 7.
//! - The test's QP (`work_rdma_cm`, `create_rdma_cm_connection`): after a handshake, a
//!   second RC connection to the same port (the server listens again once its first listen
//!   is gone: `rdma_cm_server_connection`), the client waiting for ESTABLISHED
//!   (`rdma_cm_route_handler`, `rdma_cm_connection_request_handler`): `out_reads` READs each
//!   way for READ and atomic tools, else none, `retry_count` and `rnr_retry_count` 7. The
//!   client tries again 100 ms later when the connect fails (`rdma_cm_client_connection`,
//!   ten times; here until [`TEST_CONNECT_WAIT`], since the Linux server, under TCG, may
//!   listen later than the handshake lets this side connect).
//! - The end (`destroy_ctx` with `work_rdma_cm`): both sides disconnect the test's
//!   connection; the exchange's ends with the tool (`rdma_destroy_id` at exit). Here both are
//!   disconnected, their DREQs answered, for at most [`CLOSE_WAIT`].
//!
//! The peer's MAC comes from ARP inside the CM (`rdmacm`'s address resolution); the launcher's
//! TCP exchange is not used at all.

use alloc::collections::VecDeque;

use apps::perftest::PINGPONG_DEST_LEN;
use mlx5::{ProtectionDomain, RecvWr};
use rdmacm::{CmConfig, CmError, CmId, ConnParam, Event, NewQp, PortSpace, QpInit, RdmaCm};

use super::*;

/// Where the exchange's message to send is built, and where the peer's lands.
const SEND_AT: u64 = 0;
const RECV_AT: u64 = 64;
/// wr_id of the exchange's receive.
const RECV_ID: u64 = 1;
/// How often the waits run the CM ([`RdmaCm::poll`]): MADs, its timers.
const CM_POLL_US: u64 = 1000;
/// How long the client retries the test's connection.
const TEST_CONNECT_WAIT: Duration = Duration::from_secs(60);
/// perftest's pause between two tries of the test's connection (`rdma_cm_client_connection`).
const TEST_CONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long the client waits between tries of the exchange's connection (Linux's tool may
/// not listen yet).
const CONNECT_PAUSE: Duration = Duration::from_millis(500);
/// How long the end waits for the disconnects.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Why the rdma_cm exchange failed.
#[derive(Debug)]
pub(crate) enum CmLinkError {
    /// A call of the CM failed.
    Cm(&'static str, CmError),
    /// The driver failed.
    Verbs(&'static str, mlx5::Error),
    /// Nothing came in time: what was waited for.
    Timeout(&'static str),
    /// An event that ends what was waited for.
    Event(&'static str, Event),
    /// A completion of the exchange's QP in error.
    Completion(WcStatus, u8),
    /// A message of another length than asked for.
    Length {
        /// Bytes asked for.
        want: usize,
        /// Bytes that came.
        got: u32,
    },
    /// The exchange's connection went down.
    Disconnected,
    /// A message longer than the exchange's buffer.
    TooLong(usize),
}

impl core::fmt::Display for CmLinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmLinkError::Cm(w, e) => write!(f, "rdma_cm {w}: {e:?}"),
            CmLinkError::Verbs(w, e) => write!(f, "{w}: {e:?}"),
            CmLinkError::Timeout(w) => write!(f, "no {w} in time"),
            CmLinkError::Event(w, e) => write!(f, "{w}: {}", brief(e)),
            CmLinkError::Completion(s, v) => {
                write!(
                    f,
                    "a completion of the exchange's QP in error: {s:?} (vendor syndrome {v:#x})"
                )
            }
            CmLinkError::Length { want, got } => {
                write!(f, "a message of {got} B where {want} B were due")
            }
            CmLinkError::Disconnected => write!(f, "the exchange's connection went down"),
            CmLinkError::TooLong(n) => write!(f, "a message of {n} B (at most 56)"),
        }
    }
}

/// An event that ended a connect, in a few words (a REJ's private data left out).
fn brief(e: &Event) -> String {
    match e {
        Event::Rejected { reason, .. } => format!("rejected, reason {reason}"),
        Event::Unreachable { .. } => "unreachable".into(),
        Event::AddrError { .. } => "address not resolved".into(),
        e => format!("{e:?}"),
    }
}

/// The test's QP as perftest asks for it.
pub(crate) struct TestQp<'a> {
    pub(crate) pd: &'a ProtectionDomain<KernelHal>,
    pub(crate) scq: &'a CompletionQueue<KernelHal>,
    pub(crate) rcq: &'a CompletionQueue<KernelHal>,
    pub(crate) caps: QpCaps,
    /// READs and atomics each way (`out_reads` for READ and atomic tools, else 0).
    pub(crate) reads: u8,
}

/// The exchange over rdma_cm, and the CM that also holds the test's connection. Fields drop
/// in order: the CM with the QPs it holds, before their CQs and the region.
pub(crate) struct CmLink {
    cm: RdmaCm<KernelHal>,
    comm: CmId,
    test: Option<CmId>,
    scq: CompletionQueue<KernelHal>,
    rcq: CompletionQueue<KernelHal>,
    mr: MemoryRegion<KernelHal>,
    node: KernelNode,
    /// Events taken from the CM that no wait asked for yet.
    events: VecDeque<Event>,
    /// The peer's address and the port (client), the port (server).
    side: Side,
    port: u16,
    wait: Duration,
    next_cm_poll: u64,
}

/// The exchange's QP: one message each way at a time.
fn comm_init() -> QpInit {
    QpInit {
        caps: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            ..QpCaps::default()
        },
        access: AccessFlags::LOCAL_WRITE,
    }
}

/// The test's QP: its sizes, and every remote access (Linux's CM gives REMOTE_WRITE, and
/// REMOTE_READ and atomics when the connection has responder resources, cm.c
/// `cm_init_qp_init_attr`; rdmacm sets what the application asks for).
fn test_init(t: &TestQp<'_>) -> QpInit {
    QpInit {
        caps: t.caps,
        access: AccessFlags::ALL,
    }
}

/// rdma_conn_param of both connections: `reads` READs each way, 7 retries of each kind.
fn conn_param(reads: u8) -> ConnParam<'static> {
    ConnParam {
        private_data: &[],
        responder_resources: reads,
        initiator_depth: reads,
        retry_count: 7,
        rnr_retry_count: 7,
    }
}

impl CmLink {
    /// `establish_connection` with `use_rdma_cm`: the exchange's connection, as server (listen
    /// on `port`, accept the first request) or client (connect to the server, again until it
    /// listens), for up to [`oob::FIRST_WAIT`].
    pub(crate) fn open(
        dev: &Hca,
        pd: &ProtectionDomain<KernelHal>,
        node: KernelNode,
        side: Side,
        port: u16,
        sgid_index: u8,
        wait: Duration,
    ) -> Result<CmLink, CmLinkError> {
        let ip = node.args().ip.addr;
        let cm = RdmaCm::new(dev, pd, &CmConfig::new(ip, sgid_index))
            .map_err(|e| CmLinkError::Cm("start", e))?;
        let cq = |w| dev.create_cq(8).map_err(|e| CmLinkError::Verbs(w, e));
        let (scq, rcq) = (cq("create_cq")?, cq("create_cq")?);
        let mr = pd
            .alloc_mr(2 * RECV_AT as usize, AccessFlags::LOCAL_WRITE)
            .map_err(|e| CmLinkError::Verbs("alloc_mr", e))?;
        let mut l = CmLink {
            cm,
            comm: CmId(0),
            test: None,
            scq,
            rcq,
            mr,
            node,
            events: VecDeque::new(),
            side,
            port,
            wait,
            next_cm_poll: 0,
        };
        l.comm = match side {
            Side::Server => l.accept_comm(pd)?,
            Side::Client { server } => l.connect_comm(pd, server)?,
        };
        log::info!("perftest: the exchange's rdma_cm connection is up (-R)");
        Ok(l)
    }

    /// The stack's clock in ns.
    fn now_ns(&mut self) -> u64 {
        self.node.stack().now_us().saturating_mul(1000)
    }

    /// Runs the stack if due and, every [`CM_POLL_US`], the CM, keeping its events.
    pub(crate) fn tick(&mut self) {
        self.node.tick();
        let now = self.node.stack().now_us();
        if now < self.next_cm_poll {
            return;
        }
        self.next_cm_poll = now + CM_POLL_US;
        let ns = now.saturating_mul(1000);
        while let Some(e) = self.cm.poll(ns, self.node.stack()) {
            self.events.push_back(e);
        }
    }

    /// Waits (ticking) until an event `want` picks came, by `deadline` (the stack's µs).
    fn wait_event(
        &mut self,
        what: &'static str,
        deadline: u64,
        want: impl Fn(&Event) -> bool,
    ) -> Result<Event, CmLinkError> {
        loop {
            if let Some(i) = self.events.iter().position(&want) {
                if let Some(e) = self.events.remove(i) {
                    return Ok(e);
                }
            }
            if self.node.stack().now_us() >= deadline {
                return Err(CmLinkError::Timeout(what));
            }
            self.tick();
            core::hint::spin_loop();
        }
    }

    /// Spins (ticking) for `d`.
    fn pause(&mut self, d: Duration) {
        let until = self.node.deadline(d);
        while self.node.stack().now_us() < until {
            self.tick();
            core::hint::spin_loop();
        }
    }

    fn post_comm_recv(&mut self, id: CmId) -> Result<(), CmLinkError> {
        let s = [self.mr.sge(RECV_AT, PINGPONG_DEST_LEN as u32)];
        let qp = self.cm.qp(id).ok_or(CmLinkError::Disconnected)?;
        qp.post_recv(&[RecvWr {
            wr_id: RECV_ID,
            sges: &s,
        }])
        .map_err(|e| CmLinkError::Verbs("post_recv", e))
    }

    /// `rdma_server_connect`: listen, take the first request, its QP with one receive
    /// posted, accept.
    fn accept_comm(&mut self, pd: &ProtectionDomain<KernelHal>) -> Result<CmId, CmLinkError> {
        self.cm
            .listen(PortSpace::Tcp, self.port, 1)
            .map_err(|e| CmLinkError::Cm("listen", e))?;
        log::info!("perftest: listening on rdma_cm port {} (-R)", self.port);
        let until = self.node.deadline(oob::FIRST_WAIT);
        let id = self.take_request(pd, until, "connection request", None)?;
        self.post_comm_recv(id)?;
        self.accept(id, 0)?;
        Ok(id)
    }

    /// A connection request, its id given a QP on `pd` (the exchange's, or `test`'s).
    fn take_request(
        &mut self,
        pd: &ProtectionDomain<KernelHal>,
        until: u64,
        what: &'static str,
        test: Option<&TestQp<'_>>,
    ) -> Result<CmId, CmLinkError> {
        let e = self.wait_event(what, until, |e| matches!(e, Event::ConnectRequest { .. }))?;
        let Event::ConnectRequest { id, .. } = e else {
            return Err(CmLinkError::Event(what, e));
        };
        let r = match test {
            None => self
                .cm
                .create_qp(id, pd, &self.scq, &self.rcq, &comm_init()),
            Some(t) => self.cm.create_qp(id, pd, t.scq, t.rcq, &test_init(t)),
        };
        r.map_err(|e| CmLinkError::Cm("create_qp", e))?;
        Ok(id)
    }

    fn accept(&mut self, id: CmId, reads: u8) -> Result<(), CmLinkError> {
        let now = self.now_ns();
        self.cm
            .accept(now, id, &conn_param(reads), self.node.stack())
            .map_err(|e| CmLinkError::Cm("accept", e))
    }

    /// `rdma_client_connect`: connect, wait for ESTABLISHED, the receive posted; a rejected
    /// or unanswered connect is tried again [`CONNECT_PAUSE`] later (Linux's tool may not
    /// listen yet), until [`oob::FIRST_WAIT`].
    fn connect_comm(
        &mut self,
        pd: &ProtectionDomain<KernelHal>,
        server: [u8; 4],
    ) -> Result<CmId, CmLinkError> {
        let until = self.node.deadline(oob::FIRST_WAIT);
        let id = self.connect_tries(server, pd, None, until, CONNECT_PAUSE)?;
        // Posted once connected, not before connect as perftest does: the QP of a refused
        // try is destroyed with the receive, whose flushed completion would land in the CQ
        // every try shares (seen: an 8-entry CQ overrun by 20 refused tries, and the server's
        // first message never seen). The server's first message answers ours, so it cannot
        // come before this.
        self.post_comm_recv(id)?;
        Ok(id)
    }

    /// Connects to `server` (the exchange's QP on `pd`, or `test`'s) and waits for
    /// ESTABLISHED; a rejected or unanswered connect is destroyed and tried again `pause`
    /// later, until `until`.
    fn connect_tries(
        &mut self,
        server: [u8; 4],
        pd: &ProtectionDomain<KernelHal>,
        test: Option<&TestQp<'_>>,
        until: u64,
        pause: Duration,
    ) -> Result<CmId, CmLinkError> {
        let what = match test {
            None => "ESTABLISHED of the exchange",
            Some(_) => "ESTABLISHED of the test's connection",
        };
        let mut tries = 0u32;
        loop {
            let now = self.now_ns();
            let (qp, reads) = match test {
                None => {
                    let (send_cq, recv_cq) = (&self.scq, &self.rcq);
                    let init = comm_init();
                    (
                        NewQp {
                            pd,
                            send_cq,
                            recv_cq,
                            init,
                        },
                        0,
                    )
                }
                Some(t) => {
                    let (send_cq, recv_cq, init) = (t.scq, t.rcq, test_init(t));
                    (
                        NewQp {
                            pd: t.pd,
                            send_cq,
                            recv_cq,
                            init,
                        },
                        t.reads,
                    )
                }
            };
            let p = conn_param(reads);
            let stack = self.node.stack();
            let id = self
                .cm
                .connect(now, server, self.port, PortSpace::Tcp, &qp, &p, stack)
                .map_err(|e| CmLinkError::Cm("connect", e))?;
            match self.connected(id, until, what)? {
                None => return Ok(id),
                Some(e) => {
                    tries += 1;
                    if tries == 1 || tries.is_multiple_of(20) {
                        log::info!("perftest: rdma_cm connect: {}; trying again", brief(&e));
                    }
                    self.destroy(id);
                    if self.node.deadline(pause) >= until {
                        return Err(CmLinkError::Event(what, e));
                    }
                    self.pause(pause);
                }
            }
        }
    }

    /// Waits for `id`'s ESTABLISHED: None when it came, the event that ended the connect
    /// otherwise.
    fn connected(
        &mut self,
        id: CmId,
        until: u64,
        what: &'static str,
    ) -> Result<Option<Event>, CmLinkError> {
        let e = self.wait_event(what, until, |e| match e {
            Event::Established { id: i, .. }
            | Event::Rejected { id: i, .. }
            | Event::Unreachable { id: i }
            | Event::AddrError { id: i }
            | Event::ConnectError { id: i, .. } => *i == id,
            _ => false,
        })?;
        Ok(match e {
            Event::Established { .. } => None,
            e => Some(e),
        })
    }

    /// Destroys `id`, whatever state it is in (its QP goes with it, or once TIMEWAIT is over).
    fn destroy(&mut self, id: CmId) {
        let now = self.now_ns();
        let _ = self.cm.destroy_id(now, id, self.node.stack());
    }

    /// `create_rdma_cm_connection`'s connection of the test's QP: the client connects (again
    /// [`TEST_CONNECT_PAUSE`] later while refused, until [`TEST_CONNECT_WAIT`]) and waits for
    /// ESTABLISHED; the server takes the request, gives it the QP and accepts.
    pub(crate) fn connect_test(&mut self, t: &TestQp<'_>) -> Result<(), CmLinkError> {
        let until = self.node.deadline(TEST_CONNECT_WAIT);
        let id = match self.side {
            Side::Server => {
                let id =
                    self.take_request(t.pd, until, "the test's connection request", Some(t))?;
                self.accept(id, t.reads)?;
                id
            }
            Side::Client { server } => {
                self.connect_tries(server, t.pd, Some(t), until, TEST_CONNECT_PAUSE)?
            }
        };
        self.test = Some(id);
        log::info!("perftest: the test's rdma_cm connection is up (-R)");
        Ok(())
    }

    /// The test's QP, once connected.
    pub(crate) fn test_qp(&mut self) -> Option<&mut QueuePair<KernelHal>> {
        let id = self.test?;
        self.cm.qp(id)
    }

    /// Waits (ticking) for one completion of `send` (else the receive CQ).
    fn completion(&mut self, send: bool) -> Result<WorkCompletion, CmLinkError> {
        let deadline = self.node.deadline(self.wait);
        let mut wc = [WorkCompletion::default(); 1];
        loop {
            let cq = if send { &mut self.scq } else { &mut self.rcq };
            if cq
                .poll(&mut wc)
                .map_err(|e| CmLinkError::Verbs("poll", e))?
                == 1
            {
                if wc[0].status != WcStatus::Success {
                    return Err(CmLinkError::Completion(wc[0].status, wc[0].vendor_err));
                }
                return Ok(wc[0]);
            }
            let comm = self.comm;
            if self
                .events
                .iter()
                .any(|e| matches!(e, Event::Disconnected { id } if *id == comm))
            {
                return Err(CmLinkError::Disconnected);
            }
            if self.node.stack().now_us() >= deadline {
                return Err(CmLinkError::Timeout(if send {
                    "send completion of the exchange"
                } else {
                    "message of the exchange"
                }));
            }
            self.tick();
            core::hint::spin_loop();
        }
    }

    /// `rdma_write_data` / `rdma_write_keys`: `b` in one signaled SEND, its completion
    /// awaited.
    pub(crate) fn send(&mut self, b: &[u8]) -> Result<(), CmLinkError> {
        if b.len() > PINGPONG_DEST_LEN {
            return Err(CmLinkError::TooLong(b.len()));
        }
        self.mr
            .write(SEND_AT, b)
            .map_err(|e| CmLinkError::Verbs("write", e))?;
        let s = [self.mr.sge(SEND_AT, b.len() as u32)];
        let wr = SendWr {
            wr_id: 2,
            op: SendOp::Send { imm: None },
            data: SendData::Sges(&s),
            flags: SendFlags::SIGNALED,
        };
        let qp = self.cm.qp(self.comm).ok_or(CmLinkError::Disconnected)?;
        qp.post_send(&[wr])
            .map_err(|e| CmLinkError::Verbs("post_send", e))?;
        self.completion(true).map(|_| ())
    }

    /// `rdma_read_data` / `rdma_read_keys`: the next message, of `n` bytes; the receive is
    /// posted again.
    pub(crate) fn recv(&mut self, n: usize) -> Result<Vec<u8>, CmLinkError> {
        let wc = self.completion(false)?;
        if wc.byte_len as usize != n {
            return Err(CmLinkError::Length {
                want: n,
                got: wc.byte_len,
            });
        }
        let mut m = alloc::vec![0u8; n];
        self.mr
            .read(RECV_AT, &mut m)
            .map_err(|e| CmLinkError::Verbs("read", e))?;
        self.post_comm_recv(self.comm)?;
        Ok(m)
    }

    /// The end: the test's connection and then the exchange's disconnected (the peer's DREQs
    /// answered meanwhile), each waited for until it is down or [`CLOSE_WAIT`] passed, then
    /// their ids destroyed. What happened, for the notes.
    pub(crate) fn close(&mut self) -> String {
        let until = self.node.deadline(CLOSE_WAIT);
        let mut said = Vec::new();
        for (id, what) in [(self.test.take(), "test"), (Some(self.comm), "exchange")] {
            let Some(id) = id else { continue };
            let now = self.now_ns();
            // Refused when the peer's DREQ came first: its Disconnected is queued already.
            let _ = self.cm.disconnect(now, id, self.node.stack());
            let down = self.wait_event(
                "DISCONNECTED",
                until,
                |e| matches!(e, Event::Disconnected { id: i } if *i == id),
            );
            said.push(format!(
                "the {what} connection {}",
                if down.is_ok() {
                    "disconnected"
                } else {
                    "not disconnected in time"
                }
            ));
            self.destroy(id);
        }
        said.join(", ")
    }
}

/// `create_rdma_cm_connection`: a handshake (of perftest's still zeroed `my_dest`), the test's
/// QP connected by rdma_cm ([`CmLink::connect_test`]), a handshake.
pub(crate) fn rdma_cm_connection(
    o: &Opts,
    r: &mut Res,
    pd: &ProtectionDomain<KernelHal>,
    caps: QpCaps,
    my_reads: u32,
) -> Result<(), Error<'static>> {
    let zero = dest_bytes(&Dest::default(), 0);
    xchg(
        &mut r.link,
        o.client,
        &zero,
        "handshake before the rdma_cm connection",
    )?;
    let reads = match o.verb {
        Verb::Read | Verb::Atomic => my_reads as u8,
        _ => 0,
    };
    if let Link::Cm(l) = &mut r.link {
        let t = TestQp {
            pd,
            scq: &r.scq,
            rcq: &r.rcq,
            caps,
            reads,
        };
        l.connect_test(&t)
            .map_err(|e| Error::Link("the test's rdma_cm connection", LinkError::Cm(e)))?;
    }
    xchg(
        &mut r.link,
        o.client,
        &zero,
        "handshake after the rdma_cm connection",
    )?;
    Ok(())
}
