"""The four verbs: release, bundle, bundle-load, model-image (docs/images.md "Releases").

Why in this order inside each verb: everything is pushed by digest first (untagged), signed and
checked; the tags (images, then the chart) come last, and a failure after the first tag puts the
registry back as it was (Publisher.rollback), so nothing half-pushed is ever tagged as the release.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.paths import CHART_DIR, REPO
from tools.release import ReleaseError, chart, oci, sbom, signing
from tools.release.registry import Registry, Target

REPO_ROOT = REPO
IMAGES = ("engine", "sidecar")
# Where the nodes keep the site's public keyring (policy.json's keyPath).
NODE_KEYRING = Path("/etc/containers/keys/qwen-npu-site.gpg")


def say(event: str, **fields: Any) -> None:
    """One progress line (logfmt, the shape every part prints)."""
    parts = [f"qwen_npu.release level=info event={event}"]
    for key, value in fields.items():
        text = str(value)
        parts.append(f'{key}="{text}"' if " " in text or not text else f"{key}={text}")
    print(" ".join(parts), file=sys.stderr, flush=True)


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


def _guard(publisher: Publisher, exc: ReleaseError) -> ReleaseError:
    left = publisher.rollback()
    if left:
        return ReleaseError(
            f"{exc}; the tags set so far could not be removed ({', '.join(left)}): "
            "the registry refuses deletes (storage.delete.enabled); delete them by hand"
        )
    return exc


# -- release ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageSpec:
    name: str
    tag: str
    source: str
    flavour: str

    @classmethod
    def parse(cls, text: str) -> ImageSpec:
        """`name:tag=transport:ref[,flavour=cpu]` (e.g. engine:0.1.0=containers-storage:...)."""
        head, _, source = text.partition("=")
        name, _, tag = head.partition(":")
        source, _, flavour = source.partition(",flavour=")
        if name not in IMAGES or not tag or ":" not in source:
            raise ReleaseError(
                f"--image {text!r}: write NAME:TAG=TRANSPORT:REF with NAME one of "
                f"{', '.join(IMAGES)} (e.g. sidecar:0.1.0=containers-storage:<local name>)"
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
        say("image_convert", image=spec.name, source=spec.source, to=f"oci:{layout}")
        signing.run(
            [
                "skopeo",
                "copy",
                "--quiet",
                "--format",
                "oci",
                spec.source,
                f"oci:{layout}:{spec.name}",
            ],
            what=f"copying {spec.source} into an OCI layout",
        )
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
    *,
    overwrite: bool = False,
    chart_version: str | None = None,
    node_keyring: Path = NODE_KEYRING,
) -> dict[str, Any]:
    registry = Registry.from_env(target.host)
    registry.ping()
    version = chart_version or _chart_version()
    publisher = Publisher(registry)
    wanted = [(target.repo(s.name), s.tag) for s in specs]
    wanted.append((target.repo(f"{chart.CHART_REPO}/qwen-npu"), version))
    publisher.refuse_existing(wanted, overwrite, f"release {version}")
    rel = out / version
    shutil.rmtree(rel, ignore_errors=True)
    (rel / "keys").mkdir(parents=True)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    key.export_public(rel / "keys" / "site.gpg")
    images: dict[str, Any] = {}
    pushed: dict[str, oci.Image] = {}
    for spec in specs:
        started = time.monotonic()
        image = local_layout(spec, out / "cache" / "layouts")
        repo = target.repo(spec.name)
        say("image_push", image=spec.name, repository=target.ref(spec.name), digest=image.digest)
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
                "debian_packages": sum(
                    1 for c in bom["components"] if c["purl"].startswith("pkg:deb")
                ),
                "python_packages": sum(
                    1 for c in bom["components"] if c["purl"].startswith("pkg:pypi")
                ),
            },
            "push_seconds": round(time.monotonic() - started, 1),
        }
        pushed[spec.name] = image
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
            publisher.tag(target.repo(spec.name), spec.tag, pushed[spec.name])
        chart_digest = chart.push(archive, target, registry, work)
        publisher.record_chart(target.repo(f"{chart.CHART_REPO}/qwen-npu"), version, chart_digest)
        check = pull_and_verify(target, registry, version, rel / "keys" / "site.gpg", work)
        if check["archive_sha256"] != sha256_file(archive):
            raise ReleaseError(
                f"{target}: charts/qwen-npu:{version} pulled back differs from the package pushed: "
                "digest mismatch"
            )
        for spec in specs:
            now = registry.manifest_digest(target.repo(spec.name), spec.tag)
            if now != images[spec.name]["digest"]:
                raise ReleaseError(
                    f"{target.ref(spec.name)}:{spec.tag} resolves to {now}, pushed "
                    f"{images[spec.name]['digest']}: digest mismatch (another push raced this one)"
                )
    except ReleaseError as exc:
        raise _guard(publisher, exc) from None
    signing.write_json(
        rel / "policy.json",
        signing.policy({str(target): None}, node_keyring),
    )
    (rel / "registries.d").mkdir()
    (rel / "registries.d" / "qwen-npu.yaml").write_text(
        signing.registries_d(str(target), "https://REPLACE-ME.site.example/sigstore")
    )
    record: dict[str, Any] = {
        "version": version,
        "registry": str(target),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": _source(),
        "images": images,
        "chart": {
            "reference": f"oci://{target.ref(chart.CHART_REPO)}/qwen-npu",
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
    sign_file(key, rel / "record.json")
    say(
        "released",
        version=version,
        chart=record["chart"]["reference"],
        record=rel / "record.json",
        next=f"helm install qwen-npu {record['chart']['reference']} --version {version}",
    )
    return record


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


def _chart_version() -> str:
    import yaml

    data = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    return str(data["version"])


def _source() -> dict[str, Any]:
    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
        )
        return proc.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


# -- bundle -------------------------------------------------------------------------------------

SITE_PLACEHOLDER = "REPLACE-ME.site.example:5000/qwen-npu"


def bundle(record_path: Path, dest: Path, keyring: Path, site_registry: str | None) -> Path:
    """Everything a closed site needs, from the registry the record names, checked on the way."""
    if not record_path.is_file():
        raise ReleaseError(f"{record_path}: no release record; run `make release` first")
    rel = record_path.parent
    verify_file(record_path, keyring)
    record = json.loads(record_path.read_text())
    target = Target.parse(record["registry"])
    registry = Registry.from_env(target.host)
    registry.ping()
    if dest.exists():
        if any(dest.iterdir()) and not (dest / "SHA256SUMS").is_file():
            raise ReleaseError(
                f"BUNDLE={dest} exists and is not a bundle; give a new or empty directory"
            )
        shutil.rmtree(dest)
    (dest / "images").mkdir(parents=True)
    work = dest.parent / f".{dest.name}.work"
    work.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, info in record["images"].items():
        repo = target.repo(name)
        body, media_type = registry.get_manifest(repo, info["digest"])
        image = oci.Image(body, media_type, oci.RegistrySource(registry, repo))
        sig_src = rel / info["signature"]["path"]
        signing.verify_manifest(body, info["signature"]["identity"], sig_src, keyring)
        archive = dest / "images" / f"{name}.oci.tar"
        say("bundle_image", image=name, digest=info["digest"], to=archive)
        oci.write_archive(archive, image, info["tag"])
        sig_dst = dest / info["signature"]["path"]
        sig_dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sig_src, sig_dst)
        bom = rel / info["sbom"]["path"]
        if sha256_file(bom) != info["sbom"]["sha256"]:
            raise ReleaseError(f"{bom}: sha256 differs from the record's; the SBOM was changed")
        (dest / "sbom").mkdir(exist_ok=True)
        shutil.copy2(bom, dest / info["sbom"]["path"])
        lines.append(info["reference"])
    (dest / "chart").mkdir()
    pulled = pull_and_verify(target, registry, record["chart"]["version"], keyring, work)
    if pulled["archive_sha256"] != record["chart"]["archive_sha256"]:
        raise ReleaseError(
            f"{target}: the chart in the registry is not the released one (sha256 "
            f"{pulled['archive_sha256']} against the record's): digest mismatch"
        )
    shutil.copy2(pulled["archive"], dest / "chart" / record["chart"]["archive"])
    shutil.copy2(
        Path(str(pulled["archive"]) + ".prov"), dest / "chart" / record["chart"]["provenance"]
    )
    shutil.rmtree(work)
    (dest / "keys").mkdir()
    shutil.copy2(keyring, dest / "keys" / "site.gpg")
    shutil.copy2(record_path, dest / "record.json")
    shutil.copy2(record_path.with_name("record.json.asc"), dest / "record.json.asc")
    (dest / "images.txt").write_text("\n".join(lines) + "\n")
    site = site_registry or SITE_PLACEHOLDER
    (dest / "values-site.yaml").write_text(site_values(record, site))
    (dest / "README.md").write_text(bundle_readme(record, site))
    write_sums(dest)
    tarball = dest.with_name(dest.name + ".tar")
    with tarfile.open(tarball, "w") as tar:
        tar.add(dest, arcname=dest.name)
    say(
        "bundled",
        bundle=dest,
        tarball=tarball,
        bytes=tarball.stat().st_size,
        next=f"carry {tarball.name} in; make bundle-load BUNDLE={dest.name} REGISTRY=<site>",
    )
    return tarball


def site_values(record: dict[str, Any], site: str) -> str:
    """The values overlay for the site: every image from the site registry, digests kept."""
    lines = [
        "# qwen-npu values overlay for a site registry (written by make bundle / bundle-load).",
        f"# Release {record['version']} from {record['registry']}; the released digests.",
        "global:",
        f"  imageRegistry: {site}",
        "image:",
    ]
    for name, info in record["images"].items():
        lines += [
            f"  {name}:",
            f'    tag: "{info["tag"]}"',
            "    digests:",
            f'      "{info["tag"]}": {info["digest"]}',
        ]
    return "\n".join(lines) + "\n"


def bundle_readme(record: dict[str, Any], site: str) -> str:
    version = record["version"]
    images = "\n".join(f"- `{i['reference']}`" for i in record["images"].values())
    return f"""# qwen-npu {version}: air-gapped bundle

