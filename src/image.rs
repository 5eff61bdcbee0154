use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{progress, workspace_root, LaunchError, IMAGE_TARGET};

/// Builds the image for `app` (a binary of the `apps` crate) and returns the ELF's path.
pub fn build_image(app: &str) -> Result<PathBuf, LaunchError> {
    let root = workspace_root();
    let target_dir = root.join("target").join("image");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "apps",
            "--bin",
            app,
            "--target",
            IMAGE_TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer cargo's settings are for the host build, not the image.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let _step = progress::Step::start(format!("building the image `{app}`"));
    let out = cmd
        .output()
        .map_err(|e| LaunchError::Build(format!("cannot run cargo: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Build(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(target_dir.join(IMAGE_TARGET).join("release").join(app))
}

/// Builds the emulated HCA's device server (`mlx5-sim`, a host binary) and returns its path.
pub fn build_hca_sim() -> Result<PathBuf, LaunchError> {
    let root = workspace_root();
    let target_dir = root.join("target").join("sim");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "mlx5-sim",
            "--bin",
            "mlx5-sim",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    for var in ["CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
        cmd.env_remove(var);
    }
    let _step = progress::Step::start("building mlx5-sim, the emulated HCA");
    let out = cmd
        .output()
        .map_err(|e| LaunchError::Build(format!("cannot run cargo: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Build(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(target_dir.join("release").join("mlx5-sim"))
}

/// Makes a GRUB rescue ISO that boots `kernel` through Multiboot2 with `cmdline`.
pub fn build_grub_iso(kernel: &Path, cmdline: &str, out: &Path) -> Result<(), LaunchError> {
    let dir = out.with_extension("isodir");
    let _ = std::fs::remove_dir_all(&dir);
    let grub_dir = dir.join("boot").join("grub");
    std::fs::create_dir_all(&grub_dir)
        .map_err(|e| LaunchError::Io(format!("{}: {e}", grub_dir.display())))?;
    std::fs::copy(kernel, dir.join("boot").join("unikernel.elf"))
        .map_err(|e| LaunchError::Io(format!("copying the image: {e}")))?;
    let cfg = format!(
        "set timeout=0\nset default=0\nmenuentry \"unikernel\" {{\n  multiboot2 /boot/unikernel.elf {cmdline}\n  boot\n}}\n"
    );
    std::fs::write(grub_dir.join("grub.cfg"), cfg)
        .map_err(|e| LaunchError::Io(format!("grub.cfg: {e}")))?;
    let res = Command::new("grub-mkrescue")
        .arg("-o")
        .arg(out)
        .arg(&dir)
        .output()
        .map_err(|e| LaunchError::Io(format!("grub-mkrescue not runnable ({e}); run .ci/setup")))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !res.status.success() {
        return Err(LaunchError::Io(format!(
            "grub-mkrescue failed: {}",
            String::from_utf8_lossy(&res.stderr)
        )));
    }
    Ok(())
}
