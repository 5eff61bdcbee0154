//! What command handlers return and the helpers every handler uses: the failure type
//! ([`CmdError`], status and syndrome), its shorthands, and field access to command buffers
//! whose lengths dispatch has checked. The bottom of the control plane: it imports nothing
//! of the model's.

use mlx5_prm::Field;

/// A command failed: the status byte and syndrome dword of its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdError {
    /// `mlx5_prm::cmd_status` value.
    pub status: u8,
    /// Opaque syndrome (see `crate::control::syndrome`).
    pub syndrome: u32,
}

impl CmdError {
    /// A failure with `status` and `syndrome`.
    pub const fn new(status: u8, syndrome: u32) -> CmdError {
        CmdError { status, syndrome }
    }
}

/// What every command handler returns.
pub type CmdResult = Result<(), CmdError>;

/// Shorthand for handlers: a failure with `status` and `syndrome`.
pub(crate) const fn err(status: u8, syndrome: u32) -> CmdError {
    CmdError::new(status, syndrome)
}

/// Shorthand for handlers: `BAD_PARAM` with `syndrome`.
pub(crate) const fn bad_param(syndrome: u32) -> CmdError {
    CmdError::new(mlx5_prm::cmd_status::BAD_PARAM_ERR, syndrome)
}

/// Shorthand for a failed command.
pub(crate) const fn fail(status: u8, syndrome: u32) -> CmdResult {
    Err(CmdError::new(status, syndrome))
}

/// Reads a field the dispatch length check guarantees to be inside `buf`.
pub(crate) fn get(buf: &[u8], f: Field) -> u32 {
    f.get(buf).unwrap_or(0)
}

/// Whether a MODIFY command's `bitmask` selects `allowed`, the one field it may change
/// (`Some(true)` / `Some(false)`); `None` when it selects another.
pub(crate) fn only_bit(bitmask: &[u8], allowed: Field) -> Option<bool> {
    let set = get(bitmask, allowed) != 0;
    let mut others = [0u8; 16];
    let n = bitmask.len().min(others.len());
    others[..n].copy_from_slice(&bitmask[..n]);
    let _ = allowed.set(&mut others, 0);
    (bitmask.len() <= others.len() && others.iter().all(|&b| b == 0)).then_some(set)
}

/// Writes a field the dispatch length check guarantees to be inside `buf`.
pub(crate) fn put(buf: &mut [u8], f: Field, v: u32) {
    let _ = f.set(buf, v);
}
