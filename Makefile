# desi-gpu-map: build, demo, test, install.
# `make demo` and `make test` need root on Debian: they install Slurm from
# Debian's packages if it is missing and run a throw-away local cluster.

CARGO ?= cargo
PREFIX ?= /usr/local
DESTDIR ?=
# cargo's CARGO_TARGET_DIR (packaging/deb/build-deb.sh builds each Slurm
# series in its own) decides where `make install` takes the build from.
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
SO := $(TARGET_DIR)/release/libdesi_gpu_map_spank.so
FLUX_SO := $(TARGET_DIR)/release/libdesi_gpu_map_flux.so
BIN := $(TARGET_DIR)/release/desi-gpu-map
# The command linked statically (Cargo.toml): installed as desi-gpu-map and
# desi-gpu-map-prolog, BIN (dynamic) in LIBEXECDIR for NVML.
PROLOG := $(TARGET_DIR)/release/desi-gpu-map-prolog

.PHONY: all build release deps build-deps nvidia flux demo test check unit flux-test cluster-test clean

all: build

# Everything the suite needs from Debian's packages (tests/deps.sh); waits
# for an install that `make test` started in the background.
deps:
	bash tests/deps.sh

# What the builds alone need: a C compiler, Slurm's headers, flux-core's
# build packages.
build-deps:
	bash tests/deps.sh build

# Debian's real NVML and MPS binaries (non-free), unpacked for the tests into
# /var/tmp/desi-gpu-map-nvidia, never installed (tests/nvidia/fetch.sh).
nvidia:
	bash tests/nvidia/fetch.sh >/dev/null

# flux-security 0.15.0 and flux-core 0.88.0 (--with-flux-security) built from
# their source snapshots into target/flux/install, once (tests/flux/build.sh;
# about 5 minutes on 2 cores), for the Flux suites.
flux: build-deps
	bash tests/flux/build.sh >/dev/null

build: build-deps release

# The release build alone (packaging/deb/build-deb.sh, the series builds).
# The prolog's binary is linked statically where glibc's static libraries
# are installed (Debian's libc6-dev, RHEL's glibc-static); elsewhere it is
# linked as the command is, and said. Not position-independent: a static
# PIE relocates itself at every start, every task's (docs/performance.md).
release:
	$(CARGO) build --release --workspace --locked
	$(CARGO) rustc --release --locked --bin desi-gpu-map-prolog --features static-prolog \
		-- -C target-feature=+crt-static -C relocation-model=static 2>$(TARGET_DIR)/prolog-static.log || { \
		echo "warning: cannot link desi-gpu-map-prolog statically ($(TARGET_DIR)/prolog-static.log); linking it dynamically" >&2; \
		$(CARGO) rustc --release --locked --bin desi-gpu-map-prolog --features static-prolog; }

demo: deps build nvidia
	bash tests/demo.sh

# Everything CI runs: style, lints, unit and property tests, then the
# integration suite against a real local Slurm cluster.
# On a fresh machine the first minutes are Debian's packages and the first
# build of every crate and of flux-core, all on the same CPUs: flux-core's
# build starts (niced, in the background) as soon as its own packages are
# in, the rest of the packages install in the background beside the lints,
# and what needs them waits for them (tests/flux/build.sh --start,
# tests/deps.sh --start; docs/testing.md).
test: build-deps
	bash tests/flux/build.sh --start
	bash tests/deps.sh --start
	$(MAKE) check unit package-test flux-test cluster-test

# One clippy run with every feature checks every target: the features only
# add targets (the two cluster suites', the static prolog's; Cargo.toml).
check: build-deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked --features cluster-tests,flux-tests,static-prolog -- -D warnings

# The tests are built before the packages they run with are waited for:
# on a fresh machine, beside their install (make test).
unit: build-deps
	$(CARGO) test --workspace --locked --no-run
	$(MAKE) deps nvidia
	$(CARGO) test --workspace --locked

# The Flux shell plugin in standalone Flux instances and a multi-user system
# instance with the setuid IMP (tests/flux/; as root: it makes and deletes
# users of its own); its in-Slurm suite runs with the cluster's
# (tests/cluster/flux.rs).
flux-test: build flux nvidia
	$(CARGO) test --locked --features flux-tests --test flux

# SERIES=22.05 (or "22.05,24.11") runs only those Slurm series; default all
# in tests/cluster/series (the host's, then Debian roots; tests/run-cluster-tests.sh).
SERIES ?= $(shell awk '!/^\#/ && NF {print $$1}' tests/cluster/series | paste -sd,)
cluster-test: build nvidia flux
	SERIES="$(SERIES)" bash tests/run-cluster-tests.sh

clean:
	$(CARGO) clean

# ---------------------------------------------------------------- install
# make install [DESTDIR=...] [PREFIX=/usr/local] [SLURM_PLUGIN_DIR=...]
#              [SYSCONFDIR=/etc] [FLUX_PLUGIN_DIR=...]
# Installs what `make build` made: the plugin into Slurm's plugin directory,
# the Flux shell plugin into Flux's (its default initrc loads every .so
# there), the command (static, and dynamic in LIBEXECDIR), the man pages, and the plugstack snippet unless one is there:
# the admin's snippet (arguments, required/optional) is never overwritten.
# `install` unlinks before copying, so running slurmstepds keep their copy.
SYSCONFDIR ?= /etc
BINDIR ?= $(PREFIX)/bin
# The dynamic build, which the static one runs where it needs NVML:
# src/handover.rs looks for it in BINDIR/../libexec/desi-gpu-map/, so
# LIBEXECDIR must stay BINDIR's sibling libexec.
LIBEXECDIR ?= $(PREFIX)/libexec
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share/desi-gpu-map
PLUGSTACK_DIR ?= $(SYSCONFDIR)/slurm/plugstack.conf.d
# Debian installs shared objects 0644; RPM's strip and dependency scripts want 0755.
PLUGIN_MODE ?= 0644
# Slurm's PluginDir, found at most once and only when needed (see the script).
# Flux's shell plugin directory: flux-core's pkg-config says where, else
# PREFIX's lib/flux/shell/plugins.
ifeq ($(origin FLUX_PLUGIN_DIR),undefined)
FLUX_PLUGIN_DIR = $(eval FLUX_PLUGIN_DIR := $$(shell pkg-config --variable=fluxshellpluginpath flux-core 2>/dev/null || echo $(PREFIX)/lib/flux/shell/plugins))$(FLUX_PLUGIN_DIR)
endif
ifeq ($(origin SLURM_PLUGIN_DIR),undefined)
SLURM_PLUGIN_DIR = $(eval SLURM_PLUGIN_DIR := $$(shell sh packaging/slurm-plugin-dir.sh))$(SLURM_PLUGIN_DIR)
endif

