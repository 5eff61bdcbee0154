//! The launcher: builds the unikernel image for `x86_64-unknown-none` with a nested cargo and
//! boots it in QEMU, serial on stdout, and turns the application's result into an exit status.
//!
//! `cargo run -- --help` lists the options. The boot tests in `tests/` use this library too.

use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The workspace root (this crate's directory).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub const IMAGE_TARGET: &str = "x86_64-unknown-none";
/// The application `cargo run` boots when the emulated HCA (or a real one) is attached.
pub const DEFAULT_APP_HCA: &str = "rdma";
/// The application without an HCA: boot report and memory self-test.
pub const DEFAULT_APP_NO_HCA: &str = "hello";

pub mod linux_guest;

/// The command line (`cargo run -- --help`).
pub mod cli;
pub use cli::parse_args;

pub mod progress;

/// Exit statuses of the launcher itself (the application's own are 0..=127).
pub mod status {
    pub const TIMEOUT: i32 = 124;
    pub const ABNORMAL: i32 = 125;
    pub const BUILD_FAILED: i32 = 126;
    pub const QEMU_MISSING: i32 = 127;
    pub const USAGE: i32 = 2;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    Auto,
    Kvm,
    Tcg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    Q35,
    Pc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Hca {
    /// The emulated ConnectX-5 (needs KVM: QEMU's proxy device crashes under TCG).
    Sim,
    /// No HCA.
    None,
}

/// How the image is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BootVia {
    /// QEMU -kernel with the PVH note.
    Pvh,
    /// GRUB from an ISO made by grub-mkrescue, through Multiboot2, as on bare metal (alias multiboot2).
    #[value(alias = "multiboot2")]
    Grub,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub accel: Accel,
    pub machine: Machine,
    pub memory: String,
    pub cpus: u32,
    pub cmdline: String,
    pub timeout: Duration,
    pub gdb: bool,
    pub vfio: Vec<String>,
    /// None: the emulated HCA under KVM, none under TCG.
    pub hca: Option<Hca>,
    /// None: `rdma` with an HCA attached, `hello` without.
    pub app: Option<String>,
    pub boot: BootVia,
    /// Extra arguments for the emulated HCA's server (`mlx5-sim`): trace, faults, wire.
    pub hca_args: Vec<String>,
    /// Hide 1 GiB pages from the guest even under TCG (KVM always hides them here).
    pub hide_1g_pages: bool,
    /// Copy the guest's serial output to stdout while it runs.
    pub echo: bool,
    /// `--pair`: run the two-guest RDMA run ([`pair_options`], [`run_pair`]).
    pub pair: bool,
    /// `--peer linux`: run against a Linux soft-RoCE peer ([`linux_guest::peer`]).
    pub peer: bool,
    /// `--peer-cmd`: the command Linux runs.
    pub peer_cmd: Option<String>,
    /// `--peer-role client`: Linux is the client (default: the server).
    pub peer_client: bool,
    /// `--peer-pcap FILE`: capture the link to the Linux peer.
    pub peer_pcap: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            accel: Accel::Auto,
            machine: Machine::Q35,
            // 3 GiB on q35 leaves 1 GiB above 4 GiB: one whole 1 GiB page for the RDMA app.
            memory: "3G".into(),
            cpus: 1,
            cmdline: String::new(),
            timeout: Duration::from_secs(120),
            gdb: false,
            vfio: Vec::new(),
            hca: None,
            hca_args: Vec::new(),
            app: None,
            boot: BootVia::Pvh,
            hide_1g_pages: false,
            echo: true,
            pair: false,
            peer: false,
            peer_cmd: None,
            peer_client: false,
            peer_pcap: None,
        }
    }
}

/// Bytes in a QEMU-style size: a number with an optional K, M, G or T suffix (MiB by default).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1u64 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        't' | 'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1 << 20),
    };
    num.parse::<u64>()
        .ok()
        .filter(|&n| n > 0)?
        .checked_mul(mult)
}

