# Images: the engine (CANN + torch_npu + triton-ascend + sgl-kernel-npu + SGLang + patches) and the
# sidecar. Every pin comes from docker/versions.env (included by the Makefile): each ARG of a
# Dockerfile that is also a key of that file is passed as --build-arg KEY=<value from the file>.
#
#   make image         [REGISTRY=ghcr.io/qwen-npu] [TAG=$(QWEN_NPU_VERSION)] [PLATFORM=linux/amd64|linux/arm64] [CHIP=910b|a3]
#   make image-sidecar [REGISTRY=...] [TAG=...] [PLATFORM=...]
#   make push          push both (build them first)
#   make image-lint    hadolint on both Dockerfiles, shellcheck on every shell script
#   make image-digests the release downloads' sha256 lines for docker/versions.env (needs github.com)
# Without a Docker engine the image targets say so in one line and fail (docs/images.md lists what
# to run on a machine with Docker and an NPU).

REGISTRY ?= ghcr.io/qwen-npu
TAG ?= $(QWEN_NPU_VERSION)
CHIP ?= 910b
PLATFORM ?= linux/$(subst aarch64,arm64,$(subst x86_64,amd64,$(shell uname -m)))
DOCKER ?= docker
# Extra `build` flags (make image-test passes podman's: --format docker --network host).
DOCKER_BUILD_FLAGS ?=
SOURCE_URL ?= https://github.com/qwen-npu/qwen-npu
VCS_REF ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# The chip rides in the engine tag except for the default (910b), so the chart's tag stays TAG.
ENGINE_TAG := $(if $(filter 910b,$(CHIP)),$(TAG),$(TAG)-$(CHIP))
ENGINE_IMAGE := $(REGISTRY)/engine:$(ENGINE_TAG)
SIDECAR_IMAGE := $(REGISTRY)/sidecar:$(TAG)
FETCH_IMAGE := $(REGISTRY)/fetch:$(TAG)

IMAGE_PLATFORMS := linux/amd64 linux/arm64
IMAGE_CHIPS := 910b a3

VERSION_KEYS := $(shell sed -n 's/^\([A-Z_][A-Z0-9_]*\)=.*/\1/p' docker/versions.env)
dockerfile_args = $(shell sed -n 's/^ARG \([A-Za-z_][A-Za-z0-9_]*\).*/\1/p' $(1) | sort -u)
version_build_args = $(foreach k,$(filter $(VERSION_KEYS),$(call dockerfile_args,$(1))),--build-arg $(k)=$($(k)))
ENGINE_BUILD_ARGS = $(call version_build_args,docker/engine.Dockerfile) --build-arg CHIP=$(CHIP) \
	--build-arg SOURCE_URL=$(SOURCE_URL) --build-arg VCS_REF=$(VCS_REF)
SIDECAR_BUILD_ARGS = $(call version_build_args,docker/sidecar.Dockerfile) \
	--build-arg SOURCE_URL=$(SOURCE_URL) --build-arg VCS_REF=$(VCS_REF)

# The Dockerfiles' ARG lines carry no default (docker/versions.env is the one source), so an empty
# key stops the build before Docker starts, naming the key. The release downloads' digests are
# needed for the architecture and chip being built only (docker/engine-assets.sh names the keys).
IMAGE_ARCH = $(if $(filter linux/arm64,$(PLATFORM)),aarch64,x86_64)
ASSET_DIGEST_KEYS = $(shell bash docker/engine-assets.sh key triton $(IMAGE_ARCH) $(CHIP)) \
	$(shell bash docker/engine-assets.sh key kernel $(IMAGE_ARCH) $(CHIP))
empty_version_keys = $(foreach k,$(foreach k,$(filter $(VERSION_KEYS),$(call dockerfile_args,$(1))),$(if $(findstring _SHA256_,$(k)),,$(k))) $(2),$(if $($(k)),,$(k)))
define need_version_keys
@$(if $(strip $(call empty_version_keys,$(1),$(2))),echo "make $@: $(strip $(call empty_version_keys,$(1),$(2))) empty in docker/versions.env (the Dockerfiles' only source of the build arguments): set $(if $(findstring _SHA256_,$(call empty_version_keys,$(1),$(2))),them (make image-digests prints the *_SHA256_* lines),them)"; exit 2,true)
endef

