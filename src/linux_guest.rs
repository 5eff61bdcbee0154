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
use std::fs;
use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{inherit, workspace_root};

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

/// The unpacked Debian kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// e.g. `6.1.0-57-amd64`.
    pub version: String,
    pub vmlinuz: PathBuf,
    /// The unpacked packages (`lib/modules/VERSION`, `bin/busybox`).
    pub root: PathBuf,
}

impl Kernel {
    fn modules_dir(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.version)
    }

    /// `names` (module names, `-` and `_` alike) with their dependencies from modules.dep, in
    /// load order (dependencies first), as paths relative to the modules directory.
    pub fn module_closure(&self, names: &[&str]) -> Result<Vec<String>, Skip> {
        let dep = fs::read_to_string(self.modules_dir().join("modules.dep"))
            .map_err(|e| skip(format!("modules.dep: {e}")))?;
        let norm = |s: &str| s.replace('-', "_");
        let base = |p: &str| {
            let f = p.rsplit('/').next().unwrap_or(p);
            norm(f.split(".ko").next().unwrap_or(f))
        };
        let mut order: Vec<String> = Vec::new();
        for name in names {
            let line = dep
                .lines()
                .find(|l| base(l.split(':').next().unwrap_or("")) == norm(name))
                .ok_or_else(|| skip(format!("no module {name} in modules.dep")))?;
            let (target, deps) = line.split_once(':').unwrap_or((line, ""));
            // modules.dep lists the whole closure; modprobe loads it right to left.
            for m in deps.split_whitespace().rev().chain([target]) {
                if !order.iter().any(|o| o == m) {
                    order.push(m.to_string());
                }
            }
        }
        Ok(order)
    }

    /// The module file, decompressed if the package ships it compressed.
    pub fn module_bytes(&self, rel: &str) -> Result<Vec<u8>, Skip> {
        let path = self.modules_dir().join(rel);
        let (tool, args): (&str, &[&str]) = if rel.ends_with(".ko.xz") {
            ("xz", &["-dc"])
        } else if rel.ends_with(".ko.zst") {
            ("zstd", &["-dcq"])
        } else if rel.ends_with(".ko.gz") {
            ("gzip", &["-dc"])
        } else {
            return fs::read(&path).map_err(|e| skip(format!("{}: {e}", path.display())));
        };
        let out = Command::new(tool)
            .args(args)
            .arg(&path)
            .output()
            .map_err(|e| skip(format!("{tool} for {rel}: {e}")))?;
        if !out.status.success() {
            return Err(skip(format!("{tool} -d {rel} failed")));
        }
        Ok(out.stdout)
    }
}

/// Downloads and unpacks the newest Debian 6.1 kernel, busybox-static and kmod (cached).
pub fn prepare_kernel() -> Result<Kernel, Skip> {
    let _g = PREPARE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache_dir().join("kernel");
    let stamp = dir.join("READY");
    if let Ok(v) = fs::read_to_string(&stamp) {
        let version = v.trim().to_string();
        let k = Kernel {
            vmlinuz: dir.join("root/boot").join(format!("vmlinuz-{version}")),
            root: dir.join("root"),
            version,
        };
        if k.vmlinuz.exists() {
            return Ok(k);
        }
    }
    let _step = crate::progress::Step::start("fetching Debian's 6.1 kernel (first time only)");
    let debs = dir.join("debs");
    fs::create_dir_all(&debs).map_err(|e| skip(format!("{}: {e}", debs.display())))?;
    let list = run_ok(
        Command::new("apt-cache").args([
            "search",
            "--names-only",
            r"^linux-image-6\.1\.0-[0-9]+-amd64$",
        ]),
        "apt-cache search linux-image-6.1.0-*-amd64",
    )?;
    let abi = |p: &str| -> Option<u32> {
        p.strip_prefix("linux-image-6.1.0-")?
            .strip_suffix("-amd64")?
            .parse()
            .ok()
    };
    let image = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|p| abi(p).is_some())
        .max_by_key(|p| abi(p))
        .ok_or_else(|| {
            skip("apt knows no linux-image-6.1.0-*-amd64 (run .ci/setup: apt-get update)")
        })?
        .to_string();
    let version = image.trim_start_matches("linux-image-").to_string();
    let have = |pkg: &str| -> Option<PathBuf> {
        fs::read_dir(&debs)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
            })
    };
    let mut paths = Vec::new();
    for pkg in [image.as_str(), "busybox-static", "kmod"] {
        if have(pkg).is_none() {
            run_ok(
                Command::new("apt-get")
                    .args(["download", "-q", pkg])
                    .current_dir(&debs),
                &format!("apt-get download {pkg}"),
            )?;
        }
        paths.push(have(pkg).ok_or_else(|| skip(format!("apt-get download {pkg} left no .deb")))?);
    }
    let root = dir.join("root");
    let kmod = dir.join("kmod");
    let _ = fs::remove_dir_all(&root);
    let _ = fs::remove_dir_all(&kmod);
    for (deb, to) in [(&paths[0], &root), (&paths[1], &root), (&paths[2], &kmod)] {
        run_ok(
            Command::new("dpkg").arg("-x").arg(deb).arg(to),
            &format!("dpkg -x {}", deb.display()),
        )?;
    }
    // modules.dep is made at install time; the package's kmod is depmod when called so.
    let depmod = kmod.join("depmod");
    let _ = fs::remove_file(&depmod);
    std::os::unix::fs::symlink("bin/kmod", &depmod)
        .map_err(|e| skip(format!("symlink depmod: {e}")))?;
    run_ok(
        Command::new(&depmod).arg("-b").arg(&root).arg(&version),
        "depmod (from the kmod package)",
    )?;
    fs::write(&stamp, &version).map_err(|e| skip(format!("{}: {e}", stamp.display())))?;
    Ok(Kernel {
        vmlinuz: root.join("boot").join(format!("vmlinuz-{version}")),
        root,
        version,
    })
}

