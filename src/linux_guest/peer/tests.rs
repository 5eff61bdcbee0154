use super::relay::{tcp_pipe, uk_lines, UK_CONSOLE_UP};
use super::*;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A relay as for a Linux client (the unikernel serves), its serial input a byte vector.
struct Relay {
    port: u16,
    serial: Arc<Mutex<Option<Vec<u8>>>>,
    ready: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    log: mpsc::Receiver<String>,
    seen: String,
    thread: Option<std::thread::JoinHandle<()>>,
    _to_linux: mpsc::Sender<Vec<u8>>,
}

impl Relay {
    fn start(ready: bool) -> Relay {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let serial = Arc::new(Mutex::new(Some(Vec::new())));
        let ready = Arc::new(AtomicBool::new(ready));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx_tcp, rx_tcp) = mpsc::channel();
        let (tx_log, log) = mpsc::channel();
        let thread = {
            let (serial, ready, stop) = (serial.clone(), ready.clone(), stop.clone());
            std::thread::spawn(move || {
                tcp_pipe(
                    Role::Client,
                    port,
                    Some(l),
                    rx_tcp,
                    serial,
                    ready,
                    stop,
                    tx_log,
                )
            })
        };
        Relay {
            port,
            serial,
            ready,
            stop,
            log,
            seen: String::new(),
            thread: Some(thread),
            _to_linux: tx_tcp,
        }
    }

    fn serial(&self) -> String {
        String::from_utf8(self.serial.lock().unwrap().clone().unwrap()).unwrap()
    }

    /// Waits (up to a minute) until the relay logged `what`.
    fn wait_log(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.seen.contains(what) {
            assert!(
                Instant::now() < deadline,
                "the relay never logged {what:?}: {}",
                self.seen
            );
            if let Ok(l) = self.log.recv_timeout(Duration::from_millis(50)) {
                self.seen.push_str(&l);
            }
        }
    }

    /// Waits (up to a minute) until the serial input is `want`.
    fn wait_serial(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.serial() != want {
            assert!(
                Instant::now() < deadline,
                "serial input {:?}, not {want:?}",
                self.serial()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn the_relay_holds_linux_bytes_until_the_unikernel_console_is_up() {
    let mut r = Relay::start(false);
    let mut qemu = std::net::TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    qemu.write_all(b"hi").unwrap();
    r.wait_log("2 bytes from Linux");
    // Written now, the UART FIFO reset of the unikernel's console init could eat them.
    assert_eq!(
        r.serial(),
        "",
        "bytes reached the serial input before the console was up"
    );
    r.ready.store(true, Ordering::Release);
    r.wait_serial("tcp 6869\n");
}

#[test]
fn the_relay_serves_a_connection_that_follows_an_ended_one() {
    let mut r = Relay::start(true);
    let mut first = std::net::TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    first.write_all(b"a").unwrap();
    r.wait_log("1 bytes from Linux");
    drop(first);
    r.wait_log("end of stream");
    let mut second = std::net::TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    second.write_all(b"b").unwrap();
    r.wait_serial("tcp 61\ntcp-closed\ntcp 62\n");
}

#[test]
fn the_unikernel_console_up_line_is_the_kernels_boot_line() {
    let (tx, rx) = mpsc::channel();
    let (tcp, _rx_tcp) = mpsc::channel();
    let ready = Arc::new(AtomicBool::new(false));
    let src: &'static [u8] = b"qemu noise\n\x1b[2Jboot: protocol=pvh cmdline=\"x\"\npeer: tcp 00\n";
    uk_lines(src, tx, Some((tcp, ready.clone())), false)
        .join()
        .unwrap();
    assert!(ready.load(Ordering::Acquire));
    assert_eq!(rx.try_iter().count(), 3);
    // The kernel prints the line this waits for.
    let entry = include_str!("../../../kernel/src/entry.rs");
    // `println!(` then the format string, whatever whitespace rustfmt puts between them.
    let printed = entry
        .match_indices(&format!("\"{UK_CONSOLE_UP}"))
        .any(|(at, _)| entry[..at].trim_end().ends_with("println!("));
    assert!(printed, "kernel_main no longer prints {UK_CONSOLE_UP:?}");
}

#[test]
fn the_app_follows_the_tool() {
    let (app, args) = app_for("ibv_rc_pingpong -d rxe0 -g $GID -n 100 -s 1 $SERVER").unwrap();
    assert_eq!(
        (app.as_str(), args.as_str()),
        ("pingpong", "pingpong -d rxe0 -g $GID -n 100 -s 1")
    );
    let (app, args) = app_for("ib_read_bw -x $GID -F -s 64 10.0.2.100").unwrap();
    assert_eq!(
        (app.as_str(), args.as_str()),
        ("perftest", "perftest ib_read_bw -x $GID -F -s 64")
    );
    assert!(app_for("rping -s").is_err());
    assert!(app_for("  ").is_err());
}

#[test]
fn the_kernel_command_line_carries_the_init_contract() {
    let p = LinuxPeer {
        link: Link::Connect("/tmp/w.sock".into()),
        ip: "10.0.0.1/24".into(),
        mac: PEER_MAC,
        neigh: Some((UNIKERNEL_IP.into(), UNIKERNEL_MAC)),
        cmd: "ib_write_bw -x $GID".into(),
        wait_ping: None,
        delay: Some(2),
        user_net: Some(String::new()),
        pcap: None,
        timeout: Duration::from_secs(1),
    };
    let a = p.append().unwrap();
    for w in [
        "peer_ip=10.0.0.1/24",
        "peer_neigh=10.0.0.2,02:00:00:00:00:02",
        "peer_eth1=10.0.2.15/24",
        "peer_delay=2",
        "peer_cmd=\"ib_write_bw -x $GID\"",
    ] {
        assert!(a.contains(w), "{w} missing from {a}");
    }
    let bad = LinuxPeer {
        cmd: "echo \"x\"".into(),
        ..p
    };
    assert!(bad.append().is_err());
}
