#!/usr/bin/env bash
# Builds the image docs/deploying.md tells users to build (deploy/Dockerfile) with podman, on
# its own base image, then runs and checks it (deploy/container/check-image.sh):
#   1. installs podman, runc and mmdebstrap (Debian) when missing;
#   2. the runtime base is the Dockerfile's, gcr.io/distroless/cc-debian12:nonroot,
#      pulled when that registry answers; where it cannot (CI: only package registries
#      are reachable) the same image is made from the same Debian bookworm packages
#      (distroless's cc-debian12 package list: base-files, netbase, tzdata, media-types,
#      CA certificates, libc6, libssl3, libgcc-s1, libgomp1, libstdc++6, gcc-12-base;
#      its passwd/group with nonroot 65532, /home/nonroot, /tmp, nsswitch.conf,
#      os-release; USER 65532, WORKDIR /home/nonroot, PATH, SSL_CERT_FILE) as
#      localhost/distroless/cc-debian12:nonroot;
#   3. the binary, by WEIR_IMAGE_BINARY:
#      prebuilt (default)  `cargo build --locked --profile dist -p weir` on the host,
#                          copied by the Dockerfile (BINARY=prebuilt): the runtime stage
#                          users build, with the binary their build stage would make
#                          (same profile, same locked dependencies, same Rust 1.95);
#                          with WEIR_IMAGE_PROFILE=dev, the debug build instead
#                          (target/debug/weir): CI's fleet test, whose tests built
#                          it already, so that CI does not compile weir a third time;
#      build               the Dockerfile's `build` stage as users run it, on
#                          docker.io/library/rust:1.95-slim-bookworm, or where that
#                          cannot be pulled on localhost/rust:1.95-slim-bookworm (Debian
#                          bookworm, gcc, libc6-dev, CA certificates and this host's Rust
#                          1.95 toolchain, which is what that image holds); crates come
#                          from crates.io. A full release build: 21 minutes measured on
#                          2 cores; CI's fleet test builds this stage as it is,
#                          and WEIR_IMAGE_PROFILE=dev with the Dockerfile's PROFILE=dev;
#      WEIR_SKIP_CARGO=1 uses the prebuilt binary as it is, without a `cargo build`;
#   4. tags $WEIR_IMAGE (default localhost/weir:dev) and prints its size and the times;
#   5. runs deploy/container/check-image.sh on it (WEIR_SKIP_IMAGE_CHECK=1 skips).
set -euo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF="$PWD/deploy/container/containers.conf"
image="${WEIR_IMAGE:-localhost/weir:dev}"
binary="${WEIR_IMAGE_BINARY:-prebuilt}"
case "$binary" in prebuilt | build) ;; *) echo "WEIR_IMAGE_BINARY: prebuilt or build, not $binary" >&2; exit 2 ;; esac
profile="${WEIR_IMAGE_PROFILE:-dist}"
case "$profile" in dist) binary_dir=dist ;; dev) binary_dir=debug ;; *) echo "WEIR_IMAGE_PROFILE: dist or dev, not $profile" >&2; exit 2 ;; esac
# The Dockerfile's defaults, so that the stand-ins follow it.
arg_default() { sed -n "s/^ARG $1=//p" deploy/Dockerfile; }
base_image="$(arg_default BASE_IMAGE)"
builder_image="$(arg_default BUILDER_IMAGE)"
# Bump to remake the stand-ins when their recipe changes.
recipe=2
started=$SECONDS

missing=()
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (apt)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc mmdebstrap >/dev/null
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Whether image $1 is here, made by this recipe or pulled.
have() { [ "$(podman image inspect "$1" --format '{{index .Labels "weir.stand-in-recipe"}}' 2>/dev/null)" = "$recipe" ]; }
# Pulls $1 if its registry answers (a refusal comes back at once, offline).
pull() { podman image exists "$1" || timeout 300 podman pull --quiet "$1" >/dev/null 2>&1; }

