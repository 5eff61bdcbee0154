//! Bring-up and teardown of the PCI function, in the order of rdma-core mlx5_vfio.c
//! (`mlx5_vfio_setup_function`, `mlx5_vfio_init_context`) and Linux core/main.c
//! (`mlx5_function_setup`, `mlx5_function_teardown`, `mlx5_function_enable`) and fw.c
//! (`mlx5_cmd_fast_teardown_hca`).

use alloc::vec::Vec;
use core::time::Duration;

use mlx5_prm::{
    access_reg, access_register_in, access_register_out, cmd_hca_cap, disable_hca_in,
    disable_hca_out, enable_hca_in, enable_hca_out, hca_cap, init_hca_in, init_hca_out, init_seg,
    linux_layout, modify_nic_vport_context_in, modify_nic_vport_context_out,
    modify_nic_vport_field_select, nic_vport_context, opcode, pages, query_issi_in, query_issi_out,
    query_nic_vport_context_in, query_nic_vport_context_out, query_roce_address_in,
    query_roce_address_out, query_vport_state_in, query_vport_state_out, roce_addr_layout,
    set_issi_in, set_issi_out, set_roce_address_in, set_roce_address_out, teardown,
    teardown_hca_in, teardown_hca_out,
};

use crate::caps::Caps;
use crate::cmd::{get, CmdBuf, CmdQueue, CmdTimeouts};
use crate::eq::EventQueue;
use crate::error::{Error, Result};
use crate::hal::{Bar, DmaMem, Hal, HalError};
use crate::pages::FwPages;
use crate::uar::Uar;

/// Bring-up options.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// How long to wait for `initializing` to clear (Linux FW_PRE_INIT_TIMEOUT 120 s).
    pub fw_init_timeout: Duration,
    /// Command and health-poll timeouts.
    pub cmd: CmdTimeouts,
    /// Enable RoCE on the NIC vport when the port is Ethernet (rdma-core mlx5_vfio.c
    /// `mlx5_vfio_nic_vport_update_roce_state`).
    pub enable_roce: bool,
    /// Program GID index 0 with the RoCE v2 link-local GID derived from the MAC.
    pub default_gid: bool,
    /// Reset the PCI function (FLR) before bring-up where the HAL can.
    pub reset_function: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fw_init_timeout: Duration::from_millis(mlx5_prm::timeouts::FW_PRE_INIT_TIMEOUT_MS),
            cmd: CmdTimeouts::default(),
            enable_roce: true,
            default_gid: true,
            reset_function: true,
        }
    }
}

/// Everything behind the context's command lock: the command queue, the EQ, the firmware
/// pages.
pub(crate) struct Device<H: Hal> {
    pub(crate) cmd: CmdQueue<H>,
    pub(crate) eq: Option<EventQueue<H>>,
    pub(crate) pages: FwPages<H>,
    /// DMA memory the device may still hold after a command whose outcome is unknown (a
    /// garbled reply or a timeout on a create or destroy). It is never freed while the
    /// function lives: only after a successful teardown with every page reclaimed (the device
    /// has then given everything back); otherwise it is leaked on purpose.
    pub(crate) quarantine: Quarantine<H>,
    /// `cmd_hca_cap.num_vhca_ports` once the capabilities are read (0 before): commands name a
    /// port in `vhca_port_num` only when it is non-zero (Linux core/lib/gid.c).
    pub(crate) num_vhca_ports: u8,
}

/// Memory set aside because the device may still write it (see [`Device::quarantine`]).
pub(crate) struct Quarantine<H: Hal> {
    held: alloc::vec::Vec<DmaMem<H::Dma>>,
    bytes: usize,
}

impl<H: Hal> Quarantine<H> {
    pub(crate) fn new() -> Self {
        Quarantine {
            held: alloc::vec::Vec::new(),
            bytes: 0,
        }
    }

    /// Buffers and bytes held; a non-zero count means the function needs a reset.
    pub(crate) fn stats(&self) -> (usize, usize) {
        (self.held.len(), self.bytes)
    }

    fn hold(&mut self, m: DmaMem<H::Dma>) {
        self.bytes = self.bytes.saturating_add(m.len());
        self.held.push(m);
    }

    /// The device has provably given everything back (teardown and reclaim succeeded): free.
    fn release(&mut self) {
        self.held.clear();
        self.bytes = 0;
    }

    /// The device's state is unknown for good: never free.
    fn leak(&mut self) {
        core::mem::forget(core::mem::take(&mut self.held));
    }
}

