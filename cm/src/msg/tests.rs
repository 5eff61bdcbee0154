//! Messages built from the values IBTA vol. 1 chapter 12 and Linux's CM put in them, checked
//! byte by byte at the offsets of `include/rdma/ibta_vol1_c12.h`, and the refusals.

use super::*;
use crate::mad::MAD_HDR_LEN;
use crate::rdma_cm::{CmaAddr, CmaHdr, PortSpace, CMA_HDR_LEN};

/// Byte `i` of the CM message data.
fn at(m: &[u8; MAD_LEN], i: usize) -> u8 {
    m[MAD_HDR_LEN + i]
}

fn gid_v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// A REQ as Linux's rdma_cm sends one for an RC connection over RoCE (cma.c
/// `cma_connect_ib`, cm.c `cm_format_req`): LIDs 0xffff, hop limit 64, CM response timeouts
/// 20 (cma.c `CMA_CM_RESPONSE_TIMEOUT`), 15 CM retries (`CMA_MAX_CM_RETRIES`).
pub(crate) fn linux_req() -> Req {
    let mut pd = [0u8; CMA_HDR_LEN];
    CmaHdr {
        src_port: 49743,
        src: CmaAddr::V4([10, 0, 0, 2]),
        dst: CmaAddr::V4([10, 0, 0, 1]),
    }
    .encode(&mut pd);
    let path = ReqPath {
        local_lid: 0xffff,
        remote_lid: 0xffff,
        local_gid: gid_v4([10, 0, 0, 2]),
        remote_gid: gid_v4([10, 0, 0, 1]),
        flow_label: 0x798d5,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 64,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 19,
    };
    Req {
        local_comm_id: 0x9c24_9cef,
        vendor_id: 0,
        service_id: PortSpace::Tcp.service_id(4420),
        local_ca_guid: 0x0000_00ff_fe00_0002,
        local_qkey: 0,
        local_qpn: 0x11,
        responder_resources: 128,
        local_eecn: 0,
        initiator_depth: 0,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: transport::RC,
        end_to_end_flow_control: true,
        starting_psn: 0x31_a2d2,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary: path,
        alternate: ReqPath::default(),
        sap_supported: false,
        private_data: private_data(&pd).unwrap(),
    }
}

#[test]
fn req_fields_sit_at_their_offsets() {
    let req = linux_req();
    let m = CmMad::new(0x2_ef9c_249c, CmMsg::Req(req))
        .to_bytes()
        .unwrap();
    assert_eq!(&m[..4], &[1, 0x07, 2, 0x03]);
    assert_eq!(&m[16..18], &[0x00, 0x10]);
    assert_eq!(&m[MAD_HDR_LEN..MAD_HDR_LEN + 4], &[0x9c, 0x24, 0x9c, 0xef]);
    assert_eq!(
        &m[MAD_HDR_LEN + 8..MAD_HDR_LEN + 16],
        &[0, 0, 0, 0, 0x01, 0x06, 0x11, 0x44]
    );
    assert_eq!(&m[MAD_HDR_LEN + 32..MAD_HDR_LEN + 36], &[0, 0, 0x11, 128]);
    // Byte 43: response timeout 20 (5 bits), RC (2 bits), flow control 1.
    assert_eq!(at(&m, 43), (20 << 3) | 1);
    assert_eq!(&m[MAD_HDR_LEN + 44..MAD_HDR_LEN + 47], &[0x31, 0xa2, 0xd2]);
    // Byte 47: local response timeout 20, retry count 7.
    assert_eq!(at(&m, 47), (20 << 3) | 7);
    assert_eq!(&m[MAD_HDR_LEN + 48..MAD_HDR_LEN + 50], &[0xff, 0xff]);
    // Byte 50: MTU 3 (4 bits), RDC 0, RNR retry 7; byte 51: 15 CM retries, SRQ 0, ext 0.
    assert_eq!(at(&m, 50), (3 << 4) | 7);
    assert_eq!(at(&m, 51), 15 << 4);
    assert_eq!(&m[MAD_HDR_LEN + 52..MAD_HDR_LEN + 56], &[0xff; 4]);
    assert_eq!(&m[MAD_HDR_LEN + 68..MAD_HDR_LEN + 72], &[10, 0, 0, 2]);
    assert_eq!(&m[MAD_HDR_LEN + 84..MAD_HDR_LEN + 88], &[10, 0, 0, 1]);
    // Flow label 0x798d5 in the top 20 bits of the word at 88.
    assert_eq!(
        &m[MAD_HDR_LEN + 88..MAD_HDR_LEN + 92],
        &[0x79, 0x8d, 0x50, 0x00]
    );
    assert_eq!(at(&m, 93), 64);
    assert_eq!(at(&m, 95), 19 << 3);
    assert!(m[MAD_HDR_LEN + 96..MAD_HDR_LEN + 140]
        .iter()
        .all(|&b| b == 0));
    assert_eq!(
        &m[MAD_HDR_LEN + 140..MAD_HDR_LEN + 144],
        &[0x00, 0x40, 0xc2, 0x4f]
    );
    let back = CmMad::decode(&m).unwrap();
    assert_eq!(back.msg, CmMsg::Req(req));
    assert_eq!(back.hdr.tid, 0x2_ef9c_249c);
}

