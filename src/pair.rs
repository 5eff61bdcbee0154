use std::path::Path;
use std::time::{Duration, Instant};

use crate::guest::spawn_guest;
use crate::run::{prepare, RunResult};
use crate::{Accel, Hca, LaunchError, Options};

/// The two guests of `--pair` from the command line's options: `rdma-peer` as server
/// (`ip=10.0.0.1/24 peer=10.0.0.2`, MAC 02:00:00:00:00:0a, its HCA listening on the wire socket
/// in `dir`, with the pcap if one was asked for) and as client (`ip=10.0.0.2/24 peer=10.0.0.1`,
/// MAC 02:00:00:00:00:0b, connecting). Wire faults apply to both HCAs. The MACs are the HCAs'
/// (`mlx5-sim --mac`) and the `mac=` each guest checks against its port; each guest finds the
/// other's by ARP, and the two swap their endpoints over TCP on the wire (the server listens).
pub fn pair_options(o: &Options, dir: &Path) -> (Options, Options) {
    let wire = dir.join("wire.sock").to_string_lossy().into_owned();
    let guest = |role: &str, ip: &str, peer: &str, mac: &str, wire_flag: &str, pcap: bool| {
        let mut args = Vec::new();
        let mut it = o.hca_args.iter();
        while let Some(a) = it.next() {
            if a == "--wire-pcap" {
                let f = it.next();
                if pcap {
                    args.push(a.clone());
                    args.extend(f.cloned());
                }
            } else {
                args.push(a.clone());
            }
        }
        args.extend([wire_flag.into(), wire.clone(), "--mac".into(), mac.into()]);
        Options {
            memory: if o.memory == Options::default().memory {
                "1G".into()
            } else {
                o.memory.clone()
            },
            cmdline: format!("role={role} ip={ip}/24 peer={peer} mac={mac} {}", o.cmdline)
                .trim_end()
                .into(),
            hca: Some(Hca::Sim),
            app: Some("rdma-peer".into()),
            hca_args: args,
            pair: false,
            ..o.clone()
        }
    };
    (
        guest(
            "server",
            "10.0.0.1",
            "10.0.0.2",
            "02:00:00:00:00:0a",
            "--wire-listen",
            true,
        ),
        guest(
            "client",
            "10.0.0.2",
            "10.0.0.1",
            "02:00:00:00:00:0b",
            "--wire-connect",
            false,
        ),
    )
}

/// Boots two guests side by side. `a` is started first: if its HCA listens on a wire
/// (`--hca-wire listen:`), `b` is started once that socket exists, so `b`'s HCA can connect to
/// it. Whatever the two apps tell each other goes over that wire (their own IP stacks).
pub fn run_pair(a: &Options, b: &Options) -> Result<(RunResult, RunResult), LaunchError> {
    let mut pa = prepare(a)?;
    if let Some(path) = a
        .hca_args
        .iter()
        .position(|x| x == "--wire-listen")
        .and_then(|i| a.hca_args.get(i + 1))
    {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !Path::new(path).exists() {
            if Instant::now() >= deadline {
                return Err(LaunchError::Io(format!(
                    "the first HCA never listened on {path}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let mut pb = prepare(b)?;
    let ga = spawn_guest(&mut pa.cmd, pa.echo, "a| ")?;
    let gb = spawn_guest(&mut pb.cmd, pb.echo, "b| ")?;
    let start = Instant::now();
    let ra = ga.finish(start + pa.timeout);
    let rb = gb.finish(start + pb.timeout);
    pa.cleanup();
    pb.cleanup();
    let ((va, oa, wa), (vb, ob, wb)) = (ra?, rb?);
    Ok((
        RunResult {
            verdict: va,
            output: oa,
            wall_time: wa,
            accel: if pa.kvm { Accel::Kvm } else { Accel::Tcg },
        },
        RunResult {
            verdict: vb,
            output: ob,
            wall_time: wb,
            accel: if pb.kvm { Accel::Kvm } else { Accel::Tcg },
        },
    ))
}
