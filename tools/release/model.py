"""`make model-image`: a checkpoint folder as an OCI image (big files one layer each) and its pull
back into a folder (`model-pull`), every file checked against the manifest inside."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.release import ReleaseError, log, oci
from tools.release.registry import Registry

MODEL_MANIFEST = ".qwen-npu-model.json"
BIG_FILE = 256 << 20


def model_image(
    model_dir: Path, ref: str, out: Path, path_in_image: str | None, preflight_args: list[str]
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
    files = {
        f"{prefix}/{p.relative_to(model_dir)}": p
        for p in sorted(model_dir.rglob("*"))
        if p.is_file()
    }
    entries: list[dict[str, Any]] = [
        {"path": name, "size": p.stat().st_size, "sha256": oci.sha256_file(p)}
        for name, p in sorted(files.items())
    ]
    listing = json.dumps({"path": prefix, "files": entries}, indent=2).encode()
    # Each big file alone (pulls in parallel, re-pushes only what changed), the small files
    # together, the file manifest last.
    layers: list[dict[str, bytes | Path]] = [
        {n: p} for n, p in files.items() if p.stat().st_size >= BIG_FILE
    ]
    layers.append({n: p for n, p in files.items() if p.stat().st_size < BIG_FILE})
    layers.append({f"{prefix}/{MODEL_MANIFEST}": listing})
    layout = out / "model-layout"
    shutil.rmtree(layout, ignore_errors=True)
    annotations = {
        "org.opencontainers.image.title": prefix,
        "io.qwen-npu.model.manifest": f"{prefix}/{MODEL_MANIFEST}",
    }
    image = oci.build_image(
        layout, tag, [lay for lay in layers if lay], compress=False, annotations=annotations
    )
    registry = Registry.from_env(host)
    digest = image.push(registry, repo)
    registry.tag(repo, digest, tag)
    shutil.rmtree(layout)
    log(
        "info",
        "model_image_pushed",
        ref=ref,
        digest=digest,
        files=len(entries),
        next=f"set model.source=image model.image.reference={ref}@{digest} model.path={prefix}",
    )
    size = sum(int(e["size"]) for e in entries)
    return {"reference": f"{ref}@{digest}", "digest": digest, "files": len(entries),
            "bytes": size, "path": prefix}  # fmt: skip


def model_pull(ref: str, dest: Path) -> dict[str, Any]:
    """Pull a model image and lay its files out under `dest`, each checked against the file
    manifest inside (what the node's ImageVolume mount shows)."""
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    repo_ref, tag = name.rsplit(":", 1) if ":" in last else (name, "")
    if not (digest or tag):
        raise ReleaseError(
            f"REF={ref}: give a tag or a digest (host/repo:tag or host/repo@sha256:...)"
        )
    host, _, repo = repo_ref.partition("/")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:  # skopeo's dir: layout, digests checked
        Registry.from_env(host).pull(repo, digest or tag, f"dir:{tmp}")
        manifest = (Path(tmp) / "manifest.json").read_bytes()
        image = oci.Image(manifest, oci.OCI_MANIFEST, Path(tmp))
        for blob in image.layers():
            for member, reader in image.layer_members(blob):
                target = (dest / member.name).resolve()
                if not target.is_relative_to(dest.resolve()):
                    raise ReleaseError(f"{ref}: layer entry {member.name} escapes the destination")
                if reader is not None:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with target.open("wb") as handle:
                        shutil.copyfileobj(reader, handle)
    listing_path = image.parsed.get("annotations", {}).get("io.qwen-npu.model.manifest", "")
    listing = json.loads((dest / listing_path).read_text())
    for entry in listing["files"]:
        if oci.sha256_file(dest / entry["path"]) != entry["sha256"]:
            raise ReleaseError(f"{ref}: {entry['path']} differs from the image's file manifest")
    return {"digest": image.digest, "files": len(listing["files"]), "path": listing["path"]}
