//! Connections the way Linux makes them: rdma-core's rdma_cm examples (`rping`, `ucmatose`,
//! `udaddy`), perftest with `-R` and `ibv_ud_pingpong` in Linux against the unikernel's apps of
//! the same names (`rping`, `ucmatose`, `udaddy`, `perftest`, `ud-pingpong`). An rdma_cm run
//! has no TCP on the link: the CM MADs on QP 1 are the whole exchange; the project's decoder
//! and tshark's InfiniBand CM dissector both read every one of them.

use super::*;

/// Linux's address on the link (the decoder's lines name senders by IP).
const LX: &str = peer::PEER_IP;
/// The unikernel's.
const UK: &str = peer::UNIKERNEL_IP;

/// The decoder's lines of the CM message `kind` (`REQ`, `SIDR_REP`, ...) sent by `from`.
fn cm_sent(frames: &str, kind: &str, from: &str) -> usize {
    let (msg, src) = (format!("| CM {kind} "), format!(" {from} > "));
    frames
        .lines()
        .filter(|l| l.contains(&msg) && l.contains(&src))
        .count()
}

/// The decoder's lines of RoCE packets with opcode `op` (e.g. `RC_RDMA_READ_REQUEST`) sent by
/// `from` to a QP other than QP 1.
fn sent(frames: &str, op: &str, from: &str) -> usize {
    let (op, src) = (format!(" {op} qpn="), format!(" {from} > "));
    frames
        .lines()
        .filter(|l| l.contains(&op) && l.contains(&src) && !l.contains("qpn=0x000001 "))
        .count()
}

/// An rdma_cm run: no TCP frame on the link (the tools' exchange travels in the CM's private
/// data and on the connected QPs), CM MADs from both sides, each decoded by the project's
/// decoder, and tshark decodes the same CM MADs with none malformed.
pub(super) fn assert_cm_not_tcp(test: &str, frames: &str, pcap: &std::path::Path) {
    let tcp = frames
        .lines()
        .filter(|l| l.contains(" TCP proto=6 "))
        .count();
    assert_eq!(
        tcp, 0,
        "{test}: {tcp} TCP frames on the link of an rdma_cm run"
    );
    let from = |ip: &str| {
        let src = format!(" {ip} > ");
        frames
            .lines()
            .filter(|l| l.contains("| CM ") && l.contains(&src))
            .count()
    };
    let (lx, uk) = (from(LX), from(UK));
    assert!(
        lx > 0 && uk > 0,
        "{test}: CM MADs: {lx} from Linux, {uk} from the unikernel"
    );
    if let Some(t) = tshark_check(test, pcap) {
        assert_eq!(
            t.cm_attrs.len(),
            lx + uk,
            "{test}: tshark decodes {} CM MADs, the project's decoder {}",
            t.cm_attrs.len(),
            lx + uk
        );
    }
    eprintln!("{test}: rdma_cm: no TCP; CM MADs: {lx} from Linux, {uk} from the unikernel");
}

/// The value of `key=0x...` in a decoder line.
fn field(line: &str, key: &str) -> Option<u32> {
    let v = line.split(&format!(" {key}=0x")).nth(1)?;
    u32::from_str_radix(v.split_whitespace().next()?, 16).ok()
}

/// The connections `active` made to `passive`, from the CM exchanges in `frames`: every REQ
/// (by its communication ID, so a retransmitted REQ counts once) was answered by a REP, or by
/// a REJ with reason 8 from the passive side (a REQ that came before the passive side listened,
/// which the active side then tries again), and every REP by one RTU. Returns the connections
/// made and the REQs rejected.
fn connections(test: &str, frames: &str, active: &str, passive: &str) -> (usize, usize) {
    let lines = |kind: &str, from: &str| -> Vec<String> {
        let (msg, src) = (format!("| CM {kind} "), format!(" {from} > "));
        frames
            .lines()
            .filter(|l| l.contains(&msg) && l.contains(&src))
            .map(String::from)
            .collect()
    };
    let ids = |kind: &str, from: &str, key: &str| -> std::collections::BTreeSet<u32> {
        lines(kind, from)
            .iter()
            .filter_map(|l| field(l, key))
            .collect()
    };
    let reqs = ids("REQ", active, "comm");
    let repd = ids("REP", passive, "remote");
    let rejd = ids("REJ", passive, "remote");
    for l in lines("REJ", passive) {
        assert!(l.contains(" reason=8 "), "{test}: {l}");
    }
    assert!(
        lines("REJ", active).is_empty(),
        "{test}: REJ from the active side: {:?}",
        lines("REJ", active)
    );
    let unanswered: Vec<&u32> = reqs
        .iter()
        .filter(|c| !repd.contains(c) && !rejd.contains(c))
        .collect();
    assert!(
        unanswered.is_empty(),
        "{test}: REQs answered by neither REP nor REJ: {unanswered:x?}"
    );
    let reps = ids("REP", passive, "comm");
    let rtus = ids("RTU", active, "remote");
    assert_eq!(reps, rtus, "{test}: the REPs and the RTUs that answer them");
    eprintln!(
        "{test}: {} connections; {} REQs ({} rejected, {} sent again)",
        reps.len(),
        reqs.len(),
        rejd.len(),
        lines("REQ", active).len() - reqs.len()
    );
    (reps.len(), rejd.len())
}

