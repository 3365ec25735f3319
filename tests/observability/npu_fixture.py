"""A tiny stand-in for MindCluster's npu-exporter: serves ``npu_chip_info_*`` on 127.0.0.1.

The series names and labels come from ``qwen_npu.metrics.external`` (the list
the dashboards and alerts are checked against); the values are what a test dials in per chip.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from qwen_npu.metrics.external import NPU_EXPORTER_METRICS

Chip = Mapping[str, str]  # label -> value


def exposition(chips: list[tuple[Chip, Mapping[str, float]]]) -> str:
    """Text exposition of every NPU exporter metric for the given chips (missing values: 0)."""
    lines: list[str] = []
    for spec in NPU_EXPORTER_METRICS:
        lines += [f"# HELP {spec.name} {spec.help}", f"# TYPE {spec.name} gauge"]
        for labels, values in chips:
            assert set(labels) == set(spec.labels), f"chip labels must be {spec.labels}"
            rendered = ",".join(f'{k}="{labels[k]}"' for k in spec.labels)
            lines.append(f"{spec.name}{{{rendered}}} {values.get(spec.name, 0.0)}")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def npu_exporter(chips: list[tuple[Chip, Mapping[str, float]]]) -> Iterator[int]:
    """Serve the exposition on a free port of 127.0.0.1; yield the port; always shut down."""
    body = exposition(chips).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            if self.path == "/metrics":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
