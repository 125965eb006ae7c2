# scripts/stage.sh -- sourced by the build and test scripts: `stage NAME COMMAND...` runs
# COMMAND and, where KILN_STAGE_LOG names a file (.ci/run sets it), appends a line with NAME and
# its seconds, so CI's closing table shows where its time went (a failed stage too).
stage() {
  local name="$1" start=$SECONDS status=0
  shift
  "$@" || status=$?
  if [[ -n "${KILN_STAGE_LOG:-}" ]]; then
    printf '%s\t%d\t%s\n' "$name" $((SECONDS - start)) "$([[ $status == 0 ]] && echo ok || echo FAILED)" >>"$KILN_STAGE_LOG"
  fi
  return "$status"
}
