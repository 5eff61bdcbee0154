//! The Linux soft-RoCE peer's image: its kernel and an initramfs with rdma-core's tools.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::{
    cache_dir, prepare_kernel, run_ok, show_progress, skip, Initramfs, Kernel, Skip, PREPARE,
};

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

/// Executables copied into the peer image (from the unpacked packages): rdma-core's verbs
/// examples (ibverbs-utils), its rdma_cm examples `rping`, `ucmatose` (cmatose.c) and `udaddy`
/// (rdmacm-utils), perftest, iproute2's `ip` and `rdma`.
const PEER_BINS: [&str; 17] = [
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
    "rping",
    "ucmatose",
    "udaddy",
    "ip",
    "rdma",
];

/// busybox applets the peer's commands use besides the shell's: `ping` and `nc` against the
/// unikernel's own IP stack (`ip` is iproute2's, in `PEER_BINS`), and what the tests and
/// [`PEER_INIT`] compare and time with.
const BUSYBOX_APPLETS: [&str; 9] = [
    "ping",
    "nc",
    "cmp",
    "sha256sum",
    "wc",
    "head",
    "awk",
    "timeout",
    "poweroff",
];

/// Refuses a busybox (busybox-static, unpacked by [`prepare_kernel`]) that lacks one of
/// `BUSYBOX_APPLETS` (its `--list`).
fn check_busybox(kernel: &Kernel) -> Result<(), Skip> {
    let bb = kernel.root.join("bin/busybox");
    let list = run_ok(Command::new(&bb).arg("--list"), "busybox --list")?;
    let missing: Vec<&str> = BUSYBOX_APPLETS
        .iter()
        .copied()
        .filter(|a| !list.lines().any(|l| l.trim() == *a))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(skip(format!(
            "{} has no {} applet",
            bb.display(),
            missing.join(", ")
        )))
    }
}

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
const PEER_IMAGE_VERSION: &str = "3";

/// The peer's kernel and initramfs.
#[derive(Clone, Debug)]
pub struct PeerImage {
    pub kernel: Kernel,
    pub initrd: PathBuf,
}

/// The library packages of the Depends closure of `pkgs` (apt-cache depends --recurse).
pub(super) fn lib_closure(pkgs: &[&str]) -> Result<Vec<String>, Skip> {
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
            ![
                "libc6-",
                "libpam",
                "libsemanage",
                "libaudit-common",
                "libtirpc-common",
            ]
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

/// Downloads (`apt-get download`, once: the .debs stay in `debs`) the packages `pkgs` and
/// unpacks them all into a fresh `uroot` (`dpkg -x`).
pub(super) fn fetch_and_unpack(debs: &Path, pkgs: &[String], uroot: &Path) -> Result<(), Skip> {
    fs::create_dir_all(debs).map_err(|e| skip(format!("{}: {e}", debs.display())))?;
    let have = |pkg: &str| -> Option<PathBuf> {
        fs::read_dir(debs)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb"))
            })
    };
    let missing: Vec<&String> = pkgs.iter().filter(|p| have(p).is_none()).collect();
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
                chunk
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            run_ok(
                Command::new("apt-get")
                    .args(["download", "-q"])
                    .args(chunk.iter().map(|s| s.as_str()))
                    .current_dir(debs),
                "apt-get download (RDMA userspace)",
            )?;
        }
    }
    progress("unpacking");
    let _ = fs::remove_dir_all(uroot);
    fs::create_dir_all(uroot).map_err(|e| skip(format!("{}: {e}", uroot.display())))?;
    for p in pkgs {
        let deb = have(p).ok_or_else(|| skip(format!("apt-get download {p} left no .deb")))?;
        run_ok(
            Command::new("dpkg").arg("-x").arg(&deb).arg(uroot),
            &format!("dpkg -x {}", deb.display()),
        )?;
    }
    Ok(())
}

