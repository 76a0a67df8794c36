# desi-gpu-map: build, demo, test, install.
# `make demo` and `make test` need root on Debian: they install Slurm from
# Debian's packages if it is missing and run a throw-away local cluster.

CARGO ?= cargo
PREFIX ?= /usr/local
DESTDIR ?=
SO := target/release/libdesi_gpu_map_spank.so
BIN := target/release/desi-gpu-map

.PHONY: all build deps demo test check unit cluster-test clean

all: build

deps:
	bash tests/deps.sh

build: deps
	$(CARGO) build --release --workspace --locked

demo: build
	bash tests/demo.sh

# Everything CI runs: style, lints, unit and property tests, then the
# integration suite against a real local Slurm cluster.
test: check unit cluster-test

check: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit: deps
	$(CARGO) test --workspace --locked

cluster-test: build
	bash tests/run-cluster-tests.sh

clean:
	$(CARGO) clean
