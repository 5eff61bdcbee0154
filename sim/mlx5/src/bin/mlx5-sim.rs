//! `mlx5-sim`: serves an emulated ConnectX-5 to QEMU's `-device x-pci-proxy-dev,fd=N`.
//!
//! ```text
//! mlx5-sim --fd N        serve on socket fd N (inherited: the other end of the socketpair whose
//!                        first end QEMU got as its fd=N); exits when QEMU closes it
//! mlx5-sim --listen PATH listen on a UNIX stream socket, serve one connection at a time
//! options:
//!   --trace              log every proxy message and one line per command to stderr
//!                        (also MLX5_SIM_TRACE=1; MLX5_SIM_TRACE=2 adds command hexdumps)
//!   --bar64              present BAR0 as 64-bit with a read-only zero upper dword
//!   --init-delay-ms MS   how long `initializing` stays set after reset (default 50)
//!   --inline             process doorbells inside the BAR write (default: a device thread)
//!   --mac XX:XX:XX:XX:XX:XX  the port's permanent MAC address
//!   --fault SPEC         fault switches, comma-separated (also MLX5_SIM_FAULTS=SPEC):
//!                        swallow-commands, delivery-status=N, garble-output-length,
//!                        fatal-health=SYND, page-request=N (negative: reclaim),
//!                        stuck-cq-owner=CQN, corrupt-next-cqe, duplicate-next-cqe
//!   --wire-listen PATH / --wire-connect PATH   join another mlx5-sim process
//! mlx5-sim --decode-pcap FILE [--local MAC|IP]
//!                        list a pcap's frames (RoCEv2 decoded, ICRC checked) and exit:
//!                        1 if a RoCEv2 frame does not decode or has a bad ICRC
//! ```

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::ExitCode;
use std::time::Duration;

use mlx5_sim::{Bar0Mode, ExecMode, Faults, Mlx5Function, Mlx5Options, ProxyServer};

enum Mode {
    Fd(RawFd),
    Listen(String),
}

struct Args {
    mode: Mode,
    trace: bool,
    opts: Mlx5Options,
    faults: Faults,
    port: Option<mlx5_sim::wire::Port>,
    wire_pcap: Option<String>,
    wire_fault: Option<mlx5_sim::roce::link::FaultSpec>,
}

const USAGE: &str =
    "usage: mlx5-sim (--fd N | --listen PATH) [--trace] [--bar64] [--init-delay-ms MS] \
[--inline] [--mac MAC] [--fault SPEC]... [--wire-listen ADDR | --wire-connect ADDR] \
[--wire-pcap FILE] [--wire-fault SPEC]\n       mlx5-sim --decode-pcap FILE\n\n\
ADDR is a UNIX socket PATH, unix:PATH or tcp:IP:PORT; the wire carries RoCEv2 frames with \
QEMU's -netdev stream framing.";

fn parse_mac(v: &str) -> Option<[u8; 6]> {
    let parts: Vec<u8> = v
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    parts.try_into().ok()
}

