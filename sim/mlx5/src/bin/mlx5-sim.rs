//! `mlx5-sim`: serves an emulated ConnectX-5 to QEMU's `-device x-pci-proxy-dev,fd=N`, or
//! decodes a pcap of its wire. `mlx5-sim --help` lists the options (clap, derive API); the
//! table of them in docs/model.md is checked against `--help` by this binary's tests.

use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use mlx5_sim::link::{FaultSpec, StreamAddr};
use mlx5_sim::{Bar0Mode, ExecMode, Faults, HcaConfig, Mlx5Function, Mlx5Options, ProxyServer};

const AFTER_HELP: &str = "\
ADDR is a UNIX socket PATH, unix:PATH or tcp:IP:PORT; the wire carries RoCEv2 frames with
QEMU's -netdev stream framing (a 4-byte big-endian length, then the Ethernet frame).

Environment: MLX5_SIM_TRACE=1 is --trace (=2 adds command hexdumps); MLX5_SIM_FAULTS=SPEC is a
--fault applied before those of the command line; MLX5_SIM_STATS=SECS prints the device's
figures (proxy messages, the device thread's wakes, the port's non-zero counters) to stderr
every SECS seconds while they change.

Examples:
  mlx5-sim --listen /tmp/hca.sock --trace
      serve QEMU guests one at a time on a UNIX socket, logging every command
  MLX5_SIM_FAULTS=swallow-commands mlx5-sim --listen /tmp/hca.sock
      a device whose commands never complete
  mlx5-sim --fd 5 --wire-listen unix:/tmp/wire.sock --mac 02:00:00:00:00:0a --wire-pcap /tmp/w.pcap
      as the launcher starts it: QEMU's socket on fd 5, the port's frames on a wire, captured
  mlx5-sim --decode-pcap /tmp/w.pcap --local 02:00:00:00:00:0a
      every frame of that capture, RoCEv2 decoded and ICRC checked";

/// A MAC address `XX:XX:XX:XX:XX:XX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mac([u8; 6]);

