"""docker/versions.env, read once: the pins the images, chart, tests and tools share."""

from __future__ import annotations

from pathlib import Path

from tools.paths import VERSIONS_FILE


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines (``#`` comments and blank lines skipped)."""
    versions: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions
