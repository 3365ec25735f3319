"""The chart's offline toolkit: render the chart with Helm's Go SDK (helm-python-sdk), read the
render (the engine's args, pod requests, the Volcano PodGroup), validate objects against
kubernetes-validate's strict schemas and the custom resources' schemas in tools/schemas/, and run
Helm's lint. `make chart`, the tests and the perf harnesses share it (``from tools import chart``).
"""

from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import helm_python as helm
import importlib_resources
import jsonschema  # type: ignore[import-untyped]
import yaml

from tools.paths import CHART_DIR, REPO

PROFILES_DIR = CHART_DIR / "profiles"
CI_DIR = CHART_DIR / "ci"
CHIPS_DIR = CHART_DIR / "chips"
CLOUDS_DIR = CHART_DIR / "clouds"
CR_SCHEMAS = REPO / "tools" / "schemas"
RELEASE = "qwen-npu"
NAMESPACE = "llm"

# Every minor the chart's kubeVersion (>=1.29) claims and kubernetes-validate knows.
KUBE_VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37"]
# The image volume source (model.source=image) exists from 1.31 (alpha), beta from 1.33.
IMAGE_VOLUME_MIN = "1.33"

# Custom resources -> the schema file kept for them.
CR_KINDS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset-leaderworkerset-v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "podgroup-scheduling-v1beta1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda-v1alpha1.json",
}

# libyaml's safe loader (PyYAML's wheels carry it): the same objects as yaml.safe_load, eight times
# faster on the dashboards' ConfigMap, the bulk of every render (the chart tests parse hundreds).
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# npu.runtime modes every profile renders with (issue 14: profile x MTP x runtime).
RUNTIMES = {"ascend-docker-runtime": "", "hostPath": "-npu-hostpath"}


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's values coalescing for maps (override wins, lists replaced)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def values_from(*files: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The user values of `helm install -f f1 -f f2 --set ...` (chart defaults not included)."""
    merged: dict[str, Any] = {}
    for path in files:
        merged = deep_merge(merged, yaml.safe_load(path.read_text()) or {})
    return deep_merge(merged, extra or {})


def profiles() -> list[Path]:
    return sorted(PROFILES_DIR.glob("*.yaml"))


def scenarios() -> dict[str, dict[str, Any]]:
    """Named user-values sets: every profile with MTP on and off in every npu.runtime mode, every
    ci/ overlay, the LWS profile with the optional parts on, a single-node profile on an A3."""
    found: dict[str, dict[str, Any]] = {}
    for profile in profiles():
        for runtime, suffix in RUNTIMES.items():
            for mtp in (True, False):
                name = f"{profile.stem}-mtp-{'on' if mtp else 'off'}{suffix}"
                extra = {"mtp": {"enabled": mtp}, "npu": {"runtime": runtime}}
                found[name] = values_from(profile, extra=extra)
    for overlay in sorted(CI_DIR.glob("*-values.yaml")):
        found[f"ci-{overlay.stem.removesuffix('-values')}"] = values_from(overlay)
    # The largest checkpoint (a LeaderWorkerSet) with the optional parts on.
    big = PROFILES_DIR / "qwen3.5-397b-a17b-w8a8.yaml"
    for part in ("router", "hpa", "apikey", "multinode", "guaranteed", "fault-rescheduling"):
        found[f"397b-{part}"] = values_from(big, CI_DIR / f"{part}-values.yaml")
    mid = PROFILES_DIR / "qwen3.5-122b-a10b-w8a8.yaml"
    found["122b-a3"] = values_from(mid, CHIPS_DIR / "a3.yaml")
    found["122b-cce"] = values_from(mid, CLOUDS_DIR / "cce.yaml")
    a3 = PROFILES_DIR / "qwen3.5-397b-a17b-w8a8-a3.yaml"
    found["397b-a3-superpod"] = values_from(a3, extra={"scheduling": {"superPod": {"spBlock": 16}}})
    return found


@cache
def chart() -> helm.Chart:
    return helm.Chart.load(CHART_DIR)


