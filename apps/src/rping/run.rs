//! rping over rdmacm: rping.c's `rping_run_server` / `rping_run_client` around the machines of
//! [`super`], on a [`CmNode`](crate::cm::CmNode) (the `rping` app in the unikernel, two emulated HCAs in the host
//! tests).

use alloc::format;
use alloc::string::String;
use core::time::Duration;

use mlx5::{
    AccessFlags, CompletionQueue, Hal, MemoryRegion, QpCaps, RecvWr, Remote, SendData, SendFlags,
    SendOp, SendWr, WcOpcode, WcStatus,
};
use net::{Clock, Nic};

use rdmacm::{CmId, ConnParam, Event, PortSpace, QpInit};

use super::{Info, Opts, Step};
use crate::cm::{self, say, CmNode, FIRST_WAIT, WAIT};

/// Where the receive and send buffers sit in the small MR (`recv_buf`, `send_buf`).
const RECV_AT: u64 = 0;
const SEND_AT: u64 = super::INFO_BYTES as u64;
/// wr_ids: the one receive, the SENDs, the READ and WRITE.
const WR_RECV: u64 = 1;
const WR_SEND: u64 = 2;
const WR_RDMA: u64 = 3;

/// What one connection holds: rping.c `struct rping_cb`'s buffers and CQ.
struct Conn<H: Hal> {
    id: CmId,
    cq: CompletionQueue<H>,
    /// `recv_buf` and `send_buf`.
    msgs: MemoryRegion<H>,
    /// `rdma_buf`: the server's sink of the READ and source of the WRITE; the client's sink.
    rdma: MemoryRegion<H>,
    /// `start_buf`: the client's source of the READ.
    start: Option<MemoryRegion<H>>,
}

pub fn run<H: Hal, N: Nic, C: Clock>(n: &mut CmNode<'_, H, N, C>, o: &Opts) -> Result<(), String> {
    if o.server {
        server(n, o)
    } else {
        client(n, o)
    }
}

/// A side's CQ, its message and RDMA buffers, and the client's start buffer.
type Buffers<H> = (
    CompletionQueue<H>,
    [MemoryRegion<H>; 2],
    Option<MemoryRegion<H>>,
);

impl<H: Hal> Conn<H> {
    /// The connection `id` with `b`.
    fn new(id: CmId, b: Buffers<H>) -> Self {
        let (cq, [msgs, rdma], start) = b;
        Conn {
            id,
            cq,
            msgs,
            rdma,
            start,
        }
    }
}

/// The CQ, QP capabilities and buffers of one side (rping.c `rping_setup_qp`,
/// `rping_create_qp`, `rping_setup_buffers`); the server's sink takes any client's size.
fn buffers<H: Hal, N: Nic, C: Clock>(
    n: &CmNode<'_, H, N, C>,
    o: &Opts,
) -> Result<Buffers<H>, String> {
    let cq = n
        .dev
        .create_cq(super::SQ_DEPTH * 2)
        .map_err(|e| format!("ibv_create_cq: {e:?}"))?;
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mr = |len: u32, access| {
        n.pd.alloc_mr(len as usize, access)
            .map_err(|e| format!("ibv_reg_mr: {e:?}"))
    };
    let msgs = mr(2 * super::INFO_BYTES as u32, AccessFlags::LOCAL_WRITE)?;
    let sink = if o.server { super::BUFSIZE } else { o.size };
    let rdma = mr(sink, remote)?;
    let start = if o.server {
        None
    } else {
        Some(mr(o.size, remote)?)
    };
    Ok((cq, [msgs, rdma], start))
}

/// rping.c `rping_create_qp`: `max_send_wr = RPING_SQ_DEPTH`, `max_recv_wr = 2`, one SGE
/// each; the peer may READ and WRITE (rdma_cm's RC QPs allow both: Linux cma.c
/// `cma_init_conn_qp` via `rdma_init_qp_attr`).
fn qp_init() -> QpInit {
    QpInit {
        caps: QpCaps {
            max_send_wr: super::SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        access: AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    }
}

/// Posts the one receive (rping.c `rq_wr`, 16 bytes into `recv_buf`).
fn post_recv<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    id: CmId,
    msgs: &MemoryRegion<H>,
) -> Result<(), String> {
    let s = [msgs.sge(RECV_AT, super::INFO_BYTES as u32)];
    n.cm.qp(id)
        .ok_or("the connection has no QP")?
        .post_recv(&[RecvWr {
            wr_id: WR_RECV,
            sges: &s,
        }])
        .map_err(|e| format!("ibv_post_recv: {e:?}"))
}

