//! The Linux NVMe over Fabrics host (and Linux's own target, the baseline) on the peer image:
//! `nvme-cli`, the nvme-rdma and nvmet-rdma modules, `fio` and e2fsprogs, and one host script
//! per scenario (tests/nvmeof_host.rs).
//!
//! - [`prepare_nvme_image`]: the peer image ([`super::prepare_peer_image`]) followed by a
//!   second newc archive (Linux unpacks concatenated archives into one root: Documentation/
//!   driver-api/early-userspace/buffer-format.rst) with what the NVMe host needs, so the
//!   other peer runs keep their small image (fio's library closure alone is ~70 MB: it links
//!   librbd, librados and libgfapi). Cached like the peer image.
//! - The modules are loaded on demand (`loadmod MODULE [PARAM=VALUE..]`, over one order file
//!   per module: modules.dep's closure), not at boot.
//! - nvme-cli reads the host NQN and host ID from /etc/nvme (fixed: the Connect data is the
//!   same in every run).
//! - Scenario scripts ([`Scenario`]) print `RESULT step name=value..` lines ([`results`]); the
//!   same script runs against Linux's `nvmet-rdma` ([`TARGET_SCRIPT`]) and against the
//!   unikernel's target: only the target side changes.

use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use super::peer_image::{add_executables, add_shared_libs, fetch_and_unpack, fnv1a};
use super::{
    cache_dir, prepare_peer_image, show_progress, skip, Initramfs, PeerImage, Skip, PREPARE,
};

/// Packages whose executables go into the NVMe layer (their libraries come from the
/// `apt-cache depends` closure, copied only as far as DT_NEEDED reaches).
pub const PKGS: [&str; 4] = ["nvme-cli", "libnvme1", "fio", "e2fsprogs"];

/// Executables of the NVMe layer (`mkfs.ext4` and `fsck.ext4` are mke2fs and e2fsck, which
/// take the file system type from their name).
pub const BINS: [&str; 4] = ["nvme", "fio", "mkfs.ext4", "fsck.ext4"];

/// Modules loaded on demand (`loadmod`): the host, Linux's target and its memory-backed
/// null_blk, ext4 and the crc32c it asks the crypto API for (nothing here runs modprobe).
pub const MODULES: [&str; 5] = [
    "nvme-rdma",
    "nvmet-rdma",
    "null_blk",
    "ext4",
    "crc32c_generic",
];

/// The host NQN and host ID nvme-cli sends in its Connect data (`/etc/nvme/hostnqn`,
/// `/etc/nvme/hostid`); without the files nvme-cli 2.3 derives them from DMI, which QEMU
/// leaves empty.
pub const HOST_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";
pub const HOST_ID: &str = "00000000-0000-0000-0000-0000000000b2";

/// The subsystem both targets serve (nvme-lib.sh's `NQN`).
pub const SUBSYS_NQN: &str = "nqn.2026-12.io.example:ram";

/// Linux's target on guest A (nvmet, nvmet-rdma, a 1 GiB memory-backed null_blk).
pub const TARGET_SCRIPT: &str = "nvmet-target.sh";

/// The host that vanishes mid-I/O (fio until its guest is killed; `RESULT io-running`).
pub const KILLED_HOST_SCRIPT: &str = "nvme-killed.sh";

/// The scripts of the layer, installed in /usr/bin.
const SCRIPTS: [(&str, &str); 8] = [
    ("loadmod", include_str!("loadmod")),
    ("nvme-lib.sh", include_str!("nvme-lib.sh")),
    ("nvmet-target.sh", include_str!("nvmet-target.sh")),
    ("nvme-basic.sh", include_str!("nvme-basic.sh")),
    ("nvme-fs.sh", include_str!("nvme-fs.sh")),
    ("nvme-fio-verify.sh", include_str!("nvme-fio-verify.sh")),
    ("nvme-fio-perf.sh", include_str!("nvme-fio-perf.sh")),
    ("nvme-killed.sh", include_str!("nvme-killed.sh")),
];

/// Bump when the layer's content (not its packages or scripts) changes.
const LAYER_VERSION: &str = "1";

