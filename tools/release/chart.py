"""The chart as a release ships it: image references pinned to the pushed digests, packaged,
signed (Helm provenance), pushed to and pulled from `oci://<registry>/charts`.

Why a text edit of values.yaml and not a values overlay: `helm install oci://...` reads the
chart's own defaults, so the pins must be in the packaged values.yaml; editing only the
`repository`, `tag` and `digests` lines of `image.engine` / `image.sidecar` keeps every comment,
and the result is re-read and compared, so a reshaped values.yaml fails here, naming the key.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tools.paths import CHART_DIR
from tools.release import ReleaseError
from tools.release.oci import sha256_file
from tools.release.registry import CHART, CHART_REPO, Registry, Target
from tools.versions import read_versions

PROV_MEDIA_TYPE = "application/vnd.cncf.helm.chart.provenance.v1.prov"
_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(?P<rest>.*)$")


def pin_values(text: str, pins: Mapping[str, tuple[str, str, str]]) -> str:
    """values.yaml with image.<name>.{repository,tag,digests} set from pins[name] =
    (repository, tag, digest)."""
    out: list[str] = []
    path: list[str] = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and not line.lstrip().startswith("#"):
            depth = len(match["indent"]) // 2
            path = [*path[:depth], match["key"]]
            if len(path) == 3 and path[0] == "image" and path[1] in pins:
                repository, tag, digest = pins[path[1]]
                value = {
                    "repository": repository,
                    "tag": f'"{tag}"',
                    "digests": "{" + f'"{tag}": "{digest}"' + "}",
                }.get(path[2])
                if value is not None:
                    line = f"{match['indent']}{path[2]}: {value}"
        out.append(line)
    pinned = "\n".join(out) + "\n"
    images = (yaml.safe_load(pinned) or {}).get("image", {})
    for name, (repository, tag, digest) in pins.items():
        got = images.get(name, {})
        want: dict[str, Any] = {"repository": repository, "tag": tag, "digests": {tag: digest}}
        for key, value in want.items():
            if got.get(key) != value:
                raise ReleaseError(
                    f"{CHART_DIR / 'values.yaml'}: image.{name}.{key} could not be pinned "
                    f"(got {got.get(key)!r}); keep repository/tag/digests as plain keys there"
                )
    return pinned


def package(
    pins: Mapping[str, tuple[str, str, str]], work: Path, version: str | None = None
) -> Path:
    """A copy of the chart with the pins, packaged into `work`; returns the .tgz."""
    staged = work / "chart-src" / "qwen-npu"
    shutil.rmtree(staged.parent, ignore_errors=True)
    shutil.copytree(CHART_DIR, staged)
    values = staged / "values.yaml"
    values.write_text(pin_values(values.read_text(), pins))
    chart = helm.Chart.load(str(staged))
    try:
        chart.validate_schema(chart.values)
    except helm.HelmError as exc:
        raise ReleaseError(
            f"the pinned chart fails its schema ({exc}); see values.schema.json"
        ) from None
    app_version = read_versions()["QWEN_NPU_VERSION"]  # the images' release: versions.env's
    archive = Path(
        helm.package(str(staged), destination=str(work), version=version, app_version=app_version)
    )
    shutil.rmtree(staged.parent)
    return archive


def sign(archive: Path, uid: str, secret_keyring: Path, passphrase_file: str | None) -> Path:
    try:
        prov = helm.sign(
            str(archive), key=uid, keyring=str(secret_keyring), passphrase_file=passphrase_file
        )
    except helm.HelmError as exc:
        raise ReleaseError(f"signing {archive.name}: {exc}") from None
    return Path(prov) if os.path.isabs(prov) else archive.parent / Path(prov).name


def verify(archive: Path, keyring: Path, prov: Path | None = None) -> dict[str, Any]:
    """Helm's provenance check: the .prov's signature by a key of `keyring`, the archive's hash."""
    prov = prov or archive.with_name(archive.name + ".prov")
    if not prov.is_file():
        raise ReleaseError(
            f"{archive.name}: no provenance file {prov.name}: the chart is not signed; refuse it"
        )
    try:
        result: dict[str, Any] = helm.verify(str(archive), str(keyring), provenance_file=str(prov))
    except helm.HelmError as exc:
        raise ReleaseError(
            f"{archive.name}: provenance does not verify with {keyring} ({exc}); "
            "the chart or its .prov was tampered with, or the key is not the site's"
        ) from None
    return result


def _client(registry: Registry, work: Path) -> Any:
    """Helm's registry client with the run's auth file (the same file skopeo reads)."""
    return helm.RegistryClient(credentials_file=registry.auth_file or work / "helm-auth.json")


def push(archive: Path, target: Target, registry: Registry, work: Path) -> str:
    """helm push (the .prov beside the archive goes too); returns the chart manifest's digest."""
    with _client(registry, work) as client:
        try:
            client.push(str(archive), f"oci://{target.ref(CHART_REPO)}")
        except helm.HelmError as exc:
            raise ReleaseError(f"pushing {archive.name} to {target}: {exc}") from None
    version = archive.name.removesuffix(".tgz").rpartition("-")[2]
    digest = registry.manifest_digest(target.repo(CHART), version)
    if digest is None:
        raise ReleaseError(f"{target}: {CHART}:{version} is absent after helm push")
    return digest


def pull(
    target: Target, registry: Registry, version: str, keyring: Path, work: Path, sha256: str = ""
) -> dict[str, Any]:
    """Pull the chart (oci://.../charts/qwen-npu) with its provenance layer, then run Helm's
    provenance check (what `helm pull --verify` does) and, given `sha256`, the archive's: the
    archive, its sha256 and the signer."""
    dest = work / "pulled"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with _client(registry, work) as client:
        try:
            ref = f"oci://{target.ref(CHART)}"
            client.pull(ref, version=version, destination=str(dest))
        except helm.HelmError as exc:
            raise ReleaseError(f"pulling qwen-npu {version} from {target}: {exc}") from None
    archive = dest / f"qwen-npu-{version}.tgz"
    with tempfile.TemporaryDirectory(dir=work) as tmp:  # the artifact as skopeo's dir:
        registry.pull(target.repo(CHART), version, f"dir:{tmp}")
        layers = json.loads((Path(tmp) / "manifest.json").read_bytes())["layers"]
        for layer in layers:
            if layer["mediaType"] == PROV_MEDIA_TYPE:
                blob = Path(tmp) / layer["digest"].removeprefix("sha256:")
                shutil.copy(blob, dest / f"{archive.name}.prov")
    got = sha256_file(archive)
    if sha256 and got != sha256:
        raise ReleaseError(
            f"{target}: {CHART}:{version} in the registry is not the released one (sha256 {got}, "
            f"the release's {sha256}): digest mismatch"
        )
    return {"archive": archive, "archive_sha256": got, **verify(archive, keyring)}


def render_images(archive: Path, values: dict[str, Any] | None = None) -> set[str]:
    """Every `image:` the chart renders from a packaged archive (with `values` overlaid)."""
    chart = helm.Chart.load_archive(archive.read_bytes())
    manifests = chart.render(values or {}, name="qwen-npu", namespace="llm")
    found = set()
    for path, text in manifests.items():
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            found |= set(_images(doc))
    return found


def _images(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [str(node["image"])] if isinstance(node.get("image"), str) else []
        for value in node.values():
            found += _images(value)
        return found
    if isinstance(node, list):
        return [image for item in node for image in _images(item)]
    return []
