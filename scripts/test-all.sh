#!/usr/bin/env bash
# Runs every test tier of weir from a fresh checkout:
#   unit and property tests, runtime tests under paused time, conformance suites
#   (memory, SQLite, filesystem; DynamoDB and S3 on moto, S3 on s3s-fs, Kinesis on
#   ferrokinesis and kinesis-mock), the binary's end-to-end tests, the two-worker
#   SIGKILL test in tests/, and the benchmarks once in test mode; every fuzz target
#   under fuzz/ for 30 s (scripts/fuzz.sh); then deploy/'s static
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
stage "build"
cargo build --locked -p weir -p weir-example-tool-minutes
stage "workspace tests"
cargo test --workspace --all-targets --locked --no-fail-fast
stage "fuzz (30 s per target)"
./scripts/fuzz.sh 30
stage "deploy lint"
./deploy/lint.sh
stage "fleet test"
./tests/fleet/run.sh
