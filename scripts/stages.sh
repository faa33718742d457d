# Stage timing, sourced by .ci/run and scripts/test-all.sh. `stage NAME` ends the
# stage before (recording its wall seconds) and starts NAME; `stages_table` ends the
# last one and prints every stage with its seconds and the total. .ci/run exports
# WEIR_STAGE_LOG so that its stages and test-all.sh's go into one table; the script
# that created the log prints the table when it exits, failed or not. Each stage also
# records the disk space free when it ended: a CI run once died of a full disk, and
# the table should say where the space went.
if [ -z "${WEIR_STAGE_LOG:-}" ]; then
  WEIR_STAGE_LOG="$(mktemp)"
  export WEIR_STAGE_LOG
  _stages_owner=1
else
  _stages_owner=0
fi
_stage_name=""
_stage_start=0

# Free space on the file system of the working directory, e.g. "31G".
_disk_free() {
  df -h --output=avail . 2>/dev/null | tail -n 1 | tr -d ' ' || echo "?"
}

_stage_end() {
  if [ -n "$_stage_name" ]; then
    printf '%s\t%s\t%s\n' "$_stage_name" "$((SECONDS - _stage_start))" "$(_disk_free)" >>"$WEIR_STAGE_LOG"
  fi
  _stage_name=""
}

stage() {
  _stage_end
  _stage_name="$*"
  _stage_start=$SECONDS
  echo "== $(date -u +%H:%M:%S) $* (disk free: $(_disk_free))"
}

# Ends the current stage without starting another (before a script with its own).
end_stage() {
  _stage_end
}

stages_table() {
  _stage_end
  echo "== stage wall times"
  echo "| stage | seconds | disk free after |"
  echo "|---|---|---|"
  awk -F'\t' '{ printf "| %s | %d | %s |\n", $1, $2, $3; total += $2 } END { printf "| total | %d | |\n", total }' "$WEIR_STAGE_LOG"
}

# Ends this script's last stage on exit; the owner also prints the table.
_stages_exit() {
  local code=$?
  _stage_end
  if [ "$_stages_owner" = 1 ]; then
    stages_table
    rm -f "$WEIR_STAGE_LOG"
  fi
  return $code
}
trap _stages_exit EXIT
