#!/usr/bin/env bash
# as-user.sh DIR UID CMD...: runs CMD as UID (its own gid, no groups) where UID may open /dev/kvm, changing nothing on the machine.
#
# In a private mount namespace a tmpfs on DIR (an empty directory of the caller's) gets a new node
# of /dev/kvm's device, owned by UID, which is bound over /dev/kvm: the machine's /dev/kvm keeps
# its owner and mode, and the node goes away with the namespace whatever happens to the caller.
# Every step execs, so CMD keeps this script's pid. Needs root (CAP_SYS_ADMIN, CAP_MKNOD); exits
# 125 when the set-up fails.
set -u
[ $# -ge 3 ] || { echo "usage: $0 DIR UID CMD..." >&2; exit 125; }
# shellcheck disable=SC2016 # the inner bash expands them
exec unshare --mount --propagation private -- bash -c '
	mnt=$1 uid=$2
	shift 2
	mount -t tmpfs -o size=16k,mode=0755 lkvm-as-user "$mnt" &&
		mknod -m 0600 "$mnt/kvm" c $((0x$(stat -c %t /dev/kvm))) $((0x$(stat -c %T /dev/kvm))) &&
		chown "$uid:$uid" "$mnt/kvm" && mount --bind "$mnt/kvm" /dev/kvm || exit 125
	exec setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$@"' as-user "$@"
