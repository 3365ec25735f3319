"""The GDN state contract: who reads and writes the SSM state pool, in which order and dtype.

Why this exists: on Ascend the SSM state of Qwen3.5/3.6's GDN layers is held by SGLang's pool and
read or written by four pieces of code from two projects; with ``V == K == 128`` a piece that
disagrees on the order never crashes, and a dtype a chip's op cannot take garbles or fails. So each
link (registry.GDN_CONTRACT) gets ``pass``, ``fail`` or ``unknown`` with its evidence (file:line
and what was read; docs/patches.md, the GDN state contract). Nothing here raises.
"""

from __future__ import annotations

import ast
import inspect
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from qwen_npu.checkpoint import model_config
from qwen_npu.hardware import chips
from qwen_npu.log import PartLog
from qwen_npu.patches import modes
from qwen_npu.patches.core import OUTCOMES, swapped
from qwen_npu.patches.registry import CONTRACT_VERDICTS, GDN_CONTRACT
from qwen_npu.patches.state import write_gdn_contract
from qwen_npu.upstream import kernels, source
from qwen_npu.upstream.kernels import K_MAJOR, V_MAJOR

log = PartLog("patches")

PASS, FAIL, UNKNOWN = CONTRACT_VERDICTS
DECODE_PATCH = "gdn-decode-state-layout"

BACKEND_FILE = "srt/hardware_backend/npu/attention/ascend_gdn_backend.py"
BACKEND_CLASS = "AscendGDNAttnBackend"
CHUNK_OP = "torch.ops.npu.chunk_gated_delta_rule"
VERIFY_OP = "torch.ops.npu.recurrent_gated_delta_rule"
MOVER_FILE = "mamba/mamba_state_update_triton.py"
DECODE_FILE = "fla/fused_sigmoid_gating_recurrent_decode_optimized.py"
#: The name SGLang 0.5.23 imports from DECODE_FILE (gdn_triton.py, under is_npu()).
DECODE_WRAPPER = "fused_sigmoid_gating_delta_rule_update_decode_npu"

#: The tiny pool: V != K, so V-major and K-major differ in the strides.
POOL_HEADS, POOL_V, POOL_K = 2, 4, 8


@dataclass(frozen=True)
class Verdict:
    verdict: str
    evidence: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Pool:
    order: str  # of the temporal state's (V, K) plane: V_MAJOR or K_MAJOR
    contiguous: bool


@dataclass
class Sources:
    """What the check reads: the engine's by default."""

    sglang_dir: Path | None = field(default_factory=lambda: source.package_dir("sglang"))
    kernel_dir: Path | None = field(default_factory=lambda: source.package_dir("sgl_kernel_npu"))
    #: () -> (temporal, intermediate, conv list, source file:line); SGLang's MambaPool by default.
    build_pool: Callable[[], tuple[Any, Any, list[Any], str]] | None = None
    argv: Sequence[str] = field(default_factory=lambda: list(sys.argv))
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    #: The decode patch's state in this process (None: take it from core.OUTCOMES).
    decode_patch: str | None = None


def sglang_mamba_pool(
    *,
    heads: int,
    v: int,
    k: int,
    ssm_dtype: Any,
    size: int,
    draft: int | None,
    conv_kernel: int = 4,
) -> Any:
    """SGLang's real MambaPool for one GDN layer of ``heads`` value heads (one key head) and a
    ``V x K`` state, allocated on CPU by its NPU branch (``memory_pool._is_npu`` set while it is
    built); with ``draft`` the speculative buffers are there too."""
    # lazy: the .pth hook runs in every engine process: SGLang loads when a check reads it
    import torch
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape
    from sglang.srt.mem_cache import memory_pool

    shape = Mamba2StateShape.create(
        tp_world_size=1,
        intermediate_size=heads * v,
        n_groups=1,
        num_heads=heads,
        head_dim=v,
        state_size=k,
        conv_kernel=conv_kernel,
    )
    params = Mamba2CacheParams(
        shape=shape, layers=[0], dtype=Mamba2StateDType(conv=torch.bfloat16, temporal=ssm_dtype)
    )
    logger = logging.getLogger(memory_pool.__name__)
    level = logger.level
    logger.setLevel(logging.WARNING)  # "Mamba Cache is allocated" would read like the real pool
    try:
        with swapped(memory_pool, _is_npu=True):
            return memory_pool.MambaPool(
                size=size,
                spec_state_size=size,
                cache_params=params,
                mamba_layer_ids=[0],
                device="cpu",
                speculative_num_draft_tokens=draft,
                speculative_eagle_topk=None if draft is None else 1,
            )
    finally:
        logger.setLevel(level)


