"""Images on disk: OCI layouts (what skopeo writes from podman's storage or a Docker daemon), the
index of an `oci-archive:` tar, images built from files (model images; the tests' stand-ins), and
the entries of a layer (the SBOM, model-pull).

Why: the manifest bytes never change from the layout to the registry, the bundle and the site
registry (skopeo copies with --preserve-digests), so the digest the chart pins is the one the
site pulls; reading them here gives the digest to sign and check before anything is pushed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tools.release import ReleaseError
from tools.release.registry import Registry

REF_NAME = "org.opencontainers.image.ref.name"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    media_type: str


@dataclass
class Image:
    """One image's manifest; its blobs are files `blobs/<hex>` (a layout's blobs/sha256 or a
    skopeo `dir:`); `ref` names it for skopeo."""

    manifest: bytes
    media_type: str
    blobs_dir: Path
    ref: str = ""

    @property
    def digest(self) -> str:
        return sha256_digest(self.manifest)

    @property
    def parsed(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.manifest)
        return data

    def blobs(self) -> list[Blob]:
        data = self.parsed
        found = [data["config"], *data.get("layers", [])]
        return [Blob(d["digest"], int(d["size"]), d["mediaType"]) for d in found]

    def layers(self) -> list[Blob]:
        return self.blobs()[1:]

    def path(self, digest: str) -> Path:
        return self.blobs_dir / digest.removeprefix("sha256:")

    def config(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path(self.blobs()[0].digest).read_bytes())
        return data

    def push(self, registry: Registry, repo: str) -> str:
        """Every blob, then the manifest by digest (no tag); returns the digest."""
        return registry.push(self.ref, repo, self.digest)

    def layer_members(self, blob: Blob) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
        """The entries of one layer (gzip or plain tar), with a reader for regular files."""
        with tarfile.open(self.path(blob.digest)) as tar:
            for member in tar:
                yield member, tar.extractfile(member) if member.isreg() else None


def _pick(index: bytes, ref_name: str | None, where: str) -> dict[str, Any]:
    try:
        manifests: list[dict[str, Any]] = json.loads(index)["manifests"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseError(f"{where}: index.json is not an OCI image index") from None
    if ref_name is None and len(manifests) == 1:
        return manifests[0]
    if ref_name is None:
        raise ReleaseError(f"{where}: holds {len(manifests)} images; name the one to use")
    for desc in manifests:
        if desc.get("annotations", {}).get(REF_NAME) == ref_name:
            return desc
    raise ReleaseError(f"{where}: no image named {ref_name!r} in index.json")


def read_layout(root: Path, ref_name: str | None = None) -> Image:
    try:
        desc = _pick((root / "index.json").read_bytes(), ref_name, str(root))
        manifest = (root / "blobs" / "sha256" / desc["digest"].removeprefix("sha256:")).read_bytes()
    except OSError:
        raise ReleaseError(f"{root}: no index.json or manifest; not an OCI layout") from None
    if sha256_digest(manifest) != desc["digest"]:
        raise ReleaseError(f"{root}: manifest {desc['digest']}: digest mismatch")
    ref = f"oci:{root}:{ref_name}" if ref_name else f"oci:{root}"
    return Image(manifest, desc["mediaType"], root / "blobs" / "sha256", ref)


def read_archive(path: Path) -> tuple[bytes, str]:
    """The manifest (bytes, media type) of a one-image `oci-archive:` tar, digest checked."""
    try:
        with tarfile.open(path, "r:") as tar:
            index = tar.extractfile("index.json")
            desc = _pick(index.read() if index else b"", None, str(path))
            blob = tar.extractfile(f"blobs/sha256/{desc['digest'].removeprefix('sha256:')}")
            manifest = blob.read() if blob else b""
    except (OSError, KeyError, tarfile.TarError) as exc:
        raise ReleaseError(f"{path}: not a readable OCI archive ({exc})") from None
    if sha256_digest(manifest) != desc["digest"]:
        raise ReleaseError(f"{path}: manifest {desc['digest']}: digest mismatch")
    return manifest, str(desc["mediaType"])


def build_image(
    root: Path,
    ref_name: str,
    layers: list[dict[str, bytes | Path]],
    *,
    labels: dict[str, str] | None = None,
    compress: bool = True,
    annotations: dict[str, str] | None = None,
) -> Image:
    """An OCI layout at `root` of an image from files (no base): one layer per mapping of path
    in the image -> bytes or a file to stream (read-only, sorted, mtime 0: deterministic)."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = sha256_digest(data)
        (blobs / digest.removeprefix("sha256:")).write_bytes(data)
        return digest

    descriptors, diff_ids = [], []
    for files in layers:
        blob = blobs / "layer.partial"
        with tarfile.open(blob, "w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(files):
                content = files[name]
                info = tarfile.TarInfo(name.strip("/"))
                info.mode = 0o444
                if isinstance(content, Path):
                    info.size = content.stat().st_size
                    with content.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
        diff_ids.append("sha256:" + sha256_file(blob))
        if compress:
            with (
                blob.open("rb") as src,
                gzip.GzipFile(blob.with_suffix(".gz"), "wb", mtime=0) as out,
            ):
                shutil.copyfileobj(src, out)
            blob.unlink()
            blob = blob.with_suffix(".gz")
        digest = "sha256:" + sha256_file(blob)
        size = blob.stat().st_size
        blob.rename(blobs / digest.removeprefix("sha256:"))
        media_type = OCI_LAYER_GZIP if compress else OCI_LAYER_TAR
        descriptors.append({"mediaType": media_type, "digest": digest, "size": size})
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": labels} if labels else {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": put(config_bytes), "size": len(config_bytes)},
        "layers": descriptors,
    }
    if annotations:
        manifest["annotations"] = annotations
    body = json.dumps(manifest, sort_keys=True).encode()
    desc = {"mediaType": OCI_MANIFEST, "digest": put(body), "size": len(body)}
    index = {"schemaVersion": 2, "manifests": [{**desc, "annotations": {REF_NAME: ref_name}}]}
    (root / "index.json").write_text(json.dumps(index))
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return Image(body, OCI_MANIFEST, blobs, f"oci:{root}:{ref_name}")
