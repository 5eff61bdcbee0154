//! The launcher: builds the unikernel image for `x86_64-unknown-none` with a nested cargo and
//! boots it in QEMU, serial on stdout, and turns the application's result into an exit status.
//!
//! `cargo run -- --help` lists the options. The boot tests in `tests/` use this library too.

use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

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

mod guest;
mod image;
mod pair;
mod qemu;
mod run;
#[cfg(test)]
mod tests;

pub use image::{build_grub_iso, build_hca_sim, build_image};
pub use pair::{pair_options, run_pair};
pub use qemu::{qemu_command, HcaServer};
pub use run::{decode_exit, run, RunResult, Verdict};

pub(crate) use qemu::inherit;
pub(crate) use run::prepare;

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
    /// `--peer-neigh`: static neighbour entries on both sides of the Linux peer run.
    pub peer_neigh: bool,
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
            peer_neigh: false,
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