def build_sglang_pool() -> tuple[Any, Any, list[Any], str]:
    """The tiny pool of the check (V != K), with its speculative buffers, and where it is made."""

    # lazy: the .pth hook runs in every engine process: SGLang loads when a check reads it
    import torch
    from sglang.srt.mem_cache import memory_pool

    cache = sglang_mamba_pool(
        heads=POOL_HEADS, v=POOL_V, k=POOL_K, ssm_dtype=torch.bfloat16, size=2, draft=3
    ).mamba_cache
    lines, first = inspect.getsourcelines(memory_pool.MambaPool.__init__)
    at = next(
        (first + i for i, s in enumerate(lines) if "temporal_state = torch.zeros" in s), first
    )
    where = f"{_short(inspect.getsourcefile(memory_pool.MambaPool))}:{at}"
    return cache.temporal, cache.intermediate_ssm, list(cache.conv), where


def _short(path: str | os.PathLike[str] | None) -> str:
    """A path from its ``sglang/`` or ``sgl_kernel_npu/`` folder on (what a reader can find)."""
    text = str(path)
    for anchor in ("/tests/", "/sglang/", "/sgl_kernel_npu/"):
        if anchor in text:
            return anchor.strip("/") + "/" + text.split(anchor, 1)[1]
    return text


def _order(tensor: Any) -> str | None:
    """V-major or K-major from a state's shape and strides (V != K, so both are visible).
    Labelled ``[..., V, K]``, the strides say it (``K, 1`` V-major, ``1, V`` K-major); labelled
    ``[..., K, V]`` (SGLang before #39589: a transpose view or a dense K-major tensor), K-major,
    since whatever indexes the pool through it reads and writes the state as ``[k][v]``."""
    return {
        ((POOL_V, POOL_K), (POOL_K, 1)): V_MAJOR,
        ((POOL_V, POOL_K), (1, POOL_V)): K_MAJOR,
        ((POOL_K, POOL_V), (POOL_V, 1)): K_MAJOR,  # a dense K-major tensor
        ((POOL_K, POOL_V), (1, POOL_K)): K_MAJOR,  # a transpose view
    }.get((tuple(tensor.shape[-2:]), tuple(tensor.stride()[-2:])))


def pool_layout(sources: Sources) -> tuple[Verdict, Pool | None]:
    build = sources.build_pool or build_sglang_pool
    try:
        temporal, intermediate, conv, where = build()
    except Exception as exc:
        return Verdict(UNKNOWN, f"SGLang's MambaPool could not be built: {_error(exc)}"), None
    label = f"(L, S, HV={POOL_HEADS}, V={POOL_V}, K={POOL_K}) or its [.., K, V] view"
    facts = (
        f"temporal {list(temporal.shape)} strides {list(temporal.stride())}, intermediate "
        f"{list(intermediate.shape)} strides {list(intermediate.stride())}, conv "
        f"{[list(c.shape) for c in conv]}"
    )
    order, spec_order = _order(temporal), _order(intermediate)
    if order is None or spec_order is None or len(temporal.shape) != 5:
        return Verdict(UNKNOWN, f"{where}: unexpected pool shape, not {label}: {facts}"), None
    pool = Pool(order, bool(temporal.is_contiguous()))
    dense = all(t.is_contiguous() for t in (temporal, intermediate, *conv))
    built = f"{where}: built in its NPU configuration: {facts}"
    if dense and order == spec_order == V_MAJOR:
        return Verdict(PASS, f"{built}: contiguous, V-major, no transpose view"), pool
    view = " (labelled [.., HV, K, V])" if tuple(temporal.shape[-2:]) == (POOL_K, POOL_V) else ""
    return Verdict(
        FAIL,
        f"{built}: temporal {order}{view}, intermediate {spec_order}, contiguous={dense}: a "
        "transpose view (SGLang before #39589); the AscendC ops read raw memory V-major",
    ), pool


