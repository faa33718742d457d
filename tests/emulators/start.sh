#!/usr/bin/env bash
# Starts one emulator on a free loopback port and waits until it accepts connections.
#   tests/emulators/start.sh ferrokinesis|kinesis-local|moto|s3s-fs|iceberg-rest [extra args...]
# Prints one line: `port=<port> pid=<pid> log=<log file>`. The PID and log go to
# $WEIR_EMULATORS_RUN (default: a new temp dir). Stop it with stop.sh <pid>.
set -euo pipefail
name="$1"; shift
HOME_DIR="${WEIR_EMULATORS_HOME:-$HOME/.cache/weir-emulators}"
RUN_DIR="${WEIR_EMULATORS_RUN:-$(mktemp -d /tmp/weir-emulators.XXXXXX)}"
mkdir -p "$RUN_DIR"
"$(dirname "$0")/install.sh" "$name" >/dev/null 2>&1 || "$(dirname "$0")/install.sh" "$name" >&2

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
port="$(free_port)"
log="$RUN_DIR/$name-$port.log"
case "$name" in
  ferrokinesis)
    cmd=("$HOME_DIR/ferrokinesis-0.7.0/bin/ferrokinesis" serve --port "$port"
         --create-stream-ms 0 --update-stream-ms 0 "$@") ;;
  kinesis-local)
    tls="$(free_port)"
    export KINESIS_MOCK_PLAIN_PORT="$port" KINESIS_MOCK_TLS_PORT="$tls" \
      CREATE_STREAM_DURATION=0ms DELETE_STREAM_DURATION=0ms REGISTER_STREAM_CONSUMER_DURATION=0ms \
      DEREGISTER_STREAM_CONSUMER_DURATION=0ms MERGE_SHARDS_DURATION=0ms SPLIT_SHARD_DURATION=0ms \
      UPDATE_SHARD_COUNT_DURATION=0ms SHOULD_PERSIST_DATA=false
    pkg="$HOME_DIR/kinesis-local-0.6.2/node_modules/kinesis-local"
    cmd=(node "$pkg/main.js" "$@")
    cd "$pkg" ;;
  moto)
    # moto's server with Glue's UpdateTable conditional on VersionId, as AWS's is
    # (moto_server.py says why).
    cmd=("$HOME_DIR/moto-5.2.5/bin/python3" "$(dirname "$0")/moto_server.py" -H 127.0.0.1 -p "$port" "$@") ;;
  iceberg-rest)
    # An Iceberg REST catalog over pyiceberg's SQL catalog (iceberg_rest.py says why;
    # args: --database FILE --warehouse DIR [--credential ID:SECRET ...]).
    cmd=("$HOME_DIR/pyiceberg-0.12.0/bin/python3" "$(dirname "$0")/iceberg_rest.py" --port "$port" "$@") ;;
  s3s-fs)
    root="$RUN_DIR/s3s-fs-$port"; mkdir -p "$root"
    cmd=("$HOME_DIR/s3s-fs-0.14.1/bin/s3s-fs" --host 127.0.0.1 --port "$port"
         --access-key test --secret-key test "$@" "$root") ;;
  *) echo "unknown emulator: $name" >&2; exit 2 ;;
esac
"${cmd[@]}" >"$log" 2>&1 < /dev/null &
pid=$!
echo "$pid" > "$RUN_DIR/$name-$port.pid"
for _ in $(seq 1 600); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "$name exited during start; log $log:" >&2; tail -20 "$log" >&2; exit 1
  fi
  # The port must be served by this emulator: between choosing a free port and
  # binding it another process (a parallel test's emulator) may have taken it, and
  # then a test would silently share that emulator. Ours then exits (address in use)
  # and the caller retries on another port.
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
     { ! command -v ss >/dev/null 2>&1 || ss -Hltnp "sport = :$port" 2>/dev/null | grep -q "pid=$pid,"; }; then
    echo "port=$port pid=$pid log=$log"
    exit 0
  fi
  sleep 0.1
done
echo "$name did not listen on $port within 60s; log $log" >&2
kill "$pid" 2>/dev/null || true
exit 1
