//! Boot tests: build the image, boot it in QEMU, and check the boot report.
//!
//! Every case that needs no HCA runs under TCG; the KVM cases skip loudly where /dev/kvm is
//! unusable. QEMU must be installed (`.ci/setup` does it); without it these tests fail with
//! the install hint rather than pass silently.

use std::time::Duration;
use unikernel::{kvm_usable, run, Accel, BootVia, Machine, Options, RunResult, Verdict};

fn opts(accel: Accel, machine: Machine, memory: &str) -> Options {
    Options {
        accel,
        machine,
        memory: memory.into(),
        timeout: Duration::from_secs(180),
        echo: false,
        // The memory self-test app: these tests are about booting, not the HCA.
        app: Some("hello".into()),
        ..Options::default()
    }
}

fn boot(o: &Options) -> RunResult {
    match run(o) {
        Ok(r) => r,
        Err(e) => panic!("could not boot: {e}"),
    }
}

fn kvm_or_skip(test: &str) -> bool {
    if kvm_usable() {
        return true;
    }
    eprintln!("SKIPPED {test}: /dev/kvm is missing or unusable on this machine, so the KVM case cannot run");
    false
}

/// The parsed `memory:` line of the boot report.
#[derive(Debug)]
struct MemoryLine {
    usable_mib: u64,
    page_size: String,
    free_2m: u64,
    free_1g: u64,
}

fn memory_line(out: &str) -> MemoryLine {
    let line = out
        .lines()
        .find(|l| l.starts_with("memory: "))
        .unwrap_or_else(|| panic!("no memory line in:\n{out}"));
    // memory: usable=<MiB> MiB, identity map with <1G|2M> pages, huge pages free: <n> x 2M, <m> x 1G
    let usable = line
        .split("usable=")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok());
    let page = line
        .split("identity map with ")
        .nth(1)
        .and_then(|s| s.split(' ').next());
    let free = line.split("huge pages free: ").nth(1).unwrap_or("");
    let mut counts = free
        .split(", ")
        .map(|p| p.split(' ').next().and_then(|n| n.parse().ok()));
    match (
        usable,
        page,
        counts.next().flatten(),
        counts.next().flatten(),
    ) {
        (Some(usable_mib), Some(page), Some(free_2m), Some(free_1g)) => MemoryLine {
            usable_mib,
            page_size: page.to_string(),
            free_2m,
            free_1g,
        },
        _ => panic!("malformed memory line: {line}"),
    }
}

fn pci_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with("pci ")).collect()
}

/// Checks the report every successful boot prints, and returns the memory line.
fn check_report(r: &RunResult, protocol: &str, cmdline: &str) -> MemoryLine {
    let out = &r.output;
    assert_eq!(r.verdict, Verdict::Exited(0), "guest output:\n{out}");
    let boot = format!("boot: protocol={protocol} cmdline=\"{cmdline}\"");
    assert!(
        out.lines().any(|l| l == boot),
        "missing '{boot}' in:\n{out}"
    );
    let pci = pci_lines(out);
    assert!(!pci.is_empty(), "no PCI functions reported:\n{out}");
    // The host bridge is always 00:00.0 (i440FX on pc, Q35 MCH on q35).
    assert!(pci[0].starts_with("pci 00:00.0 8086:"), "{}", pci[0]);
    for l in &pci {
        let fields: Vec<&str> = l.split(' ').collect();
        assert_eq!(fields.len(), 5, "{l}");
        assert!(
            fields[3].starts_with("class=") && fields[3].len() == 12,
            "{l}"
        );
        assert!(fields[4].starts_with("bars="), "{l}");
    }
    assert!(out.lines().any(|l| l == "app: exit=0"), "{out}");
    memory_line(out)
}

#[test]
fn tcg_q35_1g_pages() {
    let r = boot(&opts(Accel::Tcg, Machine::Q35, "1G"));
    let m = check_report(&r, "pvh", "");
    assert_eq!(m.page_size, "1G", "TCG's -cpu max advertises pdpe1gb");
    assert!((1000..=1024).contains(&m.usable_mib), "{m:?}");
    assert!(m.free_2m > 400, "{m:?}");
    eprintln!("boot to exit under TCG: {:?}", r.wall_time);
}

#[test]
fn tcg_pc_2m_pages_and_legacy_config_access() {
    let mut o = opts(Accel::Tcg, Machine::Pc, "1G");
    o.hide_1g_pages = true;
    o.cmdline = "log=debug".into();
    let r = boot(&o);
    let m = check_report(&r, "pvh", "log=debug");
    assert_eq!(m.page_size, "2M");
    // The pc machine has no MCFG: the kernel falls back to 0xCF8/0xCFC and finds the PIIX3.
    assert!(r.output.contains("via 0xCF8"), "{}", r.output);
    assert!(
        pci_lines(&r.output)
            .iter()
            .any(|l| l.starts_with("pci 00:01.0 8086:7000")),
        "{}",
        r.output
    );
}

