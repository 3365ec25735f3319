"""The preflight rule engine: every check on a checkpoint, into the one report the CLI prints.

The init container, an engineer and the tests get the same verdict (``ready``,
``ready_with_patches``, ``would_fail``) and findings; ``Report.as_dict`` is the stable ``--json``
shape (docs/preflight.md). Preflight builds no command line: it judges the one the chart rendered.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from qwen_npu.checkpoint.model_config import SSM_DTYPE_ENV, ModelConfig
from qwen_npu.hardware import chips, driver
from qwen_npu.patches import registry
from qwen_npu.preflight import memory as mem
from qwen_npu.preflight import parallel, shards
from qwen_npu.preflight import quant as qnt
from qwen_npu.preflight.checkpoint import Checkpoint, InputError, load_checkpoint
from qwen_npu.preflight.engine_args import read_engine_args
from qwen_npu.preflight.findings import BLOCKING, INFO, WARNING, Finding, add

SCHEMA_VERSION = 1
READY = "ready"
READY_WITH_PATCHES = "ready_with_patches"
WOULD_FAIL = "would_fail"


@dataclass(frozen=True)
class Options:
    tp: int | None = None  # None: pick the smallest TP that is feasible and fits
    mtp: bool = True
    npu_memory_gb: float = 64.0
    mem_fraction_static: float = 0.8
    mamba_ssm_dtype: str | None = None
    check_shards: bool = False  # read every shard's safetensors header (slower, exact)
    chip: str = chips.DEFAULT_CHIP  # the target chip (its GDN ops decide the SSM state dtype)
    #: The engine's whole command line (after ``sglang.launch_server``) when preflight judges a
    #: rendered one; None when run by hand with its own flags.
    engine_args: tuple[str, ...] | None = None
    quantization: str | None = None  # the engine's --quantization (engine_args only)
    num_draft_tokens: int | None = None  # the engine's --speculative-num-draft-tokens
    draft_quantization: str | None = None  # its --speculative-draft-model-quantization

    @classmethod
    def from_engine_args(
        cls,
        engine_args: list[str],
        *,
        chip: str = chips.DEFAULT_CHIP,
        npu_memory_gb: float = 64.0,
        check_shards: bool = False,
    ) -> tuple[str, Options]:
        """(model dir, options) for judging the engine's own command line."""
        e = read_engine_args(engine_args)
        options = cls(
            tp=e.tp if e.tp is not None else 1,  # SGLang's default
            mtp=e.mtp,
            npu_memory_gb=npu_memory_gb,
            mem_fraction_static=e.mem_fraction_static or 0.8,
            mamba_ssm_dtype=e.mamba_ssm_dtype,
            check_shards=check_shards,
            chip=chip,
            engine_args=tuple(engine_args),
            quantization=e.quantization,
            num_draft_tokens=e.num_draft_tokens,
            draft_quantization=e.draft_quantization,
        )
        return e.model_path, options