# One line and a non-zero exit when no Docker engine answers (no CLI, or no daemon behind it).
define need_docker
@$(DOCKER) info >/dev/null 2>&1 || { echo "make $@: no Docker engine answers ('$(DOCKER) info' failed); run it on a machine with Docker, see docs/images.md"; exit 1; }
endef

define check_platform
@case " $(IMAGE_PLATFORMS) " in *" $(PLATFORM) "*) ;; *) echo "make $@: PLATFORM=$(PLATFORM) is not one of: $(IMAGE_PLATFORMS); set PLATFORM=linux/amd64 or PLATFORM=linux/arm64"; exit 2;; esac
endef

.PHONY: image image-sidecar image-fetch push push-fetch image-lint images-wheelhouse image-digests

image: ## build the engine image (REGISTRY, TAG, PLATFORM, CHIP=910b|a3)
	$(check_platform)
	@case " $(IMAGE_CHIPS) " in *" $(CHIP) "*) ;; *) echo "make $@: CHIP=$(CHIP) is not one of: $(IMAGE_CHIPS); set CHIP=910b (Atlas A2) or CHIP=a3 (Atlas A3)"; exit 2;; esac
	$(call need_version_keys,docker/engine.Dockerfile,$(ASSET_DIGEST_KEYS))
	$(need_docker)
	DOCKER_BUILDKIT=1 $(DOCKER) build $(DOCKER_BUILD_FLAGS) --platform $(PLATFORM) -f docker/engine.Dockerfile \
		$(ENGINE_BUILD_ARGS) -t $(ENGINE_IMAGE) .
	@echo ">> built $(ENGINE_IMAGE) ($(PLATFORM), $(CHIP)); next: make push, or docs/images.md's checklist"

image-sidecar: ## build the sidecar image (REGISTRY, TAG, PLATFORM)
	$(check_platform)
	$(call need_version_keys,docker/sidecar.Dockerfile)
	$(need_docker)
	DOCKER_BUILDKIT=1 $(DOCKER) build $(DOCKER_BUILD_FLAGS) --platform $(PLATFORM) -f docker/sidecar.Dockerfile \
		$(SIDECAR_BUILD_ARGS) -t $(SIDECAR_IMAGE) .
	@echo ">> built $(SIDECAR_IMAGE) ($(PLATFORM)); its size must stay under 200 MB: $(DOCKER) image ls $(SIDECAR_IMAGE)"

# The model.fetch staging Job's image: the sidecar's Dockerfile with the fetch extra (huggingface_hub,
# modelscope, boto3: too large for the sidecar's 200 MB budget, so an image of its own).
image-fetch: ## build the fetch image for model.fetch (REGISTRY, TAG, PLATFORM)
	$(check_platform)
	$(call need_version_keys,docker/sidecar.Dockerfile)
	$(need_docker)
	DOCKER_BUILDKIT=1 $(DOCKER) build $(DOCKER_BUILD_FLAGS) --platform $(PLATFORM) -f docker/sidecar.Dockerfile \
		$(SIDECAR_BUILD_ARGS) --build-arg EXTRAS=sidecar,fetch -t $(FETCH_IMAGE) .
	@echo ">> built $(FETCH_IMAGE) ($(PLATFORM)); the chart's image.fetch points at it"

push: ## push the engine and sidecar images (REGISTRY, TAG, CHIP)
	$(need_docker)
	$(DOCKER) push $(ENGINE_IMAGE)
	$(DOCKER) push $(SIDECAR_IMAGE)

push-fetch: ## push the fetch image (REGISTRY, TAG; after make image-fetch)
	$(need_docker)
	$(DOCKER) push $(FETCH_IMAGE)