impl<H: Hal> Drop for Quarantine<H> {
    fn drop(&mut self) {
        // Reached without `release` only when the function was never torn down cleanly.
        self.leak();
    }
}

impl<H: Hal> Device<H> {
    /// Sets `mems` aside after a command on them failed with `e`: freed now when the device
    /// cannot hold them ([`Error::device_may_hold`] is false), quarantined otherwise.
    pub(crate) fn release_after(
        &mut self,
        e: &Error,
        mems: impl IntoIterator<Item = DmaMem<H::Dma>>,
    ) {
        if e.device_may_hold() {
            for m in mems {
                self.quarantine.hold(m);
            }
        }
    }

    /// Quarantines `mems` whatever the error: after a failed destroy the object that
    /// references them still exists on the device.
    pub(crate) fn hold(&mut self, mems: impl IntoIterator<Item = DmaMem<H::Dma>>) {
        for m in mems {
            self.quarantine.hold(m);
        }
    }

    /// Executes one command on slot 0 (or the next free slot), servicing page requests while
    /// it waits, as the firmware may hold a command until it gets pages.
    pub(crate) fn exec(&mut self, hal: &H, input: &CmdBuf, out: &mut [u8]) -> Result<()> {
        self.exec_with(hal, input, out, false)
    }

    /// `nested`: issued while another command waits (page requests): use the last slot
    /// (Linux core/cmd.c:1039, rdma-core slot MLX5_MAX_COMMANDS - 1) and do not recurse.
    pub(crate) fn exec_with(
        &mut self,
        hal: &H,
        input: &CmdBuf,
        out: &mut [u8],
        nested: bool,
    ) -> Result<()> {
        self.cmd.check_health(hal)?;
        let prefer = if nested { self.cmd.nslots() - 1 } else { 0 };
        let slot = self
            .cmd
            .free_slot(prefer)
            .map_err(|_| Error::CommandTimeout {
                opcode: mlx5_prm::mbox_in::OPCODE.get(&input.buf).unwrap_or(0) as u16,
            })?;
        let p = self.cmd.post(hal, slot, input, out.len())?;
        let deadline = hal.now() + self.cmd.timeouts.command;
        loop {
            if self.cmd.done(&p)? {
                break;
            }
            if let Err(e) = self.cmd.check_health(hal) {
                self.cmd.abandon(&p);
                return Err(e);
            }
            if !nested && self.eq.as_ref().is_some_and(|q| q.peek_ready()) {
                // A page request the driver refused (CANT_GIVE) or a nested command that
                // failed does not end the command in flight: it is still the device's, and
                // only its completion (or the deadline) says what became of it. Linux serves
                // page requests apart from the waiting command (pagealloc.c
                // `pages_work_handler`). A dead device ends the wait.
                if let Err(e) = self.service_events(hal, true) {
                    if matches!(e, Error::DeviceFatal { .. }) {
                        self.cmd.abandon(&p);
                        return Err(e);
                    }
                }
            }
            if hal.now() >= deadline {
                self.cmd.abandon(&p);
                return Err(Error::CommandTimeout {
                    opcode: CmdQueue::<H>::opcode(&p),
                });
            }
            hal.relax();
        }
        self.cmd.finish(hal, &p, out)
    }
}

/// What bring-up produced.
pub(crate) struct Opened<H: Hal> {
    pub dev: Device<H>,
    pub caps: Caps,
    pub uar: Uar,
    pub eqn: u8,
    pub tdn: u32,
    pub mac: [u8; 6],
    pub fw: (u16, u16, u16),
}

fn wait_initializing<H: Hal>(hal: &H, timeout: Duration) -> Result<()> {
    // Linux main.c wait_fw_init: poll bit 31 of `initializing` every FW_PRE_INIT_WAIT.
    let bar = Bar(hal);
    let deadline = hal.now() + timeout;
    loop {
        let v = bar.read32(init_seg::INITIALIZING)?;
        if v >> init_seg::INITIALIZING_BIT & 1 == 0 {
            return Ok(());
        }
        if hal.now() >= deadline {
            return Err(Error::FirmwareInitTimeout);
        }
        hal.relax();
    }
}

/// The link-local IPv6 GID of a MAC (modified EUI-64: fe80::/64, MAC with the U/L bit flipped
/// and ff:fe in the middle), what Linux core/rdma.c `mlx5_rdma_make_default_gid` programs at
/// index 0 (via `addrconf_addr_eui48`).
pub fn link_local_gid(mac: [u8; 6]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8] = mac[0] ^ 0x02;
    g[9] = mac[1];
    g[10] = mac[2];
    g[11] = 0xff;
    g[12] = 0xfe;
    g[13] = mac[3];
    g[14] = mac[4];
    g[15] = mac[5];
    g
}

