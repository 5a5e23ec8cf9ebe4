# syntax=docker/dockerfile:1
# The sparkllm image: the operator (`sparkllm run`), the admission layer
# (`python -m sparkllm.gateway`), the SGLang model gateway router (`smg`, a PyPI wheel
# with its binary) and the CLI — one image, so the operator can run its gateway pods from
# the image it runs in.
#
# Two stages: the builder installs into a virtualenv with the SAME script the Makefile (and
# so CI) uses (hack/install-python-deps.sh); the final stage copies only that virtualenv
# onto a clean base: no compiler, no pip cache, no source tree. Only the product is copied
# in (operator/: package sparkllm); the dev/test harness (harness/: the dev cluster, the
# SGLang simulator, the demo, the flag extraction) and the tests never enter the image
# (tests/unit/test_product_boundary.py builds the same wheel and checks). Wheels exist for
# linux/amd64 and linux/arm64 (DGX Spark is arm64):
#   docker buildx build --platform linux/arm64,linux/amd64 -t REGISTRY/sparkllm:0.1.0 .
# Without Docker or Docker Hub, `make image` (hack/build-image.sh) builds this file with
# buildah on a bookworm/Python 3.11 base made from Debian packages, passed as PYTHON_IMAGE,
# and runs the entry points inside the result as UID 65532.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY hack/install-python-deps.sh hack/
COPY operator/ operator/
RUN python -m venv /opt/sparkllm \
 && bash hack/install-python-deps.sh /opt/sparkllm/bin/python \
 && /opt/sparkllm/bin/python -m pip uninstall --yes pip \
 && /opt/sparkllm/bin/sparkllm --help >/dev/null \
 && /opt/sparkllm/bin/smg --help >/dev/null

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="sparkllm" \
      org.opencontainers.image.description="Operator, admission layer and router for one LLM on DGX Spark nodes with SGLang pipeline parallelism" \
      org.opencontainers.image.licenses="Apache-2.0"
# A numeric, non-root user that exists in /etc/passwd (kopf and getpass look the user up);
# the chart runs as the same UID:GID with a read-only root filesystem.
RUN groupadd --system --gid 65532 sparkllm \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin sparkllm
COPY --from=builder /opt/sparkllm /opt/sparkllm
ENV PATH=/opt/sparkllm/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
# 8080: operator metrics; 8081: kopf liveness (/healthz).
EXPOSE 8080 8081
ENTRYPOINT ["sparkllm"]
CMD ["run", "--liveness", "http://0.0.0.0:8081/healthz"]