/// `mov $-38 (-ENOSYS), %eax; ret`.
const ENOSYS_STUB: [u8; 6] = [0xb8, 0xda, 0xff, 0xff, 0xff, 0xc3];
/// The two functions and the first bytes they must have before patching: both are thin
/// wrappers around `kvm_irqchip_assign_irqfd` in QEMU 10.0.2 (accel/kvm/kvm-all.c)
/// as Debian builds it: `mov $1,%r8d` / `mov %edx,%ecx; xor %r8d,%r8d; xor ..`.
const PATCHES: [(&str, [u8; 6]); 2] = [
    (
        "kvm_irqchip_add_irqfd_notifier_gsi",
        [0x41, 0xb8, 0x01, 0x00, 0x00, 0x00],
    ),
    (
        "kvm_irqchip_remove_irqfd_notifier_gsi",
        [0x89, 0xd1, 0x45, 0x31, 0xc0, 0x31],
    ),
];

/// Finds exported function symbols in an ELF64 little-endian file: name -> (file offset, size).
fn dynsym_offsets(elf: &[u8], wanted: &[&str]) -> Result<Vec<(u64, u64)>, String> {
    let rd = |off: usize, n: usize| -> Result<u64, String> {
        let b = elf.get(off..off + n).ok_or("ELF truncated")?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        Ok(u64::from_le_bytes(v))
    };
    if elf.get(..5) != Some(b"\x7fELF\x02") || elf.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file".into());
    }
    let (phoff, shoff) = (rd(0x20, 8)? as usize, rd(0x28, 8)? as usize);
    let (phentsize, phnum) = (rd(0x36, 2)? as usize, rd(0x38, 2)? as usize);
    let (shentsize, shnum) = (rd(0x3a, 2)? as usize, rd(0x3c, 2)? as usize);
    // PT_LOAD segments: (vaddr, offset, filesz, executable)
    let mut loads = Vec::new();
    for i in 0..phnum {
        let p = phoff + i * phentsize;
        if rd(p, 4)? == 1 {
            loads.push((
                rd(p + 16, 8)?,
                rd(p + 8, 8)?,
                rd(p + 32, 8)?,
                rd(p + 4, 4)? & 1 != 0,
            ));
        }
    }
    let sec = |i: usize| -> Result<(u64, u64, u64, u64), String> {
        let s = shoff + i * shentsize;
        // (type, offset, size, link)
        Ok((
            rd(s + 4, 4)?,
            rd(s + 24, 8)?,
            rd(s + 32, 8)?,
            rd(s + 40, 4)?,
        ))
    };
    let mut found = vec![None; wanted.len()];
    for i in 0..shnum {
        let (ty, off, size, link) = sec(i)?;
        if ty != 11 {
            continue; // SHT_DYNSYM
        }
        let strtab = sec(link as usize)?.1 as usize;
        for s in (off as usize..(off + size) as usize).step_by(24) {
            let name_off = strtab + rd(s, 4)? as usize;
            let info = rd(s + 4, 1)?;
            let (value, sz) = (rd(s + 8, 8)?, rd(s + 16, 8)?);
            let end = elf[name_off..]
                .iter()
                .position(|&b| b == 0)
                .ok_or("bad string table")?;
            let name = &elf[name_off..name_off + end];
            if let Some(k) = wanted.iter().position(|w| w.as_bytes() == name) {
                if info & 0xf != 2 || value == 0 {
                    return Err(format!("{} is not a defined function", wanted[k]));
                }
                let seg = loads
                    .iter()
                    .find(|l| l.0 <= value && value < l.0 + l.2 && l.3)
                    .ok_or_else(|| format!("{} is not in an executable segment", wanted[k]))?;
                found[k] = Some((value - seg.0 + seg.1, sz));
            }
        }
    }
    wanted
        .iter()
        .zip(found)
        .map(|(w, f)| f.ok_or_else(|| format!("{w} is not exported (.dynsym)")))
        .collect()
}

