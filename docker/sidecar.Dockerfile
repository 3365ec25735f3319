# syntax=docker/dockerfile:1
# The qwen-npu sidecar image: `qwen-npu sidecar` (health probes, /status, qwen_npu_* metrics) beside
# the engine. No torch, no SGLang: qwen-npu[sidecar] only, pinned by pyproject.toml's extra and
# docker/sidecar-constraints.txt (its lock: `make sidecar-constraints` compiles it with pip-tools).
# Non-root, nothing written at run time (read-only root file system), under 200 MB.
#   make image-sidecar
# Versions come from docker/versions.env alone: no ARG repeats one as a default; `make image-sidecar`
# passes each key as --build-arg, and a build without them stops at the base image (its reference
# then reads `empty-arg-<NAME>-see-docker-versions.env`) or at the stage's first step.

ARG SIDECAR_PYTHON_VERSION
ARG SIDECAR_DEBIAN_RELEASE

FROM python:${SIDECAR_PYTHON_VERSION:-empty-arg-SIDECAR_PYTHON_VERSION-see-docker-versions.env}-slim-${SIDECAR_DEBIAN_RELEASE:-empty-arg-SIDECAR_DEBIAN_RELEASE-see-docker-versions.env} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
ARG PIP_INDEX_URL=https://pypi.org/simple
# The extras installed: `sidecar` for the sidecar image; `sidecar,fetch` for the fetch image (the
# model.fetch staging Job: the hub and object-store clients, `make image-fetch`).
ARG EXTRAS=sidecar
COPY pyproject.toml README.md hatch_build.py /src/
# The package's version and the pinned SGLang are read from here at build time (pyproject.toml).
COPY docker/versions.env /src/docker/versions.env
COPY qwen_npu /src/qwen_npu
COPY docker/sidecar-constraints.txt /src/docker/sidecar-constraints.txt
# The wheel first, then the venv from the wheel (what a user installs); pip itself is dropped.
RUN python -m pip wheel --index-url "${PIP_INDEX_URL}" --no-deps -w /dist /src \
    && python -m venv /opt/venv \
    && wheel="$(find /dist -name 'qwen_npu-*.whl')" \
    && /opt/venv/bin/pip install --index-url "${PIP_INDEX_URL}" \
        -c /src/docker/sidecar-constraints.txt "${wheel}[${EXTRAS}]" \
    && /opt/venv/bin/pip uninstall -y pip setuptools

FROM python:${SIDECAR_PYTHON_VERSION:-empty-arg-SIDECAR_PYTHON_VERSION-see-docker-versions.env}-slim-${SIDECAR_DEBIAN_RELEASE:-empty-arg-SIDECAR_DEBIAN_RELEASE-see-docker-versions.env} AS sidecar
ARG QWEN_NPU_VERSION
ARG SIDECAR_PYTHON_VERSION
ARG SOURCE_URL=unknown
ARG VCS_REF=unknown
LABEL org.opencontainers.image.title="qwen-npu-sidecar" \
      org.opencontainers.image.description="qwen-npu health and metrics sidecar for SGLang on Ascend" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.version="${QWEN_NPU_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.qwen-npu.python.version="${SIDECAR_PYTHON_VERSION}"

RUN --mount=type=bind,source=docker/require-build-args.sh,target=/tmp/require-build-args.sh \
    bash /tmp/require-build-args.sh sidecar.Dockerfile:sidecar QWEN_NPU_VERSION SIDECAR_PYTHON_VERSION
RUN groupadd --gid 10001 qwen-npu \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin qwen-npu
COPY --from=builder /opt/venv /opt/venv

# PYTHONDONTWRITEBYTECODE: the .pyc files were compiled at install time and nothing is written at
# run time, so the container runs with readOnlyRootFilesystem: true.
ENV PATH=/opt/venv/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
# No EXPOSE and no port here: the sidecar listens on the package's default (qwen_npu/ports.py) or
# QWEN_NPU_SIDECAR_PORT, which the chart sets from its values. No curl in the image: the probe is
# the image's own Python, on the same port. Kubernetes ignores HEALTHCHECK (the chart's probes
# call the same /livez); it serves `docker run`.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; from qwen_npu.ports import SIDECAR_PORT; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('QWEN_NPU_SIDECAR_PORT', str(SIDECAR_PORT)) + '/livez', timeout=4)"]
# uvicorn handles SIGTERM itself and the sidecar starts no child process: no init needed.
ENTRYPOINT ["qwen-npu", "sidecar"]
