"""The candidate side of ``make sglang-candidate``, run inside the candidate's Python.

Why a separate process: the candidate SGLang is imported, patched and probed in its own venv, never
in the process that writes the report. Each patch is applied after its stand-ins are in place: the
released K-major decode kernel's for ``gdn-decode-state-layout`` (on CPU SGLang binds its own
V-major kernel, and the probe would say ``fixed`` on every release). Writes JSON for ``report``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from qwen_npu.checkpoint import model_config
from qwen_npu.log import PartLog
from qwen_npu.patches import gdn_contract, hook
from qwen_npu.patches.registry import PATCHES
from tools.candidate.sources import DECODE_NAME

DECODE_PATCH = "gdn-decode-state-layout"
RELEASED_KERNEL_MODULE = "qwen_npu_candidate_released_decode_kernel"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:400]


def _bind_released_decode_kernel(module: Any, kernel_file: Path) -> str:
    """Bind the K-major stand-in (loaded by path, under Triton's interpreter) in ``gdn_triton``."""
    os.environ["TRITON_INTERPRET"] = "1"  # read by triton.jit when the module is executed
    spec = importlib.util.spec_from_file_location(RELEASED_KERNEL_MODULE, kernel_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {kernel_file}")
    kernel_module = importlib.util.module_from_spec(spec)
    sys.modules[RELEASED_KERNEL_MODULE] = kernel_module  # the addressing reader looks it up
    spec.loader.exec_module(kernel_module)
    setattr(module, DECODE_NAME, getattr(kernel_module, gdn_contract.DECODE_WRAPPER))
    return f"the released sgl-kernel-npu decode kernel's stand-in ({kernel_file.name}, K-major)"


def patches(kernel_file: Path) -> dict[str, dict[str, Any]]:
    """Per patch: trigger imports, drift-guard state with the pinned PINS, the probe alone."""
    rows: dict[str, dict[str, Any]] = {}
    for info in PATCHES:
        row: dict[str, Any] = rows.setdefault(info.name, {"imports": "yes", "stand_in": None})
        loaded: list[Any] = []
        for name in hook.TRIGGERS[info.module]:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    loaded.append(importlib.import_module(name))
            except Exception as exc:
                row |= {
                    "imports": f"NO: {_error(exc)}",
                    "state": "target-missing",
                    "detail": f"cannot import {name}: {_error(exc)}",
                    "probe": "not run: the target does not import",
                }
                break
        if row["imports"] != "yes":
            continue
        patch = importlib.import_module(info.module)
        if info.name == DECODE_PATCH:
            try:
                row["stand_in"] = _bind_released_decode_kernel(loaded[0], kernel_file)
            except Exception as exc:
                row["stand_in"] = f"could not bind the decode kernel's stand-in: {_error(exc)}"
        try:  # before apply(): a probe may not see through its own patch's wrapper
            row["probe"] = patch._once.behaviour() or "inconclusive"
        except Exception as exc:
            row["probe"] = f"error: {_error(exc)}"
        outcome = patch.apply()
        row |= {"state": outcome.state, "detail": outcome.detail}
    return rows


#: (config.json's mamba_ssm_dtype, SGLANG_MAMBA_SSM_DTYPE): the orders and fallbacks to agree on.
SSM_CASES: tuple[tuple[str | None, str | None], ...] = (
    (None, None),
    ("float32", None),
    ("bfloat16", None),
    ("float32", "bfloat16"),
    ("bfloat16", "float32"),
    ("not-a-dtype", None),
    ("bfloat16", "not-a-dtype"),
)


def ssm_dtype_link() -> dict[str, str]:
    """SGLang's own ``mamba2_state_dtype`` against ``model_config.resolve_ssm_dtype`` (ours, which
    preflight and the contract's ssm_dtype link use) on each case; ``--mamba-ssm-dtype`` reaches
    SGLang as that variable (``handle_environment_variables``)."""
    name = model_config.SSM_DTYPE_ENV
    saved = os.environ.pop(name, None)
    try:
        from sglang.srt.configs import mamba_utils  # lazy: the engine's stack

        logging.getLogger(mamba_utils.__name__).disabled = True  # "Invalid mamba_ssm_dtype"
        disagree, said = [], []
        for config_value, env_value in SSM_CASES:
            env = {} if env_value is None else {name: env_value}
            os.environ.update(env)
            config = SimpleNamespace(mamba_ssm_dtype=config_value)
            theirs = str(mamba_utils.mamba2_state_dtype(config).temporal).removeprefix("torch.")
            os.environ.pop(name, None)
            ours, _, _ = model_config.resolve_ssm_dtype(config_value, None, env)
            said.append(f"config={config_value} env={env_value}: {theirs}")
            if theirs != ours:
                disagree.append(f"{said[-1]}, ours {ours}")
    except Exception as exc:
        return {"verdict": "unknown", "evidence": f"mamba2_state_dtype failed: {_error(exc)}"}
    finally:
        os.environ.pop(name, None)
        os.environ.update({} if saved is None else {name: saved})
    where = "sglang/srt/configs/mamba_utils.py: mamba2_state_dtype"
    if disagree:
        evidence = f"{where} resolves differently from ours: {'; '.join(disagree)}"
        return {"verdict": "fail", "evidence": evidence}
    evidence = f"{where} resolves as ours in {len(SSM_CASES)} cases ({'; '.join(said)})"
    return {"verdict": "pass", "evidence": evidence}


def collect(kernel_file: Path) -> dict[str, Any]:
    rows = patches(kernel_file)
    checked = gdn_contract.Sources(
        kernel_dir=None, argv=[], environ={}, decode_patch=rows[DECODE_PATCH]["state"]
    )
    links = gdn_contract.as_json(gdn_contract.check(checked)) | {"ssm_dtype": ssm_dtype_link()}
    try:
        import sglang  # lazy: the engine's stack

        sglang_dir = str(Path(sglang.__file__).parent)
    except Exception as exc:
        sglang_dir = f"not importable: {_error(exc)}"
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {
        "python": sys.version.split()[0],
        "sglang_version": version,
        "sglang_dir": sglang_dir,
        "patches": rows,
        "contract": links,
    }


if __name__ == "__main__":  # python -m tools.candidate.probe OUT_JSON DECODE_KERNEL_FILE (run's)
    PartLog("patches").logger().setLevel("CRITICAL")  # the JSON says what the log lines would
    out, kernel = map(Path, sys.argv[1:3])
    out.write_text(json.dumps(collect(kernel), indent=1) + "\n", encoding="utf-8")