/// Copies the executables `bins` (from the unpacked packages' bin and sbin directories) to
/// `usr/bin`; returns where each came from.
pub(super) fn add_executables(
    img: &mut Initramfs,
    uroot: &Path,
    bins: &[&str],
) -> Result<Vec<PathBuf>, Skip> {
    let mut elfs: Vec<PathBuf> = Vec::new();
    for b in bins {
        let f = ["usr/bin", "usr/sbin", "bin", "sbin"]
            .iter()
            .map(|d| uroot.join(d).join(b))
            .find(|p| p.is_file())
            .ok_or_else(|| skip(format!("{b} is not in the unpacked packages")))?;
        let bytes = fs::read(&f).map_err(|e| skip(format!("{}: {e}", f.display())))?;
        img.file(&format!("usr/bin/{b}"), &bytes, true);
        elfs.push(f);
    }
    Ok(elfs)
}

/// Copies the shared libraries of `elfs` (their DT_NEEDED closure, plus `extra`), each under
/// its soname, to `usr/lib/x86_64-linux-gnu`, and the program interpreter with its link;
/// those in `present` (already in the image) are not copied again. Returns the sonames it
/// copied.
pub(super) fn add_shared_libs(
    img: &mut Initramfs,
    uroot: &Path,
    elfs: &[PathBuf],
    extra: &[&str],
    present: &[String],
) -> Result<Vec<String>, Skip> {
    // librados finds libceph-common in ceph/ by its RUNPATH; copied beside the others, the
    // default search path finds it.
    let libdirs = [
        uroot.join("lib/x86_64-linux-gnu"),
        uroot.join("usr/lib/x86_64-linux-gnu"),
        uroot.join("lib64"),
        uroot.join("usr/lib/x86_64-linux-gnu/ceph"),
    ];
    let find = |so: &str| libdirs.iter().map(|d| d.join(so)).find(|p| p.exists());
    let mut todo: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let mut done: Vec<String> = Vec::new();
    let mut interps: Vec<String> = Vec::new();
    for e in elfs {
        let (needed, interp) = elf_needs(e)?;
        todo.extend(needed);
        interps.extend(interp);
    }
    while let Some(so) = todo.pop() {
        if done.contains(&so) || present.contains(&so) {
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
        if present.contains(&name) {
            continue;
        }
        if !done.contains(&name) {
            let src = find(&name).ok_or_else(|| skip(format!("no package provides {name}")))?;
            let real =
                fs::canonicalize(&src).map_err(|e| skip(format!("{}: {e}", src.display())))?;
            let bytes = fs::read(&real).map_err(|e| skip(format!("{}: {e}", real.display())))?;
            img.file(&format!("usr/lib/x86_64-linux-gnu/{name}"), &bytes, true);
            done.push(name.clone());
        }
        let link = p.trim_start_matches('/');
        if link != format!("usr/lib/x86_64-linux-gnu/{name}")
            && link != format!("lib/x86_64-linux-gnu/{name}")
        {
            img.symlink(link, &format!("/usr/lib/x86_64-linux-gnu/{name}"));
        }
    }
    Ok(done)
}

/// Builds (or reuses) the Linux RDMA peer image: the Debian 6.1 kernel of [`prepare_kernel`],
/// busybox (with `ping` and `nc`), the modules of `PEER_MODULES`, rdma-core's tools with the rxe provider and their
/// shared libraries, and [`PEER_INIT`]. Nothing is installed on the host.
pub fn prepare_peer_image() -> Result<PeerImage, Skip> {
    let kernel = prepare_kernel()?;
    check_busybox(&kernel)?;
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
    let libs = lib_closure(&PEER_PKGS)?;
    let all: Vec<String> = PEER_PKGS
        .iter()
        .map(|s| s.to_string())
        .chain(libs)
        .collect();
    let uroot = dir.join("uroot");
    fetch_and_unpack(&dir.join("debs"), &all, &uroot)?;
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
    let mut elfs = add_executables(&mut img, &uroot, &PEER_BINS)?;
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
    let name = prov
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    let bytes = fs::read(&prov).map_err(|e| skip(format!("{}: {e}", prov.display())))?;
    img.file(
        &format!("usr/lib/x86_64-linux-gnu/libibverbs/{name}"),
        &bytes,
        false,
    );
    elfs.push(prov);
    let drv = uroot.join("etc/libibverbs.d/rxe.driver");
    let bytes = fs::read(&drv).map_err(|e| skip(format!("{}: {e}", drv.display())))?;
    img.file("etc/libibverbs.d/rxe.driver", &bytes, false);
    // libgcc_s: glibc dlopens it for pthread_exit/pthread_cancel.
    let done = add_shared_libs(&mut img, &uroot, &elfs, &["libgcc_s.so.1"], &[])?;
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

pub(super) fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The peer's /init. Kernel command line words `name=value` arrive as environment variables:
/// - `peer_ip=10.0.0.1/24`: eth0's address (the RoCE NIC, on the stream link);
/// - `peer_neigh=IP,MAC`: a permanent neighbour entry (only when asked: `--peer-neigh`;
///   otherwise Linux resolves its neighbours by ARP, as on any network);
/// - `peer_wait_ping=IP`, `peer_delay=S`: before the command, wait for IP to answer, then sleep;
/// - `peer_cmd=...`: run by `sh -c` with `$GID` (the RoCE v2 GID index of peer_ip's IPv4
///   address), `$RXE` (rxe0) and `$PEER_IP`; its output is prefixed `OUT: `.
///
/// Console markers: `PEER: GID_INDEX=N`, `PEER: WAIT_PING ...` (with `peer_wait_ping`),
/// `PEER: CMD_START`, `PEER: CMD_EXIT rc=N`, one `PEER: NEIGH ...` line per entry of eth0's
/// neighbour table (`ip neigh show dev eth0` after the command), then the non-zero
/// `rdma statistic` counters and rxe's kernel messages, `PEER: DONE`, power off.
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
  until ping -c1 -W1 "$peer_wait_ping" >/dev/null 2>&1; do
    k=$((k+1))
    [ $k -ge 60 ] && break
  done
  if [ $k -ge 60 ]; then
    say "WAIT_PING $peer_wait_ping: no answer to 60 pings at $(up)s (running the command all the same)"
  else
    say "WAIT_PING $peer_wait_ping: answered after $k unanswered at $(up)s"
  fi
fi
[ -n "$peer_delay" ] && sleep "$peer_delay"
say "CMD_START at $(up)s: $peer_cmd"
t0=$(up)
# Fault finding for a command that hangs (its own output is block-buffered): every 30 s, the
# tools' TCP sockets (port 18515 = 0x4853; /proc/net/tcp: remote, state 01 established
# 02 syn-sent, tx:rx queue), eth0's neighbours, the rdma_cm IDs (`rdma resource show cm_id`:
# state, port space, addresses) and where each tool process waits.
( while sleep 30; do
    say "WATCH at $(up)s: tcp $(grep -i ':4853 ' /proc/net/tcp | awk '{printf "%s>%s st=%s q=%s; ", $2, $3, $4, $5}')"
    say "WATCH neigh: $($IP neigh show dev eth0 | tr '\n' ';')"
    say "WATCH cm_id: $(/usr/bin/rdma resource show cm_id 2>&1 | tr '\n' ';' | cut -c1-400)"
    for d in /proc/[0-9]*; do
      read c < $d/comm 2>/dev/null
      case "$c" in ibv_*|ib_*_bw|ib_*_lat|rping|ucmatose|udaddy) say "WATCH $c: $(cut -d' ' -f3 $d/stat) wchan=$(cat $d/wchan 2>/dev/null) stack=$(tr '\n' ' ' < $d/stack 2>/dev/null | cut -c1-300)";; esac
    done
  done ) &
watch=$!
{ sh -c "$peer_cmd" 2>&1; echo $? > /tmp/rc; } | while IFS= read -r l; do echo "OUT: $l"; done
kill $watch 2>/dev/null
rc=$(cat /tmp/rc 2>/dev/null)
say "CMD_EXIT rc=${rc:-255} from ${t0}s to $(up)s"
$IP neigh show dev eth0 | while IFS= read -r l; do say "NEIGH $l"; done
say "---- rdma statistic (non-zero) ----"
/usr/bin/rdma statistic show link rxe0/1 2>&1 | awk '{for (i = 3; i < NF; i += 2) if ($(i+1) != 0) printf "%s=%s ", $i, $(i+1); print ""}'
say "---- rxe dmesg ----"
dmesg | grep -i -e rxe -e rdma -e infiniband | tail -40
say "DONE"
poweroff -f
"#;
