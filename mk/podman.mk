# The images built and run for real with podman (no Docker engine on these machines; issue 18,
# docs/images.md "Built and run here").
#
#   make image-test            install podman, make (or reuse) the stand-in base, build the sidecar
#                              image and the engine's CPU stand-in target with the same Dockerfiles
#                              and make targets as on a Docker host, then run
#                              tests/docker/test_podman_images.py
#   make tools-podman          podman buildah mmdebstrap runc uidmap slirp4netns fuse-overlayfs (apt)
#   make image-standin-base    python:<SIDECAR_PYTHON_VERSION>-slim-<SIDECAR_DEBIAN_RELEASE> made
#                              locally: mmdebstrap of that Debian release, the host's CA bundle
#   make image-standin-engine-base
#                              python:<ENGINE_PYTHON_VERSION>-slim-<release>: the stand-in base plus
#                              this machine's CPython of that version (Debian has none)
#   make image-engine-cpu      the engine Dockerfile with ENGINE_FLAVOUR=cpu (the engine's Python,
#                              SGLang's wheel, CPU torch, tests/stubs, a torch_npu without devices),
#                              ending with the build check `patches verify --build --strict`;
#                              built again only when an input changed (io.qwen-npu.build-inputs)
#
# Every podman call reads docker/podman/containers.conf (runc, cgroupfs, file events, ulimits).
# Builds use `--format docker`: with the default OCI format podman drops HEALTHCHECK.

PODMAN ?= podman
export CONTAINERS_CONF := $(CURDIR)/docker/podman/containers.conf
# The commands podman's builds and runs need, and the Debian package of each (mk/tools.mk installs them).
PODMAN_TOOLS := podman=podman buildah=buildah mmdebstrap=mmdebstrap runc=runc newuidmap=uidmap \
	slirp4netns=slirp4netns fuse-overlayfs=fuse-overlayfs
# The flags `make image*` pass to `podman build`: keep HEALTHCHECK, and build steps on the host's
# network (pip reaches the index the host reaches, no bridge or slirp needed).
PODMAN_BUILD_FLAGS := --format docker --network host

# The stand-in base carries the exact name the Dockerfiles use, so they build unchanged.
STANDIN_BASE := docker.io/library/python:$(SIDECAR_PYTHON_VERSION)-slim-$(SIDECAR_DEBIAN_RELEASE)
STANDIN_PACKAGES := python3,python3-venv,python3-pip,python-is-python3,passwd,ca-certificates
STANDIN_MIRROR ?= http://deb.debian.org/debian
# The CA bundle the host's pip trusts (pip's `cert`, else the system bundle): the build's pip
# inside the stand-in must trust the same (a TLS-inspecting egress proxy signs PyPI here).
HOST_CA_BUNDLE ?= $(or $(PIP_CERT),$(shell $(PYTHON) -m pip config get global.cert 2>/dev/null),/etc/ssl/certs/ca-certificates.crt)

ENGINE_CPU_IMAGE := $(REGISTRY)/engine:$(ENGINE_TAG)-cpu-standin
# The Python of the cpu flavour's torch + SGLang stack: the test environment's, the one the CPU torch
# wheel this machine's pip reaches is built for. Where a CPU torch wheel for the engine's Python is
# reachable (the PyTorch CPU index or a mirror of it), ENGINE_CPU_STACK_PYTHON=$(ENGINE_PYTHON_VERSION)
# builds the whole stand-in on it (its own wheelhouse, fetched with --python-version).
ENGINE_CPU_STACK_PYTHON ?= $(TEST_PYTHON_VERSION)
ENGINE_CPU_OTHER_PYTHON := $(filter-out $(TEST_PYTHON_VERSION),$(ENGINE_CPU_STACK_PYTHON))
ENGINE_CPU_WHEELHOUSE := .venv-wheels/engine-cpu$(if $(ENGINE_CPU_OTHER_PYTHON),-py$(ENGINE_CPU_OTHER_PYTHON))
ENGINE_CPU_PIP_TARGET := $(if $(ENGINE_CPU_OTHER_PYTHON),--python-version $(ENGINE_CPU_OTHER_PYTHON))

.PHONY: tools-podman image-standin-base image-standin-engine-base image-test image-test-build image-engine-cpu engine-cpu-build engine-cpu-wheelhouse image-refs

tools-podman: ## install podman and its helpers (Debian packages) for make image-test
	$(call debian_tools,$@,$(PODMAN_TOOLS))
	@$(PODMAN) info >/dev/null 2>&1 || { echo "make $@: 'podman info' fails with CONTAINERS_CONF=$(CONTAINERS_CONF): $$($(PODMAN) info 2>&1 | tail -n1)"; exit 1; }

