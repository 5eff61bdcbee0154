//! The launcher's command line (`cargo run -- --help`), parsed with clap's derive API into
//! [`Options`]. Every value is checked here, before anything is built or started: a bad value
//! is an error that names it (exit status 2). The HCA's fault specs are checked with the
//! model's own parsers (`mlx5_sim`), so the launcher and `mlx5-sim` cannot disagree.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::{parse_size, Accel, BootVia, Hca, Machine, Options};

const ABOUT: &str =
    "Builds the unikernel image and boots it in QEMU; the exit status is the application's.";

const AFTER_HELP: &str = "\
Examples:
  cargo run
      boot the default app (rdma, with the emulated HCA under KVM)
  cargo run -- --accel tcg --app hello --memory 512M
      the boot report and memory self-test under TCG, no HCA
  cargo run -- --cmdline log=debug --hca-trace
      the driver's debug log, and every command the HCA executes
  cargo run -- --pair --hca-pcap /tmp/pair.pcap --wire-fault drop=0.01,seed=7
      two guests doing RDMA over a lossy RoCEv2 wire, captured
  cargo run -- --peer linux --peer-cmd 'ib_write_bw -d rxe0 -x $GID -F -n 200'
      Linux's ib_write_bw (soft-RoCE, TCG) against the unikernel's perftest
  cargo run -- --peer linux --peer-role client --peer-cmd 'ibv_rc_pingpong -d rxe0 -g $GID $SERVER'
      Linux's ibv_rc_pingpong as the client, the unikernel's pingpong as the server

Long steps (building the image, the Linux peer image, waiting for a guest) show progress on a
terminal; -q or a non-terminal stderr keeps them quiet.

Exit status: the application's (0 = success), 101 guest panic, 102 CPU exception, 103 boot
failure, 124 timeout, 125 QEMU stopped without a verdict, 126 build failure, 127 QEMU not
installed, 2 a bad command line.";

/// Which peer `--peer` runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PeerKind {
    /// Debian's 6.1 kernel with soft-RoCE (rdma_rxe) and rdma-core's tools, under TCG
    Linux,
}

/// Which side Linux plays (`--peer-role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PeerRole {
    /// Linux serves; the unikernel connects
    Server,
    /// Linux connects to the unikernel ($SERVER); the unikernel serves
    Client,
}

/// `--hca-wire`: which end of a UNIX socket this guest's HCA plays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HcaWire {
    Listen(String),
    Connect(String),
}

impl HcaWire {
    /// The `mlx5-sim` option and its value.
    fn sim_args(&self) -> [String; 2] {
        match self {
            HcaWire::Listen(p) => ["--wire-listen".into(), p.clone()],
            HcaWire::Connect(p) => ["--wire-connect".into(), p.clone()],
        }
    }
}

fn hca_wire(v: &str) -> Result<HcaWire, String> {
    match v.split_once(':') {
        Some(("listen", p)) if !p.is_empty() => Ok(HcaWire::Listen(p.into())),
        Some(("connect", p)) if !p.is_empty() => Ok(HcaWire::Connect(p.into())),
        _ => Err("expected listen:PATH or connect:PATH".into()),
    }
}

/// A QEMU size, kept as written (QEMU gets it as is).
fn memory_size(v: &str) -> Result<String, String> {
    parse_size(v).map(|_| v.to_string()).ok_or_else(|| {
        "expected a size: a number above 0 with K, M, G or T (MiB without), e.g. 512M or 5G".into()
    })
}

