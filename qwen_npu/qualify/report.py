"""``report.md`` and ``report.json``: the claims, their checks and their evidence, to attach.

report.json is the record (every claim with its verdict, checks and data; the command line; the
overall verdict and exit status); report.md is the same for a reader, one table of claims and one
section per claim. The one verdict line the verb prints is ``verdict_line``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qwen_npu import __version__
from qwen_npu.qualify.verdict import FAIL, Claim, exit_status, failed

JSON_FILE, MD_FILE = "report.json", "report.md"


def document(claims: Sequence[Claim], argv: Sequence[str], require_npu: bool) -> dict[str, Any]:
    status = exit_status(claims, require_npu)
    return {
        "tool": "qwen-npu qualify",
        "qwen_npu_version": __version__,
        "timestamp": time.time(),
        "argv": list(argv),
        "require_npu": require_npu,
        "verdict": "pass" if status == 0 else "fail",
        "exit_status": status,
        "failed": failed(claims, require_npu),
        "claims": [c.as_dict() for c in claims],
    }


def verdict_line(claims: Sequence[Claim], require_npu: bool, where: Path) -> str:
    """``qwen-npu qualify: PASS|FAIL (start pass, answers fail, ...)`` and where the report is."""
    status = exit_status(claims, require_npu)
    parts = ", ".join(f"{c.name} {c.verdict}" for c in claims)
    npu = sum(len(c.npu_skipped()) for c in claims)
    tail = f"; {npu} NPU-only checks skipped" if npu else ""
    if require_npu and npu:
        tail += " (--require-npu: a failure)"
    word = "PASS" if status == 0 else "FAIL"
    why = ""
    bad = [c for c in claims if c.verdict == FAIL]
    if bad:
        why = f"; {bad[0].name}: {bad[0].summary}"
    return f"qwen-npu qualify: {word} ({parts}{tail}){why}; report: {where / MD_FILE}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# qwen-npu qualify",
        "",
        f"Verdict: **{doc['verdict'].upper()}** (exit {doc['exit_status']})"
        + (f"; failed: {', '.join(doc['failed'])}" if doc["failed"] else ""),
        "",
        f"`qwen-npu qualify {' '.join(doc['argv'])}` (qwen-npu {doc['qwen_npu_version']}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(doc['timestamp']))}"
        + (", --require-npu" if doc["require_npu"] else "")
        + ")",
        "",
        "| claim | verdict | summary |",
        "|---|---|---|",
    ]
    lines += [f"| {c['name']} | {c['verdict']} | {_cell(c['summary'])} |" for c in doc["claims"]]
    for c in doc["claims"]:
        lines += ["", f"## {c['name']}: {c['verdict']}", "", "| check | verdict | evidence |"]
        lines.append("|---|---|---|")
        for check in c["checks"]:
            mark = " (NPU-only)" if check["npu_only"] else ""
            lines.append(
                f"| {check['name']}{mark} | {check['verdict']} | {_cell(check['evidence'])} |"
            )
        for key in ("table", "tables"):
            tables = c["data"].get(key)
            if isinstance(tables, str):
                lines += ["", "```", tables, "```"]
            elif isinstance(tables, dict):
                for conc, text in tables.items():
                    lines += ["", f"Concurrency {conc}", "", "```", text, "```"]
        versions = c["data"].get("versions")
        if isinstance(versions, dict):
            lines += ["", *[f"- {k}: `{v}`" for k, v in versions.items()]]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, doc: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON_FILE).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out_dir / MD_FILE).write_text(markdown(doc))
