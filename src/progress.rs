//! Progress of the launcher's long steps: building the image and `mlx5-sim`, fetching and
//! building the Linux peer image, waiting for a guest. Shown on stderr only when it is a
//! terminal, and never after [`set_quiet`] (`-q`) or with `MLX5_QUIET` set.
//!
//! A [`Step`] that ends within [`SHOW_AFTER`] prints nothing, so a cached build stays silent.
//! Lines are whole lines (no carriage-return animation), because guest output may be
//! interleaved with them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static QUIET: AtomicBool = AtomicBool::new(false);

/// How long a step runs before it is announced.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);
/// How often a running step says it still runs.
pub const TICK: Duration = Duration::from_secs(15);

/// `-q`: no progress from now on.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether progress is shown: stderr is a terminal, no `-q`, no `MLX5_QUIET`.
pub fn enabled() -> bool {
    use std::io::IsTerminal;
    !QUIET.load(Ordering::Relaxed)
        && std::env::var_os("MLX5_QUIET").is_none()
        && std::io::stderr().is_terminal()
}

/// Prints one progress line (`launcher: MSG`) when progress is [`enabled`].
pub fn note(msg: impl std::fmt::Display) {
    if enabled() {
        eprintln!("launcher: {msg}");
    }
}

/// A long step in progress: announced once it has run for [`SHOW_AFTER`], then every [`TICK`],
/// and its duration printed when it is dropped (only if it was announced).
pub struct Step {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Step {
    /// Starts timing `what` (e.g. "building the image `rdma`"). Does nothing when progress is
    /// not [`enabled`].
    pub fn start(what: impl Into<String>) -> Step {
        if !enabled() {
            return Step {
                stop: None,
                thread: None,
            };
        }
        let what = what.into();
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut wait = SHOW_AFTER;
            let mut shown = false;
            // Ends when the Step is dropped (the sender goes away) or stopped.
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                if shown {
                    eprintln!(
                        "launcher: {what}: still running ({} s)",
                        t0.elapsed().as_secs()
                    );
                } else {
                    eprintln!("launcher: {what} ...");
                    shown = true;
                }
                wait = TICK;
            }
            if shown {
                eprintln!("launcher: {what}: {:.1} s", t0.elapsed().as_secs_f64());
            }
        });
        Step {
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_means_no_progress() {
        set_quiet(true);
        assert!(!enabled());
        // A step that is not shown starts no thread.
        let s = Step::start("nothing");
        assert!(s.thread.is_none());
        set_quiet(false);
    }
}
