"""The registry calls a release makes, through skopeo (containers/image): push by digest
(untagged), tag, read, list and delete.

Why not one `skopeo copy` to the tag: a release pushes every manifest by digest first and tags
only once all images, signatures and the chart are in, so a failed release leaves nothing tagged;
pushing to `repo@digest` makes the registry check the manifest against that digest.
Credentials: REGISTRY_USER/REGISTRY_PASSWORD or REGISTRY_AUTH_FILE (containers' auth.json); TLS:
the system's CAs plus REGISTRY_CA for a site registry with its own CA.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.release import ReleaseError


@dataclass(frozen=True)
class Target:
    """`host[:port]/namespace` (make's REGISTRY): where the images and the chart go."""

    host: str
    namespace: str

    @classmethod
    def parse(cls, value: str) -> Target:
        text = value.strip().removeprefix("oci://").removeprefix("docker://").strip("/")
        host, _, namespace = text.partition("/")
        if not host or ("." not in host and ":" not in host and host != "localhost"):
            raise ReleaseError(
                f"REGISTRY={value!r} is not host[:port]/namespace; "
                "set REGISTRY=registry.example:5000/qwen-npu"
            )
        return cls(host, namespace)

    def repo(self, name: str) -> str:
        """The repository path inside the registry (no host)."""
        return f"{self.namespace}/{name}" if self.namespace else name

    def ref(self, name: str) -> str:
        """The full repository reference, host included."""
        return f"{self.host}/{self.repo(name)}"

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}" if self.namespace else self.host


CHART_REPO = "charts"  # the chart's repository under the namespace: CHART_REPO/qwen-npu
CHART = f"{CHART_REPO}/qwen-npu"
_UNREACHABLE = re.compile(r"connection refused|no such host|dial tcp|i/o timeout|no route", re.I)
_ABSENT = re.compile(r"manifest unknown|name unknown|not found|\b404\b", re.I)
_REFUSED = re.compile(r"unauthorized|authentication required|denied|\b40[13]\b", re.I)