/// The stock QEMU binary: `$QEMU` or `qemu-system-x86_64` on PATH.
pub fn stock_qemu() -> Result<PathBuf, Skip> {
    if let Some(q) = std::env::var_os("QEMU") {
        return Ok(PathBuf::from(q));
    }
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("qemu-system-x86_64"))
                .find(|c| c.is_file())
        })
        .ok_or_else(|| skip("qemu-system-x86_64 is not installed (run .ci/setup)"))
}

/// Writes (or reuses) the private TCG-proxy copy of QEMU under [`cache_dir`].
pub fn patched_qemu() -> Result<PathBuf, Skip> {
    let _g = PREPARE.lock().unwrap_or_else(|e| e.into_inner());
    let stock = stock_qemu()?;
    let elf = fs::read(&stock).map_err(|e| skip(format!("{}: {e}", stock.display())))?;
    let names: Vec<&str> = PATCHES.iter().map(|p| p.0).collect();
    let offs = dynsym_offsets(&elf, &names)
        .map_err(|e| skip(format!("cannot patch {} for TCG: {e}", stock.display())))?;
    let mut patched = elf.clone();
    for ((name, expect), (off, size)) in PATCHES.iter().zip(offs) {
        let off = off as usize;
        let now = &elf[off..off + ENOSYS_STUB.len()];
        if size < ENOSYS_STUB.len() as u64 || now != expect {
            return Err(skip(format!(
                "cannot patch {} for TCG: {name} starts with {now:02x?}, not the expected {expect:02x?} \
                 (another QEMU build; the proxy device needs KVM with it)",
                stock.display()
            )));
        }
        patched[off..off + ENOSYS_STUB.len()].copy_from_slice(&ENOSYS_STUB);
    }
    let dir = cache_dir().join("qemu");
    fs::create_dir_all(&dir).map_err(|e| skip(format!("{}: {e}", dir.display())))?;
    let dst = dir.join("qemu-system-x86_64-tcgproxy");
    if fs::read(&dst).ok().as_deref() != Some(&patched[..]) {
        let tmp = dir.join("qemu.tmp");
        fs::write(&tmp, &patched).map_err(|e| skip(format!("{}: {e}", tmp.display())))?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))
            .and_then(|_| fs::rename(&tmp, &dst))
            .map_err(|e| skip(format!("{}: {e}", dst.display())))?;
    }
    Ok(dst)
}

/// A newc ("070701") cpio archive, built in memory.
#[derive(Default)]
pub struct Initramfs {
    data: Vec<u8>,
    ino: u32,
}

impl Initramfs {
    /// The base image: directories, /dev/console, busybox as /bin/sh, and `init`.
    pub fn new(kernel: &Kernel, init: &str) -> Result<Initramfs, Skip> {
        let mut i = Initramfs::default();
        for d in ["bin", "dev", "proc", "sys", "tmp", "lib", "lib/modules"] {
            i.entry(d, 0o040755, 0, &[]);
        }
        i.entry("dev/console", 0o020600, (5 << 8) | 1, &[]);
        let bb = kernel.root.join("bin/busybox");
        let bb = fs::read(&bb).map_err(|e| skip(format!("{}: {e}", bb.display())))?;
        i.file("bin/busybox", &bb, true);
        i.entry("bin/sh", 0o120777, 0, b"busybox");
        i.file("init", init.as_bytes(), true);
        Ok(i)
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            rdev >> 8,
            rdev & 0xff,
            name.len() as u32 + 1,
            0,
        ];
        self.data.extend_from_slice(b"070701");
        for f in fields {
            self.data.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.data.extend_from_slice(name.as_bytes());
        self.data.push(0);
        self.pad();
        self.data.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.data.len().is_multiple_of(4) {
            self.data.push(0);
        }
    }

