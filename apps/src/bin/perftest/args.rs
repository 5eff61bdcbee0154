//! The command line: the tool, its options, perftest's defaults and refusals.

use apps::app::{OptionError, Want};

use super::*;

/// perftest_parameters.h `MAX_SIZE`: the largest size of `-a`.
pub(crate) const MAX_SIZE: u64 = 1 << 23;
/// perftest_parameters.h `MIN_ITER`.
pub(crate) const MIN_ITER: u64 = 5;
/// This side's cap on `-n` (a timestamp per iteration).
pub(crate) const MAX_ITERS: u64 = 1 << 20;
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Verb {
    Write,
    Read,
    Send,
    Atomic,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum AtomicOp {
    FetchAdd,
    CmpSwap,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Test {
    Bw,
    Lat,
}

pub(crate) struct Opts {
    pub(crate) tool: &'static str,
    pub(crate) verb: Verb,
    pub(crate) test: Test,
    pub(crate) atomic: AtomicOp,
    pub(crate) size: u64,
    pub(crate) iters: u64,
    pub(crate) mtu: u8,
    pub(crate) client: bool,
    pub(crate) all: bool,
    /// `-D`: seconds, and the margin (`-f`, default a quarter of it).
    pub(crate) duration: Option<(u64, u64)>,
    pub(crate) events: bool,
    /// `-u`: the local ACK timeout exponent (4.096 us << u), perftest's default 14.
    pub(crate) qp_timeout: u8,
    /// perftest's `rx_depth`: the receives a SEND tool keeps posted
    /// ([`rdma_checks::recv_ring::send_rx_depth`]); `DEF_RX_RDMA` (1) for the others, which
    /// post none.
    pub(crate) rx_depth: u64,
    /// `-p`: the TCP port of the exchange, or with `-R` the rdma_cm port both connections
    /// use.
    pub(crate) port: u16,
    /// `-R`: both the exchange and the test's QP are rdma_cm connections (perftest's
    /// `work_rdma_cm`, which turns on `use_rdma_cm` too: perftest_parameters.c
    /// `force_dependecies`).
    pub(crate) rdma_cm: bool,
}

impl Opts {
    /// The sizes of the run: every power of two from 2 to 2^23 with `-a`.
    pub(crate) fn sizes(&self) -> Vec<u64> {
        if self.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else {
            alloc::vec![self.size]
        }
    }

    pub(crate) fn max_size(&self) -> u64 {
        if self.all {
            MAX_SIZE
        } else {
            self.size
        }
    }
}

/// Why the command line was refused.
#[derive(Debug)]
pub(crate) enum ArgsError<'a> {
    /// No tool word.
    NoTool,
    /// A tool this side does not play.
    Tool(&'a str),
    /// An option or its value.
    Option(OptionError<'a>),
    /// Options perftest does not take together or with this tool (perftest_parameters.c
    /// `parser`, `force_dependecies`).
    Conflict(Conflict),
}

/// Options perftest refuses together, in its words.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Conflict {
    /// `-A` with another tool than ib_atomic_bw.
    AtomicOnly,
    /// `-e` with a WRITE tool (`parser` 'e').
    EventsOnWrite,
    /// `-s` or `-a` with ib_atomic_bw.
    AtomicSize,
    /// `-D` with `-a`.
    DurationAll,
    /// `-D` with `-e`.
    DurationEvents,
    /// `-D` not more than twice the margin (`-f`).
    Margin,
}

impl core::fmt::Display for ArgsError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArgsError::NoTool => write!(f, "which tool? (perftest ib_write_bw|ib_read_bw|ib_send_bw|ib_atomic_bw|ib_*_lat ...)"),
            ArgsError::Tool(t) => write!(f, "{t}: not supported (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat)"),
            ArgsError::Option(e) => write!(f, "{e}"),
            ArgsError::Conflict(c) => f.write_str(match c {
                Conflict::AtomicOnly => "-A: atomic tests only",
                Conflict::EventsOnWrite => "-e: events feature not available on WRITE verb",
                Conflict::AtomicSize => "message size cannot be changed for atomic tests (-s, -a)",
                Conflict::DurationAll => "duration mode (-D) doesn't support running on all sizes (-a)",
                Conflict::DurationEvents => "duration mode (-D) doesn't work with events (-e)",
                Conflict::Margin => "please check that DURATION > 2*MARGIN",
            }),
        }
    }
}

impl<'a> From<OptionError<'a>> for ArgsError<'a> {
    fn from(e: OptionError<'a>) -> Self {
        ArgsError::Option(e)
    }
}

