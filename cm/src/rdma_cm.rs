//! What rdma_cm adds on top of the IB CM: its private-data header, the service ID rule and,
//! for RoCE, the flow label of a connection (the driver folds it into the UDP source port:
//! `mlx5::ah::flow_label_to_udp_sport`).

/// Bytes of the rdma_cm header at the start of a REQ's or SIDR_REQ's private data (Linux
/// `drivers/infiniband/core/cma.c` `struct cma_hdr`).
pub const CMA_HDR_LEN: usize = 36;
/// The only header version (cma.c `CMA_VERSION`).
pub const CMA_VERSION: u8 = 0;
/// The Q_Key rdma_cm gives UD QPs of `RDMA_PS_UDP` (Linux `include/rdma/rdma_cm_ib.h`
/// `RDMA_UDP_QKEY`, set by cma.c `cma_set_qkey`; rdma-core `librdmacm/rdma_cma.h`);
/// a SIDR_REP tells it to the peer.
pub const UDP_QKEY: u32 = 0x0123_4567;
/// How long rdma_cm's CM waits for an answer, and tells the peer it may wait for ours
/// (4.096 µs × 2^20 ≈ 4.3 s): cma.c `CMA_CM_RESPONSE_TIMEOUT` as Linux 6.1 has it (its REQs
/// carry it in both CM Response Timeout fields; later trees, e.g. MLNX OFED 24.07's, use 22).
pub const CM_RESPONSE_TIMEOUT: u8 = 20;
/// How many times rdma_cm's CM sends a REQ, REP, DREQ or SIDR_REQ again (cma.c
/// `CMA_MAX_CM_RETRIES`).
pub const MAX_CM_RETRIES: u8 = 15;
/// Bits of a GRH flow label (`include/rdma/ib_verbs.h` `IB_GRH_FLOWLABEL_MASK`).
pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

/// rdma_cm port spaces (rdma-core `librdmacm/rdma_cma.h` `enum rdma_port_space`; Linux
/// `include/uapi/rdma/rdma_user_cm.h` `enum rdma_ucm_port_space`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum PortSpace {
    /// `RDMA_PS_IPOIB`.
    Ipoib = 0x0002,
    /// `RDMA_PS_TCP`: RC connections (rping, perftest `-R`, NVMe-oF).
    Tcp = 0x0106,
    /// `RDMA_PS_UDP`: UD services resolved with SIDR (udaddy).
    Udp = 0x0111,
    /// `RDMA_PS_IB`.
    Ib = 0x013f,
}

/// The QP type of an rdma_cm ID, as far as the CM tells them apart: a connected RC QP (REQ)
/// or a UD QP resolved with SIDR (Linux `enum ib_qp_type`; rdma-core `librdmacm/cma.c`
/// `rdma_create_id2` keeps it in the ID, cma.c `cma_check_req_qp_type` checks a request
/// against it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// `IB_QPT_RC`: REQ, REP, RTU.
    Rc,
    /// `IB_QPT_UD`: SIDR_REQ, SIDR_REP.
    Ud,
}

/// Mask of the port space part of an IP-based service ID (cma.c `RDMA_IB_IP_PS_MASK`).
const PS_MASK: u64 = 0xffff_ffff_ffff_0000;

impl PortSpace {
    /// The service ID of `port` in this space: `ps << 16 | port` (cma.c
    /// `rdma_get_service_id`).
    pub const fn service_id(self, port: u16) -> u64 {
        ((self as u64) << 16) | port as u64
    }

    /// The QP type `rdma_create_id` gives an ID of this port space: UD for
    /// [`PortSpace::Udp`] and [`PortSpace::Ipoib`], RC for the others (rdma-core
    /// `librdmacm/cma.c` `rdma_create_id`).
    pub const fn qp_type(self) -> QpType {
        match self {
            PortSpace::Udp | PortSpace::Ipoib => QpType::Ud,
            PortSpace::Tcp | PortSpace::Ib => QpType::Rc,
        }
    }

    /// The port space and port of an IP-based service ID (cma.c `RDMA_IB_IP_PS_TCP` ...
    /// `RDMA_IB_IP_PS_IB`, `cma_get_port_space`, `cma_port_from_service_id`); `None` for any
    /// other service ID.
    pub fn from_service_id(sid: u64) -> Option<(PortSpace, u16)> {
        let ps = match (sid & PS_MASK) >> 16 {
            0x0002 => PortSpace::Ipoib,
            0x0106 => PortSpace::Tcp,
            0x0111 => PortSpace::Udp,
            0x013f => PortSpace::Ib,
            _ => return None,
        };
        Some((ps, sid as u16))
    }
}

/// An address in the rdma_cm header (cma.c `union cma_ip_addr`: IPv6 in all 16 bytes, IPv4
/// in the last 4 after 12 zero bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmaAddr {
    /// IPv4 (`ip_version` 4).
    V4([u8; 4]),
    /// IPv6 (`ip_version` 6).
    V6([u8; 16]),
}

/// Why private data does not start with an rdma_cm header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaError {
    /// Fewer than [`CMA_HDR_LEN`] bytes.
    Short(usize),
    /// `cma_version` other than [`CMA_VERSION`] (cma.c `cma_check_req_qp_type` /
    /// `cma_save_ip_info` refuse it).
    Version(u8),
    /// An IP version other than 4 or 6 in the top nibble of `ip_version`.
    IpVersion(u8),
}

