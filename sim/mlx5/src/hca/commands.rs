//! The HCA's own commands: the lifecycle (ENABLE/INIT/TEARDOWN/DISABLE), ISSI, capabilities,
//! ACCESS_REGISTER, QUERY_ADAPTER, NOP, SET_DRIVER_VERSION.

use crate::control::caps::{SetCapError, CAP_PAGE_BYTES};
use crate::control::result::CmdResult;
use crate::control::syndrome;
use crate::objects::eq::EqTable;
use crate::objects::pd::{PdTable, TdTable};
use crate::objects::uar::UarTable;
use crate::objects::vport::Vport;
use mlx5_prm::*;

use super::{Hca, Lifecycle, IEEE_VENDOR_ID, PSID, SUPPORTED_ISSI};
use crate::control::result::{fail, get, put};

impl Hca {
    // ---------------------------------------------------------------------------------------
    // Lifecycle commands.
    // ---------------------------------------------------------------------------------------

    pub(super) fn enable_hca(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        // enable_hca_in: embedded_cpu_function (bit 0x40, Linux) and function_id: 0 = this PF.
        if get(input, Field::new(0x40, 0x10)) != 0 || get(input, enable_hca_in::FUNCTION_ID) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::FUNCTION_ID);
        }
        self.state = Lifecycle::Enabled;
        Ok(())
    }

    pub(super) fn disable_hca(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        if get(input, Field::new(0x40, 0x10)) != 0 || get(input, disable_hca_in::FUNCTION_ID) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::FUNCTION_ID);
        }
        // Back to power-on; pages the driver did not reclaim are forgotten.
        self.power_on();
        Ok(())
    }

    pub(super) fn query_issi(&mut self, _input: &[u8], out: &mut [u8]) -> CmdResult {
        put(out, query_issi_out::CURRENT_ISSI, self.issi.into());
        put(out, query_issi_out::SUPPORTED_ISSI_DW0, SUPPORTED_ISSI);
        Ok(())
    }

    pub(super) fn set_issi(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        let issi = get(input, set_issi_in::CURRENT_ISSI);
        if issi >= 32 || SUPPORTED_ISSI & (1 << issi) == 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::BAD_ISSI);
        }
        self.issi = issi as u16;
        Ok(())
    }

    pub(super) fn init_hca(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        // Linux's init_hca_in carries sw_owner_id (only with cap sw_owner_id, not advertised)
        // and sw_vhca_id: everything past the header must be zero.
        if input[8..].iter().any(|&b| b != 0) {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::INIT_RESERVED);
        }
        if !self.control.pages.init_satisfied() {
            return fail(cmd_status::NO_RES_ERR, syndrome::INIT_NO_PAGES);
        }
        self.state = Lifecycle::Initialized;
        Ok(())
    }

    pub(super) fn teardown_hca(&mut self, input: &[u8], out: &mut [u8]) -> CmdResult {
        use mlx5_prm::teardown::{force_state, profile};
        let p = get(input, teardown_hca_in::PROFILE) as u8;
        match p {
            profile::GRACEFUL_CLOSE => {}
            // Advertised by cmd_hca_cap.force_teardown.
            profile::FORCE_CLOSE => put(out, teardown_hca_out::STATE, force_state::SUCCESS.into()),
            // PREPARE_FAST_TEARDOWN needs cap fast_teardown (not advertised; its position is
            // disputed: rdma-core and Linux `mlx5_ifc_cmd_hca_cap_bits` differ).
            _ => return fail(cmd_status::BAD_PARAM_ERR, syndrome::TEARDOWN_PROFILE),
        }
        // Every object goes; the driver now reclaims all pages and disables the function.
        self.objects.mkeys = Default::default();
        self.objects.cqs = Default::default();
        self.objects.qps = Default::default();
        self.objects.tises = Default::default();
        self.objects.sqs = Default::default();
        self.objects.rqs = Default::default();
        self.objects.tirs = Default::default();
        self.objects.uars = UarTable::default();
        self.objects.pds = PdTable::default();
        self.objects.tds = TdTable::default();
        self.events.eqs = EqTable::default();
        self.objects.vport = Vport::new(self.config.mac);
        self.events.intx.lower();
        self.state = Lifecycle::TornDown;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Capabilities, registers, adapter.
    // ---------------------------------------------------------------------------------------

    pub(super) fn query_hca_cap(&mut self, input: &[u8], out: &mut [u8]) -> CmdResult {
        if get(input, query_hca_cap_in::OTHER_FUNCTION) != 0
            || get(input, query_hca_cap_in::FUNCTION_ID) != 0
        {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_FUNCTION);
        }
        let op_mod = get(input, query_hca_cap_in::OP_MOD) as u16;
        let Some(page) = self.control.caps.page(op_mod >> 1) else {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_TYPE);
        };
        let src = if op_mod & 1 == hca_cap::OPMOD_GET_CUR {
            &page.cur
        } else {
            &page.max
        };
        let at = query_hca_cap_out::CAPABILITY.byte_offset();
        out[at..at + CAP_PAGE_BYTES].copy_from_slice(&src[..]);
        Ok(())
    }

    pub(super) fn set_hca_cap(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        if get(input, set_hca_cap_in::OTHER_FUNCTION) != 0
            || get(input, set_hca_cap_in::FUNCTION_ID) != 0
        {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_FUNCTION);
        }
        let op_mod = get(input, set_hca_cap_in::OP_MOD) as u16;
        if op_mod & 1 != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_SET_OP_MOD);
        }
        let at = set_hca_cap_in::CAPABILITY.byte_offset();
        match self
            .control
            .caps
            .set(op_mod >> 1, &input[at..at + CAP_PAGE_BYTES])
        {
            Ok(()) => Ok(()),
            Err(SetCapError::UnsupportedType) => {
                fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_TYPE)
            }
            Err(SetCapError::ReadOnlyChanged) => {
                fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_READ_ONLY)
            }
            Err(SetCapError::AboveMax(_)) => {
                fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_ABOVE_MAX)
            }
        }
    }

    pub(super) fn access_register(&mut self, input: &[u8], out: &mut [u8]) -> CmdResult {
        let op_mod = get(input, access_register_in::OP_MOD) as u16;
        if op_mod != access_reg::OP_MOD_WRITE && op_mod != access_reg::OP_MOD_READ {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::REG_OP_MOD);
        }
        let id = get(input, access_register_in::REGISTER_ID) as u16;
        if id != access_reg::REG_HOST_ENDIANNESS {
            // PCAM/MCAM/QCAM/DTOR and the rest are not advertised (cmd_hca_cap pcam_reg,
            // mcam_reg, qcam_reg = 0; cmd_q_init_to = 0), so Linux never asks for them.
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::REG_UNSUPPORTED);
        }
        if get(input, access_register_in::ARGUMENT) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::REG_ARGUMENT);
        }
        let data_at = access_register_in::REGISTER_DATA.offset as usize / 8;
        let len = register_host_endianness::BYTES;
        if out.len() < data_at + len {
            return fail(cmd_status::BAD_OUTP_LEN_ERR, syndrome::REG_OUTLEN);
        }
        if op_mod == access_reg::OP_MOD_WRITE {
            let Some(data) = input.get(data_at..data_at + len) else {
                return fail(cmd_status::BAD_INP_LEN_ERR, syndrome::REG_INLEN);
            };
            // he: bit 0 of the register (byte 0 bit 7): 0 little-endian host, 0x80 big
            // (Linux device.h:42-44).
            self.control.host_endianness = data[0] & access_reg::HOST_ENDIANNESS_BIG;
        }
        // The register's contents come back in the output (Linux mlx5_core_access_reg copies
        // register_data out for reads and writes alike).
        out[data_at] = self.control.host_endianness;
        Ok(())
    }

    pub(super) fn query_adapter(&mut self, _input: &[u8], out: &mut [u8]) -> CmdResult {
        let at = query_adapter_out::QUERY_ADAPTER_STRUCT.byte_offset();
        let blk = &mut out[at..at + query_adapter_param_block::BYTES];
        put(
            blk,
            query_adapter_param_block::IEEE_VENDOR_ID,
            IEEE_VENDOR_ID,
        );
        put(
            blk,
            query_adapter_param_block::VSD_VENDOR_ID,
            crate::front::device::VENDOR_ID.into(),
        );
        let psid = query_adapter_param_block::VSD_CONTD_PSID.as_field();
        let p = psid.byte_offset();
        blk[p..p + PSID.len()].copy_from_slice(PSID);
        Ok(())
    }

    pub(super) fn set_driver_version(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        let f = set_driver_version_in::DRIVER_VERSION.as_field();
        let bytes = &input[f.byte_offset()..f.byte_offset() + f.byte_len()];
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        self.driver_version = Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
        Ok(())
    }

    pub(super) fn nop(&mut self, _input: &[u8], _out: &mut [u8]) -> CmdResult {
        Ok(())
    }
}
