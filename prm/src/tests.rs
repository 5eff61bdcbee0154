//! Host unit tests.

use crate::*;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// Reference implementation: bit `i` of the field (MSB first) is bit `7 - (off + i) % 8` of
/// byte `(off + i) / 8`. For a big-endian dword this is exactly MLX5_SET's placement.
fn ref_set(buf: &mut [u8], off: u32, w: u32, v: u64) {
    for i in 0..w {
        let bit = (v >> (w - 1 - i)) & 1;
        let pos = off + i;
        let byte = (pos / 8) as usize;
        let mask = 0x80u8 >> (pos % 8);
        if bit == 1 {
            buf[byte] |= mask;
        } else {
            buf[byte] &= !mask;
        }
    }
}

fn ref_get(buf: &[u8], off: u32, w: u32) -> u64 {
    let mut v = 0u64;
    for i in 0..w {
        let pos = off + i;
        let bit = (buf[(pos / 8) as usize] >> (7 - pos % 8)) & 1;
        v = (v << 1) | bit as u64;
    }
    v
}

/// xorshift64*, deterministic.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn set_get_round_trip_every_offset_and_width() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for start in 0..32u32 {
        for w in 1..=(32 - start) {
            for dw in [0u32, 1, 5] {
                let f = Field::new(dw * 32 + start, w);
                let mut buf = vec![0u8; 24];
                for b in buf.iter_mut() {
                    *b = rng.next() as u8;
                }
                let before = buf.clone();
                let v = rng.next() as u32;
                f.set(&mut buf, v).unwrap();
                let expect = v as u64 & ((1u64 << w) - 1);
                assert_eq!(f.get(&buf).unwrap() as u64, expect, "{f:?}");
                // Same bytes as the bitwise reference, and nothing else touched.
                let mut r = before.clone();
                ref_set(&mut r, f.offset, w, expect);
                assert_eq!(buf, r, "{f:?} v={v:#x}");
                assert_eq!(ref_get(&buf, f.offset, w), expect);
            }
        }
    }
}

#[test]
fn mlx5_set_formula() {
    // MLX5_SET: dword = off / 32, shift = 32 - off % 32 - width, big-endian dword.
    let f = Field::new(0x1db, 5); // mkc.log_page_size
    assert_eq!(f.dword_index(), 14);
    assert_eq!(f.shift(), 0);
    let mut buf = [0u8; 64];
    f.set(&mut buf, 12).unwrap();
    assert_eq!(&buf[56..60], &[0, 0, 0, 0x0c]);
    let f = Field::new(3, 3); // mkc.access_mode_4_2
    assert_eq!(f.shift(), 26);
    f.set(&mut buf, 0b101).unwrap();
    assert_eq!(buf[0], 0b0001_0100);
}

