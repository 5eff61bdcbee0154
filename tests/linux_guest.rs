//! Linux guests against the emulated ConnectX-5 (src/linux_guest/): Debian's 6.1 kernel under
//! TCG, the HCA served by `mlx5-sim --listen` through a private TCG-capable copy of QEMU's
//! `x-pci-proxy-dev`.
//!
//! - `vfio_guest_runs_the_rdma_checks`: the `rdma` example of drivers/mlx5-vfio (the unikernel
//!   app's checks over the VFIO HAL), statically linked, in the guest over vfio-pci behind an
//!   emulated intel-iommu, with IOVA = physical address (the proxy device ignores the vIOMMU).
//! - `linux_mlx5_core_probes_the_model`: Linux's own mlx5_core probes the model: every command
//!   up to ALLOC_UAR succeeds, the probe stops only at MSI-X (the proxy has none), and the
//!   teardown gives every firmware page back.
//!
//! Each skips loudly (`SKIPPED: ...`) when QEMU, `apt-get download` or the patch can't be had.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use unikernel::linux_guest::{self, GuestRun, GuestSpec, Initramfs, Kernel, Skip};

fn work(name: &str) -> PathBuf {
    linux_guest::cache_dir().join("runs").join(name)
}

/// Everything a guest needs, or the reason it cannot be had.
fn prepare() -> Result<(PathBuf, Kernel, PathBuf), Skip> {
    let qemu = linux_guest::patched_qemu()?;
    let kernel = linux_guest::prepare_kernel()?;
    let sim = unikernel::build_hca_sim().map_err(|e| Skip(format!("building mlx5-sim: {e}")))?;
    Ok((qemu, kernel, sim))
}

/// Builds the guest's initramfs with `fill` (given the base image) and boots it against a
/// fresh model. `None` (after a loud SKIPPED) when something cannot be had here.
fn boot(
    test: &str,
    name: &str,
    viommu: bool,
    timeout: Duration,
    fill: impl FnOnce(&Kernel, &mut Initramfs) -> Result<(), Skip>,
) -> Option<GuestRun> {
    let guest = || -> Result<GuestRun, Skip> {
        let (qemu, kernel, sim) = prepare()?;
        let dir = work(name);
        let initrd = dir.join("initramfs.cpio");
        std::fs::create_dir_all(&dir).map_err(|e| Skip(format!("{}: {e}", dir.display())))?;
        let mut img = Initramfs::new(&kernel, linux_guest::INIT)?;
        fill(&kernel, &mut img)?;
        img.write(&initrd)?;
        let spec = GuestSpec {
            qemu: &qemu,
            kernel: &kernel,
            initrd: &initrd,
            sim: &sim,
            viommu,
            append: "",
            timeout,
            work: &dir,
        };
        linux_guest::run_guest(&spec)
    };
    match guest() {
        Ok(run) if run.completed() => Some(run),
        Ok(run) => fail(test, &run, "the guest did not reach the end of its script"),
        Err(s) => {
            eprintln!("SKIPPED: {test}: {s}");
            None
        }
    }
}

fn fail(test: &str, run: &GuestRun, why: &str) -> ! {
    let mut err = std::io::stderr();
    let _ = linux_guest::dump(run, &mut err);
    panic!("{test}: {why}");
}

/// Command lines the model traced, in order: (opcode name, status name).
fn commands(trace: &str) -> Vec<(String, String)> {
    trace
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("cmd slot ")?..];
            let mut w = rest.split_whitespace().skip(3);
            let name = w.next()?.to_string();
            let status = rest
                .split("-> ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .to_string();
            Some((name, status))
        })
        .collect()
}

