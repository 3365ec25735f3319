"""The autoscaler's trigger queries (KEDA's Prometheus scaler), built like every panel and alert.

Why this exists: KEDA evaluates PromQL itself, so its queries are one more reader of the metric
lists; generating them here puts them under the same metric-name check as the dashboards and the
alerts (generate.check_metric_names), and the chart's ScaledObject only fills the placeholders.

Each query selects this release's engine pods the way the ServiceMonitor labels them (the
release namespace and the engine Service) and takes one series per pod (``max by (pod)``: with TP
each rank may export the same gauge):

- ``queue``: the total queue over the engine pods; KEDA's ``AverageValue`` target divides it by
  the replica count, so the target is "queued requests per replica".
- ``ttft_p90``: the p90 time to first token over the release, against an SLO (``Value`` target).
"""

from __future__ import annotations

FILE = "autoscaling/keda-triggers.yaml"
SELECTOR = 'namespace="${release.namespace}", service="${engine.service}"'
WINDOW = "${window}"

#: ``or vector(0)``: no series (no engine scraped yet) and no traffic (a quantile of nothing is NaN,
#: which KEDA's scaler refuses) both read as 0, never as an error.
QUERIES: dict[str, str] = {
    "queue": f"sum(max by (pod) (sglang:num_queue_reqs{{{SELECTOR}}})) or vector(0)",
    "ttft_p90": (
        "(histogram_quantile(0.9, sum by (le) "
        f"(rate(sglang:time_to_first_token_seconds_bucket{{{SELECTOR}}}[{WINDOW}]))) > 0)"
        " or vector(0)"
    ),
}


def fill(query: str, namespace: str, service: str, window: str = "5m") -> str:
    """A query with its placeholders filled (what the chart renders; tests use it too)."""
    return (
        query.replace("${release.namespace}", namespace)
        .replace("${engine.service}", service)
        .replace(WINDOW, window)
    )
