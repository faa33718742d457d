#!/usr/bin/env bash
# Runs every fuzz target under fuzz/ for SECONDS each (default 30; the closing runs
# used 600), seeded from fuzz/corpus/<target>/ (read only: new inputs go to a scratch
# directory, crashes to fuzz/artifacts/<target>/), and prints executions per target.
# Needs cargo-fuzz (installed here if missing) and libFuzzer's nightly flag, which
# RUSTC_BOOTSTRAP=1 gives a stable toolchain. No sanitizer: weir forbids unsafe code
# (workspace lint), so what the targets look for is panics, aborts, hangs and broken
# contracts, not memory errors.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${1:-30}
shift || true
export RUSTC_BOOTSTRAP=1
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
cargo fuzz build --sanitizer none
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '| target | seconds | executions | corpus (seeds + found) | findings |\n|---|---|---|---|---|\n' > "$scratch/table"
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "$scratch/$t"
  log="$scratch/$t.log"
  status=0
  cargo fuzz run --sanitizer none "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1 || status=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  found=$(find "$scratch/$t" -type f | wc -l)
  seeds=$(find "corpus/$t" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    echo "fuzz target $t failed:" >&2
    tail -40 "$log" >&2
    finding="CRASH (see fuzz/artifacts/$t)"
  else
    finding="none"
  fi
  printf '| %s | %s | %s | %s + %s | %s |\n' "$t" "$seconds" "$runs" "$seeds" "$found" "$finding" >> "$scratch/table"
  [ "$status" -eq 0 ] || { cat "$scratch/table"; exit 1; }
done
cat "$scratch/table"
