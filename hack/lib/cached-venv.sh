# shellcheck shell=bash
# The cached venvs' one install (sourced by hack/setup-torch.sh and hack/setup-open-webui.sh):
# a venv with no pip of its own, filled by the calling interpreter's pip from a fully pinned
# requirements list with --no-deps --only-binary=:all:, and stamped .complete only once
# its check has passed, so a half-made venv (an interrupted run) is made again, never used.
#
# Why no pip inside: the venv is a cache entry read by the tests, never installed into
# again (a new pin is a new key, a new directory). Why --no-deps: each list is a measured
# resolution with the unused parts (torch's CUDA stack, Open WebUI's local models) left
# out; pip's resolver would pull them back in.
#
# Extra pip arguments follow the three (hack/setup-torch.sh passes --no-compile: see there).

cached_venv_ready() {  # cached_venv_ready VENV: true when VENV is complete (a warm run)
  [[ -f $1/.complete ]]
}

# Why the download is split: pip fetches one wheel at a time, and Open WebUI's list is 238
# wheels; measured cold, its download alone was ~7 min at ~10 % of a core (~1.7 s a wheel,
# waiting on each request), so DOWNLOADS pips fetch a share of the list each, side by
# side, and the install then reads only those files (--no-index).
CACHED_VENV_DOWNLOADS=${CACHED_VENV_DOWNLOADS:-4}

cached_venv_install() {  # cached_venv_install PYTHON VENV REQUIREMENTS [PIP_ARG...]: make VENV
  local python=$1 venv=$2 requirements=$3 wheels=$2.wheels i pids=() status=0
  shift 3
  rm -rf "$venv" "$wheels"
  mkdir -p "$wheels"
  "$python" -m venv --without-pip "$venv" 2>/dev/null || "$python" -m venv "$venv"
  # Share i of the pins: every DOWNLOADS-th line from the i-th (the largest wheels, torch
  # and its CUDA libraries, fall into different shares).
  for ((i = 0; i < CACHED_VENV_DOWNLOADS; i++)); do
    grep -v '^[[:space:]]*\(#\|$\)' "$requirements" |
      awk -v n="$CACHED_VENV_DOWNLOADS" -v i="$i" 'NR % n == i' >"$wheels/share-$i.txt"
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --dest "$wheels" -r "$wheels/share-$i.txt" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || status=$?; done
  ((status == 0)) || return "$status"
  # The venv's python runs the dev interpreter's pip against the venv (no pip copy inside).
  "$python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
    --no-deps --only-binary=:all: --no-index --find-links "$wheels" "$@" -r "$requirements"
  rm -rf "$wheels"
}

cached_venv_done() {  # cached_venv_done NAME VENV STARTED: stamp VENV complete, report it
  touch "$2/.complete"
  echo "$1: $(du -sh "$2" | cut -f1) in $2, $((SECONDS - $3)) s"
}