/// Whether KVM can be used: /dev/kvm opens read-write and answers KVM_GET_API_VERSION with 12.
pub fn kvm_usable() -> bool {
    use std::os::fd::AsRawFd;
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    else {
        return false;
    };
    const KVM_GET_API_VERSION: libc::c_ulong = 0xae00;
    // SAFETY: KVM_GET_API_VERSION takes no argument and only returns an int.
    let v = unsafe { libc::ioctl(f.as_raw_fd(), KVM_GET_API_VERSION as _, 0) };
    v == 12
}

pub fn qemu_binary() -> String {
    std::env::var("QEMU").unwrap_or_else(|_| "qemu-system-x86_64".into())
}

pub fn qemu_available() -> bool {
    Command::new(qemu_binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

pub const QEMU_INSTALL_HINT: &str = "qemu-system-x86_64 was not found. On Debian bookworm:\n  \
echo 'deb http://deb.debian.org/debian bookworm-backports main' | sudo tee /etc/apt/sources.list.d/backports.list\n  \
sudo apt-get update && sudo apt-get install -t bookworm-backports qemu-system-x86\n\
or run .ci/setup, which installs everything the tests need.";

#[derive(Debug)]
pub enum LaunchError {
    Build(String),
    QemuMissing,
    KvmUnavailable,
    HcaNeedsKvm,
    Io(String),
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::Build(s) => write!(f, "building the image failed: {s}"),
            LaunchError::QemuMissing => write!(f, "{QEMU_INSTALL_HINT}"),
            LaunchError::KvmUnavailable => {
                write!(f, "--accel kvm: /dev/kvm is missing or unusable")
            }
            LaunchError::HcaNeedsKvm => {
                write!(
                    f,
                    "--hca sim needs KVM: QEMU 10.0's x-pci-proxy-dev crashes under TCG"
                )
            }
            LaunchError::Io(s) => write!(f, "{s}"),
        }
    }
}

impl LaunchError {
    pub fn exit_status(&self) -> i32 {
        match self {
            LaunchError::Build(_) => status::BUILD_FAILED,
            LaunchError::QemuMissing => status::QEMU_MISSING,
            _ => status::USAGE,
        }
    }
}

