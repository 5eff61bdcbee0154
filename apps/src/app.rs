//! What the apps' `main()`s share: how a run ends (its exit status and last line), the errors
//! of the rdma-core tools' options, and in the unikernel the HCA opened and closed around a run.

use core::fmt::{Arguments, Display};

/// The exit status of a run that succeeded.
pub const EXIT_OK: i32 = 0;
/// The exit status of a run that failed.
pub const EXIT_FAILED: i32 = 1;
/// The exit status of a command line the app refuses.
pub const EXIT_USAGE: i32 = 2;

/// How an app ends: with its options `opts` refused, `NAME: why` and [`EXIT_USAGE`]; else
/// `run` on them, and after a failed run `NAME: FAILED: why` and [`EXIT_FAILED`], after one
/// that succeeded [`EXIT_OK`]. The lines go to `say`.
pub fn exit_with<O, P: Display, R: Display>(
    name: &str,
    opts: Result<O, P>,
    run: impl FnOnce(O) -> Result<(), R>,
    mut say: impl FnMut(Arguments<'_>),
) -> i32 {
    let o = match opts {
        Ok(o) => o,
        Err(e) => {
            say(format_args!("{name}: {e}"));
            return EXIT_USAGE;
        }
    };
    match run(o) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            say(format_args!("{name}: FAILED: {e}"));
            EXIT_FAILED
        }
    }
}

/// Why an option of an rdma-core tool's command line (`pingpong`'s, `perftest`'s) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionError<'a> {
    /// An option that takes a value, at the end of the line.
    NeedsValue(&'a str),
    /// An option's value is not what it takes.
    Value {
        /// The option, as the tool spells it (`-s`).
        opt: &'static str,
        /// Its value.
        value: &'a str,
        /// What it takes.
        want: Want,
    },
    /// An option the tool does not know.
    Unknown(&'a str),
    /// The launcher's `role=` is neither `server` nor `client`.
    Role(crate::oob::RoleError<'a>),
}

/// What an option's value must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// A number from `min` to `max`: `what` names it ("a size").
    Range {
        /// What the number is, with its article.
        what: &'static str,
        /// The least.
        min: u64,
        /// The most.
        max: u64,
    },
    /// What the tool's own words say it takes.
    Words(&'static str),
}

impl Display for Want {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Want::Range { what, min, max } => write!(f, "{what} from {min} to {max}"),
            Want::Words(w) => f.write_str(w),
        }
    }
}

impl Display for OptionError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OptionError::NeedsValue(opt) => write!(f, "{opt} needs a value"),
            OptionError::Value { opt, value, want } => write!(f, "{opt} {value}: not {want}"),
            OptionError::Unknown(opt) => write!(f, "unknown option {opt}"),
            OptionError::Role(e) => write!(f, "{e}"),
        }
    }
}

impl<'a> From<crate::oob::RoleError<'a>> for OptionError<'a> {
    fn from(e: crate::oob::RoleError<'a>) -> Self {
        OptionError::Role(e)
    }
}

#[cfg(target_os = "none")]
pub use kernel_app::*;

/// The unikernel's side: the console, the HCA.
#[cfg(target_os = "none")]
mod kernel_app {
    use core::fmt::Display;

    use mlx5::{Context, ContextConfig, CounterSet};
    use mlx5_kernel::{KernelHal, OpenError};

    /// [`super::exit_with`] with its lines on the console: what an app's `main()` returns.
    pub fn exit<O, P: Display, R: Display>(
        name: &str,
        opts: Result<O, P>,
        run: impl FnOnce(O) -> Result<(), R>,
    ) -> i32 {
        super::exit_with(name, opts, run, |a| kernel::println!("{a}"))
    }

    /// The unikernel's HCA.
    pub type Hca = Context<KernelHal>;

    /// Why the HCA around a run failed: opening it, bringing it up, or its teardown.
    #[derive(Debug)]
    pub enum HcaError {
        /// No mlx5 function to open.
        Open(OpenError),
        /// The HCA's bring-up failed.
        BringUp(mlx5::Error),
        /// The HCA's teardown was refused.
        Teardown(mlx5::Error),
    }

    impl Display for HcaError {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            match self {
                HcaError::Open(e) => write!(f, "no mlx5 function: {e:?}"),
                HcaError::BringUp(e) => write!(f, "bring-up: {e:?}"),
                HcaError::Teardown(e) => write!(f, "teardown refused: {e:?}"),
            }
        }
    }

    /// Runs `app` on the first mlx5 function, brought up with the default configuration.
    /// After a run that succeeded the HCA is closed (a refused teardown is the run's error);
    /// after one that failed it is dropped as the failure left it (the app has printed what
    /// it found; the run's error is what it ends with).
    pub fn with_hca<T, E: From<HcaError>>(app: impl FnOnce(&Hca) -> Result<T, E>) -> Result<T, E> {
        let hal = mlx5_kernel::open_first(None).map_err(HcaError::Open)?;
        let dev = Context::open(hal, ContextConfig::default()).map_err(HcaError::BringUp)?;
        let t = app(&dev)?;
        dev.close().map_err(|r| HcaError::Teardown(r.error))?;
        Ok(t)
    }

    /// [`with_hca`] for an app `name` that finds faults by counters: `app` gets a Q counter
    /// set for its QP (QPC counter_set_id, as Linux mlx5_ib; none when the HCA has no set
    /// left), and when the run fails the port's counters and the set's are printed
    /// ([`crate::oob::print_counters`]).
    pub fn with_counted_hca<T, E: From<HcaError>>(
        name: &str,
        app: impl FnOnce(&Hca, Option<&CounterSet<KernelHal>>) -> Result<T, E>,
    ) -> Result<T, E> {
        with_hca(|dev| {
            let set = dev.alloc_counter_set().ok();
            let r = app(dev, set.as_ref());
            if r.is_err() {
                crate::oob::print_counters(name, dev, set.as_ref());
            }
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use std::string::{String, ToString};
    use std::vec::Vec;

    use super::*;

    fn ends(opts: Result<u32, &str>, run: Result<(), &str>) -> (i32, Vec<String>) {
        let mut lines = Vec::new();
        let code = exit_with(
            "tool",
            opts,
            |o| {
                assert_eq!(o, 7);
                run
            },
            |a| lines.push(a.to_string()),
        );
        (code, lines)
    }

    #[test]
    fn an_app_ends_with_its_status_and_line() {
        assert_eq!(ends(Ok(7), Ok(())), (EXIT_OK, Vec::new()));
        assert_eq!(
            ends(Ok(7), Err("no completion")),
            (
                EXIT_FAILED,
                ["tool: FAILED: no completion".to_string()].into()
            )
        );
        // The run does not start when the options are refused.
        assert_eq!(
            ends(Err("unknown option -x"), Ok(())),
            (EXIT_USAGE, ["tool: unknown option -x".to_string()].into())
        );
    }

    #[test]
    fn option_errors_read_as_the_tools_did() {
        let want = Want::Range {
            what: "a size",
            min: 1,
            max: 4096,
        };
        let e = OptionError::Value {
            opt: "-s",
            value: "8192",
            want,
        };
        assert_eq!(e.to_string(), "-s 8192: not a size from 1 to 4096");
        assert_eq!(
            OptionError::NeedsValue("-n").to_string(),
            "-n needs a value"
        );
        assert_eq!(OptionError::Unknown("-x").to_string(), "unknown option -x");
        let role = crate::oob::cmdline_role("role=both").unwrap_err();
        assert_eq!(
            OptionError::from(role).to_string(),
            "role=both: not server or client"
        );
    }
}
