//! The launcher end of the tools' out-of-band TCP exchange: a dumb pipe between the Linux
//! tool's socket and the unikernel's serial console ([`tcp_pipe`]), and the reader of that
//! console that feeds it ([`uk_lines`]).

use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::Role;

/// What goes to the unikernel's serial input: `tcp HEX` lines (200 bytes each) and `tcp-closed`,
/// held back until the unikernel's console is up (`ready`: the launcher saw its `boot: protocol=` line).
/// Its console init resets the UART's receive FIFO (uart_16550 `SerialPort::init` writes FCR
/// 0xC7); a byte that QEMU had already moved into the UART is lost there, and a `tcp` line that
/// lost its `t` is not a `tcp` line: the app would wait for it until the run timed out.
struct ToUk<W: Write> {
    w: std::sync::Arc<std::sync::Mutex<Option<W>>>,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pending: Vec<u8>,
    closed: bool,
    /// Bytes written to the unikernel so far.
    delivered: usize,
}

impl<W: Write> ToUk<W> {
    fn push(&mut self, b: &[u8]) {
        self.pending.extend_from_slice(b);
        self.flush();
    }

    fn close(&mut self) {
        self.closed = true;
        self.flush();
    }

    /// Writes what is pending once the unikernel is ready.
    fn flush(&mut self) {
        if !self.ready.load(std::sync::atomic::Ordering::Acquire)
            || (self.pending.is_empty() && !self.closed)
        {
            return;
        }
        if let Some(w) = self.w.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            for chunk in self.pending.chunks(200) {
                let hex: String = chunk.iter().map(|x| format!("{x:02x}")).collect();
                let _ = w
                    .write_all(format!("tcp {hex}\n").as_bytes())
                    .and_then(|()| w.flush());
            }
            if self.closed {
                let _ = w.write_all(b"tcp-closed\n").and_then(|()| w.flush());
            }
        }
        self.delivered += self.pending.len();
        self.pending.clear();
        self.closed = false;
    }
}

/// The unikernel's first console line (kernel/src/entry.rs `kernel_main`, after `console::init`).
pub(super) const UK_CONSOLE_UP: &str = "boot: protocol=";

