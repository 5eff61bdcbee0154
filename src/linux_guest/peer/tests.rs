use super::*;
use crate::linux_guest::PEER_INIT;

#[test]
fn the_app_follows_the_tool() {
    let (app, args) = app_for("ibv_rc_pingpong -d rxe0 -g $GID -n 100 -s 1 $SERVER").unwrap();
    assert_eq!(
        (app.as_str(), args.as_str()),
        ("pingpong", "pingpong -d rxe0 -g $GID -n 100 -s 1")
    );
    let (app, args) = app_for("ib_read_bw -x $GID -F -s 64 10.0.0.2").unwrap();
    assert_eq!(
        (app.as_str(), args.as_str()),
        ("perftest", "perftest ib_read_bw -x $GID -F -s 64")
    );
    for cmd in ["ping -c 5 $SERVER", "nc $SERVER 7"] {
        let (app, args) = app_for(cmd).unwrap();
        assert_eq!((app.as_str(), args.as_str()), ("netd", "netd"), "{cmd}");
        assert!(is_service(&app));
    }
    assert!(!is_service("pingpong") && !is_service("perftest"));
    assert!(app_for("mckey -m 224.0.0.1").is_err());
    assert!(app_for("  ").is_err());
}

/// The rdma_cm tools: rping gets its other side's command line (-s and -c swapped, -a still
/// the server's address), ucmatose and udaddy serve (no -s ADDR), ud_pingpong and perftest -R
/// as their verbs-only kin; none of them is a service.
#[test]
fn the_rdma_cm_tools_get_their_other_side() {
    for (cmd, app, args) in [
        (
            "rping -s -a 10.0.0.1 -v -C 10",
            "rping",
            "rping -c -a 10.0.0.1 -v -C 10",
        ),
        (
            "rping -c -a $SERVER -v -C 10",
            "rping",
            "rping -s -a 10.0.0.2 -v -C 10",
        ),
        (
            "ucmatose -s $SERVER -c 2 -C 10",
            "ucmatose",
            "ucmatose -c 2 -C 10",
        ),
        ("udaddy -s 10.0.0.2 -C 5", "udaddy", "udaddy -C 5"),
        (
            "ibv_ud_pingpong -d rxe0 -g $GID -n 10 $SERVER",
            "ud-pingpong",
            "ud-pingpong -d rxe0 -g $GID -n 10",
        ),
        (
            "ib_send_lat -d rxe0 -R -F $SERVER",
            "perftest",
            "perftest ib_send_lat -d rxe0 -R -F",
        ),
    ] {
        let (a, c) = app_for(cmd).unwrap();
        assert_eq!((a.as_str(), c.as_str()), (app, args), "{cmd}");
        assert!(!is_service(&a));
    }
    for cmd in [
        "rping -s -a 10.0.0.1",
        "/usr/bin/ucmatose -s 10.0.0.2",
        "udaddy",
        "ib_write_bw -d rxe0 -x $GID -F -R",
        "ib_send_lat --rdma_cm -F $SERVER",
    ] {
        assert!(uses_rdma_cm(cmd), "{cmd}");
    }
    for cmd in [
        "ib_write_bw -d rxe0 -x $GID -F",
        "ib_write_bw -z",
        "ibv_rc_pingpong -g $GID",
        "ibv_ud_pingpong -g $GID",
        "ping -c 5 $SERVER",
    ] {
        assert!(!uses_rdma_cm(cmd), "{cmd}");
    }
}

fn run(cmd: &str, role: Role, static_neigh: bool) -> PeerRun {
    PeerRun {
        cmd: cmd.into(),
        role,
        pcap: None,
        static_neigh,
        unikernel: crate::Options::default(),
        timeout: Duration::from_secs(1),
    }
}

