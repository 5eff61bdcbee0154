//! Q counter sets: ALLOC_Q_COUNTER / DEALLOC_Q_COUNTER / QUERY_Q_COUNTER and the QPC's
//! `counter_set_id` (sim/mlx5/src/counter.rs), command by command.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::{
    alloc_q_counter_in, alloc_q_counter_out, cmd_hca_cap, cmd_status, dealloc_q_counter_in, opcode,
    qp, qpc, query_q_counter_in, query_q_counter_out, rst2init_qp_in,
};
use mlx5_sim::control::syndrome;
use mlx5_sim::objects::qp::syndrome as qp_syndrome;
use mlx5_sim::InProcHca;
use raw::{input, set};

fn alloc(e: &mut Env) -> raw::Done {
    let i = input(opcode::ALLOC_Q_COUNTER, 0, alloc_q_counter_in::BYTES);
    e.raw.exec(&i, alloc_q_counter_out::BYTES)
}

fn dealloc(e: &mut Env, id: u32) -> raw::Done {
    let mut i = input(opcode::DEALLOC_Q_COUNTER, 0, dealloc_q_counter_in::BYTES);
    set(&mut i, dealloc_q_counter_in::COUNTER_SET_ID, id);
    e.raw.exec(&i, 16)
}

fn query(e: &mut Env, id: u32, clear: bool, aggregate: bool) -> raw::Done {
    let mut i = input(opcode::QUERY_Q_COUNTER, 0, query_q_counter_in::BYTES);
    set(&mut i, query_q_counter_in::COUNTER_SET_ID, id);
    set(&mut i, query_q_counter_in::CLEAR, clear.into());
    set(&mut i, query_q_counter_in::AGGREGATE, aggregate.into());
    e.raw.exec(&i, query_q_counter_out::BYTES)
}

fn max_qp_cnt(e: &mut Env) -> u32 {
    // op_mod 1: the general capabilities, current values.
    let i = input(opcode::QUERY_HCA_CAP, 1, mlx5_prm::query_hca_cap_in::BYTES);
    let d = e.raw.exec(&i, mlx5_prm::query_hca_cap_out::BYTES);
    d.ok();
    cmd_hca_cap::MAX_QP_CNT.get(&raw::cap_bytes(&d)).unwrap()
}

/// Sets are handed out lowest id first, never 0, up to `max_qp_cnt` with set 0 counted; then
/// LIM_ERR. Freed ids come back; set 0 and unknown ids cannot be freed.
#[test]
fn alloc_q_counter_hands_out_max_qp_cnt_sets_and_dealloc_frees_them() {
    let mut e = Env::new(InProcHca::deterministic(), 1);
    let max = max_qp_cnt(&mut e);
    assert!(max >= 2, "the device advertises counter sets ({max})");
    let mut ids = Vec::new();
    loop {
        let d = alloc(&mut e);
        if d.status() != 0 {
            d.fails(cmd_status::LIM_ERR, syndrome::Q_COUNTER_LIMIT);
            break;
        }
        ids.push(d.get(alloc_q_counter_out::COUNTER_SET_ID));
        assert!(ids.len() < 300, "no limit");
    }
    assert_eq!(ids.len() as u32, max - 1, "set 0 takes one of max_qp_cnt");
    assert_eq!(ids, (1..max).collect::<Vec<_>>());
    dealloc(&mut e, 0).fails(cmd_status::BAD_RES_ERR, syndrome::Q_COUNTER_UNKNOWN);
    dealloc(&mut e, 7).ok();
    dealloc(&mut e, 7).fails(cmd_status::BAD_RES_ERR, syndrome::Q_COUNTER_UNKNOWN);
    query(&mut e, 7, false, false).fails(cmd_status::BAD_PARAM_ERR, syndrome::VPORT_COUNTER_SET);
    let d = alloc(&mut e);
    d.ok();
    assert_eq!(
        d.get(alloc_q_counter_out::COUNTER_SET_ID),
        7,
        "the freed id again"
    );
}