def _backend_calls(sources: Sources) -> tuple[list[tuple[int, str]], str] | str:
    """Every call in AscendGDNAttnBackend as (line, callee), and the file; or why not."""
    if sources.sglang_dir is None:
        return "no sglang package on sys.path"
    path = sources.sglang_dir / BACKEND_FILE
    tree = source.parse(path)
    if isinstance(tree, str):
        return f"{_short(path)}: {tree}"
    cls = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == BACKEND_CLASS), None
    )
    if cls is None:
        return f"{_short(path)}: no class {BACKEND_CLASS}"
    return [(call.lineno, callee) for callee, call in source.calls(cls)], _short(path)


def _against_pool(name: str, order: str, where: str, pool: Pool | None, pair: str) -> Verdict:
    if pool is None:
        return Verdict(UNKNOWN, f"{where}: {name} ({order}); the pool's order is unknown")
    if pool.order == order:
        return Verdict(PASS, f"{where}: {name} ({order}), the pool is {pool.order}")
    return Verdict(FAIL, f"{where}: {name} ({order}) against a {pool.order} pool: {pair}")


#: A GDN op the backend may call: (callee suffixes, what it is, the state order it reads, what
#: goes wrong against a pool of the other order).
Op = tuple[tuple[str, ...], str, str, str]
TRANSPOSED = "the state is read transposed"
ASCEND_CHUNK: Op = (
    (CHUNK_OP,),
    "the AscendC chunk op: state (B, Nv, Dv, Dk) dense",
    V_MAJOR,
    TRANSPOSED,
)
TRITON_CHUNK: Op = (
    ("chunk_gated_delta_rule", "chunk_gated_delta_rule_npu"),
    "a Triton chunk kernel (sgl-kernel-npu fla/chunk.py)",
    K_MAJOR,
    "SGLang #40398's pair: a V-major pool prefilled K-major garbles from the 2nd token",
)
ASCEND_VERIFY: Op = (
    (VERIFY_OP,),
    "the AscendC verify op: raw pointer, bf16 state only",
    V_MAJOR,
    TRANSPOSED,
)


def _first_op(sources: Sources, pool: Pool | None, ops: list[Op], none: str) -> Verdict:
    """The first op (in order) that a backend call names, judged against the pool."""
    found = _backend_calls(sources)
    if isinstance(found, str):
        return Verdict(UNKNOWN, found)
    calls, path = found
    for suffixes, what, order, pair in ops:
        for line, callee in calls:
            if callee.endswith(suffixes):
                where = f"{path}:{line}"
                return _against_pool(f"{callee}, {what}", order, where, pool, pair)
    return Verdict(UNKNOWN, f"{path}: {BACKEND_CLASS} calls no {none}")


def prefill_op(sources: Sources, pool: Pool | None) -> Verdict:
    return _first_op(sources, pool, [ASCEND_CHUNK, TRITON_CHUNK], f"chunk op ({CHUNK_OP})")


def verify_op(sources: Sources, pool: Pool | None) -> Verdict:
    return _first_op(sources, pool, [ASCEND_VERIFY], f"verify op ({VERIFY_OP})")