/// The unikernel's cmdline names its address and its peer's, and a static neighbour only with
/// `--peer-neigh`; no MAC of the peer (it is resolved by ARP).
#[test]
fn the_unikernel_cmdline_names_addresses_not_macs() {
    let (app, c) = unikernel_cmdline(&run(
        "ib_write_bw -d rxe0 -x $GID -F $SERVER",
        Role::Client,
        false,
    ))
    .unwrap();
    assert_eq!(app, "perftest");
    assert_eq!(
        c,
        "perftest ib_write_bw -d rxe0 -x $GID -F role=server ip=10.0.0.2/24 peer=10.0.0.1"
    );
    let (_, c) = unikernel_cmdline(&run("ibv_rc_pingpong -g $GID", Role::Server, true)).unwrap();
    assert_eq!(
        c,
        "pingpong -g $GID role=client ip=10.0.0.2/24 peer=10.0.0.1 neigh=10.0.0.1,02:00:00:00:00:01"
    );
    // netd only serves.
    assert!(unikernel_cmdline(&run("ping -c 1 10.0.0.2", Role::Server, false)).is_err());
    let (app, c) = unikernel_cmdline(&run("nc $SERVER 7", Role::Client, false)).unwrap();
    assert_eq!(
        (app.as_str(), c.as_str()),
        ("netd", "netd role=server ip=10.0.0.2/24 peer=10.0.0.1")
    );
}

/// Linux has one NIC and finds the unikernel by ARP unless `--peer-neigh` asks for a permanent
/// entry; as a client it runs against the unikernel's address once that answers ping.
#[test]
fn linux_has_one_nic_and_arp_unless_asked() {
    let wire = std::path::PathBuf::from("/tmp/w.sock");
    let img = PeerImage {
        kernel: crate::linux_guest::Kernel {
            version: "v".into(),
            vmlinuz: "/k".into(),
            root: "/r".into(),
        },
        initrd: "/i".into(),
    };
    let client = linux_side(&run("nc $SERVER 7", Role::Client, false), wire.clone());
    assert_eq!(client.cmd, "nc 10.0.0.2 7");
    assert_eq!(client.wait_ping.as_deref(), Some(UNIKERNEL_IP));
    let a = client.append().unwrap();
    assert!(!a.contains("peer_neigh"), "{a}");
    let argv: Vec<String> = client
        .command(std::path::Path::new("qemu"), &img)
        .unwrap()
        .get_args()
        .map(|x| x.to_string_lossy().into_owned())
        .collect();
    let nics = argv.iter().filter(|x| *x == "-netdev").count();
    assert_eq!(nics, 1, "{argv:?}");
    assert!(
        !argv
            .iter()
            .any(|x| x.contains("hostfwd") || x.contains("guestfwd") || x.starts_with("user,")),
        "{argv:?}"
    );
    let server = linux_side(&run("ib_write_bw -x $GID", Role::Server, true), wire);
    assert_eq!(server.wait_ping, None);
    assert!(server
        .append()
        .unwrap()
        .contains("peer_neigh=10.0.0.2,02:00:00:00:00:02"));
}

#[test]
fn the_kernel_command_line_carries_the_init_contract() {
    let p = LinuxPeer {
        link: Link::Connect("/tmp/w.sock".into()),
        ip: "10.0.0.1/24".into(),
        mac: PEER_MAC,
        neigh: Some((UNIKERNEL_IP.into(), UNIKERNEL_MAC)),
        cmd: "ib_write_bw -x $GID".into(),
        wait_ping: Some(UNIKERNEL_IP.into()),
        delay: Some(2),
        pcap: None,
        timeout: Duration::from_secs(1),
    };
    let a = p.append().unwrap();
    for w in [
        "peer_ip=10.0.0.1/24",
        "peer_neigh=10.0.0.2,02:00:00:00:00:02",
        "peer_wait_ping=10.0.0.2",
        "peer_delay=2",
        "peer_cmd=\"ib_write_bw -x $GID\"",
    ] {
        assert!(a.contains(w), "{w} missing from {a}");
    }
    // The init reads each of them.
    for v in [
        "$peer_ip",
        "$peer_neigh",
        "$peer_wait_ping",
        "$peer_delay",
        "$peer_cmd",
    ] {
        assert!(PEER_INIT.contains(v), "PEER_INIT does not read {v}");
    }
    assert!(!PEER_INIT.contains("eth1"), "the peer has one NIC");
    let bad = LinuxPeer {
        cmd: "echo \"x\"".into(),
        ..p
    };
    assert!(bad.append().is_err());
}
