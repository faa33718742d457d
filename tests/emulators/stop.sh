#!/usr/bin/env bash
# Stops an emulator started by start.sh: stop.sh <pid>
set -u
pid="$1"
kill "$pid" 2>/dev/null || exit 0
for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