/// A host PCI address for `-device vfio-pci,host=`, in the form QEMU takes:
/// `[DOMAIN:]BUS:SLOT.FUNCTION`, hex, domain <= 0xffff, bus <= 0xff, slot <= 0x1f, function <= 7
/// (QEMU hw/core/qdev-properties-system.c, set_pci_host_devaddr). Kept as written.
fn pci_address(v: &str) -> Result<String, String> {
    const WANT: &str = "expected a PCI address [DOMAIN:]BUS:SLOT.FUNCTION, e.g. 0000:3b:00.0";
    let hex = |s: &str, max: u32| -> Option<u32> {
        (!s.is_empty() && s.len() <= 4)
            .then(|| u32::from_str_radix(s, 16).ok())
            .flatten()
            .filter(|&n| n <= max)
    };
    let (head, func) = v.rsplit_once('.').ok_or(WANT)?;
    let parts: Vec<&str> = head.split(':').collect();
    let (dom, bus, slot) = match parts[..] {
        [b, s] => ("0", b, s),
        [d, b, s] => (d, b, s),
        _ => return Err(WANT.into()),
    };
    match (
        hex(dom, 0xffff),
        hex(bus, 0xff),
        hex(slot, 0x1f),
        hex(func, 7),
    ) {
        (Some(_), Some(_), Some(_), Some(_)) => Ok(v.to_string()),
        _ => Err(WANT.into()),
    }
}

/// A file to be written: its directory must exist.
fn output_file(v: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(v);
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if v.is_empty() || v.ends_with('/') {
        return Err("expected a file name".into());
    }
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    Ok(p)
}

/// An HCA fault spec, checked by the model's parser (`mlx5-sim --fault`).
fn hca_fault(v: &str) -> Result<String, mlx5_sim::control::faults::FaultSpecError> {
    mlx5_sim::Faults::default()
        .apply_spec(v)
        .map(|()| v.to_string())
}

/// A wire fault spec, checked by the model's parser (`mlx5-sim --wire-fault`).
fn wire_fault(v: &str) -> Result<String, mlx5_sim::link::FaultSpecError> {
    v.parse::<mlx5_sim::link::FaultSpec>()
        .map(|_| v.to_string())
}

/// `cargo run -- [OPTIONS]`. Field order is the order of `--help`.
#[derive(Parser, Debug)]
#[command(
    name = "unikernel",
    bin_name = "cargo run --",
    about = ABOUT,
    after_help = AFTER_HELP,
    // As before clap: an option given twice takes the last value.
    args_override_self = true,
    max_term_width = 100,
    // A capture of the HCA's wire needs a wire: --pair, --hca-wire or --peer.
    group(clap::ArgGroup::new("wired").args(["pair", "hca_wire", "peer"]).multiple(true)),
)]
pub struct Cli {
    /// Accelerator: auto uses KVM when /dev/kvm works, else TCG
    #[arg(long, value_enum, value_name = "ACCEL", default_value_t = Accel::Auto)]
    pub accel: Accel,

    /// QEMU machine type
    #[arg(long, value_enum, value_name = "MACHINE", default_value_t = Machine::Q35)]
    pub machine: Machine,

    /// Guest RAM: a number with K, M, G or T (MiB without), e.g. 512M or 5G
    /// (3G on q35 leaves a whole 1 GiB page above 4 GiB for the RDMA app)
    #[arg(long, value_name = "SIZE", default_value = "3G", value_parser = memory_size, verbatim_doc_comment)]
    pub memory: String,

    /// Virtual CPUs (the kernel runs on the first)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub cpus: u32,

    /// Kernel command line: log=error|warn|info|debug|trace, pages=2m, and the
    /// app's own words, e.g. log=debug or 'perftest ib_write_bw -s 65536'
    /// [default: empty]
    #[arg(
        long,
        value_name = "CMDLINE",
        default_value = "",
        hide_default_value = true,
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub cmdline: String,

    /// Kill QEMU after SECS seconds and exit 124 (no timeout with --gdb)
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,

    /// Start QEMU's gdbstub on :1234, wait for the debugger, print how to attach
    #[arg(long)]
    pub gdb: bool,

    /// Pass a host PCI function through with -device vfio-pci (repeatable),
    /// e.g. 0000:3b:00.0 [default: none]
    #[arg(long, value_name = "BDF", value_parser = pci_address, verbatim_doc_comment)]
    pub vfio: Vec<String>,

