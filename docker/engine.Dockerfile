# syntax=docker/dockerfile:1
# The qwen-npu engine image: SGLang on Ascend 910 (CANN, torch + torch_npu, triton-ascend,
# sgl-kernel-npu) with the qwen-npu runtime patches, checked at build time.
#
# Every version below defaults to docker/versions.env and `make image` passes them all again as
# --build-arg from that file; tests/docker/test_engine_dockerfile.py fails when they disagree.
#   make image                       # 910B (Atlas A2), the platform of this machine
#   make image CHIP=a3 PLATFORM=linux/arm64
#   make image-engine-cpu            # ENGINE_FLAVOUR=cpu: the CPU stand-in, built here with podman
# Stages. ENGINE_FLAVOUR picks the first two; everything after them is shared by both flavours:
#   base-npu   the CANN image               base-cpu   a Python base (stand-in, no CANN)
#   stack-npu  torch + torch_npu,           stack-cpu  the CPU torch, SGLang's wheel and what its
#              triton-ascend, SGLang from              modules import (requirements/sglang-cpu.txt),
#              its tag, sgl-kernel-npu                 tests/stubs for the NPU-only packages
#   builder    stack-<flavour> + sglang-router, all in /opt/venv
#   qwen-npu   builder + qwen-npu (the .pth hook); its files alone in /opt/qwen-npu (a small layer)
#   engine     base-<flavour> + tini + user + /opt/venv (builder's, then qwen-npu's files) +
#              entrypoint, then the build checks
#              (SGLang version, .pth hook, `qwen-npu patches verify --strict`)

ARG CANN_BASE_IMAGE=quay.io/ascend/cann
ARG CANN_VERSION=9.1.0
# 910b (Atlas A2, the default) or a3 (Atlas A3)
ARG CHIP=910b
ARG BASE_OS=ubuntu22.04
ARG ENGINE_PYTHON_VERSION=3.12
# npu (the image, the default) or cpu (the stand-in that builds without CANN; docs/images.md)
ARG ENGINE_FLAVOUR=npu
# The cpu flavour's base: the CPU test environment's Python on the sidecar's Debian release
ARG TEST_PYTHON_VERSION=3.11
ARG SIDECAR_DEBIAN_RELEASE=bookworm

FROM ${CANN_BASE_IMAGE}:${CANN_VERSION}-${CHIP}-${BASE_OS}-py${ENGINE_PYTHON_VERSION} AS base-npu
ARG CANN_BASE_IMAGE
ARG CANN_VERSION
ARG CHIP
ARG BASE_OS
ARG ENGINE_PYTHON_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
LABEL org.opencontainers.image.base.name="${CANN_BASE_IMAGE}:${CANN_VERSION}-${CHIP}-${BASE_OS}-py${ENGINE_PYTHON_VERSION}"
ENV VIRTUAL_ENV=/opt/venv \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

FROM python:${TEST_PYTHON_VERSION}-slim-${SIDECAR_DEBIAN_RELEASE} AS base-cpu
ARG TEST_PYTHON_VERSION
ARG SIDECAR_DEBIAN_RELEASE
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
LABEL org.opencontainers.image.base.name="python:${TEST_PYTHON_VERSION}-slim-${SIDECAR_DEBIAN_RELEASE}"
ENV VIRTUAL_ENV=/opt/venv \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# ---------------------------------------------------------------------------------------------
# The Ascend stack: everything that needs the CANN base or NPU-only artefacts.
FROM base-npu AS stack-npu
# (repeated per stage: the image inherits it, hadolint's stage-by-stage reading does not)
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG CANN_VERSION
ARG CHIP
ARG ENGINE_PYTHON_VERSION
ARG SGLANG_VERSION=0.5.23
ARG NPU_TORCH_VERSION=2.10.0
ARG NPU_TORCHVISION_VERSION=0.25.0
ARG TORCH_NPU_VERSION=2.10.0.post6
ARG TRITON_ASCEND_VERSION=3.2.2
ARG SGL_KERNEL_NPU_VERSION=2026.9.0.post9
# Where the artefacts come from (mirrors can be swapped in; the versions stay pinned above).
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PYTORCH_CPU_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG SGLANG_REPO=https://github.com/sgl-project/sglang.git
ARG TRITON_ASCEND_URL=https://github.com/triton-lang/triton-ascend/releases/download
ARG SGL_KERNEL_NPU_URL=https://github.com/sgl-project/sgl-kernel-npu/releases/download

