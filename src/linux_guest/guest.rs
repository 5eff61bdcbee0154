//! One guest boot against a fresh `mlx5-sim --listen`, and what a test needs around it.

use std::fs;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{inherit, workspace_root};

use super::{skip, Kernel, Skip};

/// One guest boot.
pub struct GuestSpec<'a> {
    pub qemu: &'a Path,
    pub kernel: &'a Kernel,
    pub initrd: &'a Path,
    /// `mlx5-sim` binary.
    pub sim: &'a Path,
    /// `-device intel-iommu` and `intel_iommu=on`.
    pub viommu: bool,
    /// Extra kernel command line.
    pub append: &'a str,
    /// QEMU is killed after this.
    pub timeout: Duration,
    /// Where the serial log, the socket and the sim's trace go.
    pub work: &'a Path,
}

/// What a guest printed.
pub struct GuestRun {
    pub serial: String,
    /// The model's trace (stderr of `mlx5-sim --trace`) without BAR accesses, config reads and
    /// memory-map updates, which it only counts.
    pub trace: String,
    pub wall: Duration,
    pub timed_out: bool,
    pub qemu_stderr: String,
}

impl GuestRun {
    /// Whether /init reached its end marker.
    pub fn completed(&self) -> bool {
        self.serial.contains("GUEST: ---- end at")
    }
}

/// Guest runs one at a time: each takes a CPU for 15-25 s under TCG.
static GUEST: Mutex<()> = Mutex::new(());