def _kernel_reading(
    sources: Sources, relative: str, read: Callable[[str], kernels.Reading]
) -> tuple[kernels.Reading, str] | Verdict:
    """``read`` on sgl-kernel-npu's file ``relative``, and where (file:line); or why not."""
    if sources.kernel_dir is None:
        return Verdict(UNKNOWN, f"sgl_kernel_npu is not on sys.path: no {relative} to read")
    text = source.read(sources.kernel_dir / relative)
    if text is None:
        why = f"no sgl_kernel_npu/{relative} (sgl_kernel_npu found at {sources.kernel_dir})"
        return Verdict(UNKNOWN, why)
    reading, path = read(text), _short(sources.kernel_dir / relative)
    return reading, f"{path}:{reading.line}" if reading.line else path


def mover(sources: Sources, pool: Pool | None) -> Verdict:
    found = _kernel_reading(sources, MOVER_FILE, kernels.mover_strides)
    if isinstance(found, Verdict):
        return found
    reading, where = found
    said = f"{where}: {reading.reason}"
    if reading.verdict == kernels.SOURCE_ORDER:
        return Verdict(PASS, said)
    if reading.verdict != kernels.STRIDE_HONOURING:
        return Verdict(UNKNOWN, said)
    if pool is None:
        return Verdict(UNKNOWN, f"{said}; the pool's layout is unknown")
    if pool.contiguous:
        return Verdict(PASS, f"{said}; the pool is contiguous, so it equals a source-order copy")
    transposed = "into a transposed pool view: a second transpose (sgl-kernel-npu #748's pair)"
    return Verdict(FAIL, f"{said} {transposed}")


def decode_kernel(sources: Sources, pool: Pool | None) -> Verdict:
    found = _kernel_reading(
        sources, DECODE_FILE, lambda text: kernels.decode_addressing(text, DECODE_WRAPPER)
    )
    if isinstance(found, Verdict):
        return found
    reading, where = found
    if reading.verdict == UNKNOWN:
        return Verdict(UNKNOWN, f"{where}: {reading.reason}")
    said = f"{where}: {reading.reason} ({reading.verdict})"
    if pool is None:
        return Verdict(UNKNOWN, f"{said}; the pool's order is unknown")
    if reading.verdict == pool.order:
        return Verdict(PASS, f"{said}, the pool is {pool.order}")
    outcome = OUTCOMES.get(DECODE_PATCH)
    patch = sources.decode_patch or (outcome.state if outcome else "not applied in this process")
    against = f"{said} against a {pool.order} pool"
    if patch == "applied":
        copy = "the decode call hands the kernel a K-major copy"
        return Verdict(PASS, f"{against}; {DECODE_PATCH} is applied: {copy}")
    plain = "plain decode reads the state transposed"
    return Verdict(FAIL, f"{against} and {DECODE_PATCH} is {patch}: {plain}")


