//! The figures: `print_report_bw` and `print_report_lat` (and their `-D` forms).

use super::*;

/// perftest_parameters.c `print_report_lat`: the largest deltas left out.
pub(crate) const LAT_MEASURE_TAIL: usize = 2;
pub(crate) const MB: f64 = 1_048_576.0;

/// The figures of `print_report_bw`: (size, iterations, BW peak MB/s, BW average MB/s, Mpps).
#[derive(Clone, Copy, Default)]
pub(crate) struct Report {
    pub(crate) size: u64,
    pub(crate) iters: u64,
    pub(crate) peak: f64,
    pub(crate) avg: f64,
    pub(crate) rate: f64,
}

pub(crate) const RESULT_LINE: &str =
    "---------------------------------------------------------------------------------------";

pub(crate) fn print_bw_header() {
    println!("{RESULT_LINE}");
    println!(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
}

pub(crate) fn print_bw_line(r: &Report) {
    println!(
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        r.size, r.iters, r.peak, r.avg, r.rate
    );
}

/// `print_report_bw` over per-WR post and completion times (every WR signaled).
pub(crate) fn bw_report(size: u64, tp: &[u64], tc: &[u64]) -> Report {
    let n = tc.len().min(tp.len());
    if n == 0 {
        return Report {
            size,
            ..Report::default()
        };
    }
    let tpu = ticks_per_us();
    let total_us = (tc[n - 1].saturating_sub(tp[0])) as f64 / tpu;
    let secs = (total_us / 1e6).max(1e-9);
    let avg = (size * n as u64) as f64 / secs / MB;
    // perftest: no peak above 20000 iterations.
    let peak = if n > 20000 {
        0.0
    } else {
        let mut opt = tc[0].saturating_sub(tp[0]);
        for (i, &p) in tp[..n].iter().enumerate() {
            for (j, &c) in tc[..n].iter().enumerate().skip(i) {
                opt = opt.min(c.saturating_sub(p) / (j - i + 1) as u64);
            }
        }
        if opt == 0 {
            0.0
        } else {
            size as f64 / (opt as f64 / tpu / 1e6) / MB
        }
    };
    Report {
        size,
        iters: n as u64,
        peak,
        avg,
        rate: n as f64 / secs / 1e6,
    }
}

pub(crate) fn duration_report(size: u64, iters: u64, clock: &Clock) -> Report {
    let secs = clock.sample_us() / 1e6;
    Report {
        size,
        iters,
        peak: 0.0,
        avg: (size * iters) as f64 / secs / MB,
        rate: iters as f64 / secs / 1e6,
    }
}

pub(crate) fn print_lat_header(o: &Opts) {
    println!("{RESULT_LINE}");
    if o.duration.is_some() {
        println!(" #bytes        #iterations       t_avg[usec]    tps average");
    } else {
        println!(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ");
    }
}

pub(crate) fn ceil(x: f64) -> usize {
    let t = x as usize;
    if (t as f64) < x {
        t + 1
    } else {
        t
    }
}

pub(crate) fn sqrt(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let mut g = if x > 1.0 { x / 2.0 } else { 1.0 };
    for _ in 0..100 {
        let n = 0.5 * (g + x / g);
        if (n - g).abs() <= 1e-12 * n {
            return n;
        }
        g = n;
    }
    g
}

/// `print_report_lat`: the deltas between consecutive posts, in microseconds divided by
/// `rtt_factor` (2 for WRITE and SEND, whose deltas are round trips).
pub(crate) fn print_lat(size: u64, iters: u64, tp: &[u64], rtt_factor: f64) {
    if tp.len() < 2 + LAT_MEASURE_TAIL + 1 {
        println!(" {size:<7} {iters}          (too few iterations for a latency report)");
        return;
    }
    let mut delta: Vec<u64> = tp.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    delta.sort_unstable();
    let mc = delta.len() - LAT_MEASURE_TAIL;
    // get_median.
    let median = if !(mc - 1).is_multiple_of(2) {
        (delta[mc / 2] + delta[mc / 2 - 1]) / 2
    } else {
        delta[mc / 2]
    };
    let q = ticks_per_us() * rtt_factor;
    let avg = delta[..mc].iter().map(|&d| d as f64 / q).sum::<f64>() / mc as f64;
    // perftest squares an int-truncated difference.
    let var: f64 = delta[..mc]
        .iter()
        .map(|&d| {
            let t = (avg - d as f64 / q) as i64;
            (t * t) as f64
        })
        .sum();
    let stdev = sqrt(var / mc as f64);
    let i99 = ceil(mc as f64 * 0.99);
    let i999 = ceil(mc as f64 * 0.999);
    println!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        size,
        iters,
        delta[0] as f64 / q,
        delta[mc] as f64 / q,
        median as f64 / q,
        avg,
        stdev,
        delta[i99] as f64 / q,
        delta[i999] as f64 / q
    );
}

/// `print_report_lat_duration`.
pub(crate) fn print_lat_duration(size: u64, iters: u64, clock: &Clock, rtt_factor: f64) {
    let us = clock.sample_us();
    let lat = if iters == 0 {
        0.0
    } else {
        us / rtt_factor / iters as f64
    };
    let tps = iters as f64 / (us / 1e6);
    println!(" {size:<7}       {iters}            {lat:<7.2}        {tps:<7.2}");
}
