//! The protocol of rdma-core's librdmacm/examples/rping.c, both roles, without the HCA: its
//! options, the advertised buffer (`struct rping_rdma_info`), the client's ping data, and the
//! two sides' loops as machines the `rping` app drives with its completions (and the host tests
//! drive against each other).
//!
//! The loop (rping.c's header comment, `rping_test_client` / `rping_test_server`): the client
//! SENDs its start buffer's address; the server RDMA READs it and SENDs a go-ahead; the client
//! SENDs its sink buffer's address; the server RDMA WRITEs what it read into it and SENDs a
//! go-ahead; the client compares the two buffers (`-V`) and begins again, `-C` times (0: for
//! ever), then disconnects, which ends the server's loop.

use alloc::string::String;
use alloc::vec::Vec;

use crate::getopt::{self, getopt, Opt};

/// The two sides over rdmacm.
pub mod run;

/// rping.c `main`: `cb->port = htobe16(7174)`.
pub const DEFAULT_PORT: u16 = 7174;
/// rping.c `main`: `cb->size = 64`.
pub const DEFAULT_SIZE: u32 = 64;
/// rping.c `RPING_BUFSIZE` (64 KiB): `-S` must stay below it.
pub const BUFSIZE: u32 = 64 * 1024;
/// rping.c `RPING_MIN_BUFSIZE`: `sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)`, with
/// glibc's `INT_MAX` being GCC's `__INT_MAX__`, `0x7fffffff` (11 bytes with the NUL), and
/// `"rdma-ping-%d: "` 15.
pub const MIN_BUFSIZE: u32 = 11 + 15;
/// rping.c `RPING_SQ_DEPTH`: the send queue, and twice it the CQ.
pub const SQ_DEPTH: u32 = 16;
/// `sizeof(struct rping_rdma_info)`: every SEND of rping carries exactly this, and a receive
/// of any other length is "bogus data" (rping.c `server_recv` / `client_recv`).
pub const INFO_BYTES: usize = 16;

/// rping.c `struct rping_rdma_info`: a buffer the peer may READ or WRITE, big-endian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// `buf`: its address in the advertiser's MR.
    pub buf: u64,
    /// `rkey`.
    pub rkey: u32,
    /// `size`: the advertiser's `-S` (rping.c `rping_format_send`).
    pub size: u32,
}