# The sha256 of every release download the engine image takes (triton-ascend per architecture,
# sgl-kernel-npu per chip and architecture), as KEY=value lines to paste into docker/versions.env.
# It downloads them (about 1 GB): run it where the release pages are reachable, and read the digests
# against the release page before pasting. Every asset is tried: one the release does not publish
# gets a `# KEY: ... (HTTP 404 at <url>)` line, and the run then exits 3 (docker/engine-assets.sh).
image-digests: ## print the release downloads' sha256 lines for docker/versions.env (needs github.com)
	@TRITON_ASCEND_VERSION=$(TRITON_ASCEND_VERSION) SGL_KERNEL_NPU_VERSION=$(SGL_KERNEL_NPU_VERSION) \
		NPU_TORCH_VERSION=$(NPU_TORCH_VERSION) CANN_VERSION=$(CANN_VERSION) ENGINE_PYTHON_VERSION=$(ENGINE_PYTHON_VERSION) \
		TRITON_ASCEND_URL=$$(sed -n 's/^ARG TRITON_ASCEND_URL=//p' docker/engine.Dockerfile) \
		SGL_KERNEL_NPU_URL=$$(sed -n 's/^ARG SGL_KERNEL_NPU_URL=//p' docker/engine.Dockerfile) \
		bash docker/engine-assets.sh digests

image-lint: $(STAMP) tools-shellcheck ## hadolint both Dockerfiles, shellcheck every shell script
	$(BIN)/hadolint docker/engine.Dockerfile docker/sidecar.Dockerfile
	shellcheck -x $(SHELL_SCRIPTS)

# Every shell script of the checkout: *.sh files and files whose first line is a sh/bash shebang.
SHELL_SCRIPTS = $(shell git ls-files -co --exclude-standard | while read -r f; do \
	case "$$f" in (*.sh) echo "$$f";; (*) [ -f "$$f" ] && head -n1 "$$f" 2>/dev/null | \
	grep -qE '^\#!.*[/ ](ba)?sh( |$$)' && echo "$$f";; esac; done)

# The sidecar environment test (tests/docker/test_sidecar_env.py) rebuilds the sidecar's Python
# environment offline: these are its wheels (the pinned closure plus the build backend).
WHEELHOUSE := .venv-wheels/sidecar
images-wheelhouse: $(WHEELHOUSE)/.complete

$(WHEELHOUSE)/.complete: docker/sidecar-constraints.txt pyproject.toml
	@echo ">> downloading the sidecar's pinned wheels into $(WHEELHOUSE) (once)"
	@mkdir -p $(WHEELHOUSE)
	@$(DOWNLOAD_PIP) download -q --progress-bar off -d $(WHEELHOUSE) --only-binary=:all: \
		-r docker/sidecar-constraints.txt \
		"hatchling==$$(sed -n 's/.*"hatchling==\([^"]*\)".*/\1/p' pyproject.toml)" $(QUIET_PIP)
	@touch $@

TEST_DEPS += images-wheelhouse tools-shellcheck

# The sidecar image's lock: pip-compile resolves pyproject.toml's sidecar extra (the input) for the
# sidecar's Python into docker/sidecar-constraints.txt (checked in). A maintainer's verb: it asks
# the package index, so make test does not run it (tests/docker/test_sidecar_env.py checks the
# lock against the extra offline, and rebuilds the environment from it).
.PHONY: sidecar-constraints
sidecar-constraints: $(STAMP) ## re-lock docker/sidecar-constraints.txt from the sidecar extra (pip-compile; asks PyPI)
	@test "$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$(SIDECAR_PYTHON_VERSION)" \
		|| { echo "make sidecar-constraints: .venv's Python is not SIDECAR_PYTHON_VERSION=$(SIDECAR_PYTHON_VERSION) (docker/versions.env)"; exit 2; }
	CUSTOM_COMPILE_COMMAND="make sidecar-constraints" $(BIN)/pip-compile --quiet --extra sidecar \
		--strip-extras --no-emit-index-url --no-emit-find-links --output-file docker/sidecar-constraints.txt pyproject.toml

# The sidecar environment's size and start time, measured here (no Docker): out/perf/images.md.
.PHONY: perf-images
perf-images: images-wheelhouse ## the sidecar image environment: size and start time (out/perf/images.md)
	@mkdir -p $(OUT)/perf
	$(BIN)/python -m tools.perf.images --out $(OUT)/perf/images.md

PERF_TARGETS += perf-images