# The environment the engine runs in. --system-site-packages: the CANN base installs the Python
# packages its own tools import (numpy, sympy, decorator, ...) into the system interpreter.
RUN python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${ENGINE_PYTHON_VERSION}', v" \
    && python3 -m venv --system-site-packages "${VIRTUAL_ENV}"
ENV PATH=/opt/venv/bin:${PATH}

# torch and torchvision: the CPU builds (torch_npu supplies the device), then torch_npu pinned to
# them. The constraints file keeps every later step from moving these three.
RUN printf '%s\n' "torch==${NPU_TORCH_VERSION}" "torchvision==${NPU_TORCHVISION_VERSION}" \
        "torch-npu==${TORCH_NPU_VERSION}" > /tmp/constraints.txt \
    && pip install --index-url "${PYTORCH_CPU_INDEX_URL}" \
        "torch==${NPU_TORCH_VERSION}" "torchvision==${NPU_TORCHVISION_VERSION}" \
    && pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt \
        "torch-npu==${TORCH_NPU_VERSION}"

# triton-ascend: a release wheel per CPU architecture and Python ABI (not on PyPI at this version).
RUN py="cp$(echo "${ENGINE_PYTHON_VERSION}" | tr -d .)" && arch="$(uname -m)" \
    && wheel="triton_ascend-${TRITON_ASCEND_VERSION}-${py}-${py}-manylinux_2_27_${arch}.manylinux_2_28_${arch}.whl" \
    && pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt \
        "${TRITON_ASCEND_URL}/v${TRITON_ASCEND_VERSION}/${wheel}"

# SGLang from its release tag with the NPU project file (the srt_npu extra), version pinned for
# setuptools-scm since the shallow clone carries no history.
RUN git clone --depth 1 --branch "v${SGLANG_VERSION}" "${SGLANG_REPO}" /tmp/sglang \
    && mv /tmp/sglang/python/pyproject_npu.toml /tmp/sglang/python/pyproject.toml \
    && SETUPTOOLS_SCM_PRETEND_VERSION="${SGLANG_VERSION}" \
        pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt "/tmp/sglang/python[srt_npu]" \
    && rm -rf /tmp/sglang \
    && python3 -c "import importlib.metadata as m; v = m.version('sglang'); assert v == '${SGLANG_VERSION}', v"

# sgl-kernel-npu: one release zip of wheels per release, torch, Python, CANN, chip and CPU
# architecture (sgl_kernel_npu, deep_ep, torch_memory_saver). deep_ep imports its C++ extension
# from the top level of site-packages, hence the link.
RUN arch="$(uname -m)" \
    && asset="sgl-kernel-npu-${SGL_KERNEL_NPU_VERSION}-torch${NPU_TORCH_VERSION}-py$(echo "${ENGINE_PYTHON_VERSION}" | tr -d .)-cann${CANN_VERSION}-${CHIP}-${arch}.zip" \
    && curl -fsSL --retry 3 -o "/tmp/${asset}" "${SGL_KERNEL_NPU_URL}/${SGL_KERNEL_NPU_VERSION}/${asset}" \
    && python3 -m zipfile -e "/tmp/${asset}" /tmp/sgl-kernel-npu \
    && find /tmp/sgl-kernel-npu -name '*.whl' -print0 | xargs -0 \
        pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt \
    && site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && for so in "${site}"/deep_ep/deep_ep_cpp*.so; do \
        if [ -e "${so}" ]; then ln -sf "deep_ep/${so##*/}" "${site}/${so##*/}"; fi; \
    done \
    && python3 -c "import importlib.metadata as m; print('sgl-kernel-npu', m.version('sgl_kernel_npu'))" \
    && rm -rf /tmp/sgl-kernel-npu "/tmp/${asset}"

# ---------------------------------------------------------------------------------------------
# The CPU stand-in of stack-npu (ENGINE_FLAVOUR=cpu): the same /opt/venv contract (SGLang at its
# pin, /tmp/constraints.txt holding torch) from a local wheelhouse, a named build context:
#   --build-context wheels=.venv-wheels/engine-cpu   (make engine-cpu-wheelhouse fills it)
FROM base-cpu AS stack-cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG TEST_PYTHON_VERSION
ARG SGLANG_VERSION=0.5.23
ARG TEST_TORCH_VERSION=2.13.0
RUN python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${TEST_PYTHON_VERSION}', v" \
    && python3 -m venv "${VIRTUAL_ENV}"