impl Info {
    /// The 16 bytes on the wire (`htobe64`, `htobe32`, `htobe32`).
    pub fn to_bytes(&self) -> [u8; INFO_BYTES] {
        let mut b = [0; INFO_BYTES];
        b[..8].copy_from_slice(&self.buf.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// The info of a received message: None unless it is exactly [`INFO_BYTES`] long.
    pub fn from_bytes(b: &[u8]) -> Option<Info> {
        let b: &[u8; INFO_BYTES] = b.try_into().ok()?;
        let be32 = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Info {
            buf: u64::from_be_bytes(b[..8].try_into().ok()?),
            rkey: be32(8),
            size: be32(12),
        })
    }
}

/// The first letter of the ping data's run (rping.c `rping_test_client`: `start = 65`, 'A').
const FIRST: u8 = 65;
/// The last letter before the run wraps to [`FIRST`] (`if (c > 122) c = 65`, 'z').
const LAST: u8 = 122;

/// The client's start buffer for ping `ping` (rping.c `rping_test_client`): `"rdma-ping-%d: "`,
/// then letters from `'A' + ping` (mod the run 'A'..='z') counting up and wrapping, the last
/// byte NUL. `snprintf` truncates the prefix to fit (it always fits from [`MIN_BUFSIZE`] up).
pub fn ping_data(ping: u32, size: usize) -> Vec<u8> {
    let mut b = alloc::format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size.saturating_sub(1));
    let span = u32::from(LAST - FIRST) + 1;
    let mut c = FIRST + (ping % span) as u8;
    while b.len() < size {
        b.push(c);
        c = if c >= LAST { FIRST } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

/// The C string at the start of `b` (up to its first NUL), for `printf("%s")`.
pub fn c_str(b: &[u8]) -> &[u8] {
    b.split(|&x| x == 0).next().unwrap_or(b)
}

/// rping's options (rping.c `main`: `getopt(argc, argv, "a:I:Pp:C:S:t:scvVdq")`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opts {
    /// `-s` (true) or `-c` (false); the launcher's `role=` wins.
    pub server: bool,
    /// `-a`: the server's address (the client connects to it; the server binds it).
    pub addr: Option<[u8; 4]>,
    /// `-p`: the port (rdma_cm's TCP port space).
    pub port: u16,
    /// `-C`: the pings (0: for ever).
    pub count: u32,
    /// `-S`: the ping data size.
    pub size: u32,
    /// `-v`: print the ping data.
    pub verbose: bool,
    /// `-V`: compare what came back with what went out.
    pub validate: bool,
    /// `-d`: debug lines.
    pub debug: bool,
}

/// The options of the tool words `args`; `role` is the launcher's `role=` (Some(true): client).
/// An `-a` without its value is dropped ([`getopt::drop_valueless`]).
pub fn parse(args: &[&str], role: Option<bool>) -> Result<Opts, String> {
    let args = getopt::drop_valueless(args, 'a');
    let mut o = Opts {
        server: true,
        addr: None,
        port: DEFAULT_PORT,
        count: 0,
        size: DEFAULT_SIZE,
        verbose: false,
        validate: false,
        debug: false,
    };
    let mut side = None;
    for opt in getopt(&args, "a:I:Pp:C:S:t:scvVdq").map_err(|e| alloc::format!("{e}"))? {
        let Opt::Flag(c, v) = opt else { continue };
        let v = v.unwrap_or("");
        let addr = |v: &str| {
            v.parse::<core::net::Ipv4Addr>()
                .map(|a| a.octets())
                .map_err(|_| alloc::format!("-{c} {v}: not an IPv4 address"))
        };
        match c {
            'a' => o.addr = Some(addr(v)?),
            // The source address to bind to: the node's own (ip=) is the only one.
            'I' | 't' => {}
            'p' => {
                o.port = crate::oob::parse_port(v).ok_or(alloc::format!("-p {v}: not a port"))?
            }
            'C' => o.count = getopt::count(v).ok_or(alloc::format!("Invalid count {v}"))?,
            'S' => {
                o.size = getopt::count(v)
                    .filter(|s| (MIN_BUFSIZE..BUFSIZE).contains(s))
                    .ok_or(alloc::format!(
                        "Invalid size {v} (valid range is {MIN_BUFSIZE} to {BUFSIZE})"
                    ))?
            }
            's' => side = Some(true),
            'c' => side = Some(false),
            'v' => o.verbose = true,
            'V' => o.validate = true,
            'd' => o.debug = true,
            'P' => return Err("-P (persistent server) is not supported".into()),
            'q' => return Err("-q (self-created QP) is not supported".into()),
            _ => return Err(alloc::format!("unknown option -{c}")),
        }
    }
    o.server = match (role, side) {
        (Some(client), _) => !client,
        (None, Some(s)) => s,
        (None, None) => return Err("need -s or -c (or role=)".into()),
    };
    Ok(o)
}

/// A step of the protocol the driver of a machine takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// SEND these 16 bytes.
    Send(Info),
    /// RDMA READ `len` bytes of `from` into the sink buffer (server).
    Read {
        /// The peer's buffer.
        from: Info,
        /// Bytes.
        len: u32,
    },
    /// RDMA WRITE the first `len` bytes of the sink buffer into `to` (server).
    Write {
        /// The peer's buffer.
        to: Info,
        /// Bytes.
        len: u32,
    },
    /// Ping `ping` came back: check it (client).
    Returned {
        /// Its number.
        ping: u32,
    },
}

