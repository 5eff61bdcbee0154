//! The duration clock (`-D`) and the TSC.

use super::*;

/// The duration clock (`-D`), as perftest's `catch_alarm` states: `margin` seconds of warm-up,
/// the sample, `margin` seconds of cool-down, the end.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Start,
    Sample,
    StopSample,
    End,
}

#[derive(Clone, Copy)]
pub(crate) struct Clock {
    pub(crate) t0: Instant,
    pub(crate) margin: Duration,
    pub(crate) dur: Duration,
}

impl Clock {
    pub(crate) fn start(secs: u64, margin: u64) -> Clock {
        Clock {
            t0: Instant::now(),
            margin: Duration::from_secs(margin),
            dur: Duration::from_secs(secs),
        }
    }
    pub(crate) fn phase(&self) -> Phase {
        let t = self.t0.elapsed();
        if t < self.margin {
            Phase::Start
        } else if t < self.dur - self.margin {
            Phase::Sample
        } else if t < self.dur {
            Phase::StopSample
        } else {
            Phase::End
        }
    }
    /// The sample's length in microseconds.
    pub(crate) fn sample_us(&self) -> f64 {
        (self.dur - 2 * self.margin).as_secs_f64() * 1e6
    }
}

/// TSC ticks per microsecond.
pub(crate) fn ticks_per_us() -> f64 {
    kernel::time::tsc_hz() as f64 / 1e6
}

pub(crate) fn now() -> u64 {
    Instant::now().ticks()
}