@dataclass
class Report:
    checkpoint: Checkpoint
    options: Options
    tp: int
    tp_source: str
    tp_checks: list[parallel.TpCheck]
    quant: qnt.QuantReport
    memory: mem.MemoryEstimate
    memory_by_tp: dict[int, mem.MemoryEstimate]
    command: list[str] | None
    findings: list[Finding] = field(default_factory=list)

    @property
    def config(self) -> ModelConfig:
        return self.checkpoint.config

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == BLOCKING]

    @property
    def verdict(self) -> str:
        if self.blocking:
            return WOULD_FAIL
        return READY_WITH_PATCHES if self.quant.needed else READY

    @property
    def exit_code(self) -> int:
        return 1 if self.blocking else 0

    @property
    def chosen(self) -> parallel.TpCheck:
        return next(c for c in self.tp_checks if c.tp == self.tp)

    def as_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "schema_version": SCHEMA_VERSION,
            "model_dir": str(self.checkpoint.root),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "blocking": [f.as_dict() for f in self.blocking],
            "findings": [f.as_dict() for f in self.findings],
            "files": self.checkpoint.files_dict(),
            "model": c.as_dict(),
            "mtp": {
                "requested": self.options.mtp,
                "enabled": self.options.mtp and c.has_mtp,
                "layers": c.mtp_num_hidden_layers,
            },
            "quantization": self.quant.as_dict(),
            "patches": {
                "needed": sorted(self.quant.needed),
                "reasons": dict(sorted(self.quant.needed.items())),
                "disabled": sorted(self.quant.disabled),
            },
            "tp": {
                "tp": self.tp,
                "source": self.tp_source,
                "feasible": [t.tp for t in self.tp_checks if t.feasible],
                "candidates": [
                    {**t.as_dict(), "memory": self.memory_by_tp[t.tp].as_dict()}
                    for t in self.tp_checks
                ],
            },
            "ub_plan": self.chosen.ub.as_dict() if self.chosen.ub else None,
            "memory": self.memory.as_dict(),
            "chip": self.options.chip,
            "chart_values": self.chart_values,
            "command": self.command,
            "command_line": None if self.command is None else shlex.join(self.command),
        }

    @property
    def chart_values(self) -> dict[str, Any]:
        """The chart values that render the engine this verdict is for."""
        return {
            "npu.chip": self.options.chip,
            "engine.tpSize": self.tp,
            "engine.memFractionStatic": self.options.mem_fraction_static,
            "engine.mambaSsmDtype": self.config.mamba_ssm_dtype,
            "mtp.enabled": self.options.mtp and self.config.has_mtp,
        }


def _choose_tp(
    checks: list[parallel.TpCheck], mems: Mapping[int, mem.MemoryEstimate], asked: int | None
) -> tuple[int, str]:
    if asked is not None:
        return asked, "flag"
    fits = [c.tp for c in checks if c.feasible and mems[c.tp].fits]
    feasible = [c.tp for c in checks if c.feasible] or [checks[-1].tp]
    return (fits[0] if fits else feasible[-1]), "auto"


def _tp_findings(report: Report) -> None:
    feasible = ", ".join(str(t.tp) for t in report.tp_checks if t.feasible) or "none"
    for problem in report.chosen.problems:
        why = f"{problem}; SGLang asserts this while building the model. Feasible --tp-size"
        add(report.findings, "tp-indivisible", BLOCKING, f"{why} values: {feasible}")
    m = report.memory
    where = (
        f"{mem.gib(m.per_npu_bytes)} of weights per NPU at tp={m.tp} "
        f"(MTP {mem.gib(m.mtp_per_npu_bytes)}, from {m.source}) against "
        f"{mem.gib(m.budget_bytes)} ({m.npu_memory_gb:g} GiB x {m.mem_fraction_static:g})"
    )
    if not m.fits:
        bigger = [
            str(t.tp)
            for t in report.tp_checks
            if t.tp > m.tp and t.feasible and report.memory_by_tp[t.tp].fits
        ]
        fix = f"Use --tp-size {bigger[0]}" if bigger else "Use more NPUs or a smaller scheme"
        said = f"weights do not fit: {where}; the load would run out of memory. {fix}"
        add(report.findings, "memory-overflow", BLOCKING, f"{said}, or raise --mem-fraction-static")
    elif m.tight:
        left = f"only {mem.gib(m.headroom_bytes)} left for the KV cache and mamba state"
        more = "Expect few concurrent requests; a larger TP leaves more"
        add(report.findings, "memory-tight", WARNING, f"{left}: {where}. {more}")


