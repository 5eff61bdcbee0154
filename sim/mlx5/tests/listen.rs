//! `mlx5-sim --listen PATH`: a UNIX socket serving one client at a time, speaking exactly what
//! QEMU speaks.

mod common;

use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn listen_serves_one_client_at_a_time() {
    let dir = std::env::temp_dir().join(format!("mlx5-sim-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hca.sock");
    let _ = std::fs::remove_file(&path);

    let mut sim = Sim::spawn(&[std::ffi::OsStr::new("--listen"), path.as_os_str()], false);

    let a = sim.connect(&path);
    assert_eq!(cfg_read(&a, 0x00, 2), 0x15b3);
    assert_eq!(cfg_read(&a, 0x02, 2), 0x1017);
    cfg_write(&a, 0x3c, 0x0b, 1);
    assert_eq!(cfg_read(&a, 0x3c, 1), 0x0b);
    drop(a);

    // A new client gets a freshly reset function.
    let b = sim.connect(&path);
    assert_eq!(cfg_read(&b, 0x0a, 2), 0x0207);
    assert_eq!(
        cfg_read(&b, 0x3c, 1),
        0,
        "state of the previous client was reset"
    );
    assert_eq!(qemu_probe_bars(&b), vec![(0, 32 << 20, true)]);
    send_msg(&b, DEVICE_RESET, &[], &[]);
    recv_ret(&b);
    drop(b);

    assert!(
        sim.0.try_wait().unwrap().is_none(),
        "still serving after clients left"
    );
    drop(sim);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fd_mode_serves_an_inherited_socket() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (qemu, dev) = UnixStream::pair().unwrap();
    let dev_fd = dev.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mlx5-sim"));
    cmd.arg("--fd").arg("3").stdin(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec and only calls dup2/fcntl,
    // which are async-signal-safe; it puts the device end of the socketpair at descriptor 3.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself keeps close-on-exec set: clear it explicitly then.
            let r = if dev_fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(dev_fd, 3)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn mlx5-sim --fd 3");
    drop(dev);
    assert_eq!(cfg_read(&qemu, 0x00, 4), 0x1017_15b3);
    drop(qemu);
    // EOF: the simulator exits cleanly.
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "{st:?}");
            break;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("mlx5-sim --fd did not exit on EOF");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
