//! The Debian kernel, downloaded and unpacked ([`prepare_kernel`]).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use super::{cache_dir, run_ok, skip, Skip, PREPARE};

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
