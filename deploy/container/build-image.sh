#!/usr/bin/env bash
# Builds weir's container image on this machine with podman, without an image registry:
#   1. installs podman, runc and mmdebstrap (Debian) when missing;
#   2. makes the local base image localhost/weir-base:bookworm with mmdebstrap: glibc,
#      libgcc and CA certificates, the same contents as the default distroless base;
#   3. builds weir with the `dist` profile on the host (target/dist/weir);
#   4. builds deploy/Dockerfile with BINARY=prebuilt on that base, as $WEIR_IMAGE
#      (default localhost/weir:dev), and prints its size.
# Users with Docker and registry access build the same Dockerfile without arguments.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF="$PWD/deploy/container/containers.conf"
image="${WEIR_IMAGE:-localhost/weir:dev}"
base=localhost/weir-base:bookworm

missing=()
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (apt)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc mmdebstrap >/dev/null
fi

if ! podman image exists "$base"; then
  echo "making $base with mmdebstrap" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # `extract` runs no maintainer scripts (nor hooks), so the CA bundle that
  # update-ca-certificates would write is made here, and docs, locales and gconv modules
  # are removed as distroless does.
  root="$tmp/rootfs"
  mmdebstrap --quiet --variant=extract --include=libc6,libgcc-s1,ca-certificates --format=directory \
    bookworm "$root"
  cat "$root"/usr/share/ca-certificates/mozilla/*.crt > "$root"/etc/ssl/certs/ca-certificates.crt
  rm -rf "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale "$root"/usr/share/lintian \
    "$root"/usr/lib/x86_64-linux-gnu/gconv "$root"/var/cache/* "$root"/var/lib/apt/lists/*
  mkdir -p "$root"/tmp && chmod 1777 "$root"/tmp
  tar -C "$root" -cf "$tmp/base.tar" .
  podman import --quiet "$tmp/base.tar" "$base" >/dev/null
fi

if [ "${WEIR_SKIP_CARGO:-0}" != 1 ]; then
  cargo build --locked --profile dist -p weir
fi
podman build --quiet --pull=never --format docker \
  --build-arg BASE_IMAGE="$base" --build-arg BINARY=prebuilt \
  -f deploy/Dockerfile -t "$image" . >/dev/null
size=$(podman image inspect "$image" --format '{{.Size}}')
echo "built $image: $((size / 1000000)) MB uncompressed (binary $(($(stat -c %s target/dist/weir) / 1000000)) MB)"