/// What broke the protocol: rping's "wait for ... state" and "Received bogus data" errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// A receive of `len` bytes, not [`INFO_BYTES`].
    Bogus {
        /// Its length.
        len: u32,
    },
    /// An event the side did not wait for (`what` it was).
    OutOfTurn {
        /// The event.
        what: &'static str,
    },
    /// The peer's buffer is larger than this side's sink (`len`, the most it takes).
    TooLarge {
        /// The size advertised.
        len: u32,
        /// The sink's size.
        max: u32,
    },
}

impl core::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProtoError::Bogus { len } => write!(f, "Received bogus data, size {len}"),
            ProtoError::OutOfTurn { what } => write!(f, "{what} out of turn"),
            ProtoError::TooLarge { len, max } => {
                write!(f, "the peer's buffer of {len} B exceeds the sink's {max} B")
            }
        }
    }
}

/// Where the server is in its loop (rping.c `enum test_state`, the server's part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerState {
    /// Waiting for the client's start buffer (`RDMA_READ_ADV` next).
    AwaitStart,
    /// The READ is out.
    Reading,
    /// Waiting for the client's sink buffer (`RDMA_WRITE_ADV` next).
    AwaitSink,
    /// The WRITE is out.
    Writing,
}

/// The server's loop (rping.c `rping_test_server`, `server_recv`).
#[derive(Clone, Debug)]
pub struct Server {
    state: ServerState,
    /// The size of the server's sink buffer.
    sink: u32,
    /// The bytes the last READ brought.
    read_len: u32,
    /// The bytes the next WRITE sends back.
    write_len: u32,
    /// Pings completed.
    pub pings: u32,
}

impl Server {
    /// A server whose sink buffer holds `sink` bytes.
    pub fn new(sink: u32) -> Server {
        Server {
            state: ServerState::AwaitStart,
            sink,
            read_len: 0,
            write_len: 0,
            pings: 0,
        }
    }

    /// The bytes of the READ under way (or the last one).
    pub fn read_len(&self) -> u32 {
        self.read_len
    }

    /// A message arrived: the start buffer (READ it) or the sink (WRITE into it).
    pub fn on_recv(&mut self, msg: &[u8]) -> Result<Step, ProtoError> {
        let len = msg.len() as u32;
        let info = Info::from_bytes(msg).ok_or(ProtoError::Bogus { len })?;
        match self.state {
            ServerState::AwaitStart => {
                if info.size > self.sink {
                    return Err(ProtoError::TooLarge {
                        len: info.size,
                        max: self.sink,
                    });
                }
                self.state = ServerState::Reading;
                self.read_len = info.size;
                Ok(Step::Read {
                    from: info,
                    len: info.size,
                })
            }
            ServerState::AwaitSink => {
                self.state = ServerState::Writing;
                Ok(Step::Write {
                    to: info,
                    len: self.write_len.min(info.size),
                })
            }
            _ => Err(ProtoError::OutOfTurn {
                what: "a buffer advertisement",
            }),
        }
    }

    /// The READ completed and `data` (the sink's first bytes) is what it brought: send the
    /// go-ahead (rping's server sends its never-written `send_buf`, zeros).
    pub fn on_read_done(&mut self, data: &[u8]) -> Result<Step, ProtoError> {
        if self.state != ServerState::Reading {
            return Err(ProtoError::OutOfTurn {
                what: "a READ completion",
            });
        }
        // `strlen(cb->rdma_buf) + 1`: the string read, with its NUL.
        let n = data.len().min(self.read_len as usize);
        self.write_len = (c_str(&data[..n]).len() as u32 + 1).min(self.read_len);
        self.state = ServerState::AwaitSink;
        Ok(Step::Send(Info::default()))
    }

    /// The WRITE completed: send the go-ahead; the ping is done.
    pub fn on_write_done(&mut self) -> Result<Step, ProtoError> {
        if self.state != ServerState::Writing {
            return Err(ProtoError::OutOfTurn {
                what: "a WRITE completion",
            });
        }
        self.state = ServerState::AwaitStart;
        self.pings += 1;
        Ok(Step::Send(Info::default()))
    }
}

