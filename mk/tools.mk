# System tools the tests use for real, installed from Debian's packages when missing.
# promtool/prometheus: `promtool check metrics|rules`, `promtool test rules`, and a real Prometheus
# on 127.0.0.1 in the end-to-end test. shellcheck: every shell script we ship.

APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends

.PHONY: tools tools-prometheus tools-shellcheck

tools: tools-prometheus tools-shellcheck ## install the system tools the tests use (promtool, prometheus, shellcheck)

tools-prometheus:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
		echo ">> installing Debian's prometheus package (promtool, prometheus)"; \
		if [ "$$(id -u)" != 0 ]; then echo "tools: need root (or sudo apt-get install prometheus)"; exit 1; fi; \
		apt-get update -qq && $(APT_INSTALL) prometheus >/dev/null; \
		command -v promtool >/dev/null || { echo "tools: promtool still missing after apt-get"; exit 1; }; }

tools-shellcheck:
	@command -v shellcheck >/dev/null || { \
		echo ">> installing Debian's shellcheck package"; \
		if [ "$$(id -u)" != 0 ]; then echo "tools: need root (or sudo apt-get install shellcheck)"; exit 1; fi; \
		apt-get update -qq && $(APT_INSTALL) shellcheck >/dev/null; \
		command -v shellcheck >/dev/null || { echo "tools: shellcheck still missing after apt-get"; exit 1; }; }

TEST_DEPS += tools-prometheus tools-shellcheck

# The release path's tools (issue 26, mk/release.mk): Debian's docker-registry (the CNCF
# Distribution registry the tests run on 127.0.0.1), skopeo (OCI layouts, signing, policy-checked
# pulls) and GnuPG (gpg, gpgv: the site key, Helm provenance).
RELEASE_PACKAGES := docker-registry skopeo gnupg gpgv
RELEASE_COMMANDS := docker-registry skopeo gpg gpgv

.PHONY: tools-release

tools-release: ## install the release path's tools (docker-registry, skopeo, gnupg)
	@missing=""; for c in $(RELEASE_COMMANDS); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
		echo ">> installing$$missing: apt-get install $(RELEASE_PACKAGES)"; \
		if [ "$$(id -u)" != 0 ]; then echo "make $@: $${missing# } missing and installing needs root: sudo apt-get install $(RELEASE_PACKAGES)"; exit 1; fi; \
		apt-get update -qq >/dev/null 2>&1 || { echo "make $@: apt-get update failed: no Debian mirror reachable, $${missing# } cannot be installed"; exit 1; }; \
		$(APT_INSTALL) -o DPkg::Lock::Timeout=300 $(RELEASE_PACKAGES) >/dev/null 2>&1 || { echo "make $@: apt-get install $(RELEASE_PACKAGES) failed"; exit 1; }; \
		for c in $(RELEASE_COMMANDS); do command -v $$c >/dev/null || { echo "make $@: $$c still missing after apt-get install $(RELEASE_PACKAGES)"; exit 1; }; done; \
	fi

TEST_DEPS += tools-release
