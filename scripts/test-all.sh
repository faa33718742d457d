#!/usr/bin/env bash
# Runs every test tier of weir from a fresh checkout: unit and property tests, runtime
# tests under paused time, conformance suites (memory, SQLite, filesystem), the binary's
# end-to-end tests, and the benchmarks once in test mode.
# Later tiers that need emulators install and start them from tests/emulators/.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust (https://rustup.rs) first" >&2
  exit 1
fi

cargo test --workspace --all-targets --locked
