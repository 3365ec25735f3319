"""The candidate side of ``make sglang-candidate``: run inside the candidate's Python.

Why a separate process: the candidate SGLang is imported, patched and probed in its own venv (or
with its tree first on ``PYTHONPATH``), never in the process that writes the report, so nothing of
the installed SGLang leaks into the answer. The parent starts this with the start-up hook off
(``QWEN_NPU_PATCHES_HOOK=0``) and ``tests/stubs`` on the path, as ``make verify-patches`` does, so
each patch is applied here explicitly, after its stand-ins are in place:

- ``gdn-decode-state-layout``: on NPU, ``gdn_triton`` binds sgl-kernel-npu's K-major decode
  kernel (its ``is_npu()`` branch); on CPU it binds SGLang's own Triton kernel, which is V-major
  and would make the probe say ``fixed`` on every release. The released kernel's stand-in (the
  file the patch's tests use, ``--decode-kernel``, loaded by path: the package imports nothing of
  the checkout) is bound first, as those tests do;
- ``mamba-scatter-ub-aware``: the ``sgl_kernel_npu`` stand-in in ``tests/stubs``.

Prints (or writes with ``--out``) one JSON object: SGLang's version and folder, per patch the
trigger imports, the state the drift guard gives with the pinned ``PINS``, the behaviour probe
alone, and the contract links checked here (the pool, the prefill and verify ops, and SGLang's own
resolution of the SSM dtype against ours).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from qwen_npu.checkpoint import model_config
from qwen_npu.log import PartLog
from qwen_npu.patches import gdn_contract, hook
from qwen_npu.patches.registry import PATCHES

DECODE_PATCH = "gdn-decode-state-layout"
#: What gdn_triton calls the decode kernel (sgl-kernel-npu's wrapper, bound under is_npu()).
DECODE_NAME = "fused_sigmoid_gating_delta_rule_update"
RELEASED_KERNEL_MODULE = "qwen_npu_candidate_released_decode_kernel"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:400]


def _bind_released_decode_kernel(module: Any, kernel_file: Path) -> str:
    """Bind the K-major stand-in of sgl-kernel-npu's decode kernel (a file of the checkout's
    tests, loaded by path, under Triton's interpreter) in ``gdn_triton``."""

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
        row: dict[str, Any] = {"imports": [], "stand_in": None}
        loaded: list[Any] = []
        for name in hook.TRIGGERS[info.module]:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    loaded.append(importlib.import_module(name))
                row["imports"].append({"module": name, "ok": True, "error": None})
            except Exception as exc:
                row["imports"].append({"module": name, "ok": False, "error": _error(exc)})
        patch = importlib.import_module(info.module)
        if all(i["ok"] for i in row["imports"]):
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
            row |= {"state": outcome.state, "detail": outcome.detail, "active": patch.active()}
        else:
            failed = next(i for i in row["imports"] if not i["ok"])
            row |= {
                "state": "target-missing",
                "detail": f"cannot import {failed['module']}: {failed['error']}",
                "active": False,
                "probe": "not run: the target does not import",
            }
        rows[info.name] = row
    return rows


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


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

    try:
        # lazy: the engine's stack (torch, SGLang), not the base install's
        from sglang.srt.configs import mamba_utils
    except Exception as exc:
        return {"verdict": "unknown", "evidence": f"cannot import mamba_utils: {_error(exc)}"}
    logger = logging.getLogger(mamba_utils.__name__)
    disabled, logger.disabled = logger.disabled, True  # its "Invalid mamba_ssm_dtype" warnings
    disagree, said = [], []
    try:
        for config_value, env_value in SSM_CASES:
            config = SimpleNamespace(mamba_ssm_dtype=config_value)
            with _env(model_config.SSM_DTYPE_ENV, env_value):
                theirs = str(mamba_utils.mamba2_state_dtype(config).temporal).removeprefix("torch.")
            env = {} if env_value is None else {model_config.SSM_DTYPE_ENV: env_value}
            ours, _, _ = model_config.resolve_ssm_dtype(config_value, None, env)
            case = f"config={config_value} env={env_value}: {theirs}"
            said.append(case)
            if theirs != ours:
                disagree.append(f"{case}, ours {ours}")
    except Exception as exc:
        return {"verdict": "unknown", "evidence": f"mamba2_state_dtype failed: {_error(exc)}"}
    finally:
        logger.disabled = disabled
    where = "sglang/srt/configs/mamba_utils.py: mamba2_state_dtype"
    if disagree:
        return {
            "verdict": "fail",
            "evidence": f"{where} resolves differently from ours: {'; '.join(disagree)}",
        }
    return {
        "verdict": "pass",
        "evidence": f"{where} resolves as ours in {len(SSM_CASES)} cases ({'; '.join(said)})",
    }


def contract(decode_state: str) -> dict[str, dict[str, str]]:
    sources = gdn_contract.Sources(kernel_dir=None, argv=[], environ={}, decode_patch=decode_state)
    links = gdn_contract.as_json(gdn_contract.check(sources))
    links["ssm_dtype"] = ssm_dtype_link()
    return links


def collect(kernel_file: Path) -> dict[str, Any]:
    rows = patches(kernel_file)
    links = contract(rows[DECODE_PATCH]["state"])
    try:
        # lazy: the engine's stack (torch, SGLang), not the base install's
        import sglang

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.candidate.probe")
    parser.add_argument("--out", type=Path, help="write the JSON here (default: stdout)")
    parser.add_argument(
        "--decode-kernel",
        type=Path,
        required=True,
        help="the released decode kernel's stand-in (tests/patches/gdn_decode_kernel_template.py)",
    )
    args = parser.parse_args(argv)

    PartLog("patches").logger().setLevel("CRITICAL")  # the JSON says what the log lines would
    text = json.dumps(collect(args.decode_kernel), indent=1)
    if args.out is None:
        print(text)
    else:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
