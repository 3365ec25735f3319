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