    /// A directory (its parent must be in the archive already).
    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, 0, &[]);
    }

    /// A symbolic link `name` -> `target`.
    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, 0, target.as_bytes());
    }

    /// A regular file.
    pub fn file(&mut self, name: &str, data: &[u8], exec: bool) {
        self.entry(name, if exec { 0o100755 } else { 0o100644 }, 0, data);
    }

    /// The modules `names` with their dependencies, as `lib/modules/<base>.ko`, and
    /// `lib/modules/order` listing them in load order.
    pub fn modules(&mut self, kernel: &Kernel, names: &[&str]) -> Result<(), Skip> {
        let mut order = String::new();
        for rel in kernel.module_closure(names)? {
            let f = rel.rsplit('/').next().unwrap_or(&rel);
            let base = format!("{}.ko", f.split(".ko").next().unwrap_or(f));
            let bytes = kernel.module_bytes(&rel)?;
            self.file(&format!("lib/modules/{base}"), &bytes, false);
            order.push_str(&base);
            order.push('\n');
        }
        self.file("lib/modules/order", order.as_bytes(), false);
        Ok(())
    }

    /// Writes the archive (with its trailer) to `path`.
    pub fn write(mut self, path: &Path) -> Result<(), Skip> {
        self.entry("TRAILER!!!", 0, 0, &[]);
        fs::write(path, &self.data).map_err(|e| skip(format!("{}: {e}", path.display())))
    }
}

/// The guest's /init: mounts, optional huge pages, the modules of `lib/modules/order` (the last
/// one with `$guest_last_args`), then `/test.sh`, then a dmesg dump between markers and
/// poweroff. Console lines of its own start with `GUEST:`.
pub const INIT: &str = r#"#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
up() { cut -d' ' -f1 /proc/uptime; }
echo "GUEST: init at $(up)s"
if [ -f /hugepages ]; then
  cat /hugepages > /proc/sys/vm/nr_hugepages
  mkdir -p /dev/hugepages && mount -t hugetlbfs -o pagesize=2M none /dev/hugepages
  echo "GUEST: huge pages $(grep HugePages_Total /proc/meminfo | tr -s ' ')"
fi
BDF=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/vendor):$(cat $d/device)" = "0x15b3:0x1017" ] && BDF=${d##*/}
done
export BDF
echo "GUEST: mlx5 function ${BDF:-none}"
. /test.sh
echo "GUEST: ---- dmesg ----"
dmesg
echo "GUEST: ---- end at $(up)s ----"
poweroff -f
"#;

/// Test script: load the modules, then run mlx5_core's probe (in the background: it can block
/// for a command timeout) and wait for it.
pub fn mlx5_core_script(wait_s: u32) -> String {
    format!(
        r#"echo 8 > /proc/sys/kernel/printk
last=$(tail -1 /lib/modules/order)
for m in $(cat /lib/modules/order); do
  [ "$m" = "$last" ] && break
  insmod /lib/modules/$m || echo "GUEST: insmod $m FAILED"
done
echo "GUEST: insmod $last at $(up)s"
( insmod /lib/modules/$last dyndbg=+p; echo "GUEST: insmod $last rc=$? at $(up)s" ) &
pid=$!
k=0
while [ $k -lt {wait_s} ] && kill -0 $pid 2>/dev/null; do sleep 1; k=$((k+1)); done
kill -0 $pid 2>/dev/null && echo "GUEST: insmod still running after {wait_s}s"
"#
    )
}

