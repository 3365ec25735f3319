"""What a release is made of, read from its own manifest (``helm get manifest <release>``).

The chart names objects after nameOverride, fullnameOverride and the release, and renders the
engine as a Deployment or a LeaderWorkerSet; rather than copy that rule, the switches read what it
rendered (a stdlib reader of the chart's own YAML layout, checked by tests/oncall against helm
renders). Selectors use only the labels every engine pod carries whatever the overrides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENGINE_KINDS = ("Deployment", "LeaderWorkerSet")
#: kubectl's resource name for each engine kind.
RESOURCE = {"Deployment": "deployment", "LeaderWorkerSet": "leaderworkerset"}


@dataclass(frozen=True)
class Workload:
    """One rendered object: its kind, its name and its app.kubernetes.io/component label."""

    kind: str
    name: str
    component: str | None

    @property
    def ref(self) -> str:
        """``deployment/<name>``: what kubectl takes."""
        return f"{RESOURCE.get(self.kind, self.kind.lower())}/{self.name}"


def objects(manifest: str) -> list[Workload]:
    """Every object of a manifest: kind, metadata.name, metadata.labels' component."""
    found = []
    for doc in re.split(r"^---\s*$", manifest, flags=re.M):
        kind = re.search(r"^kind:\s*(\S+)\s*$", doc, flags=re.M)
        meta = re.search(r"^metadata:\s*\n((?:[ \t]+.*\n?|\s*\n)*)", doc, flags=re.M)
        if kind is None or meta is None:
            continue
        block = meta.group(1)
        name = re.search(r"^  name:\s*['\"]?([^'\"\s]+)", block, flags=re.M)
        component = re.search(
            r"^    app\.kubernetes\.io/component:\s*['\"]?([^'\"\s]+)", block, flags=re.M
        )
        if name is not None:
            found.append(Workload(kind[1], name[1], component[1] if component else None))
    return found


def engine_workload(manifest: str) -> Workload | None:
    """The engine's Deployment or LeaderWorkerSet (component ``engine``); None if not one."""
    engines = [o for o in objects(manifest) if o.kind in ENGINE_KINDS and o.component == "engine"]
    return engines[0] if len(engines) == 1 else None


def engine_selector(release: str) -> str:
    """Every engine pod of the release (LeaderWorkerSet workers included)."""
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=engine"


def serving_selector(release: str) -> str:
    """The pods that serve the API: every engine pod, or the LeaderWorkerSet leaders."""
    return engine_selector(release) + ",qwen-npu.io/role=leader"


def router_selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=router"
