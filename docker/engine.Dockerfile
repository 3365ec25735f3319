# syntax=docker/dockerfile:1
# The qwen-npu engine image: SGLang on Ascend 910 (CANN, torch + torch_npu, triton-ascend,
# sgl-kernel-npu) with the qwen-npu runtime patches, checked at build time.
#
# Every pin comes from docker/versions.env, the one source: the ARG lines carry no default and
# `make image` passes each key of that file as --build-arg (it stops first when one is empty). A
# build without them stops early, naming the empty argument and the versions file: at the base
# image, whose reference then reads `empty-arg-<NAME>-see-docker-versions.env`, or at the first
# step of a stage (docker/require-build-args.sh). tests/docker/test_engine_dockerfile.py checks both.
#   make image                       # 910B (Atlas A2), the platform of this machine
#   make image CHIP=a3 PLATFORM=linux/arm64
#   make image-engine-cpu            # ENGINE_FLAVOUR=cpu: the CPU stand-in, built here with podman
# Stages. ENGINE_FLAVOUR picks the first two; everything after them is shared by both flavours:
#   base-npu   the CANN image               base-cpu   python:<ENGINE_PYTHON_VERSION> (no CANN)
#   stack-npu  torch + torch_npu,           stack-cpu  the CPU torch, SGLang's wheel and what its
#              triton-ascend + pybind11,               modules import (requirements/sglang-cpu.txt),
#              SGLang from its tag,                    tests/stubs for the NPU-only packages, and a
#              sgl-kernel-npu                          torch_npu without devices (the build host's)
#   builder    stack-<flavour> + sglang-router, all in /opt/venv; then (npu) triton-ascend again
#              over any upstream triton, and the check that nothing shadows it
#   qwen-npu   builder + qwen-npu (the .pth hook); its files alone in /opt/qwen-npu (a small layer)
#   engine     base-<flavour> + tini + user + /opt/venv (builder's, then qwen-npu's files) +
#              entrypoint, then the build checks (SGLang version, .pth hook, triton-ascend's backend,
#              `qwen-npu patches verify --build --strict`: no NPU at build time). The full
#              `verify --strict` runs at engine start, in the entrypoint, before the model load.

ARG CANN_BASE_IMAGE
ARG CANN_VERSION
# 910b (Atlas A2, the default) or a3 (Atlas A3)
ARG CHIP=910b
ARG BASE_OS=ubuntu22.04
ARG ENGINE_PYTHON_VERSION
# npu (the image, the default) or cpu (the stand-in that builds without CANN; docs/images.md)
ARG ENGINE_FLAVOUR=npu
# The cpu flavour: its base is the engine's Python on the sidecar's Debian release; its CPU torch
# stack runs TEST_PYTHON_VERSION (the CPU torch wheel make's wheelhouse has; it may equal the
# engine's Python where a CPU torch wheel for it is reachable)
ARG TEST_PYTHON_VERSION
ARG SIDECAR_DEBIAN_RELEASE

FROM ${CANN_BASE_IMAGE:-empty-arg-cann_base_image-see-docker-versions.env}:${CANN_VERSION:-empty-arg-CANN_VERSION-see-docker-versions.env}-${CHIP}-${BASE_OS}-py${ENGINE_PYTHON_VERSION:-empty-arg-ENGINE_PYTHON_VERSION-see-docker-versions.env} AS base-npu
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

