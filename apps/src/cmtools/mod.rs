//! The options of the server sides of rdma-core's librdmacm/examples/cmatose.c (`ucmatose`)
//! and udaddy.c (`udaddy`), and the bookkeeping of their runs, without the HCA.
//!
//! Both tools are servers when no `-s server_address` is given; the unikernel plays only that
//! role of them. Their runs (cmatose.c `run_server`, udaddy.c `run_server`): wait until `-c`
//! connections came (`connect_events`), then move `-C` messages of `-S` bytes each way on
//! each one.

use alloc::string::String;

use crate::cm::AppError;
use crate::getopt::{self, getopt, Opt, OptError};

/// cmatose.c's server over rdmacm.
pub mod cmatose;

/// udaddy.c's server over rdmacm.
pub mod udaddy;

/// Which of the two tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// cmatose.c: RC connections in rdma_cm's TCP port space.
    Cmatose,
    /// udaddy.c: UD services resolved by SIDR in the UDP port space.
    Udaddy,
}

impl Tool {
    /// The name its lines begin with (`printf("cmatose: ...")`).
    pub fn name(self) -> &'static str {
        match self {
            Tool::Cmatose => "cmatose",
            Tool::Udaddy => "udaddy",
        }
    }

    /// Its getopt spec (cmatose.c and udaddy.c `main`).
    fn spec(self) -> &'static str {
        match self {
            Tool::Cmatose => "s:b:f:P:c:C:S:t:p:a:m",
            Tool::Udaddy => "s:b:c:C:S:t:p:P:f:",
        }
    }

    /// Its port: cmatose.c `port = "7471"` (`-p` changes it); udaddy.c `port = "7174"`
    /// (fixed: its `-p` is the port space).
    pub fn default_port(self) -> u16 {
        match self {
            Tool::Cmatose => 7471,
            Tool::Udaddy => 7174,
        }
    }
}

/// The options of a server run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opts {
    /// `-c`: connections to wait for (1).
    pub connections: u32,
    /// `-C`: messages each way on each (10).
    pub count: u32,
    /// `-S`: their size (100); 0 makes the count 0 (`create_message`).
    pub size: u32,
    /// The port listened on.
    pub port: u16,
}

/// The server options of `tool` in the tool words `args`. The address format (`-f`) must be
/// `ip` or `name` and the port space (`-P`, udaddy's `-p`) the tool's default; the type of
/// service (`-t`), the ACK timeout (`-a`) and the bind address (`-b`: the node's own, `ip=`)
/// are taken and not used; `-m` (migrating event channels) is refused. `-s ADDR` makes the
/// tool a client: refused, unless the launcher's `role=server` says these are the words of
/// the Linux client (`role` is `Some(false)`), whose `-s` names this server; an `-s` without
/// its value is dropped ([`getopt::drop_valueless`]).
pub fn parse<'a>(tool: Tool, args: &[&'a str], role: Option<bool>) -> Result<Opts, OptError<'a>> {
    let args = getopt::drop_valueless(args, 's');
    let mut o = Opts {
        connections: 1,
        count: 10,
        size: 100,
        port: tool.default_port(),
    };
    for opt in getopt(&args, tool.spec()).map_err(OptError::Getopt)? {
        let Opt::Flag(c, v) = opt else { continue };
        let v = v.unwrap_or("");
        let bad = |want| OptError::Value {
            opt: c,
            value: v,
            want,
        };
        let num = || getopt::count(v).ok_or(bad("a count"));
        match (c, tool) {
            ('c', _) => o.connections = num()?,
            ('C', _) => o.count = num()?,
            ('S', _) => o.size = num()?,
            ('p', Tool::Cmatose) => o.port = crate::oob::parse_port(v).ok_or(bad("a port"))?,
            // udaddy.c: `hints.ai_port_space = strtol(optarg, NULL, 0)`.
            ('p', Tool::Udaddy) if matches!(v, "0x111" | "273") => {}
            ('P', Tool::Cmatose) if v.eq_ignore_ascii_case("tcp") => {}
            ('P', Tool::Udaddy) if v.eq_ignore_ascii_case("udp") => {}
            ('f', _) if v.eq_ignore_ascii_case("ip") || v.eq_ignore_ascii_case("name") => {}
            ('b' | 't' | 'a', _) => {}
            ('s', _) if role == Some(false) => {}
            ('s', _) => {
                return Err(OptError::Unsupported {
                    opt: c,
                    value: v,
                    why: "only the server side runs here",
                })
            }
            _ => {
                return Err(OptError::Unsupported {
                    opt: c,
                    value: v,
                    why: "not supported",
                })
            }
        }
    }
    if o.size == 0 {
        o.count = 0;
    }
    Ok(o)
}

/// The app of `tool` (`ucmatose`, `udaddy`) in the unikernel: its options from the cmdline,
/// the server's run, and the tool's last lines (cmatose.c / udaddy.c `main`); the exit status.
#[cfg(target_os = "none")]
pub fn app_main(tool: Tool, app: &str, cmdline: &str) -> i32 {
    use crate::app::{EXIT_FAILED, EXIT_OK};
    use kernel::println;
    let args = crate::oob::tool_args(cmdline, app);
    let opts = crate::oob::cmdline_role(cmdline)
        .map_err(OptError::Role)
        .and_then(|role| parse(tool, &args, role));
    let code = crate::app::exit(tool.name(), opts, |o| {
        let r = crate::cm::run(cmdline, |n| match tool {
            Tool::Cmatose => cmatose::run_server(n, &o),
            Tool::Udaddy => udaddy::run_server(n, &o),
        });
        println!("test complete");
        r
    });
    match code {
        EXIT_OK => println!("return status 0"),
        EXIT_FAILED => println!("return status -1"),
        _ => {}
    }
    code
}

