//! The NIC vport: its state (QUERY_VPORT_STATE), context (QUERY/MODIFY_NIC_VPORT_CONTEXT:
//! roce_en, mtu, permanent MAC, the unicast / multicast address lists and the promiscuous
//! modes of its receive address filter) and the RoCE address (GID) table
//! (QUERY/SET_ROCE_ADDRESS).
//!
//! The GID table starts empty: firmware does not invent GIDs. The driver programs every entry
//! (Linux lib/gid.c mlx5_core_roce_gid_set: source_l3_address = the GID, source MAC, roce_version
//! 0 = v1 / 2 = v2, roce_l3_type 0 = IPv4 / 1 = IPv6; the IB core derives the default GID from
//! the MAC and programs it like any other). An entry whose GID is all zero is unset (that is
//! how Linux deletes one). Layout: rdma-core mlx5_ifc.h `roce_addr_layout` (4204).

use crate::control::caps::Caps;
use crate::control::caps::ROCE_ADDRESS_TABLE_SIZE;
use crate::control::result::CmdResult;
use crate::control::result::{fail, get, put};
use crate::control::syndrome;
use crate::objects::Objects;
use crate::wire::Port;
use mlx5_prm::{
    cmd_hca_cap, cmd_status, linux_layout, mac_address_layout, modify_nic_vport_context_in,
    modify_nic_vport_field_select, nic_vport_context, nic_vport_list_type,
    query_nic_vport_context_in, query_nic_vport_context_out, query_roce_address_in,
    query_roce_address_out, query_vport_counter_in, query_vport_counter_out, query_vport_state_in,
    query_vport_state_out, roce_addr_layout, set_roce_address_in, Field,
};

/// `VPORT_STATE_UP` (Linux device.h:1135).
pub const VPORT_STATE_UP: u32 = 0x1;
/// `VPORT_STATE_DOWN` (Linux device.h:1134).
pub const VPORT_STATE_DOWN: u32 = 0x0;
/// `MLX5_VPORT_ADMIN_STATE_AUTO` (Linux device.h:1141).
pub const VPORT_ADMIN_STATE_AUTO: u32 = 0x2;
/// `MLX5_VPORT_STATE_OP_MOD_VNIC_VPORT` (Linux mlx5_ifc.h:5477).
pub const VPORT_STATE_OP_MOD_VNIC_VPORT: u16 = 0x0;
/// `MLX5_VPORT_STATE_OP_MOD_UPLINK` (Linux mlx5_ifc.h:5479).
pub const VPORT_STATE_OP_MOD_UPLINK: u16 = 0x2;
/// `MLX5_ROCE_VERSION_1` / `_2` (Linux device.h:409-410).
pub const ROCE_VERSION_1: u32 = 0;
/// RoCE v2.
pub const ROCE_VERSION_2: u32 = 2;
/// Hardware MTU of the vport at power-on: 1500 + Ethernet header, VLAN tag and FCS (Linux
/// MLX5E_SW2HW_MTU adds ETH_HLEN + VLAN_HLEN + ETH_FCS_LEN = 22).
pub const DEFAULT_HW_MTU: u32 = 1522;

/// One entry of the RoCE address table: the raw `roce_addr_layout`.
type RoceAddr = [u8; roce_addr_layout::BYTES];

