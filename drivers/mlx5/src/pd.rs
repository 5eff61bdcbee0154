//! Protection domains and transport domains: ALLOC_PD / DEALLOC_PD,
//! ALLOC_TRANSPORT_DOMAIN / DEALLOC_TRANSPORT_DOMAIN (Linux core/pd.c, core/transobj.c); the PD
//! state its regions and QPs share, and the [`ProtectionDomain`] handle (whose verbs are in
//! [`crate::verbs`]).

use mlx5_prm::{
    alloc_pd_in, alloc_pd_out, alloc_transport_domain_in, alloc_transport_domain_out,
    dealloc_pd_in, dealloc_pd_out, dealloc_transport_domain_in, dealloc_transport_domain_out,
    opcode,
};

use alloc::sync::Arc;

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::Result;
use crate::hal::Hal;
use crate::hca::Device;

impl<H: Hal> Device<H> {
    /// ALLOC_PD: returns the PD number.
    pub(crate) fn alloc_pd(&mut self, hal: &H) -> Result<u32> {
        let c = CmdBuf::new(opcode::ALLOC_PD, 0, alloc_pd_in::BYTES);
        let mut out = [0u8; alloc_pd_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        Ok(get(&out, alloc_pd_out::PD))
    }

    /// DEALLOC_PD.
    pub(crate) fn dealloc_pd(&mut self, hal: &H, pdn: u32) -> Result<()> {
        let mut c = CmdBuf::new(opcode::DEALLOC_PD, 0, dealloc_pd_in::BYTES);
        c.set(dealloc_pd_in::PD, pdn);
        let mut out = [0u8; dealloc_pd_out::BYTES];
        self.exec(hal, &c, &mut out)
    }

    /// ALLOC_TRANSPORT_DOMAIN: returns the TD number. Plain RC QPs do not reference it (qpc
    /// has no TD field, Linux mlx5_ifc.h `mlx5_ifc_qpc_bits`); Linux allocates one per user
    /// context (ib/main.c `mlx5_ib_alloc_ucontext`) and so does the driver.
    pub(crate) fn alloc_td(&mut self, hal: &H) -> Result<u32> {
        let c = CmdBuf::new(
            opcode::ALLOC_TRANSPORT_DOMAIN,
            0,
            alloc_transport_domain_in::BYTES,
        );
        let mut out = [0u8; alloc_transport_domain_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        Ok(get(&out, alloc_transport_domain_out::TRANSPORT_DOMAIN))
    }

    /// DEALLOC_TRANSPORT_DOMAIN.
    pub(crate) fn dealloc_td(&mut self, hal: &H, tdn: u32) -> Result<()> {
        let mut c = CmdBuf::new(
            opcode::DEALLOC_TRANSPORT_DOMAIN,
            0,
            dealloc_transport_domain_in::BYTES,
        );
        c.set(dealloc_transport_domain_in::TRANSPORT_DOMAIN, tdn);
        let mut out = [0u8; dealloc_transport_domain_out::BYTES];
        self.exec(hal, &c, &mut out)
    }
}

/// Protection domain state shared with its MRs and QPs.
pub(crate) struct PdInner<H: Hal> {
    pub(crate) ctx: Arc<CtxInner<H>>,
    pub(crate) pdn: u32,
}

impl<H: Hal> Drop for PdInner<H> {
    fn drop(&mut self) {
        let ctx = &self.ctx;
        let pdn = self.pdn;
        let _ = ctx.with_dev(|d| d.dealloc_pd(&ctx.hal, pdn));
    }
}

/// A protection domain.
pub struct ProtectionDomain<H: Hal> {
    pub(crate) inner: Arc<PdInner<H>>,
}

impl<H: Hal> ProtectionDomain<H> {
    /// A PD of the driver's own (the UMR QP's).
    pub(crate) fn alloc_internal(ctx: &Arc<CtxInner<H>>) -> Result<Self> {
        let pdn = ctx.with_dev(|d| d.alloc_pd(&ctx.hal))?;
        Ok(ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                pdn,
            }),
        })
    }

    pub(crate) fn inner_arc(&self) -> &Arc<PdInner<H>> {
        &self.inner
    }
}
