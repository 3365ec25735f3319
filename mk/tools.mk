# System tools the tests use for real, installed from Debian's packages when missing, by one rule.
#
#   promtool/prometheus  `promtool check metrics|rules`, `promtool test rules`, a real Prometheus
#                        on 127.0.0.1 in the end-to-end tests
#   shellcheck           every shell script we ship
#   docker-registry, skopeo, gpg, gpgv
#                        the release path (issue 26, mk/release.mk): the CNCF Distribution registry
#                        on 127.0.0.1, OCI layouts, signing, policy-checked pulls, the site key
#   podman and helpers   mk/podman.mk (its PODMAN_TOOLS)
#
# Each part lists its tools as command=package pairs; `debian_tools` installs the packages of the
# commands that are missing in one apt-get (dpkg takes one lock, so make test installs them all at
# once before its parallel set-up: `make tools`).

APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300

PROMETHEUS_TOOLS := promtool=prometheus prometheus=prometheus
SHELLCHECK_TOOLS := shellcheck=shellcheck
RELEASE_TOOLS := docker-registry=docker-registry skopeo=skopeo gpg=gnupg gpgv=gpgv

# $(1): the target's name, $(2): command=package pairs. Installs what is missing (needs root), or
# fails in one line naming the commands and the apt-get command to run.
define debian_tools
	@missing=""; packages=""; for pair in $(2); do \
		command -v "$${pair%%=*}" >/dev/null && continue; missing="$$missing $${pair%%=*}"; \
		case " $$packages " in *" $${pair#*=} "*) ;; *) packages="$$packages $${pair#*=}";; esac; \
	done; \
	if [ -n "$$missing" ]; then \
		echo ">> installing$$packages (for$$missing): apt-get install"; \
		if [ "$$(id -u)" != 0 ]; then echo "make $(1):$$missing missing and installing needs root: sudo apt-get install$$packages"; exit 1; fi; \
		apt-get update -qq >/dev/null 2>&1 || { echo "make $(1): apt-get update failed: no Debian mirror reachable,$$missing cannot be installed"; exit 1; }; \
		$(APT_INSTALL) $$packages >/dev/null 2>&1 || { echo "make $(1): apt-get install$$packages failed; run it by hand to see why"; exit 1; }; \
		for pair in $(2); do command -v "$${pair%%=*}" >/dev/null || { echo "make $(1): $${pair%%=*} still missing after apt-get install$$packages"; exit 1; }; done; \
	fi
endef

.PHONY: tools tools-prometheus tools-shellcheck tools-release

tools: ## install every system tool make test uses (promtool, prometheus, shellcheck, podman, the release tools) in one apt-get
	$(call debian_tools,$@,$(PROMETHEUS_TOOLS) $(SHELLCHECK_TOOLS) $(RELEASE_TOOLS) $(PODMAN_TOOLS))

tools-prometheus: ## install promtool and prometheus (Debian's prometheus)
	$(call debian_tools,$@,$(PROMETHEUS_TOOLS))

tools-shellcheck: ## install shellcheck (Debian's)
	$(call debian_tools,$@,$(SHELLCHECK_TOOLS))

tools-release: ## install the release path's tools (docker-registry, skopeo, gnupg)
	$(call debian_tools,$@,$(RELEASE_TOOLS))

TEST_DEPS += tools-prometheus tools-shellcheck tools-release
