#!/bin/sh
# Scenario "basic": discover, connect (the namespace's size), 4 KiB and 128 KiB O_DIRECT
# writes read back byte-exact, disconnect leaves nothing behind, a second connect reads the
# first one's data. Ends with `RESULT ok basic`.
. /usr/bin/nvme-lib.sh
patterns
start_host
connect
dd if=/tmp/p4k of=$DEV bs=4096 count=1 seek=256 oflag=direct conv=notrunc 2>/dev/null ||
  fail "write 4k"
dd if=/tmp/p128k of=$DEV bs=131072 count=1 seek=16 oflag=direct conv=notrunc 2>/dev/null ||
  fail "write 128k"
readback io
disconnect
connect
readback reconnect
disconnect
done_with_target
result "ok basic"
