"""Output-quality alerts: speculative acceptance collapsing and the canary's garbled output.

Acceptance is measured from SGLang's counters (generated tokens per verify call over 10 minutes),
so it only exists while MTP runs and traffic flows; a collapse means the draft module is wrong
(e.g. a quantized MTP head or a corrupted mamba state), which is also what the canary catches on
the output side (the garbled Qwen3.6 NEXTN text of sgl-kernel-npu PR #748).
"""

from __future__ import annotations

from qwen_npu.serve.observability.rules import Alert, AlertGroup

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
    expr=(
        "sum %(without_ranks)s (rate(sglang:generation_tokens_total[10m]))"
        " / sum %(without_ranks)s (rate(sglang:spec_verify_calls_total[10m]))"
        " < %(specAcceptLengthMin)s"
    ),
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

GROUP = AlertGroup("qwen-npu.output", (SPEC_ACCEPTANCE_COLLAPSE, CANARY_DEGENERATED))
