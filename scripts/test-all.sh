#!/usr/bin/env bash
# Runs every test tier of weir from a fresh checkout:
#   unit and property tests, runtime tests under paused time, conformance suites
#   (memory, SQLite, filesystem; DynamoDB and S3 on moto, S3 on s3s-fs, Kinesis on
#   ferrokinesis and kinesis-mock), the binary's end-to-end tests, the two-worker
#   SIGKILL test in tests/, and the benchmarks once in test mode; every fuzz target
#   under fuzz/ for 30 s (scripts/fuzz.sh; built beside the tests; the config loader's,
#   fuzz/config/, replays its corpus in the workspace tests); then deploy/'s static
#   checks and the fleet test: weir's image built with podman and run as a fleet of
#   containers (tests/fleet/run.sh; needs root to install podman on a fresh machine).
# Emulators are installed (pinned versions, once) by tests/emulators/install.sh; every
# test starts its own on a free port and stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in cargo python3 node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$tool not found: the tests need Rust, Python 3 (venv) and Node.js with npm" >&2
    exit 1
  fi
done

# shellcheck source=scripts/stages.sh
. ./scripts/stages.sh
stage "emulators"
./tests/emulators/install.sh
stage "deploy tools"
# kubectl and promtool for crates/weir/tests/kubernetes.rs (and the lint stage below);
# installed, so a test that cannot find them fails instead of skipping.
./deploy/lint.sh --install
export WEIR_REQUIRE_TOOLS=1
# No separate `cargo build`: `cargo test --workspace` builds the binaries the end-to-end
# tests run (target/debug/weir, target/debug/weir-tool-minutes) with the tests' feature
# set; a `cargo build -p weir` first compiled most dependencies a second time.
# The fuzz targets build beside the tests, at low priority: the tests spend much of
# their time waiting on emulators and child processes, and the build took 18 minutes
# of the fuzz stage when it ran alone.
fuzz_build_log="$(mktemp)"
# The config loader's target (fuzz/config/, the whole `weir` crate) is not built here:
# its corpus replays in crates/weir/tests/config_corpus.rs; scripts/fuzz.sh fuzzes it.
export FUZZ_PROJECTS=.
nice -n 19 ./scripts/fuzz.sh --build-only >"$fuzz_build_log" 2>&1 &
fuzz_build=$!
stage "workspace build and tests (fuzz targets building beside them)"
# `cargo test --workspace --all-targets`, its test binaries run two at a time.
tests_status=0
./scripts/test_binaries.py --locked --workspace --all-targets || tests_status=$?
stage "fuzz build (what was left of it)"
if ! wait "$fuzz_build"; then
  cat "$fuzz_build_log" >&2
  echo "building the fuzz targets failed" >&2
  exit 1
fi
[ "$tests_status" -eq 0 ] || exit "$tests_status"
stage "fuzz (30 s per target, two at a time)"
./scripts/fuzz.sh --no-build 30
stage "deploy lint"
./deploy/lint.sh
stage "fleet test"
# The image users build, exactly as docs/deploying.md builds it: deploy/Dockerfile with
# its own build stage and its default build arguments (PROFILE=dist, the shipped
# release build), on the builder and runtime bases it names (or stand-ins made from the
# same Debian packages where their registries cannot be reached). The longest stage
# (a cold release build); WEIR_IMAGE_PROFILE=dev builds the debug profile instead, and
# WEIR_IMAGE_BINARY=prebuilt takes a binary built on the host.
WEIR_IMAGE_BINARY="${WEIR_IMAGE_BINARY:-build}" WEIR_IMAGE_PROFILE="${WEIR_IMAGE_PROFILE:-dist}" WEIR_SKIP_CARGO=1 \
  ./tests/fleet/run.sh