def _mtp_and_ub_findings(report: Report) -> None:
    c, opts = report.config, report.options
    if opts.mtp and not c.has_mtp:
        add(
            report.findings,
            "mtp-absent",
            BLOCKING,
            "MTP requested but config.json has no mtp_num_hidden_layers; NEXTN has no draft. "
            "Start with MTP off (--no-mtp, chart value mtp.enabled=false)",
        )
        return
    if not c.has_gdn:
        add(
            report.findings,
            "gdn-fields-missing",
            WARNING,
            "config.json has no linear_num_value_heads/linear_num_key_heads/"
            "linear_value_head_dim/linear_key_head_dim: not a Qwen3.5/3.6 hybrid model? "
            "The GDN TP and UB checks were skipped",
        )
        return
    if not opts.mtp:
        return
    ub = report.chosen.ub
    if ub is not None and not ub.fits:
        add(
            report.findings,
            "ub-overflow",
            BLOCKING,
            f"one {c.linear_value_head_dim}x{c.linear_key_head_dim} {c.mamba_ssm_dtype} "
            f"state plane needs {ub.buffered_bytes} bytes buffered, more than the "
            f"{ub.ub_bytes}-byte UB; the MTP state scatter cannot fit at any h_block_size. "
            "Use --mamba-ssm-dtype bfloat16, or start with MTP off",
        )
        return
    if qnt.ub_needs_patch(c):
        need = qnt.UB_AWARE
        report.quant.needed[need] = (
            f"the kernel's default h_block_size={qnt.KERNEL_DEFAULT_H_BLOCK_SIZE} overflows the "
            f"UB for {c.mamba_ssm_dtype} {c.linear_value_head_dim}x{c.linear_key_head_dim} "
            f"states; the plan is h_block_size={ub.h_block_size if ub else 1}"
        )
        if need in report.quant.disabled:
            add(
                report.findings,
                "patch-disabled",
                BLOCKING,
                f"{registry.ENV_DISABLE} disables {need}; the first request (or graph "
                "capture) dies with 'ub overflow'. Remove it from "
                f"{registry.ENV_DISABLE}, use --mamba-ssm-dtype bfloat16, or turn MTP off",
                [need],
            )


_SSM_SOURCE = {
    "flag": "from --mamba-ssm-dtype",
    "env": f"from {SSM_DTYPE_ENV}",
    "config": "the checkpoint's own, from config.json mamba_ssm_dtype",
    "default": "SGLang's default, config.json names none",
}


def _ssm_state_findings(report: Report) -> None:
    """The SSM state dtype against the chip's GDN ops (qwen_npu.hardware.chips)."""
    c, opts = report.config, report.options
    if not c.has_gdn:
        return
    dtype = c.mamba_ssm_dtype
    where = f"SSM state {dtype} ({_SSM_SOURCE.get(c.mamba_ssm_dtype_source, '?')}) on {opts.chip}"
    safe = chips.SAFE_SSM_DTYPE
    fix = f"use --mamba-ssm-dtype {safe} (chart value engine.mambaSsmDtype={safe})"
    problem = chips.ssm_state_problem(opts.chip, dtype, mtp=opts.mtp and c.has_mtp)
    if problem is None:
        return
    op, why = problem
    if op == "prefill":
        add(report.findings, "ssm-dtype-unsupported", BLOCKING, f"{where}: {why}; {fix}")
        return
    # Where the prefill op takes fp32 (Ascend950) the verify op's source is bf16-only, but that
    # chip's build is not known here: a warning; the engine's start-up check refuses it.
    check = "the engine's start-up check (gdn_contract.ssm_dtype) will fail it"
    said = f"{where}: {why}; {check}: {fix} or turn MTP off (mtp.enabled=false)"
    add(report.findings, "ssm-dtype-verify", WARNING, said)


def _quantization_findings(report: Report) -> None:
    """The engine's --quantization against the checkpoint (only for a rendered command line)."""
    opts = report.options
    if opts.engine_args is None:
        return
    has_description = report.checkpoint.description is not None
    if has_description == (opts.quantization == "modelslim"):
        return
    said = (
        "the checkpoint has a ModelSlim quant_model_description.json but the engine runs "
        f"--quantization {opts.quantization or '(none)'}; set engine.quantization=modelslim"
        if has_description
        else "the engine runs --quantization modelslim but the checkpoint has no "
        'quant_model_description.json; set engine.quantization="" for an unquantized '
        "checkpoint, or copy the description"
    )
    add(report.findings, "quantization-flag", WARNING, said)