/// Takes a step: a SEND of an info, or the server's READ / WRITE through its sink.
fn take<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    c: &Conn<H>,
    step: Step,
) -> Result<(), String> {
    let (op, sge, wr_id) = match step {
        Step::Send(info) => {
            c.msgs
                .write(SEND_AT, &info.to_bytes())
                .map_err(|e| format!("send_buf: {e:?}"))?;
            let sge = c.msgs.sge(SEND_AT, super::INFO_BYTES as u32);
            (SendOp::Send { imm: None }, sge, WR_SEND)
        }
        Step::Read { from, len } => (
            SendOp::Read {
                remote: remote(from),
            },
            c.rdma.sge(0, len),
            WR_RDMA,
        ),
        Step::Write { to, len } => (
            SendOp::Write {
                remote: remote(to),
                imm: None,
            },
            c.rdma.sge(0, len),
            WR_RDMA,
        ),
        Step::Returned { .. } => return Ok(()),
    };
    let s = [sge];
    let wr = SendWr {
        wr_id,
        op,
        data: SendData::Sges(&s),
        flags: SendFlags::SIGNALED,
    };
    n.cm.qp(c.id)
        .ok_or("the connection has no QP")?
        .post_send(&[wr])
        .map_err(|e| format!("ibv_post_send: {e:?}"))
}

fn remote(i: Info) -> Remote {
    Remote {
        addr: i.buf,
        rkey: i.rkey,
    }
}

/// What a completion of the connection's CQ brought.
enum Done {
    /// A message (its bytes; the receive is posted again).
    Recv(alloc::vec::Vec<u8>),
    /// The READ or WRITE finished.
    Rdma(WcOpcode),
    /// A SEND finished.
    Sent,
}

/// Waits for the next completion that matters, or the disconnect (None), keeping the
/// connection manager polled.
fn next<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    c: &mut Conn<H>,
    what: &str,
) -> Result<Option<Done>, String> {
    let deadline = n.node.deadline(WAIT);
    loop {
        if let Some(e) = n.try_event() {
            match e {
                Event::Disconnected { id } if id == c.id => return Ok(None),
                Event::Established { .. } | Event::TimewaitExit { .. } => {}
                // rping's server takes one connection; others wait in its backlog until it
                // ends. Here they are refused at once.
                Event::ConnectRequest { id, .. } => {
                    let _ = n.reject(id);
                }
                e => {
                    return Err(format!(
                        "cma event {} while waiting for {what}",
                        cm::event_str(&e)
                    ))
                }
            }
        }
        let mut wc = [mlx5::WorkCompletion::default(); 1];
        if c.cq
            .poll(&mut wc)
            .map_err(|e| format!("ibv_poll_cq: {e:?}"))?
            == 1
        {
            let wc = wc[0];
            if wc.status != WcStatus::Success {
                return Err(format!(
                    "cq completion failed status {:?} (wr {}, vendor syndrome {:#x}) while waiting for {what}",
                    wc.status, wc.wr_id, wc.vendor_err
                ));
            }
            return Ok(Some(match wc.opcode {
                WcOpcode::Recv => {
                    let mut b = alloc::vec![0u8; (wc.byte_len as usize).min(super::INFO_BYTES)];
                    c.msgs
                        .read(RECV_AT, &mut b)
                        .map_err(|e| format!("recv_buf: {e:?}"))?;
                    b.resize(wc.byte_len as usize, 0);
                    post_recv(n, c.id, &c.msgs)?;
                    Done::Recv(b)
                }
                WcOpcode::Send => Done::Sent,
                op @ (WcOpcode::RdmaRead | WcOpcode::RdmaWrite) => Done::Rdma(op),
                op => return Err(format!("unknown completion {op:?}")),
            }));
        }
        if n.node.stack().now_us() >= deadline {
            return Err(format!("nothing came in {WAIT:?} while waiting for {what}"));
        }
    }
}