# The stand-in for the official python:<v>-slim-<release> image (no registry is reachable here):
# Debian's minbase of that release with its python3, the host's CA bundle, imported and tagged with
# the exact name the Dockerfiles use. Made once; reused while it exists in podman's storage.
# Its Python lives in /usr/bin and it is larger than the official slim image (about 250 MB against
# 125-150 MB), so image sizes are measured as what our layers add.
image-standin-base: tools-podman ## make (or reuse) the stand-in python base image for podman builds
	@if $(PODMAN) image exists $(STANDIN_BASE); then echo ">> reusing $(STANDIN_BASE) ($$($(PODMAN) image inspect --format '{{index .Labels "io.qwen-npu.standin"}}' $(STANDIN_BASE)))"; exit 0; fi; \
	test -r "$(HOST_CA_BUNDLE)" || { echo "make $@: the host's CA bundle $(HOST_CA_BUNDLE) is not readable; set HOST_CA_BUNDLE=<pem file pip trusts>"; exit 1; }; \
	mkdir -p $(OUT)/podman && rm -f $(OUT)/podman/standin-base.tar; \
	echo ">> making $(STANDIN_BASE): mmdebstrap --variant=minbase $(SIDECAR_DEBIAN_RELEASE) with $(STANDIN_PACKAGES)"; \
	mmdebstrap --quiet --variant=minbase --include=$(STANDIN_PACKAGES) \
		--customize-hook='upload $(HOST_CA_BUNDLE) /etc/ssl/certs/ca-certificates.crt' \
		$(SIDECAR_DEBIAN_RELEASE) $(OUT)/podman/standin-base.tar $(STANDIN_MIRROR) >$(OUT)/podman/mmdebstrap.log 2>&1 \
		|| { echo "make $@: the stand-in base cannot be made: mmdebstrap $(SIDECAR_DEBIAN_RELEASE) from $(STANDIN_MIRROR) failed ($$(grep -m1 "^E:" $(OUT)/podman/mmdebstrap.log || tail -n1 $(OUT)/podman/mmdebstrap.log))"; exit 1; }; \
	$(PODMAN) import --quiet \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'LABEL io.qwen-npu.standin="mmdebstrap $(SIDECAR_DEBIAN_RELEASE) minbase, not the official image"' \
		--change 'CMD ["python3"]' \
		$(OUT)/podman/standin-base.tar $(STANDIN_BASE) >/dev/null \
		|| { echo "make $@: podman import of $(OUT)/podman/standin-base.tar failed"; exit 1; }; \
	rm -f $(OUT)/podman/standin-base.tar; \
	for v in $(SIDECAR_PYTHON_VERSION) $(TEST_PYTHON_VERSION); do \
		$(PODMAN) run --rm --network none $(STANDIN_BASE) python -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(0 if v == '$$v' else 'Debian $(SIDECAR_DEBIAN_RELEASE) has Python ' + v + ', not $$v')" \
			|| { echo "make $@: $(STANDIN_BASE) is not a stand-in for Python $$v; remove it: podman rmi $(STANDIN_BASE)"; $(PODMAN) rmi $(STANDIN_BASE) >/dev/null; exit 1; }; \
	done; \
	echo ">> made $(STANDIN_BASE) ($$($(PODMAN) image inspect --format '{{.Size}}' $(STANDIN_BASE)) bytes)"

# The engine's Python for the cpu flavour's base (issue 21): Debian $(SIDECAR_DEBIAN_RELEASE) has no
# Python $(ENGINE_PYTHON_VERSION) and no registry is reachable, so the stand-in is the stand-in base plus
# this machine's CPython build of that version (pyenv), without its site-packages, in /usr/local
# (docker/podman/python-standin.Containerfile). Made once; reused while it exists.
STANDIN_ENGINE_BASE := docker.io/library/python:$(ENGINE_PYTHON_VERSION)-slim-$(SIDECAR_DEBIAN_RELEASE)
PYENV_ROOT ?= $(HOME)/.pyenv
STANDIN_CPYTHON ?= $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(ENGINE_PYTHON_VERSION).*)))

