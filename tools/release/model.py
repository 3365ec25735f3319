"""`make model-image` and `qwen-npu fetch`'s OCI source: a checkpoint folder as an OCI artifact
(big files one layer each) and its pull back into a folder.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from tools.release import ReleaseError, oci
from tools.release.common import say, sha256_file
from tools.release.registry import Registry

MODEL_MANIFEST = ".qwen-npu-model.json"


MODEL_ARTIFACT = "application/vnd.qwen-npu.model.v1+json"


BIG_FILE = 256 << 20


def model_image(
    model_dir: Path, ref: str, out: Path, *, path_in_image: str | None, preflight_args: list[str]
) -> dict[str, Any]:
    """Preflight, then the checkpoint as an OCI image (uncompressed layers: weights do not
    compress), pushed to `ref`; a file manifest with every file's sha256 rides inside."""
    if not model_dir.is_dir():
        raise ReleaseError(f"MODEL_DIR={model_dir}: no such directory")
    repo_ref, _, tag = ref.rpartition(":")
    if not repo_ref or "/" in tag:
        raise ReleaseError(f"REF={ref}: write host[:port]/repository:tag")
    host, _, repo = repo_ref.partition("/")
    proc = subprocess.run(
        [sys.executable, "-m", "qwen_npu.cli", "preflight", str(model_dir), *preflight_args],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        last = (proc.stdout + proc.stderr).strip().splitlines()
        raise ReleaseError(
            f"MODEL_DIR={model_dir}: preflight says the checkpoint would fail "
            f"(exit {proc.returncode}: {last[-1] if last else ''}); fix it, or give the engine's "
            "flags in PREFLIGHT_ARGS (e.g. --mamba-ssm-dtype bfloat16)"
        )
    prefix = (path_in_image or model_dir.name).strip("/")
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    entries: list[dict[str, Any]] = [
        {
            "path": f"{prefix}/{p.relative_to(model_dir)}",
            "size": p.stat().st_size,
            "sha256": sha256_file(p),
        }
        for p in files
    ]
    listing = json.dumps({"path": prefix, "files": entries}, indent=2).encode()
    layout = out / "model-layout"
    shutil.rmtree(layout, ignore_errors=True)
    image = build_file_image(layout, tag, model_dir, prefix, files, listing)
    registry = Registry.from_env(host)
    registry.ping()
    digest = image.push(registry, repo)
    registry.put_manifest(repo, tag, image.manifest, image.media_type)
    shutil.rmtree(layout)
    result = {
        "reference": f"{ref}@{digest}",
        "digest": digest,
        "files": len(entries),
        "bytes": sum(int(e["size"]) for e in entries),
        "path": prefix,
    }
    say(
        "model_image_pushed",
        ref=ref,
        digest=digest,
        files=len(entries),
        next=f"set model.source=image model.image.reference={ref}@{digest} model.path={prefix}",
    )
    return result


def build_file_image(
    layout: Path, tag: str, model_dir: Path, prefix: str, files: list[Path], listing: bytes
) -> oci.Image:
    """Layers: each big file alone (pulls in parallel, re-pushes only what changed), the small
    files together, the file manifest last."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    groups = [[p] for p in files if p.stat().st_size >= BIG_FILE]
    small = [p for p in files if p.stat().st_size < BIG_FILE]
    if small:
        groups.append(small)
    descriptors, diff_ids = [], []
    for group in [*groups, None]:
        partial = blobs / "layer.partial"
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            items = [(f"{prefix}/{p.relative_to(model_dir)}", p) for p in group] if group else []
            for arcname, path in items:
                info = tarfile.TarInfo(arcname)
                info.size, info.mode = path.stat().st_size, 0o444
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            if group is None:
                info = tarfile.TarInfo(f"{prefix}/{MODEL_MANIFEST}")
                info.size, info.mode = len(listing), 0o444

                tar.addfile(info, io.BytesIO(listing))
        digest = "sha256:" + sha256_file(partial)
        size = partial.stat().st_size
        partial.rename(blobs / digest.removeprefix("sha256:"))
        descriptors.append({"mediaType": oci.OCI_LAYER_TAR, "digest": digest, "size": size})
        diff_ids.append(digest)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        },
        sort_keys=True,
    ).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    (blobs / config_digest.removeprefix("sha256:")).write_bytes(config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": oci.OCI_MANIFEST,
            "config": {"mediaType": oci.OCI_CONFIG, "digest": config_digest, "size": len(config)},
            "layers": descriptors,
            "annotations": {
                "org.opencontainers.image.title": prefix,
                "io.qwen-npu.model.manifest": f"{prefix}/{MODEL_MANIFEST}",
            },
        },
        sort_keys=True,
    ).encode()
    image = oci.Image(manifest, oci.OCI_MANIFEST, oci.LayoutSource(layout))
    (blobs / image.digest.removeprefix("sha256:")).write_bytes(manifest)
    return image


def model_pull(ref: str, dest: Path) -> dict[str, Any]:
    """Pull a model image and lay its files out under `dest`, each checked against the file
    manifest inside (what the node's ImageVolume mount shows)."""
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    repo_ref, tag = name.rsplit(":", 1) if ":" in last else (name, "")
    reference = digest or tag
    if not reference:
        raise ReleaseError(
            f"REF={ref}: give a tag or a digest (host/repo:tag or host/repo@sha256:...)"
        )
    host, _, repo = repo_ref.partition("/")
    registry = Registry.from_env(host)
    body, media_type = registry.get_manifest(repo, reference)
    image = oci.Image(body, media_type, oci.RegistrySource(registry, repo))
    for blob in image.layers():
        for member, reader in oci.layer_members(image, blob):
            target = (dest / member.name).resolve()
            if not str(target).startswith(str(dest.resolve())):
                raise ReleaseError(f"{ref}: layer entry {member.name} escapes the destination")
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif reader is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("wb") as handle:
                    shutil.copyfileobj(reader, handle)
    prefix = image.parsed.get("annotations", {}).get("io.qwen-npu.model.manifest", "")
    listing = json.loads((dest / prefix).read_text())
    for entry in listing["files"]:
        if sha256_file(dest / entry["path"]) != entry["sha256"]:
            raise ReleaseError(f"{ref}: {entry['path']} differs from the image's file manifest")
    return {"digest": image.digest, "files": len(listing["files"]), "path": listing["path"]}