/// Builds the image for `app` (a binary of the `apps` crate) and returns the ELF's path.
pub fn build_image(app: &str) -> Result<PathBuf, LaunchError> {
    let root = workspace_root();
    let target_dir = root.join("target").join("image");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "apps",
            "--bin",
            app,
            "--target",
            IMAGE_TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer cargo's settings are for the host build, not the image.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let _step = progress::Step::start(format!("building the image `{app}`"));
    let out = cmd
        .output()
        .map_err(|e| LaunchError::Build(format!("cannot run cargo: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Build(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(target_dir.join(IMAGE_TARGET).join("release").join(app))
}

/// Builds the emulated HCA's device server (`mlx5-sim`, a host binary) and returns its path.
pub fn build_hca_sim() -> Result<PathBuf, LaunchError> {
    let root = workspace_root();
    let target_dir = root.join("target").join("sim");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "mlx5-sim",
            "--bin",
            "mlx5-sim",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    for var in ["CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
        cmd.env_remove(var);
    }
    let _step = progress::Step::start("building mlx5-sim, the emulated HCA");
    let out = cmd
        .output()
        .map_err(|e| LaunchError::Build(format!("cannot run cargo: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Build(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(target_dir.join("release").join("mlx5-sim"))
}

/// A running device server for QEMU's `x-pci-proxy-dev`: QEMU gets one end of a socket pair
/// as an inherited descriptor, the server the other.
pub struct HcaServer {
    child: Child,
    qemu_end: std::os::fd::OwnedFd,
}

impl HcaServer {
    pub fn start(binary: &Path, extra_args: &[String]) -> Result<Self, LaunchError> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into `fds`; CLOEXEC keeps them out of every
        // child except the one each is explicitly handed to (see `inherit`).
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(LaunchError::Io(format!(
                "socketpair: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (qemu_end, sim_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut cmd = Command::new(binary);
        cmd.arg("--fd")
            .arg(sim_end.as_raw_fd().to_string())
            .args(extra_args);
        inherit(&mut cmd, sim_end.as_raw_fd());
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| LaunchError::Io(format!("starting {}: {e}", binary.display())))?;
        drop(sim_end);
        Ok(HcaServer { child, qemu_end })
    }

    /// The `-device` argument for QEMU, whose process must inherit [`Self::qemu_fd`].
    pub fn qemu_device(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("x-pci-proxy-dev,id=hca0,fd={}", self.qemu_end.as_raw_fd())
    }

    pub fn qemu_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.qemu_end.as_raw_fd()
    }
}

impl Drop for HcaServer {
    fn drop(&mut self) {
        // The server exits on EOF once QEMU is gone; make sure of it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lets `cmd`'s child inherit `fd` (which is CLOEXEC in this process).
fn inherit(cmd: &mut Command, fd: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl, which is
    // async-signal-safe; `fd` is open in the parent and so in the child.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes a GRUB rescue ISO that boots `kernel` through Multiboot2 with `cmdline`.
pub fn build_grub_iso(kernel: &Path, cmdline: &str, out: &Path) -> Result<(), LaunchError> {
    let dir = out.with_extension("isodir");
    let _ = std::fs::remove_dir_all(&dir);
    let grub_dir = dir.join("boot").join("grub");
    std::fs::create_dir_all(&grub_dir)
        .map_err(|e| LaunchError::Io(format!("{}: {e}", grub_dir.display())))?;
    std::fs::copy(kernel, dir.join("boot").join("unikernel.elf"))
        .map_err(|e| LaunchError::Io(format!("copying the image: {e}")))?;
    let cfg = format!(
        "set timeout=0\nset default=0\nmenuentry \"unikernel\" {{\n  multiboot2 /boot/unikernel.elf {cmdline}\n  boot\n}}\n"
    );
    std::fs::write(grub_dir.join("grub.cfg"), cfg)
        .map_err(|e| LaunchError::Io(format!("grub.cfg: {e}")))?;
    let res = Command::new("grub-mkrescue")
        .arg("-o")
        .arg(out)
        .arg(&dir)
        .output()
        .map_err(|e| LaunchError::Io(format!("grub-mkrescue not runnable ({e}); run .ci/setup")))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !res.status.success() {
        return Err(LaunchError::Io(format!(
            "grub-mkrescue failed: {}",
            String::from_utf8_lossy(&res.stderr)
        )));
    }
    Ok(())
}

/// The QEMU invocation for `opts`, booting `image` (an ELF for PVH, an ISO for GRUB).
pub fn qemu_command(opts: &Options, image: &Path, kvm: bool) -> Command {
    let mut cmd = Command::new(qemu_binary());
    let machine = match opts.machine {
        Machine::Q35 => "q35",
        Machine::Pc => "pc",
    };
    let shared_ram = opts.hca == Some(Hca::Sim);
    if shared_ram {
        // The device process reaches guest RAM through this shared memfd (its DMA).
        cmd.arg("-object").arg(format!(
            "memory-backend-memfd,id=ram,size={},share=on",
            opts.memory
        ));
        cmd.arg("-machine")
            .arg(format!("{machine},memory-backend=ram"));
    } else {
        cmd.arg("-machine").arg(machine);
    }
    cmd.arg("-m").arg(&opts.memory);
    cmd.arg("-smp").arg(opts.cpus.to_string());
    if kvm {
        // 1 GiB guest pages triple-fault under this KVM even when advertised, and the
        // IA32_ARCH_CAPABILITIES MSR cannot be set: hide both (shared/notes/qemu-hca-attach.md).
        cmd.args(["-accel", "kvm", "-cpu", "host,-pdpe1gb,-arch-capabilities"]);
    } else {
        cmd.args([
            "-accel",
            "tcg",
            "-cpu",
            if opts.hide_1g_pages {
                "max,-pdpe1gb"
            } else {
                "max"
            },
        ]);
    }
    cmd.args([
        "-nodefaults",
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
    ]);
    cmd.args(["-device", "isa-debug-exit,iobase=0xf4,iosize=4"]);
    match opts.boot {
        BootVia::Pvh => {
            cmd.arg("-kernel").arg(image);
            if !opts.cmdline.is_empty() {
                cmd.arg("-append").arg(&opts.cmdline);
            }
        }
        BootVia::Grub => {
            cmd.arg("-cdrom").arg(image).args(["-boot", "d"]);
        }
    }
    for bdf in &opts.vfio {
        cmd.arg("-device").arg(format!("vfio-pci,host={bdf}"));
    }
    if opts.gdb {
        cmd.args(["-s", "-S"]);
    }
    cmd
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The application's exit code, as reported through isa-debug-exit and the `app: exit=` line.
    Exited(i32),
    /// A panic, exception or boot failure: the kernel's own code (101, 102, 103).
    KernelFailure(i32),
    TimedOut,
    /// QEMU ended without the guest reporting (triple fault, QEMU error, signal).
    Abnormal(String),
}

impl Verdict {
    pub fn exit_status(&self) -> i32 {
        match self {
            Verdict::Exited(c) | Verdict::KernelFailure(c) => *c,
            Verdict::TimedOut => status::TIMEOUT,
            Verdict::Abnormal(_) => status::ABNORMAL,
        }
    }
}

#[derive(Debug)]
pub struct RunResult {
    pub verdict: Verdict,
    /// Everything the guest wrote to the serial port (and QEMU's own messages).
    pub output: String,
    pub wall_time: Duration,
    pub accel: Accel,
}

/// Decodes QEMU's exit status: isa-debug-exit makes QEMU exit with `(code << 1) | 1`. QEMU's own
/// errors exit 1 too, so code 0 only counts with the kernel's `app: exit=0` line in the output.
pub fn decode_exit(status: ExitStatus, output: &str) -> Verdict {
    let Some(raw) = status.code() else {
        return Verdict::Abnormal(format!("QEMU killed by {status}"));
    };
    if raw & 1 == 0 {
        return Verdict::Abnormal(format!(
            "QEMU exited with {raw} without a guest verdict (guest reset, shutdown or triple fault)"
        ));
    }
    let code = raw >> 1;
    let reported = output
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("app: exit=")?.parse::<i32>().ok());
    match (code, reported) {
        (101..=103, _) => Verdict::KernelFailure(code),
        (c, Some(r)) if c == r => Verdict::Exited(c),
        (0, None) => Verdict::Abnormal(
            "QEMU exited with status 1 and the guest never reported (QEMU error?)".into(),
        ),
        (c, _) => Verdict::Exited(c),
    }
}

/// A guest ready to start: the QEMU command and what must outlive it.
struct Prepared {
    cmd: Command,
    server: Option<HcaServer>,
    /// A GRUB ISO made for this run (removed afterwards).
    iso: Option<PathBuf>,
    timeout: Duration,
    echo: bool,
    kvm: bool,
}

/// Resolves the defaults (accelerator, HCA, app), builds the image, starts the HCA server.
fn prepare(opts: &Options) -> Result<Prepared, LaunchError> {
    if !qemu_available() {
        return Err(LaunchError::QemuMissing);
    }
    let kvm = match opts.accel {
        Accel::Kvm if !kvm_usable() => return Err(LaunchError::KvmUnavailable),
        Accel::Kvm => true,
        Accel::Tcg => false,
        Accel::Auto => kvm_usable(),
    };
    // The emulated HCA is the default under KVM; QEMU's proxy device crashes under TCG.
    let hca = opts.hca.unwrap_or(if kvm { Hca::Sim } else { Hca::None });
    if hca == Hca::Sim && !kvm {
        return Err(LaunchError::HcaNeedsKvm);
    }
    let app = opts.app.clone().unwrap_or_else(|| {
        let with_hca = hca == Hca::Sim || !opts.vfio.is_empty();
        String::from(if with_hca {
            DEFAULT_APP_HCA
        } else {
            DEFAULT_APP_NO_HCA
        })
    });
    let opts = &Options {
        hca: Some(hca),
        app: Some(app.clone()),
        ..opts.clone()
    };
    let server = match hca {
        Hca::Sim => Some(HcaServer::start(&build_hca_sim()?, &opts.hca_args)?),
        Hca::None => None,
    };
    let elf = build_image(&app)?;
    let (image, iso) = match opts.boot {
        BootVia::Pvh => (elf, None),
        BootVia::Grub => {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let iso = elf.with_file_name(format!("{}-{}-{n}.iso", app, std::process::id()));
            build_grub_iso(&elf, &opts.cmdline, &iso)?;
            (iso.clone(), Some(iso))
        }
    };
    let mut cmd = qemu_command(opts, &image, kvm);
    if let Some(server) = &server {
        cmd.arg("-device").arg(server.qemu_device());
        inherit(&mut cmd, server.qemu_fd());
    }
    if opts.gdb {
        eprintln!("gdb: QEMU waits for a debugger on :1234. Attach with:");
        eprintln!("  gdb {} -ex 'target remote :1234'", image.display());
    }
    // A debugging session is not timed out.
    let timeout = if opts.gdb {
        Duration::from_secs(7 * 24 * 3600)
    } else {
        opts.timeout
    };
    Ok(Prepared {
        cmd,
        server,
        iso,
        timeout,
        echo: opts.echo,
        kvm,
    })
}

/// Builds (if needed) and boots the image; returns the verdict and the guest's output.
pub fn run(opts: &Options) -> Result<RunResult, LaunchError> {
    let mut p = prepare(opts)?;
    let guest = spawn_guest(&mut p.cmd, p.echo, None, "")?;
    let result = guest.finish(Instant::now() + p.timeout);
    p.cleanup();
    let (verdict, output, wall_time) = result?;
    Ok(RunResult {
        verdict,
        output,
        wall_time,
        accel: if p.kvm { Accel::Kvm } else { Accel::Tcg },
    })
}

/// The two guests of `--pair` from the command line's options: `rdma-peer` as server
/// (`ip=10.0.0.1/24`, MAC 02:00:00:00:00:0a, its HCA listening on the wire socket in `dir`, with
/// the pcap if one was asked for) and as client (`ip=10.0.0.2/24`, MAC 02:00:00:00:00:0b,
/// connecting). Wire faults apply to both HCAs. The MACs are the HCAs' (`mlx5-sim --mac`) and
/// the `mac=` each guest checks against its port.
pub fn pair_options(o: &Options, dir: &Path) -> (Options, Options) {
    let wire = dir.join("wire.sock").to_string_lossy().into_owned();
    let guest = |role: &str, ip: &str, mac: &str, wire_flag: &str, pcap: bool| {
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
            cmdline: format!("role={role} ip={ip}/24 mac={mac} {}", o.cmdline)
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
            "02:00:00:00:00:0a",
            "--wire-listen",
            true,
        ),
        guest(
            "client",
            "10.0.0.2",
            "02:00:00:00:00:0b",
            "--wire-connect",
            false,
        ),
    )
}

/// Lines a guest prints that start with this go to the other guest's serial input (without the
/// prefix): how the two apps of [`run_pair`] swap their RDMA endpoints.
pub const RELAY_PREFIX: &str = "peer: ";

/// Boots two guests side by side whose serial lines starting with [`RELAY_PREFIX`] are relayed
/// to each other. `a` is started first: if its HCA listens on a wire (`--hca-wire listen:`),
/// `b` is started once that socket exists, so `b`'s HCA can connect to it.
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
    let to_a = Relay::default();
    let to_b = Relay::default();
    let mut ga = spawn_guest(
        &mut pa.cmd,
        pa.echo,
        Some((to_b.clone(), to_a.clone())),
        "a| ",
    )?;
    if let Some(stdin) = ga.stdin() {
        to_a.lock().expect("relay lock").connect(stdin);
    }
    let mut gb = spawn_guest(&mut pb.cmd, pb.echo, Some((to_a, to_b.clone())), "b| ")?;
    if let Some(stdin) = gb.stdin() {
        to_b.lock().expect("relay lock").connect(stdin);
    }
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

impl Prepared {
    fn cleanup(&mut self) {
        // The server exits on EOF once QEMU is gone; make sure of it.
        self.server.take();
        if let Some(iso) = self.iso.take() {
            let _ = std::fs::remove_file(iso);
        }
    }
}

/// Where relayed lines go: the other guest's serial input. Lines wait in `pending` until that
/// guest is listening: its QEMU has started (`connect`) and its app has printed a relay line
/// itself (`open`). Bytes that reach a UART before the guest has set it up are lost (the
/// kernel's 16550 init clears the receive FIFO), and a line missing its first bytes no longer
/// matches what the app waits for.
#[derive(Default)]
struct RelayTarget {
    stdin: Option<std::process::ChildStdin>,
    listening: bool,
    pending: Vec<u8>,
}

impl RelayTarget {
    fn send(&mut self, msg: &[u8]) {
        self.pending.extend_from_slice(msg);
        self.flush();
    }

    fn flush(&mut self) {
        if let (true, Some(stdin)) = (self.listening, self.stdin.as_mut()) {
            let _ = stdin
                .write_all(&std::mem::take(&mut self.pending))
                .and_then(|()| stdin.flush());
        }
    }

    fn connect(&mut self, stdin: std::process::ChildStdin) {
        self.stdin = Some(stdin);
        self.flush();
    }

    /// The guest behind this target printed a relay line: its app runs and reads its serial.
    fn open(&mut self) {
        self.listening = true;
        self.flush();
    }
}

type Relay = std::sync::Arc<std::sync::Mutex<RelayTarget>>;

/// A running QEMU whose output is being collected.
struct Guest {
    child: Child,
    rx: mpsc::Receiver<String>,
    readers: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
}

impl Guest {
    fn stdin(&mut self) -> Option<std::process::ChildStdin> {
        self.child.stdin.take()
    }

    /// Waits for QEMU to exit (killing it at `deadline`) and decodes the verdict.
    fn finish(mut self, deadline: Instant) -> Result<(Verdict, String, Duration), LaunchError> {
        let status = loop {
            if let Some(st) = self
                .child
                .try_wait()
                .map_err(|e| LaunchError::Io(e.to_string()))?
            {
                break Some(st);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for r in self.readers {
            let _ = r.join();
        }
        let output: String = self.rx.try_iter().collect();
        let verdict = match status {
            Some(st) => decode_exit(st, &output),
            None => Verdict::TimedOut,
        };
        Ok((verdict, output, self.start.elapsed()))
    }
}

/// Starts QEMU with its serial output collected (and echoed); with `relay`, serial input is a
/// pipe and relayed lines from this guest go to the other's input.
/// `relay`: (where this guest's relay lines go, this guest's own input).
fn spawn_guest(
    cmd: &mut Command,
    echo: bool,
    relay: Option<(Relay, Relay)>,
    tag: &'static str,
) -> Result<Guest, LaunchError> {
    let start = Instant::now();
    let stdin = if relay.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    let mut child: Child = cmd
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LaunchError::Io(format!("starting QEMU: {e}")))?;
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let readers = vec![
        spawn_reader(stdout, tx.clone(), echo, false, tag, relay),
        spawn_reader(stderr, tx, echo, true, tag, None),
    ];
    Ok(Guest {
        child,
        rx,
        readers,
        start,
    })
}

fn spawn_reader(
    src: impl Read + Send + 'static,
    tx: mpsc::Sender<String>,
    echo: bool,
    to_stderr: bool,
    tag: &'static str,
    relay: Option<(Relay, Relay)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(src);
        let mut line = Vec::new();
        while reader
            .read_until(b'\n', &mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            let text = String::from_utf8_lossy(&line).replace('\r', "");
            if echo {
                let shown = format!("{tag}{text}");
                if to_stderr {
                    let _ = std::io::stderr().write_all(shown.as_bytes());
                } else {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(shown.as_bytes());
                    let _ = out.flush();
                }
            }
            if let (Some((out, own)), Some(msg)) = (&relay, text.strip_prefix(RELAY_PREFIX)) {
                own.lock().expect("relay lock").open();
                out.lock().expect("relay lock").send(msg.as_bytes());
            }
            let _ = tx.send(text);
            line.clear();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn pair_options_make_a_server_and_a_client() {
        let args =
            "--pair --hca-pcap /tmp/run.pcap --wire-fault drop=0.01,seed=3 --cmdline log=debug";
        let o = parse_args(args.split(' ')).unwrap();
        assert!(o.pair);
        let (s, c) = pair_options(&o, Path::new("/tmp/p"));
        assert_eq!(
            s.cmdline,
            "role=server ip=10.0.0.1/24 mac=02:00:00:00:00:0a log=debug"
        );
        assert_eq!(
            c.cmdline,
            "role=client ip=10.0.0.2/24 mac=02:00:00:00:00:0b log=debug"
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
}
