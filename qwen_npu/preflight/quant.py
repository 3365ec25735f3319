"""The quantization side of preflight: per-part scheme summary, MoE checks, patches needed.

The rules live in ``checkpoint.modelslim_desc`` (the patches call the same functions); this walks
the layers the engine would build and turns each answer into a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from qwen_npu._pins import SGLANG_VERSION
from qwen_npu.checkpoint import modelslim_desc
from qwen_npu.checkpoint.model_config import ModelConfig
from qwen_npu.hardware import ub_plan
from qwen_npu.patches import registry
from qwen_npu.preflight.findings import BLOCKING, INFO, WARNING, Finding, add

# The patches preflight reasons about, looked up in the ledger (a renamed patch fails here).
MOE_FALLBACK = registry.get_patch("modelslim-moe-unquant-fallback").name
MTP_UNQUANT = registry.get_patch("mtp-modelslim-unquant").name
UB_AWARE = registry.get_patch("mamba-scatter-ub-aware").name
#: sgl-kernel-npu's move_intermediate_cache default, which SGLang 0.5.23 never overrides.
KERNEL_DEFAULT_H_BLOCK_SIZE = 2

PARTS = (
    "attention",
    "linear_attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "mtp",
    "other",
)
_LINEAR_MODULES = frozenset({"w1", "w2", "w3", "fc"})


def part_of(name: str) -> str | None:
    """The part a linear projection's ``.weight`` belongs to (None for norms, routers, scales);
    runs once per key of 10^5: cheap string tests first."""
    if not name.endswith(".weight"):
        return None
    stem = name[:-7]
    module = stem[stem.rfind(".") + 1 :]
    if "proj" not in module and module not in _LINEAR_MODULES:
        return None
    if name.startswith("mtp.") or ".mtp." in name:
        return "mtp"
    if ".experts." in name:
        return "routed_experts"
    if "shared_expert" in name:
        return "shared_experts"
    if ".self_attn." in name:
        return "attention"
    if ".linear_attn." in name:
        return "linear_attention"
    if ".mlp." in name or ".block_sparse_moe." in name:
        return "dense_mlp"
    return "other"


@dataclass
class DescriptionScan:
    """Everything preflight needs from one pass over a description of 10^5 keys."""

    tensor_keys: int = 0
    unknown: list[str] = field(default_factory=list)  # schemes SGLang does not know
    parts: dict[str, dict[str, int]] = field(default_factory=dict)
    # Entries whose name contains "mtp.": a superset of every MTP root modelslim_desc knows, so
    # its rules give the same answers on this small dict as on the whole description.
    mtp_candidates: dict[str, Any] = field(default_factory=dict)
    bad_type_key: str | None = None  # first key whose scheme is not a string


def scan_description(desc: Mapping[str, Any]) -> DescriptionScan:
    """Count, classify and check every tensor entry in one pass (stops at a non-string scheme)."""
    result = DescriptionScan()
    known = modelslim_desc.KNOWN_SCHEMES
    counts: dict[str, dict[str, int]] = {}
    for key, scheme in modelslim_desc.tensor_entries(desc):
        if type(scheme) is not str:
            result.bad_type_key = key
            return result
        result.tensor_keys += 1
        if scheme not in known:
            result.unknown.append(key)
        if "mtp." in key:
            result.mtp_candidates[key] = scheme
        part = part_of(key) if key.endswith(".weight") else None
        if part is not None:
            per = counts.setdefault(part, {})
            per[scheme] = per.get(scheme, 0) + 1
    result.parts = {p: dict(sorted(counts[p].items())) for p in PARTS if p in counts}
    return result


def scheme_label(schemes: Mapping[str, int]) -> str:
    """``W8A8_DYNAMIC x 90, FLOAT x 3``: the schemes of a part, most used first."""
    ordered = sorted(schemes.items(), key=lambda item: -item[1])
    return ", ".join(f"{s} x {n}" for s, n in ordered)


def moe_prefixes(config: ModelConfig, mtp: bool) -> list[str]:
    """The fused-MoE layer prefixes SGLang builds, in the names it passes to the quant config."""
    if not config.is_moe:
        return []
    base = "model.language_model" if config.is_vl else "model"
    names = [f"{base}.layers.{i}.mlp.experts" for i in range(config.num_hidden_layers)]
    if mtp:
        names += [f"mtp.layers.{i}.mlp.experts" for i in range(config.mtp_num_hidden_layers)]
    return names


def _moe_error_code(message: str) -> str:
    if message.startswith("Mismatched"):
        return "moe-scheme-mismatch"
    if message.startswith("Missing"):
        return "moe-scheme-missing"
    if message.startswith("Mixed"):
        return "moe-scheme-mixed-experts"
    return "moe-scheme-unsupported"


@dataclass
class QuantReport:
    """What the description says and what it means for startup."""

    quantized: bool
    model_quant_type: str | None = None
    tensor_keys: int = 0
    parts: dict[str, dict[str, int]] = field(default_factory=dict)
    mtp_entries: int = 0
    mtp_all_float: bool | None = None
    moe_layers_checked: int = 0
    moe_unquantized_layers: list[str] = field(default_factory=list)
    needed: dict[str, str] = field(default_factory=dict)  # patch -> why this checkpoint needs it
    disabled: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` "quantization" object: the patches have their own, findings go up."""
        data = {k: v for k, v in vars(self).items() if k not in ("needed", "disabled", "findings")}
        data["parts"] = {p: {"schemes": s, "label": scheme_label(s)} for p, s in self.parts.items()}
        return data