impl FromStr for Mac {
    type Err = String;
    fn from_str(v: &str) -> Result<Mac, String> {
        let parts: Vec<u8> = v
            .split(':')
            .map(|p| u8::from_str_radix(p, 16))
            .collect::<Result<_, _>>()
            .map_err(|_| "not a MAC address XX:XX:XX:XX:XX:XX".to_string())?;
        parts
            .try_into()
            .map(Mac)
            .map_err(|_| "not a MAC address XX:XX:XX:XX:XX:XX (six bytes)".to_string())
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// An HCA fault spec, checked by the model's parser and kept as written (applied in order).
fn fault_spec(v: &str) -> Result<String, mlx5_sim::control::faults::FaultSpecError> {
    Faults::default().apply_spec(v).map(|()| v.to_string())
}

/// A wire address, checked by the model's parser; the port is made once parsing is done.
fn stream_addr(v: &str) -> Result<String, String> {
    StreamAddr::parse(v)
        .map(|_| v.to_string())
        .map_err(|_| "expected PATH, unix:PATH or tcp:IP:PORT".into())
}

/// A file or socket to be made: its directory must exist.
fn new_file(v: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(v);
    if v.is_empty() || v.ends_with('/') {
        return Err("expected a file name".into());
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    Ok(p)
}

/// `--local`: a MAC or an IP address.
fn local_addr(v: &str) -> Result<String, String> {
    mlx5_sim::link::dump::Local::parse(v)
        .map(|_| v.to_string())
        .ok_or_else(|| "not a MAC or IP address".into())
}

/// The command line. Field order is the order of `--help`.
#[derive(Parser, Debug)]
#[command(
    name = "mlx5-sim",
    about = "Serves an emulated ConnectX-5 HCA to QEMU's -device x-pci-proxy-dev,fd=N, or decodes a pcap of its wire.",
    after_help = AFTER_HELP,
    // As before clap: an option given twice takes the last value.
    args_override_self = true,
    group(ArgGroup::new("mode").args(["fd", "listen", "decode_pcap"]).required(true)),
    group(ArgGroup::new("wire").args(["wire_listen", "wire_connect"])),
)]
struct Cli {
    /// Serve on inherited socket descriptor N (the other end of the socket pair
    /// whose first end QEMU got as its fd=N); exits when QEMU closes it
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(i32).range(0..),
        allow_negative_numbers = true,
        verbatim_doc_comment
    )]
    fd: Option<RawFd>,

    /// Listen on a UNIX stream socket and serve one connection at a time
    /// (a stale socket file is replaced), e.g. /tmp/hca.sock
    #[arg(long, value_name = "PATH", value_parser = new_file, verbatim_doc_comment)]
    listen: Option<PathBuf>,

    /// List a pcap's frames (RoCEv2 decoded, ICRC checked) and exit: 1 if a
    /// RoCEv2 frame does not decode or has a bad ICRC
    #[arg(long, value_name = "FILE", verbatim_doc_comment)]
    decode_pcap: Option<String>,

    /// With --decode-pcap: this side's MAC or IP address, which marks each
    /// frame's direction [default: none]
    #[arg(long, value_name = "MAC|IP", conflicts_with_all = ["fd", "listen"], value_parser = local_addr, verbatim_doc_comment)]
    local: Option<String>,

    /// Log every proxy message and one line per command to stderr
    /// (also MLX5_SIM_TRACE=1; MLX5_SIM_TRACE=2 adds command hexdumps)
    #[arg(long, verbatim_doc_comment)]
    trace: bool,

    /// Present BAR0 as 64-bit with a read-only zero upper dword
    #[arg(long)]
    bar64: bool,

    /// How long the initializing bit stays set after reset, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = Mlx5Options::default().init.init_delay.as_millis() as u64)]
    init_delay_ms: u64,

    /// Process doorbells inside the BAR write [default: on a device thread]
    #[arg(long)]
    inline: bool,

    /// The port's permanent MAC address
    #[arg(long, value_name = "MAC", default_value_t = Mac(HcaConfig::default().mac))]
    mac: Mac,

    /// Fault switches, comma-separated (repeatable; also MLX5_SIM_FAULTS=SPEC):
    /// swallow-commands, delivery-status=N, garble-output-length, garble-token,
    /// fatal-health=SYND, page-request=N (negative: reclaim), stuck-cq-owner=CQN,
    /// corrupt-next-cqe, duplicate-next-cqe [default: none]
    #[arg(long, value_name = "SPEC", value_parser = fault_spec, verbatim_doc_comment)]
    fault: Vec<String>,

    /// RoCEv2 frames to a peer (another mlx5-sim, a QEMU -netdev stream):
    /// listen on ADDR [default: none; frames stay in this HCA (loopback)]
    #[arg(long, value_name = "ADDR", value_parser = stream_addr, verbatim_doc_comment)]
    wire_listen: Option<String>,

    /// The same, connecting to ADDR (retrying for 10 s) [default: none]
    #[arg(long, value_name = "ADDR", value_parser = stream_addr)]
    wire_connect: Option<String>,

    /// Capture every frame of the wire, both directions, as a pcap
    /// (needs --wire-listen or --wire-connect) [default: none]
    #[arg(
        long,
        value_name = "FILE",
        requires = "wire",
        value_parser = new_file,
        verbatim_doc_comment
    )]
    wire_pcap: Option<PathBuf>,

    /// Inject faults on send: drop=R,dup=R,corrupt=R,reorder=R[:window=N],seed=U64
    /// (rates 0..1), e.g. drop=0.01,reorder=0.01,seed=7 [default: none]
    #[arg(long, value_name = "SPEC", verbatim_doc_comment)]
    wire_fault: Option<FaultSpec>,
}

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
    wire_fault: Option<FaultSpec>,
}