/// The vport's receive address filter: the unicast and multicast address lists and the
/// promiscuous modes (MODIFY_NIC_VPORT_CONTEXT `field_select.addresses_list` / `.promisc`, as
/// Linux core/vport.c `mlx5_modify_nic_vport_mac_list` / `mlx5_modify_nic_vport_promisc` set
/// them for mlx5e, core/en_fs.c `mlx5e_vport_context_update`: the UC list starts with the
/// port's own address, the MC list with broadcast). An Ethernet frame reaches the vport's flow
/// tables only when its destination MAC is in the list of its kind or a promiscuous mode takes
/// it, as the e-switch forwards to a vport only the addresses of its lists (Linux eswitch.c
/// `esw_apply_vport_addr_list`, "Apply vport UC/MC list to HW l2 table and FDB table"; model
/// choice for this function, which has no e-switch: the same filter). Power-on: empty lists,
/// no promiscuous mode, so no Ethernet frame is received until the driver sets them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressFilter {
    /// Unicast addresses (`allowed_list_type` UC).
    pub uc: Vec<[u8; 6]>,
    /// Multicast addresses, broadcast included (`allowed_list_type` MC).
    pub mc: Vec<[u8; 6]>,
    /// `promisc_uc`: every unicast destination.
    pub promisc_uc: bool,
    /// `promisc_mc`: every multicast destination (mlx5e's allmulti).
    pub promisc_mc: bool,
    /// `promisc_all`: every frame.
    pub promisc_all: bool,
}

impl AddressFilter {
    /// Whether a frame to `dmac` passes.
    pub fn accepts(&self, dmac: &[u8; 6]) -> bool {
        if self.promisc_all {
            return true;
        }
        if dmac[0] & 1 != 0 {
            self.promisc_mc || self.mc.contains(dmac)
        } else {
            self.promisc_uc || self.uc.contains(dmac)
        }
    }
}

/// NIC vport state.
#[derive(Clone, Debug)]
pub struct Vport {
    roce_en: bool,
    mtu: u32,
    mac: [u8; 6],
    gids: Vec<Option<RoceAddr>>,
    filter: AddressFilter,
}

impl Vport {
    /// Power-on state with MAC `mac`.
    pub fn new(mac: [u8; 6]) -> Vport {
        Vport {
            roce_en: false,
            mtu: DEFAULT_HW_MTU,
            mac,
            gids: vec![None; ROCE_ADDRESS_TABLE_SIZE as usize],
            filter: AddressFilter::default(),
        }
    }

    /// The receive address filter.
    pub fn filter(&self) -> &AddressFilter {
        &self.filter
    }

    /// The receive address filter, to set directly (tests of what comes after it).
    #[cfg(test)]
    pub(crate) fn filter_mut(&mut self) -> &mut AddressFilter {
        &mut self.filter
    }

    /// The permanent MAC.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// `roce_en`.
    pub fn roce_en(&self) -> bool {
        self.roce_en
    }

    /// The hardware MTU.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The raw RoCE address entry `index`, if set.
    pub fn address(&self, index: u32) -> Option<RoceAddr> {
        *self.gids.get(index as usize)?
    }

    /// The GID (source_l3_address) of entry `index`, if set.
    pub fn gid(&self, index: u32) -> Option<[u8; 16]> {
        let a = self.address(index)?;
        let f = roce_addr_layout::SOURCE_L3_ADDRESS;
        a[f.byte_offset()..f.byte_offset() + 16].try_into().ok()
    }

    /// The IP addresses of the RoCE v2 entries: an IPv4-mapped GID is its IPv4 address (as
    /// Linux include/rdma/ib_addr.h `rdma_gid2ip` converts it; the frames to it are IPv4), any
    /// other GID an IPv6 address. The port drops RoCEv2 frames to anything else (wire.rs
    /// `Port::set_ips`).
    pub fn roce_v2_ips(&self) -> Vec<std::net::IpAddr> {
        (0..self.gids.len() as u32)
            .filter(|&i| {
                self.address(i)
                    .is_some_and(|a| get(&a, roce_addr_layout::ROCE_VERSION) == ROCE_VERSION_2)
            })
            .filter_map(|i| self.gid(i))
            .map(|g| {
                let a = std::net::Ipv6Addr::from(g);
                match a.to_ipv4_mapped() {
                    Some(v4) => v4.into(),
                    None => a.into(),
                }
            })
            .collect()
    }
}

/// other_vport / vport_number (bits 0x40 and 0x50 of the vport commands): only our own vport.
fn check_own_vport(input: &[u8]) -> CmdResult {
    if get(input, Field::new(0x40, 1)) != 0 || get(input, Field::new(0x50, 0x10)) != 0 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_OTHER);
    }
    Ok(())
}

