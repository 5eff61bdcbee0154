//! `cargo run`: build the unikernel image and boot it in QEMU. See `cargo run -- --help`.

use unikernel::{parse_args, run, ParseOutcome, Verdict, USAGE};

fn main() {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(ParseOutcome::Run(o)) => o,
        Ok(ParseOutcome::Help) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            std::process::exit(unikernel::status::USAGE);
        }
    };
    match run(&opts) {
        Ok(r) => {
            let status = r.verdict.exit_status();
            match &r.verdict {
                Verdict::Exited(0) => {}
                Verdict::Exited(c) => eprintln!("launcher: the application exited with {c}"),
                Verdict::KernelFailure(c) => eprintln!("launcher: the kernel failed (status {c})"),
                Verdict::TimedOut => eprintln!("launcher: timed out after {} s; QEMU killed", opts.timeout.as_secs()),
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
