# Makefile: build, install and test notif_deliver with PGXS.
#
#   make                 build the extension
#   make install         install it into the server found by pg_config
#   make installcheck    pg_regress (sql/) and TAP tests (test/t/) against it
#   make test            all of the above on a fresh machine (test/run)
#   make test-ha         Patroni end to end, slow (test/run --ha; test/ha/*.pl)
#   make test-matrix     deb, test and test-ha on PostgreSQL 17 and 18 (Debian 13 and
#                        unstable chroots, kept between runs), then test-upgrade (test/matrix)
#   make test-upgrade    pg_upgrade of a cluster in use from 15 to 17 (test/upgrade/run)
#   make demo            a throwaway cluster delivering the example types (test/demo)
#   make bench           every benchmark of doc/benchmarks.md (test/bench/run); keeps each
#                        script's results in test/bench/results/ and writes doc/benchmarks.md
#                        and doc/benchmarks-peers.md from all of them
#   make soak            an hour at a steady rate with a short retention: sizes, dead tuples,
#                        autovacuum runs, OTP p99 a minute (test/bench/soak.sh; not in CI or bench);
#                        keeps its results in test/bench/results/, writes doc/img/soak.png and
#                        doc/benchmarks.md
#   make bench-majors    the headline enqueue and dispatch benchmarks on 15, 17 and 18 side by
#                        side (test/bench/majors.sh; after make test-matrix)
#   make deb             the Debian package postgresql-N-notif-deliver for this machine's major,
#                        in build/deb/, and for 17 and 18 in build/deb/pgN/ where their chroots
#                        exist (release/deb)
#   make deb-check       make deb, then install, test and purge the package (release/package_check)
#   make dist            the PGXN archive notif_deliver-<version>.zip of a tag (release/dist)
#   make metacheck       META.json against the PGXN meta spec and the control files (release/meta_check)

# The router extension notif_deliver_router (SQL only, on a router database
# in front of the shards; doc/shards.md) has a folder of its own, router/,
# with its own Makefile: all, install, uninstall and clean run it (below)
EXTENSION = notif_deliver
MODULE_big = notif_deliver
# every .c of src/ and its subsystem folders (src/README.md): a new file
# needs no line here
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c src/*/*.c)))

# The install script of the version in progress is built, never edited: the
# last released one followed by the update to it (a schema change is
# written once, in the update script)
NOTIF_INSTALL_SQL = notif_deliver--1.4.sql
DATA = $(filter-out $(NOTIF_INSTALL_SQL),$(wildcard notif_deliver--*.sql))
DATA_built = $(NOTIF_INSTALL_SQL)

REGRESS = setup lifecycle excerpt transport schema enqueue enqueue_paths privileges push replay stats operations shards upgrade
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CPPFLAGS = -I$(srcdir)/src $(shell curl-config --cflags 2>/dev/null)
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
# libcurl for the calls, OpenSSL's libcrypto to sign push tokens (token.c)
SHLIB_LINK = $(shell curl-config --libs 2>/dev/null) -lcrypto

# On a bare machine `make test` runs before pg_config exists: test/run
# installs it, then builds with PGXS.
PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
endif

# PGXS does not track header dependencies: every object depends on every header
$(OBJS): $(wildcard $(srcdir)/src/*.h $(srcdir)/src/*/*.h)

$(NOTIF_INSTALL_SQL): notif_deliver--1.3.sql notif_deliver--1.3--1.4.sql
	{ printf -- '-- %s: built by make from %s and %s; edit those, not this file\n\n' $@ $^; \
	  cat $(word 1,$^); \
	  sed -e '/^-- complain if script is sourced/d' -e '/^\\echo Use "ALTER EXTENSION/d' $(word 2,$^); } > $@

# the router: its own Makefile, with the same pg_config (and DESTDIR, which
# make passes on)
.PHONY: router-all router-install router-uninstall router-clean
all: router-all
install: router-install
uninstall: router-uninstall
clean: router-clean
router-install: router-all
router-all router-install router-uninstall router-clean:
	$(MAKE) -C $(srcdir)/router PG_CONFIG=$(PG_CONFIG) $(patsubst router-%,%,$@)

# the provider simulator the TAP tests, benchmarks and demo talk to
SIM = test/sim/provider_sim
$(SIM): test/sim/provider_sim.c test/sim/sim_resolve.c test/sim/sim_resolve.h test/sim/sim_batch.c test/sim/sim_batch.h
	$(MAKE) -C test/sim
# only the TAP tests talk to it (the installed-package check runs pg_regress alone)
ifneq ($(TAP_TESTS),)
installcheck: $(SIM)
endif

.PHONY: test test-ha test-matrix test-upgrade demo bench soak bench-majors deb deb-check dist metacheck
test:
	bash test/run

test-ha:
	bash test/run --ha

test-matrix:
	bash test/matrix

test-upgrade:
	bash test/upgrade/run

demo:
	bash test/demo

bench:
	bash test/bench/run

soak:
	SOAK_INSTALL=1 SOAK_DOC=1 SOAK_OUT=$${SOAK_OUT:-$$(mktemp -d /tmp/notif_soak_out.XXXXXX)} bash test/bench/soak.sh

bench-majors:
	bash test/bench/majors.sh

# Releases: the packaging reads what to ship from EXTENSION, MODULE_big and
# DATA above and router/Makefile's (make install), never from a list of its
# own.
deb:
	bash release/deb

deb-check: deb
	bash release/package_check

dist:
	bash release/dist

metacheck:
	perl release/meta_check
