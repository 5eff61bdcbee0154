#!/bin/sh
# Scenario "fio-verify": the controller with several I/O queues (with one CPU the host makes
# one per queue type: default (writes), read, poll: `--nr-write-queues`, `--nr-poll-queues`;
# drivers/nvme/host/rdma.c nvme_rdma_alloc_io_queues), and fio writing random blocks of 4 to
# 128 KiB from several jobs at queue depth 16 then reading every block back against its
# checksum (--verify=crc32c), one job polling (pvsync2 --hipri, the poll queue).
# Ends with `RESULT ok fio-verify`.
. /usr/bin/nvme-lib.sh
start_host
connect --nr-write-queues=1 --nr-poll-queues=1
t0=$(up)
fio --output-format=terse --terse-version=3 --filename=$DEV --direct=1 --verify=crc32c \
    --verify_fatal=1 --do_verify=1 --rw=randwrite --bsrange=4k-128k --size=16M \
    --name=aio0 --ioengine=libaio --iodepth=16 --offset=0 \
    --name=aio1 --ioengine=libaio --iodepth=16 --offset=16M \
    --name=poll --ioengine=pvsync2 --hipri=1 --offset=32M > /tmp/fio 2>&1
rc=$?
grep -v '^3;' /tmp/fio | sed "s/^/$tag: fio: /"
# terse v3: field 3 job, 5 error, 6/47 KiB read/written (fio's HOWTO, "Terse output").
awk -F';' '$1 == 3 { printf "RESULT fio-verify job=%s error=%s read_kib=%s written_kib=%s\n", $3, $5, $6, $47 }' /tmp/fio
result "fio-verify rc=$rc queues=$(cat /sys/class/nvme/$CTRL/queue_count) s=$(since $t0)"
[ $rc = 0 ] || fail "fio-verify"
disconnect
done_with_target
result "ok fio-verify"