/// Where the client is in its loop (rping.c `enum test_state`, the client's part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientState {
    /// Between pings.
    Idle,
    /// The start buffer is advertised; the go-ahead after the READ comes next.
    AwaitRead,
    /// The sink is advertised; the go-ahead after the WRITE comes next.
    AwaitWrite,
}

/// The client's loop (rping.c `rping_test_client`, `client_recv`).
#[derive(Clone, Debug)]
pub struct Client {
    state: ClientState,
    start: Info,
    sink: Info,
    count: u32,
    /// The ping under way (or the next).
    ping: u32,
}

impl Client {
    /// A client that advertises `start` (the READ's source) and `sink` (the WRITE's target)
    /// and pings `count` times (0: for ever).
    pub fn new(start: Info, sink: Info, count: u32) -> Client {
        Client {
            state: ClientState::Idle,
            start,
            sink,
            count,
            ping: 0,
        }
    }

    /// The next ping: its number (fill the start buffer with [`ping_data`] of it) and the
    /// SEND that advertises the start buffer; None once `count` pings came back.
    pub fn begin(&mut self) -> Option<(u32, Step)> {
        if self.state != ClientState::Idle || (self.count != 0 && self.ping >= self.count) {
            return None;
        }
        self.state = ClientState::AwaitRead;
        Some((self.ping, Step::Send(self.start)))
    }

