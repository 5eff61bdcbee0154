use super::*;

const PERF: &str = "HOST: connect ...\n\
RESULT discover entries=2 listed=1 tries=1 s=0.51\n\
RESULT connect ctrl=nvme0 bytes=1073741824 lba=512 queues=2 rc_qps=2 sqsize=127 kato=5 cntlid=1 serial=NVMEOF-RAM-0001 max_hw_kb=1024 s=0.48\n\
RESULT fio job=randread-4k rw=read iops=2500.5 bw_kib=10002 lat_us=12780.1\n\
RESULT fio job=randwrite-4k rw=write iops=2000 bw_kib=8000 lat_us=16000\n\
RESULT disconnect ctrls=0 rc_qps=0 s=0.22\n\
RESULT ok fio-perf\n";

#[test]
fn result_lines_parse() {
    let r = results(PERF);
    assert_eq!(r.len(), 6);
    assert_eq!(r[0].0, "discover");
    assert_eq!(
        field(PERF, "connect", "bytes").as_deref(),
        Some("1073741824")
    );
    assert_eq!(field(PERF, "disconnect", "rc_qps").as_deref(), Some("0"));
    assert_eq!(field(PERF, "connect", "nothing"), None);
    assert_eq!(values(PERF, "fio", "job"), ["randread-4k", "randwrite-4k"]);
    assert!(passed(PERF, Scenario::FioPerf));
    assert!(!passed(PERF, Scenario::Basic));
    let failed = format!("{PERF}RESULT fail checksums differ\n");
    assert!(!passed(&failed, Scenario::FioPerf));
}

#[test]
fn fio_figures_and_table() {
    let f = fio_figures(PERF);
    assert_eq!(f.len(), 2);
    assert_eq!(f[0].job, "randread-4k");
    assert_eq!(f[0].iops, 2500.5);
    assert_eq!(f[1].rw, "write");
    let uk = vec![FioFigure {
        iops: 5001.0,
        ..f[0].clone()
    }];
    let t = fio_table(&uk, &f);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(
        lines[1].starts_with("randread-4k") && lines[1].ends_with("2.00"),
        "{t}"
    );
    assert!(
        lines[2].starts_with("randwrite-4k") && lines[2].ends_with('-'),
        "{t}"
    );
}

#[test]
fn every_scenario_has_its_script() {
    for s in Scenario::ALL {
        let script = s.script();
        let text = SCRIPTS
            .iter()
            .find(|(n, _)| *n == script)
            .unwrap_or_else(|| panic!("{script} is not in the image"))
            .1;
        assert!(
            text.contains(&format!("result \"ok {}\"", s.name())),
            "{script}"
        );
    }
    // The subsystem and the host NQN are the scripts' too.
    let lib = SCRIPTS.iter().find(|(n, _)| *n == "nvme-lib.sh").unwrap().1;
    assert!(lib.contains(&format!("NQN=${{nvme_nqn:-{SUBSYS_NQN}}}")));
    assert!(HOST_NQN.ends_with(HOST_ID));
}

#[test]
fn nvme_commands_are_told_apart() {
    assert!(uses_nvme("nvme-basic.sh $SERVER"));
    assert!(uses_nvme("/usr/bin/nvme-fio-perf.sh 10.0.0.2"));
    assert!(uses_nvme("sleep 1; nvmet-target.sh"));
    assert!(uses_nvme("loadmod nvme-rdma && nvme list"));
    assert!(!uses_nvme("ib_write_bw -d rxe0 -x $GID -F"));
    assert!(uses_nvme("nvme list; fio --version"));
    assert!(!uses_nvme("rping -c -a $SERVER"));
}