#[test]
fn tcg_128m() {
    let r = boot(&opts(Accel::Tcg, Machine::Q35, "128M"));
    let m = check_report(&r, "pvh", "");
    assert!((120..=128).contains(&m.usable_mib), "{m:?}");
    assert_eq!(m.free_1g, 0);
}

#[test]
fn tcg_5g_maps_and_touches_memory_above_4g() {
    let r = boot(&opts(Accel::Tcg, Machine::Q35, "5G"));
    let m = check_report(&r, "pvh", "");
    assert!((5100..=5120).contains(&m.usable_mib), "{m:?}");
    // q35 puts 2 GiB below the hole and 3 GiB above 4 GiB: three whole 1 GiB pages.
    assert_eq!(m.free_1g, 3, "{m:?}");
    let touched = r
        .output
        .lines()
        .find(|l| l.starts_with("selftest: touched 2M page at "))
        .expect("no high-memory test");
    assert!(touched.ends_with(": ok"), "{touched}");
    let addr = touched
        .trim_start_matches("selftest: touched 2M page at ")
        .split(':')
        .next()
        .unwrap();
    let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
    assert!(addr >= 4 << 30, "{addr:#x}");
}

#[test]
fn kvm_q35_5g_2m_pages() {
    if !kvm_or_skip("kvm_q35_5g_2m_pages") {
        return;
    }
    let r = boot(&opts(Accel::Kvm, Machine::Q35, "5G"));
    let m = check_report(&r, "pvh", "");
    assert_eq!(m.page_size, "2M", "the launcher hides pdpe1gb under KVM");
    assert!(
        r.output.contains("selftest: touched 2M page at 0x1"),
        "{}",
        r.output
    );
    eprintln!("boot to exit under KVM: {:?}", r.wall_time);
}

#[test]
fn kvm_pc_128m() {
    if !kvm_or_skip("kvm_pc_128m") {
        return;
    }
    let r = boot(&opts(Accel::Kvm, Machine::Pc, "128M"));
    let m = check_report(&r, "pvh", "");
    assert_eq!(m.page_size, "2M");
}

#[test]
fn multiboot2_through_grub() {
    let mut o = opts(Accel::Tcg, Machine::Q35, "1G");
    o.boot = BootVia::Grub;
    o.cmdline = "log=info from=grub".into();
    let r = boot(&o);
    let m = check_report(&r, "multiboot2", "log=info from=grub");
    assert_eq!(m.page_size, "1G");
}

#[test]
fn panic_gives_message_location_and_failure() {
    let mut o = opts(Accel::Tcg, Machine::Q35, "128M");
    o.app = Some("panic".into());
    o.cmdline = "reason=boot-test".into();
    let r = boot(&o);
    assert_eq!(r.verdict, Verdict::KernelFailure(101), "{}", r.output);
    assert!(
        r.output
            .contains("panic: deliberate panic: boot-test at apps/src/bin/panic.rs:"),
        "{}",
        r.output
    );
    assert!(!r.output.contains("app: exit="), "{}", r.output);
}

#[test]
fn page_fault_gives_vector_error_rip_cr2_and_registers() {
    let mut o = opts(Accel::Tcg, Machine::Pc, "128M");
    o.app = Some("fault".into());
    let r = boot(&o);
    assert_eq!(r.verdict, Verdict::KernelFailure(102), "{}", r.output);
    let out = &r.output;
    assert!(
        out.contains("exception: #PF page fault (vector 14) error=0x0"),
        "{out}"
    );
    assert!(out.contains("cr2=0x0000400000000000"), "{out}");
    for reg in ["rip=", "rsp=", "rax=", "r15="] {
        assert!(out.contains(reg), "missing {reg} in {out}");
    }
}

#[test]
fn launcher_binary_propagates_the_verdict() {
    let exe = env!("CARGO_BIN_EXE_unikernel");
    let help = std::process::Command::new(exe)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for opt in [
        "--accel",
        "--machine",
        "--memory",
        "--cpus",
        "--cmdline",
        "--timeout",
        "--gdb",
        "--vfio",
        "--hca",
        "--app",
    ] {
        assert!(text.contains(opt), "--help lacks {opt}");
    }
    let bad = std::process::Command::new(exe)
        .arg("--accel=warp")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let fault = std::process::Command::new(exe)
        .args(["--accel", "tcg", "--app", "fault", "--memory", "128M", "-q"])
        .output()
        .unwrap();
    assert_eq!(
        fault.status.code(),
        Some(102),
        "{}",
        String::from_utf8_lossy(&fault.stderr)
    );
}
