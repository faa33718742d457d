#!/usr/bin/env bash
# Runs every test tier of weir from a fresh checkout:
#   unit and property tests, runtime tests under paused time, conformance suites
#   (memory, SQLite, filesystem; DynamoDB and S3 on moto, S3 on s3s-fs, Kinesis on
#   ferrokinesis and kinesis-mock), the binary's end-to-end tests, the two-worker
#   SIGKILL test in tests/, and the benchmarks once in test mode; every fuzz target
#   under fuzz/ for 30 s (scripts/fuzz.sh; built beside the tests); then deploy/'s static
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
# kubectl and promtool for crates/weir/tests/kubernetes.rs (and the lint stage below).
./deploy/lint.sh --install
# No separate `cargo build`: `cargo test --workspace` builds the binaries the end-to-end
# tests run (target/debug/weir, target/debug/weir-tool-minutes) with the tests' feature
# set; a `cargo build -p weir` first compiled most dependencies a second time.
# The fuzz targets build beside the tests, at low priority: the tests spend much of
# their time waiting on emulators and child processes, and the build took 18 minutes
# of the fuzz stage when it ran alone.
fuzz_build_log="$(mktemp)"
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
# The image holds the debug binary the tests above built (a cold `--profile dist`
# build took longer than all the tests); WEIR_IMAGE_PROFILE=dist tests the shipped one.
if [ "${WEIR_IMAGE_PROFILE:-dev}" = dev ]; then
  WEIR_IMAGE_PROFILE=dev WEIR_SKIP_CARGO=1 ./tests/fleet/run.sh
else
  ./tests/fleet/run.sh
fi
