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

# shellcheck source=hack/lib/apt.sh
source hack/lib/apt.sh
# shellcheck source=hack/lib/cached-venv.sh
source hack/lib/cached-venv.sh

apt_install chromium chromium
apt_install chromedriver chromium-driver

cached_venv_ready "$VENV" && exit 0
started=$SECONDS
cached_venv_install "$PYTHON" "$VENV" "$REQUIREMENTS"
test -x "$VENV/bin/open-webui"
"$VENV/bin/python" -c 'import importlib.metadata as m; print("setup-open-webui: open-webui", m.version("open-webui"))'
cached_venv_done setup-open-webui "$VENV" "$started"
