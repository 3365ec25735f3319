"""The SBOM of an image (CycloneDX 1.5 JSON): its Debian packages and its Python distributions,
read from the image's own layers, with versions and package URLs.

Why from the layers: the SBOM describes the bytes that were pushed (the digest it names), not the
build recipe; dpkg's status file and every `*.dist-info/METADATA` are what `dpkg -l` and
`pip list` read inside the container. Later layers win, and whiteouts remove what they hide.
"""

from __future__ import annotations

import email.parser
import posixpath
import uuid
from typing import Any

from tools.release.oci import Image

DPKG_STATUS = "var/lib/dpkg/status"
SPEC_VERSION = "1.5"


def _removed(name: str, gone: set[str]) -> bool:
    return any(name == g or name.startswith(g + "/") for g in gone)


def collect(image: Image) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """(debian {name: (version, arch)}, python {name: (version, location)}) of the final image."""
    status: bytes | None = None
    metadata: dict[str, bytes] = {}
    for blob in image.layers():
        gone: set[str] = set()
        for member, reader in image.layer_members(blob):
            name = member.name.lstrip("./")
            base = posixpath.basename(name)
            if base.startswith(".wh."):
                parent = posixpath.dirname(name)
                if base == ".wh..wh..opq":
                    gone.add(parent)
                else:
                    gone.add(posixpath.join(parent, base.removeprefix(".wh.")))
                continue
            if reader is None:
                continue
            if name == DPKG_STATUS:
                status = reader.read()
            elif name.endswith(".dist-info/METADATA"):
                metadata[name] = reader.read()
        if DPKG_STATUS in gone:
            status = None
        metadata = {k: v for k, v in metadata.items() if not _removed(k, gone)}
    debian: dict[str, tuple[str, str]] = {}
    if status:
        for paragraph in status.decode(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in paragraph.splitlines():
                if line and not line[0].isspace() and ":" in line:
                    key, _, value = line.partition(":")
                    fields[key] = value.strip()
            if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
                debian[fields["Package"]] = (
                    fields.get("Version", ""),
                    fields.get("Architecture", ""),
                )
    python: dict[str, tuple[str, str]] = {}
    parser = email.parser.BytesHeaderParser()
    for path, data in sorted(metadata.items()):
        headers = parser.parsebytes(data)
        if headers.get("Name"):
            location = posixpath.dirname(posixpath.dirname(path))
            python[str(headers["Name"])] = (str(headers.get("Version", "")), "/" + location)
    return debian, python


def _component(name: str, version: str, purl: str, **props: str) -> dict[str, Any]:
    properties = [{"name": f"qwen-npu:{k}", "value": v} for k, v in props.items()]
    return dict(type="library", name=name, version=version, purl=purl, properties=properties)


def cyclonedx(image: Image, name: str) -> dict[str, Any]:
    """The CycloneDX document for `image` (named by its repository), deterministic per digest."""
    debian, python = collect(image)
    components: list[dict[str, Any]] = []
    for pkg, (version, arch) in sorted(debian.items()):
        purl = f"pkg:deb/debian/{pkg}@{version}" + (f"?arch={arch}" if arch else "")
        components.append(_component(pkg, version, purl, source="dpkg"))
    for dist, (version, location) in sorted(python.items(), key=lambda kv: kv[0].lower()):
        purl = f"pkg:pypi/{dist.lower().replace('_', '-')}@{version}"
        components.append(_component(dist, version, purl, source="python", location=location))
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, name + '@' + image.digest)}",
        "version": 1,
        "metadata": {
            "component": {
                "type": "container",
                "name": name,
                "version": image.digest,
                "purl": f"pkg:oci/{posixpath.basename(name)}@{image.digest.replace(':', '%3A')}",
            }
        },
        "components": components,
    }