def _check_moe(
    report: QuantReport,
    desc: Mapping[str, Any],
    mtp_desc: Mapping[str, Any],
    config: ModelConfig,
    mtp: bool,
) -> None:
    errors: dict[str, list[str]] = {}
    messages: dict[str, str] = {}
    for prefix in moe_prefixes(config, mtp):
        report.moe_layers_checked += 1
        try:
            # The MTP's layers are looked up in the mtp.* subset: same answer, and the expert
            # index modelslim_desc builds for an all-FLOAT layer covers ~10^3 keys, not 10^5.
            where = mtp_desc if prefix.startswith("mtp.") else desc
            if modelslim_desc.moe_layer_is_unquantized(where, prefix):
                report.moe_unquantized_layers.append(prefix)
        except ValueError as exc:
            code = _moe_error_code(str(exc))
            errors.setdefault(code, []).append(prefix)
            messages.setdefault(code, str(exc))
    for code, prefixes in errors.items():
        add(
            report.findings,
            code,
            BLOCKING,
            f"{len(prefixes)} MoE layer(s) fail SGLang's ModelSlim lookup, first: "
            f"{messages[code]}. Re-export the checkpoint with one supported scheme per layer",
            prefixes,
        )


def _need_patches(report: QuantReport, mtp: bool) -> None:
    """The patches this checkpoint needs and what disabling them does. SGLang fails on an
    all-FLOAT MoE layer it looks up; the draft's is looked up only without mtp-modelslim-unquant,
    so a FLOAT MTP fails only when both patches are off."""
    main_float = [p for p in report.moe_unquantized_layers if not p.startswith("mtp.")]
    mtp_float = [p for p in report.moe_unquantized_layers if p.startswith("mtp.")]
    off = set(report.disabled)
    env = registry.ENV_DISABLE
    if main_float:
        report.needed[MOE_FALLBACK] = (
            f"{len(main_float)} main-model MoE layer(s) are all FLOAT (first {main_float[0]})"
        )
        if MOE_FALLBACK in off:
            add(
                report.findings,
                "patch-disabled",
                BLOCKING,
                f"main-model MoE layers are all FLOAT and {env} disables {MOE_FALLBACK}; "
                f"SGLang {SGLANG_VERSION} raises at startup. Remove {MOE_FALLBACK} from {env}",
                [MOE_FALLBACK],
            )
    if not (mtp and report.mtp_all_float):
        return
    report.needed[MTP_UNQUANT] = "every mtp.* entry is FLOAT: the draft must load unquantized"
    if mtp_float:
        report.needed.setdefault(MOE_FALLBACK, f"the MTP's MoE layer {mtp_float[0]} is all FLOAT")
    if MTP_UNQUANT not in off:
        return
    if mtp_float and MOE_FALLBACK in off:
        add(
            report.findings,
            "patch-disabled",
            BLOCKING,
            f"{env} disables {MTP_UNQUANT} and {MOE_FALLBACK}: the FLOAT draft is built with "
            f"the ModelSlim config and SGLang {SGLANG_VERSION} raises 'Unsupported ModelSlim "
            f"MoE schemes for layer {mtp_float[0]}' at startup. Remove them from {env}, or "
            "start with MTP off",
            [MTP_UNQUANT, MOE_FALLBACK],
        )
        return
    add(
        report.findings,
        "patch-disabled",
        WARNING,
        f"{env} disables {MTP_UNQUANT}: the FLOAT draft still starts (its layers fall back to "
        "unquantized) but without the bf16 dispatch overrides. Remove it from "
        f"{env} unless you are bisecting",
        [MTP_UNQUANT],
    )