def ssm_dtype(sources: Sources, pool: Pool | None = None) -> Verdict:
    env = sources.environ
    argv = sources.argv
    raw_chip = env.get(chips.ENV_CHIP, "")
    chip = chips.chip_from_env(env)
    how = f"{chips.ENV_CHIP}={raw_chip!r}" if raw_chip else f"the default: {chips.ENV_CHIP} unset"
    chip_note = f"chip {chip} ({how})"
    if raw_chip and chips.normalise(raw_chip) is None:
        known = ", ".join(chips.CHIPS)
        return Verdict(UNKNOWN, f"{chips.ENV_CHIP}={raw_chip!r} names no chip we know ({known})")
    flag = modes.flag_value(argv, "--mamba-ssm-dtype")
    model = modes.flag_value(argv, "--model-path", "--model")
    dtype: str | None = None
    origin = ""
    missing = (
        f"no --mamba-ssm-dtype, no valid {model_config.SSM_DTYPE_ENV} and no --model-path to "
        "read config.json's mamba_ssm_dtype from"
    )
    try:
        if model is not None:
            try:
                config = model_config.read_model_config(model, mamba_ssm_dtype=flag, environ=env)
                dtype, origin = config.mamba_ssm_dtype, config.mamba_ssm_dtype_source
                if origin == "config":
                    origin = f"{_short(model_config.config_path(model))} mamba_ssm_dtype"
            except (model_config.ModelConfigError, OSError) as exc:
                missing = _error(exc)
        if dtype is None:
            if flag is None and env.get(model_config.SSM_DTYPE_ENV) not in model_config.SSM_DTYPES:
                return Verdict(UNKNOWN, missing)
            dtype, origin, _ = model_config.resolve_ssm_dtype(None, flag, env)
    except model_config.ModelConfigError as exc:
        return Verdict(UNKNOWN, _error(exc))
    names = {"flag": "--mamba-ssm-dtype", "env": model_config.SSM_DTYPE_ENV}
    where = names.get(origin, origin)
    said = f"{dtype} from {where}, {chip_note}"
    speculative = modes.flag_value(argv, "--speculative-algorithm") is not None
    problem = chips.ssm_state_problem(chip, dtype, mtp=speculative)
    if problem is not None:
        return Verdict(FAIL, f"{said}: {problem[1]}; pass --mamba-ssm-dtype bfloat16")
    mtp = "MTP on" if speculative else "no --speculative-algorithm"
    return Verdict(PASS, f"{said}, {mtp}: the prefill op takes it")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def check(sources: Sources | None = None) -> dict[str, Verdict]:
    """One verdict per link, in registry order. Never raises."""
    src = sources or Sources()
    results: dict[str, Verdict] = {}
    results["pool_layout"], pool = pool_layout(src)
    for link in GDN_CONTRACT:  # each other link's reader is the function of its name
        try:
            if link.name not in results:
                results[link.name] = globals()[link.name](src, pool)
        except Exception as exc:  # a reader's bug must not stop the engine
            results[link.name] = Verdict(UNKNOWN, f"the check failed: {_error(exc)}")
    return results


def as_json(verdicts: Mapping[str, Verdict]) -> dict[str, dict[str, str]]:
    return {name: v.as_dict() for name, v in verdicts.items()}


def strict_problems(
    verdicts: Mapping[str, Verdict], mode: modes.Mode | None = None
) -> tuple[list[str], list[str], list[str]]:
    """(links that fail ``--strict``, unknown links the ledger accepts, links that would fail but
    that ``mode`` does not run: ``modes.link_used``, a warning, not a failed start), by name."""
    failing, accepted, unused = [], [], []
    for link in GDN_CONTRACT:
        verdict = verdicts.get(link.name, Verdict(UNKNOWN, "not checked")).verdict
        bad = verdict == FAIL or (verdict == UNKNOWN and link.unknown_fails_strict)
        if not modes.link_used(link, mode):
            unused += [link.name] if bad else []
        elif bad:
            failing.append(link.name)
        elif verdict == UNKNOWN:
            accepted.append(link.name)
    return failing, accepted, unused


NEXT = {
    PASS: None,
    FAIL: "the state is read in another order or dtype than it is written: see docs/patches.md "
    "(the GDN state contract) and the runbook's garbled-output section",
    UNKNOWN: "the check could not read this link; the evidence says what is missing",
}
_LEVEL = {PASS: "info", FAIL: "error", UNKNOWN: "warning"}


def report(sources: Sources | None = None) -> dict[str, Verdict]:
    """Check, log one line per link, and write ``gdn_contract`` to the state file."""
    verdicts = check(sources)
    for name, v in verdicts.items():
        log(
            _LEVEL[v.verdict],
            "gdn_contract.link",
            link=name,
            verdict=v.verdict,
            evidence=v.evidence,
            pid=os.getpid(),
            next=NEXT[v.verdict],
        )
    write_gdn_contract(as_json(verdicts))
    return verdicts
