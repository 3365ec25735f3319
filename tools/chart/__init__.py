"""The chart's offline toolkit (Helm's Go SDK through helm-python-sdk, Kubernetes' JSON schemas).

``render`` loads and renders the chart and reads the render (the engine's args, pod requests, the
Volcano PodGroup); ``validate`` checks objects against the schemas and runs Helm's lint;
``python -m tools.chart`` is behind `make chart`. The tests and the perf harnesses read the chart
through ``from tools import chart``: the names below are that one surface.
"""

from tools.chart.render import (
    CHIPS_DIR,
    CI_DIR,
    CLOUDS_DIR,
    CR_KINDS,
    CR_SCHEMAS,
    IMAGE_VOLUME_MIN,
    KUBE_VERSIONS,
    NAMESPACE,
    PROFILES_DIR,
    RELEASE,
    RUNTIMES,
    chart,
    ci_overlays,
    container,
    deep_merge,
    documents,
    engine_args,
    engine_workload,
    find,
    merged_values,
    pod_requests,
    pod_templates,
    profiles,
    quantity,
    render,
    render_docs,
    scenarios,
    values_from,
    volcano_podgroup,
)
from tools.chart.validate import (
    is_builtin,
    lint,
    validate,
)

__all__ = [
    "CHIPS_DIR",
    "CI_DIR",
    "CLOUDS_DIR",
    "CR_KINDS",
    "CR_SCHEMAS",
    "IMAGE_VOLUME_MIN",
    "KUBE_VERSIONS",
    "NAMESPACE",
    "PROFILES_DIR",
    "RELEASE",
    "RUNTIMES",
    "chart",
    "ci_overlays",
    "container",
    "deep_merge",
    "documents",
    "engine_args",
    "engine_workload",
    "find",
    "is_builtin",
    "lint",
    "merged_values",
    "pod_requests",
    "pod_templates",
    "profiles",
    "quantity",
    "render",
    "render_docs",
    "scenarios",
    "validate",
    "values_from",
    "volcano_podgroup",
]