/// The end of a server's run: its ids destroyed, and the line that says what went through.
fn finish<H: mlx5::Hal, N: net::Nic, C: net::Clock>(
    n: &mut crate::cm::CmNode<'_, H, N, C>,
    tool: Tool,
    ids: impl Iterator<Item = rdmacm::CmId>,
    t: &Tally,
    o: &Opts,
) {
    for id in ids {
        let _ = n.destroy_id(id);
    }
    let what = match tool {
        Tool::Cmatose => "connections",
        Tool::Udaddy => "requests",
    };
    let refused = match t.failed {
        0 => String::new(),
        k => alloc::format!(" ({k} refused)"),
    };
    n.say(format_args!(
        "{}: {} {what}{refused}, {} messages of {} B each way on each: ok",
        tool.name(),
        t.connected,
        o.count,
        o.size
    ));
}

/// The next event of a server waiting for its `-c` connections (`what`: "connections" or
/// "requests"), the first client given [`FIRST_WAIT`](crate::cm::FIRST_WAIT) (it boots under
/// TCG after the unikernel), the others [`WAIT`](crate::cm::WAIT).
fn next_request<H: mlx5::Hal, N: net::Nic, C: net::Clock>(
    n: &mut crate::cm::CmNode<'_, H, N, C>,
    first: bool,
    what: &'static str,
    t: &Tally,
    o: &Opts,
) -> Result<rdmacm::Event, AppError> {
    let wait = if first {
        crate::cm::FIRST_WAIT
    } else {
        crate::cm::WAIT
    };
    n.next_event(wait).ok_or(AppError::Short {
        conn: None,
        what,
        got: t.connected as usize,
        want: o.connections as usize,
        waited: wait,
    })
}

/// `-C` completions of `cq` (`what`: "messages", "send completions") of connection `conn`, or
/// why fewer came in [`WAIT`](crate::cm::WAIT) (cmatose.c / udaddy.c `poll_cqs`).
fn poll_all<H: mlx5::Hal, N: net::Nic, C: net::Clock>(
    n: &mut crate::cm::CmNode<'_, H, N, C>,
    cq: &mut mlx5::CompletionQueue<H>,
    o: &Opts,
    what: &'static str,
    conn: Option<usize>,
) -> Result<alloc::vec::Vec<mlx5::WorkCompletion>, AppError> {
    let want = o.count as usize;
    let wcs = n
        .poll_cq(cq, want, crate::cm::WAIT)
        .map_err(|e| AppError::Verbs("ibv_poll_cq", e))?;
    if wcs.len() < want {
        return Err(AppError::Short {
            conn,
            what,
            got: wcs.len(),
            want,
            waited: crate::cm::WAIT,
        });
    }
    Ok(wcs)
}

/// The run's connections and their messages, counted as the tool counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Tally {
    /// Connections accepted and established.
    pub connected: u32,
    /// Connections refused (beyond `-c`, or failed to set up): `connect_error`.
    pub failed: u32,
    /// Connections whose disconnect has come.
    pub disconnected: u32,
}

impl Tally {
    /// `connects_left` is 0: every connection of `-c` came or failed.
    pub fn all_came(&self, o: &Opts) -> bool {
        self.connected + self.failed >= o.connections
    }

    /// `disconnects_left` is 0.
    pub fn all_gone(&self) -> bool {
        self.disconnected >= self.connected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_defaults_and_options() {
        let o = parse(Tool::Cmatose, &[], None).unwrap();
        assert_eq!(
            o,
            Opts {
                connections: 1,
                count: 10,
                size: 100,
                port: 7471
            }
        );
        let o = parse(
            Tool::Cmatose,
            &["-c", "4", "-C20", "-S", "1000", "-p", "9000"],
            None,
        )
        .unwrap();
        assert_eq!(
            o,
            Opts {
                connections: 4,
                count: 20,
                size: 1000,
                port: 9000
            }
        );
        assert_eq!(parse(Tool::Udaddy, &[], None).unwrap().port, 7174);
        assert_eq!(
            parse(Tool::Udaddy, &["-p", "0x111", "-P", "udp"], None)
                .unwrap()
                .port,
            7174
        );
        assert_eq!(parse(Tool::Udaddy, &["-S", "0"], None).unwrap().count, 0);
        assert!(parse(Tool::Udaddy, &["-p", "9000"], None).is_err());
        assert!(parse(Tool::Cmatose, &["-P", "ib"], None).is_err());
        assert!(parse(Tool::Cmatose, &["-s", "10.0.0.1"], None).is_err());
        assert!(parse(Tool::Cmatose, &["-m"], None).is_err());
        // The Linux client's words, as the launcher hands them with role=server.
        let o = parse(Tool::Cmatose, &["-s", "10.0.0.2", "-c", "2"], Some(false)).unwrap();
        assert_eq!(o.connections, 2);
        let o = parse(Tool::Udaddy, &["-s", "-C", "5"], Some(false)).unwrap();
        assert_eq!(o.count, 5);
        assert!(
            parse(Tool::Udaddy, &["-m"], None).is_err(),
            "udaddy has no -m"
        );
        assert!(parse(Tool::Cmatose, &["-f", "gid"], None).is_err());
        assert!(parse(Tool::Cmatose, &["-C", "x"], None).is_err());
    }

    #[test]
    fn the_tally_waits_for_every_connection_and_every_disconnect() {
        let o = parse(Tool::Cmatose, &["-c", "2"], None).unwrap();
        let mut t = Tally::default();
        assert!(!t.all_came(&o));
        t.connected = 1;
        t.failed = 1;
        assert!(t.all_came(&o));
        assert!(!t.all_gone());
        t.disconnected = 1;
        assert!(t.all_gone());
    }
}
