//! What `pingpong` (rc_pingpong's other side) and `ud-pingpong` (ud_pingpong's) share: the
//! tools' options, the TCP exchange of rdma-core's libibverbs/examples
//! (`pp_client_exch_dest` / `pp_server_exch_dest`, the same in rc_pingpong.c and
//! ud_pingpong.c), a side's messages and the check of a received one.

use alloc::format;
use alloc::vec::Vec;
use core::time::Duration;

use mlx5::QpEndpoint;

use crate::app::{OptionError, Want};
use crate::oob;

/// The options of rdma-core's pingpong examples that this side takes (the tools' own
/// spelling, `getopt_long` in rc_pingpong.c and ud_pingpong.c `main`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opts {
    /// `-s`: the message size.
    pub size: u32,
    /// `-n`: the exchanges.
    pub iters: u64,
    /// `-m` (rc_pingpong only): the path MTU as the rdma-core enum (`IBV_MTU_256` = 1 ..
    /// `IBV_MTU_4096` = 5).
    pub mtu: u8,
    /// `-r`: the receives kept posted.
    pub rx_depth: u32,
    /// A `SERVER` word (or `role=client`): this side is the client.
    pub client: bool,
    /// `-p`: the TCP port of the exchange.
    pub port: u16,
}

/// What tells the tools' options apart.
pub struct Tool {
    /// The app's name (the cmdline's first word, skipped).
    pub app: &'static str,
    /// The largest `-s`.
    pub max_size: u32,
    /// Whether `-m` is an option (rc_pingpong's; ud_pingpong has none).
    pub mtu: bool,
}

/// `tool`'s options on `cmdline`, over the defaults `o`. The device, GID index, port and
/// service level (`-d`, `-g`, `-i`, `-l`) are accepted and ignored (they are `ip=`'s), as are
/// `-e` (this side polls) and `-c` (this side checks every byte always). The launcher's
/// `role=` wins over a `SERVER` word.
pub fn parse<'a>(cmdline: &'a str, tool: &Tool, mut o: Opts) -> Result<Opts, OptionError<'a>> {
    let args = oob::tool_args(cmdline, tool.app);
    let mut it = args.iter();
    let range = |what, min, max| Want::Range { what, min, max };
    while let Some(a) = it.next() {
        let mut val = |name: &'a str| it.next().copied().ok_or(OptionError::NeedsValue(name));
        let bad = |opt, value, want| OptionError::Value { opt, value, want };
        match *a {
            "-s" | "--size" => {
                let v = val("-s")?;
                let max = tool.max_size;
                o.size = oob::parse_num(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0 && n <= max)
                    .ok_or(bad("-s", v, range("a size", 1, max.into())))?;
            }
            "-n" | "--iters" => {
                let v = val("-n")?;
                o.iters = oob::parse_num(v).filter(|&n| n > 0).ok_or(bad(
                    "-n",
                    v,
                    Want::Words("a count"),
                ))?;
            }
            "-m" | "--mtu" if tool.mtu => {
                let v = val("-m")?;
                o.mtu = oob::parse_num(v).and_then(oob::mtu_enum).ok_or(bad(
                    "-m",
                    v,
                    Want::Words("256, 512, 1024, 2048 or 4096"),
                ))?;
            }
            "-r" | "--rx-depth" => {
                let v = val("-r")?;
                o.rx_depth = oob::parse_num(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| (2..=4096).contains(&n))
                    .ok_or(bad("-r", v, range("a depth", 2, 4096)))?;
            }
            "-p" | "--port" => {
                let v = val("-p")?;
                o.port = oob::parse_port(v).ok_or(bad("-p", v, Want::Words("a TCP port")))?;
            }
            "-d" | "-g" | "-i" | "-l" | "--ib-dev" | "--gid-idx" | "--ib-port" | "--sl" => {
                val(a)?;
            }
            "-e" | "--events" | "-c" | "--chk" => {}
            s if s.starts_with('-') => return Err(OptionError::Unknown(s)),
            _ => o.client = true,
        }
    }
    if let Some(client) = oob::cmdline_role(cmdline)? {
        o.client = client;
    }
    Ok(o)
}

/// The length of the exchange's message: `sizeof "0000:000000:000000:" + 32 hex digits`,
/// its NUL included.
pub const DEST_MSG_LEN: usize = 52;

/// The 52-byte message of rc_pingpong.c `pp_*_exch_dest`.
pub fn dest_msg(ep: &QpEndpoint) -> Vec<u8> {
    let mut m = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        0,
        ep.qpn,
        ep.psn,
        oob::hex(&ep.gid)
    )
    .into_bytes();
    m.push(0);
    m
}

