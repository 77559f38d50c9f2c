#!/usr/bin/env bash
# test/system_trust.sh: the TAP tests of test/trust/, which need a CA that
# "the system" trusts.  Run as root by test/run (`make test`), after the
# extension is installed.  In a mount namespace of its own (unshare -m), an
# empty folder owned by the test user is mounted over /etc/ssl/certs
# (libcurl's CA folder, and its CA bundle's folder, on Debian); the tests,
# run as that user inside the namespace, put their throwaway CA there
# (NOTIF_TRUST_STORE names the folder).  The machine's own /etc/ssl/certs
# is never touched, and the mount ends with the namespace.  About 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
[ "$(id -u)" = 0 ] || { echo "test/system_trust.sh: run as root (unshare, mount)" >&2; exit 1; }

. test/lib/installcheck.sh
installcheck_copy "$top"
store="$IC_WORK/certs"
mkdir "$store"
chown postgres "$store"

# The namespace's mounts private, so that the mount never reaches the
# machine's: unshare does that, but not in a chroot (test/chroot: its "/"
# is no mount point), where the machine's mounts must then be private
# already (no "shared:" in init's mountinfo), as on Debian without systemd
propagation=private
if ! unshare --mount --propagation private true 2>/dev/null; then
	if [ ! -r /proc/1/mountinfo ] || grep -q ' shared:' /proc/1/mountinfo; then
		echo "test/system_trust.sh: skipped (a chroot on a machine whose mounts are shared)"
		exit 0
	fi
	propagation=unchanged
fi

# make installcheck as the test user, in the namespace with the mount
IC_AS_USER=(unshare --mount --propagation "$propagation"
	sh -c 'mount --bind "$0" /etc/ssl/certs && exec runuser -u postgres -- "$@"' "$store")
export NOTIF_TRUST_STORE=/etc/ssl/certs
installcheck REGRESS= PROVE_TESTS='test/trust/*.pl'
