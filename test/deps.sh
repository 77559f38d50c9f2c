#!/usr/bin/env bash
# test/deps.sh: install the packages that building and testing notif_deliver
# need, if any is missing: on Debian 12 for PostgreSQL 15, or, with
# PGVERSION=17 or 18, inside the Debian 13 or unstable chroot that
# test/chroot makes for that major (postgresql-N-plproxy is for the router
# extension notif_deliver_router and test/t/021_shards.pl).  Root
# uses apt directly; anyone else gets told what to install.  With --bench,
# also what `make bench` needs (gnuplot-nox for the charts; PgQ and its
# ticker daemon pgqd for test/bench/peers.sh, whose npm peers that script
# installs itself); with --ha, what `make test-ha` needs (patroni, its etcd
# client python3-etcd, which Debian 13's patroni does not pull in without
# recommends, and etcd-server: their daemons are not started, as below).
# apt waits up to 5 minutes for another apt to release its lock.
#
# kannel and kannel-extras (the open-source SMS gateway and its fake SMSC)
# are for the end-to-end test test/t/008_kannel.pl only: root installs them
# with the rest (CI runs as root); where they cannot be installed, or for
# anyone else, a warning says that the test will be skipped.  Their daemons
# never start: a policy-rc.d denies it during the install (any policy-rc.d
# already there is put back after), and one found running afterwards is
# stopped.  So are prometheus's and prometheus-postgres-exporter's, which
# are also disabled at boot (below).
set -euo pipefail
# libssl-dev: push tokens are signed with OpenSSL (src/provider/token.c); nghttp2-proxy
# (nghttpx, the HTTP/2 TLS front) and libcryptx-perl (verifying RS256/ES256)
# for the push tests test/t/020_push.pl and 026; iproute2 (ss: the open
# connections 026 counts); prometheus (its promtool checks and unit-tests
# doc/prometheus_rules.yaml) and prometheus-postgres-exporter (scrapes
# doc/postgres_exporter.yaml) for test/t/042_alerts.pl
v=${PGVERSION:-15}
packages=(make gcc libc6-dev postgresql-$v postgresql-server-dev-$v postgresql-client-$v
	libcurl4-openssl-dev libssl-dev libipc-run-perl openssl bc procps curl
	nghttp2-proxy libcryptx-perl postgresql-$v-plproxy iproute2
	prometheus prometheus-postgres-exporter)
[ "${1:-}" = --bench ] && packages+=(gnuplot-nox postgresql-$v-pgq3 pgqd)
# the npm peers need Node 20 or newer: Debian 13 and unstable ship it (the
# chroots of 17 and 18); on Debian 12 (Node 18) bring your own, as this
# machine has (a node already on the PATH is used as it is)
# Node runs the Standard Webhooks reference verifier of test/t/048 too
! command -v node >/dev/null && [ "$v" != 15 ] && packages+=(nodejs npm)
[ "${1:-}" = --ha ] && packages+=(patroni python3-etcd etcd-server)
optional=(kannel kannel-extras)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# The npm packages the tests use, pinned, in one folder kept between runs
# (NOTIF_NPM_DIR): standardwebhooks, the reference library of the Standard
# Webhooks specification, which test/sim/webhook_receiver.js verifies each
# signed call with (test/t/048_webhook_signing.pl).  Installed by root only,
# once per version; anyone else is told the command.
NPM_TEST_PACKAGES='{"standardwebhooks": "1.3.0"}'
npm_dir=${NOTIF_NPM_DIR:-/var/cache/notif_deliver/npm}
npm_deps()
{
	local want
	want=$(printf '{ "name": "notif-test-npm", "private": true, "dependencies": %s }' "$NPM_TEST_PACKAGES")
	[ "$(cat "$npm_dir/package.json" 2>/dev/null)" = "$want" ] &&
		[ -f "$npm_dir/node_modules/standardwebhooks/package.json" ] && return 0
	if [ "$(id -u)" != 0 ] || ! command -v npm >/dev/null; then
		echo "missing npm packages $NPM_TEST_PACKAGES in $npm_dir (test/t/048 is skipped);" \
			"as root: test/deps.sh" >&2
		return 0
	fi
	echo "== npm packages $NPM_TEST_PACKAGES into $npm_dir"
	mkdir -p "$npm_dir"
	echo "$want" >"$npm_dir/package.json"
	(cd "$npm_dir" && npm install --no-audit --no-fund --loglevel=error >npm.log 2>&1) ||
		{ cat "$npm_dir/npm.log" >&2; rm -f "$npm_dir/package.json"; return 1; }
}

missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
missing_optional=()
for p in "${optional[@]}"; do installed "$p" || missing_optional+=("$p"); done
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
	npm_deps
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	if [ ${#missing_optional[@]} -gt 0 ]; then
		echo "missing packages: ${missing_optional[*]}; the Kannel test will be skipped;" \
			"install them with: sudo apt-get install ${missing_optional[*]}" >&2
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		echo "missing packages: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
		exit 1
	fi
	npm_deps
	exit 0
fi

echo "== installing ${missing[*]} ${missing_optional[*]}"
export DEBIAN_FRONTEND=noninteractive

# The server package would start a cluster of its own, kannel a bearerbox
# and a wapbox, pgqd its ticker: not wanted here.  Deny every daemon start
# during the install, then put back whatever policy was there before.
policy=/usr/sbin/policy-rc.d
saved=
if [ -e "$policy" ] || [ -L "$policy" ]; then
	saved=$(mktemp /usr/sbin/.policy-rc.d.saved.XXXXXX)
	mv -f "$policy" "$saved"
fi
restore_policy()
{
	rm -f "$policy"
	if [ -n "$saved" ]; then mv -f "$saved" "$policy"; fi
}
trap restore_policy EXIT
printf '#!/bin/sh\n# test/deps.sh: no daemon starts during this install\nexit 101\n' >"$policy"
chmod +x "$policy"

apt_get() { apt-get -o DPkg::Lock::Timeout=300 "$@"; }
apt_get update -qq
# postgresql-N and its headers must be the same minor version: install both
if [ ${#missing[@]} -gt 0 ]; then
	apt_get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi
if [ ${#missing_optional[@]} -gt 0 ] &&
	! apt_get install -y -qq --no-install-recommends "${optional[@]}" >/dev/null; then
	echo "could not install ${optional[*]}: the Kannel test will be skipped" >&2
fi

# Belt and braces: if the kannel package started its daemons anyway (a
# policy-rc.d is only advisory for init systems that ignore it), stop them
# as its init script does: the run_kannel_box supervisor named by each pid
# file, which stops its box.  Never a test's own boxes (no pid file there).
for pidfile in /var/run/kannel/kannel_{bearerbox,wapbox,smsbox}.pid; do
	[ -f "$pidfile" ] || continue
	rc=0
	start-stop-daemon --stop --quiet --retry 5 --pidfile "$pidfile" \
		--exec /usr/sbin/run_kannel_box || rc=$?
	case $rc in
	0) echo "== stopped the kannel daemon the package started ($pidfile)" ;;
	1) ;; # not running
	*) echo "could not stop the kannel daemon of $pidfile" >&2; exit 1 ;;
	esac
done

# prometheus and prometheus-postgres-exporter come with services enabled at
# boot: a Prometheus server on port 9090, and an exporter on 9187 whose
# default DATA_SOURCE_NAME is empty (under systemd, a service that keeps
# failing).  The tests start their own exporter on a free port and never
# the server.  Each of the two that this run installed is disabled at boot
# and stopped if it started anyway; one installed before is left as it was.
for service in prometheus prometheus-postgres-exporter; do
	[[ " ${missing[*]} " == *" $service "* ]] || continue
	# update-rc.d: the init script's links (a systemctl without SysV support,
	# as unstable's, leaves them); systemctl: the unit.  Both work without
	# systemd running (a chroot).
	if [ -x "/etc/init.d/$service" ]; then
		update-rc.d "$service" disable >/dev/null 2>&1 || true
	fi
	if command -v systemctl >/dev/null; then
		systemctl disable --quiet "$service.service" >/dev/null 2>&1 || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl stop "$service.service" ||
			{ echo "could not stop the $service service the package started" >&2; exit 1; }
	elif [ -x "/etc/init.d/$service" ]; then
		# the daemon of the init script's pid file, if there is one
		"/etc/init.d/$service" stop >/dev/null 2>&1 ||
			{ echo "could not stop the $service daemon the package started" >&2; exit 1; }
	fi
done
npm_deps
exit 0
