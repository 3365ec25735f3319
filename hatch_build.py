"""The wheel's build hook: the SGLang release docker/versions.env pins, written into the package.

Why: messages and the simulator's /server_info name the SGLang release qwen-npu is written and
verified against. The fact lives once, in docker/versions.env (SGLANG_VERSION); the installed
package cannot read the checkout, so each build (the wheel, the editable install of make setup)
writes it to ``qwen_npu/_pins.py`` (git-ignored, shipped in the wheel), as the version itself is
read from the same file by ``[tool.hatch.version]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

VERSIONS = Path("docker") / "versions.env"
TARGET = Path("qwen_npu") / "_pins.py"
KEYS = ("SGLANG_VERSION",)


class PinsHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        pins = {}
        for line in (root / VERSIONS).read_text(encoding="utf-8").splitlines():
            key, _, value = line.strip().partition("=")
            if key in KEYS:
                pins[key] = value.strip()
        missing = [k for k in KEYS if not pins.get(k)]
        if missing:
            raise ValueError(f"{VERSIONS}: no {', '.join(missing)}; add it (KEY=VALUE)")
        text = (
            '"""Written by hatch_build.py from docker/versions.env at build time; not edited."""\n'
        )
        text += "".join(f'\n{k} = "{v}"\n' for k, v in pins.items())
        path = root / TARGET
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        build_data["artifacts"].append(TARGET.as_posix())
