#!/usr/bin/env bash
# The fleet test: builds the image (deploy/container/build-image.sh: podman, a local
# Debian base, the `dist` binary; scripts/test-all.sh builds it with the Dockerfile's
# own build stage, as users do) and runs tests/fleet/fleet.rs against it.
#   WEIR_FLEET_RATE (events/s, default 700) and WEIR_FLEET_MIN_EVENTS (default 50,000)
#   size the run; WEIR_IMAGE names the image.
set -euo pipefail
cd "$(dirname "$0")/../.."
export WEIR_IMAGE="${WEIR_IMAGE:-localhost/weir:dev}"
./deploy/container/build-image.sh
./tests/emulators/install.sh
# --workspace: the feature set of scripts/test-all.sh's build, so nothing recompiles.
WEIR_FLEET_IMAGE="$WEIR_IMAGE" cargo test --locked --workspace --test fleet -- --ignored --nocapture