def run_preflight(
    model_dir: str | os.PathLike[str],
    options: Options | None = None,
    environ: Mapping[str, str] | None = None,
) -> Report:
    """Inspect ``model_dir``; raises checkpoint.InputError on bad input (exit 2)."""
    opts = options or Options()
    env = os.environ if environ is None else environ
    ckpt = load_checkpoint(model_dir, mamba_ssm_dtype=opts.mamba_ssm_dtype, environ=env)
    c = ckpt.config
    disabled, unknown = registry.disabled_patches(env)
    q = qnt.analyze_quant(
        ckpt.description, ckpt.description_scan, c, mtp=opts.mtp, disabled=disabled
    )
    measured: tuple[int, int] | None = None
    shard_findings = []
    if opts.check_shards and ckpt.index is not None:
        scanned = shards.scan(ckpt.root, ckpt.index["weight_map"], ckpt.shard_files)
        ckpt.shards_checked = True
        shard_findings = scanned.findings()
        if scanned.complete and scanned.tensor_bytes:
            measured = (sum(scanned.tensor_bytes.values()), scanned.mtp_bytes())
    tps = sorted({*parallel.CANDIDATE_TPS, *([opts.tp] if opts.tp else [])})
    checks = [parallel.check_tp(c, tp) for tp in tps]
    mems = {
        tp: mem.estimate(
            c,
            q.parts,
            ckpt.total_size,
            measured=measured,
            tp=tp,
            mtp=opts.mtp,
            npu_memory_gb=opts.npu_memory_gb,
            mem_fraction_static=opts.mem_fraction_static,
        )
        for tp in tps
    }
    tp, source = _choose_tp(checks, mems, opts.tp)
    report = Report(
        checkpoint=ckpt,
        options=opts,
        tp=tp,
        tp_source=source,
        tp_checks=checks,
        quant=q,
        memory=mems[tp],
        memory_by_tp=mems,
        command=None if opts.engine_args is None else list(opts.engine_args),
        findings=[*ckpt.findings, *shard_findings, *q.findings],
    )
    if unknown:
        add(
            report.findings,
            "patch-name-unknown",
            WARNING,
            f"{registry.ENV_DISABLE} names unknown patch(es) {', '.join(unknown)}; known: "
            f"{', '.join(registry.BY_NAME)}. Fix the spelling (chart value patches.disabled)",
            unknown,
        )
    if ckpt.description is None:
        said = "no quant_model_description.json: treated as an unquantized checkpoint (the engine"
        fix = 'needs no --quantization modelslim: chart value engine.quantization="")'
        add(report.findings, "not-modelslim", INFO, f"{said} {fix}")
    _tp_findings(report)
    _ssm_state_findings(report)
    _quantization_findings(report)
    _mtp_and_ub_findings(report)
    _draft_token_findings(report)
    _driver_findings(report, env)
    return report


def _draft_token_findings(report: Report) -> None:
    opts = report.options
    if opts.mtp and opts.draft_quantization == "unquant" and report.quant.mtp_all_float is False:
        add(
            report.findings,
            "draft-unquant-quantized-mtp",
            BLOCKING,
            "--speculative-draft-model-quantization unquant builds the MTP draft without any "
            "quant config, but this checkpoint's mtp.* entries are quantized: the draft's "
            'weights would not load. Set mtp.draftQuantization to "" (the draft then '
            "inherits --quantization modelslim)",
        )
    drafts, limit = opts.num_draft_tokens, chips.VERIFY_MAX_DRAFT_TOKENS
    if report.options.mtp and drafts is not None and drafts > limit:
        over = f"--speculative-num-draft-tokens {drafts} is more than the AscendC verify op's"
        fix = f"Set mtp.numDraftTokens to {limit} or fewer"
        said = f"{over} {limit} (MAX_MTP): its buffers overrun at the first verify. {fix}"
        add(report.findings, "draft-tokens-over-limit", BLOCKING, said)


def _driver_findings(report: Report, env: Mapping[str, str]) -> None:
    """The node's driver against the image's HDK minimum (hardware/driver.py)."""
    try:
        result = driver.check(env)
    except ValueError as exc:
        raise InputError(f"{exc}; it is the engine image's, set from docker/versions.env") from exc
    if result.state == driver.UNSUPPORTED:
        add(report.findings, "driver-unsupported", BLOCKING, result.message)
    elif result.state == driver.UNKNOWN:
        add(report.findings, "driver-not-checked", INFO, result.message)