/// Test script: load vfio, bind the function to vfio-pci, run `cmd` (with `$BDF`).
pub fn vfio_script(cmd: &str) -> String {
    format!(
        r#"for m in $(cat /lib/modules/order); do insmod /lib/modules/$m || echo "GUEST: insmod $m FAILED"; done
echo vfio-pci > /sys/bus/pci/devices/$BDF/driver_override
echo $BDF > /sys/bus/pci/drivers_probe
echo "GUEST: $BDF bound to $(basename $(readlink /sys/bus/pci/devices/$BDF/driver)), iommu group $(basename $(readlink /sys/bus/pci/devices/$BDF/iommu_group)), /dev/vfio: $(ls /dev/vfio | tr '\n' ' ')"
t0=$(up)
{cmd}
echo "GUEST: rc=$? (ran from ${{t0}}s to $(up)s)"
"#
    )
}

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
    let mut append = String::from("console=ttyS0,115200 ignore_loglevel panic=-1 printk.time=1");
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
    let step = crate::progress::Step::start(format!("building {package} example {example} (static)"));
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


#[path = "peer.rs"]
pub mod peer;

/// Whether long steps show progress: on a terminal (stderr), unless `MLX5_QUIET` is set or the
/// launcher runs with `-q` ([`crate::progress::enabled`]).
pub fn show_progress() -> bool {
    crate::progress::enabled()
}

fn progress(msg: &str) {
    if show_progress() {
        eprintln!("peer image: {msg}");
    }
}

/// rdma-core's userspace and iproute2, whose executables go into the peer image.
const PEER_PKGS: [&str; 7] = [
    "libibverbs1",
    "ibverbs-providers",
    "ibverbs-utils",
    "librdmacm1",
    "rdmacm-utils",
    "perftest",
    "iproute2",
];

/// Executables copied into the peer image (from the unpacked packages).
const PEER_BINS: [&str; 14] = [
    "ibv_devinfo",
    "ibv_devices",
    "ibv_rc_pingpong",
    "ibv_ud_pingpong",
    "ib_write_bw",
    "ib_write_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_send_bw",
    "ib_send_lat",
    "ib_atomic_bw",
    "ib_atomic_lat",
    "ip",
    "rdma",
];

/// The peer's modules (their module dependencies come from modules.dep). rxe allocates a
/// `crc32` shash (drivers/infiniband/sw/rxe/rxe_icrc.c `rxe_icrc_init`) and nothing here runs
/// modprobe, so a crc32 implementation is loaded first.
const PEER_MODULES: [&str; 7] = [
    "virtio_pci",
    "virtio_net",
    "crc32_generic",
    "crc32-pclmul",
    "rdma_rxe",
    "ib_uverbs",
    "rdma_ucm",
];

/// Bump when the image's content (not its packages) changes, so caches are rebuilt.
const PEER_IMAGE_VERSION: &str = "2";

/// The peer's kernel and initramfs.
#[derive(Clone, Debug)]
pub struct PeerImage {
    pub kernel: Kernel,
    pub initrd: PathBuf,
}

/// The library packages of the Depends closure of `pkgs` (apt-cache depends --recurse).
fn lib_closure(pkgs: &[&str]) -> Result<Vec<String>, Skip> {
    let out = run_ok(
        Command::new("apt-cache")
            .args([
                "depends",
                "--recurse",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
            ])
            .args(pkgs),
        "apt-cache depends",
    )?;
    let mut libs: Vec<String> = out
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('<'))
        .map(|l| l.trim().to_string())
        .filter(|p| p.starts_with("lib") || p == "zlib1g")
        // Data/config packages of some libraries, and packages with no shared objects we need.
        .filter(|p| {
            !["libc6-", "libpam", "libsemanage", "libaudit-common", "libtirpc-common"]
                .iter()
                .any(|x| p.starts_with(x))
        })
        .filter(|p| !pkgs.contains(&p.as_str()))
        .collect();
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// DT_NEEDED entries and the program interpreter of an ELF file (read with `readelf`).
fn elf_needs(path: &Path) -> Result<(Vec<String>, Option<String>), Skip> {
    let out = run_ok(
        Command::new("readelf").arg("-dlW").arg(path),
        "readelf (binutils)",
    )?;
    let mut needed = Vec::new();
    let mut interp = None;
    for l in out.lines() {
        if l.contains("(NEEDED)") {
            if let Some(n) = l.split('[').nth(1).and_then(|r| r.split(']').next()) {
                needed.push(n.to_string());
            }
        }
        if let Some(r) = l.split("Requesting program interpreter:").nth(1) {
            interp = Some(r.trim().trim_end_matches(']').trim().to_string());
        }
    }
    Ok((needed, interp))
}