pub(crate) fn parse(cmdline: &str) -> Result<Opts, ArgsError<'_>> {
    let args = oob::tool_args(cmdline, "perftest");
    let mut it = args.iter();
    let (tool, verb, test) = match it.next().copied() {
        Some("ib_write_bw") => ("ib_write_bw", Verb::Write, Test::Bw),
        Some("ib_read_bw") => ("ib_read_bw", Verb::Read, Test::Bw),
        Some("ib_send_bw") => ("ib_send_bw", Verb::Send, Test::Bw),
        Some("ib_atomic_bw") => ("ib_atomic_bw", Verb::Atomic, Test::Bw),
        Some("ib_write_lat") => ("ib_write_lat", Verb::Write, Test::Lat),
        Some("ib_read_lat") => ("ib_read_lat", Verb::Read, Test::Lat),
        Some("ib_send_lat") => ("ib_send_lat", Verb::Send, Test::Lat),
        Some(t) => return Err(ArgsError::Tool(t)),
        None => return Err(ArgsError::NoTool),
    };
    let mut o = Opts {
        tool,
        verb,
        test,
        atomic: AtomicOp::FetchAdd,
        size: match (verb, test) {
            (Verb::Atomic, _) => 8,
            (_, Test::Bw) => 65536,
            (_, Test::Lat) => 2,
        },
        iters: if (verb, test) == (Verb::Write, Test::Bw) {
            5000
        } else {
            1000
        },
        mtu: 3,
        client: false,
        all: false,
        duration: None,
        events: false,
        qp_timeout: 14,
        rx_depth: 1,
        port: oob::TOOL_PORT,
        rdma_cm: false,
    };
    let mut margin: Option<u64> = None;
    let bad = |opt, value, want| OptionError::Value { opt, value, want };
    let words = Want::Words;
    while let Some(a) = it.next() {
        let mut val = |name| it.next().copied().ok_or(OptionError::NeedsValue(name));
        match *a {
            "-s" | "--size" => {
                let v = val("-s")?;
                o.size = oob::parse_num(v)
                    .filter(|&n| n > 0 && n <= MAX_SIZE)
                    .ok_or(bad("-s", v, words("a size from 1 to 8M")))?;
            }
            "-n" | "--iters" => {
                let v = val("-n")?;
                o.iters = oob::parse_num(v)
                    .filter(|&n| (MIN_ITER..=MAX_ITERS).contains(&n))
                    .ok_or(bad(
                        "-n",
                        v,
                        Want::Range {
                            what: "a count",
                            min: MIN_ITER,
                            max: MAX_ITERS,
                        },
                    ))?;
            }
            "-m" | "--mtu" => {
                let v = val("-m")?;
                o.mtu = oob::parse_num(v).and_then(oob::mtu_enum).ok_or(bad(
                    "-m",
                    v,
                    words("256..4096"),
                ))?;
            }
            "-A" | "--atomic_type" => {
                let v = val("-A")?;
                if verb != Verb::Atomic {
                    return Err(ArgsError::Conflict(Conflict::AtomicOnly));
                }
                o.atomic = match v {
                    "FETCH_AND_ADD" => AtomicOp::FetchAdd,
                    "CMP_AND_SWAP" => AtomicOp::CmpSwap,
                    _ => return Err(bad("-A", v, words("FETCH_AND_ADD or CMP_AND_SWAP")).into()),
                };
            }
            "-D" | "--duration" => {
                let v = val("-D")?;
                let d = oob::parse_num(v)
                    .filter(|&n| n > 0 && n <= 3600)
                    .ok_or(bad("-D", v, words("1..3600 seconds")))?;
                o.duration = Some((d, 0));
            }
            "-f" | "--margin" => {
                let v = val("-f")?;
                margin =
                    Some(oob::parse_num(v).ok_or(bad("-f", v, words("a number of seconds")))?);
            }
            "-p" | "--port" => {
                let v = val("-p")?;
                o.port = oob::parse_port(v).ok_or(bad("-p", v, words("a TCP port")))?;
            }
            "-x" | "--gid-index" | "-d" | "--ib-dev" | "-i" | "--ib-port" => {
                val(a)?;
            }
            "-u" | "--qp-timeout" => {
                let v = val("-u")?;
                o.qp_timeout =
                    oob::parse_num(v)
                        .filter(|&n| n <= 31)
                        .ok_or(bad("-u", v, words("0..31")))? as u8;
            }
            "-F" | "--CPU-freq" => {}
            "-R" | "--rdma_cm" => o.rdma_cm = true,
            "-a" | "--all" => o.all = true,
            "-e" | "--events" => {
                // perftest_parameters.c parser 'e'.
                if verb == Verb::Write {
                    return Err(ArgsError::Conflict(Conflict::EventsOnWrite));
                }
                o.events = true;
            }
            s if s.starts_with('-') => return Err(OptionError::Unknown(s).into()),
            _ => o.client = true,
        }
    }
    // force_dependecies.
    if verb == Verb::Atomic && (o.size != 8 || o.all) {
        return Err(ArgsError::Conflict(Conflict::AtomicSize));
    }
    if let Some((d, _)) = o.duration {
        if o.all {
            return Err(ArgsError::Conflict(Conflict::DurationAll));
        }
        if o.events {
            return Err(ArgsError::Conflict(Conflict::DurationEvents));
        }
        let m = margin.unwrap_or(d / 4);
        if d <= 2 * m {
            return Err(ArgsError::Conflict(Conflict::Margin));
        }
        o.duration = Some((d, m));
    }
    if verb == Verb::Send {
        o.rx_depth = send_rx_depth(
            if o.duration.is_some() {
                None
            } else {
                Some(o.iters)
            },
            o.all,
        );
    }
    if let Some(client) = oob::cmdline_role(cmdline).map_err(OptionError::from)? {
        o.client = client;
    }
    Ok(o)
}