def analyze_quant(
    desc: Mapping[str, Any] | None,
    scan: DescriptionScan | None,
    config: ModelConfig,
    *,
    mtp: bool,
    disabled: list[str],
) -> QuantReport:
    """Summarise the description and find what would stop the engine."""
    if desc is None:
        return QuantReport(quantized=False, disabled=disabled)
    scan = scan or scan_description(desc)
    unknown_keys = scan.unknown
    quant_type = desc.get("model_quant_type")
    report = QuantReport(
        quantized=True,
        model_quant_type=quant_type if isinstance(quant_type, str) else None,
        tensor_keys=scan.tensor_keys,
        parts=scan.parts,
        disabled=disabled,
    )
    if unknown_keys:
        schemes = sorted({str(desc[k]) for k in unknown_keys})
        add(
            report.findings,
            "scheme-unknown",
            BLOCKING,
            f"{len(unknown_keys)} description key(s) use scheme(s) SGLang does not know "
            f"({', '.join(schemes)}); known: {', '.join(sorted(modelslim_desc.KNOWN_SCHEMES))}."
            " Re-export the checkpoint with a supported scheme",
            unknown_keys,
        )
    entries = modelslim_desc.mtp_entries(scan.mtp_candidates)
    report.mtp_entries = len(entries)
    report.mtp_all_float = modelslim_desc.mtp_is_all_float(entries) if entries else None
    if mtp and config.has_mtp and not entries:
        add(
            report.findings,
            "mtp-not-described",
            BLOCKING,
            f"config.json declares {config.mtp_num_hidden_layers} MTP layer(s) but the "
            "description has no mtp.* entry; the draft's weights are missing from this "
            "export. Re-export with the MTP, or start with MTP off (--no-mtp)",
        )
    elif mtp and entries and not report.mtp_all_float:
        kinds = sorted({str(v) for v in entries.values()})
        add(
            report.findings,
            "mtp-quantized",
            INFO,
            f"the MTP is quantized ({', '.join(kinds)}); it loads with the target's ModelSlim "
            "config, no MTP patch needed",
        )
    _check_moe(report, desc, scan.mtp_candidates, config, mtp)
    _need_patches(report, mtp)
    return report


def ub_needs_patch(config: ModelConfig) -> bool:
    """True when sgl-kernel-npu's default h_block_size overflows the UB for this state shape."""
    if not config.has_gdn:
        return False
    assert config.linear_value_head_dim is not None and config.linear_key_head_dim is not None
    best = ub_plan.plan(
        config.linear_value_head_dim, config.linear_key_head_dim, config.mamba_ssm_dtype
    )
    return best.h_block_size < KERNEL_DEFAULT_H_BLOCK_SIZE