/// What the parsed command line asks for, with the environment's switches applied and the
/// wire's port made (it listens or connects now).
fn args_from(cli: Cli) -> Result<Args, String> {
    let trace =
        cli.trace || std::env::var("MLX5_SIM_TRACE").is_ok_and(|v| !v.is_empty() && v != "0");
    let mut opts = Mlx5Options {
        exec: if cli.inline {
            ExecMode::Inline
        } else {
            ExecMode::Thread
        },
        ..Default::default()
    };
    if cli.bar64 {
        opts.bar0 = Bar0Mode::Bits64HighZero;
    }
    opts.init.init_delay = Duration::from_millis(cli.init_delay_ms);
    opts.hca.mac = cli.mac.0;
    let mut faults = Faults::default();
    if let Ok(spec) = std::env::var("MLX5_SIM_FAULTS") {
        faults
            .apply_spec(&spec)
            .map_err(|e| format!("MLX5_SIM_FAULTS: {e}"))?;
    }
    for spec in &cli.fault {
        faults
            .apply_spec(spec)
            .map_err(|e| format!("--fault: {e}"))?;
    }
    let port = match (&cli.wire_listen, &cli.wire_connect) {
        (Some(a), _) => mlx5_sim::wire::port_from_args("--wire-listen", a),
        (None, Some(a)) => mlx5_sim::wire::port_from_args("--wire-connect", a),
        (None, None) => None,
    }
    .transpose()?;
    let mode = match (cli.fd, cli.listen) {
        (Some(fd), _) => Mode::Fd(fd),
        (None, Some(p)) => Mode::Listen(p.to_string_lossy().into_owned()),
        (None, None) => return Err("one of --fd or --listen is required".into()),
    };
    Ok(Args {
        mode,
        trace,
        opts,
        faults,
        port,
        wire_pcap: cli.wire_pcap.map(|p| p.to_string_lossy().into_owned()),
        wire_fault: cli.wire_fault,
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

/// Prints the device's figures every `every` while they change (MLX5_SIM_STATS), from a
/// thread of its own: the process usually ends by a signal, so nothing waits for the end.
fn print_stats(server: &ProxyServer<Mlx5Function>, every: Duration) {
    use std::sync::atomic::Ordering::Relaxed;
    let proxy = server.counts();
    let exec = server.function().executor().clone();
    let port = server.function().lock_hca().port().counters().clone();
    let _ = std::thread::Builder::new()
        .name("mlx5-sim-stats".into())
        .spawn(move || {
            let mut last = String::new();
            loop {
                std::thread::sleep(every);
                let w = exec.wake_stats();
                let line = format!(
                    "bar_writes={} (send {} cq {} eq {}) bar_reads={} doorbells={} wire_wakes={} ticks={} woken={} {:?}",
                    proxy.bar_writes.load(Relaxed),
                    proxy.send_doorbells.load(Relaxed),
                    proxy.cq_doorbells.load(Relaxed),
                    proxy.eq_doorbells.load(Relaxed),
                    proxy.bar_reads.load(Relaxed),
                    w.doorbells.load(Relaxed),
                    w.wire.load(Relaxed),
                    w.ticks.load(Relaxed),
                    w.woken.load(Relaxed),
                    port.snapshot().nonzero()
                );
                if line != last {
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_secs_f64();
                    eprintln!("mlx5-sim: stats: t={t:.3} {line}");
                    last = line;
                }
            }
        });
}

fn main() -> ExitCode {
    // `--help` prints to stdout and exits 0; a bad command line names the bad value and exits 2.
    let cli = Cli::parse();
    if let Some(file) = &cli.decode_pcap {
        let mut words = vec![file.clone()];
        if let Some(l) = &cli.local {
            words.extend(["--local".to_string(), l.clone()]);
        }
        return mlx5_sim::link::dump::decode_pcap_main(&words);
    }
    let args = match args_from(cli) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mlx5-sim: {e}");
            return ExitCode::from(2);
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
            *hca.port_mut() = port;
        }
        if let Some(path) = &args.wire_pcap {
            // Unbuffered: the process usually ends by a signal when QEMU goes away, and every
            // frame written so far must be in the file.
            let tap = std::fs::File::create(path).and_then(mlx5_sim::link::PcapTap::new);
            match tap {
                Ok(t) => {
                    if !hca.port_mut().set_pcap(t) {
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
            hca.port_mut().set_faults(spec);
        }
        let faults = args.faults;
        hca.update_faults(|f| *f = faults);
    }
    let mut server = ProxyServer::new(function);
    server.set_trace(args.trace);
    if let Some(secs) = std::env::var("MLX5_SIM_STATS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s > 0)
    {
        print_stats(&server, Duration::from_secs(secs));
    }

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
            server.function().lock_hca().port_mut().shutdown();
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    fn parse(s: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("mlx5-sim").chain(s.split(' ')))
    }

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The rows of the first Markdown table after the line `heading`: each row's long option.
    fn readme_table(markdown: &str, heading: &str) -> Vec<(String, String)> {
        let mut rows = Vec::new();
        let mut in_table = false;
        for l in markdown.lines().skip_while(|l| l.trim() != heading).skip(1) {
            let t = l.trim();
            if !t.starts_with('|') {
                if in_table {
                    break;
                }
                continue;
            }
            in_table = true;
            let first = t.trim_start_matches('|').split(" | ").next().unwrap_or("");
            if let Some(opt) = first
                .split(|c: char| c == '`' || c == ',' || c.is_whitespace())
                .find(|w| {
                    w.strip_prefix("--")
                        .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_alphanumeric()))
                })
            {
                let name = opt
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                rows.push((name, t.to_string()));
            }
        }
        rows
    }

    /// The `mlx5-sim` table of docs/model.md lists exactly the options of `--help`, with the
    /// defaults `--help` shows.
    #[test]
    fn readme_table_matches_help() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/model.md");
        let readme = std::fs::read_to_string(path).expect("docs/model.md");
        let rows = readme_table(&readme, "## `mlx5-sim` options");
        assert!(
            !rows.is_empty(),
            "docs/model.md has no mlx5-sim option table"
        );
        let mut cmd = Cli::command();
        let help = cmd.render_long_help().to_string();
        let opts: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "help")
            .map(|l| format!("--{l}"))
            .collect();
        for o in &opts {
            assert!(help.contains(o.as_str()), "--help does not show {o}");
            assert!(
                rows.iter().any(|(r, _)| r == o),
                "the mlx5-sim table of docs/model.md lacks {o} (in --help)"
            );
        }
        for (r, _) in &rows {
            assert!(
                opts.contains(r),
                "the mlx5-sim table of docs/model.md has {r}, which --help does not know"
            );
        }
        for a in cmd.get_arguments() {
            let (Some(long), [d, ..]) = (a.get_long(), a.get_default_values()) else {
                continue;
            };
            if !a.get_action().takes_values() {
                continue;
            }
            let d = d.to_string_lossy();
            let (_, row) = rows
                .iter()
                .find(|(r, _)| *r == format!("--{long}"))
                .expect("row");
            assert!(
                row.contains(&format!("default {d}")),
                "the docs/model.md row of --{long} does not say `default {d}`: {row}"
            );
        }
    }

    #[test]
    fn every_option_parses_as_before() {
        let c = parse(
            "--fd 5 --trace --bar64 --init-delay-ms 7 --inline --mac 02:00:00:00:00:0a \
             --fault swallow-commands --fault page-request=-3 --wire-listen unix:/tmp/w.sock \
             --wire-pcap /tmp/w.pcap --wire-fault drop=0.01,seed=7",
        )
        .unwrap();
        assert_eq!(c.fd, Some(5));
        assert!(c.trace && c.bar64 && c.inline);
        assert_eq!(c.init_delay_ms, 7);
        assert_eq!(c.mac, Mac([2, 0, 0, 0, 0, 0x0a]));
        assert_eq!(c.fault, ["swallow-commands", "page-request=-3"]);
        assert_eq!(c.wire_listen.as_deref(), Some("unix:/tmp/w.sock"));
        assert_eq!(c.wire_pcap, Some(PathBuf::from("/tmp/w.pcap")));
        assert_eq!(c.wire_fault.map(|f| f.seed), Some(7));
        // The defaults are the model's.
        let c = parse("--listen /tmp/h.sock").unwrap();
        assert_eq!(c.mac.0, HcaConfig::default().mac);
        assert_eq!(
            Duration::from_millis(c.init_delay_ms),
            Mlx5Options::default().init.init_delay
        );
        assert!(c.fault.is_empty() && c.wire_fault.is_none());
        // `--decode-pcap FILE [--local MAC|IP]`, with `=` too; the last of a repeated option wins.
        let c = parse("--decode-pcap=/tmp/l.pcap --local 10.0.0.2 --local 10.0.0.1").unwrap();
        assert_eq!(
            (c.decode_pcap.as_deref(), c.local.as_deref()),
            (Some("/tmp/l.pcap"), Some("10.0.0.1"))
        );
    }

    #[test]
    fn errors_name_the_bad_value() {
        for (args, bad) in [
            ("--fd -1", "-1"),
            ("--fd x", "x"),
            ("--listen /tmp/h --mac 02:00", "02:00"),
            ("--listen /tmp/h --fault melt", "melt"),
            ("--listen /tmp/h --init-delay-ms soon", "soon"),
            ("--listen /tmp/h --wire-fault drop=2", "drop=2"),
            ("--listen /tmp/h --wire-connect tcp:nowhere", "tcp:nowhere"),
            ("--decode-pcap /tmp/l.pcap --local here", "here"),
            (
                "--listen /nonexistent-dir/h.sock",
                "/nonexistent-dir/h.sock",
            ),
            (
                "--fd 3 --wire-listen /tmp/w --wire-pcap /nonexistent-dir/w.pcap",
                "/nonexistent-dir/w.pcap",
            ),
        ] {
            let e = parse(args).expect_err(args);
            assert!(
                matches!(
                    e.kind(),
                    ErrorKind::InvalidValue | ErrorKind::ValueValidation
                ),
                "{args}: {e}"
            );
            assert!(
                e.to_string().contains(&format!("'{bad}'")),
                "{args}: the error does not name '{bad}': {e}"
            );
        }
        for (args, kind) in [
            ("--trace", ErrorKind::MissingRequiredArgument),
            ("--fd 3 --listen /tmp/h", ErrorKind::ArgumentConflict),
            (
                "--fd 3 --wire-listen /tmp/a --wire-connect /tmp/b",
                ErrorKind::ArgumentConflict,
            ),
            (
                "--fd 3 --wire-pcap /tmp/w.pcap",
                ErrorKind::MissingRequiredArgument,
            ),
            ("--fd 3 --local 10.0.0.2", ErrorKind::ArgumentConflict),
            ("--local 10.0.0.2", ErrorKind::MissingRequiredArgument),
            ("--fd 3 --bogus", ErrorKind::UnknownArgument),
            ("--help", ErrorKind::DisplayHelp),
        ] {
            assert_eq!(parse(args).map(|_| ()).unwrap_err().kind(), kind, "{args}");
        }
        assert_eq!(parse("--bogus").unwrap_err().exit_code(), 2);
    }
}
