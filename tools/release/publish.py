"""`make release`: the images and the chart pushed to an OCI registry, signed, pinned by digest,
with SBOMs; the release record the other verbs read.

Why in this order: everything is pushed by digest first (untagged), signed and checked; the
tags (images, then the chart) come last, and a failure after the first tag puts the registry back
as it was (Publisher.rollback), so nothing half-pushed is ever tagged as the release. The bundle
verbs follow the same rule.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tools.paths import CHART_DIR, REPO
from tools.release import ReleaseError, chart, log, oci, sbom, signing
from tools.release.oci import sha256_file
from tools.release.registry import CHART, Publisher, Registry, Target

IMAGES = ("engine", "sidecar")


def source_record() -> dict[str, Any]:
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return proc.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


@dataclass(frozen=True)
class ImageSpec:
    name: str
    tag: str
    source: str
    flavour: str

    @classmethod
    def parse(cls, text: str) -> ImageSpec:
        """`name:tag=transport:ref[,flavour=cpu]` (e.g. engine:<version>=containers-storage:...)."""
        head, _, source = text.partition("=")
        name, _, tag = head.partition(":")
        source, _, flavour = source.partition(",flavour=")
        if name not in IMAGES or not tag or ":" not in source:
            raise ReleaseError(
                f"--image {text!r}: write NAME:TAG=TRANSPORT:REF with NAME one of "
                f"{', '.join(IMAGES)} (e.g. sidecar:<version>=containers-storage:<local name>)"
            )
        return cls(name, tag, source, flavour or "")


def local_layout(spec: ImageSpec, cache: Path) -> oci.Image:
    """The image as an OCI layout under `cache` (skopeo copy), reused while the source's digest
    is unchanged. A rebuilt source (a new commit: new labels, our small layer) is copied again:
    skopeo compresses every layer anew (about 100 s for the 3 GB engine here), but gzip is
    deterministic, so the unchanged layers get their old digests and the push skips them."""
    if spec.source.startswith("oci:"):
        path, _, ref = spec.source.removeprefix("oci:").partition(":")
        return oci.read_layout(Path(path), ref or None)
    source_digest = signing.run(
        ["skopeo", "inspect", "--format", "{{.Digest}}", spec.source],
        what=f"reading {spec.source}",
    ).strip()
    layout = cache / spec.name
    stamp = layout / f"source-{source_digest.replace(':', '-')}"
    if not stamp.is_file():
        layout.mkdir(parents=True, exist_ok=True)
        for old in layout.glob("source-*"):
            old.unlink()
        log("info", "image_convert", image=spec.name, source=spec.source, to=f"oci:{layout}")
        argv = ["skopeo", "copy", "--quiet", "--format", "oci", spec.source]
        signing.run([*argv, f"oci:{layout}:{spec.name}"], what=f"copying {spec.source} to OCI")
        image = oci.read_layout(layout, spec.name)
        keep = {b.digest.removeprefix("sha256:") for b in image.blobs()}
        keep.add(image.digest.removeprefix("sha256:"))
        for blob in (layout / "blobs" / "sha256").iterdir():
            if blob.name not in keep:
                blob.unlink()
        stamp.write_text(spec.source + "\n")
    return oci.read_layout(layout, spec.name)


def release(
    target: Target,
    specs: list[ImageSpec],
    key: signing.SigningKey,
    out: Path,
    overwrite: bool,
    node_keyring: Path,
) -> dict[str, Any]:
    registry = Registry.from_env(target.host)
    version = str(yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["version"])
    publisher = Publisher(registry)
    publisher.refuse_existing(target, {s.name: s.tag for s in specs}, version, overwrite)
    rel = out / version
    shutil.rmtree(rel, ignore_errors=True)
    (rel / "keys").mkdir(parents=True)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    key.export_public(rel / "keys" / "site.gpg")
    images: dict[str, Any] = {}
    for spec in specs:
        started = time.monotonic()
        image = local_layout(spec, out / "cache" / "layouts")
        repo = target.repo(spec.name)
        log(
            "info",
            "image_push",
            image=spec.name,
            repository=target.ref(spec.name),
            digest=image.digest,
        )
        digest = image.push(registry, repo)
        identity = f"{target.ref(spec.name)}:{spec.tag}"
        sig = signing.lookaside_path(rel / "sigstore", repo, digest)
        key.sign_manifest(image.manifest, identity, sig)
        signing.verify_manifest(image.manifest, identity, sig, rel / "keys" / "site.gpg")
        cached = out / "cache" / "sbom" / f"{target.ref(spec.name).replace('/', '_')}@{digest}.json"
        if cached.is_file():
            bom = json.loads(cached.read_text())
        else:
            bom = sbom.cyclonedx(image, target.ref(spec.name))
            signing.write_json(cached, bom)
        bom_path = rel / "sbom" / f"{spec.name}.cdx.json"
        signing.write_json(bom_path, bom)
        labels = image.config().get("config", {}).get("Labels") or {}
        purls = [c["purl"] for c in bom["components"]]
        images[spec.name] = {
            "reference": f"{target.ref(spec.name)}:{spec.tag}@{digest}",
            "repository": target.ref(spec.name),
            "tag": spec.tag,
            "digest": digest,
            "media_type": image.media_type,
            "size": sum(b.size for b in image.blobs()),
            "flavour": spec.flavour or labels.get("io.qwen-npu.flavour", ""),
            "source": spec.source,
            "signature": {"path": str(sig.relative_to(rel)), "identity": identity},
            "sbom": {
                "path": str(bom_path.relative_to(rel)),
                "sha256": sha256_file(bom_path),
                "debian_packages": sum(p.startswith("pkg:deb") for p in purls),
                "python_packages": sum(p.startswith("pkg:pypi") for p in purls),
            },
            "push_seconds": round(time.monotonic() - started, 1),
        }
    pins = {name: (i["repository"], i["tag"], i["digest"]) for name, i in images.items()}
    archive = chart.package(pins, rel, version)
    secret = work / "secring.gpg"
    try:
        key.export_secret(secret)
        prov = chart.sign(archive, key.uid, secret, key.passphrase_file)
    finally:
        secret.unlink(missing_ok=True)
    signed_by = chart.verify(archive, rel / "keys" / "site.gpg", prov)["signed_by"]
    try:
        for spec in specs:
            publisher.tag(target.repo(spec.name), spec.tag, images[spec.name]["digest"])
        chart_digest = chart.push(archive, target, registry, work)
        publisher.pushed_chart(target, version, chart_digest)
        keyring = rel / "keys" / "site.gpg"
        chart.pull(target, registry, version, keyring, work, sha256_file(archive))
        for spec in specs:
            now = registry.manifest_digest(target.repo(spec.name), spec.tag)
            if now != images[spec.name]["digest"]:
                raise ReleaseError(
                    f"{target.ref(spec.name)}:{spec.tag} resolves to {now}, pushed "
                    f"{images[spec.name]['digest']}: digest mismatch (another push raced this one)"
                )
    except ReleaseError as exc:
        raise publisher.guard(exc) from None
    lookaside = "https://REPLACE-ME.site.example/sigstore"
    signing.write_node_files(rel, str(target), lookaside, node_keyring)
    record: dict[str, Any] = {
        "version": version,
        "registry": str(target),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": source_record(),
        "images": images,
        "chart": {
            "reference": f"oci://{target.ref(CHART)}",
            "version": version,
            "archive": archive.name,
            "archive_sha256": sha256_file(archive),
            "manifest_digest": chart_digest,
            "provenance": prov.name,
            "signed_by": signed_by,
        },
        "signing": {
            "key": key.fingerprint,
            "uid": key.uid,
            "public_keyring": "keys/site.gpg",
            "signed": [
                *(
                    f"image {n} manifest {i['digest']} as {i['signature']['identity']}"
                    for n, i in images.items()
                ),
                f"chart {archive.name} (Helm provenance {prov.name})",
                "this record (record.json.asc)",
            ],
        },
    }
    signing.write_json(rel / "record.json", record)
    signing.sign_file(key, rel / "record.json")
    log(
        "info",
        "released",
        version=version,
        chart=record["chart"]["reference"],
        record=rel / "record.json",
        next=f"helm install qwen-npu {record['chart']['reference']} --version {version}",
    )
    return record