fn parse_args() -> Result<Args, String> {
    let mut mode = None;
    let mut trace = std::env::var("MLX5_SIM_TRACE").is_ok_and(|v| !v.is_empty() && v != "0");
    let mut opts = Mlx5Options {
        exec: ExecMode::Thread,
        ..Default::default()
    };
    let mut faults = Faults::default();
    if let Ok(spec) = std::env::var("MLX5_SIM_FAULTS") {
        faults
            .apply_spec(&spec)
            .map_err(|e| format!("MLX5_SIM_FAULTS: {e}"))?;
    }
    let mut port = None;
    let mut wire_pcap = None;
    let mut wire_fault = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--fd" => {
                let v = value("--fd")?;
                let fd: RawFd = v
                    .parse()
                    .map_err(|_| format!("--fd: not a descriptor: {v}"))?;
                if fd < 0 {
                    return Err(format!("--fd: not a descriptor: {v}"));
                }
                mode = Some(Mode::Fd(fd));
            }
            "--listen" => mode = Some(Mode::Listen(value("--listen")?)),
            "--trace" => trace = true,
            "--bar64" => opts.bar0 = Bar0Mode::Bits64HighZero,
            "--init-delay-ms" => {
                let v = value("--init-delay-ms")?;
                let ms: u64 = v
                    .parse()
                    .map_err(|_| format!("--init-delay-ms: not a number: {v}"))?;
                opts.init.init_delay = Duration::from_millis(ms);
            }
            "--inline" => opts.exec = ExecMode::Inline,
            "--mac" => {
                let v = value("--mac")?;
                opts.hca.mac = parse_mac(&v).ok_or_else(|| format!("--mac: not a MAC: {v}"))?;
            }
            "--fault" => {
                let v = value("--fault")?;
                faults.apply_spec(&v).map_err(|e| format!("--fault: {e}"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            "--wire-pcap" => wire_pcap = Some(value("--wire-pcap")?),
            "--wire-fault" => {
                let v = value("--wire-fault")?;
                wire_fault = Some(v.parse().map_err(|e| format!("--wire-fault {v}: {e}"))?);
            }
            flag if flag.starts_with("--wire-") => {
                let v = value(flag)?;
                match mlx5_sim::wire::port_from_args(flag, &v) {
                    Some(p) => port = Some(p?),
                    None => return Err(format!("unknown argument {a}")),
                }
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let mode = mode.ok_or("one of --fd or --listen is required")?;
    Ok(Args {
        mode,
        trace,
        opts,
        faults,
        port,
        wire_pcap,
        wire_fault,
    })
}

/// Takes ownership of inherited descriptor `fd` as a stream socket.
fn inherited_socket(fd: RawFd) -> Result<UnixStream, String> {
    // Refuse anything that is not an open descriptor before claiming it.
    let meta = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .map_err(|e| format!("--fd {fd}: not an open descriptor: {e}"))?;
    if !meta.file_type().is_socket() {
        return Err(format!("--fd {fd}: not a socket"));
    }
    // SAFETY: fd is open (checked above), was inherited by this process, and nothing else in
    // this process uses or closes it: the UnixStream becomes its only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(UnixStream::from(owned))
}

fn serve_one(server: &mut ProxyServer<Mlx5Function>, sock: &UnixStream) -> bool {
    match server.serve(sock) {
        Ok(()) => {
            eprintln!("mlx5-sim: peer closed the connection");
            true
        }
        Err(e) => {
            eprintln!("mlx5-sim: connection dropped: {e}");
            false
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().is_some_and(|a| a == "--decode-pcap") {
        return mlx5_sim::roce::dump::decode_pcap_main(&argv[1..]);
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("mlx5-sim: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            };
        }
    };
    let function = Mlx5Function::with_options(args.opts);
    {
        let mut hca = function.lock_hca();
        if args.trace {
            let t = hca.trace_mut();
            t.level = t.level.max(1);
        }
        if let Some(port) = args.port {
            hca.port = port;
        }
        if let Some(path) = &args.wire_pcap {
            // Unbuffered: the process usually ends by a signal when QEMU goes away, and every
            // frame written so far must be in the file.
            let tap = std::fs::File::create(path)
                .and_then(mlx5_sim::roce::link::PcapTap::new);
            match tap {
                Ok(t) => {
                    if !hca.port.set_pcap(t) {
                        eprintln!("mlx5-sim: --wire-pcap needs --wire-listen or --wire-connect");
                        return ExitCode::from(2);
                    }
                }
                Err(e) => {
                    eprintln!("mlx5-sim: --wire-pcap {path}: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        if let Some(spec) = args.wire_fault {
            hca.port.set_faults(spec);
        }
        let faults = args.faults;
        hca.update_faults(|f| *f = faults);
    }
    let mut server = ProxyServer::new(function);
    server.set_trace(args.trace);

    match args.mode {
        Mode::Fd(fd) => {
            let sock = match inherited_socket(fd) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("mlx5-sim: {e}");
                    return ExitCode::from(2);
                }
            };
            let ok = serve_one(&mut server, &sock);
            server.function().lock_hca().port.shutdown();
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Mode::Listen(path) => {
            // Replace a stale socket left by an earlier run, but never any other kind of file.
            if let Ok(m) = std::fs::symlink_metadata(&path) {
                if m.file_type().is_socket() {
                    let _ = std::fs::remove_file(&path);
                }
            }
            let listener = match UnixListener::bind(&path) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("mlx5-sim: cannot listen on {path}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            eprintln!("mlx5-sim: listening on {path}");
            loop {
                match listener.accept() {
                    Ok((sock, _)) => {
                        eprintln!("mlx5-sim: client connected");
                        serve_one(&mut server, &sock);
                    }
                    Err(e) => {
                        eprintln!("mlx5-sim: accept: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        }
    }
}
