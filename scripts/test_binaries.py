#!/usr/bin/env python3
"""Runs the workspace's test binaries, JOBS at a time, as `cargo test` would run them.

`cargo test --workspace --all-targets` runs its ~60 test binaries one after another,
and most of its run time is end-to-end tests waiting on emulators and child
processes: one core idles. Two cargo processes cannot share the work (each holds the
target directory's lock until it exits), so this builds every test binary with
`cargo test --no-run` and then runs them itself, each in its package's directory
(cargo's working directory for tests) with its own output kept whole, JOBS at once.
Prints each binary's output when it ends, then a table of the slowest binaries and
the failed ones; exits 1 if any failed.

    scripts/test_binaries.py [--jobs N] [CARGO_TEST_ARGS...]
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


# Test binaries that took longest in CI (of 60: 280, 210, 100, 60, 45 and 40 s).
SLOW = ["faults", "weir_archiver", "archive_crash", "seeds", "exactly_once", "storage_conformance"]


def build(cargo_args):
    """Builds the test binaries; returns (name, executable, directory) for each."""
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics", *cargo_args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    binaries = []
    for line in proc.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") == "compiler-message":
            # Errors and warnings, as cargo would have printed them.
            print(msg["message"].get("rendered", ""), end="", file=sys.stderr, flush=True)
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        target = msg["target"]
        kinds = target["kind"]
        # Test-mode builds (unit tests of libs and bins, integration tests) and the
        # harness-less tests and benches that `cargo test` runs as they are.
        if not msg["profile"]["test"] and not ({"test", "bench"} & set(kinds)):
            continue
        package = msg["package_id"]
        directory = os.path.dirname(msg["manifest_path"])
        name = f"{target['name']} ({'/'.join(kinds)}, {package.split('#')[0].rsplit('/', 1)[-1]})"
        binaries.append((name, msg["executable"], directory))
    if proc.returncode != 0:
        sys.exit(proc.returncode)
    return binaries


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args, cargo_args = parser.parse_known_args()
    binaries = build([a for a in cargo_args if a != "--"])
    # Longest first (seen in CI runs), so that the last to finish is a short one.
    binaries.sort(key=lambda b: SLOW.index(b[0].split(" ")[0]) if b[0].split(" ")[0] in SLOW else len(SLOW))
    print(f"running {len(binaries)} test binaries, {args.jobs} at a time", flush=True)
    lock = threading.Lock()
    results = []

    def run(entry):
        name, exe, directory = entry
        started = time.monotonic()
        proc = subprocess.run([exe], cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        took = time.monotonic() - started
        with lock:
            print(f"\n     Running {name} [{exe}] ({took:.1f} s)\n{proc.stdout}", end="", flush=True)
            results.append((name, proc.returncode, took))

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(run, binaries))

    print("\n| slowest test binaries | seconds |\n|---|---|")
    for name, _, took in sorted(results, key=lambda r: -r[2])[:15]:
        print(f"| {name} | {took:.0f} |")
    failed = [name for name, code, _ in results if code != 0]
    if failed:
        print("\nfailed test binaries:\n" + "\n".join(f"  {n}" for n in failed), file=sys.stderr)
        sys.exit(1)
    print(f"\nall {len(results)} test binaries passed")


if __name__ == "__main__":
    main()
