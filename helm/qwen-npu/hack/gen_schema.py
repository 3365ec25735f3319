"""Generate values.schema.json from values.yaml's `# --` and `# @schema` comments.

Why: the schema must cover every value with `additionalProperties: false` (a misspelled key fails
at install time instead of being ignored), and a hand-kept schema drifts from values.yaml. Here the
values file is the one source: each key's type comes from its default, its description from the
`# --` comment above it, extra constraints from `# @schema key=<json>;key=<json>` lines
(`enum`, `minimum`, `maximum`, `items`, `type`, `additionalProperties`).

    python helm/qwen-npu/hack/gen_schema.py           # rewrite values.schema.json, README table
    python helm/qwen-npu/hack/gen_schema.py --check   # exit 1 when either is stale

Every leaf value must carry a `# --` description; a missing one is an error naming the key.
`patches.disabled` takes the patch names of qwen_npu/patches/registry.py (the one patch list);
`mtp.numDraftTokens`'s maximum is qwen_npu/hardware/chips.py's VERIFY_MAX_DRAFT_TOKENS.
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
README = CHART / "README.md"
TABLE_START = "<!-- values-table:start -->"
TABLE_END = "<!-- values-table:end -->"

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


# JSON Schema's type of a YAML value (bool before int: True is an int in Python)
_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


def _type_of(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    return next((name for kind, name in _TYPES.items() if isinstance(value, kind)), "null")


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


# What Kubernetes itself refuses at install time, refused here at `helm install` instead, with the
# key named (issue 40): the formats of the API's own fields, by the value keys that feed them.
#: resource.Quantity (k8s.io/apimachinery: a decimal, then a binary or decimal SI suffix or an
#: exponent), as a string or a number.
QUANTITY = {
    "type": ["string", "number"],
    "pattern": r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$",
    "minimum": 0,
}
#: A container resources block: requests and limits of quantities (and DRA claims).
RESOURCES = {
    "type": "object",
    "additionalProperties": False,
    "patternProperties": {
        "^(requests|limits)$": {"type": "object", "additionalProperties": QUANTITY},
        "^claims$": {"type": "array"},
    },
}
#: An image tag (the distribution spec's grammar); "" takes the chart's default.
IMAGE_TAG = r"^$|^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
#: A DNS-1123 label (object names are built from it); "" takes the chart's default.
DNS_LABEL = {"pattern": r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
#: IntOrString as a count or a percentage (a PodDisruptionBudget's, a rolling update's).
INT_OR_PERCENT = {"type": ["integer", "string"], "minimum": 0, "pattern": r"^[0-9]+%$"}
_BY_KEY: dict[str, dict[str, Any]] = {
    "resources": RESOURCES,
    "tag": {"pattern": IMAGE_TAG},
    "nameOverride": DNS_LABEL,
    "fullnameOverride": DNS_LABEL,
    "maxUnavailable": INT_OR_PERCENT,
    "minAvailable": INT_OR_PERCENT,
    "maxSurge": INT_OR_PERCENT,
}


def _kubernetes_formats(node: dict[str, Any]) -> None:
    """Add the API's formats (``_BY_KEY``) under ``node``, and make every key whose default is an
    object required: `engine: null` deletes the key in Helm's coalescing, and the templates then
    fail with a nil pointer instead of a message naming the value."""
    children: dict[str, Any] = node.get("properties", {})
    objects = [key for key, child in children.items() if "properties" in child]
    if objects:
        node["required"] = objects
    for key, child in children.items():
        rule = _BY_KEY.get(key)
        if rule is not None and "properties" not in child:
            child.update(rule)
        _kubernetes_formats(child)


def build_schema(values_text: str) -> dict[str, Any]:
    """The JSON schema for a values.yaml text."""
    data = yaml.safe_load(values_text)
    if not isinstance(data, dict):
        raise SchemaSourceError(f"{VALUES.name}: top level is not a mapping; fix the file")
    root = _node("", data, _comments(values_text))
    # The patch names come from the patch registry (THE patch list), not from a copy here.
    from qwen_npu.patches.registry import PATCHES

    disabled = root["properties"]["patches"]["properties"]["disabled"]
    disabled["items"] = {"type": "string", "enum": [p.name for p in PATCHES]}
    # The verify op's draft limit is a hardware fact of qwen_npu/hardware/chips.py, preflight's too.
    from qwen_npu.hardware.chips import VERIFY_MAX_DRAFT_TOKENS

    draft = root["properties"]["mtp"]["properties"]["numDraftTokens"]
    draft["maximum"] = VERIFY_MAX_DRAFT_TOKENS
    _kubernetes_formats(root)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "qwen-npu chart values",
        **root,
    }


def render_schema(values_text: str) -> str:
    """The schema as the committed file's text."""
    return json.dumps(build_schema(values_text), indent=2) + "\n"


def _rows(node: dict[str, Any], path: str) -> list[str]:
    if node.get("type") == "object" and "properties" in node:
        rows: list[str] = []
        for key, child in node["properties"].items():
            rows += _rows(child, f"{path}.{key}" if path else key)
        return rows
    kind = node["type"] if isinstance(node["type"], str) else " or ".join(node["type"])
    if "enum" in node:
        kind += " (" + ", ".join(json.dumps(v) for v in node["enum"]) + ")"
    default = json.dumps(node["default"], separators=(",", ":"))
    description = node["description"].replace("|", "\\|")
    return [f"| `{path}` | {kind} | `{default}` | {description} |"]


def render_values_table(values_text: str) -> str:
    """The README's table of every value (key, type, default, description)."""
    header = ["| key | type | default | description |", "|---|---|---|---|"]
    return "\n".join(header + _rows(build_schema(values_text), "")) + "\n"


def render_readme(readme_text: str, values_text: str) -> str:
    """The README with its values table replaced by the one generated from values.yaml."""
    if TABLE_START not in readme_text or TABLE_END not in readme_text:
        raise SchemaSourceError(
            f"{README.name}: the markers {TABLE_START} / {TABLE_END} are missing; add them"
        )
    head, rest = readme_text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    table = render_values_table(values_text)
    return f"{head}{TABLE_START}\n{table}{TABLE_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the file is stale")
    args = parser.parse_args(argv)
    try:
        values_text = VALUES.read_text()
        wanted = {
            SCHEMA: render_schema(values_text),
            README: render_readme(README.read_text(), values_text),
        }
    except SchemaSourceError as exc:
        print(f"gen_schema: {exc}", file=sys.stderr)
        return 2
    stale = [path for path, text in wanted.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"gen_schema: {path} is stale; run `make chart-schema`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"gen_schema: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