/// A fresh set reads all zero; `aggregate` is refused; set 0 (the port's) always answers.
#[test]
fn query_q_counter_reads_sets_and_refuses_aggregate() {
    let mut e = Env::new(InProcHca::deterministic(), 1);
    let d = alloc(&mut e);
    d.ok();
    let id = d.get(alloc_q_counter_out::COUNTER_SET_ID);
    let q = query(&mut e, id, false, false);
    q.ok();
    assert!(q.out[16..].iter().all(|&b| b == 0));
    query(&mut e, 0, false, false).ok();
    query(&mut e, id, false, true).fails(cmd_status::BAD_PARAM_ERR, syndrome::Q_COUNTER_AGGREGATE);
}

/// The QPC's `counter_set_id` must name set 0 or an allocated set, on RST2INIT, INIT2RTR and
/// RTS2RTS with the COUNTER_SET_ID optpar; a set a QP is attached to cannot be freed until the
/// QP leaves it (2RST, another set, DESTROY_QP).
#[test]
fn qpc_counter_set_id_names_an_allocated_set_and_pins_it() {
    let mut e = Env::new(InProcHca::deterministic(), 1);
    let d = alloc(&mut e);
    d.ok();
    let id = d.get(alloc_q_counter_out::COUNTER_SET_ID);
    let scq = e.cq(4);
    let rcq = e.cq(4);
    let q = e.qp(&scq, &rcq, 4, 4);
    let csid = qpc::COUNTER_SET_ID.within(rst2init_qp_in::QPC);

    // Unallocated set: refused, the QP stays in RESET.
    let mut i = e.rst2init_input(q.qpn);
    set(&mut i, csid, id + 1);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qp_syndrome::BAD_COUNTER_SET);
    assert_eq!(e.qp_state(q.qpn), qp::state::RST as u32);

    // Attached on RST2INIT: QUERY_QP shows it, DEALLOC is busy.
    let mut i = e.rst2init_input(q.qpn);
    set(&mut i, csid, id);
    e.raw.exec(&i, 16).ok();
    let qq = e.query_qp(q.qpn);
    qq.ok();
    assert_eq!(
        qq.get(qpc::COUNTER_SET_ID.within(mlx5_prm::query_qp_out::QPC)),
        id
    );
    dealloc(&mut e, id).fails(cmd_status::RES_BUSY, syndrome::Q_COUNTER_BUSY);

    // INIT2RTR naming an unallocated set is refused too.
    let (gid, mac) = (e.gid, e.mac);
    let mut i = e.init2rtr_input(q.qpn, q.qpn, gid, mac, 0x100, 1);
    set(&mut i, csid, 200);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qp_syndrome::BAD_COUNTER_SET);
    let mut i = e.init2rtr_input(q.qpn, q.qpn, gid, mac, 0x100, 1);
    set(&mut i, csid, id);
    e.raw.exec(&i, 16).ok();
    let i = e.rtr2rts_input(q.qpn, 0x100, 7, 7, 14);
    e.raw.exec(&i, 16).ok();

    // RTS2RTS moves it to set 0 with the optpar; without the optpar the field is ignored.
    let mut i = e.modify_input(opcode::RTS2RTS_QP, q.qpn, 0);
    set(&mut i, csid, 99);
    e.raw.exec(&i, 16).ok();
    dealloc(&mut e, id).fails(cmd_status::RES_BUSY, syndrome::Q_COUNTER_BUSY);
    let mut i = e.modify_input(opcode::RTS2RTS_QP, q.qpn, qp::optpar::COUNTER_SET_ID);
    set(&mut i, csid, 99);
    e.raw
        .exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, qp_syndrome::BAD_COUNTER_SET);
    let mut i = e.modify_input(opcode::RTS2RTS_QP, q.qpn, qp::optpar::COUNTER_SET_ID);
    set(&mut i, csid, 0);
    e.raw.exec(&i, 16).ok();
    dealloc(&mut e, id).ok();

    // Attached again (new set), then 2RST detaches.
    let d = alloc(&mut e);
    d.ok();
    let id = d.get(alloc_q_counter_out::COUNTER_SET_ID);
    let mut i = e.modify_input(opcode::RTS2RTS_QP, q.qpn, qp::optpar::COUNTER_SET_ID);
    set(&mut i, csid, id);
    e.raw.exec(&i, 16).ok();
    dealloc(&mut e, id).fails(cmd_status::RES_BUSY, syndrome::Q_COUNTER_BUSY);
    e.modify_simple(opcode::QP_2RST, q.qpn).ok();
    dealloc(&mut e, id).ok();
}
