"""What the release verbs share: the progress log, the publisher that tags last and undoes its
tags on failure, the chart's pull-and-verify and the source record."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.log import PartLog
from tools.release import ReleaseError, chart
from tools.release.oci import sha256_file
from tools.release.registry import Registry, Target

CHART = f"{chart.CHART_REPO}/qwen-npu"  # the chart's repository under the namespace

log = PartLog("release")


@dataclass
class Publisher:
    """Tags set in one run (repository, tag, digest, the digest it replaced), and their undoing."""

    registry: Registry
    done: list[tuple[str, str, str, str | None]] = field(default_factory=list)

    def refuse_existing(
        self, target: Target, tags: dict[str, str], version: str, overwrite: bool
    ) -> None:
        """Refuse a release whose image tags or chart version are there, unless `overwrite`."""
        wanted = [*((target.repo(n), t) for n, t in tags.items()), (target.repo(CHART), version)]
        present = [f"{r}:{t}" for r, t in wanted if self.registry.manifest_digest(r, t)]
        if present and not overwrite:
            raise ReleaseError(
                f"release {version} exists in {self.registry.host} ({', '.join(present)}); bump "
                "the version (docker/versions.env, Chart.yaml) or re-run with OVERWRITE=1"
            )

    def tag(self, repo: str, tag: str, digest: str) -> None:
        previous = self.registry.manifest_digest(repo, tag)
        self.registry.tag(repo, digest, tag)
        self.done.append((repo, tag, digest, previous))

    def push_chart(self, archive: Path, target: Target, version: str, work: Path) -> str:
        digest = chart.push(archive, target, self.registry, work)
        self.done.append((target.repo(CHART), version, digest, None))
        return digest

    def rollback(self) -> list[str]:
        """Undo this run's tags; returns what could not be undone."""
        left = []
        ours = {(repo, tag) for repo, tag, _, _ in self.done}
        for repo, tag, digest, previous in reversed(self.done):
            try:
                if previous is not None:
                    self.registry.tag(repo, previous, tag)
                    continue
                # a registry deletes a manifest with every tag on it: not when others share it
                shared = [
                    other
                    for other in self.registry.tags(repo)
                    if (repo, other) not in ours
                    and self.registry.manifest_digest(repo, other) == digest
                ]
                if shared or not self.registry.delete_manifest(repo, digest):
                    left.append(f"{repo}:{tag}")
            except ReleaseError:
                left.append(f"{repo}:{tag}")
        self.done.clear()
        return left

    def guard(self, exc: ReleaseError) -> ReleaseError:
        """`exc` after the rollback, naming the tags that could not be removed."""
        left = self.rollback()
        if left:
            return ReleaseError(
                f"{exc}; the tags set so far could not be removed ({', '.join(left)}): "
                "the registry refuses deletes (storage.delete.enabled); delete them by hand"
            )
        return exc


def pull_and_verify(
    target: Target, registry: Registry, version: str, keyring: Path, work: Path
) -> dict[str, Any]:
    """helm pull from oci:// and the provenance check (what `helm pull --verify` does)."""
    dest = work / "pulled"
    shutil.rmtree(dest, ignore_errors=True)
    archive = chart.pull(target, registry, version, dest, work)
    result = chart.verify(archive, keyring)
    return {"archive": archive, "archive_sha256": sha256_file(archive), **result}