/// One host scenario: a script in the image that ends with `RESULT ok NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// discover, connect, 4 KiB and 128 KiB O_DIRECT byte-exact, disconnect, reconnect.
    Basic,
    /// mkfs.ext4, mount, files, unmount, reconnect, fsck, mount, checksums.
    Fs,
    /// `fio --verify` from several jobs over several I/O queues.
    FioVerify,
    /// fio 4 KiB random read/write QD32, 128 KiB sequential read/write.
    FioPerf,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::Basic,
        Scenario::Fs,
        Scenario::FioVerify,
        Scenario::FioPerf,
    ];

    /// The name in its `RESULT ok NAME` line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Basic => "basic",
            Scenario::Fs => "fs",
            Scenario::FioVerify => "fio-verify",
            Scenario::FioPerf => "fio-perf",
        }
    }

    /// The host's script (in /usr/bin); it takes the target's address as its argument
    /// (default 10.0.0.1).
    pub fn script(self) -> String {
        format!("nvme-{}.sh", self.name())
    }
}

/// Whether a Linux command runs one of the NVMe layer's scripts or executables (then it needs
/// [`prepare_nvme_image`]): a word of it names one.
pub fn uses_nvme(cmd: &str) -> bool {
    cmd.split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
        .map(|w| w.rsplit('/').next().unwrap_or(w))
        .any(|w| SCRIPTS.iter().any(|(name, _)| *name == w) || BINS.contains(&w))
}

/// The `RESULT ` lines of a scenario's output: the step and its `name=value` fields.
pub fn results(output: &str) -> Vec<(String, Vec<(String, String)>)> {
    output
        .lines()
        .filter_map(|l| l.trim_end().strip_prefix("RESULT "))
        .map(|l| {
            let mut w = l.split_whitespace();
            let step = w.next().unwrap_or_default().to_string();
            let fields = w
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (step, fields)
        })
        .collect()
}

/// The field `key` of every `RESULT step ...` line that has it, in order.
pub fn values(output: &str, step: &str, key: &str) -> Vec<String> {
    results(output)
        .into_iter()
        .filter(|(s, _)| s == step)
        .filter_map(|(_, f)| f.into_iter().find(|(k, _)| k == key).map(|(_, v)| v))
        .collect()
}

/// The field `key` of the first `RESULT step ...` line that has it.
pub fn field(output: &str, step: &str, key: &str) -> Option<String> {
    values(output, step, key).into_iter().next()
}

/// Whether the scenario got to its last line (`RESULT ok NAME`) and no step failed.
pub fn passed(output: &str, s: Scenario) -> bool {
    let r = results(output);
    !r.iter().any(|(step, _)| step == "fail")
        && output
            .lines()
            .any(|l| l.trim_end() == format!("RESULT ok {}", s.name()))
}

/// One fio figure (`RESULT fio job=.. rw=.. iops=.. bw_kib=.. lat_us=..`).
#[derive(Clone, Debug, PartialEq)]
pub struct FioFigure {
    pub job: String,
    pub rw: String,
    pub iops: f64,
    pub bw_kib: f64,
    pub lat_us: f64,
}

/// The fio figures of a `fio-perf` run.
pub fn fio_figures(output: &str) -> Vec<FioFigure> {
    results(output)
        .into_iter()
        .filter(|(s, _)| s == "fio")
        .filter_map(|(_, f)| {
            let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let num = |k: &str| get(k)?.parse::<f64>().ok();
            Some(FioFigure {
                job: get("job")?,
                rw: get("rw")?,
                iops: num("iops")?,
                bw_kib: num("bw_kib")?,
                lat_us: num("lat_us").unwrap_or(0.0),
            })
        })
        .collect()
}

/// The table of fio figures: the unikernel target against Linux's, one row per job, with the
/// ratio (unikernel / Linux) of IOPS; a side without figures shows `-`.
pub fn fio_table(unikernel: &[FioFigure], linux: &[FioFigure]) -> String {
    let mut jobs: Vec<(&str, &str)> = Vec::new();
    for f in linux.iter().chain(unikernel) {
        if !jobs.contains(&(f.job.as_str(), f.rw.as_str())) {
            jobs.push((&f.job, &f.rw));
        }
    }
    let mut t = format!(
        "{:<14} {:>12} {:>12} {:>12} {:>12} {:>7}\n",
        "fio job", "unikernel", "MiB/s", "Linux nvmet", "MiB/s", "ratio"
    );
    for (job, rw) in jobs {
        let find = |v: &[FioFigure]| v.iter().find(|f| f.job == job && f.rw == rw).cloned();
        let (u, l) = (find(unikernel), find(linux));
        let iops =
            |f: &Option<FioFigure>| f.as_ref().map_or("-".into(), |f| format!("{:.0}", f.iops));
        let mib = |f: &Option<FioFigure>| {
            f.as_ref()
                .map_or("-".into(), |f| format!("{:.1}", f.bw_kib / 1024.0))
        };
        let ratio = match (&u, &l) {
            (Some(u), Some(l)) if l.iops > 0.0 => format!("{:.2}", u.iops / l.iops),
            _ => "-".into(),
        };
        t.push_str(&format!(
            "{:<14} {:>12} {:>12} {:>12} {:>12} {:>7}\n",
            job,
            iops(&u),
            mib(&u),
            iops(&l),
            mib(&l),
            ratio
        ));
    }
    t
}