/// QUERY_VPORT_STATE (0x750).
pub(crate) fn cmd_query_vport_state(
    _caps: &Caps,
    _objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let op_mod = get(input, query_vport_state_in::OP_MOD) as u16;
    if op_mod != VPORT_STATE_OP_MOD_VNIC_VPORT && op_mod != VPORT_STATE_OP_MOD_UPLINK {
        // The ESW op_mod needs an eswitch manager (not advertised).
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_STATE_OP_MOD);
    }
    check_own_vport(input)?;
    put(
        out,
        query_vport_state_out::ADMIN_STATE,
        VPORT_ADMIN_STATE_AUTO,
    );
    // The link is up once the HCA is initialized (the loopback/wire port never goes down on
    // its own).
    put(out, query_vport_state_out::STATE, VPORT_STATE_UP);
    Ok(())
}

/// QUERY_VPORT_COUNTER (0x770): the port's RoCE and Ethernet traffic classes, mapped from the
/// port counters as roce/counters.rs documents (`Counter::prm`: `received_ib_unicast` =
/// RoCE frames received, `transmitted_ib_unicast` = RoCE frames sent, the `*_eth_*` classes =
/// non-RoCE frames; Linux mlx5 en_stats.c names the ib classes "rx/tx_vport_rdma_*"). Counters
/// with no PRM class stay 0 here. `clear` zeroes the reported counters after reading them.
pub(crate) fn cmd_query_vport_counter(
    _caps: &Caps,
    _objects: &mut Objects,
    port: &mut Port,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    use crate::roce::counters::{Counter, PrmHome};
    check_own_vport(input)?;
    // Model choice: one physical port; port_num 0 (the function's) or 1.
    if get(input, query_vport_counter_in::PORT_NUM) > 1 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_COUNTER_SET);
    }
    let classes = [
        ("received_errors", query_vport_counter_out::RECEIVED_ERRORS),
        ("transmit_errors", query_vport_counter_out::TRANSMIT_ERRORS),
        (
            "received_ib_unicast",
            query_vport_counter_out::RECEIVED_IB_UNICAST,
        ),
        (
            "transmitted_ib_unicast",
            query_vport_counter_out::TRANSMITTED_IB_UNICAST,
        ),
        (
            "received_ib_multicast",
            query_vport_counter_out::RECEIVED_IB_MULTICAST,
        ),
        (
            "transmitted_ib_multicast",
            query_vport_counter_out::TRANSMITTED_IB_MULTICAST,
        ),
        (
            "received_eth_broadcast",
            query_vport_counter_out::RECEIVED_ETH_BROADCAST,
        ),
        (
            "transmitted_eth_broadcast",
            query_vport_counter_out::TRANSMITTED_ETH_BROADCAST,
        ),
        (
            "received_eth_unicast",
            query_vport_counter_out::RECEIVED_ETH_UNICAST,
        ),
        (
            "transmitted_eth_unicast",
            query_vport_counter_out::TRANSMITTED_ETH_UNICAST,
        ),
        (
            "received_eth_multicast",
            query_vport_counter_out::RECEIVED_ETH_MULTICAST,
        ),
        (
            "transmitted_eth_multicast",
            query_vport_counter_out::TRANSMITTED_ETH_MULTICAST,
        ),
    ];
    let pc = port.counters().clone();
    let clear = get(input, query_vport_counter_in::CLEAR) != 0;
    for c in Counter::ALL.iter().copied() {
        let PrmHome::Vport { class, field } = c.prm() else {
            continue;
        };
        let Some((_, f)) = classes.iter().find(|(n, _)| *n == class) else {
            continue;
        };
        // traffic_counter: packets at +0, octets at +8 (64-bit big-endian each).
        let at = f.byte_offset() + if field == "octets" { 8 } else { 0 };
        out[at..at + 8].copy_from_slice(&pc.get(c).to_be_bytes());
        if clear {
            pc.reset(c);
        }
    }
    Ok(())
}

