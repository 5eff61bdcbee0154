//! Runs the reference checker (`../shared/checks/prm_layout_check.py`, relative to the
//! workspace root) on the layout dump. Skips loudly when the checker or python3 is missing.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn reference_checker_accepts_the_layout_dump() {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let checker = workspace.join("../shared/checks/prm_layout_check.py");
    if !checker.exists() {
        eprintln!("SKIPPED: reference checker {} not found", checker.display());
        return;
    }

    let dump = Command::new(env!("CARGO_BIN_EXE_prm-layout-dump"))
        .output()
        .expect("run prm-layout-dump");
    assert!(
        dump.status.success(),
        "prm-layout-dump failed: {:?}",
        dump.status
    );

    let child = Command::new("python3")
        .arg(&checker)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            eprintln!("SKIPPED: cannot run python3 for {}: {e}", checker.display());
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&dump.stdout)
        .expect("feed the dump");
    let out = child.wait_with_output().expect("wait for the checker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout.lines().last().unwrap_or("");
    eprintln!("checker: {summary}");
    assert!(
        out.status.success(),
        "checker failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(summary.contains(" 0 mismatches"), "{stdout}");

    // Every struct the checker calls required is declared ("N/N required structs declared").
    let req = summary
        .split("; ")
        .find(|p| p.ends_with("required structs declared"))
        .unwrap_or_else(|| panic!("no required-structs figure in {summary:?}"));
    let frac = req.split_whitespace().next().unwrap();
    let (have, want) = frac.split_once('/').unwrap();
    assert_eq!(have, want, "{summary}");
}
