#!/usr/bin/env bash
# Runs weir's image the way docs/deploying.md and the templates run it, and checks what
# they promise (build-image.sh calls it after each build):
#   - the image: ENTRYPOINT weir, CMD run --config /etc/weir/weir.toml, user
#     65532:65532, EXPOSE 9090, WEIR_HTTP_LISTEN=0.0.0.0:9090, STOPSIGNAL SIGTERM, a
#     HEALTHCHECK running `weir health`;
#   - `docker run -v weir.toml:/etc/weir/weir.toml:ro -p 9090:9090` as docs/deploying.md
#     has it
#     (the port published on loopback only, at a free port), with a read-only root
#     filesystem as the ECS task has, and a config that names no [http] listen:
#     /healthz and /readyz answer 200 through the published port;
#   - the worker runs as uid and gid 65532, not root;
#   - the image's own HEALTHCHECK passes (podman healthcheck run);
#   - CloudWatch EMF lines reach the container's log ([metrics] cloudwatch = true);
#   - SIGTERM (podman stop) drains and the container exits 0.
# Usage: check-image.sh IMAGE
set -euo pipefail
cd "$(dirname "$0")/../.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/container/containers.conf}"
image="${1:?usage: check-image.sh IMAGE}"
name="weir-image-check-$$"
tmp="$(mktemp -d)"
started=$SECONDS
cleanup() {
  podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "check-image: $*" >&2
  podman logs "$name" 2>&1 | tail -n 40 >&2 || true
  exit 1
}

# The image's configuration.
config() { podman image inspect "$image" --format "$1"; }
expect() { [ "$2" = "$3" ] || fail "$1: $2, expected $3"; }
expect ENTRYPOINT "$(config '{{json .Config.Entrypoint}}')" '["weir"]'
expect CMD "$(config '{{json .Config.Cmd}}')" '["run","--config","/etc/weir/weir.toml"]'
expect USER "$(config '{{.Config.User}}')" 65532:65532
expect EXPOSE "$(config '{{json .Config.ExposedPorts}}')" '{"9090/tcp":{}}'
expect STOPSIGNAL "$(config '{{.Config.StopSignal}}')" SIGTERM
config '{{json .Config.Env}}' | grep -q '"WEIR_HTTP_LISTEN=0.0.0.0:9090"' || fail "ENV WEIR_HTTP_LISTEN=0.0.0.0:9090 missing"
expect HEALTHCHECK "$(config '{{json .HealthCheck.Test}}')" '["CMD","weir","health"]'

# A worker on the in-process stream, as a user's first run; no [http] section.
cat > "$tmp/weir.toml" <<'EOF'
[stream]
kind = "memory"
shards = 2
[generator]
rate = 50
[leases]
path = "/tmp/weir-leases.db"
namespace = "image-check"
[[consumers]]
type = "count"
name = "count"
[metrics]
cloudwatch = true
interval = "1s"
EOF
chmod 0644 "$tmp/weir.toml"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# The image's HEALTHCHECK is run on demand below; podman's complaints that it cannot
# schedule it with systemd timers (CI machines run no systemd) are left out.
quiet() { "$@" 2> >(grep -v 'systemd connection\|/run/systemd/private' >&2); }
quiet podman run -d --name "$name" --read-only \
  -v "$tmp/weir.toml:/etc/weir/weir.toml:ro" -p "127.0.0.1:$port:9090" "$image" >/dev/null

# HTTP status of a path through the published port (000: no answer).
status() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$port$1" || true; }
deadline=$((SECONDS + 60))
until [ "$(status /readyz)" = 200 ]; do
  [ "$(podman inspect "$name" --format '{{.State.Running}}')" = true ] || fail "the container stopped"
  [ $SECONDS -lt $deadline ] || fail "/readyz not 200 through the published port in 60 s (last: $(status /readyz))"
  sleep 0.5
done
ready=$((SECONDS - started))
expect /healthz "$(status /healthz)" 200

pid="$(podman inspect "$name" --format '{{.State.Pid}}')"
uid="$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")"
gid="$(awk '/^Gid:/ { print $2 }' "/proc/$pid/status")"
expect "the worker's uid:gid" "$uid:$gid" 65532:65532

podman healthcheck run "$name" >/dev/null 2>&1 || fail "the image's HEALTHCHECK (weir health) failed"

deadline=$((SECONDS + 15))
until podman logs "$name" 2>/dev/null | grep -q '"CloudWatchMetrics"'; do
  [ $SECONDS -lt $deadline ] || fail "no CloudWatch EMF line in the container's log"
  sleep 0.5
done

quiet podman stop -t 60 "$name" >/dev/null
expect "exit code after SIGTERM" "$(podman inspect "$name" --format '{{.State.ExitCode}}')" 0
echo "image check: $image ok (ready through 127.0.0.1:$port in $ready s, uid 65532, HEALTHCHECK, EMF, SIGTERM exit 0; $((SECONDS - started)) s)"
