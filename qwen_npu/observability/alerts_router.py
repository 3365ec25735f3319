"""Rollout and failover alerts: a replica stuck draining, a worker the router ejected.

A replica drains on SIGTERM (in-flight requests finish, /health answers 503, the sidecar reports
``qwen_npu_engine_draining``); one still draining after 15 minutes holds a rollout and its
accelerators. The router (``smg_*`` metrics, observability/router_metrics.py) stops sending
to a worker whose health checks failed; one ejected for 2 minutes serves nobody while still
counted as a replica. Both link to their docs/runbook.md sections.
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup

REPLICA_STUCK_DRAINING = Alert(
    name="QwenNpuReplicaStuckDraining",
    severity="warning",
    for_="15m",
    summary="A replica has been draining for 15 minutes and has not exited.",
    description=(
        "The engine behind {{ $labels.instance }} (pod {{ $labels.pod }}) got SIGTERM and has"
        " answered 503 while finishing in-flight requests for over 15 minutes; a request that"
        " never finishes keeps it (and the rollout) waiting until the grace period kills it."
    ),
    expr="qwen_npu_engine_draining == 1",
)

ROUTER_WORKER_EJECTED = Alert(
    name="QwenNpuRouterWorkerEjected",
    severity="warning",
    for_="2m",
    summary="The router has stopped sending to a worker that failed its health checks.",
    description=(
        "The router {{ $labels.pod }} has considered worker {{ $labels.worker }} unhealthy for"
        " 2 minutes: it sends it nothing, so the remaining replicas carry its share."
    ),
    expr="smg_worker_health == 0",
)

GROUP = AlertGroup("qwen-npu.router", (REPLICA_STUCK_DRAINING, ROUTER_WORKER_EJECTED))