    /// Attach the emulated ConnectX-5 HCA through QEMU's x-pci-proxy-dev
    /// [default: sim under KVM, none under TCG, where QEMU 10.0's proxy device
    /// crashes]
    #[arg(long, value_enum, value_name = "HCA", verbatim_doc_comment)]
    pub hca: Option<Hca>,

    /// The HCA server logs every command (opcode, status, syndrome) to stderr
    #[arg(long)]
    pub hca_trace: bool,

    /// Inject HCA faults, comma-separated (repeatable; the list is in
    /// mlx5-sim --help), e.g. swallow-commands or fatal-health=1 [default: none]
    #[arg(long, value_name = "SPEC", value_parser = hca_fault, verbatim_doc_comment)]
    pub hca_fault: Vec<String>,

    /// Join this guest's HCA to another launcher's over a UNIX socket, so two
    /// guests can run RDMA between them, e.g. listen:/tmp/wire.sock
    /// [default: none]
    #[arg(long, value_name = "listen:PATH|connect:PATH", value_parser = hca_wire, verbatim_doc_comment)]
    pub hca_wire: Option<HcaWire>,

    /// Capture the HCA's wire, both directions, as a pcap (with --pair: the
    /// server's, which sees every frame; needs --pair, --hca-wire or --peer)
    /// [default: none]
    #[arg(long, value_name = "FILE", requires = "wired", value_parser = output_file, verbatim_doc_comment)]
    pub hca_pcap: Option<PathBuf>,

    /// Inject wire faults on send (with --pair: on both HCAs):
    /// drop=R,dup=R,corrupt=R,reorder=R[:window=N],seed=U64 (rates 0..1),
    /// e.g. drop=0.01,reorder=0.01,corrupt=0.001,seed=7 [default: none]
    #[arg(long, value_name = "SPEC", value_parser = wire_fault, verbatim_doc_comment)]
    pub wire_fault: Option<String>,

    /// The application from apps/ to link into the image, e.g. hello
    /// [default: rdma with an HCA, hello without]
    #[arg(long, value_name = "NAME", verbatim_doc_comment)]
    pub app: Option<String>,

    /// The two-guest RDMA run: rdma-peer as server (10.0.0.1) and client
    /// (10.0.0.2), their HCAs joined by a wire of RoCEv2 frames, every RC
    /// opcode across it; one verdict
    #[arg(long, conflicts_with_all = ["peer", "peer_cmd", "peer_pcap", "hca_wire"], verbatim_doc_comment)]
    pub pair: bool,

    /// Run against a Linux soft-RoCE (rdma_rxe) peer under TCG, its NIC plugged
    /// into the emulated HCA's port; the unikernel runs the app that plays the
    /// other side of --peer-cmd (pingpong for ibv_rc_pingpong, perftest for
    /// ib_*_bw and ib_*_lat), its options from --cmdline, else those of --peer-cmd
    #[arg(
        long,
        value_enum,
        value_name = "PEER",
        requires = "peer_cmd",
        conflicts_with = "hca_wire",
        verbatim_doc_comment
    )]
    pub peer: Option<PeerKind>,

    /// The command Linux runs (sh -c), e.g. 'ib_write_bw -d rxe0 -x $GID -F'
    /// ($GID: the RoCE v2 GID index of Linux's IPv4 address; $SERVER: the
    /// unikernel's address 10.0.0.2, for a Linux client)
    #[arg(
        long,
        value_name = "CMD",
        requires = "peer",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub peer_cmd: Option<String>,

    /// Which side Linux plays
    #[arg(long, value_enum, value_name = "ROLE", default_value_t = PeerRole::Server)]
    pub peer_role: PeerRole,

    /// Capture the link to the Linux peer, both directions, as a pcap
    /// [default: none]
    #[arg(long, value_name = "FILE", requires = "peer", value_parser = output_file, verbatim_doc_comment)]
    pub peer_pcap: Option<PathBuf>,

    /// Static neighbour entries on both sides: a permanent entry for the
    /// unikernel in Linux, the app's neigh= for Linux (its QP's MAC, not asked
    /// by ARP)
    #[arg(long, requires = "peer", verbatim_doc_comment)]
    pub peer_neigh: bool,

    /// Boot with QEMU -kernel (PVH) or through GRUB and Multiboot2 from an ISO
    #[arg(long, value_enum, value_name = "BOOT", default_value_t = BootVia::Pvh)]
    pub boot: BootVia,

    /// Hide 1 GiB pages from the guest under TCG too (KVM hides them always)
    #[arg(long = "no-1g-pages")]
    pub no_1g_pages: bool,

    /// Do not copy the guest's serial output to stdout; no progress of long
    /// steps either
    #[arg(short, long, verbatim_doc_comment)]
    pub quiet: bool,
}

