//! Transport interface send: CREATE_TIS / DESTROY_TIS. The send queue names it in
//! `sqc.tis_num_0`.

use mlx5_prm::{create_tis_in, create_tis_out, destroy_tis_in, destroy_tis_out, opcode, tisc};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

/// CREATE_TIS on transport domain `tdn`, priority 0: Linux en_common.c `mlx5e_create_tises`
/// (`tisc.prio = tc << 1` for traffic class 0, no LAG affinity on a single port) and
/// `mlx5e_create_tis` (`tisc.transport_domain`). Returns the TIS number.
pub(super) fn create<H: Hal>(ctx: &CtxInner<H>, tdn: u32) -> Result<u32> {
    let mut c = CmdBuf::new(opcode::CREATE_TIS, 0, create_tis_in::BYTES);
    let x = |f: mlx5_prm::Field| f.within(create_tis_in::CTX);
    c.set(x(tisc::PRIO), 0).set(x(tisc::TRANSPORT_DOMAIN), tdn);
    let mut out = [0u8; create_tis_out::BYTES];
    ctx.exec(&c, &mut out)?;
    Ok(get(&out, create_tis_out::TISN))
}

/// DESTROY_TIS (Linux core/transobj.c `mlx5_core_destroy_tis`).
pub(super) fn destroy<H: Hal>(ctx: &CtxInner<H>, tisn: u32) -> Result<()> {
    let mut c = CmdBuf::new(opcode::DESTROY_TIS, 0, destroy_tis_in::BYTES);
    c.set(destroy_tis_in::TISN, tisn);
    let mut out = [0u8; destroy_tis_out::BYTES];
    ctx.exec(&c, &mut out)
}
