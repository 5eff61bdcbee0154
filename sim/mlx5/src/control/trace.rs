//! Command trace: one stderr line per command (opcode name, op_mod, status name, syndrome),
//! plus hexdumps of input and output at level 2, and free-form notes (ignored doorbells, DMA
//! faults, injected faults).
//!
//! Enabled by `--trace` in the binary or `MLX5_SIM_TRACE=1` (`=2` adds hexdumps).

use mlx5_prm::{cmd_status, delivery_status, opcode};

/// Most lines kept by [`Trace::capture`].
const CAPTURE_MAX: usize = 4096;

/// Trace settings and an optional in-memory capture (for tests).
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// 0 = off, 1 = one line per command, 2 = with hexdumps.
    pub level: u8,
    /// Printed at the start of every line (tells two HCAs apart).
    pub prefix: String,
    captured: Option<Vec<String>>,
}

impl Trace {
    /// Level from `MLX5_SIM_TRACE` (unset, empty or "0" = off; "2" = hexdumps; else 1).
    pub fn from_env() -> Trace {
        let level = match std::env::var("MLX5_SIM_TRACE") {
            Ok(v) if v == "2" => 2,
            Ok(v) if !v.is_empty() && v != "0" => 1,
            _ => 0,
        };
        Trace {
            level,
            prefix: "mlx5-sim".into(),
            captured: None,
        }
    }

    /// Keeps every line in memory as well (see [`Trace::take_captured`]).
    pub fn capture(&mut self) {
        self.captured = Some(Vec::new());
    }

    /// The captured lines so far (emptied).
    pub fn take_captured(&mut self) -> Vec<String> {
        self.captured
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// True if anything is printed or captured.
    pub fn enabled(&self) -> bool {
        self.level > 0 || self.captured.is_some()
    }

    fn emit(&mut self, line: String) {
        if self.level > 0 {
            eprintln!("{}: {line}", self.prefix);
        }
        if let Some(c) = &mut self.captured {
            if c.len() < CAPTURE_MAX {
                c.push(line);
            }
        }
    }

    /// A free-form note.
    pub fn note(&mut self, args: std::fmt::Arguments<'_>) {
        if self.enabled() {
            self.emit(args.to_string());
        }
    }

    /// One executed command.
    #[allow(clippy::too_many_arguments)]
    pub fn command(
        &mut self,
        slot: u32,
        opcode: u16,
        op_mod: u16,
        status: u8,
        syndrome: u32,
        input: &[u8],
        output: &[u8],
    ) {
        if !self.enabled() {
            return;
        }
        let name = opcode::name(opcode).unwrap_or("UNKNOWN");
        let st = cmd_status::name(status).unwrap_or("?");
        self.emit(format!(
            "cmd slot {slot} {name} ({opcode:#x}) op_mod {op_mod:#x} -> {st} ({status:#x}) syndrome {syndrome:#010x}"
        ));
        if self.level >= 2 {
            self.hexdump("in ", input);
            self.hexdump("out", output);
        }
    }

    /// A command that ended with a delivery error (never reached the command handler).
    pub fn delivery(&mut self, slot: u32, status: u8, why: &str) {
        if self.enabled() {
            let n = delivery_status::name(status).unwrap_or("?");
            self.emit(format!(
                "cmd slot {slot}: delivery {n} ({status:#x}): {why}"
            ));
        }
    }

    fn hexdump(&mut self, tag: &str, data: &[u8]) {
        for (i, chunk) in data.chunks(16).enumerate() {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            self.emit(format!("  {tag} {:04x}: {}", i * 16, hex.join(" ")));
        }
    }
}
