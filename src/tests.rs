use super::*;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

fn exited(code: i32) -> ExitStatus {
    ExitStatus::from_raw(code << 8)
}

#[test]
fn pair_options_make_a_server_and_a_client() {
    let args = "--pair --hca-pcap /tmp/run.pcap --wire-fault drop=0.01,seed=3 --cmdline log=debug";
    let o = parse_args(args.split(' ')).unwrap();
    assert!(o.pair);
    let (s, c) = pair_options(&o, Path::new("/tmp/p"));
    assert_eq!(
        s.cmdline,
        "role=server ip=10.0.0.1/24 peer=10.0.0.2 mac=02:00:00:00:00:0a log=debug"
    );
    assert_eq!(
        c.cmdline,
        "role=client ip=10.0.0.2/24 peer=10.0.0.1 mac=02:00:00:00:00:0b log=debug"
    );
    assert_eq!(
        s.hca_args,
        [
            "--wire-pcap",
            "/tmp/run.pcap",
            "--wire-fault",
            "drop=0.01,seed=3",
            "--wire-listen",
            "/tmp/p/wire.sock",
            "--mac",
            "02:00:00:00:00:0a"
        ]
    );
    assert_eq!(
        c.hca_args,
        [
            "--wire-fault",
            "drop=0.01,seed=3",
            "--wire-connect",
            "/tmp/p/wire.sock",
            "--mac",
            "02:00:00:00:00:0b"
        ]
    );
    assert_eq!(
        (s.app.as_deref(), s.hca, s.pair),
        (Some("rdma-peer"), Some(Hca::Sim), false)
    );
    assert_eq!(c.memory, "1G");
}

#[test]
fn parses_every_option() {
    let args =
        "--accel tcg --machine pc --memory 5G --cpus 2 --cmdline log=debug --timeout 9 --gdb \
                --vfio 0000:3b:00.0 --hca none --app panic --boot grub --no-1g-pages -q \
                --hca-trace --hca-wire connect:/tmp/w.sock";
    let o = parse_args(args.split(' ')).unwrap();
    assert_eq!(o.accel, Accel::Tcg);
    assert_eq!(o.machine, Machine::Pc);
    assert_eq!(o.memory, "5G");
    assert_eq!(o.cpus, 2);
    assert_eq!(o.cmdline, "log=debug");
    assert_eq!(o.timeout, Duration::from_secs(9));
    assert!(o.gdb && o.hide_1g_pages && !o.echo);
    assert_eq!(o.vfio, ["0000:3b:00.0"]);
    assert_eq!(o.hca, Some(Hca::None));
    assert_eq!(o.app.as_deref(), Some("panic"));
    assert_eq!(o.boot, BootVia::Grub);
    assert_eq!(o.hca_args, ["--trace", "--wire-connect", "/tmp/w.sock"]);
    assert!(parse_args(["--hca-wire=sideways"]).is_err());
    assert_eq!(
        parse_args(["--help"]).unwrap_err().kind(),
        clap::error::ErrorKind::DisplayHelp
    );
    assert!(parse_args(["--accel=quantum"]).is_err());
    assert!(parse_args(["--memory"]).is_err());
    assert!(parse_args(["--bogus"]).is_err());
}

#[test]
fn parses_the_linux_peer_options() {
    let args = "--peer linux --peer-cmd ib_send_bw --peer-role client --peer-pcap /tmp/l.pcap";
    let o = parse_args(args.split(' ')).unwrap();
    assert!(o.peer && o.peer_client);
    assert_eq!(o.peer_cmd.as_deref(), Some("ib_send_bw"));
    assert_eq!(o.peer_pcap.as_deref(), Some(Path::new("/tmp/l.pcap")));
    assert!(!o.peer_neigh, "ARP unless --peer-neigh");
    let o = parse_args("--peer linux --peer-cmd x --peer-neigh".split(' ')).unwrap();
    assert!(o.peer_neigh);
    assert!(parse_args(["--peer", "bsd"]).is_err());
    assert!(
        parse_args(["--peer", "linux"]).is_err(),
        "--peer-cmd is required"
    );
    assert!(parse_args(["--peer-cmd", "x"]).is_err(), "without --peer");
    assert!(parse_args("--peer linux --peer-cmd x --peer-role both".split(' ')).is_err());
}

#[test]
fn sizes() {
    assert_eq!(parse_size("128M"), Some(128 << 20));
    assert_eq!(parse_size("5G"), Some(5 << 30));
    assert_eq!(parse_size("512"), Some(512 << 20));
    assert_eq!(parse_size("0G"), None);
    assert_eq!(parse_size("lots"), None);
}

#[test]
fn exit_decoding() {
    assert_eq!(decode_exit(exited(1), "app: exit=0\n"), Verdict::Exited(0));
    assert_eq!(decode_exit(exited(7), "app: exit=3\n"), Verdict::Exited(3));
    assert!(matches!(
        decode_exit(exited(1), "qemu: bad option\n"),
        Verdict::Abnormal(_)
    ));
    assert_eq!(
        decode_exit(exited(203), "panic: x\n"),
        Verdict::KernelFailure(101)
    );
    assert_eq!(
        decode_exit(exited(205), "exception: #PF\n"),
        Verdict::KernelFailure(102)
    );
    assert!(matches!(decode_exit(exited(0), ""), Verdict::Abnormal(_)));
    assert!(matches!(
        decode_exit(ExitStatus::from_raw(9), ""),
        Verdict::Abnormal(_)
    ));
}

#[test]
fn qemu_command_hides_1g_pages_under_kvm_and_shares_ram_for_the_hca() {
    let mut o = Options::default();
    let cmd = qemu_command(&o, Path::new("/img"), true);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert!(args
        .windows(2)
        .any(|w| w[0] == "-cpu" && w[1].contains("-pdpe1gb")));
    o.hca = Some(Hca::Sim);
    o.memory = "2G".into();
    let cmd = qemu_command(&o, Path::new("/img"), true);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert!(args
        .iter()
        .any(|a| a == "memory-backend-memfd,id=ram,size=2G,share=on"));
    assert!(args.iter().any(|a| a == "q35,memory-backend=ram"));
    let cmd = qemu_command(&Options::default(), Path::new("/img"), false);
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert!(args.windows(2).any(|w| w[0] == "-cpu" && w[1] == "max"));
}
