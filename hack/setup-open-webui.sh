#!/usr/bin/env bash
# A separate, cached venv with Open WebUI (PyPI `open-webui`, pinned in
# hack/open-webui-requirements.txt), for the dev cluster's browser test
# (tests/e2e/test_open_webui.py): the front end a team signs in to, wired to the front door.
# Why separate: it pins ~100 packages of its own (fastapi, pydantic, transformers, ...)
# that would fight the dev venv's pins, and the tests must never install anything
# (`make tools` runs this; a warm run is one file check).
#
# Why --no-deps from a fully pinned list: pip's resolution of open-webui pulls torch with
# its CUDA libraries (5.2 GB of the 7.3 GB) for local embedding models an offline Open
# WebUI never loads; the list (hack/open-webui-requirements.txt) is that resolution
# without them, so the venv is 2.1 GB.
#
# Also Debian's chromium and chromium-driver (apt): the browser the test drives with
# selenium (the dev extra's pin).
#
# The venv lives under $SPARKLLM_CACHE (default ~/.cache/sparkllm)/open-webui-venv/<key>,
# keyed by the requirements' hash. PYTHON is the interpreter the venv is made from
# (default python3; Open WebUI needs 3.11 or 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}"
PYTHON="${PYTHON:-python3}"
REQUIREMENTS=hack/open-webui-requirements.txt
key=$(grep -v '^#' "$REQUIREMENTS" | sha256sum | cut -c1-12)
VENV="$CACHE/open-webui-venv/$key"

apt_install() {  # apt_install COMMAND PACKAGE: install PACKAGE unless COMMAND exists
  command -v "$1" >/dev/null && return 0
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  echo "setup-open-webui: apt-get install $2 (for $1)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}

apt_install chromium chromium
apt_install chromedriver chromium-driver

if [[ -f $VENV/.complete ]]; then
  exit 0
fi
started=$SECONDS
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv --without-pip "$VENV" 2>/dev/null || "$PYTHON" -m venv "$VENV"
# The venv's python runs the dev interpreter's pip against the venv (no pip copy inside).
"$PYTHON" -m pip --python "$VENV/bin/python" install --quiet --disable-pip-version-check \
  --no-deps --only-binary=:all: -r "$REQUIREMENTS"
test -x "$VENV/bin/open-webui"
"$VENV/bin/python" -c 'import importlib.metadata as m; print("setup-open-webui: open-webui", m.version("open-webui"))'
touch "$VENV/.complete"
echo "setup-open-webui: $(du -sh "$VENV" | cut -f1) in $VENV, $((SECONDS - started)) s"
