//! `fuzz`: longer runs of the model's fuzz targets (the same code as the `cargo test` smoke
//! runs in tests/fuzz.rs).
//!
//! ```text
//! cargo run --release -p mlx5-sim --bin fuzz -- [--seed N] [--iters N] [--runs N] [--target T]...
//! ```
//! `--help` lists the options with their defaults (clap, derive API, as `mlx5-sim`). Exit
//! status 0 if nothing was found, 1 on a finding (printed with how to reproduce it), 2 on bad
//! arguments.

#[path = "../../tests/datapath_common/mod.rs"]
mod dp;
#[path = "../../tests/eth_common/mod.rs"]
mod eth;
#[path = "../../tests/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/raw/mod.rs"]
mod raw;

use std::process::ExitCode;

use clap::Parser;

/// A number in decimal or `0x` hex (the form a finding prints its seed in).
fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("not a decimal or 0x hex number: {e}"))
}

/// A fuzz target by the name a finding prints.
fn target(s: &str) -> Result<fuzz::Target, String> {
    fuzz::Target::parse(s).ok_or_else(|| {
        let names: Vec<&str> = fuzz::ALL_TARGETS.iter().map(|t| t.name()).collect();
        format!("one of {}", names.join(", "))
    })
}

/// The command line. Field order is the order of `--help`.
#[derive(Parser, Debug)]
#[command(
    name = "fuzz",
    about = "Longer runs of the emulated HCA's fuzz targets (the same code as `cargo test -p mlx5-sim --test fuzz`).",
    after_help = "Exit status: 0 if nothing was found, 1 on a finding (printed with how to reproduce it), 2 on bad arguments.",
    // As before clap: an option given twice takes the last value.
    args_override_self = true,
)]
struct Cli {
    /// First seed, decimal or 0x hex [default: from the clock, printed with each run]
    #[arg(long, value_name = "N", value_parser = parse_u64, allow_negative_numbers = true)]
    seed: Option<u64>,

    /// Iterations per target and seed
    #[arg(long, value_name = "N", value_parser = parse_u64, default_value = "100000", allow_negative_numbers = true)]
    iters: u64,

    /// Seeds to try: seed, seed+1, ...
    #[arg(long, value_name = "N", value_parser = parse_u64, default_value = "1", allow_negative_numbers = true)]
    runs: u64,

    /// cmdq | cmd | wqe | bar | proxy | wire | wire6 | eth | ud | eth-wire | cm (repeatable) [default: all]
    #[arg(long, value_name = "T", value_parser = target)]
    target: Vec<fuzz::Target>,
}

