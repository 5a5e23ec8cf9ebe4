#!/usr/bin/env bash
# Install sparkllm and its pinned dependencies into a Python environment (with --extras dev
# also the dev/test harness, harness/). The ONE install command: the Makefile's virtualenv
# (CI and developers) and the Dockerfile's builder stage both run this script, so the image
# cannot drift from what the tests ran against.
#
#   hack/install-python-deps.sh PYTHON [--editable] [--extras NAME]
#
# PYTHON is the interpreter of the target environment (e.g. .venv/bin/python). No pip
# cache is written (--no-cache-dir): nothing to clean up in an image layer.
set -euo pipefail
cd "$(dirname "$0")/.."

PIP_VERSION=25.3
SGLANG_VERSION=0.5.23  # the engine version the flag contract and the renderer are read from
TRANSFORMERS_VERSION=5.19.0  # the version sglang==$SGLANG_VERSION pins (its chat-template renderer)
MSGSPEC_VERSION=0.23.0  # sglang==$SGLANG_VERSION requires msgspec (unpinned); its ServerArgs record
python=${1:?usage: hack/install-python-deps.sh PYTHON [--editable] [--extras NAME]}
shift
editable=()
target=.
while (($#)); do
  case "$1" in
    --editable) editable=(-e) ;;
    --extras) target=".[${2:?--extras needs a name}]"; shift ;;
    *) echo "install-python-deps: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
"$python" -m pip install --quiet --no-cache-dir --upgrade "pip==$PIP_VERSION"
"$python" -m pip install --quiet --no-cache-dir "${editable[@]}" "$target"
# The dev extras also bring the harness (harness/: package sparkllm_dev, command
# sparkllm-dev — dev cluster, simulator, demo, flag extraction), which never goes into the
# image; it needs nothing sparkllm[dev] does not already install. Tests read SGLang's own
# code as the reference (its DeepSeek V4 prompt renderer, its flag registrations), and the
# transformers version it pins for the chat-template rendering it calls; only the files are
# needed, never the engine or a model, so the wheels go in without their dependencies.
if [[ $target == *dev* ]]; then
  "$python" -m pip install --quiet --no-cache-dir --no-deps "${editable[@]}" ./harness
  "$python" -m pip install --quiet --no-cache-dir --no-deps "sglang==$SGLANG_VERSION"
  "$python" -m pip install --quiet --no-cache-dir --no-deps "transformers==$TRANSFORMERS_VERSION"
  # SGLang's ServerArgs is a msgspec Struct: the dev cluster's launch check and its unit
  # test run SGLang's own argument parser from the wheel (sparkllm_dev.sim.launch_check).
  # --no-deps like the wheels above (msgspec depends on nothing): with dependency
  # resolution pip checks the whole venv and prints an ERROR line for every dependency
  # sglang declares and the venv deliberately lacks (65 lines on every fresh install).
  "$python" -m pip install --quiet --no-cache-dir --no-deps "msgspec==$MSGSPEC_VERSION"
fi