/// QUERY_NIC_VPORT_CONTEXT (0x754).
pub(crate) fn cmd_query_nic_vport_context(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    check_own_vport(input)?;
    let at = query_nic_vport_context_out::NIC_VPORT_CONTEXT.byte_offset();
    let ctx = &mut out[at..at + nic_vport_context::BYTES];
    put(
        ctx,
        nic_vport_context::ROCE_EN,
        objects.vport.roce_en.into(),
    );
    put(ctx, linux_layout::nic_vport_context::MTU, objects.vport.mtu);
    let m = objects.vport.mac;
    put(
        ctx,
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_47_32,
        u32::from(u16::from_be_bytes([m[0], m[1]])),
    );
    put(
        ctx,
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_31_0,
        u32::from_be_bytes([m[2], m[3], m[4], m[5]]),
    );
    let f = &objects.vport.filter;
    put(ctx, nic_vport_context::PROMISC_UC, f.promisc_uc.into());
    put(ctx, nic_vport_context::PROMISC_MC, f.promisc_mc.into());
    put(ctx, nic_vport_context::PROMISC_ALL, f.promisc_all.into());
    // The address list the input asks for, after the context (Linux core/vport.c
    // `mlx5_query_nic_vport_mac_list`), as many entries as the output holds; allowed_list_size
    // says how many are there.
    // The VLAN list is always empty (MODIFY refuses to set one).
    let ty = get(input, query_nic_vport_context_in::ALLOWED_LIST_TYPE) as u8;
    let list: &[[u8; 6]] = match ty {
        nic_vport_list_type::UC => &f.uc,
        nic_vport_list_type::MC => &f.mc,
        nic_vport_list_type::VLAN => &[],
        _ => return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_QUERY_LIST_TYPE),
    };
    let first = at + nic_vport_context::CURRENT_UC_MAC_ADDRESS.byte_offset();
    let room = out.len().saturating_sub(first) / mac_address_layout::BYTES;
    let n = list.len().min(room);
    for (i, mac) in list[..n].iter().enumerate() {
        // The 6 bytes in wire order at byte 2 of the entry (core/vport.c copies `+ 2`).
        let e = first + i * mac_address_layout::BYTES + 2;
        out[e..e + 6].copy_from_slice(mac);
    }
    let ctx = &mut out[at..at + nic_vport_context::BYTES];
    put(ctx, nic_vport_context::ALLOWED_LIST_TYPE, ty.into());
    put(ctx, nic_vport_context::ALLOWED_LIST_SIZE, n as u32);
    Ok(())
}

/// MODIFY_NIC_VPORT_CONTEXT (0x755): `field_select.roce_en`, `.mtu`, `.addresses_list`
/// (the unicast or multicast list, Linux core/vport.c `mlx5_modify_nic_vport_mac_list`) and
/// `.promisc` (`mlx5_modify_nic_vport_promisc`) are honoured; every other selector names a
/// feature this vport does not have (VLAN lists, GUIDs, the permanent address of another
/// function, ...) and is refused. Checked before anything changes, so a refused command
/// changes nothing.
pub(crate) fn cmd_modify_nic_vport_context(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    check_own_vport(input)?;
    let fs_at = modify_nic_vport_context_in::FIELD_SELECT.byte_offset();
    let fs = &input[fs_at..fs_at + 4];
    let supported = [
        modify_nic_vport_field_select::ROCE_EN,
        modify_nic_vport_field_select::MTU,
        modify_nic_vport_field_select::ADDRESSES_LIST,
        modify_nic_vport_field_select::PROMISC,
    ];
    let mut mask = [0u8; 4];
    for f in supported {
        put(&mut mask, f, 1);
    }
    if fs.iter().zip(mask).any(|(b, m)| b & !m != 0) {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_FIELD_SELECT);
    }
    let ctx_at = modify_nic_vport_context_in::NIC_VPORT_CONTEXT.byte_offset();
    let ctx = &input[ctx_at..ctx_at + nic_vport_context::BYTES];
    let mtu = get(ctx, linux_layout::nic_vport_context::MTU);
    if get(fs, modify_nic_vport_field_select::MTU) != 0 && mtu == 0 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_MTU);
    }
    let list = if get(fs, modify_nic_vport_field_select::ADDRESSES_LIST) != 0 {
        Some(address_list(caps, input)?)
    } else {
        None
    };
    let v = &mut objects.vport;
    if get(fs, modify_nic_vport_field_select::MTU) != 0 {
        v.mtu = mtu;
    }
    if get(fs, modify_nic_vport_field_select::ROCE_EN) != 0 {
        v.roce_en = get(ctx, nic_vport_context::ROCE_EN) != 0;
    }
    match list {
        Some((nic_vport_list_type::UC, l)) => v.filter.uc = l,
        Some((_, l)) => v.filter.mc = l,
        None => {}
    }
    if get(fs, modify_nic_vport_field_select::PROMISC) != 0 {
        v.filter.promisc_uc = get(ctx, nic_vport_context::PROMISC_UC) != 0;
        v.filter.promisc_mc = get(ctx, nic_vport_context::PROMISC_MC) != 0;
        v.filter.promisc_all = get(ctx, nic_vport_context::PROMISC_ALL) != 0;
    }
    Ok(())
}

