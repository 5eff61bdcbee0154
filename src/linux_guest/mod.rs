//! A Linux guest for tests: Debian's 6.1 kernel booted under TCG with the emulated HCA
//! (`mlx5-sim --listen`) attached through QEMU's `x-pci-proxy-dev`; the VFIO and mlx5_core
//! tests (tests/linux_guest.rs) boot it.
//!
//! - [`prepare_kernel`]: `apt-get download`s the newest `linux-image-6.1.0-*-amd64`,
//!   `busybox-static` and `kmod` (nothing is installed), unpacks them with `dpkg -x` and runs
//!   the package's own `depmod` (modules.dep is not in the .deb). Cached under
//!   [`cache_dir`] (remove its `kernel/` to pick up a newer kernel).
//! - [`Initramfs`]: a newc cpio archive written here (busybox, the modules a test needs in
//!   dependency order, a test script, static binaries), uncompressed (the kernel takes it so).
//! - [`patched_qemu`]: QEMU 10.0's `x-pci-proxy-dev` calls KVM's irqfd code without checking
//!   that KVM is in use and crashes under TCG (hw/remote/proxy.c `proxy_intx_update` ->
//!   `kvm_irqchip_add_irqfd_notifier_gsi` -> `kvm_vm_ioctl(NULL)`). A private copy of the
//!   binary whose two exported `kvm_irqchip_{add,remove}_irqfd_notifier_gsi` return -ENOSYS
//!   runs it (no INTx, which a polling driver does not need). The original bytes are checked
//!   before patching; the stock binary is never modified, and `cargo run` never uses the copy.
//! - [`run_guest`]: starts `mlx5-sim --listen SOCK --trace`, boots the guest (optionally with
//!   an emulated intel-iommu, `intel_iommu=on`), and returns the serial console and the trace.
//!
//! Every step that cannot be done on this host returns [`Skip`] with the reason.

use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::workspace_root;

mod guest;
mod initramfs;
mod kernel;
pub mod nvme;
pub mod peer;
mod peer_image;
mod qemu;

pub use guest::{build_static_example, dump, run_guest, GuestRun, GuestSpec};
pub use initramfs::{mlx5_core_script, vfio_script, Initramfs, INIT};
pub use kernel::{prepare_kernel, Kernel};
pub use nvme::prepare_nvme_image;
pub use peer_image::{prepare_peer_image, PeerImage, PEER_INIT};
pub use qemu::{patched_qemu, stock_qemu};

/// Why a guest test cannot run here (printed as `SKIPPED: ...`).
#[derive(Debug)]
pub struct Skip(pub String);

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn skip(why: impl Into<String>) -> Skip {
    Skip(why.into())
}

/// `$XDG_CACHE_HOME/mlx5-linux-guest` when XDG_CACHE_HOME is set, else `target/linux-guest`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x).join("mlx5-linux-guest"),
        _ => workspace_root().join("target").join("linux-guest"),
    }
}

/// One preparation at a time (tests run in parallel threads).
static PREPARE: Mutex<()> = Mutex::new(());

fn run_ok(cmd: &mut Command, what: &str) -> Result<String, Skip> {
    let out = cmd
        .output()
        .map_err(|e| skip(format!("{what}: cannot run: {e}")))?;
    if !out.status.success() {
        return Err(skip(format!(
            "{what}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether long steps show progress: on a terminal (stderr), unless `MLX5_QUIET` is set or the
/// launcher runs with `-q` ([`crate::progress::enabled`]).
pub fn show_progress() -> bool {
    crate::progress::enabled()
}
