#!/bin/sh
# Scenario "fs": mkfs.ext4 on the namespace, mount, files written and checksummed, unmount,
# disconnect, connect again, fsck clean, mount, the checksums equal. Ends with `RESULT ok fs`.
. /usr/bin/nvme-lib.sh
loadmod crc32c_generic || fail "fs loadmod crc32c_generic"
loadmod ext4 || fail "fs loadmod ext4"
start_host
connect
t0=$(up)
mkfs.ext4 -q -F $DEV > /tmp/mkfs 2>&1 || { cat /tmp/mkfs; fail "mkfs"; }
result "mkfs s=$(since $t0)"
mkdir -p /mnt/nvme
mount -t ext4 $DEV /mnt/nvme || fail "mount"
t0=$(up)
mkdir /mnt/nvme/d
head -c 4096 /dev/urandom > /mnt/nvme/small
head -c 1048576 /dev/urandom > /mnt/nvme/d/one-mib
head -c 8388608 /dev/urandom > /mnt/nvme/d/eight-mib
for i in $(seq 1 20); do echo "file $i" > /mnt/nvme/d/f$i; done
cp /usr/bin/nvme /mnt/nvme/d/nvme-binary
( cd /mnt/nvme && find . -type f | sort | xargs sha256sum ) > /tmp/sums
sync
result "files n=$(grep -c . /tmp/sums) kib=$(du -sk /mnt/nvme | cut -f1) s=$(since $t0)"
umount /mnt/nvme || fail "umount"
disconnect
connect
t0=$(up)
fsck.ext4 -fn $DEV > /tmp/fsck 2>&1
rc=$?
sed "s/^/$tag: fsck: /" /tmp/fsck
result "fsck rc=$rc s=$(since $t0)"
[ $rc = 0 ] || fail "fsck not clean"
mount -t ext4 $DEV /mnt/nvme || fail "mount again"
( cd /mnt/nvme && sha256sum -c /tmp/sums ) > /tmp/check 2>&1
rc=$?
result "checksums files=$(grep -c ': OK$' /tmp/check) bad=$(grep -vc ': OK$' /tmp/check) rc=$rc"
[ $rc = 0 ] || { cat /tmp/check; fail "checksums differ"; }
umount /mnt/nvme || fail "umount again"
disconnect
done_with_target
result "ok fs"