#[test]
fn linux_mlx5_core_probes_the_model() {
    const T: &str = "linux_mlx5_core_probes_the_model";
    let t0 = Instant::now();
    let Some(run) = boot(
        T,
        "mlx5_core",
        false,
        Duration::from_secs(240),
        |kernel, img| {
            img.modules(kernel, &["mlx5_core"])?;
            img.file(
                "test.sh",
                linux_guest::mlx5_core_script(150).as_bytes(),
                false,
            );
            Ok(())
        },
    ) else {
        return;
    };
    let cmds = commands(&run.trace);
    let Some(uar) = cmds.iter().position(|c| c.0 == "MLX5_CMD_OP_ALLOC_UAR") else {
        fail(T, &run, "mlx5_core never sent ALLOC_UAR");
    };
    if let Some(bad) = cmds[..=uar].iter().find(|c| c.1 != "MLX5_CMD_STAT_OK") {
        fail(
            T,
            &run,
            &format!("{} failed with {} before ALLOC_UAR", bad.0, bad.1),
        );
    }
    for must in [
        "MLX5_CMD_OP_ENABLE_HCA",
        "MLX5_CMD_OP_INIT_HCA",
        "MLX5_CMD_OP_QUERY_HCA_CAP",
    ] {
        if !cmds[..uar].iter().any(|c| c.0 == must) {
            fail(T, &run, &format!("no {must} before ALLOC_UAR"));
        }
    }
    if !run.serial.contains("Failed to alloc IRQs") {
        fail(
            T,
            &run,
            "the probe did not stop at \"Failed to alloc IRQs\"",
        );
    }
    // Teardown after the failed load: everything after ALLOC_UAR succeeded too, the pages came
    // back, and the function was disabled last. Linux checks the pages itself and says so
    // otherwise (drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c
    // mlx5_reclaim_startup_pages: "FW pages counter is %d after reclaiming all pages",
    // "FW did not return all pages. giving up...", "failed reclaiming pages").
    if let Some(bad) = cmds[uar..].iter().find(|c| c.1 != "MLX5_CMD_STAT_OK") {
        fail(
            T,
            &run,
            &format!("teardown: {} failed with {}", bad.0, bad.1),
        );
    }
    for warning in [
        "after reclaiming all pages",
        "did not return all pages",
        "failed reclaiming pages",
    ] {
        if run.serial.contains(warning) {
            fail(T, &run, &format!("mlx5_core: \"{warning}\""));
        }
    }
    // No command waited for its timeout (mlx5_core cmd.c prints "... timeout ...").
    if let Some(l) = run
        .serial
        .lines()
        .find(|l| l.contains("mlx5_core") && l.to_ascii_lowercase().contains("timeout"))
    {
        fail(T, &run, &format!("a command timed out: {l}"));
    }
    if !cmds[uar..]
        .iter()
        .any(|c| c.0 == "MLX5_CMD_OP_MANAGE_PAGES")
    {
        fail(T, &run, "no MANAGE_PAGES reclaim in the teardown");
    }
    if cmds.last().map(|c| c.0.as_str()) != Some("MLX5_CMD_OP_DISABLE_HCA") {
        fail(T, &run, "the teardown did not end with DISABLE_HCA");
    }
    eprintln!(
        "{T}: {} commands, guest wall {:.1} s, test wall {:.1} s",
        cmds.len(),
        run.wall.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn vfio_guest_runs_the_rdma_checks() {
    const T: &str = "vfio_guest_runs_the_rdma_checks";
    let t0 = Instant::now();
    let rdma = match linux_guest::build_static_example("mlx5-vfio", "rdma") {
        Ok(p) => p,
        Err(s) => return eprintln!("SKIPPED: {T}: {s}"),
    };
    let Some(run) = boot(T, "vfio", true, Duration::from_secs(300), |kernel, img| {
        img.modules(kernel, &["vfio_iommu_type1", "vfio-pci"])?;
        let bin = std::fs::read(&rdma).map_err(|e| Skip(format!("{}: {e}", rdma.display())))?;
        img.file("bin/rdma", &bin, true);
        img.file("hugepages", b"384\n", false);
        // An unprivileged user, for the physical mode's refusal without CAP_SYS_ADMIN.
        img.dir("etc");
        img.file(
            "etc/passwd",
            b"root:x:0:0::/:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n",
            false,
        );
        img.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", false);
        // 1. Physical mode as user nobody: refused with the typed error before VFIO is opened.
        // 2. The HAL's default IOVAs, which the proxy device (it ignores the vIOMMU) cannot
        //    reach: a typed command timeout, quickly (a wrong IOVA costs the command timeout
        //    per command, hence a short one, not 60 s).
        // 3. IOVA = PA, which must pass every check.
        let cmd = "su -s /bin/sh nobody -c \"rdma --iova-mode pa --hugepages 1 $BDF\"; \
                   echo \"GUEST: unprivileged pa rc=$?\"\n\
                   rdma --iova-mode alloc --cmd-timeout-ms 1000 --hugepages 1 $BDF; echo \"GUEST: alloc rc=$?\"\n\
                   rdma --iova-mode pa --cmd-timeout-ms 5000 $BDF";
        img.file("test.sh", linux_guest::vfio_script(cmd).as_bytes(), false);
        Ok(())
    }) else {
        return;
    };
    if !run.serial.contains("bound to vfio-pci") {
        fail(T, &run, "the function was not bound to vfio-pci");
    }
    if !run
        .serial
        .contains("shows no physical addresses (needs CAP_SYS_ADMIN")
        || !run.serial.contains("GUEST: unprivileged pa rc=2")
    {
        fail(
            T,
            &run,
            "physical mode without CAP_SYS_ADMIN was not refused with the typed error",
        );
    }
    if !run.serial.contains("CommandTimeout") || !run.serial.contains("GUEST: alloc rc=3") {
        fail(
            T,
            &run,
            "allocated IOVAs behind the proxy did not end in a command timeout (exit 3)",
        );
    }
    for line in [
        "rdma: RDMA_WRITE 4 KiB: ok",
        "rdma: RDMA_WRITE to the last 4 KiB of the huge-page region: ok",
        "rdma: RDMA_WRITE_WITH_IMM: ok",
        "rdma: RDMA_READ 4 KiB: ok",
        "rdma: SEND 1500 B: ok",
        "rdma: SEND_WITH_IMM 1500 B: ok",
        "rdma: SEND inline: ok",
        "rdma: ATOMIC_CMP_AND_SWP: ok",
        "rdma: ATOMIC_FETCH_AND_ADD: ok",
        "rdma: batch of 3 unsignaled + 1 signaled WRITE: ok",
        "rdma: out-of-bounds RDMA_WRITE gets REM_ACCESS_ERR and writes nothing: ok",
        "rdma: RDMA_WRITE with an rkey of another PD is refused: ok",
        "rdma: gather from an lkey of another PD gets LOC_PROT_ERR: ok",
        "rdma: post_send in RESET is an error, nothing sent: ok",
        "rdma: reg_mr of huge pages needs one command and at most one entry per huge page: ok",
        "rdma: RDMA_Write BW",
        "rdma: RDMA_Read BW",
        "rdma: RDMA_Write Latency",
        "rdma: teardown ok, pages reclaimed",
        " 0 failed",
        "GUEST: rc=0 ",
    ] {
        if !run.serial.contains(line) {
            fail(T, &run, &format!("no \"{line}\" on the console"));
        }
    }
    if run.serial.contains("FAILED") {
        fail(T, &run, "a check FAILED");
    }
    // The report: bring-up, pinning, reg_mr and the table, as the guest printed them.
    for l in run.serial.lines().filter(|l| {
        l.starts_with("rdma: ")
            && (l.contains(" up in ")
                || l.contains("pinned")
                || l.contains("reg_mr ")
                || l.starts_with("rdma:  ")
                || l.contains(" BW ")
                || l.contains("Latency")
                || l.contains("checks passed"))
    }) {
        eprintln!("{T}: {l}");
    }
    eprintln!(
        "{T}: guest wall {:.1} s, test wall {:.1} s",
        run.wall.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

/// The private QEMU copy differs from the stock binary in exactly the two 6-byte stubs.
#[test]
fn tcg_qemu_copy_differs_from_stock_only_in_the_two_stubs() {
    const T: &str = "tcg_qemu_copy_differs_from_stock_only_in_the_two_stubs";
    let (stock, copy) = match (linux_guest::stock_qemu(), linux_guest::patched_qemu()) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(s), _) | (_, Err(s)) => return eprintln!("SKIPPED: {T}: {s}"),
    };
    let (a, b) = (
        std::fs::read(&stock).unwrap(),
        std::fs::read(&copy).unwrap(),
    );
    assert_ne!(stock, copy);
    assert_eq!(a.len(), b.len());
    let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
    assert!(
        !diff.is_empty() && diff.len() <= 12,
        "{} bytes differ",
        diff.len()
    );
    // Two runs of at most 6 bytes, each now `mov $-ENOSYS,%eax; ret`.
    let starts: Vec<usize> = diff
        .iter()
        .copied()
        .filter(|&i| i == 0 || a[i - 1] == b[i - 1])
        .collect();
    assert!(starts.len() <= 2, "{starts:?}");
    for s in &starts {
        let stub_at = (s.saturating_sub(5)..=*s)
            .find(|&o| b[o..o + 6] == [0xb8, 0xda, 0xff, 0xff, 0xff, 0xc3]);
        assert!(stub_at.is_some(), "no -ENOSYS stub around {s:#x}");
    }
}