#[test]
fn alternate_path_is_the_primary_layout_44_bytes_on_and_vendor_id() {
    let mut req = linux_req();
    req.alternate = req.primary;
    req.alternate.local_ack_timeout = 31;
    req.sap_supported = true;
    req.vendor_id = 0x02_c9_01;
    let m = CmMad::new(1, CmMsg::Req(req)).to_bytes().unwrap();
    // CM_REQ_VENDOR_ID: the 24 bits after the byte at 4.
    assert_eq!(&m[MAD_HDR_LEN + 4..MAD_HDR_LEN + 8], &[0, 0x02, 0xc9, 0x01]);
    assert_eq!(&m[MAD_HDR_LEN + 96..MAD_HDR_LEN + 100], &[0xff; 4]);
    assert_eq!(at(&m, 137), 64);
    // Byte 139: alternate ACK timeout 31 (5 bits), SAP supported (bit 5).
    assert_eq!(at(&m, 139), (31 << 3) | 0b100);
    assert_eq!(CmMad::decode(&m).unwrap().msg, CmMsg::Req(req));
}

#[test]
fn rep_fields_sit_at_their_offsets() {
    let rep = Rep {
        local_comm_id: 0x1122_3344,
        remote_comm_id: 0x9c24_9cef,
        local_qkey: 0,
        local_qpn: 0x12,
        local_eecn: 0,
        starting_psn: 0xb4_1920,
        vendor_id: 0x02_c9_01,
        responder_resources: 0,
        initiator_depth: 128,
        target_ack_delay: 15,
        failover_accepted: 0,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x0000_00ff_fe00_0001,
        private_data: private_data(&[0, 0, 0x20, 0]).unwrap(),
    };
    let m = CmMad::new(7, CmMsg::Rep(rep)).to_bytes().unwrap();
    assert_eq!(&m[16..18], &[0x00, 0x13]);
    // Vendor ID 0x02c901 in the bytes after QPN, EECN and PSN (CM_REP_VENDOR_ID_H/M/L).
    assert_eq!(&m[MAD_HDR_LEN + 12..MAD_HDR_LEN + 16], &[0, 0, 0x12, 0x02]);
    assert_eq!(at(&m, 19), 0xc9);
    assert_eq!(
        &m[MAD_HDR_LEN + 20..MAD_HDR_LEN + 24],
        &[0xb4, 0x19, 0x20, 0x01]
    );
    assert_eq!(
        &m[MAD_HDR_LEN + 24..MAD_HDR_LEN + 28],
        &[0, 128, (15 << 3) | 1, 7 << 5]
    );
    assert_eq!(at(&m, 35), 0x01);
    assert_eq!(at(&m, 38), 0x20);
    assert_eq!(CmMad::decode(&m).unwrap().msg, CmMsg::Rep(rep));
}

