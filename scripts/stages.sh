# Stage timing, sourced by .ci/run and scripts/test-all.sh. `stage NAME` ends the
# stage before (recording its wall seconds) and starts NAME; `stages_table` ends the
# last one and prints every stage with its seconds and the total. .ci/run exports
# WEIR_STAGE_LOG so that its stages and test-all.sh's go into one table; the script
# that created the log prints the table when it exits, failed or not.
if [ -z "${WEIR_STAGE_LOG:-}" ]; then
  WEIR_STAGE_LOG="$(mktemp)"
  export WEIR_STAGE_LOG
  _stages_owner=1
else
  _stages_owner=0
fi
_stage_name=""
_stage_start=0

_stage_end() {
  if [ -n "$_stage_name" ]; then
    printf '%s\t%s\n' "$_stage_name" "$((SECONDS - _stage_start))" >>"$WEIR_STAGE_LOG"
  fi
  _stage_name=""
}

stage() {
  _stage_end
  _stage_name="$*"
  _stage_start=$SECONDS
  echo "== $(date -u +%H:%M:%S) $*"
}

# Ends the current stage without starting another (before a script with its own).
end_stage() {
  _stage_end
}

stages_table() {
  _stage_end
  echo "== stage wall times"
  echo "| stage | seconds |"
  echo "|---|---|"
  awk -F'\t' '{ printf "| %s | %d |\n", $1, $2; total += $2 } END { printf "| total | %d |\n", total }' "$WEIR_STAGE_LOG"
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
