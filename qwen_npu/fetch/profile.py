"""What fetch's closing preflight judges: the engine a chart profile deploys (issue 40).

The checkpoints say ``mamba_ssm_dtype: float32`` and the chart passes ``bfloat16``, so judging the
bare checkpoint failed every download. The package cannot render the chart: this reads the values
the template reads, coalesced as ``helm -f PROFILE`` does, and tests/fetch/test_profile.py holds
it equal, for every profile, to preflight's reading of the rendered init container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from qwen_npu.cli_parser import EXIT_BAD_INPUT
from qwen_npu.fetch.source import FetchError
from qwen_npu.hardware import chips
from qwen_npu.preflight import Options

#: The SSM state dtype the chart's default values render (``engine.mambaSsmDtype``), the one every
#: chip's GDN ops take; a test holds it equal to the chart's default render.
CHART_DEFAULT_SSM_DTYPE = chips.SAFE_SSM_DTYPE


def default_options(tp: int | None) -> Options:
    """Without a profile: the checkpoint as the chart's default deployment would run it."""
    return Options(tp=tp, mamba_ssm_dtype=CHART_DEFAULT_SSM_DTYPE)


def _load(path: Path) -> dict[str, Any]:
    try:
        # lazy: an extra's (pyproject.toml); the base install goes without
        import yaml
    except ImportError:
        raise FetchError(
            "--profile needs pyyaml: pip install 'qwen-npu[fetch]'", EXIT_BAD_INPUT
        ) from None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FetchError(
            f"--profile {path}: cannot read it ({exc.strerror or exc}); pass a chart profile "
            "file (helm/qwen-npu/profiles/<name>.yaml)",
            EXIT_BAD_INPUT,
        ) from None
    except (yaml.YAMLError, UnicodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise FetchError(
            f"--profile {path}: not valid YAML{at}; fix the file or pass --tp",
            EXIT_BAD_INPUT,
        ) from None
    if not isinstance(data, dict | None):
        raise FetchError(
            f"--profile {path}: a chart profile is a mapping of values, not a "
            f"{type(data).__name__}; pass helm/qwen-npu/profiles/<name>.yaml",
            EXIT_BAD_INPUT,
        )
    return data or {}


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of maps: ``override`` wins, lists are replaced."""
    out = dict(base)
    for key, value in override.items():
        old = out.get(key)
        out[key] = (
            _merge(old, value) if isinstance(value, dict) and isinstance(old, dict) else value
        )
    return out


def chart_values(profile: Path) -> dict[str, Any]:
    """``profile`` over its chart's values.yaml (the nearest folder above with a Chart.yaml)."""
    values = _load(profile)
    for folder in profile.absolute().parents:
        if (folder / "Chart.yaml").is_file() and (folder / "values.yaml").is_file():
            return _merge(_load(folder / "values.yaml"), values)
    return values


def _get(values: Mapping[str, Any], key: str) -> Any:
    node: Any = values
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def profile_options(profile: Path) -> Options:
    """The preflight options of the engine the chart deploys from ``profile``."""
    values = chart_values(profile)

    def number(key: str, kind: type[int] | type[float]) -> Any:
        value = _get(values, key)
        if value is None:
            return None
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise FetchError(
                f"--profile {profile}: {key} is {value!r}, not a number; fix it or pass --tp",
                EXIT_BAD_INPUT,
            ) from None
        if number <= 0:
            raise FetchError(
                f"--profile {profile}: {key} is {value!r}; it must be above 0", EXIT_BAD_INPUT
            )
        return number

    tp = number("engine.tpSize", int)
    if tp is None:
        raise FetchError(
            f"--profile {profile}: no engine.tpSize (in it or its chart's values.yaml); pass a "
            "chart profile (helm/qwen-npu/profiles/<name>.yaml) or --tp",
            EXIT_BAD_INPUT,
        )

    def text(key: str) -> str | None:
        return str(_get(values, key) or "") or None

    mtp = bool(_get(values, "mtp.enabled")) if _get(values, "mtp") is not None else True
    dtype = _get(values, "engine.mambaSsmDtype")
    return replace(
        default_options(tp),
        mtp=mtp,
        # the chart renders no --mamba-ssm-dtype for an empty value: the checkpoint's own then
        mamba_ssm_dtype=(str(dtype) or None) if dtype is not None else CHART_DEFAULT_SSM_DTYPE,
        mem_fraction_static=number("engine.memFractionStatic", float) or 0.8,
        npu_memory_gb=number("preflight.npuMemoryGb", float) or Options.npu_memory_gb,
        chip=chips.normalise(text("npu.chip") or "") or chips.DEFAULT_CHIP,
        quantization=text("engine.quantization"),
        num_draft_tokens=number("mtp.numDraftTokens", int) if mtp else None,
        draft_quantization=text("mtp.draftQuantization") if mtp else None,
    )