/// The launcher end of the tools' TCP exchange, a dumb pipe: unikernel `peer: tcp HEX` lines
/// are written to the socket (one write each), socket bytes go to the unikernel's serial input
/// as `tcp HEX` lines, and the end of the connection as `tcp-closed` (both once `ready`).
#[allow(clippy::too_many_arguments)]
pub(super) fn tcp_pipe<W: Write>(
    role: Role,
    port: u16,
    listener: Option<std::net::TcpListener>,
    from_uk: mpsc::Receiver<Vec<u8>>,
    to_uk: std::sync::Arc<std::sync::Mutex<Option<W>>>,
    ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    log: mpsc::Sender<String>,
) {
    use std::net::TcpStream;
    use std::sync::atomic::Ordering;
    let say = |s: String| {
        let _ = log.send(s + "\n");
    };
    let mut out = ToUk {
        w: to_uk,
        ready,
        pending: Vec::new(),
        closed: false,
        delivered: 0,
    };
    let mut conn: Option<TcpStream> = None;
    // Until Linux answers, what was sent (replayed on a new connection: slirp accepts the
    // host's connection before the guest's tool listens, then closes it).
    let mut history: Vec<Vec<u8>> = Vec::new();
    let mut got_any = false;
    let mut buf = vec![0u8; 65536];
    let t0 = Instant::now();
    let connect = |history: &[Vec<u8>]| -> Option<TcpStream> {
        let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
        c.set_read_timeout(Some(Duration::from_millis(20))).ok()?;
        for m in history {
            c.write_all(m).ok()?;
        }
        Some(c)
    };
    while !stop.load(Ordering::Relaxed) {
        out.flush();
        if conn.is_none() {
            match (role, &listener) {
                (Role::Client, Some(l)) => {
                    if let Ok((c, _)) = l.accept() {
                        say(format!(
                            "launcher: tcp relay: accepted QEMU's guestfwd connection at {:.1} s",
                            t0.elapsed().as_secs_f64()
                        ));
                        let _ = c.set_nonblocking(false);
                        let _ = c.set_read_timeout(Some(Duration::from_millis(20)));
                        conn = Some(c);
                    }
                }
                (Role::Server, _) if !history.is_empty() => {
                    conn = connect(&history);
                    if conn.is_none() {
                        std::thread::sleep(Duration::from_millis(300));
                    }
                }
                _ => {}
            }
        }
        match from_uk.recv_timeout(Duration::from_millis(if conn.is_some() { 0 } else { 20 })) {
            Ok(m) => {
                say(format!(
                    "launcher: tcp relay: {} bytes from the unikernel at {:.1} s (connected: {})",
                    m.len(),
                    t0.elapsed().as_secs_f64(),
                    conn.is_some()
                ));
                if !got_any {
                    history.push(m.clone());
                }
                match conn.as_mut() {
                    Some(c) => {
                        if let Err(e) = c.write_all(&m) {
                            say(format!("launcher: tcp write: {e}"));
                        }
                    }
                    None if role == Role::Server => {
                        conn = connect(&history);
                    }
                    None => {}
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                if conn.is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        match c.read(&mut buf) {
            Ok(0) | Err(_) if !got_any && role == Role::Server => {
                // Linux's tool was not listening yet: try again.
                let closed = match c.read(&mut buf) {
                    Ok(0) => true,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    Ok(n) => {
                        got_any = true;
                        history.clear();
                        out.push(&buf[..n]);
                        false
                    }
                };
                if closed {
                    conn = None;
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            Ok(0) => {
                say(format!(
                    "launcher: tcp relay: end of stream at {:.1} s",
                    t0.elapsed().as_secs_f64()
                ));
                out.close();
                conn = None;
                // As client, QEMU's guestfwd chardev is one connection for the run: its end
                // is QEMU's. Keep listening all the same (a chardev that reconnects is served).
                history.clear();
                got_any = false;
            }
            Ok(n) => {
                let up = if out.ready.load(Ordering::Acquire) {
                    ""
                } else {
                    " (held until the unikernel's console is up)"
                };
                say(format!(
                    "launcher: tcp relay: {n} bytes from Linux at {:.1} s{up}",
                    t0.elapsed().as_secs_f64()
                ));
                got_any = true;
                history.clear();
                out.push(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                say(format!("launcher: tcp read: {e}"));
                out.close();
                conn = None;
            }
        }
    }
    let held = match out.pending.len() {
        0 => String::new(),
        n => format!(", {n} held back (the unikernel's console never came up)"),
    };
    say(format!(
        "launcher: tcp relay: {} bytes to the unikernel{held}, connected at the end: {}",
        out.delivered,
        conn.is_some()
    ));
}

/// The unikernel's console: lines `peer: tcp HEX` go to the TCP pipe, all are kept (and echoed).
/// Its `boot: protocol=` line (printed after the console's init; firmware may print before it
/// on the same line) sets `ready`.
pub(super) fn uk_lines(
    src: impl Read + Send + 'static,
    tx: mpsc::Sender<String>,
    tcp: Option<(
        mpsc::Sender<Vec<u8>>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    )>,
    echo: bool,
) -> std::thread::JoinHandle<()> {
    crate::guest::console_lines(src, move |text| {
        if let Some((_, ready)) = &tcp {
            if text.contains(UK_CONSOLE_UP) {
                ready.store(true, std::sync::atomic::Ordering::Release);
            }
        }
        if let (Some((tcp, _)), Some(h)) = (&tcp, text.trim_end().strip_prefix("peer: tcp ")) {
            let bytes: Option<Vec<u8>> = (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
                .collect();
            if let Some(b) = bytes {
                let _ = tcp.send(b);
            }
        }
        if echo {
            crate::guest::echo_stdout(&format!("unikernel| {text}"));
        }
        let _ = tx.send(text);
    })
}
