use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::guest::spawn_guest;
use crate::image::{build_grub_iso, build_hca_sim, build_image};
use crate::qemu::{inherit, qemu_command, HcaServer};
use crate::{
    kvm_usable, qemu_available, status, Accel, BootVia, Hca, LaunchError, Options, DEFAULT_APP_HCA,
    DEFAULT_APP_NO_HCA,
};

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
pub(crate) struct Prepared {
    pub(crate) cmd: Command,
    pub(crate) server: Option<HcaServer>,
    /// A GRUB ISO made for this run (removed afterwards).
    pub(crate) iso: Option<PathBuf>,
    pub(crate) timeout: Duration,
    pub(crate) echo: bool,
    pub(crate) kvm: bool,
}

/// Resolves the defaults (accelerator, HCA, app), builds the image, starts the HCA server.
pub(crate) fn prepare(opts: &Options) -> Result<Prepared, LaunchError> {
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
    let guest = spawn_guest(&mut p.cmd, p.echo, "")?;
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

impl Prepared {
    pub(crate) fn cleanup(&mut self) {
        // The server exits on EOF once QEMU is gone; make sure of it.
        self.server.take();
        if let Some(iso) = self.iso.take() {
            let _ = std::fs::remove_file(iso);
        }
    }
}
