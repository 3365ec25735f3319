"""What every release verb shares: the progress line, file digests, the publisher that pushes and
signs, file signatures and their verification, the chart's version and the source record.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.log import PartLog
from tools.paths import CHART_DIR, REPO
from tools.release import ReleaseError, chart, oci, signing
from tools.release.registry import Registry, Target

REPO_ROOT = REPO


IMAGES = ("engine", "sidecar")

log = PartLog("release")


# Where the nodes keep the site's public keyring (policy.json's keyPath).
NODE_KEYRING = Path("/etc/containers/keys/qwen-npu-site.gpg")


def say(event: str, **fields: Any) -> None:
    """One progress line, in the shape every part prints (``qwen_npu.log``)."""
    log("info", event, **fields)


def sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


@dataclass
class Publisher:
    """Tags set in one run, and how to undo them."""

    registry: Registry
    done: list[tuple[str, str, str, tuple[bytes, str] | None]] = field(default_factory=list)

    def refuse_existing(self, wanted: list[tuple[str, str]], overwrite: bool, what: str) -> None:
        present = [
            f"{repo}:{tag}" for repo, tag in wanted if self.registry.manifest_digest(repo, tag)
        ]
        if present and not overwrite:
            raise ReleaseError(
                f"{what} exists in {self.registry.host} ({', '.join(present)}); bump the version "
                "(docker/versions.env, Chart.yaml) or re-run with OVERWRITE=1"
            )

    def tag(self, repo: str, tag: str, image: oci.Image) -> None:
        previous = None
        if self.registry.manifest_digest(repo, tag):
            previous = self.registry.get_manifest(repo, tag)
        self.registry.put_manifest(repo, tag, image.manifest, image.media_type)
        self.done.append((repo, tag, image.digest, previous))

    def record_chart(self, repo: str, tag: str, digest: str) -> None:
        self.done.append((repo, tag, digest, None))

    def rollback(self) -> list[str]:
        """Undo this run's tags; returns what could not be undone."""
        left = []
        ours = {(repo, tag) for repo, tag, _, _ in self.done}
        for repo, tag, digest, previous in reversed(self.done):
            try:
                if previous is not None:
                    self.registry.put_manifest(repo, tag, previous[0], previous[1])
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


def guard(publisher: Publisher, exc: ReleaseError) -> ReleaseError:
    left = publisher.rollback()
    if left:
        return ReleaseError(
            f"{exc}; the tags set so far could not be removed ({', '.join(left)}): "
            "the registry refuses deletes (storage.delete.enabled); delete them by hand"
        )
    return exc


def sign_file(key: signing.SigningKey, path: Path) -> Path:
    sig = path.with_name(path.name + ".asc")
    sig.unlink(missing_ok=True)
    argv = [
        "gpg",
        "--batch",
        "--yes",
        "--pinentry-mode",
        "loopback",
        "--local-user",
        key.fingerprint,
    ]
    if key.passphrase_file:
        argv += ["--passphrase-file", key.passphrase_file]
    signing.run(
        [*argv, "--armor", "--detach-sign", "--output", str(sig), str(path)],
        what=f"signing {path.name}",
        env=key.env(),
    )
    return sig


def verify_file(path: Path, keyring: Path) -> None:
    sig = path.with_name(path.name + ".asc")
    if not sig.is_file():
        raise ReleaseError(f"{path}: no signature {sig.name}; the record is not signed, refuse it")
    proc = subprocess.run(
        ["gpgv", "--keyring", str(keyring.resolve()), str(sig), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ReleaseError(
            f"{path}: its signature {sig.name} does not verify with {keyring}; "
            "the record was changed or signed by another key"
        )


def pull_and_verify(
    target: Target, registry: Registry, version: str, keyring: Path, work: Path
) -> dict[str, Any]:
    """helm pull from oci:// and the provenance check (what `helm pull --verify` does)."""
    dest = work / "pulled"
    shutil.rmtree(dest, ignore_errors=True)
    archive = chart.pull(target, registry, version, dest, work)
    result = chart.verify(archive, keyring)
    return {"archive": archive, "archive_sha256": sha256_file(archive), **result}


def read_chart_version() -> str:
    # lazy: an extra's (pyproject.toml); the base install goes without
    import yaml

    data = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    return str(data["version"])


def source_record() -> dict[str, Any]:
    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
        return proc.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
