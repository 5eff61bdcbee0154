# Sourced by the NVMe-oF scenario scripts (host side) and the Linux target: the names both
# sides agree on, and the helpers. Result lines start with `RESULT ` (one word for the step,
# then name=value fields); a failed step prints `RESULT fail STEP why` and exits 1.
NQN=${nvme_nqn:-nqn.2026-12.io.example:ram}
SERIAL=NVMEOF-RAM-0001
NS_UUID=00000000-0000-0000-0000-0000000000a1
NS_NGUID=00000000-0000-0000-0000-0000000000a2
# The target's address: the script's first argument (`nvme-basic.sh $SERVER` against the
# unikernel), else 10.0.0.1 (Linux's target in the pair).
T=${1:-10.0.0.1}
PORT=4420
tag=HOST
up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "$tag: $* at $(up)s"; }
result() { echo "RESULT $*"; }
fail() {
  result "fail $*"
  dmesg | grep -iE 'nvme|rdma|ext4' | tail -30 | sed "s/^/$tag: dmesg /"
  done_with_target
  exit 1
}
# Tells a Linux target the host is done (its nvmet-target.sh waits on TCP 4001); against the
# unikernel nothing listens there and this is a no-op.
done_with_target() { echo "host done" | timeout 5 nc $T 4001 > /dev/null 2>&1; true; }
# seconds since $1 (an uptime), two decimals
since() { awk -v a="$1" -v b="$(up)" 'BEGIN { printf "%.2f", b - a }'; }

# The host's modules; then `nvme discover` until the target answers (it may still be starting:
# an rdma_cm REQ to a port nobody listens on is rejected at once). RESULT discover.
start_host() {
  loadmod nvme-rdma || fail "setup loadmod nvme-rdma"
  [ -c /dev/nvme-fabrics ] || fail "setup no /dev/nvme-fabrics"
  k=0
  t0=$(up)
  until nvme discover -t rdma -a $T -s $PORT > /tmp/discover 2>&1; do
    k=$((k+1))
    [ $k -ge 90 ] && { cat /tmp/discover; fail "discover no answer after $k tries"; }
    sleep 2
  done
  sed "s/^/$tag: discover: /" /tmp/discover
  n=$(grep -c '^subnqn:' /tmp/discover)
  listed=$(grep -c "^subnqn: *$NQN\$" /tmp/discover)
  result "discover entries=$n listed=$listed tries=$((k+1)) s=$(since $t0)"
  [ "$listed" = 1 ] || fail "discover $NQN not in the log page"
}

# connect [nvme connect options]: sets CTRL (nvmeN) and DEV (/dev/nvmeNn1). RESULT connect.
connect() {
  t0=$(up)
  nvme connect -t rdma -n $NQN -a $T -s $PORT "$@" > /tmp/connect 2>&1 ||
    { cat /tmp/connect; fail "connect nvme connect $*"; }
  CTRL=
  k=0
  while [ -z "$CTRL" ] && [ $k -lt 100 ]; do
    for c in /sys/class/nvme/nvme*; do
      [ "$(cat $c/subsysnqn 2>/dev/null)" = "$NQN" ] && [ -b /dev/${c##*/}n1 ] && CTRL=${c##*/}
    done
    [ -z "$CTRL" ] && sleep 0.2
    k=$((k+1))
  done
  [ -n "$CTRL" ] || fail "connect no namespace block device"
  DEV=/dev/${CTRL}n1
  C=/sys/class/nvme/$CTRL
  B=/sys/block/${CTRL}n1
  result "connect ctrl=$CTRL bytes=$(($(cat $B/size) * 512)) lba=$(cat $B/queue/logical_block_size)" \
    "queues=$(cat $C/queue_count) rc_qps=$(rc_qps) sqsize=$(cat $C/sqsize) kato=$(cat $C/kato)" \
    "cntlid=$(cat $C/cntlid)" \
    "serial=$(cat $C/serial | tr -d ' ') max_hw_kb=$(cat $B/queue/max_hw_sectors_kb) s=$(since $t0)"
}

# The RC QPs of rxe0 (`rdma resource show qp`: all but QP 1, the GSI QP; one per NVMe queue).
rc_qps() { /usr/bin/rdma resource show qp | grep 'lqpn ' | grep -vc 'lqpn 1 '; }

# disconnect: `nvme disconnect`, then nothing of it may be left: no controller of the
# subsystem, no RC QP in rxe0 (only QP 1, the GSI QP, stays). RESULT disconnect.
disconnect() {
  t0=$(up)
  nvme disconnect -n $NQN > /tmp/disconnect 2>&1 || { cat /tmp/disconnect; fail "disconnect"; }
  left=0
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat $c/subsysnqn 2>/dev/null)" = "$NQN" ] && left=$((left+1))
  done
  qps=$(rc_qps)
  result "disconnect ctrls=$left rc_qps=$qps s=$(since $t0)"
  [ $left = 0 ] && [ $qps = 0 ] || fail "disconnect left ctrls=$left rc_qps=$qps"
}

# Deterministic patterns: 4 KiB of "4k@<offset>" lines and 128 KiB of "128k@<offset>" lines.
patterns() {
  awk 'BEGIN { for (i = 0; i < 256; i++) printf "4k@%012x\n", i * 16 }' > /tmp/p4k
  awk 'BEGIN { for (i = 0; i < 8192; i++) printf "128k@%010x\n", i * 16 }' > /tmp/p128k
}

# readback NAME: O_DIRECT reads of the two patterns' places (byte 1 MiB and 2 MiB), compared.
readback() {
  dd if=$DEV of=/tmp/r4k bs=4096 count=1 skip=256 iflag=direct 2>/dev/null || fail "$1 read 4k"
  dd if=$DEV of=/tmp/r128k bs=131072 count=1 skip=16 iflag=direct 2>/dev/null || fail "$1 read 128k"
  for s in 4k 128k; do
    if cmp -s /tmp/p$s /tmp/r$s; then
      result "$1 size=$s equal=1 sha256=$(sha256sum < /tmp/r$s | cut -c1-16)"
    else
      result "$1 size=$s equal=0"
      fail "$1 $s read back differs"
    fi
  done
}