impl From<Cli> for Options {
    fn from(c: Cli) -> Options {
        let mut hca_args = Vec::new();
        if c.hca_trace {
            hca_args.push("--trace".to_string());
        }
        for f in c.hca_fault {
            hca_args.extend(["--fault".to_string(), f]);
        }
        if let Some(w) = &c.hca_wire {
            hca_args.extend(w.sim_args());
        }
        if let Some(p) = &c.hca_pcap {
            hca_args.extend(["--wire-pcap".to_string(), p.to_string_lossy().into_owned()]);
        }
        if let Some(f) = c.wire_fault {
            hca_args.extend(["--wire-fault".to_string(), f]);
        }
        Options {
            accel: c.accel,
            machine: c.machine,
            memory: c.memory,
            cpus: c.cpus,
            cmdline: c.cmdline,
            timeout: Duration::from_secs(c.timeout),
            gdb: c.gdb,
            vfio: c.vfio,
            hca: c.hca,
            app: c.app,
            boot: c.boot,
            hca_args,
            hide_1g_pages: c.no_1g_pages,
            echo: !c.quiet,
            pair: c.pair,
            peer: c.peer.is_some(),
            peer_cmd: c.peer_cmd,
            peer_client: c.peer_role == PeerRole::Client,
            peer_pcap: c.peer_pcap,
            peer_neigh: c.peer_neigh,
        }
    }
}

/// Parses the launcher's arguments (without the program name). `--help` comes back as an error
/// of kind [`clap::error::ErrorKind::DisplayHelp`]; `clap::Error::exit` prints either (help on
/// stdout with status 0, an error naming the bad value on stderr with status 2).
pub fn parse_args<I, T>(args: I) -> Result<Options, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let argv = std::iter::once(OsString::from("unikernel")).chain(args.into_iter().map(Into::into));
    Cli::try_parse_from(argv).map(Options::from)
}

/// The long options of a clap command (without `--help`), as `--name`.
pub fn long_options(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| *l != "help")
        .map(|l| format!("--{l}"))
        .collect()
}

