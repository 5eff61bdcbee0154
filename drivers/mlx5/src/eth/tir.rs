//! Transport interface receive: CREATE_TIR / DESTROY_TIR. A direct TIR hands every frame the
//! steering sends it to one RQ; the flow rules name it as their destination.

use mlx5_prm::{create_tir_in, create_tir_out, destroy_tir_in, destroy_tir_out, opcode, tirc};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;

/// CREATE_TIR of a direct TIR to RQ `rqn` on transport domain `tdn`, without hashing: Linux
/// en/tir.c `mlx5e_tir_builder_build_inline` (`transport_domain`, `disp_type` DIRECT,
/// `rx_hash_fn` NONE, `inline_rqn`). Returns the TIR number.
pub(super) fn create<H: Hal>(ctx: &CtxInner<H>, tdn: u32, rqn: u32) -> Result<u32> {
    let mut c = CmdBuf::new(opcode::CREATE_TIR, 0, create_tir_in::BYTES);
    let x = |f: mlx5_prm::Field| f.within(create_tir_in::CTX);
    c.set(x(tirc::TRANSPORT_DOMAIN), tdn)
        .set(x(tirc::DISP_TYPE), mlx5_prm::tirc_disp_type::DIRECT.into())
        .set(x(tirc::RX_HASH_FN), mlx5_prm::rx_hash_fn::NONE.into())
        .set(x(tirc::INLINE_RQN), rqn);
    let mut out = [0u8; create_tir_out::BYTES];
    ctx.exec(&c, &mut out)?;
    Ok(get(&out, create_tir_out::TIRN))
}

/// DESTROY_TIR (Linux core/transobj.c `mlx5_core_destroy_tir`).
pub(super) fn destroy<H: Hal>(ctx: &CtxInner<H>, tirn: u32) -> Result<()> {
    let mut c = CmdBuf::new(opcode::DESTROY_TIR, 0, destroy_tir_in::BYTES);
    c.set(destroy_tir_in::TIRN, tirn);
    let mut out = [0u8; destroy_tir_out::BYTES];
    ctx.exec(&c, &mut out)
}
