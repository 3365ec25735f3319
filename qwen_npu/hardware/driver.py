"""The node's Ascend driver (HDK) against the oldest one the image's CANN supports.

Why this exists: CANN 9.1.x supports HDK 25.2.x and later, and nothing else reads the node's
driver version, so a node on an older HDK fails deep inside torch_npu minutes into the start. The
entrypoint (bash) and preflight (this module) make the same comparison, by MAJOR.MINOR, of the
image's ``QWEN_NPU_MIN_HDK_VERSION`` (docker/versions.env ``CANN_MIN_HDK_VERSION``; unset outside
the image: nothing compared) with the node's ``version.info`` (mounted by the chart at
``npu.driverVersionFile``): its ``package_version=25.2.0``, else ``Version=``, since some installs
write a component version such as ``7.35.23`` under ``Version``. Standard library only.
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
    match = re.match(r"(\d+)\.(\d+)", version)
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
    if not re.fullmatch(r"\d+\.\d+", needed) or need is None:
        raise ValueError(f"{ENV_MIN}={needed!r} is not MAJOR.MINOR (docker/versions.env)")
    try:
        installed = read_version(file)
    except OSError:
        return DriverCheck(UNKNOWN, file, None, needed, label)
    have = major_minor(installed) if installed else None
    if have is None:
        return DriverCheck(UNKNOWN, file, installed or "", needed, label)
    return DriverCheck(OK if have >= need else UNSUPPORTED, file, installed, needed, label)