/// Boots one guest against a fresh `mlx5-sim --listen`.
pub fn run_guest(g: &GuestSpec<'_>) -> Result<GuestRun, Skip> {
    let _one = GUEST.lock().unwrap_or_else(|e| e.into_inner());
    fs::create_dir_all(g.work).map_err(|e| skip(format!("{}: {e}", g.work.display())))?;
    let sock = g.work.join("hca.sock");
    let serial = g.work.join("serial.log");
    let trace = g.work.join("sim-trace.log");
    let qerr = g.work.join("qemu.stderr");
    for p in [&sock, &serial] {
        let _ = fs::remove_file(p);
    }
    let trace_f =
        fs::File::create(&trace).map_err(|e| skip(format!("{}: {e}", trace.display())))?;
    let mut sim = Command::new(g.sim)
        .arg("--listen")
        .arg(&sock)
        .arg("--trace")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(trace_f)
        .spawn()
        .map_err(|e| skip(format!("starting {}: {e}", g.sim.display())))?;
    let t_sock = Instant::now();
    let conn = loop {
        match UnixStream::connect(&sock) {
            Ok(c) => break Ok(c),
            Err(e) if t_sock.elapsed() > Duration::from_secs(10) => break Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            let _ = sim.kill();
            let _ = sim.wait();
            return Err(skip(format!(
                "mlx5-sim did not listen on {}: {e}",
                sock.display()
            )));
        }
    };
    use std::os::fd::AsRawFd;
    let fd = conn.as_raw_fd();
    // `no_timer_check` (Linux arch/x86/kernel/apic/io_apic.c, its `__setup` handler
    // `notimercheck`): `check_timer` probes the timer interrupt during boot and panics when it
    // sees too few ticks ("timer doesn't work through Interrupt-remapped IO-APIC" with the
    // vIOMMU), which TCG on a loaded host can make it see; the timer itself works either way.
    let mut append =
        String::from("console=ttyS0,115200 ignore_loglevel panic=-1 printk.time=1 no_timer_check");
    if g.viommu {
        append.push_str(" intel_iommu=on");
    }
    if !g.append.is_empty() {
        append.push(' ');
        append.push_str(g.append);
    }
    let mut cmd = Command::new(g.qemu);
    cmd.args(["-accel", "tcg", "-machine", "q35,memory-backend=mem"])
        .args([
            "-object",
            "memory-backend-memfd,id=mem,size=1G,share=on",
            "-m",
            "1G",
        ])
        .args([
            "-cpu",
            "max",
            "-smp",
            "1",
            "-nodefaults",
            "-nographic",
            "-monitor",
            "none",
            "-no-reboot",
        ])
        .arg("-serial")
        .arg(format!("file:{}", serial.display()))
        .arg("-kernel")
        .arg(&g.kernel.vmlinuz)
        .arg("-initrd")
        .arg(g.initrd)
        .arg("-append")
        .arg(&append);
    if g.viommu {
        cmd.args(["-device", "intel-iommu"]);
    }
    cmd.arg("-device")
        .arg(format!("x-pci-proxy-dev,id=hca0,fd={fd}"));
    inherit(&mut cmd, fd);
    let qerr_f = fs::File::create(&qerr).map_err(|e| skip(format!("{}: {e}", qerr.display())))?;
    let t0 = Instant::now();
    let mut qemu = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(qerr_f)
        .spawn()
    {
        Ok(q) => q,
        Err(e) => {
            let _ = sim.kill();
            let _ = sim.wait();
            return Err(skip(format!("starting {}: {e}", g.qemu.display())));
        }
    };
    drop(conn);
    let step = crate::progress::Step::start("waiting for the Linux guest (TCG)");
    let mut timed_out = false;
    loop {
        match qemu.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() > g.timeout => {
                timed_out = true;
                let _ = qemu.kill();
                let _ = qemu.wait();
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(_) => break,
        }
    }
    drop(step);
    let wall = t0.elapsed();
    let _ = sim.kill();
    let _ = sim.wait();
    let read = |p: &Path| {
        fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    // The commands and notes; BAR and config accesses only as counts (tens of thousands).
    let mut filtered = [
        ("BAR_READ", 0usize),
        ("BAR_WRITE", 0),
        ("CFGREAD", 0),
        ("SYNC_SYSMEM", 0),
    ];
    let mut kept = String::new();
    for l in read(&trace).lines() {
        match filtered.iter_mut().find(|(k, _)| l.contains(k)) {
            Some((_, n)) => *n += 1,
            None => {
                kept.push_str(l);
                kept.push('\n');
            }
        }
    }
    kept.push_str(&format!("(not shown: {filtered:?})\n"));
    let trace = kept;
    Ok(GuestRun {
        serial: read(&serial),
        trace,
        wall,
        timed_out,
        qemu_stderr: read(&qerr),
    })
}

/// Builds a static binary of the example `example` of `package` for x86_64-unknown-linux-gnu
/// (`+crt-static`; glibc's static libraries must be installed) and returns its path.
pub fn build_static_example(package: &str, example: &str) -> Result<PathBuf, Skip> {
    let root = workspace_root();
    let target_dir = root.join("target").join("linux-guest").join("cargo");
    let triple = "x86_64-unknown-linux-gnu";
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            package,
            "--example",
            example,
            "--target",
            triple,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static");
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let step =
        crate::progress::Step::start(format!("building {package} example {example} (static)"));
    let out = cmd
        .output()
        .map_err(|e| skip(format!("cannot run cargo: {e}")))?;
    drop(step);
    if !out.status.success() {
        return Err(skip(format!(
            "static build of {package} example {example} failed (glibc static libraries, libc6-dev, \
             installed?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(target_dir
        .join(triple)
        .join("release")
        .join("examples")
        .join(example))
}

/// Prints a test's failure context to stderr (it lands in the test output).
pub fn dump(run: &GuestRun, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "==== guest serial console ====\n{}", run.serial)?;
    writeln!(
        out,
        "==== model trace (mlx5-sim --trace, without reads) ====\n{}",
        run.trace
    )?;
    if !run.qemu_stderr.trim().is_empty() {
        writeln!(out, "==== QEMU stderr ====\n{}", run.qemu_stderr)?;
    }
    writeln!(
        out,
        "==== wall {:.1} s, timed out: {} ====",
        run.wall.as_secs_f64(),
        run.timed_out
    )
}
