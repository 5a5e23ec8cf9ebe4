#!/usr/bin/env bash
# Build the sparkllm image for real, without a Docker engine, and prove what is in it.
#
# Why this exists: the Dockerfile's default base (python:3.11.x-slim-bookworm) comes from
# Docker Hub, which a machine with only package registries cannot reach. So the base is
# built here from Debian's own packages (mmdebstrap, bookworm: python3 is 3.11 there, as
# pyproject.toml requires) and handed to the unchanged Dockerfile as PYTHON_IMAGE; buildah
# (chroot isolation, vfs storage: no daemon, no overlay mounts) builds it. Then, inside the
# built image and as user 65532, `sparkllm --help`, `smg --help` and
# `python -m sparkllm.gateway --help` run, and the image's content and size are reported.
#
#   hack/build-image.sh            build (base cached) and check
#   IMAGE_TAG=... hack/build-image.sh
#
# Cached under $SPARKLLM_CACHE/image (default ~/.cache/sparkllm/image): the base tarball
# (rebuilt when this script's BASE_PACKAGES change) and buildah's storage. Needs root and
# the Debian packages buildah and mmdebstrap (installed with apt when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${SPARKLLM_CACHE:-$HOME/.cache/sparkllm}/image"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3-venv: the Dockerfile's builder runs `python -m venv` (Debian splits ensurepip
# out); python-is-python3: it calls `python`; passwd: the runtime stage runs useradd;
# ca-certificates: pip reaches PyPI over TLS in the builder stage.
BASE_PACKAGES="python3,python3-venv,python-is-python3,passwd,ca-certificates"
BASE_KEY=$(printf '%s %s %s' "$SUITE" "$BASE_PACKAGES" "$MIRROR" | sha256sum | cut -c1-12)
BASE_TAR="$CACHE/base-$SUITE-$BASE_KEY.tar"
BASE_IMAGE="localhost/sparkllm-base:$SUITE-$BASE_KEY"
IMAGE_TAG="${IMAGE_TAG:-localhost/sparkllm:$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)}"
BUILDAH=(buildah --root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs)

# shellcheck source=hack/lib/apt.sh
source hack/lib/apt.sh  # .ci/run builds the image while the set-up's apt installs run
for tool in buildah mmdebstrap; do
  if ! command -v "$tool" >/dev/null; then
    echo "== apt-get install $tool"
    with_apt_lock bash -c 'apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null' _ "$tool"
  fi
done
mkdir -p "$CACHE"

if [[ ! -f $BASE_TAR ]]; then
  echo "== base: mmdebstrap $SUITE ($BASE_PACKAGES)"
  mmdebstrap --quiet --variant=apt --include="$BASE_PACKAGES" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    "$SUITE" "$CACHE/partial.tar" "$MIRROR" </dev/null  # the .tar suffix picks the format
  mv "$CACHE/partial.tar" "$BASE_TAR"
fi
if ! "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
  echo "== base: import $BASE_TAR as $BASE_IMAGE"
  ctr=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" add --quiet "$ctr" "$BASE_TAR" / >/dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
fi
echo "== base python: $("${BUILDAH[@]}" run --isolation chroot \
  "$("${BUILDAH[@]}" from --quiet "$BASE_IMAGE")" -- python --version 2>&1)"
"${BUILDAH[@]}" rm --all >/dev/null

# A machine that reaches PyPI through a TLS-inspecting proxy trusts it with its own CA
# (PIP_CERT or pip's global.cert). The builder's pip must trust it too, yet nothing of it
# may enter the image: it is bind-mounted for the RUN steps only, with a pip.conf naming it.
mounts=()
cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [[ -n $cert && -f $cert ]]; then
  printf '[global]\ncert = /etc/ssl/certs/build-ca.crt\n' >"$CACHE/pip.conf"
  mounts=(--volume "$cert:/etc/ssl/certs/build-ca.crt:ro" --volume "$CACHE/pip.conf:/etc/pip.conf:ro")
  echo "== build: pip trusts $cert (mounted for RUN steps, not in the image)"
fi
echo "== build: Dockerfile with PYTHON_IMAGE=$BASE_IMAGE -> $IMAGE_TAG"
start=$(date +%s)
"${BUILDAH[@]}" build --isolation chroot --layers=false --pull=never \
  "${mounts[@]}" --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -t "$IMAGE_TAG" -f Dockerfile . 2>&1 | tail -n 12
echo "== build took $(($(date +%s) - start)) s"
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true  # earlier builds' untagged images (vfs: full copies)


# Run the three entry points inside the image, as the image's own user (USER 65532:65532).
ctr=$("${BUILDAH[@]}" from --quiet --pull=never "$IMAGE_TAG")
trap '"${BUILDAH[@]}" umount "$ctr" >/dev/null 2>&1; "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1' EXIT
in_image() {
  "${BUILDAH[@]}" run --isolation chroot --user 65532:65532 "$ctr" -- "$@"
}
echo "== in image, as $(in_image id -u):$(in_image id -g) ($(in_image id -un))"
for cmd in "sparkllm --help" "smg --help" "python -m sparkllm.gateway --help"; do
  echo "== \$ $cmd"
  # shellcheck disable=SC2086
  in_image $cmd | head -n 6
done

# What the image holds: the product package and its dependencies, nothing of the harness.
mnt=$("${BUILDAH[@]}" mount "$ctr")
site=$(echo "$mnt"/opt/sparkllm/lib/python3*/site-packages)
echo "== /opt/sparkllm: $(du -sh "$mnt/opt/sparkllm" | cut -f1); sparkllm package: $(du -sh "$site/sparkllm" | cut -f1)"
echo "== sparkllm/ subpackages: $(find "$site/sparkllm" -mindepth 1 -maxdepth 1 -type d ! -name __pycache__ -printf '%f ' | tr ' ' '\n' | sort | xargs)"
echo "== distributions: $(find "$site" -maxdepth 1 -name '*.dist-info' -printf '%f\n' | sed 's/\.dist-info$//' | sort | xargs)"
# The harness (package sparkllm_dev: sim, devcluster, demo), tests and the source tree
# must not be there; third-party wheels' own test modules are theirs, not ours.
forbidden=$( (find "$mnt" -xdev -name 'sparkllm_dev*' -not -path "$mnt/proc/*"
  find "$site/sparkllm" \( -name tests -o -name sim -o -name devcluster -o -name harness \
    -o -name 'test_*.py' -o -name conftest.py \)
  ls -d "$mnt/src" "$mnt/opt/sparkllm/src" 2>/dev/null) || true)
if [[ -n $forbidden ]]; then
  echo "build-image: harness/test files in the image:" >&2
  echo "$forbidden" | sed "s|^$mnt||" >&2
  exit 1
fi
echo "== no harness (sparkllm_dev, sim, devcluster), no tests, no source tree in the image"
if in_image python -m pip --version >/dev/null 2>&1; then
  echo "build-image: pip is still in the image" >&2
  exit 1
fi
echo "== image $IMAGE_TAG: $("${BUILDAH[@]}" images --format '{{.Size}}' "$IMAGE_TAG")"
