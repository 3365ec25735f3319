"""`make bundle` and `make bundle-load`: the air-gapped bundle of a release (images as OCI layouts,
the chart, signatures, the site's values and policy) and its load into a site registry, verified.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

from tools.release import ReleaseError, chart, log, oci, signing
from tools.release.oci import sha256_file
from tools.release.registry import CHART, Publisher, Registry, Target

SITE_PLACEHOLDER = "REPLACE-ME.site.example:5000/qwen-npu"


def bundle(record_path: Path, dest: Path, keyring: Path, site_registry: str | None) -> Path:
    """Everything a closed site needs, from the registry the record names, checked on the way."""
    if not record_path.is_file():
        raise ReleaseError(f"{record_path}: no release record; run `make release` first")
    rel = record_path.parent
    signing.verify_file(record_path, keyring)
    record = json.loads(record_path.read_text())
    target = Target.parse(record["registry"])
    registry = Registry.from_env(target.host)
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
        archive = dest / "images" / f"{name}.oci.tar"
        log("info", "bundle_image", image=name, digest=info["digest"], to=archive)
        registry.pull(target.repo(name), info["digest"], f"oci-archive:{archive}:{info['tag']}")
        sig_src = rel / info["signature"]["path"]
        manifest = _archived_manifest(archive, info["digest"], f"bundle {dest}")
        signing.verify_manifest(manifest, info["signature"]["identity"], sig_src, keyring)
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
    rec = record["chart"]
    pulled = chart.pull(target, registry, rec["version"], keyring, work, rec["archive_sha256"])
    shutil.copy2(pulled["archive"], dest / "chart" / rec["archive"])
    shutil.copy2(Path(f"{pulled['archive']}.prov"), dest / "chart" / rec["provenance"])
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
    log(
        "info",
        "bundled",
        bundle=dest,
        tarball=tarball,
        bytes=tarball.stat().st_size,
        next=f"carry {tarball.name} in; make bundle-load BUNDLE={dest.name} REGISTRY=<site>",
    )
    return tarball


def _archived_manifest(archive: Path, digest: str, where: str) -> bytes:
    """The manifest an image archive holds, refused unless it is the release record's."""
    manifest, _ = oci.read_archive(archive)
    if oci.sha256_digest(manifest) != digest:
        raise ReleaseError(
            f"{where}: {archive.parent.name}/{archive.name} holds {oci.sha256_digest(manifest)}, "
            f"the release record says {digest}: digest mismatch; refuse it"
        )
    return manifest


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


def _files(dest: Path) -> list[str]:
    """Every file of the bundle but SHA256SUMS, relative to it."""
    found = (p for p in sorted(dest.rglob("*")) if p.is_file() and p.name != "SHA256SUMS")
    return [str(p.relative_to(dest)) for p in found]


def write_sums(dest: Path) -> None:
    rows = [f"{sha256_file(dest / name)}  {name}" for name in _files(dest)]
    (dest / "SHA256SUMS").write_text("\n".join(rows) + "\n")


def check_sums(dest: Path) -> None:
    sums = dest / "SHA256SUMS"
    if not sums.is_file():
        raise ReleaseError(f"bundle {dest}: no SHA256SUMS; not a qwen-npu bundle")
    rows = (line.partition("  ") for line in sums.read_text().splitlines())
    listed = {name: digest for digest, _, name in rows}
    for name, digest in listed.items():
        if not (dest / name).is_file():
            raise ReleaseError(
                f"bundle {dest}: {name} is missing (SHA256SUMS lists it); copy the bundle again"
            )
        if sha256_file(dest / name) != digest:
            raise ReleaseError(
                f"bundle {dest}: {name} is corrupt (its sha256 differs from SHA256SUMS); "
                "copy the bundle again"
            )
    extra = [name for name in _files(dest) if name not in listed]
    if extra:
        raise ReleaseError(
            f"bundle {dest}: {extra[0]} is not in SHA256SUMS; the bundle was changed"
        )


def bundle_load(
    source: Path,
    target: Target,
    keyring: Path,
    out: Path,
    overwrite: bool,
    node_keyring: Path,
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
    signing.verify_file(dest / "record.json", keyring)
    record = json.loads((dest / "record.json").read_text())
    archive = dest / "chart" / record["chart"]["archive"]
    chart.verify(archive, keyring, dest / "chart" / record["chart"]["provenance"])
    for name, info in record["images"].items():  # every image checked before any push
        manifest = _archived_manifest(
            dest / "images" / f"{name}.oci.tar", info["digest"], f"bundle {dest}"
        )
        sig = dest / info["signature"]["path"]
        signing.verify_manifest(manifest, info["signature"]["identity"], sig, keyring)
    registry = Registry.from_env(target.host)
    publisher = Publisher(registry)
    tags = {n: i["tag"] for n, i in record["images"].items()}
    publisher.refuse_existing(target, tags, record["chart"]["version"], overwrite)
    released = Target.parse(record["registry"])
    sigstore = out / "sigstore"
    loaded: dict[str, Any] = {}
    for name, info in record["images"].items():
        log("info", "bundle_load_image", image=name, digest=info["digest"], to=target.ref(name))
        registry.push(
            f"oci-archive:{dest / 'images' / f'{name}.oci.tar'}", target.repo(name), info["digest"]
        )
    try:
        for name, info in record["images"].items():
            publisher.tag(target.repo(name), info["tag"], info["digest"])
        staged = out / "chart"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        shutil.copy2(archive, staged / archive.name)
        shutil.copy2(
            dest / "chart" / record["chart"]["provenance"], staged / (archive.name + ".prov")
        )
        version = record["chart"]["version"]
        chart_digest = chart.push(staged / archive.name, target, registry, out)
        publisher.pushed_chart(target, version, chart_digest)
        chart.pull(target, registry, version, keyring, out, record["chart"]["archive_sha256"])
        for name, info in record["images"].items():
            repo = target.repo(name)
            body = (registry.get_manifest(repo, info["tag"]) or (b"", ""))[0]
            if oci.sha256_digest(body) != info["digest"]:
                raise ReleaseError(
                    f"{target.ref(name)}:{info['tag']} resolves to {oci.sha256_digest(body)}, "
                    f"the bundle's is {info['digest']}: digest mismatch"
                )
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
        raise publisher.guard(exc) from None
    (out / "values-site.yaml").write_text(site_values(record, str(target)))
    shutil.copy2(keyring, out / "site.gpg")
    lookaside = f"file://{sigstore.resolve()}"
    signing.write_node_files(out, str(target), lookaside, node_keyring, site_of=str(released))
    result = {
        "registry": str(target),
        "images": loaded,
        "chart_digest": chart_digest,
        "chart": f"oci://{target.ref(CHART)}",
    }
    signing.write_json(out / "loaded.json", result)
    log(
        "info",
        "bundle_loaded",
        registry=target,
        out=out,
        next=f"helm install qwen-npu {result['chart']} --version {record['chart']['version']} "
        f"-f {out / 'values-site.yaml'}",
    )
    return result
