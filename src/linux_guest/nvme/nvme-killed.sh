#!/bin/sh
# The host that vanishes: connects, then writes with fio (4 KiB at queue depth 32) until its
# guest is killed; prints `RESULT io-running` once fio is under way. Its controller on the
# target is left to the keep-alive timeout (KATO 5 s, the Linux host's default:
# NVME_DEFAULT_KATO in drivers/nvme/host/nvme.h, sent in the Connect command).
. /usr/bin/nvme-lib.sh
start_host
connect
fio --filename=$DEV --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=32 \
    --size=64M --runtime=900 --time_based=1 --name=until-killed > /tmp/fio 2>&1 &
sleep 2
result "io-running"
wait
cat /tmp/fio
fail "killed fio ended before the guest was killed"
