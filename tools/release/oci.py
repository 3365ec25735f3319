"""OCI image layouts on disk and as archives (`oci-archive:` = a tar of a layout), and images made
from files (the model images; the tests' tiny stand-ins for the engine and the sidecar).

Why: the release keeps each image as an OCI layout (skopeo writes it from podman's storage or a
Docker daemon), pushes its blobs with registry.py, the bundle carries the same blobs as an
archive, and bundle-load pushes them back: the manifest bytes never change on the way, so the
digest the chart pins is the digest the site pulls.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tools.release import ReleaseError
from tools.release.registry import OCI_MANIFEST as OCI_MANIFEST
from tools.release.registry import Registry, sha256_digest

REF_NAME = "org.opencontainers.image.ref.name"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    media_type: str


@dataclass
class Image:
    """One image's manifest and the blobs it names, readable from a layout or an archive."""

    manifest: bytes
    media_type: str
    source: BlobSource

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

    def config(self) -> dict[str, Any]:
        with self.source.open(self.blobs()[0].digest) as handle:
            data: dict[str, Any] = json.loads(handle.read())
        return data

    def push(self, registry: Registry, repo: str) -> str:
        """Every blob, then the manifest by digest (no tag); returns the checked digest."""
        for blob in self.blobs():
            with self.source.open(blob.digest) as handle:
                registry.upload_blob(repo, blob.digest, blob.size, handle)
        return registry.put_manifest(repo, self.digest, self.manifest, self.media_type)


class BlobSource:
    """Where an image's blobs are read from."""

    @contextmanager
    def open(self, digest: str) -> Iterator[IO[bytes]]:
        raise NotImplementedError
        yield  # pragma: no cover


class LayoutSource(BlobSource):
    def __init__(self, root: Path) -> None:
        self.root = root

    @contextmanager
    def open(self, digest: str) -> Iterator[IO[bytes]]:
        path = self.root / "blobs" / "sha256" / digest.removeprefix("sha256:")
        if not path.is_file():
            raise ReleaseError(f"{self.root}: blob {digest} is missing; the layout is incomplete")
        with path.open("rb") as handle:
            yield handle


class ArchiveSource(BlobSource):
    def __init__(self, tar: tarfile.TarFile, name: str) -> None:
        self.tar, self.name = tar, name

    @contextmanager
    def open(self, digest: str) -> Iterator[IO[bytes]]:
        member = f"blobs/sha256/{digest.removeprefix('sha256:')}"
        try:
            handle = self.tar.extractfile(member)
        except KeyError:
            handle = None
        if handle is None:
            raise ReleaseError(f"{self.name}: blob {digest} is missing from the archive")
        with handle:
            yield handle


class RegistrySource(BlobSource):
    """Blobs streamed from a registry (the caller checks digests: write_archive, layer readers)."""

    def __init__(self, registry: Registry, repo: str) -> None:
        self.registry, self.repo = registry, repo

    @contextmanager
    def open(self, digest: str) -> Iterator[IO[bytes]]:
        path = f"/v2/{self.repo}/blobs/{digest}"
        with self.registry.request("GET", path, repo=self.repo) as resp:
            yield resp


class _Hashing:
    """A reader that hashes what passes through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.hasher = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hasher.update(data)
        return data

    @property
    def digest(self) -> str:
        return "sha256:" + self.hasher.hexdigest()


def _index(data: bytes, where: str) -> list[dict[str, Any]]:
    try:
        manifests: list[dict[str, Any]] = json.loads(data)["manifests"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseError(f"{where}: index.json is not an OCI image index") from None
    return manifests


def _pick(manifests: list[dict[str, Any]], ref_name: str | None, where: str) -> dict[str, Any]:
    if ref_name is None:
        if len(manifests) != 1:
            raise ReleaseError(f"{where}: holds {len(manifests)} images; name the one to use")
        return manifests[0]
    for desc in manifests:
        if desc.get("annotations", {}).get(REF_NAME) == ref_name:
            return desc
    raise ReleaseError(f"{where}: no image named {ref_name!r} in index.json")


def read_layout(root: Path, ref_name: str | None = None) -> Image:
    where = str(root)
    try:
        manifests = _index((root / "index.json").read_bytes(), where)
    except OSError:
        raise ReleaseError(f"{where}: no index.json; not an OCI layout") from None
    desc = _pick(manifests, ref_name, where)
    source = LayoutSource(root)
    with source.open(desc["digest"]) as handle:
        manifest = handle.read()
    image = Image(manifest, desc["mediaType"], source)
    if image.digest != desc["digest"]:
        raise ReleaseError(f"{where}: manifest {desc['digest']}: digest mismatch")
    return image


@contextmanager
def open_archive(path: Path, ref_name: str | None = None) -> Iterator[Image]:
    """An `oci-archive:` file (uncompressed tar of a layout) as an Image, blobs read in place."""
    try:
        tar = tarfile.open(path, "r:")  # noqa: SIM115 (closed by the with below)
    except (OSError, tarfile.TarError) as exc:
        raise ReleaseError(f"{path}: not a readable OCI archive ({exc})") from None
    with tar:
        index = tar.extractfile("index.json") if "index.json" in tar.getnames() else None
        if index is None:
            raise ReleaseError(f"{path}: no index.json; not an OCI archive")
        desc = _pick(_index(index.read(), str(path)), ref_name, str(path))
        source = ArchiveSource(tar, str(path))
        with source.open(desc["digest"]) as handle:
            manifest = handle.read()
        image = Image(manifest, desc["mediaType"], source)
        if image.digest != desc["digest"]:
            raise ReleaseError(f"{path}: manifest {desc['digest']}: digest mismatch")
        yield image


def write_layout(root: Path, image: Image, ref_name: str) -> None:
    """Copy an image into a layout directory (blobs deduplicated), named `ref_name`."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    for blob in [*image.blobs(), Blob(image.digest, len(image.manifest), image.media_type)]:
        path = blobs / blob.digest.removeprefix("sha256:")
        if path.is_file() and path.stat().st_size == blob.size:
            continue
        if blob.digest == image.digest:
            path.write_bytes(image.manifest)
            continue
        partial = path.with_suffix(".partial")
        hasher = hashlib.sha256()
        with image.source.open(blob.digest) as src, partial.open("wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                hasher.update(chunk)
                out.write(chunk)
        if "sha256:" + hasher.hexdigest() != blob.digest:
            partial.unlink()
            raise ReleaseError(f"blob {blob.digest}: digest mismatch while copying into {root}")
        partial.rename(path)
    index_path = root / "index.json"
    manifests = _index(index_path.read_bytes(), str(root)) if index_path.is_file() else []
    manifests = [m for m in manifests if m.get("annotations", {}).get(REF_NAME) != ref_name]
    manifests.append(
        {
            "mediaType": image.media_type,
            "digest": image.digest,
            "size": len(image.manifest),
            "annotations": {REF_NAME: ref_name},
        }
    )
    index: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
    }
    index["manifests"] = manifests
    index_path.write_text(json.dumps(index, indent=2))