image-standin-engine-base: image-standin-base ## make (or reuse) the stand-in python:<ENGINE_PYTHON_VERSION> base
	@if $(PODMAN) image exists $(STANDIN_ENGINE_BASE); then echo ">> reusing $(STANDIN_ENGINE_BASE)"; exit 0; fi; \
	py=python$(ENGINE_PYTHON_VERSION); \
	test -x "$(STANDIN_CPYTHON)/bin/$$py" || { echo "make $@: no CPython $(ENGINE_PYTHON_VERSION) on this machine ($(PYENV_ROOT)/versions/$(ENGINE_PYTHON_VERSION).*): pyenv install $(ENGINE_PYTHON_VERSION), or set STANDIN_CPYTHON=<its prefix>"; exit 1; }; \
	echo ">> making $(STANDIN_ENGINE_BASE): $(STANDIN_BASE) plus $(STANDIN_CPYTHON)"; \
	rm -rf $(OUT)/podman/cpython && mkdir -p $(OUT)/podman/cpython \
	&& tar -C "$(STANDIN_CPYTHON)" --exclude="lib/$$py/site-packages/*" --exclude="lib/$$py/test" \
		--exclude="lib/$$py/config-*" -cf - "bin/$$py" "lib/lib$$py.so.1.0" "lib/$$py" | tar -C $(OUT)/podman/cpython -xf - \
	&& $(PODMAN) build --format docker --network none -f docker/podman/python-standin.Containerfile \
		--build-arg STANDIN_DEBIAN_BASE=$(STANDIN_BASE) --build-arg PYTHON_VERSION=$(ENGINE_PYTHON_VERSION) \
		-t $(STANDIN_ENGINE_BASE) $(OUT)/podman/cpython >$(OUT)/podman/standin-engine-base.log 2>&1 \
		|| { echo "make $@: $(STANDIN_ENGINE_BASE) cannot be made from $(STANDIN_CPYTHON): $$(tail -n1 $(OUT)/podman/standin-engine-base.log)"; exit 1; }; \
	rm -rf $(OUT)/podman/cpython; \
	echo ">> made $(STANDIN_ENGINE_BASE) ($$($(PODMAN) image inspect --format '{{.Size}}' $(STANDIN_ENGINE_BASE)) bytes)"

# The engine's cpu flavour installs offline from this wheelhouse (a named build context): the CPU
# torch wheel at TEST_TORCH_VERSION, requirements/sglang-cpu.txt's closure and SGLang's wheel,
# fetched once with this machine's pip configuration (its local mirrors make it fast).
engine-cpu-wheelhouse: $(ENGINE_CPU_WHEELHOUSE)/.complete

$(ENGINE_CPU_WHEELHOUSE)/.complete: requirements/sglang-cpu.txt docker/versions.env
	@echo ">> downloading the engine cpu flavour's wheels into $(ENGINE_CPU_WHEELHOUSE) (once)"
	@mkdir -p $(ENGINE_CPU_WHEELHOUSE)
	@$(DOWNLOAD_PIP) download -q --progress-bar off -d $(ENGINE_CPU_WHEELHOUSE) --only-binary=:all: $(ENGINE_CPU_PIP_TARGET) \
		torch==$(TEST_TORCH_VERSION) -r requirements/sglang-cpu.txt $(QUIET_PIP)
	@$(DOWNLOAD_PIP) download -q --progress-bar off -d $(ENGINE_CPU_WHEELHOUSE) --only-binary=:all: --no-deps $(ENGINE_CPU_PIP_TARGET) \
		sglang==$(SGLANG_VERSION) $(QUIET_PIP)
	@ls $(ENGINE_CPU_WHEELHOUSE) | grep -q '^torch-$(TEST_TORCH_VERSION)+cpu-' && ! ls $(ENGINE_CPU_WHEELHOUSE) | grep -q '^nvidia' \
		|| { echo "make $@: $(ENGINE_CPU_WHEELHOUSE) holds no CPU torch $(TEST_TORCH_VERSION) wheel (or a CUDA one): give pip a CPU torch (find-links or the PyTorch CPU index)"; exit 1; }
	@touch $@

# Debian's tini replaces Ubuntu's pin in the cpu flavour (same 0.19.0 release, Debian's revision).
# Its base is the engine's Python; its torch + SGLang stack runs TEST_PYTHON_VERSION, the one CPU
# torch wheel pip reaches here (PyPI's x86_64 torch is the CUDA build and the PyTorch CPU index is not
# reachable): the build check then also runs on the engine's Python (docs/images.md).
ENGINE_CPU_BUILD_ARGS = $(subst TEST_PYTHON_VERSION=$(TEST_PYTHON_VERSION),TEST_PYTHON_VERSION=$(ENGINE_CPU_STACK_PYTHON),$(subst TINI_APT_VERSION=$(TINI_APT_VERSION),TINI_APT_VERSION=$(STANDIN_TINI_APT_VERSION),$(ENGINE_BUILD_ARGS))) \
	--build-arg ENGINE_FLAVOUR=cpu --build-context wheels=$(ENGINE_CPU_WHEELHOUSE)