/// rping.c `rping_run_server`: listen, take one connection request, set up, accept, serve
/// until the client disconnects.
fn server<H: Hal, N: Nic, C: Clock>(n: &mut CmNode<'_, H, N, C>, o: &Opts) -> Result<(), String> {
    if let Some(a) = o.addr.filter(|&a| a != n.ip && a != [0; 4]) {
        return Err(format!("-a {}: not this node's address (ip=)", ip_str(a)));
    }
    // rping.c `rping_bind_server`: rdma_listen(cm_id, 3).
    n.cm.listen(PortSpace::Tcp, o.port, 3)
        .map_err(|e| format!("rdma_listen: {e:?}"))?;
    say!(n, "rping: server listening on {}:{}", ip_str(n.ip), o.port);
    let (id, ird, ord) = loop {
        match n.next_event(FIRST_WAIT) {
            Some(Event::ConnectRequest {
                id,
                remote_ip,
                initiator_depth,
                responder_resources,
                ..
            }) => {
                say!(n, "rping: connect request from {}", ip_str(remote_ip));
                break (id, initiator_depth, responder_resources);
            }
            Some(e) => say!(
                n,
                "rping: {} before any connect request, ignored",
                cm::event_str(&e)
            ),
            None => return Err(format!("no connect request in {FIRST_WAIT:?}")),
        }
    };
    let mut c = Conn::new(id, buffers(n, o)?);
    n.cm.create_qp(id, &n.pd, &c.cq, &c.cq, &qp_init())
        .map_err(|e| format!("rdma_create_qp: {e:?}"))?;
    post_recv(n, c.id, &c.msgs)?;
    n.accept(id, &cm::accept_defaults(ird, ord))
        .map_err(|e| format!("rdma_accept: {e:?}"))?;
    let r = serve(n, o, &mut c);
    let _ = n.disconnect(id);
    let _ = n.destroy_id(id);
    r
}