def write_archive(path: Path, image: Image, ref_name: str) -> None:
    """An `oci-archive:` of one image (an OCI layout as an uncompressed tar: the layers are gzip
    already), every blob streamed from the image's source and its digest checked on the way."""
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": image.media_type,
                "digest": image.digest,
                "size": len(image.manifest),
                "annotations": {REF_NAME: ref_name},
            }
        ],
    }
    partial = path.with_name(path.name + ".partial")

    def add(tar: tarfile.TarFile, name: str, size: int, reader: IO[bytes] | _Hashing) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = size, 0o644
        tar.addfile(info, reader)  # type: ignore[arg-type,unused-ignore]

    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        layout = b'{"imageLayoutVersion":"1.0.0"}'
        add(tar, "oci-layout", len(layout), io.BytesIO(layout))
        body = json.dumps(index).encode()
        add(tar, "index.json", len(body), io.BytesIO(body))
        add(
            tar,
            f"blobs/sha256/{image.digest.removeprefix('sha256:')}",
            len(image.manifest),
            io.BytesIO(image.manifest),
        )
        seen = set()
        for blob in image.blobs():
            if blob.digest in seen:
                continue
            seen.add(blob.digest)
            with image.source.open(blob.digest) as raw:
                reader = _Hashing(raw)
                add(tar, f"blobs/sha256/{blob.digest.removeprefix('sha256:')}", blob.size, reader)
            if reader.digest != blob.digest:
                partial.unlink()
                raise ReleaseError(
                    f"blob {blob.digest}: digest mismatch while writing {path.name} "
                    f"(read {reader.digest})"
                )
    partial.rename(path)


def _tar_layer(files: dict[str, bytes]) -> bytes:
    """A deterministic tar of `files` (path -> bytes): sorted, mtime 0, root-owned, 0644."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for name in sorted(files):
            parts = name.strip("/").split("/")
            for i in range(1, len(parts)):
                directory = "/".join(parts[:i])
                if directory not in dirs:
                    dirs.add(directory)
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(name.strip("/"))
            info.size, info.mode = len(files[name]), 0o644
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def build_image(
    root: Path,
    ref_name: str,
    layers: list[dict[str, bytes]],
    *,
    labels: dict[str, str] | None = None,
    compress: bool = True,
    annotations: dict[str, str] | None = None,
) -> Image:
    """An OCI image from files (no base): one layer per mapping; written into layout `root`."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = sha256_digest(data)
        (blobs / digest.removeprefix("sha256:")).write_bytes(data)
        return digest

    descriptors, diff_ids = [], []
    for files in layers:
        tar = _tar_layer(files)
        diff_ids.append(sha256_digest(tar))
        data = gzip.compress(tar, mtime=0) if compress else tar
        media_type = OCI_LAYER_GZIP if compress else OCI_LAYER_TAR
        descriptors.append({"mediaType": media_type, "digest": put(data), "size": len(data)})
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": labels or {}},
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
    image = Image(body, OCI_MANIFEST, LayoutSource(root))
    put(body)
    write_layout(root, image, ref_name)
    return image


def layer_members(image: Image, blob: Blob) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    """The entries of one layer (gzip or plain tar), with a reader for regular files; the
    layer's digest is checked once it is read through."""
    with image.source.open(blob.digest) as raw:
        hashing = _Hashing(raw)
        mode = "r|gz" if blob.media_type.endswith("gzip") else "r|"
        with tarfile.open(fileobj=hashing, mode=mode) as tar:  # type: ignore[call-overload]
            for member in tar:
                yield member, tar.extractfile(member) if member.isreg() else None
        while hashing.read(1 << 20):
            pass
    if hashing.digest != blob.digest:
        raise ReleaseError(f"layer {blob.digest}: digest mismatch (read {hashing.digest})")
