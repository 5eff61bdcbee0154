//! `cargo run`: build the unikernel image and boot it in QEMU. See `cargo run -- --help`.

use unikernel::{pair_options, parse_args, run, run_pair, Verdict};

/// `--pair`: both guests, one verdict (0 only when both guests exited 0).
fn run_pair_cli(opts: &unikernel::Options) -> i32 {
    let dir = std::env::temp_dir().join(format!("unikernel-pair-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("launcher: {}: {e}", dir.display());
        return unikernel::status::USAGE;
    }
    let (server, client) = pair_options(opts, &dir);
    let r = run_pair(&server, &client);
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok((rs, rc)) => {
            for (name, r) in [("server", &rs), ("client", &rc)] {
                if r.verdict != Verdict::Exited(0) {
                    eprintln!("launcher: {name}: {:?}", r.verdict);
                }
            }
            let both = rs.verdict == Verdict::Exited(0) && rc.verdict == Verdict::Exited(0);
            eprintln!("launcher: pair {}", if both { "PASSED" } else { "FAILED" });
            if both {
                0
            } else if rs.verdict != Verdict::Exited(0) {
                rs.verdict.exit_status()
            } else {
                rc.verdict.exit_status()
            }
        }
        Err(e) => {
            eprintln!("launcher: {e}");
            e.exit_status()
        }
    }
}

fn main() {
    // `--help` prints to stdout and exits 0; a bad command line names the bad value on stderr
    // and exits 2 (`status::USAGE`).
    let opts = parse_args(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit());
    unikernel::progress::set_quiet(!opts.echo);
    if opts.pair {
        std::process::exit(run_pair_cli(&opts));
    }
    if opts.peer {
        std::process::exit(unikernel::linux_guest::peer::cli(&opts));
    }
    match run(&opts) {
        Ok(r) => {
            let status = r.verdict.exit_status();
            match &r.verdict {
                Verdict::Exited(0) => {}
                Verdict::Exited(c) => eprintln!("launcher: the application exited with {c}"),
                Verdict::KernelFailure(c) => eprintln!("launcher: the kernel failed (status {c})"),
                Verdict::TimedOut => eprintln!(
                    "launcher: timed out after {} s; QEMU killed",
                    opts.timeout.as_secs()
                ),
                Verdict::Abnormal(why) => eprintln!("launcher: {why}"),
            }
            std::process::exit(status);
        }
        Err(e) => {
            eprintln!("launcher: {e}");
            std::process::exit(e.exit_status());
        }
    }
}
