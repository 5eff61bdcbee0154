#!/bin/sh
# Scenario "fio-perf": fio's figures against the target: 4 KiB random read and random write at
# queue depth 1 (one I/O's round trip: the latency) and 32, 128 KiB sequential read and write at
# queue depth 8, each for $RT seconds
# (default 10) over the first 128 MiB of the namespace (Linux's memory-backed null_blk
# allocates what is written, in a guest of 512 MiB), one job (libaio, O_DIRECT).
# One line per job: `RESULT fio job=.. iops=.. bw_kib=.. lat_us=..` (terse v3: fields 7, 8, 40
# for reads, 48, 49, 81 for writes; fio's HOWTO, "Terse output"). Ends with `RESULT ok fio-perf`.
. /usr/bin/nvme-lib.sh
RT=${nvme_runtime:-10}
start_host
connect
job() {  # name rw bs iodepth
  fio --output-format=terse --terse-version=3 --filename=$DEV --direct=1 --ioengine=libaio \
      --name=$1 --rw=$2 --bs=$3 --iodepth=$4 --size=128M --runtime=$RT --time_based=1 \
      --ramp_time=1 > /tmp/fio.$1 2>&1 || { cat /tmp/fio.$1; fail "fio $1"; }
  awk -F';' -v job=$1 '$1 == 3 {
    if ($8 + 0 > 0) printf "RESULT fio job=%s rw=read iops=%s bw_kib=%s lat_us=%s\n", job, $8, $7, $40
    if ($49 + 0 > 0) printf "RESULT fio job=%s rw=write iops=%s bw_kib=%s lat_us=%s\n", job, $49, $48, $81
  }' /tmp/fio.$1
}
job randread-4k-qd1 randread 4k 1
job randwrite-4k-qd1 randwrite 4k 1
job randread-4k randread 4k 32
job randwrite-4k randwrite 4k 32
job read-128k read 128k 8
job write-128k write 128k 8
disconnect
done_with_target
result "ok fio-perf"