ENV PATH=/opt/venv/bin:${PATH}
# The CPU torch and what SGLang's modules import on CPU (the test environment's list), then
# SGLang's wheel without its GPU dependencies: offline, from the wheelhouse only.
COPY requirements/sglang-cpu.txt /tmp/sglang-cpu.txt
RUN --mount=type=bind,from=wheels,target=/wheels \
    printf '%s\n' "torch==${TEST_TORCH_VERSION}" > /tmp/constraints.txt \
    && pip install --no-index --find-links /wheels -c /tmp/constraints.txt \
        "torch==${TEST_TORCH_VERSION}" -r /tmp/sglang-cpu.txt \
    && pip install --no-index --find-links /wheels --no-deps "sglang==${SGLANG_VERSION}" \
    && rm /tmp/sglang-cpu.txt
# The CPU stand-ins of the NPU-only packages (torchvision, sgl_kernel_npu): tests/stubs/README.md.
COPY tests/stubs/ /opt/venv/lib/python${TEST_PYTHON_VERSION}/site-packages/

# ---------------------------------------------------------------------------------------------
# From here on both flavours share every line.
# hadolint ignore=DL3006 # the base is a stage above (stack-npu or stack-cpu), picked by ENGINE_FLAVOUR
FROM stack-${ENGINE_FLAVOUR} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG SGLANG_ROUTER_VERSION=0.3.2
ARG PIP_INDEX_URL=https://pypi.org/simple

# sglang-router: the chart's optional cache-aware router runs from this same image.
RUN pip install --no-cache-dir --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt \
        "sglang-router==${SGLANG_ROUTER_VERSION}"

# ---------------------------------------------------------------------------------------------
# qwen-npu itself, in a stage of its own: our code changes far more often than the stack, so the
# image gets it as a small layer of its own over the stack's /opt/venv (cached, and pulled once).
FROM builder AS qwen-npu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG PIP_INDEX_URL=https://pypi.org/simple
# Without extras (standard library only): the patches, preflight, ub-plan and the .pth hook that
# loads the patches in every Python process of the engine. Then every file the install wrote
# (its RECORD: package, .pth, console script, .pyc) is copied to /opt/qwen-npu, laid out as /opt/venv.
COPY pyproject.toml README.md /tmp/qwen-npu/
COPY qwen_npu /tmp/qwen-npu/qwen_npu
RUN pip install --no-cache-dir --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt /tmp/qwen-npu \
    && rm -rf /tmp/qwen-npu /tmp/constraints.txt \
    && python3 -c "import importlib.metadata as m, os, shutil; v = os.path.realpath('${VIRTUAL_ENV}'); fs = [os.path.realpath(f.locate()) for f in m.files('qwen-npu')]; [shutil.copy2(f, os.path.join('/opt/qwen-npu', os.path.relpath(f, v))) for f in fs if os.path.exists(f) and f.startswith(v + '/') and not os.makedirs(os.path.dirname(os.path.join('/opt/qwen-npu', os.path.relpath(f, v))), exist_ok=True)]; print('qwen-npu files:', len(fs))"

# ---------------------------------------------------------------------------------------------
# hadolint ignore=DL3006 # the base is a stage above (base-npu or base-cpu), picked by ENGINE_FLAVOUR
FROM base-${ENGINE_FLAVOUR} AS engine
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG ENGINE_FLAVOUR
ARG CANN_VERSION
ARG CHIP
ARG ENGINE_PYTHON_VERSION
ARG QWEN_NPU_VERSION=0.1.0
ARG SGLANG_VERSION=0.5.23
ARG NPU_TORCH_VERSION=2.10.0
ARG NPU_TORCHVISION_VERSION=0.25.0
ARG TORCH_NPU_VERSION=2.10.0.post6
ARG TRITON_ASCEND_VERSION=3.2.2
ARG SGL_KERNEL_NPU_VERSION=2026.9.0.post9
ARG TINI_APT_VERSION=0.19.0-1
# The running user: the Ascend driver's devices belong to the HwHiAiUser group (mode 0660); match
# these ids to the node's HwHiAiUser (`id HwHiAiUser`) or run as root (docs/images.md).
ARG NPU_UID=1000
ARG NPU_GID=1000

# tini is PID 1 (signal forwarding, zombie reaping). No build tool is installed in this stage; the
# C compiler that the CANN base already ships stays, since triton-ascend compiles its kernel
# launcher at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends "tini=${TINI_APT_VERSION}" \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid "${NPU_GID}" HwHiAiUser \
    && useradd --uid "${NPU_UID}" --gid "${NPU_GID}" --create-home --shell /bin/bash HwHiAiUser \
    && install -d -o "${NPU_UID}" -g "${NPU_GID}" /var/lib/qwen-npu /var/lib/qwen-npu/state