    /// A go-ahead arrived: advertise the sink, or the ping came back.
    pub fn on_recv(&mut self, msg: &[u8]) -> Result<Step, ProtoError> {
        if msg.len() != INFO_BYTES {
            return Err(ProtoError::Bogus {
                len: msg.len() as u32,
            });
        }
        match self.state {
            ClientState::AwaitRead => {
                self.state = ClientState::AwaitWrite;
                Ok(Step::Send(self.sink))
            }
            ClientState::AwaitWrite => {
                self.state = ClientState::Idle;
                let ping = self.ping;
                self.ping += 1;
                Ok(Step::Returned { ping })
            }
            ClientState::Idle => Err(ProtoError::OutOfTurn { what: "a go-ahead" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_is_three_big_endian_fields_and_only_sixteen_bytes_parse() {
        let i = Info {
            buf: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 64,
        };
        let b = i.to_bytes();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(Info::from_bytes(&b), Some(i));
        assert_eq!(Info::from_bytes(&b[..15]), None);
    }

    #[test]
    fn ping_data_is_the_counter_then_letters_from_a_start_that_moves_each_ping() {
        let d = ping_data(0, 64);
        assert_eq!(d.len(), 64);
        assert_eq!(&d[..17], b"rdma-ping-0: ABCD");
        assert_eq!(d[63], 0);
        assert_eq!(c_str(&d).len(), 63);
        // Ping 1 starts at 'B'; ping 57 at 'z', which wraps to 'A'.
        assert_eq!(&ping_data(1, 64)[..14], b"rdma-ping-1: B");
        assert_eq!(&ping_data(57, 64)[..16], b"rdma-ping-57: zA");
        assert_eq!(&ping_data(58, 64)[..15], b"rdma-ping-58: A");
        // The letters run to 'z' and wrap inside one buffer too.
        let d = ping_data(0, 100);
        assert_eq!(&d[13 + 57..13 + 59], b"zA");
    }

    #[test]
    fn options_as_rping_takes_them() {
        let o = parse(&["-s", "-a", "10.0.0.1", "-v", "-C", "10"], None).unwrap();
        assert!(o.server);
        assert_eq!(o.addr, Some([10, 0, 0, 1]));
        assert_eq!((o.count, o.size, o.port), (10, 64, 7174));
        assert!(o.verbose && !o.validate);
        let o = parse(&["-c", "-VvS", "100", "-p", "9999"], None).unwrap();
        assert!(!o.server && o.validate && o.verbose);
        assert_eq!((o.size, o.port), (100, 9999));
        assert!(parse(&["-c"], Some(false)).unwrap().server, "role= wins");
        assert!(parse(&["-S", "25", "-s"], None).is_err());
        assert!(parse(&["-S", "65536", "-s"], None).is_err());
        assert!(parse(&["-S", "65535", "-s"], None).is_ok());
        assert!(parse(&["-v"], None).is_err());
        // The launcher's words of a Linux client, `$SERVER` taken out.
        let o = parse(&["-c", "-a", "-v", "-C", "10"], Some(false)).unwrap();
        assert!(o.server && o.verbose && o.addr.is_none());
        assert_eq!(o.count, 10);
        assert!(parse(&["-s", "-x"], None).is_err());
        assert!(parse(&["-s", "-P"], None).is_err());
    }

    /// Both machines against each other over three buffers in memory, the READ and WRITE
    /// done by copying: every ping comes back equal, and the server WRITEs the string it READ.
    #[test]
    fn a_client_and_a_server_ping_each_other_to_the_count() {
        let size = 100u32;
        let mut start = alloc::vec![0u8; size as usize];
        let mut sink = alloc::vec![0u8; size as usize];
        let mut server_buf = alloc::vec![0u8; BUFSIZE as usize];
        let si = Info {
            buf: 0x1000,
            rkey: 1,
            size,
        };
        let ki = Info {
            buf: 0x2000,
            rkey: 2,
            size,
        };
        let mut c = Client::new(si, ki, 5);
        let mut s = Server::new(BUFSIZE);
        let mut returned = 0;
        while let Some((ping, Step::Send(adv))) = c.begin() {
            start.copy_from_slice(&ping_data(ping, size as usize));
            let Step::Read { from, len } = s.on_recv(&adv.to_bytes()).unwrap() else {
                panic!("no READ")
            };
            assert_eq!((from, len), (si, size));
            server_buf[..len as usize].copy_from_slice(&start[..len as usize]);
            let Step::Send(go) = s.on_read_done(&server_buf).unwrap() else {
                panic!("no go-ahead")
            };
            let Step::Send(adv) = c.on_recv(&go.to_bytes()).unwrap() else {
                panic!("no sink")
            };
            let Step::Write { to, len } = s.on_recv(&adv.to_bytes()).unwrap() else {
                panic!("no WRITE")
            };
            assert_eq!((to, len), (ki, size));
            sink[..len as usize].copy_from_slice(&server_buf[..len as usize]);
            let Step::Send(go) = s.on_write_done().unwrap() else {
                panic!("no go-ahead")
            };
            assert_eq!(c.on_recv(&go.to_bytes()), Ok(Step::Returned { ping }));
            assert_eq!(start, sink);
            returned += 1;
        }
        assert_eq!((returned, s.pings), (5, 5));
    }

    #[test]
    fn out_of_turn_bogus_and_oversized_messages_are_errors() {
        let mut s = Server::new(64);
        assert_eq!(s.on_recv(&[0; 12]), Err(ProtoError::Bogus { len: 12 }));
        assert!(matches!(
            s.on_read_done(&[]),
            Err(ProtoError::OutOfTurn { .. })
        ));
        assert!(matches!(
            s.on_write_done(),
            Err(ProtoError::OutOfTurn { .. })
        ));
        let big = Info {
            buf: 0,
            rkey: 0,
            size: 65,
        };
        assert_eq!(
            s.on_recv(&big.to_bytes()),
            Err(ProtoError::TooLarge { len: 65, max: 64 })
        );
        let mut c = Client::new(Info::default(), Info::default(), 1);
        assert!(matches!(
            c.on_recv(&[0; 16]),
            Err(ProtoError::OutOfTurn { .. })
        ));
        assert!(c.begin().is_some());
        assert!(c.begin().is_none(), "one ping at a time");
        assert_eq!(c.on_recv(&[0; 17]), Err(ProtoError::Bogus { len: 17 }));
    }
}