def render(values: dict[str, Any] | None = None, **options: Any) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included)."""
    opts = {"name": RELEASE, "namespace": NAMESPACE, **options}
    return chart().render(values or {}, **opts)


def merged_values(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's defaults coalesced with `values` (what a release would use)."""
    return chart().merge_values(values or {})


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a render, in template order; NOTES.txt and empty docs dropped."""
    docs: list[dict[str, Any]] = []
    for name in sorted(rendered):
        if name.endswith("NOTES.txt"):
            continue
        for doc in yaml.load_all(rendered[name], Loader=_YAML_LOADER):
            if doc:
                doc.setdefault("metadata", {}).setdefault("annotations", {})
                docs.append(doc)
                if not doc["metadata"]["annotations"]:
                    del doc["metadata"]["annotations"]
    return docs


@lru_cache(maxsize=256)
def _rendered_documents(values_json: str) -> list[dict[str, Any]]:
    return documents(render(json.loads(values_json)))


def render_docs(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The objects `values` render to. A render is a pure function of the values, so each distinct
    values set is rendered once per process (the chart tests ask for the same ones many times);
    every caller gets its own copy to change."""
    return copy.deepcopy(_rendered_documents(json.dumps(values or {}, sort_keys=True)))


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def pod_templates(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, pod template) of a workload: Deployment -> one, LeaderWorkerSet -> leader + worker."""
    if doc["kind"] == "Deployment":
        yield "single", doc["spec"]["template"]
    elif doc["kind"] == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        yield "leader", lwt["leaderTemplate"]
        yield "worker", lwt["workerTemplate"]


def container(template: dict[str, Any], name: str) -> dict[str, Any] | None:
    spec = template["spec"]
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        if c["name"] == name:
            return dict(c)
    return None


def engine_workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's Deployment or LeaderWorkerSet."""
    workloads = [d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet")]
    found = [d for d in workloads if d["metadata"]["name"].endswith("-engine")]
    if len(found) != 1:
        raise AssertionError(f"expected one engine workload, found {len(found)}")
    return found[0]


def engine_args(docs: list[dict[str, Any]], role: str | None = None) -> list[str]:
    """The engine container's args of the serving pod (or of `role`)."""
    for found_role, template in pod_templates(engine_workload(docs)):
        if (role is None and found_role != "worker") or role == found_role:
            engine = container(template, "engine")
            assert engine is not None
            return [str(a) for a in engine["args"]]
    raise AssertionError(f"no engine pod template with role {role}")


# --- Volcano gang scheduling of LeaderWorkerSet groups ------------------------------------------

_SUFFIX: dict[str, Decimal | int] = {
    "": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}  # fmt: skip


def quantity(text: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "128Gi", 8) as a number."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text))
    if match is None or match[2] not in _SUFFIX:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(match[1]) * Decimal(_SUFFIX[match[2]])


def pod_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """Kubernetes' effective requests of a pod (what the scheduler and LWS's PodGroup sum): the
    containers plus the native sidecars, or the largest init container with the sidecars started
    before it, whichever is larger per resource."""

    def requests(c: dict[str, Any]) -> dict[str, Decimal]:
        return {k: quantity(v) for k, v in c.get("resources", {}).get("requests", {}).items()}

    total: defaultdict[str, Decimal] = defaultdict(Decimal)
    sidecars: defaultdict[str, Decimal] = defaultdict(Decimal)
    for c in spec["containers"]:
        for k, v in requests(c).items():
            total[k] += v
    for c in spec.get("initContainers", []):
        for k, v in requests(c).items():
            if c.get("restartPolicy") == "Always":
                sidecars[k] += v
                total[k] += v
            else:
                total[k] = max(total[k], v + sidecars[k])
    return dict(total)


def volcano_podgroup(lws: dict[str, Any], group: int = 0) -> dict[str, Any] | None:
    """The PodGroup the LWS controller's Volcano provider creates for one group of a rendered
    LeaderWorkerSet (as kubernetes-sigs/lws pkg/schedulerprovider/volcano_provider.go does), or
    None when Volcano does not schedule it."""
    if lws.get("kind") != "LeaderWorkerSet":
        return None
    templates = dict(pod_templates(lws))
    if templates["worker"]["spec"].get("schedulerName") != "volcano":
        return None
    lwt = lws["spec"]["leaderWorkerTemplate"]
    size = int(lwt.get("size", 1))
    leader = pod_requests(templates.get("leader", templates["worker"])["spec"])
    worker = pod_requests(templates["worker"]["spec"])
    resources = {k: leader.get(k, Decimal(0)) + (size - 1) * worker.get(k, Decimal(0))
                 for k in sorted(leader.keys() | worker.keys())}  # fmt: skip
    spec: dict[str, Any] = {
        "minMember": 1 if lws["spec"].get("startupPolicy") == "LeaderReady" else size,
        "minResources": {
            k: str(int(v)) if v == v.to_integral_value() else f"{int(v * 1000)}m"
            for k, v in resources.items()
        },
    }
    queue = lws["metadata"].get("annotations", {}).get("scheduling.volcano.sh/queue-name")
    if queue:
        spec["queue"] = queue
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"{lws['metadata']['name']}-{group}-revision",
            "namespace": lws["metadata"].get("namespace", NAMESPACE),
        },
        "spec": spec,
    }