@dataclass
class Registry:
    """One registry host, reached through skopeo (and Helm) with an auth file and a CA."""

    host: str
    auth_file: str | None = None
    ca_file: str | None = None
    user: str = "(REGISTRY_AUTH_FILE)"

    @classmethod
    def from_env(cls, host: str) -> Registry:
        env = os.environ.get
        if env("REGISTRY_USER"):
            return cls.login(
                host, env("REGISTRY_USER", ""), env("REGISTRY_PASSWORD", ""), env("REGISTRY_CA")
            )
        return cls(host, env("REGISTRY_AUTH_FILE"), env("REGISTRY_CA"))

    @classmethod
    def login(cls, host: str, user: str, password: str, ca_file: str | None = None) -> Registry:
        """The credential in a private auth.json (not on a command line), gone at exit."""
        fd, path = tempfile.mkstemp(prefix="qwen-npu-auth-", suffix=".json")
        atexit.register(os.unlink, path)
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        with os.fdopen(fd, "w") as handle:
            json.dump({"auths": {host: {"auth": auth}}}, handle)
        return cls(host, path, ca_file, user)

    def skopeo_flags(self, prefix: str = "") -> list[str]:
        """skopeo's credential and CA flags (`prefix` "src-" or "dest-" for copy)."""
        flags = [f"--{prefix}authfile", self.auth_file] if self.auth_file else []
        if self.ca_file:
            if not Path(self.ca_file).is_file():
                raise ReleaseError(
                    f"REGISTRY_CA={self.ca_file}: no such file; give the registry CA's PEM file"
                )
            # skopeo reads a directory of *.crt (added to the system's CAs): one per CA's content
            pem = Path(self.ca_file).read_bytes()
            certs = (
                Path(tempfile.gettempdir()) / f"qwen-npu-ca-{hashlib.sha256(pem).hexdigest()[:16]}"
            )
            if not (certs / "ca.crt").is_file():
                certs.mkdir(exist_ok=True)
                shutil.copy(self.ca_file, certs / "ca.crt")
            flags += [f"--{prefix}cert-dir", str(certs)]
        return flags

    def _skopeo(self, *args: str, absent_ok: bool = False) -> bytes | None:
        """Run skopeo; its failure as one line (None when `absent_ok` and the thing is absent)."""
        try:
            proc = subprocess.run(["skopeo", *args], capture_output=True, timeout=3600)
        except FileNotFoundError:
            raise ReleaseError("skopeo is not installed; run `make tools-release`") from None
        if proc.returncode == 0:
            return proc.stdout
        lines = proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        reason = re.sub(r'^time=.*?msg="(.*)"$', r"\1", lines[-1]).replace('\\"', '"')
        if absent_ok and _ABSENT.search(reason):
            return None
        if _REFUSED.search(reason):
            if not self.auth_file:
                raise ReleaseError(
                    f"registry {self.host}: authentication required and no credential given; "
                    "set REGISTRY_USER and REGISTRY_PASSWORD, or REGISTRY_AUTH_FILE"
                )
            raise ReleaseError(
                f"registry {self.host}: the credential of user {self.user!r} "
                "is refused (HTTP 401); check REGISTRY_USER/REGISTRY_PASSWORD or REGISTRY_AUTH_FILE"
            )
        if "x509" in reason or "certificate" in reason:
            raise ReleaseError(
                f"registry {self.host}: its TLS certificate is not trusted ({reason}); "
                "set REGISTRY_CA=<the registry's CA file>"
            )
        if _UNREACHABLE.search(reason):
            raise ReleaseError(
                f"registry {self.host} unreachable ({reason}); check REGISTRY and that the "
                "registry runs and answers on that port"
            )
        raise ReleaseError(f"registry {self.host}: skopeo {args[0]} failed ({reason})")

    def ref(self, repo: str, reference: str) -> str:
        sep = "@" if reference.startswith("sha256:") else ":"
        return f"docker://{self.host}/{repo}{sep}{reference}"

    def get_manifest(self, repo: str, reference: str) -> tuple[bytes, str] | None:
        """The manifest a tag or digest names and its media type; None when absent."""
        body = self._skopeo(
            "inspect", "--raw", *self.skopeo_flags(), self.ref(repo, reference), absent_ok=True
        )
        return None if body is None else (body, str(json.loads(body).get("mediaType", "")))

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """The digest a tag (or digest) resolves to, None when absent."""
        got = self.get_manifest(repo, reference)
        return None if got is None else "sha256:" + hashlib.sha256(got[0]).hexdigest()

    def copy(self, source: str, dest: str) -> None:
        """skopeo copy, the manifest bytes kept: pushing to `repo@digest` has the registry check
        them against that digest, and reading by digest checks what it answers."""
        flags = self.skopeo_flags("src-") if source.startswith("docker://") else []
        flags += self.skopeo_flags("dest-") if dest.startswith("docker://") else []
        self._skopeo("copy", "--quiet", "--preserve-digests", *flags, source, dest)

    def push(self, source: str, repo: str, digest: str) -> str:
        """An image (`oci:DIR:NAME`, `oci-archive:TAR`) pushed untagged, by its digest."""
        self.copy(source, self.ref(repo, digest))
        return digest

    def pull(self, repo: str, reference: str, dest: str) -> None:
        """An image or artifact into `dest` (`dir:DIR`, `oci-archive:TAR:NAME`)."""
        self.copy(self.ref(repo, reference), dest)

    def tag(self, repo: str, digest: str, tag: str) -> None:
        """Point `tag` at a manifest already pushed (its blobs are there: nothing is uploaded)."""
        self.copy(self.ref(repo, digest), self.ref(repo, tag))

    def tags(self, repo: str) -> list[str]:
        out = self._skopeo(
            "list-tags", *self.skopeo_flags(), f"docker://{self.host}/{repo}", absent_ok=True
        )
        return [] if out is None else list(json.loads(out).get("Tags") or [])

    def delete_manifest(self, repo: str, digest: str) -> bool:
        """DELETE by digest (removes its tags); False when the registry does not allow it."""
        try:
            self._skopeo("delete", *self.skopeo_flags(), self.ref(repo, digest))
        except ReleaseError:
            return False
        return True


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

    def pushed_chart(self, target: Target, version: str, digest: str) -> None:
        self.done.append((target.repo(CHART), version, digest, None))

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