/// The rows of the first Markdown table after the line `heading` in `markdown`: for each row
/// whose first cell starts with a long option (`--name`), the option and the whole row.
pub fn readme_table(markdown: &str, heading: &str) -> Vec<(String, String)> {
    let mut lines = markdown.lines().skip_while(|l| l.trim() != heading).skip(1);
    let mut rows = Vec::new();
    let mut in_table = false;
    for l in lines.by_ref() {
        let t = l.trim();
        if t.starts_with('|') {
            in_table = true;
            let first = t.trim_start_matches('|').split(" | ").next().unwrap_or("");
            // `--name VALUE`, `-q, --quiet` or `` `--name` ``.
            if let Some(opt) = first
                .split(|c: char| c == '`' || c == ',' || c.is_whitespace())
                .find(|w| {
                    w.strip_prefix("--")
                        .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_alphanumeric()))
                })
            {
                let name: String = opt
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                rows.push((name, t.to_string()));
            }
        } else if in_table {
            break;
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The Markdown file `path` of the repository (`docs/launcher.md`, ...).
    fn doc(path: &str) -> String {
        std::fs::read_to_string(crate::workspace_root().join(path)).expect(path)
    }

    /// Checks the documented table `rows` (named `what`) against `--help`: it has a row for each
    /// of `must_list`, each of its rows is an option of `--help`, each row says the default
    /// that `--help` shows, and a row whose option takes one of a fixed set of values lists
    /// exactly those (`--peer-role server\|client`).
    fn check_table(what: &str, rows: &[(String, String)], must_list: &[String]) {
        assert!(!rows.is_empty(), "the docs have no {what} table");
        let mut cmd = Cli::command();
        let help = cmd.render_long_help().to_string();
        let opts = long_options(&cmd);
        for o in must_list {
            assert!(help.contains(o.as_str()), "--help does not show {o}");
            assert!(
                rows.iter().any(|(r, _)| r == o),
                "the {what} table lacks {o} (in --help)"
            );
        }
        for (r, _) in rows {
            assert!(
                opts.contains(r),
                "the {what} table has {r}, which --help does not know"
            );
        }
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            let Some((_, row)) = rows.iter().find(|(r, _)| *r == format!("--{long}")) else {
                continue;
            };
            // Flags (default false) and values whose default --help does not print.
            if let [d, ..] = a.get_default_values() {
                if !a.is_hide_default_value_set() && a.get_action().takes_values() {
                    let d = d.to_string_lossy();
                    assert!(
                        row.contains(&format!("default {d}")),
                        "the {what} row of --{long} does not say `default {d}`: {row}"
                    );
                }
            }
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() && !a.is_hide_possible_values_set() {
                // The first cell's `--name VALUES`, up to the closing backquote.
                let first = row
                    .trim_start_matches('|')
                    .split(" | ")
                    .next()
                    .unwrap_or("");
                let shown = first
                    .split(&format!("--{long} "))
                    .nth(1)
                    .and_then(|v| v.split('`').next());
                let listed = values.join("\\|");
                assert_eq!(
                    shown,
                    Some(listed.as_str()),
                    "the {what} row of --{long} does not list `{listed}`: {row}"
                );
            }
        }
    }

    /// The launcher's table in docs/launcher.md lists exactly the options of `--help`, and
    /// shows each default that `--help` shows.
    #[test]
    fn readme_table_matches_help() {
        let rows = readme_table(&doc("docs/launcher.md"), "## Options");
        check_table("docs/launcher.md", &rows, &long_options(&Cli::command()));
    }

    /// The option table of the Linux peer in docs/linux-interop.md lists every `--peer*`
    /// option of `--help` (and only options `--help` knows), with the defaults and values it
    /// shows.
    #[test]
    fn readme_peer_table_matches_help() {
        let rows = readme_table(
            &doc("docs/linux-interop.md"),
            "## The Linux soft-RoCE peer: `--peer linux`",
        );
        let peer: Vec<String> = long_options(&Cli::command())
            .into_iter()
            .filter(|o| o.starts_with("--peer"))
            .collect();
        assert_eq!(peer.len(), 5, "{peer:?}");
        check_table("docs/linux-interop.md --peer", &rows, &peer);
    }

    fn parse(s: &str) -> Result<Options, clap::Error> {
        parse_args(s.split(' '))
    }

    #[test]
    fn errors_name_the_bad_value() {
        for (args, bad) in [
            ("--accel warp", "warp"),
            ("--accel=quantum", "quantum"),
            ("--memory lots", "lots"),
            ("--memory 0G", "0G"),
            ("--cpus 0", "0"),
            ("--timeout soon", "soon"),
            ("--hca-wire sideways", "sideways"),
            ("--hca-fault melt", "melt"),
            ("--wire-fault drop=2", "drop=2"),
            ("--peer bsd", "bsd"),
            ("--peer linux --peer-cmd x --peer-role both", "both"),
            ("--boot floppy", "floppy"),
            ("--vfio 3b:00", "3b:00"),
            ("--vfio 3b:20.0", "3b:20.0"),
            ("--vfio 0000:3b:00.8", "0000:3b:00.8"),
            ("--vfio 10000:3b:00.0", "10000:3b:00.0"),
            (
                "--pair --hca-pcap /nonexistent-dir/x.pcap",
                "/nonexistent-dir/x.pcap",
            ),
            ("--peer linux --peer-cmd x --peer-pcap /tmp/", "/tmp/"),
        ] {
            let e = parse(args).expect_err(args);
            use clap::error::ErrorKind::{InvalidValue, ValueValidation};
            assert!(
                matches!(e.kind(), InvalidValue | ValueValidation),
                "{args}: {e}"
            );
            let text = e.to_string();
            assert!(
                text.contains(&format!("'{bad}'")),
                "{args}: the error does not name '{bad}': {text}"
            );
        }
        let e = parse("--bogus").unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--bogus"));
        assert_eq!(
            parse("--memory").unwrap_err().kind(),
            clap::error::ErrorKind::InvalidValue
        );
        assert_eq!(
            parse("--help").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
        assert_eq!(
            parse("-h").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
        // Errors exit with the launcher's usage status.
        assert_eq!(
            parse("--bogus").unwrap_err().exit_code(),
            crate::status::USAGE
        );
    }

    #[test]
    fn defaults_are_the_library_defaults() {
        assert_eq!(
            parse_args(std::iter::empty::<String>()).unwrap(),
            Options::default()
        );
    }

    #[test]
    fn spellings_of_before_clap_still_parse() {
        // `--flag=value`, the `multiboot2` alias, a repeated option (the last wins), a
        // repeatable one, and values that start with a dash.
        let o = parse_args([
            "--boot=multiboot2",
            "--cpus",
            "2",
            "--cpus",
            "3",
            "--vfio",
            "3b:00.0",
            "--vfio",
            "3b:00.1",
            "--cmdline",
            "-n 5",
            "-q",
        ])
        .unwrap();
        assert_eq!(
            (o.boot, o.cpus, o.cmdline.as_str(), o.echo),
            (BootVia::Grub, 3, "-n 5", false)
        );
        assert_eq!(o.vfio, ["3b:00.0", "3b:00.1"]);
        assert_eq!(parse("--vfio ffff:ff:1f.7").unwrap().vfio, ["ffff:ff:1f.7"]);
        assert_eq!(
            parse("--pair --hca-pcap run.pcap").unwrap().hca_args[..2],
            ["--wire-pcap", "run.pcap"]
        );
        let o =
            parse("--hca-fault swallow-commands --hca-fault fatal-health=1 --hca-trace").unwrap();
        assert_eq!(
            o.hca_args,
            [
                "--trace",
                "--fault",
                "swallow-commands",
                "--fault",
                "fatal-health=1"
            ]
        );
        let o = parse_args(["--peer", "linux", "--peer-cmd", "-x"]).unwrap();
        assert_eq!(o.peer_cmd.as_deref(), Some("-x"));
    }

    #[test]
    fn combinations_that_cannot_work_are_refused() {
        use clap::error::ErrorKind;
        assert_eq!(
            parse("--peer linux").unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse("--peer-cmd x").unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse("--peer-pcap /tmp/x").unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse("--peer-neigh").unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            parse("--pair --peer linux --peer-cmd x")
                .unwrap_err()
                .kind(),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(
            parse("--pair --peer-cmd x").unwrap_err().kind(),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(
            parse("--pair --hca-wire listen:/tmp/w").unwrap_err().kind(),
            ErrorKind::ArgumentConflict
        );
        // A capture needs a wire (mlx5-sim refuses --wire-pcap without one).
        assert_eq!(
            parse("--hca-pcap /tmp/x.pcap").unwrap_err().kind(),
            ErrorKind::MissingRequiredArgument
        );
        for ok in [
            "--pair",
            "--hca-wire connect:/tmp/w",
            "--peer linux --peer-cmd x",
        ] {
            assert!(
                parse(&format!("{ok} --hca-pcap /tmp/x.pcap")).is_ok(),
                "{ok}"
            );
        }
    }
}