Made by `make bundle` from the release in `{record["registry"]}` (record.json, signed:
record.json.asc). Every file is listed in `SHA256SUMS`.

Images (OCI archives in `images/`, signatures in `sigstore/`, SBOMs in `sbom/`):

{images}

Chart: `chart/{record["chart"]["archive"]}`, its Helm provenance
`chart/{record["chart"]["provenance"]}`.

## Steps at the site

1. Check the copy: `sha256sum -c SHA256SUMS`.
2. Get the site's public signing key from where your site keeps it (not from this bundle), e.g.
   `site.gpg`, and compare its fingerprint with `{record["signing"]["key"]}`.
3. Load: from a qwen-npu checkout, `make bundle-load BUNDLE=<this directory or its .tar>
   REGISTRY=<site registry host:port/namespace> SIGNING_KEYRING=site.gpg`
   (REGISTRY_USER/REGISTRY_PASSWORD, REGISTRY_CA for the site registry). It checks every file,
   signature and digest, pushes images and chart, checks them again in the site registry, and
   writes the site's `values-site.yaml`, `policy.json` and `registries.d/` under its `OUT`.
4. Nodes: install `policy.json` as `/etc/containers/policy.json`, the keyring at the path it
   names, `registries.d/qwen-npu.yaml` in `/etc/containers/registries.d/`, and publish the
   `sigstore/` tree where that file points (CRI-O and podman check signatures on every pull).
