//! QEMU: the stock binary and the patched copy that runs `x-pci-proxy-dev` under TCG.

use std::fs;
use std::path::PathBuf;

use super::{cache_dir, skip, Skip, PREPARE};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patching_refuses_a_binary_without_the_symbols() {
        let self_exe = fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(dynsym_offsets(&self_exe, &["kvm_irqchip_add_irqfd_notifier_gsi"]).is_err());
        assert!(dynsym_offsets(b"not an elf", &["x"]).is_err());
    }
}