COPY --from=builder /opt/venv /opt/venv
COPY --from=qwen-npu /opt/qwen-npu/ /opt/venv/
COPY --chmod=0644 docker/cann-env.sh /usr/local/lib/qwen-npu/cann-env.sh
COPY --chmod=0755 docker/engine-entrypoint.sh /usr/local/bin/qwen-npu-entrypoint

# CANN for every process: the entrypoint sources these scripts before it execs anything, and
# BASH_ENV does the same for non-interactive bash (`kubectl exec ... -- bash -c '...'`).
# Defaults from SGLang's Ascend examples; the chart may override any of them.
ENV PATH=/opt/venv/bin:${PATH} \
    QWEN_NPU_CANN_ENV_SCRIPTS="/usr/local/Ascend/ascend-toolkit/set_env.sh /usr/local/Ascend/cann-${CANN_VERSION}/share/info/ascendnpu-ir/bin/set_env.sh /usr/local/Ascend/nnal/atb/set_env.sh" \
    QWEN_NPU_CANN_ENV_FILE=/usr/local/lib/qwen-npu/cann-env.sh \
    BASH_ENV=/usr/local/lib/qwen-npu/cann-env.sh \
    QWEN_NPU_STATE_DIR=/var/lib/qwen-npu/state \
    PYTORCH_NPU_ALLOC_CONF=expandable_segments:True \
    STREAMS_PER_DEVICE=32 \
    HCCL_BUFFSIZE=1000 \
    HCCL_OP_EXPANSION_MODE=AIV \
    SGLANG_SET_CPU_AFFINITY=1

# The build fails here when a patch does not apply to the SGLang just installed, or when the .pth
# hook is missing (the patches would then never load in the engine's spawned processes). No NPU
# driver exists at build time: the CANN driver stubs stand in for it for the imports.
RUN python3 -c "import importlib.metadata as m; v = m.version('sglang'); assert v == '${SGLANG_VERSION}', v" \
    && python3 -c "import glob, sys, sysconfig; p = sysconfig.get_paths()['purelib']; hooks = [f for f in glob.glob(p + '/*.pth') if 'qwen_npu' in open(f).read()]; print('pth hook:', hooks); sys.exit(0 if hooks else 'the qwen-npu .pth hook is missing from ' + p)" \
    && LD_LIBRARY_PATH="${LD_LIBRARY_PATH}:${ASCEND_HOME_PATH:-/usr/local/Ascend/cann-${CANN_VERSION}}/runtime/lib64/stub" \
        QWEN_NPU_STATE_DIR=/tmp/qwen-npu-verify \
        /usr/local/bin/qwen-npu-entrypoint qwen-npu patches verify --strict \
    && rm -rf /tmp/qwen-npu-verify

# Set by `make image` from git (remote URL and commit). Declared here, after the heavy steps, so a
# new commit changes only the labels and the layers above stay cached.
ARG SOURCE_URL=unknown
ARG VCS_REF=unknown
LABEL org.opencontainers.image.title="qwen-npu-engine" \
      org.opencontainers.image.description="SGLang ${SGLANG_VERSION} on Ascend ${CHIP} (CANN ${CANN_VERSION}) with the qwen-npu runtime patches" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.version="${QWEN_NPU_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.qwen-npu.flavour="${ENGINE_FLAVOUR}" \
      io.qwen-npu.chip="${CHIP}" \
      io.qwen-npu.cann.version="${CANN_VERSION}" \
      io.qwen-npu.python.version="${ENGINE_PYTHON_VERSION}" \
      io.qwen-npu.sglang.version="${SGLANG_VERSION}" \
      io.qwen-npu.torch.version="${NPU_TORCH_VERSION}" \
      io.qwen-npu.torchvision.version="${NPU_TORCHVISION_VERSION}" \
      io.qwen-npu.torch-npu.version="${TORCH_NPU_VERSION}" \
      io.qwen-npu.triton-ascend.version="${TRITON_ASCEND_VERSION}" \
      io.qwen-npu.sgl-kernel-npu.version="${SGL_KERNEL_NPU_VERSION}"

USER ${NPU_UID}:${NPU_GID}
WORKDIR /home/HwHiAiUser
EXPOSE 30000
ENTRYPOINT ["/usr/local/bin/qwen-npu-entrypoint"]
CMD ["--help"]