.PHONY: install man package-deb package-rpm package-test

install:
	@for f in $(SO) $(FLUX_SO) $(BIN) $(PROLOG); do [ -f "$$f" ] || { echo "make install: $$f is missing; run make build first" >&2; exit 1; }; done
	@[ -n "$(SLURM_PLUGIN_DIR)" ] || { echo "make install: set SLURM_PLUGIN_DIR to Slurm's PluginDir" >&2; exit 1; }
	install -d $(DESTDIR)$(SLURM_PLUGIN_DIR) $(DESTDIR)$(BINDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(PLUGSTACK_DIR)
	install -m $(PLUGIN_MODE) $(SO) $(DESTDIR)$(SLURM_PLUGIN_DIR)/desi_gpu_map.so
	install -d $(DESTDIR)$(FLUX_PLUGIN_DIR)
	install -m $(PLUGIN_MODE) $(FLUX_SO) $(DESTDIR)$(FLUX_PLUGIN_DIR)/desi_gpu_map.so
# Every task starts the command (exec, the task prolog): the static build
# starts fastest, so it is the one on PATH, under both names.
	install -m 0755 $(PROLOG) $(DESTDIR)$(BINDIR)/desi-gpu-map
	install -m 0755 $(PROLOG) $(DESTDIR)$(BINDIR)/desi-gpu-map-prolog
	install -D -m 0755 $(BIN) $(DESTDIR)$(LIBEXECDIR)/desi-gpu-map/desi-gpu-map
	install -m 0644 packaging/man/desi-gpu-map.1 $(DESTDIR)$(MANDIR)/man1/desi-gpu-map.1
	install -m 0644 packaging/man/desi_gpu_map.8 $(DESTDIR)$(MANDIR)/man8/desi_gpu_map.8
# podman-hpc's module, for the site to copy into its modules.d (docs/user-guide.md, Containers).
	install -D -m 0644 packaging/podman-hpc/desi-gpu-map.yaml $(DESTDIR)$(DATADIR)/podman-hpc/desi-gpu-map.yaml
# An existing snippet is kept; one of 0.1.0 or earlier, named desi-gpu-map.conf,
# is renamed (packaging/README.md, "The snippet's name"). A kept snippet that
# loads the plugin from another path than the one just installed is said.
	@conf=$(DESTDIR)$(PLUGSTACK_DIR)/zz-desi-gpu-map.conf; old=$(DESTDIR)$(PLUGSTACK_DIR)/desi-gpu-map.conf; \
	if [ -e "$$conf" ]; then echo "keeping existing $$conf"; \
	elif [ -e "$$old" ]; then mv "$$old" "$$conf" && echo "renamed $$old to $$conf, kept as it was (packaging/README.md: The snippet's name)"; else \
		sed 's|@SLURM_PLUGIN_DIR@|$(SLURM_PLUGIN_DIR)|g' packaging/zz-desi-gpu-map.conf >"$$conf.tmp" && \
		chmod 0644 "$$conf.tmp" && mv "$$conf.tmp" "$$conf" && echo "installed $$conf"; fi; \
	if [ -e "$$old" ]; then echo "warning: $$old loads the plugin a second time; move your edits into $$conf and delete it"; fi; \
	so=$(SLURM_PLUGIN_DIR)/desi_gpu_map.so; \
	for named in $$(sed -n 's/^[[:space:]]*\(required\|optional\)[[:space:]]\{1,\}\([^[:space:]]*desi_gpu_map\.so\).*/\2/p' "$$conf"); do \
		case $$named in /*) at=$$named ;; *) at=$(SLURM_PLUGIN_DIR)/$$named ;; esac; \
		[ "$$at" = "$$so" ] || echo "warning: $$conf loads $$named, not $$so, which make install just installed; edit its path to $$so (or install with SLURM_PLUGIN_DIR=$$(dirname $$at))"; \
	done
	@if [ -z "$(DESTDIR)" ] && ! grep -qs '^[[:space:]]*include[[:space:]]*$(PLUGSTACK_DIR)/' $(SYSCONFDIR)/slurm/plugstack.conf; then \
		echo "note: $(SYSCONFDIR)/slurm/plugstack.conf does not include $(PLUGSTACK_DIR)/*.conf; add:"; \
		echo "  include $(PLUGSTACK_DIR)/*.conf"; fi

# Regenerates packaging/man/desi-gpu-map.1 from src/args.rs (src/manpage.rs).
man:
	UPDATE_MAN=1 $(CARGO) test --locked --bin desi-gpu-map manpage

package-deb:
	bash packaging/deb/build-deb.sh

package-rpm:
	bash packaging/rpm/build-rpm.sh

# Builds both packages and checks them; no cluster needed.
package-test: deps
	bash tests/package/package-tests.sh
