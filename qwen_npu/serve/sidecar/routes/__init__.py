"""One router per file: ``health`` (the kubelet's probes), ``status`` (JSON), ``metrics``."""