5. Install: `helm install qwen-npu oci://<site registry>/charts/qwen-npu --version {version}
   -f values-site.yaml` (this bundle's `values-site.yaml` names `{site}`).
"""


def write_sums(dest: Path) -> None:
    rows = [
        f"{sha256_file(p)}  {p.relative_to(dest)}"
        for p in sorted(dest.rglob("*"))
        if p.is_file() and p.name != "SHA256SUMS"
    ]
    (dest / "SHA256SUMS").write_text("\n".join(rows) + "\n")


def check_sums(dest: Path) -> None:
    sums = dest / "SHA256SUMS"
    if not sums.is_file():
        raise ReleaseError(f"bundle {dest}: no SHA256SUMS; not a qwen-npu bundle")
    listed = {}
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    for name, digest in listed.items():
        path = dest / name
        if not path.is_file():
            raise ReleaseError(
                f"bundle {dest}: {name} is missing (SHA256SUMS lists it); copy the bundle again"
            )
        if sha256_file(path) != digest:
            raise ReleaseError(
                f"bundle {dest}: {name} is corrupt (its sha256 differs from SHA256SUMS); "
                "copy the bundle again"
            )
    extra = [
        str(p.relative_to(dest))
        for p in dest.rglob("*")
        if p.is_file() and p.name != "SHA256SUMS" and str(p.relative_to(dest)) not in listed
    ]
    if extra:
        raise ReleaseError(
            f"bundle {dest}: {extra[0]} is not in SHA256SUMS; the bundle was changed"
        )


# -- bundle-load --------------------------------------------------------------------------------


def bundle_load(
    source: Path,
    target: Target,
    keyring: Path,
    out: Path,
    *,
    overwrite: bool = False,
    node_keyring: Path = NODE_KEYRING,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    dest = source
    if source.is_file():
        unpacked = out / "unpacked"
        shutil.rmtree(unpacked, ignore_errors=True)
        try:
            with tarfile.open(source) as tar:
                tar.extractall(unpacked, filter="data")
        except (OSError, tarfile.TarError) as exc:
            raise ReleaseError(
                f"bundle {source}: not a readable tarball ({exc}); copy it again"
            ) from None
        found = [p for p in unpacked.iterdir() if p.is_dir()]
        if len(found) != 1:
            raise ReleaseError(f"bundle {source}: expected one directory inside")
        dest = found[0]
    if not dest.is_dir():
        raise ReleaseError(f"BUNDLE={source}: no such directory or tarball")
    check_sums(dest)
    verify_file(dest / "record.json", keyring)
    record = json.loads((dest / "record.json").read_text())
    archive = dest / "chart" / record["chart"]["archive"]
    chart.verify(archive, keyring, dest / "chart" / record["chart"]["provenance"])
    registry = Registry.from_env(target.host)
    registry.ping()
    publisher = Publisher(registry)
    wanted = [(target.repo(n), i["tag"]) for n, i in record["images"].items()]
    wanted.append((target.repo(f"{chart.CHART_REPO}/qwen-npu"), record["chart"]["version"]))
    publisher.refuse_existing(wanted, overwrite, f"release {record['version']}")
    released = Target.parse(record["registry"])
    sigstore = out / "sigstore"
    loaded: dict[str, Any] = {}
    archives = {}
    for name, info in record["images"].items():
        path = dest / "images" / f"{name}.oci.tar"
        with oci.open_archive(path) as image:
            if image.digest != info["digest"]:
                raise ReleaseError(
                    f"bundle {dest}: images/{name}.oci.tar holds {image.digest}, the release "
                    f"record says {info['digest']}: digest mismatch; refuse it"
                )
            signing.verify_manifest(
                image.manifest,
                info["signature"]["identity"],
                dest / info["signature"]["path"],
                keyring,
            )
            say("bundle_load_image", image=name, digest=image.digest, to=target.ref(name))
            image.push(registry, target.repo(name))
            archives[name] = (image.manifest, image.media_type)
    try:
        for name, info in record["images"].items():
            manifest, media_type = archives[name]
            image = oci.Image(manifest, media_type, oci.BlobSource())
            publisher.tag(target.repo(name), info["tag"], image)
        staged = out / "chart"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        shutil.copy2(archive, staged / archive.name)
        shutil.copy2(
            dest / "chart" / record["chart"]["provenance"], staged / (archive.name + ".prov")
        )
        chart_digest = chart.push(staged / archive.name, target, registry, out)
        publisher.record_chart(
            target.repo(f"{chart.CHART_REPO}/qwen-npu"), record["chart"]["version"], chart_digest
        )
        pulled = pull_and_verify(target, registry, record["chart"]["version"], keyring, out)
        if pulled["archive_sha256"] != record["chart"]["archive_sha256"]:
            raise ReleaseError(
                f"{target}: the chart pulled back is not the bundle's: digest mismatch"
            )
        for name, info in record["images"].items():
            repo = target.repo(name)
            now = registry.manifest_digest(repo, info["tag"])
            if now != info["digest"]:
                raise ReleaseError(
                    f"{target.ref(name)}:{info['tag']} resolves to {now}, the bundle's is "
                    f"{info['digest']}: digest mismatch"
                )
            body, _ = registry.get_manifest(repo, info["digest"])
            src = dest / info["signature"]["path"]
            signer = signing.verify_manifest(body, info["signature"]["identity"], src, keyring)
            sig = signing.lookaside_path(sigstore, repo, info["digest"])
            sig.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, sig)
            loaded[name] = {
                "reference": f"{target.ref(name)}:{info['tag']}@{info['digest']}",
                "signed_by": signer,
            }
    except ReleaseError as exc:
        raise _guard(publisher, exc) from None
    (out / "values-site.yaml").write_text(site_values(record, str(target)))
    shutil.copy2(keyring, out / "site.gpg")
    signing.write_json(
        out / "policy.json",
        signing.policy(
            {str(target): signing.remap_identity(str(target), str(released))}, node_keyring
        ),
    )
    (out / "registries.d").mkdir(exist_ok=True)
    (out / "registries.d" / "qwen-npu.yaml").write_text(
        signing.registries_d(str(target), f"file://{sigstore.resolve()}")
    )
    result = {
        "registry": str(target),
        "images": loaded,
        "chart_digest": chart_digest,
        "chart": f"oci://{target.ref(chart.CHART_REPO)}/qwen-npu",
    }
    signing.write_json(out / "loaded.json", result)
    say(
        "bundle_loaded",
        registry=target,
        out=out,
        next=f"helm install qwen-npu {result['chart']} --version {record['chart']['version']} "
        f"-f {out / 'values-site.yaml'}",
    )
    return result


# -- model-image --------------------------------------------------------------------------------

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
                import io

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


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")
