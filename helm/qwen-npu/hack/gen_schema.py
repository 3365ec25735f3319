"""Generate values.schema.json from values.yaml's `# --` and `# @schema` comments.

Why: the schema must cover every value with `additionalProperties: false` (a misspelled key fails
at install time instead of being ignored), and a hand-kept schema drifts from values.yaml. Here the
values file is the one source: each key's type comes from its default, its description from the
`# --` comment above it, extra constraints from `# @schema key=<json>;key=<json>` lines
(`enum`, `minimum`, `maximum`, `items`, `type`, `additionalProperties`).

    python helm/qwen-npu/hack/gen_schema.py           # rewrite values.schema.json
    python helm/qwen-npu/hack/gen_schema.py --check   # exit 1 when the committed file is stale

Every leaf value must carry a `# --` description; a missing one is an error naming the key.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent.parent
VALUES = CHART / "values.yaml"
SCHEMA = CHART / "values.schema.json"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):")


class SchemaSourceError(Exception):
    """values.yaml lacks something the schema needs (names the key and the fix)."""


def _comments(text: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Map dotted key paths to (description, @schema overrides) from the comment block above."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(raw)
        if match is None:
            block = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(key for _, key in stack)
        description: list[str] = []
        overrides: dict[str, Any] = {}
        in_description = False
        for line in block:
            if line.startswith("@schema"):
                for part in line.removeprefix("@schema").strip().split(";"):
                    name, _, value = part.partition("=")
                    try:
                        overrides[name.strip()] = json.loads(value)
                    except json.JSONDecodeError as exc:
                        raise SchemaSourceError(
                            f"{VALUES.name}: key {path}: bad @schema value {part!r} ({exc.msg}); "
                            "write key=<json>"
                        ) from None
                in_description = False
            elif line.startswith("--"):
                description = [line.removeprefix("--").strip()]
                in_description = True
            elif in_description:
                description.append(line)
        if description or overrides:
            found[path] = (" ".join(description).strip(), overrides)
        block = []
    return found


def _type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _node(path: str, value: Any, notes: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    description, overrides = notes.get(path, ("", {}))
    node: dict[str, Any] = {}
    if description:
        node["description"] = description
    if isinstance(value, dict) and "additionalProperties" not in overrides:
        node["type"] = "object"
        node["additionalProperties"] = False
        node["properties"] = {
            key: _node(f"{path}.{key}" if path else key, child, notes)
            for key, child in value.items()
        }
        return node
    if not description:
        raise SchemaSourceError(
            f"{VALUES.name}: key {path}: no `# --` description; add one above the key"
        )
    node["type"] = _type_of(value)
    if isinstance(value, list) and "items" not in overrides:
        if not value:
            raise SchemaSourceError(
                f"{VALUES.name}: key {path}: empty list without `# @schema items=...`; add one"
            )
        node["items"] = {"type": _type_of(value[0])}
    node.update(overrides)
    node["default"] = value
    return node


def build_schema(values_text: str) -> dict[str, Any]:
    """The JSON schema for a values.yaml text."""
    data = yaml.safe_load(values_text)
    if not isinstance(data, dict):
        raise SchemaSourceError(f"{VALUES.name}: top level is not a mapping; fix the file")
    root = _node("", data, _comments(values_text))
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "qwen-npu chart values",
        **root,
    }


def render_schema(values_text: str) -> str:
    """The schema as the committed file's text."""
    return json.dumps(build_schema(values_text), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    args = parser.parse_args(argv)
    try:
        text = render_schema(VALUES.read_text())
    except SchemaSourceError as exc:
        print(f"gen_schema: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if not SCHEMA.exists() or SCHEMA.read_text() != text:
            print(
                f"gen_schema: {SCHEMA} is stale; run `make chart-schema` and commit it",
                file=sys.stderr,
            )
            return 1
        print(f"gen_schema: {SCHEMA.name} is up to date")
        return 0
    SCHEMA.write_text(text)
    print(f"gen_schema: wrote {SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
