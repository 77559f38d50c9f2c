#!/usr/bin/env bash
# test/deps.sh: install the packages that building and testing notif_deliver
# need, on Debian 12, if any is missing.  Root uses apt directly; anyone else
# gets told what to install.  With --bench, also what `make bench` needs
# (gnuplot-nox for the charts).
set -euo pipefail
packages=(make gcc libc6-dev postgresql-15 postgresql-server-dev-15 postgresql-client-15
	libcurl4-openssl-dev libipc-run-perl openssl bc procps)
[ "${1:-}" = --bench ] && packages+=(gnuplot-nox)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "missing packages: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
echo "== installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# the server package would start a cluster of its own: not wanted here
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
# postgresql-15 and its headers must be the same minor version: install both
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