/// The address list of a MODIFY_NIC_VPORT_CONTEXT with `field_select.addresses_list`: its
/// type (UC or MC; a VLAN list is not modelled) and its addresses, at most
/// `1 << log_max_current_uc_list` / `log_max_current_mc_list` (Linux core/vport.c
/// `mlx5_modify_nic_vport_mac_list` checks the same), each after the fixed input as a
/// `mac_address_layout` (the address at its byte 2). Model choice: a group address in the
/// unicast list or a unicast one in the multicast list is refused.
fn address_list(
    caps: &Caps,
    input: &[u8],
) -> Result<(u8, Vec<[u8; 6]>), crate::control::result::CmdError> {
    use crate::control::result::bad_param;
    let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
    let ty = get(input, nic_vport_context::ALLOWED_LIST_TYPE.within(ctx)) as u8;
    let log_max = match ty {
        nic_vport_list_type::UC => caps.general(cmd_hca_cap::LOG_MAX_CURRENT_UC_LIST),
        nic_vport_list_type::MC => caps.general(cmd_hca_cap::LOG_MAX_CURRENT_MC_LIST),
        _ => return Err(bad_param(syndrome::VPORT_LIST_TYPE)),
    };
    let n = get(input, nic_vport_context::ALLOWED_LIST_SIZE.within(ctx)) as usize;
    if n > 1 << log_max {
        return Err(bad_param(syndrome::VPORT_LIST_SIZE));
    }
    let first = ctx.byte_offset() + nic_vport_context::CURRENT_UC_MAC_ADDRESS.byte_offset();
    let each = mac_address_layout::BYTES;
    let Some(raw) = input.get(first..first + n * each) else {
        return Err(crate::control::result::err(
            cmd_status::BAD_INP_LEN_ERR,
            syndrome::VPORT_LIST_INLEN,
        ));
    };
    let mut list = Vec::with_capacity(n);
    for e in raw.chunks_exact(each) {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&e[2..8]);
        let group = mac[0] & 1 != 0;
        if group != (ty == nic_vport_list_type::MC) {
            return Err(bad_param(syndrome::VPORT_LIST_ADDRESS));
        }
        list.push(mac);
    }
    Ok((ty, list))
}