fn main() -> ExitCode {
    // `--help` prints to stdout and exits 0; a bad command line names the bad value and exits 2.
    let cli = Cli::parse();
    let (seed, iters, runs, mut targets) = (cli.seed, cli.iters, cli.runs, cli.target);
    if targets.is_empty() {
        targets = fuzz::ALL_TARGETS.to_vec();
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut total = 0u64;
    for r in 0..runs {
        let s = seed.wrapping_add(r);
        for &t in &targets {
            let t0 = std::time::Instant::now();
            match fuzz::run(t, s, iters) {
                Ok(n) => {
                    total += n;
                    println!(
                        "{:6} seed {s:#x}: {n} iterations, nothing found ({:.1?})",
                        t.name(),
                        t0.elapsed()
                    );
                }
                Err(f) => {
                    println!("FOUND: {f}");
                    return ExitCode::from(1);
                }
            }
        }
    }
    let st = &fuzz::STATS;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{total} iterations, nothing found (commands {} of which ok {}; CQEs {} of which ok {}; \
         hostile frames {} of which to a live QP {}; Ethernet frames sent {} received {}; \
         datagrams received {}; frames on the Ethernet port received {} dropped {}; \
         SIGBUS caught {})",
        ld(&st.commands),
        ld(&st.commands_ok),
        ld(&st.cqes),
        ld(&st.cqes_ok),
        ld(&st.wire_hostile),
        ld(&st.wire_hostile_to_qp),
        ld(&st.eth_sent),
        ld(&st.eth_received),
        ld(&st.ud_received),
        ld(&st.eth_wire_received),
        ld(&st.eth_wire_dropped),
        mlx5_sim::memory::sigbus::caught()
    );
    if targets.contains(&fuzz::Target::Wire) || targets.contains(&fuzz::Target::Wire6) {
        let port: Vec<String> = fuzz::wire::PORT_COUNTERS
            .iter()
            .zip(&st.wire_port)
            .map(|(c, n)| format!("{} {}", c.name(), ld(n)))
            .collect();
        println!("wire: port counters of every HCA: {}", port.join(", "));
    }
    if targets.contains(&fuzz::Target::Cm) {
        let by = st.cm_drops.lock().unwrap_or_else(|e| e.into_inner());
        let by: Vec<String> = by.iter().map(|(c, n)| format!("{c} {n}")).collect();
        println!(
            "cm: datagrams sent {}: received by QP 1 {} (of which CM messages {}), completed \
             in error {}, dropped in a counter {} ({}), for no datagram QP {}; the pcap listing \
             named {} CM MADs ({} not decodable)",
            ld(&st.cm_sent),
            ld(&st.cm_received),
            ld(&st.cm_received_cm),
            ld(&st.cm_error_cqes),
            ld(&st.cm_dropped),
            by.join(", "),
            ld(&st.cm_unaddressed),
            ld(&st.cm_listed),
            ld(&st.cm_listed_bad)
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod cli_tests {
    use super::*;
    use clap::error::ErrorKind;
    use clap::CommandFactory;

    fn parse(s: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("fuzz").chain(s.split_whitespace()))
    }

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// The invocations of docs/model.md, tests/fuzz.rs and a finding's "reproduce" line.
    #[test]
    fn every_option_parses_as_before() {
        let c = parse("--seed 0x1f --iters 5 --runs 3 --target cmdq --target proxy").unwrap();
        assert_eq!((c.seed, c.iters, c.runs), (Some(0x1f), 5, 3));
        assert_eq!(c.target, [fuzz::Target::CmdQueue, fuzz::Target::Proxy]);
        let c = parse("--target wqe --seed 17 --iters 0x10").unwrap();
        assert_eq!(
            (c.seed, c.iters, c.target.as_slice()),
            (Some(17), 16, &[fuzz::Target::Wqe][..])
        );
        // The defaults; the last of a repeated option wins.
        let c = parse("").unwrap();
        assert_eq!((c.seed, c.iters, c.runs), (None, 100_000, 1));
        assert!(c.target.is_empty(), "no --target: all targets");
        assert_eq!(parse("--seed 1 --seed=2").unwrap().seed, Some(2));
        for t in fuzz::ALL_TARGETS {
            assert_eq!(
                parse(&format!("--target {}", t.name())).unwrap().target,
                [*t]
            );
        }
    }

    #[test]
    fn errors_name_the_bad_value_and_exit_2() {
        for (args, bad) in [
            ("--seed x", "x"),
            ("--seed 0xg", "0xg"),
            ("--iters -1", "-1"),
            ("--runs 1.5", "1.5"),
            ("--target all", "all"),
        ] {
            let e = parse(args).expect_err(args);
            assert_eq!(e.kind(), ErrorKind::ValueValidation, "{args}: {e}");
            assert!(e.to_string().contains(&format!("'{bad}'")), "{args}: {e}");
            assert_eq!(e.exit_code(), 2, "{args}");
        }
        for (args, kind) in [
            ("--bogus", ErrorKind::UnknownArgument),
            ("--seed", ErrorKind::InvalidValue),
            ("--help", ErrorKind::DisplayHelp),
        ] {
            assert_eq!(parse(args).map(|_| ()).unwrap_err().kind(), kind, "{args}");
        }
        assert_eq!(parse("--bogus").unwrap_err().exit_code(), 2);
    }

    /// `--help` lists every option, each with its default.
    #[test]
    fn help_lists_every_option_with_its_default() {
        let e = parse("--help").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        let help = e.to_string();
        let mut n = 0;
        for a in Cli::command().get_arguments() {
            let Some(long) = a.get_long().filter(|l| *l != "help") else {
                continue;
            };
            n += 1;
            // The option's entry: its line and any continuation lines.
            let entry = help
                .lines()
                .skip_while(|l| !l.trim_start().starts_with(&format!("--{long}")))
                .enumerate()
                .take_while(|(i, l)| *i == 0 || !l.trim_start().starts_with('-'))
                .map(|(_, l)| l)
                .collect::<Vec<_>>()
                .join(" ");
            assert!(!entry.is_empty(), "--help does not show --{long}:\n{help}");
            assert!(
                entry.contains("[default: "),
                "--{long} shows no default: {entry}"
            );
        }
        assert_eq!(n, 4, "--seed, --iters, --runs, --target");
    }
}
