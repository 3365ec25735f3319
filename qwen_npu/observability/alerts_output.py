"""Output quality: speculative acceptance (recorded once) and the alerts on it and the canary.

Acceptance is defined here, once, as recording rules over SGLang's counters (generated tokens per
verify call over 10 minutes, per engine); the dashboards plot the recorded series and
QwenNpuSpecAcceptanceCollapse compares it with its threshold, so the panel and the alert cannot
disagree. It only exists while MTP runs and traffic flows; a collapse means the draft module is
wrong (e.g. a quantized MTP head or a corrupted mamba state), which is also what the canary
catches on the output side (the garbled Qwen3.6 NEXTN text of sgl-kernel-npu PR #748).
"""

from __future__ import annotations

from qwen_npu.observability.rules import Alert, AlertGroup, Recording

SPEC_ACCEPT_LENGTH = Recording(
    record="qwen_npu:spec_accept_length:rate10m",
    expr=(
        "sum %(without_ranks)s (rate(sglang:generation_tokens_total[10m]))"
        " / (sum %(without_ranks)s (rate(sglang:spec_verify_calls_total[10m])) > 0)"
    ),
    help="Tokens per verify step over 10 minutes, per engine and model: generated tokens over "
    "verify calls (accepted drafts + the bonus token). Absent without verify calls in the window "
    "(MTP off, no traffic).",
)
SPEC_ACCEPT_RATE = Recording(
    record="qwen_npu:spec_accept_rate:rate10m",
    expr=(
        "clamp((qwen_npu:spec_accept_length:rate10m - 1)"
        " / ((max %(without_ranks)s (sglang:spec_num_draft_tokens) > 1) - 1), 0, 1)"
    ),
    help="Accepted share of the proposed drafts over 10 minutes, per engine and model: (tokens "
    "per verify step - 1) / (draft tokens per verify - 1).",
    unit="percentunit",
)

SPEC_ACCEPTANCE_COLLAPSE = Alert(
    name="QwenNpuSpecAcceptanceCollapse",
    severity="warning",
    for_="15m",
    summary="Speculative decoding accepts almost no draft tokens.",
    description=(
        '{{ $labels.model_name }} on {{ $labels.instance }} accepts {{ $value | printf "%%.2f" }}'
        " tokens per verify step (minimum %(specAcceptLengthMin)s) for 15 minutes: MTP costs more"
        " than it gives."
    ),
    expr=f"{SPEC_ACCEPT_LENGTH.record} < %(specAcceptLengthMin)s",
    needs=("specAcceptLengthMin",),
)

CANARY_DEGENERATED = Alert(
    name="QwenNpuCanaryDegenerated",
    severity="critical",
    for_="2m",
    summary="The canary generation came back garbled.",
    description=(
        "The canary on {{ $labels.instance }} (pod {{ $labels.pod }}) scores"
        ' {{ $value | printf "%%.2f" }} for degeneration (maximum %(canaryDegenerationMax)s):'
        " repeated or garbled output."
    ),
    expr="qwen_npu_canary_degeneration_score > %(canaryDegenerationMax)s",
    needs=("canaryDegenerationMax",),
)

GROUP = AlertGroup(
    "qwen-npu.output",
    (SPEC_ACCEPTANCE_COLLAPSE, CANARY_DEGENERATED),
    recordings=(SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE),
)