fn gid_index(
    caps: &Caps,
    objects: &Objects,
    input: &[u8],
    index: Field,
    port: Field,
) -> Result<usize, crate::control::result::CmdError> {
    let idx = get(input, index);
    if idx as usize >= objects.vport.gids.len() {
        return Err(crate::control::result::CmdError::new(
            cmd_status::IX_ERR,
            syndrome::GID_INDEX,
        ));
    }
    // vhca_port_num: 0, or port 1 (one port) on a device with vHCA ports. While the device
    // advertises num_vhca_ports = 0 a non-zero port is refused (Linux core/lib/gid.c sets the
    // field only when num_vhca_ports > 0; model choice: firmware strictness assumed).
    let p = get(input, port);
    let vhca_ports = caps.general(mlx5_prm::cmd_hca_cap::NUM_VHCA_PORTS);
    if (vhca_ports == 0 && p != 0) || p > 1 {
        return Err(crate::control::result::CmdError::new(
            cmd_status::BAD_PARAM_ERR,
            syndrome::GID_PORT,
        ));
    }
    Ok(idx as usize)
}

/// QUERY_ROCE_ADDRESS (0x760).
pub(crate) fn cmd_query_roce_address(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let idx = gid_index(
        caps,
        objects,
        input,
        query_roce_address_in::ROCE_ADDRESS_INDEX,
        query_roce_address_in::VHCA_PORT_NUM,
    )?;
    if let Some(a) = objects.vport.gids[idx] {
        let at = query_roce_address_out::ROCE_ADDRESS.byte_offset();
        out[at..at + a.len()].copy_from_slice(&a);
    }
    Ok(())
}