#[test]
fn short_messages_sit_at_their_offsets() {
    let mra = Mra {
        local_comm_id: 1,
        remote_comm_id: 2,
        message_mraed: msg_response::REP,
        service_timeout: 21,
        private_data: [0; MRA_PRIVATE_DATA_LEN],
    };
    let m = CmMad::new(1, CmMsg::Mra(mra)).to_bytes().unwrap();
    assert_eq!((at(&m, 8), at(&m, 9)), (1 << 6, 21 << 3));
    let mut rej = Rej {
        local_comm_id: 0,
        remote_comm_id: 0x9c24_9cef,
        message_rejected: msg_response::REQ,
        reject_info_length: 3,
        reason: rej_reason::INVALID_SERVICE_ID,
        ari: [0; REJ_ARI_LEN],
        private_data: [0; REJ_PRIVATE_DATA_LEN],
    };
    rej.ari[..3].copy_from_slice(&[1, 2, 3]);
    let m = CmMad::new(1, CmMsg::Rej(rej)).to_bytes().unwrap();
    assert_eq!(
        &m[MAD_HDR_LEN + 8..MAD_HDR_LEN + 15],
        &[0, 3 << 1, 0, 8, 1, 2, 3]
    );
    let dreq = Dreq {
        local_comm_id: 5,
        remote_comm_id: 6,
        remote_qpn_eecn: 0x13,
        private_data: [0; DREQ_PRIVATE_DATA_LEN],
    };
    let m = CmMad::new(1, CmMsg::Dreq(dreq)).to_bytes().unwrap();
    assert_eq!(
        &m[MAD_HDR_LEN + 4..MAD_HDR_LEN + 12],
        &[0, 0, 0, 6, 0, 0, 0x13, 0]
    );
    let mut rtu_pd = [0u8; RTU_PRIVATE_DATA_LEN];
    rtu_pd[0] = 0xaa;
    rtu_pd[RTU_PRIVATE_DATA_LEN - 1] = 0xbb;
    let rtu = Rtu {
        local_comm_id: 5,
        remote_comm_id: 6,
        private_data: rtu_pd,
    };
    let drep = Drep {
        local_comm_id: 5,
        remote_comm_id: 6,
        private_data: rtu_pd,
    };
    for (msg, id) in [(CmMsg::Rtu(rtu), 0x14), (CmMsg::Drep(drep), 0x16)] {
        let m = CmMad::new(1, msg).to_bytes().unwrap();
        assert_eq!(m[17], id);
        assert_eq!((at(&m, 8), m[MAD_LEN - 1]), (0xaa, 0xbb));
        assert_eq!(CmMad::decode(&m).unwrap().msg, msg);
    }
    for msg in [CmMsg::Mra(mra), CmMsg::Rej(rej), CmMsg::Dreq(dreq)] {
        let m = CmMad::new(1, msg).to_bytes().unwrap();
        assert_eq!(CmMad::decode(&m).unwrap().msg, msg);
    }
}

#[test]
fn sidr_fields_sit_at_their_offsets() {
    let req = SidrReq {
        request_id: 0xabcd,
        pkey: 0xffff,
        service_id: PortSpace::Udp.service_id(7174),
        private_data: [0; SIDR_REQ_PRIVATE_DATA_LEN],
    };
    let m = CmMad::new(1, CmMsg::SidrReq(req)).to_bytes().unwrap();
    assert_eq!(&m[MAD_HDR_LEN + 4..MAD_HDR_LEN + 6], &[0xff, 0xff]);
    assert_eq!(
        &m[MAD_HDR_LEN + 12..MAD_HDR_LEN + 16],
        &[0x01, 0x11, 0x1c, 0x06]
    );
    let rep = SidrRep {
        request_id: 0xabcd,
        status: sidr_status::SUCCESS,
        info_length: 0,
        vendor_id: 0x02_c9_01,
        qpn: 0x15,
        service_id: req.service_id,
        qkey: 0x1234_5678,
        info: [0; SIDR_REP_INFO_LEN],
        private_data: [0; SIDR_REP_PRIVATE_DATA_LEN],
    };
    let m = CmMad::new(1, CmMsg::SidrRep(rep)).to_bytes().unwrap();
    assert_eq!(&m[16..18], &[0x00, 0x18]);
    // Vendor ID: high 16 bits at 6, low 8 after the QPN (CM_SIDR_REP_VENDOR_ID_H/L).
    assert_eq!(
        &m[MAD_HDR_LEN + 6..MAD_HDR_LEN + 12],
        &[0x02, 0xc9, 0, 0, 0x15, 0x01]
    );
    assert_eq!(
        &m[MAD_HDR_LEN + 20..MAD_HDR_LEN + 24],
        &[0x12, 0x34, 0x56, 0x78]
    );
    for msg in [CmMsg::SidrReq(req), CmMsg::SidrRep(rep)] {
        let m = CmMad::new(1, msg).to_bytes().unwrap();
        assert_eq!(CmMad::decode(&m).unwrap().msg, msg);
    }
}

