//! The `wire` target's memory windows: each new QP gets a type 2 window over its slot's
//! remote region, bound to it with the UMR WQE rdma-core builds for a bind
//! (providers/mlx5/qp.c `set_bind_wr`: inline KLM, translation offset, "check not free", the
//! window's QPN, variant and rights), so the peer's remote operations (and the hostile frames
//! mutated from them) name a window key as often as an MR key.

use mlx5_prm::wqe::umr_ctrl_seg::{mask as mk, *};

use super::*;

/// The variant a window is created with (CREATE_MKEY); binds give it others.
const ALLOC_VARIANT: u8 = 0x31;

impl WireFuzz {
    /// Creates a type 2 window in `pd` on side `side` (Linux ib/mr.c `mlx5_ib_alloc_mw`:
    /// free, umr_en, KLMS, `en_rinval`, qpn 0xffffff) and binds it on `end`'s QP over the
    /// MR of `block` with remote read, write and atomic rights. The bind's WQE is tracked in
    /// `end.sq` like any other; returns the window's rkey.
    pub(super) fn bind_window(
        &mut self,
        side: usize,
        pd: u32,
        end: &mut End,
        mr: (u64, u32),
    ) -> u32 {
        let e = &mut self.env[side];
        let mut i = raw::input(opcode::CREATE_MKEY, 0, create_mkey_in::BYTES);
        let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
        raw::set(&mut i, mkc::FREE.within(m), 1);
        raw::set(&mut i, mkc::TRANSLATIONS_OCTWORD_SIZE.within(m), 4);
        raw::set(&mut i, mkc::PD.within(m), pd);
        raw::set(&mut i, mkc::UMR_EN.within(m), 1);
        raw::set(&mut i, mkc::LR.within(m), 1);
        raw::set(
            &mut i,
            mkc::ACCESS_MODE_1_0.within(m),
            mkc_access_mode::bits_1_0(mkc_access_mode::KLMS),
        );
        raw::set(&mut i, mkc::EN_RINVAL.within(m), 1);
        raw::set(&mut i, mkc::QPN.within(m), 0xff_ffff);
        raw::set(&mut i, mkc::MKEY_7_0.within(m), ALLOC_VARIANT.into());
        let d = e.raw.exec(&i, 16);
        d.ok();
        let index = d.get(create_mkey_out::MKEY_INDEX);
        let variant = (end.qp.qpn as u8).wrapping_mul(7) | 1;
        let variant = if variant == ALLOC_VARIANT {
            0x55
        } else {
            variant
        };
        // The UMR body: control segment, mkey segment, one KLM padded to 4 octowords.
        let (addr, key) = mr;
        let mut u = [0u8; SIZE];
        u[FLAGS] = FLAG_INLINE | FLAG_TRANSLATION_OFFSET_EN | FLAG_CHECK_NOT_FREE;
        u[KLM_OCTOWORDS..KLM_OCTOWORDS + 2].copy_from_slice(&4u16.to_be_bytes());
        let mask = mk::FREE
            | mk::KEY
            | mk::LEN
            | mk::START_ADDR
            | mk::LW
            | mk::RR
            | mk::RW
            | mk::A
            | mk::QPN;
        u[MKEY_MASK..MKEY_MASK + 8].copy_from_slice(&mask.to_be_bytes());
        let mut s = [0u8; mkc::BYTES];
        mkc::QPN.set(&mut s, end.qp.qpn).unwrap();
        mkc::MKEY_7_0.set(&mut s, variant.into()).unwrap();
        for f in [mkc::RR, mkc::RW, mkc::A] {
            f.set(&mut s, 1).unwrap();
        }
        mkc::START_ADDR.set_u64(&mut s, addr).unwrap();
        mkc::LEN.set_u64(&mut s, MR_LEN).unwrap();
        let mut klm = [0u8; 64];
        klm[0..4].copy_from_slice(&(MR_LEN as u32).to_be_bytes());
        klm[4..8].copy_from_slice(&key.to_be_bytes());
        klm[8..16].copy_from_slice(&addr.to_be_bytes());
        let mut body = u.to_vec();
        body.extend_from_slice(&s);
        body.extend_from_slice(&klm);
        let wkey = mkey::from_index(index, ALLOC_VARIANT);
        let idx = e.post_send(
            &mut end.qp,
            wqe::opcode::UMR,
            wqe::ctrl::CQ_UPDATE | wqe::fence::INITIATOR_SMALL,
            wkey,
            &[&body],
        );
        let psn = psn_add(end.next_psn, mlx5_sim::roce::PSN_MASK);
        end.sq.push_back(Posted {
            idx,
            op: Op::Bind,
            len: 0,
            first_psn: psn,
            last_psn: psn,
        });
        let rkey = mkey::from_index(index, variant);
        self.keys[side].push(rkey);
        rkey
    }
}
