"""Validate rendered objects: kubernetes-validate's strict schemas for built-in kinds, the schemas
in tools/schemas/ for the custom resources, and Helm's own lint.

Schemas are loaded once per (Kubernetes version, kind): validating hundreds of documents stays fast.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import helm_python as helm
import importlib_resources
import jsonschema  # type: ignore[import-untyped]

from tools.chart.render import (
    CR_KINDS,
    CR_SCHEMAS,
    KUBE_VERSIONS,
    pod_templates,
    volcano_podgroup,
)
from tools.paths import CHART_DIR


class _SchemaStore:
    """kubernetes-validate's strict schemas, one compiled validator per (version, file).

    Its schemas point into a 1.4 MB `_definitions.json` with `$ref`s; resolving them per document
    costs ~30 ms. They are inlined once here (a definition that refers back to itself is left
    open), so a validation takes a fraction of a millisecond.
    """

    def __init__(self) -> None:
        self._root = importlib_resources.files("kubernetes_validate").joinpath(
            "kubernetes-json-schema"
        )
        self._definitions: dict[str, dict[str, Any]] = {}
        self._inlined: dict[tuple[str, str], Any] = {}
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}

    def _dir(self, version: str) -> Any:
        return self._root.joinpath(f"v{version}.0-local-strict")

    def _inline(self, version: str, node: Any, stack: tuple[str, ...] = ()) -> Any:
        if isinstance(node, list):
            return [self._inline(version, item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and "#/$defs/" in ref:
            name = ref.split("#/$defs/", 1)[1]
            if name in stack:
                return {}
            key = (version, name)
            if key not in self._inlined:
                if version not in self._definitions:
                    text = self._dir(version).joinpath("_definitions.json").read_text()
                    self._definitions[version] = json.loads(text)["$defs"]
                target = self._definitions[version][name]
                self._inlined[key] = self._inline(version, target, (*stack, name))
            return self._inlined[key]
        return {k: self._inline(version, v, stack) for k, v in node.items()}

    def validator(self, version: str, filename: str) -> jsonschema.protocols.Validator | None:
        key = (version, filename)
        if key not in self._validators:
            path = self._dir(version).joinpath(filename)
            if not path.is_file():
                self._validators[key] = None
            else:
                schema = self._inline(version, json.loads(path.read_text()))
                self._validators[key] = jsonschema.Draft202012Validator(schema)
        return self._validators[key]


_STORE = _SchemaStore()


def _kube_filename(doc: dict[str, Any]) -> str:
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    return f"{doc['kind'].lower()}-{api}.json"


@cache
def _cr_validator(filename: str) -> jsonschema.protocols.Validator:
    schema = json.loads((CR_SCHEMAS / filename).read_text())
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.protocols.Validator, doc: Any, where: str) -> list[str]:
    return [
        f"{where}: {'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


def is_builtin(doc: dict[str, Any], version: str = KUBE_VERSIONS[-1]) -> bool:
    """Whether Kubernetes itself defines the object's kind (kubernetes-validate has a schema)."""
    return _STORE.validator(version, _kube_filename(doc)) is not None


def validate(doc: dict[str, Any], version: str) -> list[str]:
    """Strict schema errors of one object for one Kubernetes minor (empty list = valid).

    A LeaderWorkerSet that Volcano schedules also has the PodGroup the LWS controller would create
    for its groups (`volcano_podgroup`) checked against the Volcano CRD schema.
    """
    where = f"{doc['kind']}/{doc['metadata'].get('name')} (k8s {version})"
    cr = CR_KINDS.get((doc["apiVersion"], doc["kind"]))
    if cr is not None:
        errors = _errors(_cr_validator(cr), doc, where)
        pod = _STORE.validator(version, "podtemplatespec-v1.json")
        assert pod is not None
        for role, template in pod_templates(doc):
            errors += _errors(pod, template, f"{where} {role}Template")
        group = volcano_podgroup(doc)
        if group is not None:
            errors += validate(group, version)
        return errors
    validator = _STORE.validator(version, _kube_filename(doc))
    if validator is None:
        return [f"{where}: no schema for {doc['apiVersion']} {doc['kind']}"]
    return _errors(validator, doc, where)


def lint(
    values: dict[str, Any], versions: tuple[str, ...] = (KUBE_VERSIONS[0], KUBE_VERSIONS[-1])
) -> list[str]:
    """`helm lint --strict` findings at warning level and above, for each Kubernetes minor of
    `versions` (Helm's lint flags APIs deprecated or removed in that version); by default the
    oldest and the newest the chart claims."""
    findings: list[str] = []
    for version in versions:
        report = helm.lint(CHART_DIR, values, strict=True, kube_version=f"v{version}.0")
        findings += [
            f"k8s {version}: {m['path']}: {m['error']}"
            for m in report["messages"]
            if int(m["severity"]) >= 2
        ]
        findings += [f"k8s {version}: {e}" for e in report.get("errors") or []]
    return findings
