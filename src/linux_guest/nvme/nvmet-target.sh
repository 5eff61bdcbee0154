#!/bin/sh
# Linux's own NVMe-oF target (nvmet + nvmet-rdma) on rxe0: the baseline the unikernel's
# nvmf-target is measured against. Namespace 1 is a memory-backed null_blk of 1 GiB
# (null_blk's module parameters gb, memory_backed: drivers/block/null_blk/main.c); the
# subsystem $NQN takes any host; port 1 is rdma/ipv4 on this guest's address, 4420.
# Configured through configfs (drivers/nvme/target/configfs.c). Prints `TARGET: ready` once
# the port is enabled, then serves until a host says it is done (TCP port 4001) or 20 minutes.
. /usr/bin/nvme-lib.sh
tag=TARGET
loadmod null_blk nr_devices=1 gb=1 memory_backed=1 || fail "loadmod null_blk"
k=0
while [ ! -b /dev/nullb0 ] && [ $k -lt 50 ]; do sleep 0.1; k=$((k+1)); done
[ -b /dev/nullb0 ] || fail "no /dev/nullb0"
loadmod nvmet-rdma || fail "loadmod nvmet-rdma"
grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config ||
  fail "mount configfs"
C=/sys/kernel/config/nvmet
S=$C/subsystems/$NQN
P=$C/ports/1
mkdir $S && echo 1 > $S/attr_allow_any_host && echo $SERIAL > $S/attr_serial &&
  mkdir $S/namespaces/1 && echo -n /dev/nullb0 > $S/namespaces/1/device_path &&
  echo $NS_UUID > $S/namespaces/1/device_uuid && echo $NS_NGUID > $S/namespaces/1/device_nguid &&
  echo 1 > $S/namespaces/1/enable || fail "configfs subsystem"
mkdir $P && echo rdma > $P/addr_trtype && echo ipv4 > $P/addr_adrfam &&
  echo $PEER_IP > $P/addr_traddr && echo $PORT > $P/addr_trsvcid &&
  ln -s $S $P/subsystems/$NQN || fail "configfs port"
say "ready nqn=$NQN serial=$SERIAL bytes=$(($(cat /sys/block/nullb0/size) * 512)) addr=$PEER_IP:$PORT"
timeout 1200 nc -l -p 4001 < /dev/null | while read l; do say "host says: $l"; done
dmesg | grep -i nvmet | tail -40 | sed 's/^/TARGET: dmesg /'
say "rdma qps after: $(rc_qps)"
say end