/// The IPv4-mapped IPv6 GID (`::ffff:a.b.c.d`) RoCE v2 uses for an IPv4 address.
pub fn ipv4_mapped_gid(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`, RFC 4291 2.5.5.2: the RoCE v2
/// GID of an IPv4 address, [`ipv4_mapped_gid`]), `None` for any other GID.
pub fn ipv4_of_mapped_gid(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let (head, v4) = gid.split_at(12);
    (head == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).then(|| [v4[0], v4[1], v4[2], v4[3]])
}

/// `MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT` (Linux mlx5_ifc.h).
pub const VPORT_STATE_OP_MOD_VNIC_VPORT: u16 = 0;
/// `VPORT_STATE_UP` (Linux include/linux/mlx5/device.h).
pub const VPORT_STATE_UP: u8 = 1;

/// `MLX5_ROCE_VERSION_2` (Linux include/linux/mlx5/device.h).
pub const ROCE_VERSION_2: u32 = 2;
/// `MLX5_ROCE_L3_TYPE_IPV4` / `_IPV6` (Linux include/linux/mlx5/device.h).
pub const ROCE_L3_TYPE_IPV4: u32 = 0;
/// `MLX5_ROCE_L3_TYPE_IPV6`.
pub const ROCE_L3_TYPE_IPV6: u32 = 1;

impl<H: Hal> Device<H> {
    fn simple(
        &mut self,
        hal: &H,
        op: u16,
        op_mod: u16,
        inlen: usize,
        outlen: usize,
    ) -> Result<Vec<u8>> {
        let c = CmdBuf::new(op, op_mod, inlen);
        let mut out = alloc::vec![0u8; outlen];
        self.exec(hal, &c, &mut out)?;
        Ok(out)
    }

    fn enable_hca(&mut self, hal: &H) -> Result<()> {
        self.simple(
            hal,
            opcode::ENABLE_HCA,
            0,
            enable_hca_in::BYTES,
            enable_hca_out::BYTES,
        )
        .map(|_| ())
    }

    /// QUERY_ISSI, then SET_ISSI 1 (rdma-core `mlx5_vfio_set_issi` requires ISSI 1; Linux
    /// main.c:1073).
    fn set_issi(&mut self, hal: &H) -> Result<()> {
        let out = self.simple(
            hal,
            opcode::QUERY_ISSI,
            0,
            query_issi_in::BYTES,
            query_issi_out::BYTES,
        )?;
        if get(&out, query_issi_out::SUPPORTED_ISSI_DW0) & (1 << 1) == 0 {
            return Err(Error::IssiUnsupported);
        }
        let mut c = CmdBuf::new(opcode::SET_ISSI, 0, set_issi_in::BYTES);
        c.set(set_issi_in::CURRENT_ISSI, 1);
        let mut o = [0u8; set_issi_out::BYTES];
        self.exec(hal, &c, &mut o)
    }

    /// ACCESS_REGISTER write of HOST_ENDIANNESS (Linux main.c `set_hca_ctrl`; rdma-core
    /// mlx5_vfio.c `mlx5_vfio_set_hca_ctrl`, `mlx5_vfio_access_reg`).
    fn set_host_endianness(&mut self, hal: &H) -> Result<()> {
        let data_len = mlx5_prm::register_host_endianness::BYTES;
        let mut c = CmdBuf::new(
            opcode::ACCESS_REG,
            access_reg::OP_MOD_WRITE,
            access_register_in::REGISTER_DATA.bytes_with(data_len / 4),
        );
        c.set(
            access_register_in::REGISTER_ID,
            access_reg::REG_HOST_ENDIANNESS.into(),
        );
        let he = if cfg!(target_endian = "big") {
            access_reg::HOST_ENDIANNESS_BIG
        } else {
            access_reg::HOST_ENDIANNESS_LITTLE
        };
        let at = access_register_in::REGISTER_DATA.byte_offset();
        c.buf[at] = he;
        let mut out = alloc::vec![0u8; access_register_out::REGISTER_DATA.bytes_with(data_len / 4)];
        self.exec(hal, &c, &mut out)
    }

    fn init_hca(&mut self, hal: &H) -> Result<()> {
        self.simple(
            hal,
            opcode::INIT_HCA,
            0,
            init_hca_in::BYTES,
            init_hca_out::BYTES,
        )
        .map(|_| ())
    }

    /// MODIFY_NIC_VPORT_CONTEXT roce_en (rdma-core `mlx5_vfio_nic_vport_update_roce_state`).
    pub(crate) fn set_roce_state(&mut self, hal: &H, on: bool) -> Result<()> {
        let mut c = CmdBuf::new(
            opcode::MODIFY_NIC_VPORT_CONTEXT,
            0,
            modify_nic_vport_context_in::BYTES,
        );
        c.set(
            modify_nic_vport_field_select::ROCE_EN
                .within(modify_nic_vport_context_in::FIELD_SELECT),
            1,
        )
        .set(
            nic_vport_context::ROCE_EN.within(modify_nic_vport_context_in::NIC_VPORT_CONTEXT),
            on as u32,
        );
        let mut out = [0u8; modify_nic_vport_context_out::BYTES];
        self.exec(hal, &c, &mut out)
    }

    /// QUERY_NIC_VPORT_CONTEXT: the permanent MAC address (Linux core/vport.c
    /// `mlx5_query_nic_vport_mac_address`: bytes 2..8 of `permanent_address`).
    pub(crate) fn query_mac(&mut self, hal: &H) -> Result<[u8; 6]> {
        let out = self.simple(
            hal,
            opcode::QUERY_NIC_VPORT_CONTEXT,
            0,
            query_nic_vport_context_in::BYTES,
            query_nic_vport_context_out::BYTES,
        )?;
        // mac_addr_47_32 and mac_addr_31_0 are adjacent: read them as one 48-bit field.
        let f = mlx5_prm::Field::new(
            linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_47_32.offset,
            48,
        )
        .within(query_nic_vport_context_out::NIC_VPORT_CONTEXT);
        let mut mac = [0u8; 6];
        f.read_bytes(&out, &mut mac).map_err(|_| Error::Internal)?;
        Ok(mac)
    }

    /// `vhca_port_num` of port 1 in QUERY/SET_ROCE_ADDRESS: 1 only when the device has vHCA
    /// ports, else 0 (Linux core/lib/gid.c `mlx5_core_roce_gid_set`: "if
    /// (MLX5_CAP_GEN(dev, num_vhca_ports) > 0) MLX5_SET(..., vhca_port_num, port_num)").
    fn vhca_port_num(&self) -> u32 {
        if self.num_vhca_ports > 0 {
            1
        } else {
            0
        }
    }

    /// QUERY_VPORT_STATE of this function's NIC vport (op_mod VNIC_VPORT, vport 0): the
    /// `state` nibble, `VPORT_STATE_UP` (1) when the link is up (Linux core/vport.c
    /// `mlx5_query_vport_state`, which en_main.c `mlx5e_update_carrier` turns into the
    /// carrier that ib/main.c `mlx5_query_port_roce` reports as the port state).
    pub(crate) fn query_vport_state(&mut self, hal: &H) -> Result<u8> {
        let out = self.simple(
            hal,
            opcode::QUERY_VPORT_STATE,
            VPORT_STATE_OP_MOD_VNIC_VPORT,
            query_vport_state_in::BYTES,
            query_vport_state_out::BYTES,
        )?;
        Ok(get(&out, query_vport_state_out::STATE) as u8)
    }

    /// QUERY_NIC_VPORT_CONTEXT: the hardware MTU (Linux core/vport.c
    /// `mlx5_query_nic_vport_mtu`).
    pub(crate) fn query_vport_mtu(&mut self, hal: &H) -> Result<u16> {
        let out = self.simple(
            hal,
            opcode::QUERY_NIC_VPORT_CONTEXT,
            0,
            query_nic_vport_context_in::BYTES,
            query_nic_vport_context_out::BYTES,
        )?;
        Ok(get(
            &out,
            linux_layout::nic_vport_context::MTU
                .within(query_nic_vport_context_out::NIC_VPORT_CONTEXT),
        ) as u16)
    }

    /// SET_ROCE_ADDRESS: a RoCE v2 GID at `index` of port 1 (Linux core/lib/gid.c
    /// `mlx5_core_roce_gid_set`; L3 type IPv4 when the GID is IPv4-mapped, ib/main.c
    /// `set_roce_addr`).
    pub(crate) fn set_roce_address(
        &mut self,
        hal: &H,
        index: u16,
        gid: [u8; 16],
        mac: [u8; 6],
    ) -> Result<()> {
        let mut c = CmdBuf::new(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
        let ra = |f: mlx5_prm::Field| f.within(set_roce_address_in::ROCE_ADDRESS);
        let v4 = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
        c.set(set_roce_address_in::ROCE_ADDRESS_INDEX, index.into())
            .set(set_roce_address_in::VHCA_PORT_NUM, self.vhca_port_num())
            .bytes(ra(roce_addr_layout::SOURCE_L3_ADDRESS), &gid)
            .bytes(
                mlx5_prm::Field::new(roce_addr_layout::SOURCE_MAC_47_32.offset, 48)
                    .within(set_roce_address_in::ROCE_ADDRESS),
                &mac,
            )
            .set(ra(roce_addr_layout::ROCE_VERSION), ROCE_VERSION_2)
            .set(
                ra(roce_addr_layout::ROCE_L3_TYPE),
                if v4 {
                    ROCE_L3_TYPE_IPV4
                } else {
                    ROCE_L3_TYPE_IPV6
                },
            );
        let mut out = [0u8; set_roce_address_out::BYTES];
        self.exec(hal, &c, &mut out)
    }

    /// QUERY_ROCE_ADDRESS: `(gid, mac, roce_version)` at `index`.
    pub(crate) fn query_roce_address(
        &mut self,
        hal: &H,
        index: u16,
    ) -> Result<([u8; 16], [u8; 6], u8)> {
        let mut c = CmdBuf::new(opcode::QUERY_ROCE_ADDRESS, 0, query_roce_address_in::BYTES);
        c.set(query_roce_address_in::ROCE_ADDRESS_INDEX, index.into())
            .set(query_roce_address_in::VHCA_PORT_NUM, self.vhca_port_num());
        let mut out = [0u8; query_roce_address_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        let ra = |f: mlx5_prm::Field| f.within(query_roce_address_out::ROCE_ADDRESS);
        let mut gid = [0u8; 16];
        ra(roce_addr_layout::SOURCE_L3_ADDRESS)
            .read_bytes(&out, &mut gid)
            .map_err(|_| Error::Internal)?;
        let mut mac = [0u8; 6];
        mlx5_prm::Field::new(roce_addr_layout::SOURCE_MAC_47_32.offset, 48)
            .within(query_roce_address_out::ROCE_ADDRESS)
            .read_bytes(&out, &mut mac)
            .map_err(|_| Error::Internal)?;
        Ok((
            gid,
            mac,
            get(&out, ra(roce_addr_layout::ROCE_VERSION)) as u8,
        ))
    }

    /// TEARDOWN_HCA, graceful profile (Linux fw.c `mlx5_cmd_teardown_hca`).
    fn teardown_hca(&mut self, hal: &H) -> Result<()> {
        let mut c = CmdBuf::new(opcode::TEARDOWN_HCA, 0, teardown_hca_in::BYTES);
        c.set(
            teardown_hca_in::PROFILE,
            teardown::profile::GRACEFUL_CLOSE.into(),
        );
        let mut out = [0u8; teardown_hca_out::BYTES];
        self.exec(hal, &c, &mut out)
    }

    fn disable_hca(&mut self, hal: &H) -> Result<()> {
        self.simple(
            hal,
            opcode::DISABLE_HCA,
            0,
            disable_hca_in::BYTES,
            disable_hca_out::BYTES,
        )
        .map(|_| ())
    }
}

/// Brings the function up: returns the device state and what the verbs layer needs.
pub(crate) fn open<H: Hal>(hal: &H, cfg: &Config) -> Result<Opened<H>> {
    let bar = Bar(hal);
    // Start from a clean function where the platform can reset it: whatever a previous
    // driver (or a crashed run) left in the HCA is gone (Linux mlx5 probe after
    // pci_reset_function; rdma-core mlx5_vfio.c resets through VFIO_DEVICE_RESET).
    if cfg.reset_function {
        match hal.function_level_reset() {
            Ok(()) | Err(HalError::Unsupported) => {}
            Err(e) => return Err(Error::Hal(e)),
        }
    }
    // Registers before any command (Linux main.c
    // mlx5_function_enable, rdma-core mlx5_vfio_setup_function).
    let fw_rev = bar.read32(init_seg::FW_REV)?;
    let cmdif = bar.read32(init_seg::CMDIF_REV_FW_SUB)?;
    wait_initializing(hal, cfg.fw_init_timeout)?;
    let rev = (cmdif >> 16) as u16;
    if rev != mlx5_prm::cmdq::CMD_IF_REV {
        return Err(Error::CmdIfRev { found: rev });
    }
    let cmd = CmdQueue::new(hal, cfg.cmd)?;
    // Second wait after enabling the command queue (Linux FW_INIT).
    wait_initializing(hal, cfg.fw_init_timeout)?;
    let mut dev = Device {
        cmd,
        eq: None,
        pages: FwPages::new(),
        quarantine: Quarantine::new(),
        num_vhca_ports: 0,
    };
    match bring_up(hal, cfg, &mut dev) {
        Ok((caps, uar, eqn, tdn, mac)) => Ok(Opened {
            dev,
            caps,
            uar,
            eqn,
            tdn,
            mac,
            fw: (
                (fw_rev & 0xffff) as u16,
                (fw_rev >> 16) as u16,
                (cmdif & 0xffff) as u16,
            ),
        }),
        Err(e) => {
            // Undo what can be undone; a dead device keeps its pages (never freed under it).
            let _ = close_partial(hal, &mut dev);
            Err(e)
        }
    }
}

#[allow(clippy::type_complexity)]
fn bring_up<H: Hal>(
    hal: &H,
    cfg: &Config,
    dev: &mut Device<H>,
) -> Result<(Caps, Uar, u8, u32, [u8; 6])> {
    dev.enable_hca(hal)?;
    dev.set_issi(hal)?;
    dev.satisfy_pages(hal, pages::query::BOOT_PAGES)?;
    dev.set_host_endianness(hal)?;
    dev.negotiate_caps(hal)?;
    dev.satisfy_pages(hal, pages::query::INIT_PAGES)?;
    dev.init_hca(hal)?;
    dev.satisfy_pages(hal, pages::query::REGULAR_PAGES)?;
    let caps = dev.read_caps(hal)?;
    dev.num_vhca_ports = caps.num_vhca_ports;
    if cfg.enable_roce && caps.port_type == hca_cap::port_type::ETH {
        dev.set_roce_state(hal, true)?;
    }
    let uar = dev.alloc_uar(hal)?;
    let eq = dev.create_eq(hal, uar)?;
    let eqn = eq.eqn;
    dev.eq = Some(eq);
    let tdn = dev.alloc_td(hal)?;
    let mac = dev.query_mac(hal)?;
    if cfg.default_gid && caps.roce {
        dev.set_roce_address(hal, 0, link_local_gid(mac), mac)?;
    }
    let _ = cmd_hca_cap::BYTES;
    Ok((caps, uar, eqn, tdn, mac))
}

/// Tears down what `open` built, in reverse: EQ, TD, UAR, TEARDOWN_HCA, page reclaim,
/// DISABLE_HCA. Returns the first error but goes on with the rest.
pub(crate) fn close<H: Hal>(hal: &H, dev: &mut Device<H>, uar: Uar, tdn: u32) -> Result<()> {
    let mut first: Result<()> = Ok(());
    let mut note = |r: Result<()>| {
        if first.is_ok() {
            if let Err(e) = r {
                first = Err(e);
            }
        }
    };
    let _ = dev.service_events(hal, false);
    note(dev.dealloc_td(hal, tdn));
    if let Some(eq) = dev.eq.take() {
        let r = dev.destroy_eq(hal, eq.eqn);
        if r.is_err() {
            core::mem::forget(eq);
        }
        note(r);
    }
    note(dev.dealloc_uar(hal, uar.index));
    note(close_partial(hal, dev));
    first
}

fn close_partial<H: Hal>(hal: &H, dev: &mut Device<H>) -> Result<()> {
    if let Some(eq) = dev.eq.take() {
        let r = dev.destroy_eq(hal, eq.eqn);
        if r.is_err() {
            core::mem::forget(eq);
        }
    }
    let t = dev.teardown_hca(hal);
    let r = dev.reclaim_all_pages(hal);
    if r.is_err() || dev.cmd.fatal.is_some() {
        // Never free memory the device may still write.
        dev.pages.leak_all();
    }
    if t.is_ok() && r.is_ok() && dev.cmd.fatal.is_none() {
        // TEARDOWN_HCA destroyed every object and every page came back: the device holds
        // nothing of the quarantine any more.
        dev.quarantine.release();
        dev.pages.release_quarantine();
    } else {
        dev.quarantine.leak();
        dev.pages.leak_all();
    }
    let d = dev.disable_hca(hal);
    t.and(r).and(d)
}