/// rping.c `rping_test_server`, with each ping's data checked under `-V`.
fn serve<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    c: &mut Conn<H>,
) -> Result<(), String> {
    let mut s = super::Server::new(super::BUFSIZE);
    let mut checked = 0u32;
    loop {
        let done = match next(n, c, "the client")? {
            None => break,
            Some(d) => d,
        };
        let step = match done {
            Done::Sent => continue,
            Done::Recv(m) => s.on_recv(&m),
            Done::Rdma(WcOpcode::RdmaRead) => {
                let len = s.read_len() as usize;
                let mut data = alloc::vec![0u8; len];
                c.rdma
                    .read(0, &mut data)
                    .map_err(|e| format!("rdma_buf: {e:?}"))?;
                if o.verbose {
                    say!(
                        n,
                        "server ping data: {}",
                        String::from_utf8_lossy(super::c_str(&data))
                    );
                }
                if o.validate {
                    if data != super::ping_data(s.pings, len) {
                        return Err(format!("ping {}: the data read is not rping's", s.pings));
                    }
                    checked += 1;
                }
                s.on_read_done(&data)
            }
            Done::Rdma(_) => s.on_write_done(),
        }
        .map_err(|e| format!("{e}"))?;
        take(n, c, step)?;
    }
    say!(n, "server DISCONNECT EVENT...");
    if o.count != 0 && s.pings != o.count {
        return Err(format!("{} pings, not -C {}", s.pings, o.count));
    }
    say!(
        n,
        "rping: server: {} pings{}",
        s.pings,
        if o.validate {
            format!(", every byte of {checked} checked: ok")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// rping.c `rping_run_client`: connect to the server, ping `-C` times, disconnect.
fn client<H: Hal, N: Nic, C: Clock>(n: &mut CmNode<'_, H, N, C>, o: &Opts) -> Result<(), String> {
    let server = o
        .addr
        .or(n.node.args().peer)
        .ok_or("as client, need -a ADDR (or peer=)")?;
    // rping.c `rping_init_conn_param`: rdmacm's default (one READ each way, 7 retries each).
    let p = ConnParam::default();
    let b = buffers(n, o)?;
    let id = connect(n, server, o.port, &b.0, &b.1[0], &p)?;
    let mut c = Conn::new(id, b);
    say!(n, "rping: connected to {}:{}", ip_str(server), o.port);
    let r = ping(n, o, &mut c);
    // rping.c `rping_disconnect`, then the DREP (or its timeout) before the id goes.
    let _ = n.disconnect(c.id);
    let until = n.node.deadline(Duration::from_secs(5));
    while n.node.stack().now_us() < until {
        if let Some(Event::Disconnected { .. }) = n.try_event() {
            break;
        }
    }
    let _ = n.destroy_id(c.id);
    r
}

/// `rdma_resolve_addr` + `rdma_resolve_route` + `rdma_create_qp` + `rdma_connect` with the
/// one receive posted (rping.c `rping_run_client`), until ESTABLISHED. Tried again after a
/// REJ, no answer or no ARP reply while [`FIRST_WAIT`] lasts: a Linux server boots under TCG
/// after the unikernel (rping itself gives up at once).
fn connect<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    server: [u8; 4],
    port: u16,
    cq: &CompletionQueue<H>,
    msgs: &MemoryRegion<H>,
    p: &ConnParam<'_>,
) -> Result<CmId, String> {
    let until = n.node.deadline(FIRST_WAIT);
    loop {
        let id = n
            .connect(server, port, PortSpace::Tcp, (cq, cq), qp_init(), p)
            .map_err(|e| format!("rdma_connect: {e:?}"))?;
        post_recv(n, id, msgs)?;
        let why = loop {
            match n.next_event(FIRST_WAIT) {
                Some(Event::Established { id: e, .. }) if e == id => return Ok(id),
                Some(
                    e @ (Event::Rejected { .. }
                    | Event::Unreachable { .. }
                    | Event::AddrError { .. }
                    | Event::ConnectError { .. }),
                ) => break e,
                Some(e) => say!(n, "rping: {} while connecting, ignored", cm::event_str(&e)),
                None => return Err(format!("not connected in {FIRST_WAIT:?}")),
            }
        };
        let _ = n.destroy_id(id);
        if n.node.now_us() >= until {
            return Err(why_str(&why));
        }
        // The server is not up yet: again in a second, the stack polled meanwhile.
        say!(n, "rping: {}, connecting again in 1 s", why_str(&why));
        let pause = n.node.deadline(Duration::from_secs(1));
        while n.node.now_us() < pause {
            n.node.tick();
            core::hint::spin_loop();
        }
    }
}

/// rping.c's line for a connection that did not come (`rping_cma_event_handler`).
fn why_str(e: &Event) -> String {
    match e {
        Event::Rejected { reason, .. } => {
            format!("cma event RDMA_CM_EVENT_REJECTED, error {reason}")
        }
        e => format!("cma event {}", cm::event_str(e)),
    }
}

/// rping.c `rping_test_client`.
fn ping<H: Hal, N: Nic, C: Clock>(
    n: &mut CmNode<'_, H, N, C>,
    o: &Opts,
    c: &mut Conn<H>,
) -> Result<(), String> {
    let start = c.start.take().ok_or("no start buffer")?;
    let info = |m: &MemoryRegion<H>| Info {
        buf: m.addr(),
        rkey: m.rkey(),
        size: o.size,
    };
    let mut cl = super::Client::new(info(&start), info(&c.rdma), o.count);
    let size = o.size as usize;
    let mut back = alloc::vec![0u8; size];
    let mut pings = 0u32;
    while let Some((k, step)) = cl.begin() {
        let sent = super::ping_data(k, size);
        start
            .write(0, &sent)
            .map_err(|e| format!("start_buf: {e:?}"))?;
        take(n, c, step)?;
        loop {
            let m = match next(n, c, "the server")? {
                None => return Err(format!("the server disconnected after {pings} pings")),
                Some(Done::Recv(m)) => m,
                Some(Done::Sent) => continue,
                Some(Done::Rdma(op)) => return Err(format!("an {op:?} completion on the client")),
            };
            match cl.on_recv(&m).map_err(|e| format!("{e}"))? {
                Step::Returned { ping } => {
                    c.rdma
                        .read(0, &mut back)
                        .map_err(|e| format!("rdma_buf: {e:?}"))?;
                    if o.validate && back != sent {
                        return Err(format!("ping {ping}: data mismatch!"));
                    }
                    if o.verbose {
                        say!(
                            n,
                            "ping data: {}",
                            String::from_utf8_lossy(super::c_str(&back))
                        );
                    }
                    pings += 1;
                    break;
                }
                step => take(n, c, step)?,
            }
        }
    }
    say!(
        n,
        "rping: client: {pings} pings{}",
        if o.validate {
            ", every byte checked: ok"
        } else {
            ""
        }
    );
    Ok(())
}

fn ip_str(a: [u8; 4]) -> core::net::Ipv4Addr {
    core::net::Ipv4Addr::from(a)
}

#[cfg(test)]
mod tests {
    use std::string::String;
    use std::vec::Vec;

    use crate::sim::SimHal;
    use crate::testnet::on_hca;

    type Side = (Result<(), String>, Vec<String>);

    /// Both sides' runs succeeded (else their lines are shown).
    fn both_ok(srv: &Side, cli: &Side) {
        assert_eq!(
            (&srv.0, &cli.0),
            (&Ok(()), &Ok(())),
            "server: {:?}\nclient: {:?}",
            srv.1,
            cli.1
        );
    }

    fn opts(words: &[&str], client: bool) -> super::Opts {
        super::super::parse(words, Some(client)).unwrap()
    }

    /// rping's server on one emulated HCA, its client on the other: the client connects with
    /// rdma_cm, ten pings go READ and WRITE through the server and come back equal (both sides
    /// check every byte with -V), the client disconnects, the server sees it and ends.
    #[test]
    fn rping_client_and_server_over_two_emulated_hcas() {
        let (sa, sb) = SimHal::pair();
        let (srv, cli) = std::thread::scope(|s| {
            let srv = s.spawn(move || {
                on_hca(sa, "ip=10.0.0.1/24", |n| {
                    super::run(n, &opts(&["-s", "-V", "-v", "-C", "10"], false))
                })
            });
            let cli = s.spawn(move || {
                on_hca(sb, "ip=10.0.0.2/24", |n| {
                    super::run(
                        n,
                        &opts(
                            &["-c", "-a", "10.0.0.1", "-V", "-v", "-C", "10", "-S", "100"],
                            true,
                        ),
                    )
                })
            });
            (srv.join().unwrap(), cli.join().unwrap())
        });
        both_ok(&srv, &cli);
        let has = |l: &Vec<String>, s: &str| l.iter().any(|x| x.contains(s));
        assert!(has(
            &srv.1,
            "server: 10 pings, every byte of 10 checked: ok"
        ));
        assert!(has(&cli.1, "client: 10 pings, every byte checked: ok"));
        assert!(has(&srv.1, "server ping data: rdma-ping-9: JKLM"));
        assert!(has(&cli.1, "ping data: rdma-ping-0: ABCD"));
    }

    /// The client starts before the server listens (a Linux server boots after the
    /// unikernel): its REQ is rejected (no one listens on the port: REJ reason 8), it connects
    /// again a second later, and once the server listens the pings go as usual.
    #[test]
    fn an_rping_client_connects_again_until_the_server_listens() {
        let (sa, sb) = SimHal::pair();
        let (srv, cli) = std::thread::scope(|s| {
            let srv = s.spawn(move || {
                on_hca(sa, "ip=10.0.0.1/24", |n| {
                    // Up (ARP answered, REQs refused) but not listening for 2.5 s.
                    let end = n.node.deadline(std::time::Duration::from_millis(2500));
                    while n.node.now_us() < end {
                        assert_eq!(n.turn(), None);
                    }
                    super::run(n, &opts(&["-s", "-V", "-C", "3"], false))
                })
            });
            let cli = s.spawn(move || {
                on_hca(sb, "ip=10.0.0.2/24 peer=10.0.0.1", |n| {
                    super::run(n, &opts(&["-c", "-V", "-C", "3"], true))
                })
            });
            (srv.join().unwrap(), cli.join().unwrap())
        });
        both_ok(&srv, &cli);
        let again = "rping: cma event RDMA_CM_EVENT_REJECTED, error 8, connecting again in 1 s";
        assert!(cli.1.iter().any(|l| l == again), "{:?}", cli.1);
        assert!(cli
            .1
            .iter()
            .any(|l| l == "rping: client: 3 pings, every byte checked: ok"));
    }
}