/// Builds (or reuses) the Linux RDMA peer image: the Debian 6.1 kernel of [`prepare_kernel`],
/// busybox, the modules of `PEER_MODULES`, rdma-core's tools with the rxe provider and their
/// shared libraries, and [`PEER_INIT`]. Nothing is installed on the host.
pub fn prepare_peer_image() -> Result<PeerImage, Skip> {
    let kernel = prepare_kernel()?;
    let _g = PREPARE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache_dir().join("peer");
    let initrd = dir.join("initramfs.cpio");
    let stamp = dir.join("READY");
    let want = format!(
        "{} {} {:016x}",
        kernel.version,
        PEER_IMAGE_VERSION,
        fnv1a(PEER_INIT.as_bytes())
    );
    if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && initrd.exists() {
        return Ok(PeerImage { kernel, initrd });
    }
    let t0 = Instant::now();
    let debs = dir.join("debs");
    fs::create_dir_all(&debs).map_err(|e| skip(format!("{}: {e}", debs.display())))?;
    let libs = lib_closure(&PEER_PKGS)?;
    let all: Vec<String> = PEER_PKGS
        .iter()
        .map(|s| s.to_string())
        .chain(libs)
        .collect();
    let have = |pkg: &str| -> Option<PathBuf> {
        fs::read_dir(&debs).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
        })
    };
    let missing: Vec<&String> = all.iter().filter(|p| have(p).is_none()).collect();
    if !missing.is_empty() {
        progress(&format!(
            "apt-get download of {} packages (first time only)",
            missing.len()
        ));
        for (k, chunk) in missing.chunks(8).enumerate() {
            progress(&format!(
                "  [{}/{}] {}",
                (k * 8 + chunk.len()).min(missing.len()),
                missing.len(),
                chunk.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
            ));
            run_ok(
                Command::new("apt-get")
                    .args(["download", "-q"])
                    .args(chunk.iter().map(|s| s.as_str()))
                    .current_dir(&debs),
                "apt-get download (RDMA userspace)",
            )?;
        }
    }
    progress("unpacking");
    let uroot = dir.join("uroot");
    let _ = fs::remove_dir_all(&uroot);
    fs::create_dir_all(&uroot).map_err(|e| skip(format!("{}: {e}", uroot.display())))?;
    for p in &all {
        let deb = have(p).ok_or_else(|| skip(format!("apt-get download {p} left no .deb")))?;
        run_ok(
            Command::new("dpkg").arg("-x").arg(&deb).arg(&uroot),
            &format!("dpkg -x {}", deb.display()),
        )?;
    }
    progress("writing the initramfs");
    let mut img = Initramfs::new(&kernel, PEER_INIT)?;
    for d in [
        "sbin",
        "run",
        "root",
        "etc",
        "etc/libibverbs.d",
        "usr",
        "usr/bin",
        "usr/lib",
        "usr/lib/x86_64-linux-gnu",
        "usr/lib/x86_64-linux-gnu/libibverbs",
        "lib64",
    ] {
        img.dir(d);
    }
    img.symlink("lib/x86_64-linux-gnu", "../usr/lib/x86_64-linux-gnu");
    img.modules(&kernel, &PEER_MODULES)?;
    let mut elfs: Vec<PathBuf> = Vec::new();
    for b in PEER_BINS {
        let f = ["usr/bin", "usr/sbin", "bin", "sbin"]
            .iter()
            .map(|d| uroot.join(d).join(b))
            .find(|p| p.is_file())
            .ok_or_else(|| skip(format!("{b} is not in the unpacked packages")))?;
        let bytes = fs::read(&f).map_err(|e| skip(format!("{}: {e}", f.display())))?;
        img.file(&format!("usr/bin/{b}"), &bytes, true);
        elfs.push(f);
    }
    let provdir = uroot.join("usr/lib/x86_64-linux-gnu/libibverbs");
    let prov = fs::read_dir(&provdir)
        .map_err(|e| skip(format!("{}: {e}", provdir.display())))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("librxe-rdmav") && n.ends_with(".so"))
        })
        .ok_or_else(|| skip("ibverbs-providers has no librxe-rdmav*.so"))?;
    let name = prov.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let bytes = fs::read(&prov).map_err(|e| skip(format!("{}: {e}", prov.display())))?;
    img.file(&format!("usr/lib/x86_64-linux-gnu/libibverbs/{name}"), &bytes, false);
    elfs.push(prov);
    let drv = uroot.join("etc/libibverbs.d/rxe.driver");
    let bytes = fs::read(&drv).map_err(|e| skip(format!("{}: {e}", drv.display())))?;
    img.file("etc/libibverbs.d/rxe.driver", &bytes, false);
    // Shared libraries: the DT_NEEDED closure, plus libgcc_s (glibc dlopens it for
    // pthread_exit/pthread_cancel), each under its soname.
    let libdirs = [
        uroot.join("lib/x86_64-linux-gnu"),
        uroot.join("usr/lib/x86_64-linux-gnu"),
        uroot.join("lib64"),
    ];
    let find = |so: &str| libdirs.iter().map(|d| d.join(so)).find(|p| p.exists());
    let mut todo: Vec<String> = vec!["libgcc_s.so.1".into()];
    let mut done: Vec<String> = Vec::new();
    let mut interps: Vec<String> = Vec::new();
    for e in &elfs {
        let (needed, interp) = elf_needs(e)?;
        todo.extend(needed);
        interps.extend(interp);
    }
    while let Some(so) = todo.pop() {
        if done.contains(&so) {
            continue;
        }
        let src = find(&so).ok_or_else(|| skip(format!("no package provides {so}")))?;
        let real = fs::canonicalize(&src).map_err(|e| skip(format!("{}: {e}", src.display())))?;
        let bytes = fs::read(&real).map_err(|e| skip(format!("{}: {e}", real.display())))?;
        // Executable: the program interpreter is one of them.
        img.file(&format!("usr/lib/x86_64-linux-gnu/{so}"), &bytes, true);
        let (needed, _) = elf_needs(&real)?;
        todo.extend(needed);
        done.push(so);
    }
    interps.sort();
    interps.dedup();
    for p in interps {
        let name = p.rsplit('/').next().unwrap_or(&p).to_string();
        if !done.contains(&name) {
            let src = find(&name).ok_or_else(|| skip(format!("no package provides {name}")))?;
            let real =
                fs::canonicalize(&src).map_err(|e| skip(format!("{}: {e}", src.display())))?;
            let bytes = fs::read(&real).map_err(|e| skip(format!("{}: {e}", real.display())))?;
            img.file(&format!("usr/lib/x86_64-linux-gnu/{name}"), &bytes, true);
            done.push(name.clone());
        }
        let link = p.trim_start_matches('/');
        if link != format!("usr/lib/x86_64-linux-gnu/{name}") && link != format!("lib/x86_64-linux-gnu/{name}") {
            img.symlink(link, &format!("/usr/lib/x86_64-linux-gnu/{name}"));
        }
    }
    img.file("etc/nsswitch.conf", b"hosts: files\n", false);
    img.file("etc/hosts", b"127.0.0.1 localhost\n", false);
    img.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", false);
    img.file("etc/group", b"root:x:0:\n", false);
    let tmp = dir.join("initramfs.tmp");
    img.write(&tmp)?;
    fs::rename(&tmp, &initrd).map_err(|e| skip(format!("{}: {e}", initrd.display())))?;
    let _ = fs::remove_dir_all(&uroot);
    fs::write(&stamp, &want).map_err(|e| skip(format!("{}: {e}", stamp.display())))?;
    progress(&format!(
        "ready in {:.1} s ({} shared libraries)",
        t0.elapsed().as_secs_f64(),
        done.len()
    ));
    Ok(PeerImage { kernel, initrd })
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x100_0000_01b3))
}