FROM python:${ENGINE_PYTHON_VERSION:-empty-arg-ENGINE_PYTHON_VERSION-see-docker-versions.env}-slim-${SIDECAR_DEBIAN_RELEASE:-empty-arg-SIDECAR_DEBIAN_RELEASE-see-docker-versions.env} AS base-cpu
ARG ENGINE_PYTHON_VERSION
ARG SIDECAR_DEBIAN_RELEASE
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
LABEL org.opencontainers.image.base.name="python:${ENGINE_PYTHON_VERSION}-slim-${SIDECAR_DEBIAN_RELEASE}"
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
ARG SGLANG_VERSION
ARG NPU_TORCH_VERSION
ARG NPU_TORCHVISION_VERSION
ARG TORCH_NPU_VERSION
ARG TRITON_ASCEND_VERSION
ARG PYBIND11_VERSION
ARG MEMFABRIC_HYBRID_VERSION
ARG MEMFABRIC_ZBAL_VERSION
ARG SGL_KERNEL_NPU_VERSION
ARG ENGINE_NUMPY_VERSION
ARG ENGINE_PYARROW_BELOW
# The downloads' sha256 (docker/engine-assets.sh picks the one for this architecture and CHIP)
ARG TRITON_ASCEND_SHA256_X86_64
ARG TRITON_ASCEND_SHA256_AARCH64
ARG SGL_KERNEL_NPU_SHA256_910B_X86_64
ARG SGL_KERNEL_NPU_SHA256_910B_AARCH64
ARG SGL_KERNEL_NPU_SHA256_A3_X86_64
ARG SGL_KERNEL_NPU_SHA256_A3_AARCH64
# Where the artefacts come from (mirrors can be swapped in; the versions stay pinned above).
ARG PIP_INDEX_URL=https://pypi.org/simple
# An extra index for torch_npu only, empty by default: every pin above resolves from PIP_INDEX_URL
# for Python 3.12 on x86_64 and aarch64 (tests/docker/test_wheel_resolution.py asks PyPI). SGLang's
# own CANN 9.1.0 image takes 2.10.0.post6 from Huawei's index, which has its x86_64 cp312 wheel:
#   make image TORCH_NPU_VERSION=2.10.0.post6 TORCH_NPU_INDEX_URL=https://ascend.devcloud.huaweicloud.com/pypi/simple/
ARG TORCH_NPU_INDEX_URL=
ARG PYTORCH_CPU_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG SGLANG_REPO=https://github.com/sgl-project/sglang.git
ARG TRITON_ASCEND_URL=https://github.com/triton-lang/triton-ascend/releases/download
ARG SGL_KERNEL_NPU_URL=https://github.com/sgl-project/sgl-kernel-npu/releases/download

RUN --mount=type=bind,source=docker/require-build-args.sh,target=/tmp/require-build-args.sh \
    bash /tmp/require-build-args.sh engine.Dockerfile:stack-npu CANN_VERSION CHIP ENGINE_PYTHON_VERSION \
        SGLANG_VERSION NPU_TORCH_VERSION NPU_TORCHVISION_VERSION TORCH_NPU_VERSION \
        TRITON_ASCEND_VERSION PYBIND11_VERSION MEMFABRIC_HYBRID_VERSION MEMFABRIC_ZBAL_VERSION \
        SGL_KERNEL_NPU_VERSION ENGINE_NUMPY_VERSION ENGINE_PYARROW_BELOW

# The environment the engine runs in. --system-site-packages: the CANN base installs the Python
# packages its own tools import (numpy, sympy, decorator, ...) into the system interpreter.
RUN python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${ENGINE_PYTHON_VERSION}', v" \
    && python3 -m venv --system-site-packages "${VIRTUAL_ENV}"
ENV PATH=/opt/venv/bin:${PATH}

# torch and torchvision: the CPU builds (torch_npu supplies the device), then torch_npu pinned to
# them. The constraints file keeps every later step from moving these three, and holds numpy and
# pyarrow where SGLang's NPU CI holds them for this stack (docker/versions.env names the script):
# triton-ascend, installed without its dependencies, pins numpy 1.26.4, and pyarrow 26 needs NumPy 2.
RUN printf '%s\n' "torch==${NPU_TORCH_VERSION}" "torchvision==${NPU_TORCHVISION_VERSION}" \
        "torch-npu==${TORCH_NPU_VERSION}" "numpy==${ENGINE_NUMPY_VERSION}" \
        "pyarrow<${ENGINE_PYARROW_BELOW}" > /tmp/constraints.txt \
    && pip install --index-url "${PYTORCH_CPU_INDEX_URL}" \
        "torch==${NPU_TORCH_VERSION}" "torchvision==${NPU_TORCHVISION_VERSION}" \
    && pip install --index-url "${PIP_INDEX_URL}" ${TORCH_NPU_INDEX_URL:+--extra-index-url "${TORCH_NPU_INDEX_URL}"} \
        -c /tmp/constraints.txt "torch-npu==${TORCH_NPU_VERSION}"