/// Parses the peer's message (`sscanf(msg, "%x:%x:%x:%s")` + `wire_gid_to_gid`); the MAC
/// is not in it (zero).
pub fn parse_dest(m: &[u8]) -> Option<QpEndpoint> {
    let s = core::str::from_utf8(m.split(|&b| b == 0).next()?).ok()?;
    let mut f = s.split(':');
    let _lid = u32::from_str_radix(f.next()?, 16).ok()?;
    let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
    let psn = u32::from_str_radix(f.next()?, 16).ok()?;
    let g = oob::unhex(f.next()?)?;
    Some(QpEndpoint {
        qpn,
        psn,
        gid: g.try_into().ok()?,
        mac: [0; 6],
    })
}

/// Message `k` of a side: `base` with `k`'s key XORed into every 8-byte word, made a word at a
/// time (byte loops cost a microsecond an iteration under an instruction-emulating KVM).
pub fn message(base: &[u8], k: u64) -> Vec<u8> {
    let mut v = base.to_vec();
    let key = (k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for w in v.chunks_exact_mut(8) {
        let x = u64::from_ne_bytes(w.try_into().unwrap_or([0; 8])) ^ key;
        w.copy_from_slice(&x.to_ne_bytes());
    }
    v
}

/// The index of the first byte where `a` and `b` differ (or where one ends), comparing a word
/// at a time and bytes only in the word that differs and in the tail.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let n = a.len().min(b.len());
    let words = n / 8;
    let w = (0..words)
        .find(|&j| a[j * 8..j * 8 + 8] != b[j * 8..j * 8 + 8])
        .unwrap_or(words);
    (w * 8..n)
        .find(|&i| a[i] != b[i])
        .or((a.len() != b.len()).then_some(n))
}

/// How long a side waits for its peer's next step (a completion, a message of the exchange).
pub const WAIT: Duration = Duration::from_secs(120);

#[cfg(target_os = "none")]
pub use run_error::Error;

#[cfg(target_os = "none")]
pub use kernel_steps::*;

/// The steps both bins take the same way in the unikernel.
#[cfg(target_os = "none")]
mod kernel_steps {
    use kernel::println;
    use kernel::time::Instant;
    use mlx5::{CompletionQueue, QpEndpoint, WcStatus, WorkCompletion};
    use mlx5_kernel::KernelHal;

    use super::{parse_dest, Error, Opts, DEST_MSG_LEN, WAIT};
    use crate::oob::Oob;

    /// The peer's endpoint (`pp_*_exch_dest`): its message read from `link` and parsed, with
    /// its MAC by ARP for its GID's address. `client`: this side is the client (the peer the
    /// server).
    pub fn read_remote(link: &mut Oob, client: bool) -> Result<QpEndpoint, Error<'static>> {
        let (who, reading, mac) = if client {
            ("server", "reading the server's address", "the server's MAC")
        } else {
            ("client", "reading the client's address", "the client's MAC")
        };
        let m = link
            .recv(DEST_MSG_LEN)
            .map_err(|e| Error::Oob(reading, e))?;
        let mut rem = parse_dest(&m).ok_or(Error::Garbled(who))?;
        rem.mac = link.peer_mac(&rem.gid).map_err(|e| Error::Oob(mac, e))?;
        Ok(rem)
    }

    /// The figures of rc_pingpong.c and ud_pingpong.c `main` for the run of `o` that began at
    /// `t0`.
    pub fn print_figures(o: &Opts, t0: Instant) {
        let usec = crate::oob::secs(t0) * 1e6;
        let bytes = o.size as u64 * o.iters * 2;
        println!(
            "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
            usec / 1e6,
            bytes as f64 * 8.0 / usec
        );
        println!(
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            o.iters,
            usec / 1e6,
            usec / o.iters as f64
        );
    }

    /// The next completion of `cq` within [`WAIT`], the stack under `link` kept polled, after
    /// `sent` SENDs and `received` messages; a completion in error fails the run.
    pub fn next_completion(
        link: &mut Oob,
        cq: &mut CompletionQueue<KernelHal>,
        sent: u64,
        received: u64,
    ) -> Result<WorkCompletion, Error<'static>> {
        let wcs = link.poll_cq(cq, 1, WAIT).map_err(|err| Error::Poll {
            sent,
            received,
            err,
        })?;
        let wc = *wcs.first().ok_or(Error::NoCompletion { sent, received })?;
        if wc.status != WcStatus::Success {
            return Err(Error::Completion {
                wr_id: wc.wr_id,
                status: wc.status,
                vendor_err: wc.vendor_err,
            });
        }
        Ok(wc)
    }
}