/// The peer's /init. Kernel command line words `name=value` arrive as environment variables:
/// - `peer_ip=10.0.0.1/24`: eth0's address (the RoCE NIC, on the stream link);
/// - `peer_neigh=IP,MAC`: a permanent neighbour entry (the unikernel answers no ARP);
/// - `peer_eth1=10.0.2.15/24`: eth1's address (QEMU user networking, the out-of-band TCP);
/// - `peer_wait_ping=IP`, `peer_delay=S`: before the command, wait for IP to answer, then sleep;
/// - `peer_cmd=...`: run by `sh -c` with `$GID` (the RoCE v2 GID index of peer_ip's IPv4
///   address), `$RXE` (rxe0) and `$PEER_IP`; its output is prefixed `OUT: `.
///
/// Console markers: `PEER: GID_INDEX=N`, `PEER: CMD_START`, `PEER: CMD_EXIT rc=N`, then the
/// non-zero `rdma statistic` counters and rxe's kernel messages, `PEER: DONE`, power off.
pub const PEER_INIT: &str = r#"#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "PEER: $*"; }
say "init at $(up)s"
echo 4 > /proc/sys/kernel/printk
for m in $(cat /lib/modules/order); do
  insmod /lib/modules/$m 2>/dev/null || say "insmod $m failed"