#[test]
fn bad_mads_are_refused_with_typed_errors() {
    let good = CmMad::new(1, CmMsg::Req(linux_req())).to_bytes().unwrap();
    assert_eq!(CmMad::decode(&good[..255]), Err(CmError::Length(255)));
    let mut long = [0u8; 257];
    long[..256].copy_from_slice(&good);
    assert_eq!(CmMad::decode(&long), Err(CmError::Length(257)));
    let with = |i: usize, v: u8| {
        let mut m = good;
        m[i] = v;
        CmMad::decode(&m)
    };
    assert_eq!(with(0, 2), Err(CmError::BaseVersion(2)));
    assert_eq!(with(1, 0x81), Err(CmError::Class(0x81)));
    assert_eq!(with(2, 1), Err(CmError::ClassVersion(1)));
    assert_eq!(with(3, 0x81), Err(CmError::Method(0x81)));
    assert_eq!(
        with(17, 0x01),
        Err(CmError::Attribute(attr::CLASS_PORT_INFO))
    );
    assert_eq!(with(17, 0x19), Err(CmError::Attribute(attr::LAP)));
    // REJ with a Reject Info Length beyond the 72-byte ARI.
    let mut rej = good;
    rej[17] = 0x12;
    rej[MAD_HDR_LEN + 9] = 73 << 1;
    assert_eq!(CmMad::decode(&rej), Err(CmError::InfoLength(73)));
    let mut sidr = good;
    sidr[17] = 0x18;
    sidr[MAD_HDR_LEN + 5] = 200;
    assert_eq!(CmMad::decode(&sidr), Err(CmError::InfoLength(200)));
}

#[test]
fn bad_messages_are_not_encoded() {
    let mut req = linux_req();
    req.local_qpn = 1 << 24;
    let e = CmMad::new(1, CmMsg::Req(req)).to_bytes().unwrap_err();
    assert_eq!(
        e,
        CmError::FieldRange {
            bit_offset: ((MAD_HDR_LEN + 32) * 8) as u16,
            width: 24,
            value: 1 << 24
        }
    );
    let rep = Rep {
        local_comm_id: 1,
        remote_comm_id: 2,
        local_qkey: 0,
        local_qpn: 3,
        local_eecn: 0,
        starting_psn: 4,
        vendor_id: 1 << 24,
        responder_resources: 0,
        initiator_depth: 0,
        target_ack_delay: 0,
        failover_accepted: 0,
        end_to_end_flow_control: false,
        rnr_retry_count: 0,
        srq: false,
        local_ca_guid: 0,
        private_data: [0; REP_PRIVATE_DATA_LEN],
    };
    assert_eq!(
        CmMad::new(1, CmMsg::Rep(rep)).to_bytes(),
        Err(CmError::FieldRange {
            bit_offset: ((MAD_HDR_LEN + 15) * 8) as u16,
            width: 24,
            value: 1 << 24
        })
    );
    let mut mad = CmMad::new(1, CmMsg::Req(linux_req()));
    mad.hdr.attr_id = attr::REP;
    assert_eq!(
        mad.to_bytes(),
        Err(CmError::AttributeMismatch {
            header: attr::REP,
            message: attr::REQ
        })
    );
    assert_eq!(
        private_data::<4>(&[0; 5]),
        Err(CmError::PrivateDataLength { max: 4, got: 5 })
    );
    let mut out = [0x55u8; MAD_LEN];
    let bad = CmMad::new(1, CmMsg::Req(req));
    assert!(bad.encode(&mut out).is_err());
    assert_eq!(out, [0x55u8; MAD_LEN], "a refused encode writes nothing");
}
