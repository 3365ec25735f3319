"""The human output of ``qwen-npu preflight``: a table, the findings, a key=value verdict."""

from __future__ import annotations

import json
import shlex

from qwen_npu.preflight import memory
from qwen_npu.preflight.findings import BLOCKING, WARNING
from qwen_npu.preflight.quant import scheme_label
from qwen_npu.preflight.rules import READY, READY_WITH_PATCHES, Report

_NEXT = {
    READY: "start the engine with these settings (the chart renders its command line)",
    READY_WITH_PATCHES: "start the engine image (it applies the patches) with these settings",
    "would_fail": "fix the blocking findings above; nothing was started",
}


def _model_lines(r: Report) -> list[str]:
    c = r.config
    kind = f"MoE {c.num_experts} experts top-{c.num_experts_per_tok}" if c.is_moe else "dense"
    lines = [
        f"  model      {c.architecture or '?'} ({c.model_type or '?'}"
        f"{', VL text_config' if c.is_vl else ''}), {kind}, hidden {c.hidden_size}",
        f"  layers     {c.num_hidden_layers} ({c.num_full_attention_layers} full attention, "
        f"{c.num_linear_attention_layers} GDN), MTP layers {c.mtp_num_hidden_layers}",
        f"  heads      attention {c.num_attention_heads}, KV {c.num_key_value_heads}",
    ]
    if c.has_gdn:
        lines.append(
            f"  GDN        value heads {c.linear_num_value_heads}, key heads "
            f"{c.linear_num_key_heads}, V={c.linear_value_head_dim} K={c.linear_key_head_dim}, "
            f"SSM state {c.mamba_ssm_dtype} ({c.mamba_ssm_dtype_source})"
        )
    return lines


def _quant_lines(r: Report) -> list[str]:
    q = r.quant
    if not q.quantized:
        return ["  quant      none (no quant_model_description.json)"]
    lines = [f"  quant      {q.model_quant_type or '?'}, {q.tensor_keys} description keys"]
    for part, schemes in q.parts.items():
        lines.append(f"    {part.replace('_', ' '):<17}{scheme_label(schemes)}")
    if q.mtp_all_float is not None:
        lines.append(f"    MTP all FLOAT    {'yes' if q.mtp_all_float else 'no'}")
    needed = ", ".join(sorted(q.needed)) or "none"
    disabled = ", ".join(sorted(q.disabled)) or "none"
    lines.append(f"  patches    needed: {needed}; disabled: {disabled}")
    return lines


def _tp_lines(r: Report) -> list[str]:
    lines = [
        f"  TP         --tp-size {r.tp} ({'given' if r.tp_source == 'flag' else 'auto'})",
        "     tp  ok   H/rank  h_block  UB bytes         weights/NPU  fits",
    ]
    for check in r.tp_checks:
        mem = r.memory_by_tp[check.tp]
        ub = check.ub
        ub_text = f"{ub.buffered_bytes}/{ub.ub_bytes}" if ub else "-"
        mark = "*" if check.tp == r.tp else " "
        lines.append(
            f"   {mark}{check.tp:>3}  {'yes' if check.feasible else 'no ':<3}  "
            f"{check.per_rank.get('linear_num_value_heads', '-')!s:>6}  "
            f"{(ub.h_block_size if ub else '-')!s:>7}  {ub_text:<15}  "
            f"{memory.gib(mem.per_npu_bytes):>11}  {'yes' if mem.fits else 'no'}"
        )
    m = r.memory
    lines.append(
        f"  memory     {memory.gib(m.total_bytes)} of weights ({m.source}), MTP "
        f"{memory.gib(m.mtp_bytes)}{'' if m.mtp_enabled else ' (not loaded)'}; per NPU "
        f"{memory.gib(m.per_npu_bytes)} of {memory.gib(m.budget_bytes)} "
        f"({m.npu_memory_gb:g} GiB x {m.mem_fraction_static:g}), "
        f"{memory.gib(m.headroom_bytes)} left"
    )
    return lines


def render(r: Report) -> str:
    """The whole human report."""
    lines = [f"qwen-npu preflight {r.checkpoint.root}"]
    lines += _model_lines(r) + _quant_lines(r) + _tp_lines(r)
    if r.command is not None:
        lines.append(f"  engine     {shlex.join(r.command)}")
    else:
        sets = " ".join(
            f"--set{'-json' if isinstance(v, float) else ''} {k}={json.dumps(v).strip(chr(34))}"
            for k, v in r.chart_values.items()
        )
        lines.append(f"  chart      {sets}")
    shown = [f for f in r.findings if f.severity in (BLOCKING, WARNING)]
    if shown:
        lines.append("  findings")
        for f in shown:
            lines.append(f"    {f.severity.upper():<8} {f.code}: {f.message}")
            if f.keys:
                extra = f.key_count - min(len(f.keys), 5)
                more = f" (+{extra} more)" if extra else ""
                lines.append(f"             keys: {', '.join(f.keys[:5])}{more}")
    blocking = ",".join(dict.fromkeys(f.code for f in r.blocking)) or "none"
    patches = ",".join(sorted(r.quant.needed)) or "none"
    lines.append(
        f"verdict={r.verdict} exit={r.exit_code} blocking={blocking} patches={patches} "
        f'next="{_NEXT[r.verdict]}"'
    )
    return "\n".join(lines)