done
IP=/usr/bin/ip
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null
$IP link set lo up
$IP link set eth0 up
[ -n "$peer_ip" ] && $IP addr add "$peer_ip" dev eth0
if [ -n "$peer_neigh" ]; then
  $IP neigh replace "${peer_neigh%%,*}" lladdr "${peer_neigh#*,}" dev eth0 nud permanent \
    || say "neighbour $peer_neigh failed"
fi
if [ -n "$peer_eth1" ]; then
  $IP link set eth1 up
  $IP addr add "$peer_eth1" dev eth1
fi
/usr/bin/rdma link add rxe0 type rxe netdev eth0 || say "rdma link add failed"
PEER_IP=${peer_ip%%/*}
export PEER_IP RXE=rxe0
# The GID table entry that holds ::ffff:PEER_IP (shell builtins only: 1024 entries).
want=$(echo "$PEER_IP" | { IFS=. read a b c d; printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $a $b $c $d; })
GID=
k=0
while [ -z "$GID" ] && [ $k -lt 50 ]; do
  for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    read g < $f 2>/dev/null
    [ "$g" = "$want" ] && GID=${f##*/} && break
  done
  [ -z "$GID" ] && sleep 0.2
  k=$((k+1))
done
export GID
say "GID_INDEX=${GID:-none} gid=$want"
say "mac=$(cat /sys/class/net/eth0/address)"
if [ -n "$peer_wait_ping" ]; then
  k=0
  until ping -c1 -W1 "$peer_wait_ping" >/dev/null 2>&1 || [ $k -ge 60 ]; do k=$((k+1)); done
fi
[ -n "$peer_delay" ] && sleep "$peer_delay"
say "CMD_START at $(up)s: $peer_cmd"
t0=$(up)
# Fault finding for a command that hangs (its own output is block-buffered): every 30 s, the
# out-of-band TCP sockets (port 18515 = 0x4853; /proc/net/tcp: remote, state 01 established
# 02 syn-sent, tx:rx queue) and where each tool process waits.
( while sleep 30; do
    say "WATCH at $(up)s: tcp $(grep -i ':4853 ' /proc/net/tcp | awk '{printf "%s>%s st=%s q=%s; ", $2, $3, $4, $5}')"
    for d in /proc/[0-9]*; do
      read c < $d/comm 2>/dev/null
      case "$c" in ibv_*|ib_*_bw|ib_*_lat) say "WATCH $c: $(cut -d' ' -f3 $d/stat) wchan=$(cat $d/wchan 2>/dev/null) stack=$(tr '\n' ' ' < $d/stack 2>/dev/null | cut -c1-300)";; esac
    done
  done ) &
watch=$!
{ sh -c "$peer_cmd" 2>&1; echo $? > /tmp/rc; } | while IFS= read -r l; do echo "OUT: $l"; done
kill $watch 2>/dev/null
rc=$(cat /tmp/rc 2>/dev/null)
say "CMD_EXIT rc=${rc:-255} from ${t0}s to $(up)s"
say "---- rdma statistic (non-zero) ----"
/usr/bin/rdma statistic show link rxe0/1 2>&1 | awk '{for (i = 3; i < NF; i += 2) if ($(i+1) != 0) printf "%s=%s ", $i, $(i+1); print ""}'
say "---- rxe dmesg ----"
dmesg | grep -i -e rxe -e rdma -e infiniband | tail -40
say "DONE"
poweroff -f
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_header_is_110_bytes_and_padded() {
        let mut i = Initramfs::default();
        i.file("a", b"xyz", false);
        // 110-byte header + "a\0" padded to 112, then 3 data bytes padded to 4.
        assert_eq!(i.data.len(), 116);
        assert!(i.data.starts_with(b"070701"));
        assert_eq!(&i.data[6..14], b"00000001");
        assert_eq!(&i.data[110..112], b"a\0");
        assert_eq!(&i.data[112..115], b"xyz");
    }

    #[test]
    fn patching_refuses_a_binary_without_the_symbols() {
        let self_exe = fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(dynsym_offsets(&self_exe, &["kvm_irqchip_add_irqfd_notifier_gsi"]).is_err());
        assert!(dynsym_offsets(b"not an elf", &["x"]).is_err());
    }
}