/// The rdma_cm header (cma.c `struct cma_hdr`, filled by `cma_format_hdr`): first in the
/// private data of a REQ or SIDR_REQ, and how the passive side learns the active side's IP
/// addresses and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    /// The active side's source port (`port`, big-endian at byte 2).
    pub src_port: u16,
    /// The active side's address (`src_addr`, bytes 4-19).
    pub src: CmaAddr,
    /// The passive side's address (`dst_addr`, bytes 20-35).
    pub dst: CmaAddr,
}

fn addr_bytes(a: CmaAddr) -> [u8; 16] {
    match a {
        CmaAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[12..].copy_from_slice(&v4);
            b
        }
        CmaAddr::V6(v6) => v6,
    }
}

impl CmaHdr {
    /// Reads the header at the start of `pd`.
    pub fn decode(pd: &[u8]) -> Result<CmaHdr, CmaError> {
        let h: &[u8; CMA_HDR_LEN] = pd
            .get(..CMA_HDR_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(CmaError::Short(pd.len()))?;
        if h[0] != CMA_VERSION {
            return Err(CmaError::Version(h[0]));
        }
        let addr = |at: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&h[at..at + 16]);
            b
        };
        let (src, dst) = match h[1] >> 4 {
            4 => {
                let v4 = |b: [u8; 16]| CmaAddr::V4([b[12], b[13], b[14], b[15]]);
                (v4(addr(4)), v4(addr(20)))
            }
            6 => (CmaAddr::V6(addr(4)), CmaAddr::V6(addr(20))),
            v => return Err(CmaError::IpVersion(v)),
        };
        Ok(CmaHdr {
            src_port: u16::from_be_bytes([h[2], h[3]]),
            src,
            dst,
        })
    }

    /// Writes the header into the first [`CMA_HDR_LEN`] bytes of `out` (cma.c
    /// `cma_format_hdr`: version 0, IP version in the top nibble, source port, both
    /// addresses); the IP version follows `src`.
    pub fn encode(&self, out: &mut [u8; CMA_HDR_LEN]) {
        out[0] = CMA_VERSION;
        out[1] = match self.src {
            CmaAddr::V4(_) => 4 << 4,
            CmaAddr::V6(_) => 6 << 4,
        };
        out[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        out[4..20].copy_from_slice(&addr_bytes(self.src));
        out[20..36].copy_from_slice(&addr_bytes(self.dst));
    }
}

/// The flow label rdma_cm gives a RoCE connection without an IPv6 flow label of its own:
/// `(src_port * 31 + dst_port) & 0xfffff` over the rdma_cm ports (cma.c
/// `cma_get_roce_udp_flow_label`). The active side sends it in the REQ's primary path.
pub const fn roce_flow_label(src_port: u16, dst_port: u16) -> u32 {
    (src_port as u32 * 31 + dst_port as u32) & FLOW_LABEL_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_of_the_captures() {
        // NVMe-oF on 4420 and perftest on 18515 (RDMA_PS_TCP).
        assert_eq!(PortSpace::Tcp.service_id(4420), 0x0000_0000_0106_1144);
        assert_eq!(PortSpace::Tcp.service_id(18515), 0x0000_0000_0106_4853);
        assert_eq!(PortSpace::Udp.service_id(7174), 0x0000_0000_0111_1c06);
        assert_eq!(
            PortSpace::from_service_id(0x0106_1144),
            Some((PortSpace::Tcp, 4420))
        );
        assert_eq!(
            PortSpace::from_service_id(0x0111_0001),
            Some((PortSpace::Udp, 1))
        );
        assert_eq!(PortSpace::from_service_id(0x1_0106_1144), None);
        assert_eq!(PortSpace::from_service_id(0x0107_0000), None);
    }

    #[test]
    fn flow_labels_of_the_nvme_connections() {
        // (rdma_cm source port, flow label) of the three NVMe-oF connections to port 4420 in
        // the shared capture (their UDP source ports: mlx5 `ah.rs`'s test of the fold).
        for (port, fl) in [(49743u16, 0x798d5u32), (40342, 0x3266e), (38836, 0x27010)] {
            assert_eq!(roce_flow_label(port, 4420), fl);
        }
    }

    #[test]
    fn cma_hdr_ipv4_round_trip() {
        let h = CmaHdr {
            src_port: 49743,
            src: CmaAddr::V4([10, 0, 0, 2]),
            dst: CmaAddr::V4([10, 0, 0, 1]),
        };
        let mut b = [0u8; CMA_HDR_LEN];
        h.encode(&mut b);
        assert_eq!(&b[..4], &[0x00, 0x40, 0xc2, 0x4f]);
        assert_eq!(&b[16..20], &[10, 0, 0, 2]);
        assert_eq!(&b[32..36], &[10, 0, 0, 1]);
        assert!(b[4..16].iter().chain(&b[20..32]).all(|&x| x == 0));
        assert_eq!(CmaHdr::decode(&b), Ok(h));
    }

    #[test]
    fn cma_hdr_refusals() {
        let mut b = [0u8; CMA_HDR_LEN];
        assert_eq!(CmaHdr::decode(&b[..35]), Err(CmaError::Short(35)));
        assert_eq!(CmaHdr::decode(&b), Err(CmaError::IpVersion(0)));
        b[1] = 0x60;
        assert!(matches!(
            CmaHdr::decode(&b),
            Ok(CmaHdr {
                src: CmaAddr::V6(_),
                ..
            })
        ));
        b[0] = 1;
        assert_eq!(CmaHdr::decode(&b), Err(CmaError::Version(1)));
    }
}