# distroless cc-debian12:nonroot from Debian's packages, as distroless assembles it:
# the data of each listed package unpacked (no maintainer scripts, no dependencies
# beyond the list, no dpkg or apt), a record per package in /var/lib/dpkg/status.d.
make_distroless() {
  local name=$1 root="$tmp/distroless" fetch="$tmp/fetch" deb package
  echo "making $name from Debian bookworm packages (a stand-in for $base_image)" >&2
  local packages=(base-files netbase tzdata media-types ca-certificates libc6 libssl3 libgcc-s1 libgomp1 libstdc++6 gcc-12-base)
  # mmdebstrap resolves the versions and fetches the .debs (with dependencies that
  # distroless leaves out, skipped below).
  mmdebstrap --quiet --variant=extract --skip=cleanup/apt/cache --include="$(IFS=,; echo "${packages[*]}")" \
    --format=directory bookworm "$fetch"
  mkdir -p "$root/var/lib/dpkg/status.d"
  for deb in "$fetch"/var/cache/apt/archives/*.deb; do
    package="$(dpkg-deb -f "$deb" Package)"
    case " ${packages[*]} " in *" $package "*) ;; *) continue ;; esac
    dpkg-deb -x "$deb" "$root"
    dpkg-deb -f "$deb" > "$root/var/lib/dpkg/status.d/$package"
  done
  [ "$(find "$root/var/lib/dpkg/status.d" -type f | wc -l)" = "${#packages[@]}" ] || {
    echo "not every package of ${packages[*]} was fetched" >&2
    exit 1
  }
  rm -rf "$fetch"
  # The CA bundle that update-ca-certificates would write.
  mkdir -p "$root/etc/ssl/certs"
  cat "$root"/usr/share/ca-certificates/mozilla/*.crt > "$root/etc/ssl/certs/ca-certificates.crt"
  cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat > "$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
  printf 'passwd:         compat\ngroup:          compat\nshadow:         compat\ngshadow:        files\n\nhosts:          files dns\nnetworks:       files\n\nprotocols:      db files\nservices:       db files\nethers:         db files\nrpc:            db files\n\nnetgroup:       nis\n' \
    > "$root/etc/nsswitch.conf"
  rm -f "$root/etc/os-release"
  cat > "$root/etc/os-release" <<'EOF'
PRETTY_NAME="Distroless"
NAME="Debian GNU/Linux"
ID="debian"
VERSION_ID="12"
VERSION="Debian GNU/Linux 12 (bookworm)"
HOME_URL="https://github.com/GoogleContainerTools/distroless"
SUPPORT_URL="https://github.com/GoogleContainerTools/distroless/blob/master/README.md"
BUG_REPORT_URL="https://github.com/GoogleContainerTools/distroless/issues/new"
EOF
  install -d -m 0700 "$root/root"
  install -d -m 0755 "$root/home"
  install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
  install -d -m 1777 "$root/tmp"
  tar --numeric-owner -C "$root" -cf "$tmp/distroless.tar" .
  podman import --quiet \
    --change 'USER 65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change "LABEL weir.stand-in-recipe=$recipe" \
    --change "LABEL weir.stand-in-for=$base_image" \
    "$tmp/distroless.tar" "$name" >/dev/null
  rm -rf "$root" "$tmp/distroless.tar"
}

# rust:1.95-slim-bookworm: Debian bookworm, gcc, libc6-dev, CA certificates, and the
# Rust toolchain (this host's, of the same version) under /usr/local.
make_rust_builder() {
  local name=$1 root="$tmp/builder" want sysroot
  want="${builder_image##*rust:}"
  want="${want%%-*}"
  sysroot="$(rustc --print sysroot)"
  if ! rustc --version | grep -q "^rustc $want\."; then
    echo "$builder_image cannot be pulled, and this host's Rust ($(rustc --version)) is not $want" >&2
    exit 1
  fi
  echo "making $name: Debian bookworm and this host's $(rustc --version) (a stand-in for $builder_image)" >&2
  mmdebstrap --quiet --variant=minbase --include=ca-certificates,gcc,libc6-dev --format=directory bookworm "$root"
  local toolchain="$root/usr/local/rustup/toolchains/$want-x86_64-unknown-linux-gnu"
  mkdir -p "$toolchain" "$root/usr/local/cargo/bin"
  cp -a "$sysroot/bin" "$sysroot/lib" "$toolchain/"
  for tool in cargo rustc rustdoc; do ln -s "/usr/local/rustup/toolchains/$want-x86_64-unknown-linux-gnu/bin/$tool" "$root/usr/local/cargo/bin/$tool"; done
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  # The build stage fetches crates: trust what this host trusts (on a network that
  # reaches crates.io through a TLS-inspecting proxy, that proxy's CA too).
  cat /etc/ssl/certs/ca-certificates.crt > "$root/etc/ssl/certs/ca-certificates.crt"
  tar --numeric-owner -C "$root" -cf "$tmp/builder.tar" .
  podman import --quiet \
    --change 'ENV RUSTUP_HOME=/usr/local/rustup' --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV RUST_VERSION=$want" \
    --change "LABEL weir.stand-in-recipe=$recipe" \
    --change "LABEL weir.stand-in-for=$builder_image" \
    "$tmp/builder.tar" "$name" >/dev/null
  rm -rf "$root" "$tmp/builder.tar"
}

args=(--build-arg "BINARY=$binary")
if pull "$base_image"; then
  echo "runtime base: $base_image" >&2
else
  stand_in="localhost/distroless/${base_image#*/distroless/}"
  have "$stand_in" || make_distroless "$stand_in"
  echo "runtime base: $stand_in ($base_image cannot be pulled here)" >&2
  args+=(--build-arg "BASE_IMAGE=$stand_in")
fi
if [ "$binary" = build ]; then
  if pull "$builder_image"; then
    echo "builder: $builder_image" >&2
  else
    stand_in="localhost/${builder_image##*/}"
    have "$stand_in" || make_rust_builder "$stand_in"
    echo "builder: $stand_in ($builder_image cannot be pulled here)" >&2
    args+=(--build-arg "BUILDER_IMAGE=$stand_in")
  fi
  # The build stage fetches crates from crates.io.
  args+=(--network host --build-arg "PROFILE=$profile")
else
  if [ "${WEIR_SKIP_CARGO:-0}" != 1 ]; then
    cargo build --locked --profile "$profile" -p weir
  fi
  args+=(--build-arg "PREBUILT=target/$binary_dir/weir")
fi
bases=$SECONDS
podman build --quiet --pull=never --format docker "${args[@]}" -f deploy/Dockerfile -t "$image" . >/dev/null
size=$(podman image inspect "$image" --format '{{.Size}}')
echo "built $image (BINARY=$binary, profile $profile): $((size / 1000000)) MB uncompressed; bases and binary $((bases - started)) s, podman build $((SECONDS - bases)) s"
if [ "${WEIR_SKIP_IMAGE_CHECK:-0}" != 1 ]; then
  ./deploy/container/check-image.sh "$image"
fi