# triton-ascend: a release wheel per CPU architecture and Python ABI (not on PyPI at this version),
# checked against its sha256 in docker/versions.env (docker/engine-assets.sh), installed without its
# dependencies (its wheel may pin upstream triton, which replaces triton-ascend's files), and
# pybind11, whose headers it compiles its kernel launcher with at run time. The wheel stays in
# /opt/triton-ascend for the builder stage, which installs it again after the last install.
RUN --mount=type=bind,source=docker/engine-assets.sh,target=/tmp/engine-assets.sh \
    bash /tmp/engine-assets.sh fetch triton /opt/triton-ascend >/dev/null \
    && pip install --no-deps /opt/triton-ascend/*.whl \
    && pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt "pybind11==${PYBIND11_VERSION}"

# SGLang from its release tag with the NPU project file (the srt_npu extra), version pinned for
# setuptools-scm since the shallow clone carries no history. The file's memfabric pins are rewritten
# to releases with Python 3.12 wheels (memfabric-zbal 1.1.2 has cp311 wheels only; SGLang's own
# py3.12 images drop these pins too); the pins it has after that are printed in the build log.
RUN git clone --depth 1 --branch "v${SGLANG_VERSION}" "${SGLANG_REPO}" /tmp/sglang \
    && mv /tmp/sglang/python/pyproject_npu.toml /tmp/sglang/python/pyproject.toml \
    && sed -i -E \
        -e "s/\"memfabric-hybrid==[^\"]*\"/\"memfabric-hybrid==${MEMFABRIC_HYBRID_VERSION}\"/" \
        -e "s/\"memfabric-zbal==[^\"]*\"/\"memfabric-zbal==${MEMFABRIC_ZBAL_VERSION}\"/" \
        /tmp/sglang/python/pyproject.toml \
    && { grep -nE '"[A-Za-z0-9_.-]+==' /tmp/sglang/python/pyproject.toml || true; } \
    && SETUPTOOLS_SCM_PRETEND_VERSION="${SGLANG_VERSION}" \
        pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt "/tmp/sglang/python[srt_npu]" \
    && rm -rf /tmp/sglang \
    && python3 -c "import importlib.metadata as m; v = m.version('sglang'); assert v == '${SGLANG_VERSION}', v"

# sgl-kernel-npu: one release zip of wheels per release, torch, Python, CANN, chip and CPU
# architecture (sgl_kernel_npu, deep_ep, torch_memory_saver, attentions), checked against its sha256
# in docker/versions.env. deep_ep imports its C++ extension from the top level of site-packages,
# hence the link. Whether the installed package holds what SGLang imports is checked in the engine
# stage (`python3 -m qwen_npu.hardware.kernel_contents`). Not installed: the zips `custom-ops-*` and
# `ops-transformer-*` that SGLang's NPU CI also installs (docs/images.md: not on the Qwen3.5/3.6 path).
RUN --mount=type=bind,source=docker/engine-assets.sh,target=/tmp/engine-assets.sh \
    zip="$(bash /tmp/engine-assets.sh fetch kernel /tmp)" \
    && python3 -m zipfile -e "${zip}" /tmp/sgl-kernel-npu \
    && find /tmp/sgl-kernel-npu -name '*.whl' -print0 | xargs -0 \
        pip install --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt \
    && site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && for so in "${site}"/deep_ep/deep_ep_cpp*.so; do \
        if [ -e "${so}" ]; then ln -sf "deep_ep/${so##*/}" "${site}/${so##*/}"; fi; \
    done \
    && python3 -c "import importlib.metadata as m; print('sgl-kernel-npu', m.version('sgl_kernel_npu'))" \
    && rm -rf /tmp/sgl-kernel-npu "${zip}"

# ---------------------------------------------------------------------------------------------
# The CPU stand-in of stack-npu (ENGINE_FLAVOUR=cpu): the same /opt/venv contract (SGLang at its
# pin, /tmp/constraints.txt holding torch) from a local wheelhouse, a named build context:
#   --build-context wheels=.venv-wheels/engine-cpu   (make engine-cpu-wheelhouse fills it)
FROM base-cpu AS stack-cpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG TEST_PYTHON_VERSION
ARG SGLANG_VERSION
ARG TEST_TORCH_VERSION
RUN --mount=type=bind,source=docker/require-build-args.sh,target=/tmp/require-build-args.sh \
    bash /tmp/require-build-args.sh engine.Dockerfile:stack-cpu TEST_PYTHON_VERSION SGLANG_VERSION TEST_TORCH_VERSION
RUN "python${TEST_PYTHON_VERSION}" -c "import sys; v = '%d.%d' % sys.version_info[:2]; assert v == '${TEST_PYTHON_VERSION}', v" \
    && "python${TEST_PYTHON_VERSION}" -m venv "${VIRTUAL_ENV}"
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
# The build host's torch_npu: loaded by `import torch`, no device (docker/cpu-standin/torch_npu).
COPY docker/cpu-standin/ /opt/venv/lib/python${TEST_PYTHON_VERSION}/site-packages/

# ---------------------------------------------------------------------------------------------
# From here on both flavours share every line.
# hadolint ignore=DL3006 # the base is a stage above (stack-npu or stack-cpu), picked by ENGINE_FLAVOUR
FROM stack-${ENGINE_FLAVOUR} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG SGLANG_ROUTER_VERSION
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG ENGINE_NUMPY_VERSION

ARG ENGINE_FLAVOUR=npu

# sglang-router: the chart's optional cache-aware router runs from this same image.
RUN --mount=type=bind,source=docker/require-build-args.sh,target=/tmp/require-build-args.sh \
    bash /tmp/require-build-args.sh engine.Dockerfile:builder SGLANG_ROUTER_VERSION ENGINE_NUMPY_VERSION
RUN pip install --no-cache-dir --index-url "${PIP_INDEX_URL}" -c /tmp/constraints.txt \
        "sglang-router==${SGLANG_ROUTER_VERSION}"

# After the last install (npu): a package installed after triton-ascend can bring upstream triton
# (xgrammar requires it on x86_64; triton-ascend's own wheel pins it), whose files replace the
# `triton` package triton-ascend provides; nothing at build time launches a kernel, so only the
# first request would find out. Remove it, put triton-ascend back without dependencies, and fail
# unless triton-ascend and pybind11 are installed and no upstream triton is.
RUN if [ "${ENGINE_FLAVOUR}" = npu ]; then \
        pip uninstall -y triton \
        && pip install --no-cache-dir --no-deps --force-reinstall /opt/triton-ascend/*.whl \
        && rm -rf /opt/triton-ascend \
        && python3 -c "import importlib.metadata as m, sys; d = {x.metadata['Name'].lower().replace('_', '-') for x in m.distributions()}; print('triton-ascend', m.version('triton-ascend'), 'pybind11', m.version('pybind11'), 'numpy', m.version('numpy')); sys.exit('upstream triton is installed over triton-ascend' if 'triton' in d else None if m.version('numpy') == '${ENGINE_NUMPY_VERSION}' else 'numpy ' + m.version('numpy') + ' is installed, not ENGINE_NUMPY_VERSION=${ENGINE_NUMPY_VERSION}')"; \
    fi

# ---------------------------------------------------------------------------------------------
# qwen-npu itself, in a stage of its own: our code changes far more often than the stack, so the
# image gets it as a small layer of its own over the stack's /opt/venv (cached, and pulled once).
FROM builder AS qwen-npu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG PIP_INDEX_URL=https://pypi.org/simple
# Without extras (standard library only): the patches, preflight, ub-plan and the .pth hook that
# loads the patches in every Python process of the engine. Then every file the install wrote
# (its RECORD: package, .pth, console script, .pyc) is copied to /opt/qwen-npu, laid out as /opt/venv.
COPY pyproject.toml README.md hatch_build.py /tmp/qwen-npu/
# The package's version and the pinned SGLang are read from here at build time (pyproject.toml).
COPY docker/versions.env /tmp/qwen-npu/docker/versions.env
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
ARG QWEN_NPU_VERSION
ARG SGLANG_VERSION
ARG NPU_TORCH_VERSION
ARG NPU_TORCHVISION_VERSION
ARG TORCH_NPU_VERSION
ARG TRITON_ASCEND_VERSION
ARG SGL_KERNEL_NPU_VERSION
ARG TINI_APT_VERSION
ARG CANN_MIN_HDK_VERSION
# The running user: the Ascend driver's devices belong to the HwHiAiUser group (mode 0660); match
# these ids to the node's HwHiAiUser (`id HwHiAiUser`) or run as root (docs/images.md).
ARG NPU_UID=1000
ARG NPU_GID=1000

RUN --mount=type=bind,source=docker/require-build-args.sh,target=/tmp/require-build-args.sh \
    bash /tmp/require-build-args.sh engine.Dockerfile:engine CANN_VERSION ENGINE_PYTHON_VERSION \
        QWEN_NPU_VERSION SGLANG_VERSION NPU_TORCH_VERSION NPU_TORCHVISION_VERSION TORCH_NPU_VERSION \
        TRITON_ASCEND_VERSION SGL_KERNEL_NPU_VERSION TINI_APT_VERSION CANN_MIN_HDK_VERSION

# tini is PID 1 (signal forwarding, zombie reaping). No build tool is installed in this stage; the
# C compiler that the CANN base already ships stays, since triton-ascend compiles its kernel
# launcher at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends "tini=${TINI_APT_VERSION}" \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid "${NPU_GID}" HwHiAiUser \
    && useradd --uid "${NPU_UID}" --gid "${NPU_GID}" --create-home --shell /bin/bash HwHiAiUser \
    && install -d -o "${NPU_UID}" -g "${NPU_GID}" /var/lib/qwen-npu /var/lib/qwen-npu/state \
    && install -d -m 1777 /var/lib/qwen-npu/home

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
    QWEN_NPU_MIN_HDK_VERSION=${CANN_MIN_HDK_VERSION} \
    PYTORCH_NPU_ALLOC_CONF=expandable_segments:True \
    STREAMS_PER_DEVICE=32 \
    HCCL_BUFFSIZE=1000 \
    HCCL_OP_EXPANSION_MODE=AIV
# Writable for any uid (the image's user, the node's HwHiAiUser id, root): HOME, CANN's logs, its
# operator cache and work files (kernel_meta), triton-ascend's and other compiler caches. The chart
# mounts an emptyDir here. SGLANG_SET_CPU_AFFINITY is the chart's (engine.cpuAffinity), not baked.
ENV HOME=/var/lib/qwen-npu/home \
    XDG_CACHE_HOME=/var/lib/qwen-npu/home/.cache \
    ASCEND_PROCESS_LOG_PATH=/var/lib/qwen-npu/home/ascend/log \
    ASCEND_CACHE_PATH=/var/lib/qwen-npu/home/ascend/cache \
    ASCEND_WORK_PATH=/var/lib/qwen-npu/home/ascend/work \
    TRITON_CACHE_DIR=/var/lib/qwen-npu/home/.triton/cache

# The build fails here when a patch's targets are gone or changed in the SGLang just installed, when
# the kernel the scatter patch tunes no longer tiles, (npu) when the installed sgl-kernel-npu lacks a
# module, a name or an op argument SGLang's Qwen3.5/3.6 path uses (qwen_npu.hardware.kernel_contents,
# read from the files: no NPU), or when the .pth hook is missing (the patches
# would then never load in the engine's spawned processes). No NPU exists at build time and SGLang
# cannot be imported beside torch_npu without one, so this is the check that reads the sources
# (`verify --build`); the entrypoint runs the full `verify --strict` at engine start. (npu) The CANN
# driver stubs stand in for the driver for triton-ascend's backend import.
RUN python3 -c "import importlib.metadata as m; v = m.version('sglang'); assert v == '${SGLANG_VERSION}', v" \
    && python3 -c "import glob, sys, sysconfig; p = sysconfig.get_paths()['purelib']; hooks = [f for f in glob.glob(p + '/*.pth') if 'qwen_npu' in open(f).read()]; print('pth hook:', hooks); sys.exit(0 if hooks else 'the qwen-npu .pth hook is missing from ' + p)" \
    && if [ "${ENGINE_FLAVOUR}" = npu ]; then \
        LD_LIBRARY_PATH="${LD_LIBRARY_PATH}:${ASCEND_HOME_PATH:-/usr/local/Ascend/cann-${CANN_VERSION}}/runtime/lib64/stub" \
            /usr/local/bin/qwen-npu-entrypoint python3 -c "import triton, triton.backends.ascend; print('triton-ascend backend', triton.__file__)" \
        && python3 -m qwen_npu.hardware.kernel_contents \
        && /usr/local/bin/qwen-npu-entrypoint qwen-npu patches verify --build --strict --npu; \
    else \
        /usr/local/bin/qwen-npu-entrypoint qwen-npu patches verify --build --strict; \
    fi

# When the stack's Python is not the engine's (the cpu flavour built where no CPU torch wheel for the
# engine's Python is reachable: make image-engine-cpu), the build check runs again on the engine's
# Python, from a venv that holds qwen-npu alone, against the stack's sources (--site).
RUN stack_py="$(python3 -c "import sys; print('%d.%d' % sys.version_info[:2])")" \
    && if [ "${stack_py}" != "${ENGINE_PYTHON_VERSION}" ]; then \
        site="/opt/venv/lib/python${stack_py}/site-packages" \
        && engine_site="/opt/engine-python/lib/python${ENGINE_PYTHON_VERSION}/site-packages" \
        && "python${ENGINE_PYTHON_VERSION}" -m venv --without-pip /opt/engine-python \
        && cp -r "${site}/qwen_npu" "${site}/qwen_npu_patches.pth" "${site}"/qwen_npu-*.dist-info "${engine_site}/" \
        && find "${engine_site}/qwen_npu" -name __pycache__ -prune -exec rm -rf {} + \
        && /usr/local/bin/qwen-npu-entrypoint /opt/engine-python/bin/python -m qwen_npu.cli \
            patches verify --build --strict --site "${site}"; \
    fi

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
# CANN writes kernel_meta and fusion_result.json to the working directory.
WORKDIR /var/lib/qwen-npu/home
# No EXPOSE: the engine listens on SGLang's --port, which the chart renders from its values.
ENTRYPOINT ["/usr/local/bin/qwen-npu-entrypoint"]
CMD ["--help"]