/// The connections a DREP ended, each by its pair of communication IDs (when both sides send
/// a DREQ at once, both answer with a DREP: Linux cm.c `cm_dreq_handler` takes a DREQ in
/// DREQ_SENT too).
fn ended(frames: &str) -> usize {
    frames
        .lines()
        .filter(|l| l.contains("| CM DREP "))
        .filter_map(|l| {
            let (a, b) = (field(l, "comm")?, field(l, "remote")?);
            Some((a.min(b), a.max(b)))
        })
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// One connection's exchange, `active` the side that connects: REQ, REP, RTU (a REQ before the
/// passive side listened may draw a REJ 8 first), and a DREQ answered by a DREP (from whichever
/// side disconnects first, or both).
fn assert_connected_once(test: &str, frames: &str, active: &str, passive: &str) {
    assert_eq!(connections(test, frames, active, passive).0, 1, "{test}");
    assert_eq!(ended(frames), 1, "{test}: the connection ended with a DREP");
}

/// rping's ping buffer number `ping` of `size` bytes as rping's client fills it (rdma-core
/// librdmacm/examples/rping.c `rping_test_client`: `rdma-ping-N: `, then letters cycling 'A'
/// (65) to 'z' (122) from a start that moves on by one each ping, NUL-terminated), as `-v`
/// prints it.
fn rping_data(ping: usize, size: usize) -> String {
    let mut s = format!("rdma-ping-{ping}: ").into_bytes();
    let mut c = 65 + (ping % 58) as u8;
    while s.len() < size - 1 {
        s.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    String::from_utf8(s).expect("ASCII")
}

/// The `-v` lines `prefix` of Linux's rping: exactly rping's pattern for pings 0..count.
fn assert_rping_lines(test: &str, out: &str, prefix: &str, count: usize) {
    let lines: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix(prefix)).collect();
    let want: Vec<String> = (0..count).map(|k| rping_data(k, 64)).collect();
    assert_eq!(lines, want, "{test}: Linux's rping lines:\n{out}");
}

/// rping against the unikernel's `rping` in the other role, ten 64-byte pings with `-v -V`:
/// Linux prints each ping (the server what it READ, the client what came back), which must be
/// rping's own pattern; the client compares what came back with what it sent (Linux's server
/// ignores `-V`, the unikernel's checks each ping against the pattern); one connection, ten RDMA
/// READs of the client's start buffer and ten RDMA WRITEs to its sink, both from the server
/// (rping.c `rping_test_server`).
fn rping(test: &str, role: peer::Role) {
    let (cmd, printed, uk_check, server, client) = match role {
        peer::Role::Server => (
            "rping -s -a 10.0.0.1 -v -V -C 10",
            "server ping data: ",
            "rping: client: 10 pings, every byte checked: ok",
            LX,
            UK,
        ),
        peer::Role::Client => (
            "rping -c -a $SERVER -v -V -C 10",
            "ping data: ",
            "rping: server: 10 pings, every byte of 10 checked: ok",
            UK,
            LX,
        ),
    };
    let Some(r) = against_unikernel(test, cmd, role) else {
        return;
    };
    let out = r.linux.output();
    assert!(!out.contains("data mismatch"), "{test}: {out}");
    assert_rping_lines(test, &out, printed, 10);
    assert!(
        r.unikernel_output.contains(uk_check),
        "{test}: the unikernel's check"
    );
    let (_, frames) = decode(&run_pcap(test));
    assert_connected_once(test, &frames, client, server);
    let reads = sent(&frames, "RC_RDMA_READ_REQUEST", server);
    let writes = sent(&frames, "RC_RDMA_WRITE_ONLY", server);
    assert_eq!((reads, writes), (10, 10), "{test}: READs and WRITEs");
}

#[test]
fn rping_linux_server() {
    rping("rping_linux_server", peer::Role::Server);
}

#[test]
fn rping_linux_client() {
    rping("rping_linux_client", peer::Role::Client);
}

/// A Linux client's REQ for a port nothing listens on draws a REJ with reason 8 (invalid
/// service ID: Linux drivers/infiniband/core/cm.c `cm_req_handler` answers so when no listener
/// matches); the unikernel stays up: it answers ping, and its rping server (port 7174) then
/// serves a good rping.
#[test]
fn rdma_cm_rejects_an_unknown_port_linux_client() {
    const T: &str = "rdma_cm_rejects_an_unknown_port_linux_client";
    let cmd = "rping -c -a $SERVER -p 7175 -C 1; echo REJECTED_RC=$?; \
               ping -c 3 $SERVER && rping -c -a $SERVER -v -V -C 3";
    let app = ("rping", "rping -s -a 10.0.0.2 -v -V -C 3");
    let Some(r) = against_app(T, cmd, peer::Role::Client, Some(app), 400) else {
        return;
    };
    let out = r.linux.output();
    assert!(
        out.contains("cma event RDMA_CM_EVENT_REJECTED, error 8"),
        "{T}: {out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("REJECTED_RC=") && l != "REJECTED_RC=0"),
        "{T}: {out}"
    );
    assert!(
        out.contains("3 packets transmitted, 3 packets received"),
        "{T}: {out}"
    );
    assert_rping_lines(T, &out, "ping data: ", 3);
    assert!(
        r.unikernel_output
            .contains("rping: server: 3 pings, every byte of 3 checked: ok"),
        "{T}: the unikernel's check"
    );
    let pcap = run_pcap(T);
    let (_, frames) = decode(&pcap);
    let rej: Vec<&str> = frames.lines().filter(|l| l.contains("| CM REJ ")).collect();
    assert_eq!(rej.len(), 1, "{T}: {rej:?}");
    assert!(
        rej[0].contains(&format!(" {UK} > {LX} "))
            && rej[0].contains("reason=8 (invalid service ID) of REQ"),
        "{T}: {}",
        rej[0]
    );
    // The REQ for 7175 rejected, the one for 7174 connected.
    assert_eq!(connections(T, &frames, LX, UK), (1, 1), "{T}");
    assert!(
        frames
            .lines()
            .any(|l| l.contains("| CM REQ ") && l.contains("(Tcp port 7175)")),
        "{T}: no REQ for port 7175"
    );
    if let Some(t) = tshark_check(T, &pcap) {
        assert_eq!(t.rej_reasons, [8], "{T}: tshark's REJ reasons");
    }
}

/// cmatose.c's server in the unikernel against Linux's `ucmatose` client: two connections,
/// ten 100-byte SENDs each way on each (the server sends first, cmatose.c `run_server`), then
/// the server disconnects both.
#[test]
fn ucmatose_linux_client() {
    const T: &str = "ucmatose_linux_client";
    let cmd = "ucmatose -s $SERVER -c 2 -C 10";
    let Some(r) = against_unikernel(T, cmd, peer::Role::Client) else {
        return;
    };
    let out = r.linux.output();
    assert!(
        out.contains("data transfers complete") && out.contains("return status 0"),
        "{T}: {out}"
    );
    let (_, frames) = decode(&run_pcap(T));
    assert_eq!(connections(T, &frames, LX, UK), (2, 0), "{T}");
    let got = [cm_sent(&frames, "DREQ", UK), cm_sent(&frames, "DREP", LX)];
    assert_eq!(got, [2, 2], "{T}: [DREQ from the server, DREP]");
    assert_eq!(
        sent(&frames, "RC_SEND_ONLY", UK),
        20,
        "{T}: the server's SENDs"
    );
    assert_eq!(
        sent(&frames, "RC_SEND_ONLY", LX),
        20,
        "{T}: the client's SENDs"
    );
}

/// udaddy.c's server in the unikernel against Linux's `udaddy` client: the client resolves the
/// service with SIDR (SIDR_REQ, SIDR_REP with the server's UD QPN and rdma_cm's Q_Key), sends
/// ten 100-byte UD SENDs with its QPN as immediate, the server answers each (udaddy.c
/// `run_server`: an address handle from the first completion).
#[test]
fn udaddy_linux_client() {
    const T: &str = "udaddy_linux_client";
    let cmd = "udaddy -s $SERVER -C 10";
    let Some(r) = against_unikernel(T, cmd, peer::Role::Client) else {
        return;
    };
    let out = r.linux.output();
    assert!(
        out.contains("data transfers complete") && out.contains("return status 0"),
        "{T}: {out}"
    );
    let (_, frames) = decode(&run_pcap(T));
    assert_eq!(cm_sent(&frames, "SIDR_REQ", LX), 1, "{T}: SIDR_REQ");
    let rep: Vec<&str> = frames
        .lines()
        .filter(|l| l.contains("| CM SIDR_REP ") && l.contains(&format!(" {UK} > ")))
        .collect();
    assert_eq!(rep.len(), 1, "{T}: {rep:?}");
    // rdma_cm's Q_Key of RDMA_PS_UDP (Linux include/rdma/rdma_cm_ib.h RDMA_UDP_QKEY).
    assert!(
        rep[0].contains("status=0") && rep[0].contains("qkey=0x01234567"),
        "{T}: {}",
        rep[0]
    );
    let ud = |from| {
        sent(&frames, "UD_SEND_ONLY", from) + sent(&frames, "UD_SEND_ONLY_WITH_IMMEDIATE", from)
    };
    assert_eq!(
        (ud(LX), ud(UK)),
        (10, 10),
        "{T}: UD SENDs (Linux, unikernel)"
    );
}

fn ud_pingpong(test: &str, role: peer::Role) {
    let server = if role == peer::Role::Client {
        " $SERVER"
    } else {
        ""
    };
    // -s within the path MTU (1024 for rxe on a 1500-byte link): ud_pingpong.c refuses more.
    let cmd = format!("ibv_ud_pingpong -d rxe0 -g $GID -n 100 -s 512{server}");
    if let Some(r) = against_unikernel(test, &cmd, role) {
        let out = r.linux.output();
        assert!(out.contains("100 iters in"), "{test}: {out}");
        assert!(
            r.unikernel_output
                .contains("ud-pingpong: every byte of 100 messages checked, each from QPN"),
            "{test}: the unikernel's check"
        );
        let (_, frames) = decode(&run_pcap(test));
        let ud = |from| sent(&frames, "UD_SEND_ONLY", from);
        assert!(
            ud(LX) >= 100 && ud(UK) >= 100,
            "{test}: UD SENDs: {} from Linux, {} from the unikernel",
            ud(LX),
            ud(UK)
        );
    }
}

/// libibverbs/examples/ud_pingpong.c: Linux serves, the unikernel's `ud-pingpong` connects;
/// the endpoints travel over TCP as rc_pingpong's, the messages are UD SENDs.
#[test]
fn ud_pingpong_linux_server() {
    ud_pingpong("ud_pingpong_linux_server", peer::Role::Server);
}

#[test]
fn ud_pingpong_linux_client() {
    ud_pingpong("ud_pingpong_linux_client", peer::Role::Client);
}

/// perftest `-R` (rdma_cm instead of the TCP exchange, perftest
/// src/perftest_communication.c `rdma_server_connect` / `rdma_client_connect`): the
/// unikernel's perftest and Linux's both print their tables; two connections (perftest's
/// message channel and the test QP).
fn perftest_cm(test: &str, cmd: &str, role: peer::Role, table: &str, uk_want: &str) {
    // The unikernel's check of the data, and both its connections ended by rdma_cm.
    let wants = [
        uk_want,
        "perftest: rdma_cm: the test connection disconnected, the exchange connection disconnected",
    ];
    let Some(_) = perftest_tool(test, cmd, role, table, &wants) else {
        return;
    };
    let (_, frames) = decode(&run_pcap(test));
    let (active, passive) = match role {
        peer::Role::Client => (LX, UK),
        peer::Role::Server => (UK, LX),
    };
    // perftest's message channel, then the test's QP (perftest_communication.c
    // `rdma_client_connect`; the shared perftest_cm capture has the same two).
    assert_eq!(connections(test, &frames, active, passive).0, 2, "{test}");
    assert_eq!(
        ended(&frames),
        2,
        "{test}: both connections end with a DREP"
    );
}

#[test]
fn ib_write_bw_rdma_cm_linux_server() {
    perftest_cm(
        "ib_write_bw_rdma_cm_linux_server",
        "ib_write_bw -d rxe0 -R -F -s 65536 -n 100",
        peer::Role::Server,
        BW_TABLE,
        "perftest: 100 WRITEs of 65536 B from the known pattern: ok",
    );
}

#[test]
fn ib_write_bw_rdma_cm_linux_client() {
    perftest_cm(
        "ib_write_bw_rdma_cm_linux_client",
        "ib_write_bw -d rxe0 -R -F -s 65536 -n 100",
        peer::Role::Client,
        BW_TABLE,
        "the peer's WRITEs landed where perftest aims them",
    );
}

#[test]
fn ib_send_lat_rdma_cm_linux_server() {
    perftest_cm(
        "ib_send_lat_rdma_cm_linux_server",
        "ib_send_lat -d rxe0 -R -F -s 64 -n 20",
        peer::Role::Server,
        LAT_TABLE,
        "20 messages of 64 B received, each equal to the first, 20 sent: ok",
    );
}

#[test]
fn ib_send_lat_rdma_cm_linux_client() {
    perftest_cm(
        "ib_send_lat_rdma_cm_linux_client",
        "ib_send_lat -d rxe0 -R -F -s 64 -n 20",
        peer::Role::Client,
        LAT_TABLE,
        "20 messages of 64 B received, each equal to the first, 20 sent: ok",
    );
}

/// The pattern of [`rping_data`] is rping.c's: the first ping starts its letters at 'A', the
/// next at 'B', and they wrap from 'z' to 'A'.
#[test]
fn rping_pattern() {
    assert_eq!(
        rping_data(0, 64),
        "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
    );
    assert!(rping_data(1, 64).starts_with("rdma-ping-1: BCD"));
    assert!(rping_data(57, 64).starts_with("rdma-ping-57: zABC"));
    assert!(rping_data(58, 64).starts_with("rdma-ping-58: ABC"));
    assert_eq!(rping_data(9, 64).len(), 63);
}

/// Two Linux peers run rping over the link (the baseline of the unikernel runs, and a check of
/// this file's helpers against Linux on both ends): the client's `-v` lines are rping's
/// pattern, one connection's CM exchange (REQ, REP, RTU, DREQ, DREP), ten READs and ten
/// WRITEs from the server, no TCP, and tshark decodes the same CM MADs.
#[test]
fn two_linux_peers_pass_rping() {
    const T: &str = "two_linux_peers_pass_rping";
    let img = match linux_guest::prepare_peer_image() {
        Ok(i) => i,
        Err(s) => {
            eprintln!("SKIPPED: {T}: {s}");
            return;
        }
    };
    let work = linux_guest::cache_dir()
        .join("runs")
        .join("linux_pair_rping");
    let pcap = work.join("link.pcap");
    // The client starts a few seconds after the server answers ping, so that rping -s listens
    // (a REQ before rdma_listen draws a REJ, as in the shared perftest_cm_rej capture).
    let (a, b) = match peer::run_linux_pair(
        &img,
        &work,
        "rping -s -a 10.0.0.1 -v -C 10",
        "sleep 3; rping -c -a 10.0.0.1 -v -V -C 10",
        Some(pcap.clone()),
        false,
    ) {
        Ok(r) => r,
        Err(s) => {
            eprintln!("SKIPPED: {T}: {s}");
            return;
        }
    };
    if a.rc != Some(0) || b.rc != Some(0) {
        eprintln!(
            "==== A (server) ====\n{}\n==== B (client) ====\n{}",
            a.console, b.console
        );
        panic!("{T}: rc A={:?} B={:?}", a.rc, b.rc);
    }
    assert_rping_lines(T, &a.output(), "server ping data: ", 10);
    assert_rping_lines(T, &b.output(), "ping data: ", 10);
    let frames = check_pcap(T, &pcap);
    // B has the unikernel's address in the pair.
    assert_connected_once(T, &frames, UK, LX);
    assert_eq!(sent(&frames, "RC_RDMA_READ_REQUEST", LX), 10, "{T}: READs");
    assert_eq!(sent(&frames, "RC_RDMA_WRITE_ONLY", LX), 10, "{T}: WRITEs");
    assert_cm_not_tcp(T, &frames, &pcap);
}
