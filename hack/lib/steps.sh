# shellcheck shell=bash
# Set-up steps side by side (sourced): `step NAME CMD...` starts CMD in the background,
# each of its lines prefixed with [NAME] as it is printed, and `wait_steps` waits for all
# of them and fails naming every step that failed. Why: the set-up is mostly waiting on
# the network and on unpacking, and one step's download need not wait for another's.

STEP_NAMES=()
STEP_PIDS=()

step() {  # step NAME CMD...: run CMD in the background, its output prefixed [NAME]
  local name=$1
  shift
  (set -o pipefail; "$@" 2>&1 | sed -u "s/^/[$name] /") &
  STEP_NAMES+=("$name")
  STEP_PIDS+=($!)
}

wait_steps() {  # wait_steps: wait for every step; fail naming the ones that failed
  local i failed=()
  for i in "${!STEP_PIDS[@]}"; do
    wait "${STEP_PIDS[$i]}" || failed+=("${STEP_NAMES[$i]}")
  done
  STEP_NAMES=()
  STEP_PIDS=()
  if ((${#failed[@]})); then
    echo "set-up: failed: ${failed[*]} (their lines above are prefixed with the name)" >&2
    return 1
  fi
}
