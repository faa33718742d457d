#!/usr/bin/env bash
# Runs every fuzz target under fuzz/ for SECONDS each (default 30; the closing runs
# used 600), seeded from fuzz/corpus/<target>/ (read only: new inputs go to a scratch
# directory, crashes to fuzz/artifacts/<target>/), and prints executions per target.
# Needs cargo-fuzz (installed here if missing) and libFuzzer's nightly flag, which
# RUSTC_BOOTSTRAP=1 gives a stable toolchain. No sanitizer: weir forbids unsafe code
# (workspace lint), so what the targets look for is panics, aborts, hangs and broken
# contracts, not memory errors.
#   scripts/fuzz.sh [--build-only | --no-build] [SECONDS] [TARGET...]
# --build-only builds the targets and stops (CI builds them beside the workspace tests,
# at low priority); --no-build fuzzes what is built. Targets fuzz $FUZZ_JOBS at a time
# (default: one per core), each libFuzzer process single-threaded.
# The targets live in two cargo-fuzz projects: fuzz/ and fuzz/config/ (the config
# loader's, which needs the whole `weir` crate). FUZZ_PROJECTS (default ". config",
# relative to fuzz/) chooses; CI (scripts/test-all.sh) fuzzes "." and replays the
# config target's corpus in crates/weir/tests/config_corpus.rs instead.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
build=1
fuzz=1
case "${1:-}" in
  --build-only) fuzz=0; shift ;;
  --no-build) build=0; shift ;;
esac
seconds=${1:-30}
shift || true
jobs=${FUZZ_JOBS:-$(nproc)}
export RUSTC_BOOTSTRAP=1
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
# 16 codegen units instead of cargo-fuzz's 1: the largest crates (the AWS SDK's, arrow,
# parquet) then compile on both cores; the targets fuzz a little slower. Build and run
# must pass the same flags, or the run rebuilds.
fuzz_flags=(--sanitizer none --codegen-units 16)
read -r -a projects <<<"${FUZZ_PROJECTS:-. config}"
if [ "$build" -eq 1 ]; then
  for p in "${projects[@]}"; do
    cargo fuzz build --fuzz-dir "$p" "${fuzz_flags[@]}"
  done
fi
[ "$fuzz" -eq 1 ] || exit 0
# Every target of the chosen projects, and the project each belongs to.
declare -A project_of=()
for p in "${projects[@]}"; do
  while read -r t; do project_of[$t]=$p; done < <(cargo fuzz list --fuzz-dir "$p")
done
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(printf '%s\n' "${!project_of[@]}" | sort)
fi
for t in "${targets[@]}"; do
  [ -n "${project_of[$t]:-}" ] || { echo "no fuzz target $t in ${projects[*]}" >&2; exit 2; }
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# One target: fuzz it, its exit status into $scratch/<target>.status.
fuzz_one() {
  local t=$1 status=0
  mkdir -p "corpus/$t" "$scratch/$t"
  cargo fuzz run --fuzz-dir "${project_of[$t]}" "${fuzz_flags[@]}" "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 >"$scratch/$t.log" 2>&1 || status=$?
  echo "$status" >"$scratch/$t.status"
}
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

printf '| target | seconds | executions | corpus (seeds + found) | findings |\n|---|---|---|---|---|\n' > "$scratch/table"
failed=0
for t in "${targets[@]}"; do
  log="$scratch/$t.log"
  status=$(cat "$scratch/$t.status" 2>/dev/null || echo 1)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  found=$(find "$scratch/$t" -type f | wc -l)
  seeds=$(find "corpus/$t" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    echo "fuzz target $t failed:" >&2
    tail -40 "$log" >&2
    finding="CRASH (see fuzz/${project_of[$t]#.}${project_of[$t]:+/}artifacts/$t)"
    failed=1
  else
    finding="none"
  fi
  printf '| %s | %s | %s | %s + %s | %s |\n' "$t" "$seconds" "$runs" "$seeds" "$found" "$finding" >> "$scratch/table"
done
cat "$scratch/table"
exit "$failed"