# --- validation -----------------------------------------------------------------------------------


# kubernetes-validate's strict schemas point into a 1.4 MB _definitions.json with $refs; resolving
# them per document costs ~30 ms, so they are inlined once per (version, definition) (one that
# refers back to itself is left open) and a validation takes a fraction of a millisecond.
_K8S_SCHEMAS = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
_INLINED: dict[tuple[str, str], Any] = {}


@cache
def _definitions(version: str) -> dict[str, Any]:
    text = _K8S_SCHEMAS.joinpath(f"v{version}.0-local-strict", "_definitions.json").read_text()
    return dict(json.loads(text)["$defs"])


def _inline(version: str, node: Any, stack: tuple[str, ...] = ()) -> Any:
    if isinstance(node, list):
        return [_inline(version, item, stack) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and "#/$defs/" in ref:
        name = ref.split("#/$defs/", 1)[1]
        if name in stack:
            return {}
        if (version, name) not in _INLINED:
            target = _definitions(version)[name]
            _INLINED[(version, name)] = _inline(version, target, (*stack, name))
        return _INLINED[(version, name)]
    return {k: _inline(version, v, stack) for k, v in node.items()}


@cache
def _k8s_validator(version: str, filename: str) -> jsonschema.protocols.Validator | None:
    path = _K8S_SCHEMAS.joinpath(f"v{version}.0-local-strict", filename)
    if not path.is_file():
        return None
    return jsonschema.Draft202012Validator(_inline(version, json.loads(path.read_text())))


def _kube_filename(doc: dict[str, Any]) -> str:
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    return f"{doc['kind'].lower()}-{api}.json"


@cache
def _cr_validator(filename: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft7Validator(json.loads((CR_SCHEMAS / filename).read_text()))


def _errors(validator: jsonschema.protocols.Validator, doc: Any, where: str) -> list[str]:
    return [
        f"{where}: {'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


def is_builtin(doc: dict[str, Any], version: str = KUBE_VERSIONS[-1]) -> bool:
    """Whether Kubernetes itself defines the object's kind (kubernetes-validate has a schema)."""
    return _k8s_validator(version, _kube_filename(doc)) is not None


def validate(doc: dict[str, Any], version: str) -> list[str]:
    """Strict schema errors of one object for one Kubernetes minor (empty list = valid); for a
    LeaderWorkerSet that Volcano schedules, its PodGroup's (`volcano_podgroup`) too."""
    where = f"{doc['kind']}/{doc['metadata'].get('name')} (k8s {version})"
    cr = CR_KINDS.get((doc["apiVersion"], doc["kind"]))
    if cr is not None:
        errors = _errors(_cr_validator(cr), doc, where)
        pod = _k8s_validator(version, "podtemplatespec-v1.json")
        assert pod is not None
        for role, template in pod_templates(doc):
            errors += _errors(pod, template, f"{where} {role}Template")
        group = volcano_podgroup(doc)
        if group is not None:
            errors += validate(group, version)
        return errors
    validator = _k8s_validator(version, _kube_filename(doc))
    if validator is None:
        return [f"{where}: no schema for {doc['apiVersion']} {doc['kind']}"]
    return _errors(validator, doc, where)


def lint(
    values: dict[str, Any], versions: tuple[str, ...] = (KUBE_VERSIONS[0], KUBE_VERSIONS[-1])
) -> list[str]:
    """`helm lint --strict` findings (warning and above) per Kubernetes minor of `versions`, by
    default the oldest and the newest the chart claims."""
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