/// SET_ROCE_ADDRESS (0x761).
pub(crate) fn cmd_set_roce_address(
    caps: &Caps,
    objects: &mut Objects,
    port: &mut Port,
    input: &[u8],
    _out: &mut [u8],
) -> CmdResult {
    let idx = gid_index(
        caps,
        objects,
        input,
        set_roce_address_in::ROCE_ADDRESS_INDEX,
        set_roce_address_in::VHCA_PORT_NUM,
    )?;
    let at = set_roce_address_in::ROCE_ADDRESS.byte_offset();
    let mut a: RoceAddr = [0; roce_addr_layout::BYTES];
    a.copy_from_slice(&input[at..at + roce_addr_layout::BYTES]);
    let version = get(&a, roce_addr_layout::ROCE_VERSION);
    let l3 = get(&a, roce_addr_layout::ROCE_L3_TYPE);
    if (version != ROCE_VERSION_1 && version != ROCE_VERSION_2) || l3 > 1 {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::GID_TYPE);
    }
    let f = roce_addr_layout::SOURCE_L3_ADDRESS;
    let gid_set = a[f.byte_offset()..f.byte_offset() + 16]
        .iter()
        .any(|&b| b != 0);
    objects.vport.gids[idx] = gid_set.then_some(a);
    // The port's destination filter follows the GID table.
    let ips = objects.vport.roce_v2_ips();
    port.set_ips(ips);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::result::CmdError;
    use mlx5_prm::query_nic_vport_context_in;

    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

    /// MODIFY_NIC_VPORT_CONTEXT with an address list, as Linux core/vport.c
    /// `mlx5_modify_nic_vport_mac_list` builds it.
    fn list_input(ty: u8, macs: &[[u8; 6]]) -> Vec<u8> {
        let mut i = vec![0u8; modify_nic_vport_context_in::BYTES + macs.len() * 8];
        let fs = modify_nic_vport_context_in::FIELD_SELECT;
        put(
            &mut i,
            modify_nic_vport_field_select::ADDRESSES_LIST.within(fs),
            1,
        );
        let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
        put(
            &mut i,
            nic_vport_context::ALLOWED_LIST_TYPE.within(ctx),
            ty.into(),
        );
        put(
            &mut i,
            nic_vport_context::ALLOWED_LIST_SIZE.within(ctx),
            macs.len() as u32,
        );
        let first = ctx.byte_offset() + nic_vport_context::CURRENT_UC_MAC_ADDRESS.byte_offset();
        for (k, m) in macs.iter().enumerate() {
            i[first + k * 8 + 2..first + k * 8 + 8].copy_from_slice(m);
        }
        i
    }

    /// MODIFY_NIC_VPORT_CONTEXT of the promiscuous modes (`mlx5_modify_nic_vport_promisc`).
    fn promisc_input(uc: bool, mc: bool, all: bool) -> Vec<u8> {
        let mut i = vec![0u8; modify_nic_vport_context_in::BYTES];
        let fs = modify_nic_vport_context_in::FIELD_SELECT;
        put(&mut i, modify_nic_vport_field_select::PROMISC.within(fs), 1);
        let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
        put(&mut i, nic_vport_context::PROMISC_UC.within(ctx), uc.into());
        put(&mut i, nic_vport_context::PROMISC_MC.within(ctx), mc.into());
        put(
            &mut i,
            nic_vport_context::PROMISC_ALL.within(ctx),
            all.into(),
        );
        i
    }

    fn modify(objects: &mut Objects, input: &[u8]) -> Result<(), CmdError> {
        cmd_modify_nic_vport_context(&Caps::connectx5(), objects, input, &mut [0; 16])
    }

    fn query(objects: &mut Objects, ty: u8, entries: usize) -> Result<Vec<u8>, CmdError> {
        let mut i = vec![0u8; query_nic_vport_context_in::BYTES];
        put(
            &mut i,
            query_nic_vport_context_in::ALLOWED_LIST_TYPE,
            ty.into(),
        );
        let mut out = vec![0u8; query_nic_vport_context_out::BYTES + entries * 8];
        cmd_query_nic_vport_context(&Caps::connectx5(), objects, &i, &mut out)?;
        Ok(out)
    }

    /// The address list in a query's output.
    fn listed(out: &[u8]) -> Vec<[u8; 6]> {
        let ctx = query_nic_vport_context_out::NIC_VPORT_CONTEXT;
        let n = get(out, nic_vport_context::ALLOWED_LIST_SIZE.within(ctx)) as usize;
        let first = ctx.byte_offset() + nic_vport_context::CURRENT_UC_MAC_ADDRESS.byte_offset();
        (0..n)
            .map(|k| {
                out[first + k * 8 + 2..first + k * 8 + 8]
                    .try_into()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn address_lists_and_promiscuous_modes_as_mlx5e_sets_them() {
        let mut o = Objects::new(MAC);
        let mc = [[0xff; 6], [0x33, 0x33, 0, 0, 0, 1]];
        assert!(!o.vport.filter().accepts(&MAC), "power-on: nothing");
        modify(&mut o, &list_input(nic_vport_list_type::UC, &[MAC])).unwrap();
        modify(&mut o, &list_input(nic_vport_list_type::MC, &mc)).unwrap();
        let f = o.vport.filter().clone();
        assert!(f.accepts(&MAC) && f.accepts(&[0xff; 6]) && f.accepts(&mc[1]));
        assert!(!f.accepts(&[0x02, 0, 0, 0, 0, 0x0c]) && !f.accepts(&[0x01, 0, 0x5e, 0, 0, 1]));
        // Queried back, each list as asked for, as much as the output holds.
        assert_eq!(
            listed(&query(&mut o, nic_vport_list_type::UC, 4).unwrap()),
            vec![MAC]
        );
        assert_eq!(
            listed(&query(&mut o, nic_vport_list_type::MC, 4).unwrap()),
            mc.to_vec()
        );
        assert_eq!(
            listed(&query(&mut o, nic_vport_list_type::MC, 1).unwrap()),
            mc[..1].to_vec()
        );
        assert!(listed(&query(&mut o, nic_vport_list_type::MC, 0).unwrap()).is_empty());
        // Promiscuous modes, one at a time; the lists stay.
        modify(&mut o, &promisc_input(false, true, false)).unwrap();
        assert!(o.vport.filter().accepts(&[0x01, 0, 0x5e, 0, 0, 1]));
        assert!(!o.vport.filter().accepts(&[0x02, 0, 0, 0, 0, 0x0c]));
        modify(&mut o, &promisc_input(true, false, false)).unwrap();
        assert!(o.vport.filter().accepts(&[0x02, 0, 0, 0, 0, 0x0c]));
        assert!(!o.vport.filter().accepts(&[0x01, 0, 0x5e, 0, 0, 1]));
        modify(&mut o, &promisc_input(false, false, true)).unwrap();
        assert!(o.vport.filter().accepts(&[0x01, 0, 0x5e, 0, 0, 1]));
        let out = query(&mut o, nic_vport_list_type::UC, 0).unwrap();
        let ctx = query_nic_vport_context_out::NIC_VPORT_CONTEXT;
        assert_eq!(get(&out, nic_vport_context::PROMISC_ALL.within(ctx)), 1);
        assert_eq!(get(&out, nic_vport_context::PROMISC_UC.within(ctx)), 0);
        modify(&mut o, &promisc_input(false, false, false)).unwrap();
        assert_eq!(o.vport.filter().uc, vec![MAC]);
        // An empty list empties it.
        modify(&mut o, &list_input(nic_vport_list_type::UC, &[])).unwrap();
        assert!(!o.vport.filter().accepts(&MAC));
    }

    #[test]
    fn address_lists_refused_as_they_must_be() {
        let mut o = Objects::new(MAC);
        let err = |o: &mut Objects, i: &[u8]| modify(o, i).unwrap_err();
        let bad = |s| CmdError::new(cmd_status::BAD_PARAM_ERR, s);
        // A VLAN list is not modelled; 4 and up are no list type at all.
        assert_eq!(
            err(&mut o, &list_input(nic_vport_list_type::VLAN, &[])),
            bad(syndrome::VPORT_LIST_TYPE)
        );
        assert_eq!(
            err(&mut o, &list_input(4, &[])),
            bad(syndrome::VPORT_LIST_TYPE)
        );
        // More than 1 << log_max_current_uc_list addresses.
        let many: Vec<[u8; 6]> = (0..=(1u32 << crate::control::caps::LOG_MAX_CURRENT_ADDRESS_LIST))
            .map(|k| [2, 0, 0, 0, (k >> 8) as u8, k as u8])
            .collect();
        assert_eq!(
            err(&mut o, &list_input(nic_vport_list_type::UC, &many)),
            bad(syndrome::VPORT_LIST_SIZE)
        );
        modify(&mut o, &list_input(nic_vport_list_type::UC, &many[1..])).unwrap();
        // A list longer than the input.
        let mut short = list_input(nic_vport_list_type::UC, &[MAC, MAC]);
        short.truncate(short.len() - 8);
        assert_eq!(
            err(&mut o, &short),
            CmdError::new(cmd_status::BAD_INP_LEN_ERR, syndrome::VPORT_LIST_INLEN)
        );
        // Group addresses in the UC list, unicast ones in the MC list.
        assert_eq!(
            err(&mut o, &list_input(nic_vport_list_type::UC, &[[0xff; 6]])),
            bad(syndrome::VPORT_LIST_ADDRESS)
        );
        assert_eq!(
            err(&mut o, &list_input(nic_vport_list_type::MC, &[MAC])),
            bad(syndrome::VPORT_LIST_ADDRESS)
        );
        // A refused command changed nothing.
        assert_eq!(
            o.vport.filter().uc.len(),
            1 << crate::control::caps::LOG_MAX_CURRENT_ADDRESS_LIST
        );
        assert!(o.vport.filter().mc.is_empty());
        // Other selectors (GUIDs) are still refused; a query of the VLAN list too.
        let mut i = vec![0u8; modify_nic_vport_context_in::BYTES];
        put(
            &mut i,
            modify_nic_vport_field_select::NODE_GUID
                .within(modify_nic_vport_context_in::FIELD_SELECT),
            1,
        );
        assert_eq!(err(&mut o, &i), bad(syndrome::VPORT_FIELD_SELECT));
        assert!(listed(&query(&mut o, nic_vport_list_type::VLAN, 4).unwrap()).is_empty());
        assert_eq!(
            query(&mut o, 3, 0).unwrap_err(),
            bad(syndrome::VPORT_QUERY_LIST_TYPE)
        );
    }
}
