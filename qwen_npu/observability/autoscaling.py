"""The autoscaler's trigger queries (KEDA's Prometheus scaler), generated like every panel and alert
so that they pass the same metric-name check; the chart's ScaledObject fills the placeholders.

Each selects the release's engine pods as the ServiceMonitor labels them, one series per pod
(``max by (pod)``: with TP each rank may export the same gauge). ``queue`` is the total queue
(KEDA's ``AverageValue`` divides it per replica); ``ttft_p90`` is compared with an SLO.
"""

from __future__ import annotations

FILE = "autoscaling/keda-triggers.yaml"
SELECTOR = 'namespace="${release.namespace}", service="${engine.service}"'

#: ``or vector(0)``: no series (no engine scraped yet) and no traffic (a quantile of nothing is NaN,
#: which KEDA's scaler refuses) both read as 0, never as an error.
QUERIES: dict[str, str] = {
    "queue": f"sum(max by (pod) (sglang:num_queue_reqs{{{SELECTOR}}})) or vector(0)",
    "ttft_p90": (
        "(histogram_quantile(0.9, sum by (le) "
        f"(rate(sglang:time_to_first_token_seconds_bucket{{{SELECTOR}}}[${{window}}]))) > 0)"
        " or vector(0)"
    ),
}
