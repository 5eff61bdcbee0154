use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::{qemu_binary, BootVia, Hca, LaunchError, Machine, Options};

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
pub(crate) fn inherit(cmd: &mut Command, fd: i32) {
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
