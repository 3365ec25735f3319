"""The one finishing pass every dashboard goes through before it is written.

It turns the SDK's model into plain JSON and applies what all dashboards share: a stable ``uid``
from a hash of the file name (so links and bookmarks survive regeneration), tags, refresh,
timezone, time range, shared crosshair, sequential panel ids, the runbook and sibling-dashboard
links, the runbook URL of every panel that an alert watches, and the chart placeholders of every
threshold (the chart replaces ``"${thresholds.<key>}"`` with the value it also gives the alert).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from qwen_npu.observability.config import Config, threshold_placeholder
from qwen_npu.observability.panels import RUNBOOK_LINK_MARK, Board


def stable_uid(filename: str) -> str:
    """Grafana uids are at most 40 characters; 24 hex digits of SHA-256 are plenty."""
    return "qwen-npu-" + hashlib.sha256(filename.encode()).hexdigest()[:24]


def finish(board: Board, filename: str, cfg: Config) -> dict[str, Any]:
    model: dict[str, Any] = json.loads(json.dumps(board.builder.build(), cls=JSONEncoder))
    model["uid"] = stable_uid(filename)
    model["tags"] = list(cfg.dashboard_tags)
    model["refresh"] = cfg.dashboard_refresh
    model["timezone"] = cfg.dashboard_timezone
    model["time"] = {"from": cfg.dashboard_time_from, "to": "now"}
    model["graphTooltip"] = 1  # shared crosshair
    model["editable"] = False
    model["links"] = [
        {
            "title": "Runbook",
            "type": "link",
            "url": cfg.runbook_base,
            "icon": "doc",
            "targetBlank": True,
            "tooltip": "docs/runbook.md: what to do for each qwen-npu alert",
        },
        {
            "title": "Qwen NPU dashboards",
            "type": "dashboards",
            "tags": list(cfg.dashboard_tags),
            "asDropdown": True,
            "includeVars": True,
            "keepTime": True,
        },
    ]
    seen: set[str] = set()
    for panel_id, panel in enumerate(model.get("panels", []), start=1):
        panel["id"] = panel_id
        if panel.get("type") == "row":
            continue
        title = panel["title"]
        note = board.notes[title]
        seen.add(title)
        for link in panel.get("links", []):
            url = link.get("url", "")
            if url.startswith(RUNBOOK_LINK_MARK):
                link["url"] = cfg.runbook_url(url.removeprefix(RUNBOOK_LINK_MARK))
        if isinstance(note.threshold, str):
            steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            steps[1]["value"] = threshold_placeholder(note.threshold)
    missing = set(board.notes) - seen
    if missing:
        raise ValueError(f"panels lost while building {filename}: {sorted(missing)}")
    return model