fn progress(msg: &str) {
    if show_progress() {
        eprintln!("nvme image: {msg}");
    }
}

/// The peer image with the NVMe layer: [`PKGS`]' executables ([`BINS`]) and their shared
/// libraries not in the peer image already, the [`MODULES`] closures with their order files,
/// `/etc/nvme`, the scripts. Built once, then reused while the peer image, the scripts and
/// `LAYER_VERSION` stay.
pub fn prepare_nvme_image() -> Result<PeerImage, Skip> {
    let base = prepare_peer_image()?;
    let _g = PREPARE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache_dir().join("nvme");
    let initrd = dir.join("initramfs.cpio");
    let stamp = dir.join("READY");
    let base_stamp = fs::read_to_string(cache_dir().join("peer").join("READY")).unwrap_or_default();
    let scripts: Vec<u8> = SCRIPTS
        .iter()
        .flat_map(|(n, s)| n.bytes().chain(s.bytes()))
        .collect();
    let want = format!(
        "{:016x} {} {:016x}",
        fnv1a(base_stamp.as_bytes()),
        LAYER_VERSION,
        fnv1a(&scripts)
    );
    let image = PeerImage {
        kernel: base.kernel.clone(),
        initrd: initrd.clone(),
    };
    if fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) && initrd.exists() {
        return Ok(image);
    }
    let t0 = Instant::now();
    let present = Initramfs::names(&base.initrd)?;
    let libs: Vec<String> = present
        .iter()
        .filter_map(|n| n.strip_prefix("usr/lib/x86_64-linux-gnu/"))
        .map(|s| s.to_string())
        .collect();
    let pkgs: Vec<String> = PKGS
        .iter()
        .map(|s| s.to_string())
        .chain(super::peer_image::lib_closure(&PKGS)?)
        .collect();
    let uroot = dir.join("uroot");
    fetch_and_unpack(&dir.join("debs"), &pkgs, &uroot)?;
    progress("writing the NVMe layer");
    let mut layer = Initramfs::default();
    for d in ["etc/nvme", "mnt"] {
        layer.dir(d);
    }
    let elfs = add_executables(&mut layer, &uroot, &BINS)?;
    let copied = add_shared_libs(&mut layer, &uroot, &elfs, &[], &libs)?;
    layer.modules_on_demand(&base.kernel, &MODULES, &present)?;
    layer.file(
        "etc/nvme/hostnqn",
        format!("{HOST_NQN}\n").as_bytes(),
        false,
    );
    layer.file("etc/nvme/hostid", format!("{HOST_ID}\n").as_bytes(), false);
    for (name, text) in SCRIPTS {
        layer.file(&format!("usr/bin/{name}"), text.as_bytes(), true);
    }
    let layer_path = dir.join("layer.cpio");
    layer.write(&layer_path)?;
    let mut bytes =
        fs::read(&base.initrd).map_err(|e| skip(format!("{}: {e}", base.initrd.display())))?;
    bytes
        .extend(fs::read(&layer_path).map_err(|e| skip(format!("{}: {e}", layer_path.display())))?);
    let tmp: PathBuf = dir.join("initramfs.tmp");
    fs::write(&tmp, &bytes).map_err(|e| skip(format!("{}: {e}", tmp.display())))?;
    fs::rename(&tmp, &initrd).map_err(|e| skip(format!("{}: {e}", initrd.display())))?;
    let _ = fs::remove_dir_all(&uroot);
    fs::write(&stamp, &want).map_err(|e| skip(format!("{}: {e}", stamp.display())))?;
    progress(&format!(
        "ready in {:.1} s ({} more shared libraries, {} MB in all)",
        t0.elapsed().as_secs_f64(),
        copied.len(),
        bytes.len() >> 20
    ));
    Ok(image)
}

#[cfg(test)]
mod tests;
