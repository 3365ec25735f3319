"""The node's Ascend driver (HDK) against the oldest one the image's CANN supports.

Why this exists: the engine image is CANN 9.1.0, and CANN 9.1.x supports Ascend HDK 25.2.x and
later (25.0.x is marked unsupported, older ones are not listed). Nothing else reads the node's
driver version, so a node on an older HDK fails deep inside torch_npu minutes into the start. The
entrypoint (bash, before SGLang starts) and preflight (this module) make the same comparison; a CANN
8.x image is no way out, since sgl-kernel-npu's releases are built for CANN 9.0.0 and 9.1.0 only.

The minimum comes from docker/versions.env (``CANN_MIN_HDK_VERSION``), which the image bakes as
``QWEN_NPU_MIN_HDK_VERSION``; outside the image it is unset and nothing is compared. The driver's
``version.info`` (``/usr/local/Ascend/driver/version.info``; no Ascend runtime mounts it, so the
chart mounts the node's file read-only into the engine and preflight containers at
``npu.driverVersionFile``, ``QWEN_NPU_DRIVER_VERSION_FILE``) reads like::

    Version=25.2.0
    ascendhal_version=7.35.23
    ...
    package_version=25.2.0

``package_version`` wins where both are there (some installs write a component version such as
``7.35.23`` under ``Version``). Versions are compared by MAJOR.MINOR: ``25.2.rc1`` and ``25.2.0``
both meet 25.2. Standard library only (it runs in the engine image's preflight).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qwen_npu.constants import UNKNOWN as UNKNOWN  # one of this module's verdicts too

ENV_MIN = "QWEN_NPU_MIN_HDK_VERSION"
ENV_FILE = "QWEN_NPU_DRIVER_VERSION_FILE"
ENV_LABEL = "QWEN_NPU_HDK_NODE_LABEL"
DEFAULT_FILE = "/usr/local/Ascend/driver/version.info"
DEFAULT_LABEL = "qwen-npu.io/ascend-hdk"

_MAJOR_MINOR = re.compile(r"^(\d+)\.(\d+)")

OK = "ok"
UNSUPPORTED = "unsupported"
# UNKNOWN (qwen_npu.constants): the file is missing or states no version: the check cannot say
NOT_CHECKED = "not-checked"  # no minimum (outside the engine image)


@dataclass(frozen=True)
class DriverCheck:
    """The verdict on one node's driver."""

    state: str
    file: str
    installed: str | None
    needed: str | None
    label: str

    @property
    def message(self) -> str:
        if self.state == OK:
            return f"driver {self.installed} meets HDK {self.needed}+ ({self.file})"
        if self.state == UNSUPPORTED:
            return (
                f"the node's Ascend driver is {self.installed} ({self.file}); this image's CANN "
                f"needs HDK {self.needed} or later. Upgrade the node's driver, or schedule on "
                f"nodes whose label {self.label} says so (chart value scheduling.driverVersion)"
            )
        if self.state == UNKNOWN:
            why = "not readable" if self.installed is None else f"states {self.installed!r}"
            return (
                f"the driver's version.info at {self.file} is {why}: the HDK {self.needed}+ "
                "requirement is not checked here (the chart mounts the node's file there, chart "
                "value npu.driverVersionFile; the engine's entrypoint checks it too)"
            )
        return f"no {ENV_MIN} (set by the engine image): the driver is not checked"


def read_version(path: str | os.PathLike[str]) -> str | None:
    """The HDK version a version.info states (package_version, else Version), or None."""
    version = package = None
    for raw in Path(path).read_text(errors="replace").splitlines():
        key, sep, value = raw.strip().partition("=")
        if not sep:
            continue
        if key == "package_version":
            package = value.strip()
        elif key == "Version":
            version = value.strip()
    return package or version


def major_minor(version: str) -> tuple[int, int] | None:
    match = _MAJOR_MINOR.match(version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check(environ: Mapping[str, str] | None = None) -> DriverCheck:
    """Compare the node's version.info with the image's minimum (both from the environment)."""
    env = os.environ if environ is None else environ
    needed = env.get(ENV_MIN) or None
    file = env.get(ENV_FILE) or DEFAULT_FILE
    label = env.get(ENV_LABEL) or DEFAULT_LABEL
    if needed is None:
        return DriverCheck(NOT_CHECKED, file, None, None, label)
    need = major_minor(needed)
    if need is None or not re.fullmatch(r"\d+\.\d+", needed):
        raise ValueError(f"{ENV_MIN}={needed!r} is not MAJOR.MINOR (docker/versions.env)")
    try:
        installed = read_version(file)
    except OSError:
        return DriverCheck(UNKNOWN, file, None, needed, label)
    have = major_minor(installed) if installed else None
    if have is None:
        return DriverCheck(UNKNOWN, file, installed or "", needed, label)
    return DriverCheck(OK if have >= need else UNSUPPORTED, file, installed, needed, label)
