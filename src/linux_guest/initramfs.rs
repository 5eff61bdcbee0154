//! The guest's initramfs (a newc cpio archive) and its test scripts.

use std::fs;
use std::path::Path;

use super::{skip, Kernel, Skip};

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
            let base = module_file(&rel);
            let bytes = kernel.module_bytes(&rel)?;
            self.file(&format!("lib/modules/{base}"), &bytes, false);
            order.push_str(&base);
            order.push('\n');
        }
        self.file("lib/modules/order", order.as_bytes(), false);
        Ok(())
    }

    /// The modules `names`, each with its dependencies, for loading on demand: every module
    /// file not in `present` (entry names of an archive unpacked before this one) as
    /// `lib/modules/<base>.ko`, and per name `lib/modules/order.<name>` listing its closure in
    /// load order (dependencies first).
    pub fn modules_on_demand(
        &mut self,
        kernel: &Kernel,
        names: &[&str],
        present: &[String],
    ) -> Result<(), Skip> {
        let mut written: Vec<String> = Vec::new();
        for name in names {
            let mut order = String::new();
            for rel in kernel.module_closure(&[name])? {
                let base = module_file(&rel);
                let entry = format!("lib/modules/{base}");
                if !present.contains(&entry) && !written.contains(&entry) {
                    let bytes = kernel.module_bytes(&rel)?;
                    self.file(&entry, &bytes, false);
                    written.push(entry);
                }
                order.push_str(&base);
                order.push('\n');
            }
            self.file(
                &format!("lib/modules/order.{name}"),
                order.as_bytes(),
                false,
            );
        }
        Ok(())
    }

    /// The entry names of the newc archives at `path` (as [`Initramfs::write`] writes them; one
    /// archive or several concatenated).
    pub fn names(path: &Path) -> Result<Vec<String>, Skip> {
        let data = fs::read(path).map_err(|e| skip(format!("{}: {e}", path.display())))?;
        let bad = || skip(format!("{}: not a newc cpio archive", path.display()));
        let field = |at: usize, k: usize| -> Option<usize> {
            let f = data.get(at + 6 + 8 * k..at + 14 + 8 * k)?;
            usize::from_str_radix(std::str::from_utf8(f).ok()?, 16).ok()
        };
        let (mut at, mut names) = (0usize, Vec::new());
        while at + 110 <= data.len() && data[at..].starts_with(b"070701") {
            let (size, namesize) = (
                field(at, 6).ok_or_else(bad)?,
                field(at, 11).ok_or_else(bad)?,
            );
            let name = data
                .get(at + 110..at + 110 + namesize.saturating_sub(1))
                .ok_or_else(bad)?;
            let name = String::from_utf8_lossy(name).into_owned();
            at = (at + 110 + namesize).next_multiple_of(4);
            at = (at + size).next_multiple_of(4);
            if name == "TRAILER!!!" {
                // Another archive may follow (as Linux unpacks them: after zero padding).
                while data.get(at) == Some(&0) {
                    at += 1;
                }
            } else {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// Writes the archive (with its trailer) to `path`.
    pub fn write(mut self, path: &Path) -> Result<(), Skip> {
        self.entry("TRAILER!!!", 0, 0, &[]);
        fs::write(path, &self.data).map_err(|e| skip(format!("{}: {e}", path.display())))
    }
}

/// A module's file name in the image: its base name, uncompressed (`.ko`).
fn module_file(rel: &str) -> String {
    let f = rel.rsplit('/').next().unwrap_or(rel);
    format!("{}.ko", f.split(".ko").next().unwrap_or(f))
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
    fn names_reads_back_what_was_written() {
        let mut i = Initramfs::default();
        i.dir("etc");
        i.file("etc/a", b"12345", false);
        i.symlink("lnk", "etc/a");
        let p = std::env::temp_dir().join(format!("names-{}.cpio", std::process::id()));
        i.write(&p).unwrap();
        assert_eq!(Initramfs::names(&p).unwrap(), ["etc", "etc/a", "lnk"]);
        // A second archive after the first.
        let mut two = Initramfs::default();
        two.file("b", b"x", false);
        let q = p.with_extension("two");
        two.write(&q).unwrap();
        let mut both = fs::read(&p).unwrap();
        both.extend(fs::read(&q).unwrap());
        fs::write(&p, &both).unwrap();
        let names = Initramfs::names(&p).unwrap();
        let _ = fs::remove_file(&p);
        let _ = fs::remove_file(&q);
        assert_eq!(names, ["etc", "etc/a", "lnk", "b"]);
    }
}