# Built again only when one of its inputs changed. The inputs are this checkout's files as they are
# (a git tree of the working tree, untracked files included: every COPY source is among them), the
# base image and the build command's arguments; their digest rides on the image as a label. A
# fresh clone of what was built last, or a second `make test`, then costs a second instead of
# podman's own cache check (about a minute: buildah copies and hashes the 2.9 GB /opt/venv to find
# that COPY cached). Outside a git checkout it always builds; `podman rmi` the image to force it.
BUILD_INPUTS_LABEL := io.qwen-npu.build-inputs
# Prints the digest (nothing outside a git checkout). It leaves nothing behind but the git objects
# of files not committed yet, as `git stash create` would.
ENGINE_CPU_INPUTS = tree=$$(index=$$(mktemp -u) && GIT_INDEX_FILE=$$index git add -A . 2>/dev/null \
	&& GIT_INDEX_FILE=$$index git write-tree 2>/dev/null; rm -f "$$index") && [ -n "$$tree" ] \
	&& printf '%s\n' "$$tree" "$$($(PODMAN) image inspect --format '{{.Id}}' $(STANDIN_ENGINE_BASE))" \
		'$(PLATFORM) $(ENGINE_CPU_BUILD_ARGS)' | sha256sum | cut -c1-64

image-engine-cpu: image-standin-engine-base ## build the engine Dockerfile's cpu flavour with podman (ends with patches verify --build --strict)
	@inputs=$$($(ENGINE_CPU_INPUTS)); \
	if [ -n "$$inputs" ] && [ "$$($(PODMAN) image inspect --format '{{index .Labels "$(BUILD_INPUTS_LABEL)"}}' $(ENGINE_CPU_IMAGE) 2>/dev/null)" = "$$inputs" ]; then \
		echo ">> $(ENGINE_CPU_IMAGE) is up to date: built from these files, base and build arguments ($(BUILD_INPUTS_LABEL) $${inputs:0:12}); podman rmi it to build it again"; \
	else $(MAKE) --no-print-directory engine-cpu-build; fi

engine-cpu-build: engine-cpu-wheelhouse
	@inputs=$$($(ENGINE_CPU_INPUTS)); echo ">> building $(ENGINE_CPU_IMAGE)$${inputs:+ ($(BUILD_INPUTS_LABEL) $${inputs:0:12})}"; \
	$(PODMAN) build $(PODMAN_BUILD_FLAGS) --platform $(PLATFORM) -f docker/engine.Dockerfile \
		$(ENGINE_CPU_BUILD_ARGS) $${inputs:+--label $(BUILD_INPUTS_LABEL)=$$inputs} -t $(ENGINE_CPU_IMAGE) .
	@echo ">> built $(ENGINE_CPU_IMAGE): the engine Dockerfile's shared stages on the CPU stand-in"

# The references the image targets tag (tests/docker/containers.py reads them).
image-refs:
	@echo "sidecar=$(SIDECAR_IMAGE)"; echo "engine=$(ENGINE_IMAGE)"; echo "engine-cpu=$(ENGINE_CPU_IMAGE)"

# The builds behind image-test: `make image-sidecar` exactly as on a Docker host but with podman,
# and the engine's cpu flavour. Layers are cached in podman's storage: a second run rebuilds
# only what changed. The engine's wheelhouse is a prerequisite here, not only of the sub-make's
# engine-cpu-build: make's parallel set-up then downloads it beside the base images (it needs
# neither), and the sub-make finds it complete instead of downloading it a second time.
image-test-build: tools-podman image-standin-engine-base engine-cpu-wheelhouse
	@$(MAKE) --no-print-directory image-sidecar DOCKER=$(PODMAN) DOCKER_BUILD_FLAGS="$(PODMAN_BUILD_FLAGS)"
	@$(MAKE) --no-print-directory image-engine-cpu

image-test: $(STAMP) image-test-build ## build the sidecar and the engine's cpu flavour with podman and run them (tests/docker/test_podman_images.py)
	$(BIN)/python -m pytest tests/docker/test_podman_images.py -q -p no:cacheprovider $(PYTEST_ARGS)

TEST_DEPS += image-test-build