/// Why a run of `pingpong` or `ud-pingpong` failed.
#[cfg(target_os = "none")]
mod run_error {
    use mlx5::{WcFlags, WcStatus};

    use super::WAIT;
    use crate::app::HcaError;
    use crate::oob::OobError;
    use crate::stack::{NetArgsError, NodeError};

    /// Why a run failed: the step, with the typed error of the layer under it.
    #[derive(Debug)]
    pub enum Error<'a> {
        /// A network word of the cmdline.
        NetArgs(NetArgsError<'a>),
        /// Opening, bringing up or closing the HCA.
        Hca(HcaError),
        /// A call of the driver failed: which one.
        Verbs(&'static str, mlx5::Error),
        /// The network did not come up.
        Node(NodeError),
        /// The TCP exchange failed: what it was doing.
        Oob(&'static str, OobError),
        /// The registered region of `-s` and the receive slots does not fit the address space.
        TooLarge(u64),
        /// `-s` larger than the port's active MTU (ud_pingpong.c `pp_init_ctx`).
        SizeAboveMtu(u32),
        /// The peer's address message does not parse: whose.
        Garbled(&'static str),
        /// The client's last message was not `"done"`.
        NoDone,
        /// Posting SEND `k` failed: the call (`post_send`, `post_ud_send`), `k`, the driver's
        /// error.
        PostSend(&'static str, u64, mlx5::Error),
        /// Polling the CQ failed, after `sent` SENDs and `received` messages.
        Poll {
            /// SENDs completed.
            sent: u64,
            /// Messages received.
            received: u64,
            /// The driver's error.
            err: mlx5::Error,
        },
        /// No completion within [`WAIT`], after `sent` SENDs and `received` messages.
        NoCompletion {
            /// SENDs completed.
            sent: u64,
            /// Messages received.
            received: u64,
        },
        /// A completion in error.
        Completion {
            /// Its work request.
            wr_id: u64,
            /// Its status.
            status: WcStatus,
            /// The vendor syndrome.
            vendor_err: u8,
        },
        /// Message `n` came with `len` bytes (past the GRH area with `grh`), not `-s`'s.
        Length {
            /// The message.
            n: u64,
            /// Its bytes.
            len: usize,
            /// `-s`.
            size: u32,
            /// A UD message, whose GRH area comes first.
            grh: bool,
        },
        /// Message `n` came from another QP, or without a GRH.
        Source {
            /// The message.
            n: u64,
            /// Its sender's QPN.
            qpn: u32,
            /// The peer's QPN.
            want: u32,
            /// The completion's flags.
            flags: WcFlags,
        },
        /// Message `n`'s GRH area names another IPv4 sender.
        GrhSource {
            /// The message.
            n: u64,
            /// The sender it names.
            from: Option<[u8; 4]>,
            /// The peer's address.
            want: Option<[u8; 4]>,
        },
        /// Message `n`'s byte `at` is `value`, not the expected one.
        Byte {
            /// The message.
            n: u64,
            /// The byte.
            at: usize,
            /// What it is.
            value: u8,
        },
    }

    impl From<HcaError> for Error<'_> {
        fn from(e: HcaError) -> Self {
            Error::Hca(e)
        }
    }

    impl core::fmt::Display for Error<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            match self {
                Error::NetArgs(e) => write!(f, "{e}"),
                Error::Hca(e) => write!(f, "{e}"),
                Error::Verbs(w, e) => write!(f, "{w}: {e:?}"),
                Error::Node(e) => write!(f, "the network: {e:?}"),
                Error::Oob(w, e) => write!(f, "{w}: {e}"),
                Error::TooLarge(b) => {
                    write!(f, "a region of {b} bytes does not fit the address space")
                }
                Error::SizeAboveMtu(mtu) => {
                    write!(f, "Requested size larger than port MTU ({mtu})")
                }
                Error::Garbled(who) => write!(f, "the {who}'s address is garbled"),
                Error::NoDone => write!(f, "the client did not say done"),
                Error::PostSend(call, k, e) => write!(f, "{call} {k}: {e:?}"),
                Error::Poll {
                    sent,
                    received,
                    err,
                } => write!(f, "poll (sent {sent}, received {received}): {err:?}"),
                Error::NoCompletion { sent, received } => write!(
                    f,
                    "no completion in {WAIT:?} (sent {sent}, received {received})"
                ),
                Error::Completion {
                    wr_id,
                    status,
                    vendor_err,
                } => write!(
                    f,
                    "completion {wr_id:#x} in error: {status:?} (vendor syndrome {vendor_err:#x})"
                ),
                Error::Length { n, len, size, grh } => {
                    write!(f, "message {n}: {len} bytes, not {size}")?;
                    if *grh {
                        write!(f, " and the GRH area")?;
                    }
                    Ok(())
                }
                Error::Source {
                    n,
                    qpn,
                    want,
                    flags,
                } => write!(
                    f,
                    "message {n}: from QPN {qpn:#x} (not {want:#x}), flags {flags:?} (no GRH?)"
                ),
                Error::GrhSource { n, from, want } => write!(
                    f,
                    "message {n}: the GRH area names {from:?} as the sender, not {want:?}"
                ),
                Error::Byte { n, at, value } => write!(
                    f,
                    "message {n}: byte {at} is {value:#04x}, not the expected one"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UD: Tool = Tool {
        app: "ud-pingpong",
        max_size: 4096,
        mtu: false,
    };
    const DEFAULTS: Opts = Opts {
        size: 1024,
        iters: 1000,
        mtu: 3,
        rx_depth: 500,
        client: false,
        port: oob::TOOL_PORT,
    };

    #[test]
    fn the_tools_options_parse_and_role_wins() {
        let o = parse(
            "ud-pingpong -d rxe0 -g 1 -s 2048 -n 20 -r 16 -c -p 7000 10.0.0.1 role=server ip=10.0.0.2/24",
            &UD,
            DEFAULTS,
        )
        .unwrap();
        assert_eq!(
            o,
            Opts {
                size: 2048,
                iters: 20,
                rx_depth: 16,
                port: 7000,
                ..DEFAULTS
            }
        );
        let o = parse("ud-pingpong 10.0.0.1", &UD, DEFAULTS).unwrap();
        assert!(o.client);
        assert!(parse("ud-pingpong -s 8192", &UD, DEFAULTS).is_err());
        // -m is rc_pingpong's only.
        assert!(parse("ud-pingpong -m 2048", &UD, DEFAULTS).is_err());
        let rc = Tool {
            app: "pingpong",
            max_size: 1 << 20,
            mtu: true,
        };
        assert_eq!(parse("pingpong -m 2048", &rc, DEFAULTS).unwrap().mtu, 4);
        assert!(parse("pingpong -m 1000", &rc, DEFAULTS).is_err());
        assert!(parse("pingpong -x", &rc, DEFAULTS).is_err());
        assert!(parse("pingpong -s", &rc, DEFAULTS).is_err());
    }

    #[test]
    fn a_refused_option_says_which_and_why() {
        use alloc::string::ToString;
        let err = |cmdline| parse(cmdline, &UD, DEFAULTS).unwrap_err().to_string();
        assert_eq!(
            err("ud-pingpong -s 8192"),
            "-s 8192: not a size from 1 to 4096"
        );
        assert_eq!(err("ud-pingpong -n 0"), "-n 0: not a count");
        assert_eq!(err("ud-pingpong -r 1"), "-r 1: not a depth from 2 to 4096");
        assert_eq!(err("ud-pingpong -p 0"), "-p 0: not a TCP port");
        assert_eq!(err("ud-pingpong -m 2048"), "unknown option -m");
        assert_eq!(err("ud-pingpong -d"), "-d needs a value");
        assert_eq!(
            err("ud-pingpong role=both"),
            "role=both: not server or client"
        );
    }

    #[test]
    fn the_exchange_message_goes_both_ways_in_52_bytes() {
        let ep = QpEndpoint {
            qpn: 0x1234,
            psn: 0xabcdef,
            gid: mlx5::hca::ipv4_mapped_gid([10, 0, 0, 2]),
            mac: [0; 6],
        };
        let m = dest_msg(&ep);
        assert_eq!(m.len(), DEST_MSG_LEN);
        assert_eq!(
            &m[..19],
            b"0000:001234:abcdef:",
            "rc_pingpong's \"%04x:%06x:%06x:%s\""
        );
        assert_eq!(m[DEST_MSG_LEN - 1], 0);
        assert_eq!(parse_dest(&m), Some(ep));
        assert_eq!(parse_dest(b"0000:zz:000000:00\0"), None);
    }

    #[test]
    fn messages_differ_by_count_and_the_difference_is_found() {
        let base: Vec<u8> = (0..100u8).collect();
        let (a, b) = (message(&base, 0), message(&base, 1));
        assert_eq!(a.len(), 100);
        assert_ne!(a[..96], b[..96]);
        // The tail past the last whole word is the base's.
        assert_eq!(a[96..], base[96..]);
        assert_eq!(first_difference(&a, &a), None);
        let mut c = a.clone();
        c[77] ^= 1;
        assert_eq!(first_difference(&a, &c), Some(77));
        assert_eq!(first_difference(&a, &a[..50]), Some(50));
    }
}