#[test]
fn known_bytes_create_mkey_in() {
    let mut inb = [0u8; create_mkey_in::BYTES];
    assert_eq!(inb.len(), 272);
    create_mkey_in::OPCODE
        .set(&mut inb, opcode::CREATE_MKEY.into())
        .unwrap();
    create_mkey_in::PG_ACCESS.set(&mut inb, 1).unwrap();
    let mkc_at = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    assert_eq!((mkc_at.offset, mkc_at.width), (128, 512));
    mkc::LR.within(mkc_at).set(&mut inb, 1).unwrap();
    mkc::ACCESS_MODE_1_0
        .within(mkc_at)
        .set(&mut inb, mkc_access_mode::bits_1_0(mkc_access_mode::MTT))
        .unwrap();
    mkc::QPN.within(mkc_at).set(&mut inb, 0xff_ffff).unwrap();
    mkc::MKEY_7_0.within(mkc_at).set(&mut inb, 0x42).unwrap();
    mkc::START_ADDR
        .within(mkc_at)
        .set64(&mut inb, 0x0123_4567_89ab_cdef)
        .unwrap();
    create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE
        .set(&mut inb, 3)
        .unwrap();

    let mut want = [0u8; 272];
    want[0..2].copy_from_slice(&[0x02, 0x00]); // opcode 0x200, big-endian
    want[12] = 0x80; // pg_access: bit 0x60 = MSB of dword 3
    want[18] = 0x05; // mkc byte 2: lr (0x04) | access_mode_1_0 = 1
    want[20..24].copy_from_slice(&[0xff, 0xff, 0xff, 0x42]); // qpn, mkey_7_0
    want[32..40].copy_from_slice(&[0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
    want[96..100].copy_from_slice(&[0, 0, 0, 3]); // byte 0x60
    assert_eq!(inb, want);

    // The nested context is also addressable as its own buffer.
    let ctx = create_mkey_in::MEMORY_KEY_MKEY_ENTRY.bytes(&inb).unwrap();
    assert_eq!(ctx.len(), mkc::BYTES);
    assert_eq!(mkc::MKEY_7_0.get(ctx), Ok(0x42));
    assert_eq!(mkc::START_ADDR.get64(ctx), Ok(0x0123_4567_89ab_cdef));
}

#[test]
fn sixty_four_bit_fields() {
    let mut buf = [0u8; cqc::BYTES];
    assert_eq!(cqc::DBR_ADDR, Field::new(448, 64));
    cqc::DBR_ADDR
        .set64(&mut buf, 0xdead_beef_0000_1000)
        .unwrap();
    assert_eq!(&buf[56..64], &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0x10, 0x00]);
    assert_eq!(cqc::DBR_ADDR.get64(&buf), Ok(0xdead_beef_0000_1000));
    assert_eq!(cqc::DBR_ADDR.get_u64(&buf), Ok(0xdead_beef_0000_1000));
    assert!(buf[..56].iter().all(|&b| b == 0));
    // A 64-bit field on a 32-bit (not 64-bit) boundary is the same big-endian value.
    let f = Field::new(32, 64);
    let mut b2 = [0u8; 12];
    f.set64(&mut b2, 0x1122_3344_5566_7788).unwrap();
    assert_eq!(
        &b2,
        &[0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
    );
    // Wrong shapes are refused.
    assert!(matches!(
        Field::new(16, 64).get64(&b2),
        Err(Error::BadShape { .. })
    ));
    assert!(matches!(
        Field::new(0, 32).get64(&b2),
        Err(Error::BadShape { .. })
    ));
    assert!(matches!(
        cqc::DBR_ADDR.get(&buf),
        Err(Error::BadShape { .. })
    ));
}

#[test]
fn byte_array_fields() {
    let gid = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
    ];
    let mut ads_buf = [0u8; ads::BYTES];
    ads::RGID_RIP.write_bytes(&mut ads_buf, &gid).unwrap();
    assert_eq!(&ads_buf[16..32], &gid);
    let mut back = [0u8; 16];
    ads::RGID_RIP.read_bytes(&ads_buf, &mut back).unwrap();
    assert_eq!(back, gid);
    assert_eq!(
        ads::RGID_RIP.write_bytes(&mut ads_buf, &gid[..15]),
        Err(Error::LengthMismatch {
            field: 16,
            given: 15
        })
    );
    // A MAC split over rmac_47_32 / rmac_31_0 is contiguous: Linux copies 6 bytes at rmac_47_32.
    assert_eq!(ads::RMAC_47_32.end(), ads::RMAC_31_0.offset);
    // Not byte-aligned: refused.
    assert!(matches!(
        ads::SL.bytes(&ads_buf),
        Err(Error::BadShape { .. })
    ));
}

#[test]
fn buffer_too_short_is_an_error_and_writes_nothing() {
    let mut buf = [0xaau8; 7];
    let f = Field::new(32, 8); // dword 1 needs bytes 4..8
    assert_eq!(f.get(&buf), Err(Error::OutOfBounds { needed: 8, len: 7 }));
    assert_eq!(
        f.set(&mut buf, 1),
        Err(Error::OutOfBounds { needed: 8, len: 7 })
    );
    assert_eq!(buf, [0xaa; 7]);
    assert_eq!(
        Field::new(0, 64).set64(&mut buf, 0),
        Err(Error::OutOfBounds { needed: 8, len: 7 })
    );
    assert_eq!(buf, [0xaa; 7]);
    assert!(matches!(
        Field::new(0, 64).bytes(&buf),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        Field::new(0, 64).bytes_mut(&mut buf),
        Err(Error::OutOfBounds { .. })
    ));
    // A command header on an empty buffer.
    assert!(create_qp_in::OPCODE.get(&[]).is_err());
    // Far-away fields saturate instead of overflowing.
    let far = create_qp_in::PAS.elem(u32::MAX);
    assert!(far.get64(&[0u8; 16]).is_err());
    assert!(Field::new(u32::MAX - 3, 4).get(&[0u8; 8]).is_err());
}

#[test]
fn bad_shapes() {
    let buf = [0u8; 16];
    assert!(matches!(
        Field::new(30, 4).get(&buf),
        Err(Error::BadShape { .. })
    )); // crosses a dword
    assert!(matches!(
        Field::new(0, 0).get(&buf),
        Err(Error::BadShape { .. })
    ));
    assert!(matches!(
        Field::new(0, 33).get(&buf),
        Err(Error::BadShape { .. })
    ));
}

#[test]
fn set_truncates_like_mlx5_set_and_set_checked_refuses() {
    let mut buf = [0u8; 4];
    let f = Field::new(4, 4);
    f.set(&mut buf, 0x1f).unwrap();
    assert_eq!(buf, [0x0f, 0, 0, 0]);
    assert_eq!(
        f.set_checked(&mut buf, 0x10),
        Err(Error::ValueTooWide {
            width: 4,
            value: 0x10
        })
    );
    assert_eq!(buf, [0x0f, 0, 0, 0]);
    f.set_checked(&mut buf, 0x3).unwrap();
    assert_eq!(buf, [0x03, 0, 0, 0]);
    assert!(Field::new(0, 32).set_u64(&mut buf, 1 << 32).is_err());
    Field::new(0, 32).set_u64(&mut buf, 0xffff_ffff).unwrap();
    assert_eq!(buf, [0xff; 4]);
    // Free-function spelling.
    set(&mut buf, Field::new(0, 8), 0x12).unwrap();
    assert_eq!(get(&buf, Field::new(0, 8)), Ok(0x12));
}

#[test]
fn arrays() {
    let bm = create_eq_in::EVENT_BITMASK;
    assert_eq!((bm.offset, bm.width, bm.elem_width), (704, 256, 64));
    assert_eq!(bm.count(), Some(4));
    assert_eq!(bm.at(3), Some(Field::new(704 + 3 * 64, 64)));
    assert_eq!(bm.at(4), None);
    let pas = create_eq_in::PAS;
    assert!(pas.is_flexible());
    assert_eq!(pas.as_field(), Field::new(2176, 0));
    assert_eq!(pas.at(1000), Some(Field::new(2176 + 64_000, 64)));
    // inlen for 3 pages: 0x110 + 3 * 8 (Linux core/eq.c `create_map_eq`)
    assert_eq!(pas.bytes_with(3), 0x110 + 24);
    // event type t -> bit t % 64 of word t / 64 (Linux core/eq.c `create_map_eq`)
    let mut inb = vec![0u8; pas.bytes_with(1)];
    let (word, bit) = event::bitmask_word_bit(event::CMD);
    bm.elem(word).set64(&mut inb, bit).unwrap();
    assert_eq!(inb[0x58 + 6], 1 << 2); // CMD = 0x0a: bit 10 of the BE word is 0x04 in its byte 6
                                       // klm_pas_mtt is declared with 32-bit elements; MTTs are 64-bit.
    let mtt = create_mkey_in::KLM_PAS_MTT.with_elem_width(64);
    assert_eq!(mtt.elem(1), Field::new(2176 + 64, 64));
    assert_eq!(manage_pages_in::PAS.bytes_with(2), 16 + 16);
}

#[test]
fn nested_offsets_match_flattened() {
    // create_qp_in.qpc at 0xc0, qpc.primary_address_path at 0xc0 inside it.
    assert_eq!(create_qp_in::QPC, Field::new(0xc0, qpc::BITS));
    let f = ads::VHCA_PORT_NUM
        .within(qpc::PRIMARY_ADDRESS_PATH)
        .within(init2rtr_qp_in::QPC);
    assert_eq!(f.offset, 0xc0 + 0xc0 + 0x128);
    assert_eq!(query_hca_cap_out::CAPABILITY.offset, 128);
    assert_eq!(hca_cap_union::CMD_HCA_CAP.width, cmd_hca_cap::BITS);
    assert_eq!(eqe::EVENT_DATA.width, event_auto::BITS);
    assert_eq!(initial_seg::HEALTH_BUFFER.width, health_buffer::BITS);
}

fn struct_index(name: &str) -> usize {
    ALL_STRUCTS.iter().position(|(n, _, _)| *n == name).unwrap()
}

#[test]
fn no_overlapping_fields_outside_unions() {
    assert_eq!(ALL_STRUCTS.len(), ALL_STRUCTS_IS_UNION.len());
    for (i, (name, bits, fields)) in ALL_STRUCTS.iter().enumerate() {
        let mut v: Vec<(u32, u32, &str)> = fields
            .iter()
            .map(|(n, f)| (f.offset, f.end(), *n))
            .collect();
        v.sort();
        for f in &v {
            assert!(f.1 <= *bits, "{name}.{} ends past {bits}", f.2);
        }
        if ALL_STRUCTS_IS_UNION[i] {
            continue;
        }
        for p in v.windows(2) {
            assert!(p[0].1 <= p[1].0, "{name}: {} overlaps {}", p[0].2, p[1].2);
        }
    }
    assert!(ALL_STRUCTS_IS_UNION[struct_index("hca_cap_union")]);
    assert!(ALL_STRUCTS_IS_UNION[struct_index("event_auto")]);
    assert!(!ALL_STRUCTS_IS_UNION[struct_index("qpc")]);
}

/// The fields declared after `@linux` stay inside their struct, never share a name with a
/// checked field, and overlap a checked or another Linux field only as the same bits under
/// Linux's name (`modify_sq_in.ctx` = rdma-core's `sq_context`) or inside a union.
#[test]
fn linux_fields_fit_beside_the_checked_ones() {
    assert_eq!(ALL_STRUCTS.len(), ALL_STRUCTS_LINUX_FIELDS.len());
    for (i, (name, bits, fields)) in ALL_STRUCTS.iter().enumerate() {
        let linux = ALL_STRUCTS_LINUX_FIELDS[i];
        for (lname, lf) in linux {
            assert!(lf.end() <= *bits, "{name}.{lname} ends past {bits}");
            assert!(!lname.starts_with("reserved"), "{name}.{lname}");
            assert!(
                fields.iter().all(|(n, _)| n != lname),
                "{name}.{lname} is declared twice"
            );
            if ALL_STRUCTS_IS_UNION[i] {
                continue;
            }
            for (other, f) in fields.iter().chain(linux.iter()) {
                if other == lname || f == lf {
                    continue;
                }
                let overlap = f.offset < lf.end() && lf.offset < f.end();
                assert!(!overlap, "{name}: {lname} overlaps {other}");
            }
        }
    }
    assert_eq!(sqc::LINUX_FIELDS.len() + sqc::FIELDS.len(), 21);
    assert_eq!(modify_sq_in::CTX, modify_sq_in::SQ_CONTEXT);
}

#[test]
fn registry_names() {
    let mut names: Vec<&str> = ALL_STRUCTS.iter().map(|s| s.0).collect();
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(n, names.len(), "duplicate struct");
    for (name, bits, fields) in ALL_STRUCTS {
        assert_eq!(bits % 32, 0, "{name}");
        let mut f: Vec<&str> = fields.iter().map(|x| x.0).collect();
        f.sort();
        let k = f.len();
        f.dedup();
        assert_eq!(k, f.len(), "duplicate field in {name}");
        for fname in f {
            assert!(!fname.starts_with("reserved"), "{name}.{fname}");
            assert!(fname
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_'));
        }
    }
    assert_eq!(
        mkc::FIELDS
            .iter()
            .find(|f| f.0 == "access_mode_1_0")
            .unwrap()
            .1,
        Field::new(22, 2)
    );
    assert_eq!(
        find_field("atomic_caps", "atomic_req_8B_endianness_mode"),
        Some(Field::new(0x40, 2))
    );
    assert_eq!(find_field("qpc", "log_sq_size"), Some(qpc::LOG_SQ_SIZE));
    assert_eq!(find_struct("mkc").map(|s| s.0), Some(512));
    assert_eq!(find_struct("nope"), None);
    // fast_teardown is deliberately not declared (rdma-core and Linux `mlx5_ifc_cmd_hca_cap_bits`
    // disagree).
    assert_eq!(find_field("cmd_hca_cap", "fast_teardown"), None);
}

/// Every `struct name[...]` / `union name[...]` in the layout files is in the registry.
#[test]
fn registry_is_complete() {
    let sources = [
        include_str!("layouts/caps.rs"),
        include_str!("layouts/cmdif.rs"),
        include_str!("layouts/cq.rs"),
        include_str!("layouts/eq.rs"),
        include_str!("layouts/eth_caps.rs"),
        include_str!("layouts/flow.rs"),
        include_str!("layouts/hca.rs"),
        include_str!("layouts/mkey.rs"),
        include_str!("layouts/qp.rs"),
        include_str!("layouts/resources.rs"),
        include_str!("layouts/vport.rs"),
        include_str!("layouts/wq.rs"),
    ];
    let mut declared = Vec::new();
    for src in sources {
        for line in src.lines() {
            let t = line.trim_start();
            for kw in ["struct ", "union "] {
                if let Some(rest) = t.strip_prefix(kw) {
                    if let Some(end) = rest.find('[') {
                        declared.push(String::from(&rest[..end]));
                    }
                }
            }
        }
    }
    for d in &declared {
        assert!(
            find_struct(d).is_some(),
            "{d} is declared but missing from ALL_STRUCTS"
        );
    }
    assert_eq!(declared.len(), ALL_STRUCTS.len());
}

#[test]
fn required_structs_are_declared() {
    // The list `prm_layout_check.py --list-required` prints.
    let required = [
        "enable_hca_in",
        "enable_hca_out",
        "disable_hca_in",
        "query_issi_in",
        "query_issi_out",
        "set_issi_in",
        "query_pages_in",
        "query_pages_out",
        "manage_pages_in",
        "manage_pages_out",
        "query_hca_cap_in",
        "query_hca_cap_out",
        "set_hca_cap_in",
        "cmd_hca_cap",
        "init_hca_in",
        "teardown_hca_in",
        "alloc_pd_in",
        "alloc_pd_out",
        "dealloc_pd_in",
        "alloc_uar_in",
        "alloc_uar_out",
        "dealloc_uar_in",
        "create_mkey_in",
        "create_mkey_out",
        "destroy_mkey_in",
        "mkc",
        "create_cq_in",
        "create_cq_out",
        "destroy_cq_in",
        "cqc",
        "create_eq_in",
        "create_eq_out",
        "destroy_eq_in",
        "eqc",
        "create_qp_in",
        "create_qp_out",
        "destroy_qp_in",
        "qpc",
        "ads",
        "rst2init_qp_in",
        "init2rtr_qp_in",
        "rtr2rts_qp_in",
        "qp_2err_in",
        "qp_2rst_in",
        "query_qp_in",
        "query_qp_out",
    ];
    for r in required {
        assert!(find_struct(r).is_some(), "{r}");
    }
}

#[test]
fn layout_json_shape() {
    let mut s = String::new();
    write_layout_json(&mut s).unwrap();
    assert!(s.starts_with("{\"structs\": {"));
    assert!(s.contains("\"mkc\": {\"bits\": 512, \"fields\": {\"free\": [1, 1], "));
    assert!(s.contains("\"access_mode_1_0\": [22, 2]"));
    assert!(s.contains("\"pas\": [2176, 0]"));
    let opens = s.matches('{').count();
    assert_eq!(opens, s.matches('}').count());
    assert_eq!(opens, 2 + 2 * ALL_STRUCTS.len());
}

#[test]
fn command_constants() {
    assert_eq!(opcode::CREATE_MKEY, 0x200);
    assert_eq!(opcode::QP_2ERR, 0x507);
    assert_eq!(opcode::QP_2RST, 0x50a);
    assert_eq!(opcode::name(0x200), Some("MLX5_CMD_OP_CREATE_MKEY"));
    assert_eq!(opcode::name(0x507), Some("MLX5_CMD_OP_2ERR_QP"));
    assert_eq!(opcode::name(0xffff), None);
    assert_eq!(
        cmd_status::name(cmd_status::BAD_PARAM_ERR),
        Some("MLX5_CMD_STAT_BAD_PARAM_ERR")
    );
    assert_eq!(
        delivery_status::name(0x10),
        Some("MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR")
    );
    // QUERY_HCA_CAP output: 16 bytes inline + 8 blocks of 512 (rdma-core
    // `mlx5_ifc_query_hca_cap_out_bits`).
    assert_eq!(query_hca_cap_out::BYTES, 4112);
    assert_eq!(cmdq::num_blocks(query_hca_cap_out::BYTES), 8);
    assert_eq!(cmdq::num_blocks(16), 0);
    assert_eq!(cmdq::num_blocks(17), 1);
    assert_eq!(cmd_layout::delivery_status(0x0b), 5);
    assert_eq!(cmdq::signature(&[0x01, 0x02]), !0x03);
    // Byte offsets of the C structs agree with the PRM bit layouts.
    assert_eq!(cmd_queue_entry::TOKEN.byte_offset(), cmd_layout::TOKEN);
    assert_eq!(
        cmd_queue_entry::OUTPUT_LENGTH.byte_offset(),
        cmd_layout::OUTLEN
    );
    assert_eq!(
        cmd_queue_entry::COMMAND_OUTPUT_INLINE_DATA.byte_offset(),
        cmd_layout::OUT
    );
    assert_eq!(cmd_queue_entry::OWNERSHIP.offset, 511);
    assert_eq!(cmd_if_box::TOKEN.byte_offset(), cmd_prot_block::TOKEN);
    assert_eq!(
        cmd_if_box::NEXT_POINTER_63_32.byte_offset(),
        cmd_prot_block::NEXT
    );
    assert_eq!(
        cmd_if_box::BLOCK_NUMBER.byte_offset(),
        cmd_prot_block::BLOCK_NUM
    );
    assert_eq!(cmd_if_box::BYTES, cmd_prot_block::SIZE);
    assert_eq!(
        initial_seg::INITIALIZING.byte_offset(),
        init_seg::INITIALIZING
    );
    assert_eq!(
        initial_seg::INITIALIZING.shift(),
        init_seg::INITIALIZING_BIT
    );
    assert_eq!(
        initial_seg::HEALTH_COUNTER.byte_offset() - 1,
        init_seg::HEALTH_COUNTER
    );
    assert_eq!(initial_seg::HEALTH_BUFFER.byte_offset(), init_seg::HEALTH);
    assert_eq!(
        initial_seg::CMDQ_PHY_ADDR_63_32.byte_offset(),
        init_seg::CMDQ_ADDR_H
    );
    assert_eq!(
        initial_seg::COMMAND_DOORBELL_VECTOR.byte_offset(),
        init_seg::CMD_DBELL
    );
    assert_eq!(health_buffer::SYND.byte_offset(), health::SYND);
    assert_eq!(health_buffer::FW_VERSION.byte_offset(), health::FW_VER);
    assert_eq!(init_seg::log_cmdq_size(0x1234_5051), 5);
    assert_eq!(init_seg::log_cmdq_stride(0x1234_5051), 1);
    assert_eq!(init_seg::nic_interface(0x0000_0700), 7);
    assert_eq!(init_seg::with_nic_interface(0xabcd_e7ff, 1), 0xabcd_e100);
    assert_eq!(init_seg::timeout_ms(0), None);
    assert_eq!(init_seg::timeout_ms((1 << 29) | 3), Some(3000));
    assert_eq!(init_seg::timeout_ms((3 << 29) | 2), Some(7_200_000));
}

#[test]
fn object_constants() {
    assert_eq!(mkey::from_index(0x12, 0x34), 0x1234);
    assert_eq!(mkey::index(0x1234), 0x12);
    assert_eq!(mkey::mtt_octowords(3), 2);
    assert_eq!(mkey::mtt_octowords(4), 2);
    assert_eq!(mkc_access_mode::bits_1_0(mkc_access_mode::MEMIC), 1);
    assert_eq!(mkc_access_mode::bits_4_2(mkc_access_mode::MEMIC), 1);
    // Linux (unshifted) and rdma-core (pre-shifted) SET_HCA_CAP op_mods agree on the wire.
    assert_eq!(
        hca_cap::set_op_mod(hca_cap::set_op_mod_linux::ROCE),
        hca_cap::set_op_mod_rdma_core::ROCE
    );
    assert_eq!(
        hca_cap::query_op_mod(hca_cap::cap_type::ROCE, hca_cap::OPMOD_GET_CUR),
        (4 << 1) | 1
    );
    assert_eq!(pages::query::BOOT_PAGES, 1);
    assert_eq!(pages::query::INIT_PAGES, 2);
    assert_eq!(pages::query::REGULAR_PAGES, 3);
    assert_eq!(pages::manage::GIVE, 1);
    assert_eq!(qp::st::RC, 0);
    assert_eq!(qp::state::RTS, 3);
    assert_eq!(
        event::name(event::PAGE_REQUEST),
        Some("MLX5_EVENT_TYPE_PAGE_REQUEST")
    );
    assert_eq!(eq::doorbell_value(3, 0x0100_0005), 0x0300_0005);
    assert_eq!(cqe::OP_OWN_INIT, 0xf0);
    assert!(!cqe::is_sw_owned(0xf0, 0, 8));
    assert!(cqe::is_sw_owned(0x00, 0, 8)); // REQ, owner 0, first pass
    assert!(!cqe::is_sw_owned(0x00, 8, 8)); // second pass expects owner 1
    assert!(cqe::is_sw_owned(0x01, 8, 8));
    assert_eq!(
        cq_db::arm_value(5, cq_db::cmd::REQ_NOT_SOL, 0x1ff_ffff),
        0x11ff_ffff
    );
    assert_eq!(
        wqe::opmod_idx_opcode(0, 0x1234, wqe::opcode::RDMA_WRITE),
        0x0012_3408
    );
    assert_eq!(wqe::qpn_ds(0xabcdef, 3), 0xabcd_ef03);
    assert_eq!(wqe::wqebbs(5), 2);
    assert_eq!(wqe::opcode::TSO, wqe::opcode_linux::LSO);
    assert_eq!(wqe::ctrl::CQ_UPDATE, 8);
    assert_eq!(wqe::ctrl::FENCE, wqe::fence::SMALL_AND_FENCE);
}

#[test]
fn klm_layout_matches_the_entry_offsets() {
    use crate::{klm, mkey};
    assert_eq!(klm::BYTES, mkey::KLM_ENTRY_SIZE);
    assert_eq!(klm::BYTE_COUNT.byte_offset(), mkey::KLM_BCOUNT);
    assert_eq!(klm::MKEY.byte_offset(), mkey::KLM_KEY);
    assert_eq!(klm::ADDRESS.byte_offset(), mkey::KLM_VA);
}

#[test]
fn wc_status_and_cqe_syndrome_map_both_ways() {
    use crate::cqe::{syndrome, WcStatus};
    for &(name, s) in syndrome::ALL {
        let st = WcStatus::from_syndrome(s);
        assert_ne!(st, WcStatus::GeneralErr, "{name}");
        assert_eq!(st.cqe_syndrome(), Some(s), "{name}");
    }
    assert_eq!(WcStatus::from_syndrome(0x7f), WcStatus::GeneralErr);
    for st in [WcStatus::Success, WcStatus::GeneralErr, WcStatus::BadCqe] {
        assert_eq!(st.cqe_syndrome(), None);
    }
}
