# Publishing (issue 26; docs/images.md "Releases", docs/chart.md "Installing from a registry"):
#
#   make release REGISTRY=host:port/ns SIGNING_KEY=<fpr>   build both images, push them by digest,
#        sign them, write their SBOMs, package the chart pinned to the digests with Helm
#        provenance, push it to oci://REGISTRY/charts, tag, write out/release/<version>/record.json.
#        OVERWRITE=1 replaces a release of the same version (refused otherwise).
#   make bundle BUNDLE=DIR [SITE_REGISTRY=host:port/ns]   the air-gapped bundle (and DIR.tar)
#   make bundle-load BUNDLE=DIR|DIR.tar REGISTRY=... SIGNING_KEYRING=site.gpg   into a site registry
#   make chart-pull REGISTRY=... SIGNING_KEYRING=...   helm pull from oci:// + provenance check
#   make model-image MODEL_DIR=... REF=host:port/repo:tag [MODEL_PATH=...]   a checkpoint as an image
#
# Registry access: REGISTRY_USER/REGISTRY_PASSWORD (or REGISTRY_AUTH_FILE) and REGISTRY_CA in the
# environment. Signing: GNUPGHOME and SIGNING_KEY (fingerprint), SIGNING_PASSPHRASE_FILE if any.
# Images: on a Docker host the npu engine (`make image`) and the sidecar, read from the daemon;
# elsewhere the engine's cpu stand-in and the sidecar built with podman (`make image-test-build`).
# RELEASE_BUILD=0 skips the builds and releases ENGINE_SOURCE / SIDECAR_SOURCE as they are.

RELEASE_OUT ?= $(OUT)/release
RELEASE_CLI := $(BIN)/python -m tools.release
# The local names the builds tag (images.mk's default registry); the release pushes to REGISTRY.
BUILD_REGISTRY := ghcr.io/qwen-npu
CHART_VERSION = $(shell sed -n 's/^version: *//p' helm/qwen-npu/Chart.yaml)
VERSION ?= $(CHART_VERSION)
# npu (a Docker host: `make image`, read from the daemon), cpu (here: the stand-in, podman) or auto
# (npu when `docker info` answers). Decided in the recipe, so no other make call runs docker.
ENGINE_FLAVOUR ?= auto
RELEASE_BUILD ?= 1
ENGINE_SOURCE ?=
SIDECAR_SOURCE ?=
NPU_ENGINE_SOURCE = docker-daemon:$(BUILD_REGISTRY)/engine:$(ENGINE_TAG)
NPU_SIDECAR_SOURCE = docker-daemon:$(BUILD_REGISTRY)/sidecar:$(TAG)
CPU_ENGINE_SOURCE = containers-storage:$(BUILD_REGISTRY)/engine:$(ENGINE_TAG)-cpu-standin
CPU_SIDECAR_SOURCE = containers-storage:$(BUILD_REGISTRY)/sidecar:$(TAG)
SIGNING_KEYRING ?= $(RELEASE_OUT)/$(VERSION)/keys/site.gpg

define need_var
@test -n "$($(1))" || { echo "make $@: $(1) is not set; $(2)"; exit 2; }
endef

.PHONY: release bundle bundle-load chart-pull model-image

release: $(STAMP) tools-release ## push, sign and digest-pin the images and the chart (REGISTRY=host:port/ns SIGNING_KEY=<fpr>)
	@case "$(origin REGISTRY)" in "command line"|environment*|override) ;; *) echo "make $@: give the registry to release to: make release REGISTRY=host:port/namespace"; exit 2;; esac
	$(call need_var,SIGNING_KEY,give the fingerprint of the site's signing key in GNUPGHOME (docs/images.md))
	@flavour="$(ENGINE_FLAVOUR)"; \
	if [ "$$flavour" = auto ]; then if $(DOCKER) info >/dev/null 2>&1; then flavour=npu; else flavour=cpu; fi; fi; \
	case "$$flavour" in \
		npu) tag="$(ENGINE_TAG)"; engine="$(or $(ENGINE_SOURCE),$(NPU_ENGINE_SOURCE))"; sidecar="$(or $(SIDECAR_SOURCE),$(NPU_SIDECAR_SOURCE))"; \
			build="$(MAKE) --no-print-directory image image-sidecar REGISTRY=$(BUILD_REGISTRY)";; \
		cpu) tag="$(ENGINE_TAG)-cpu-standin"; engine="$(or $(ENGINE_SOURCE),$(CPU_ENGINE_SOURCE))"; sidecar="$(or $(SIDECAR_SOURCE),$(CPU_SIDECAR_SOURCE))"; \
			build="$(MAKE) --no-print-directory image-test-build REGISTRY=$(BUILD_REGISTRY)";; \
		*) echo "make $@: ENGINE_FLAVOUR=$$flavour is not npu, cpu or auto"; exit 2;; \
	esac; \
	if [ "$(RELEASE_BUILD)" = 1 ]; then $$build || exit 1; fi; \
	echo ">> releasing the $$flavour engine as engine:$$tag ($$engine) and sidecar:$(TAG) ($$sidecar)"; \
	$(RELEASE_CLI) release --registry $(REGISTRY) --key $(SIGNING_KEY) --out $(RELEASE_OUT) \
		--image "engine:$$tag=$$engine,flavour=$$flavour" --image "sidecar:$(TAG)=$$sidecar" \
		$(if $(filter 1,$(OVERWRITE)),--overwrite)

bundle: $(STAMP) tools-release ## the air-gapped bundle of a release (BUNDLE=DIR [VERSION] [SITE_REGISTRY])
	$(call need_var,BUNDLE,give the directory to write: make bundle BUNDLE=out/bundle-$(VERSION))
	$(RELEASE_CLI) bundle --record $(RELEASE_OUT)/$(VERSION)/record.json --bundle $(BUNDLE) \
		--keyring $(SIGNING_KEYRING) $(if $(SITE_REGISTRY),--site-registry $(SITE_REGISTRY))

bundle-load: $(STAMP) tools-release ## push a bundle into a site registry and verify it (BUNDLE REGISTRY SIGNING_KEYRING)
	$(call need_var,BUNDLE,give the bundle directory or its .tar)
	@case "$(origin REGISTRY)" in "command line"|environment*|override) ;; *) echo "make $@: give the site registry: make bundle-load BUNDLE=... REGISTRY=host:port/namespace"; exit 2;; esac
	$(RELEASE_CLI) bundle-load --bundle $(BUNDLE) --registry $(REGISTRY) --keyring $(SIGNING_KEYRING) \
		--out $(OUT)/bundle-load $(if $(filter 1,$(OVERWRITE)),--overwrite)

chart-pull: $(STAMP) ## helm pull the chart from oci://REGISTRY/charts and verify its provenance
	$(RELEASE_CLI) chart-pull --registry $(REGISTRY) --version $(VERSION) --keyring $(SIGNING_KEYRING)

model-image: $(STAMP) tools-release ## a checkpoint (after preflight) as an OCI image (MODEL_DIR REF [MODEL_PATH] [PREFLIGHT_ARGS])
	$(call need_var,MODEL_DIR,give the checkpoint directory)
	$(call need_var,REF,give the image reference: REF=host:port/models/<name>:<tag>)
	$(RELEASE_CLI) model-image --model-dir $(MODEL_DIR) --ref $(REF) \
		$(if $(MODEL_PATH),--path $(MODEL_PATH)) --preflight-args "$(PREFLIGHT_ARGS)"
