"""`make perf-patches`: what the patches cost, in out/perf/patches.md: the .pth hook's start-up time
between two throwaway venvs that differ only in it (goal < 2 ms); the fallback decision over a
397B-sized description (goal < 1 s); plain decode's memory traffic per GDN layer and step, copy
route vs in place, the model checked against the bytes Triton's CPU interpreter counts.
"""

from __future__ import annotations

import importlib
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fixtures.checkpoints import COMMON, SIZES
from fixtures.triton_interpreter import count_bytes, interpreter
from qwen_npu.checkpoint import modelslim_desc as md
from qwen_npu.patches.fixes import gdn_decode_state_layout as gdn
from tools import chart as chart_tool
from tools.paths import CHART_VALUES, REPO
from tools.perf.report import run

PTH = REPO / "qwen_npu" / "patches" / "qwen_npu_patches.pth"


def _venv(root: Path, with_hook: bool) -> Path:
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", root],
        check=True,
    )
    python = root / "bin" / "python"
    site_dir = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    if with_hook:
        shutil.copytree(
            REPO / "qwen_npu", site_dir / "qwen_npu", ignore=shutil.ignore_patterns("__pycache__")
        )
        shutil.copy(PTH, site_dir / PTH.name)
        # pip compiles a wheel's modules on install; do the same (PYTHONDONTWRITEBYTECODE may be
        # set in the calling environment).
        subprocess.run([python, "-m", "compileall", "-q", site_dir / "qwen_npu"], check=True)
    return python


def _time_once(python: Path) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", "pass"], check=True)
    return time.perf_counter() - start


def _hook_import_us(python: Path) -> int:
    err = subprocess.run(
        [python, "-X", "importtime", "-c", "pass"], check=True, capture_output=True, text=True
    ).stderr
    total = 0
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip().startswith("qwen_npu"):
            total += int(parts[0].split(":")[1])
    return total


def startup(runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="qwen-npu-perf-") as tmp:
        plain = _venv(Path(tmp) / "without", with_hook=False)
        hooked = _venv(Path(tmp) / "with", with_hook=True)
        check = subprocess.run(
            [hooked, "-c", "import sys; print(type(sys.meta_path[0]).__name__)"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if check != "PostImportFinder":
            raise SystemExit(f"perf-patches: the hook did not load in the test venv ({check})")
        for python in (plain, hooked, plain, hooked):  # warm caches, write .pyc files
            _time_once(python)
        without, with_ = [], []
        for _ in range(runs):
            without.append(_time_once(plain))
            with_.append(_time_once(hooked))
        imports = [_hook_import_us(hooked) for _ in range(max(5, runs // 10))]
    med_without, med_with = statistics.median(without), statistics.median(with_)
    return {
        "runs": runs,
        "without_ms": med_without * 1e3,
        "with_ms": med_with * 1e3,
        "added_ms": (med_with - med_without) * 1e3,
        "hook_import_ms": statistics.median(imports) / 1e3,
    }


def big_description() -> dict[str, str]:
    """Qwen3.5-397B-A17B-sized: 60 W8A8_DYNAMIC MoE layers of 512 experts, an all-FLOAT MTP."""
    desc: dict[str, str] = {"model_quant_type": "W8A8_DYNAMIC", "version": "1.0.0"}
    for layer in range(60):
        base = f"model.language_model.layers.{layer}"
        for e in range(512):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                desc[f"{base}.mlp.experts.{e}.{proj}.weight"] = "W8A8_DYNAMIC"
            desc[f"{base}.mlp.experts.{e}.gate_proj.weight_scale"] = "W8A8_DYNAMIC"
            desc[f"{base}.mlp.experts.{e}.down_proj.weight_scale"] = "W8A8_DYNAMIC"
        for name in ("shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"):
            desc[f"{base}.mlp.{name}.weight"] = "W8A8_DYNAMIC"
        for name in ("in_proj_qkvz", "in_proj_ba", "out_proj", "q_proj", "k_proj", "v_proj"):
            desc[f"{base}.linear_attn.{name}.weight"] = "W8A8_DYNAMIC"
    for e in range(512):
        for proj in ("gate_proj", "up_proj", "down_proj"):
            desc[f"mtp.layers.0.mlp.experts.{e}.{proj}.weight"] = "FLOAT"
    desc["mtp.fc.weight"] = "FLOAT"
    return desc


def decisions() -> dict[str, float]:
    desc = big_description()
    prefixes = [f"model.language_model.layers.{i}.mlp.experts" for i in range(60)]
    prefixes.append("mtp.layers.0.mlp.experts")
    md._index_cache = None  # a cold start, as in a fresh engine process
    times = [time.perf_counter()]
    answers = [md.moe_all_float(desc, p) for p in prefixes]
    times.append(time.perf_counter())
    raising = [md.moe_layer_is_unquantized(desc, p) for p in prefixes]
    times.append(time.perf_counter())
    mtp = md.mtp_is_all_float(desc)
    times.append(time.perf_counter())
    patch_s, preflight_s, mtp_s = (b - a for a, b in itertools.pairwise(times))
    if answers != [False] * 60 + [True] or raising != answers or not mtp:
        raise SystemExit("perf-patches: the synthetic description gave wrong answers")
    return {
        "keys": len(desc),
        "layers": len(prefixes),
        "patch_s": patch_s,
        "preflight_s": preflight_s,
        "mtp_s": mtp_s,
        "total_s": patch_s + preflight_s + mtp_s,
    }


#: model size (fixtures/checkpoints.py) -> chart profile (its TP and SSM dtype)
TRAFFIC_MODELS = {
    "35B-A3B": "qwen3.5-35b-a3b-w8a8.yaml",
    "397B-A17B": "qwen3.5-397b-a17b-w8a8.yaml",
}
TRAFFIC_BATCHES = (1, 32, 128)
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def _shape(size: str) -> dict[str, int]:
    """Per TP rank: key heads, value heads, V, K, GDN layers, state and activation itemsizes."""
    config = {**COMMON, **SIZES[size]}
    values = chart_tool.values_from(CHART_VALUES, chart_tool.PROFILES_DIR / TRAFFIC_MODELS[size])
    tp = int(values["engine"]["tpSize"])
    layers = int(config["num_hidden_layers"])
    return {
        "tp": tp,
        "heads": int(config["linear_num_key_heads"]) // tp,
        "value_heads": int(config["linear_num_value_heads"]) // tp,
        "v": int(config["linear_value_head_dim"]),
        "k": int(config["linear_key_head_dim"]),
        "gdn_layers": layers - layers // int(config["full_attention_interval"]),
        "state": ITEMSIZE[str(values["engine"]["mambaSsmDtype"])],
        "io": ITEMSIZE[str(values["engine"].get("dtype") or "bfloat16")],
    }


def _sizes(shape: dict[str, int]) -> dict[str, int]:
    """Itemsizes: activations and the layer's A_log/dt_bias in the model dtype, int32 indices."""
    io = shape["io"]
    return {"state": shape["state"], "q": io, "k": io, "v": io, "o": io, "a": io, "b": io,
            "A_log": io, "dt_bias": io, "indices": 4, "cu_seqlens": 4}  # fmt: skip


def _token_inputs(traffic: dict[str, int]) -> int:
    """q, k, a and b bytes of one step: their loads (a and b in ``gating``, beside A_log and
    dt_bias, one element each per tile) and the wrapper's copies of the split views."""
    return traffic["q"] + traffic["k"] + traffic["gating"] + traffic["view_copies"]


def traffic() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size in TRAFFIC_MODELS:
        shape = _shape(size)
        dims = {key: shape[key] for key in ("heads", "value_heads", "v", "k")}
        for batch in TRAFFIC_BATCHES:
            # SGLang's decode hands q, k, v, a and b as views of its packed projections
            copy, in_place = (
                gdn.decode_traffic(
                    route, batch=batch, sizes=_sizes(shape), split_views=True, **dims
                )
                for route in (gdn.COPY, gdn.IN_PLACE)
            )
            own_state = 2 * batch * shape["value_heads"] * shape["v"] * shape["k"] * shape["state"]
            rows.append({
                "model": size, "batch": batch, **shape,
                "copy": sum(copy.values()), "in_place": sum(in_place.values()),
                "in_place_state": in_place["state_read"] + in_place["state_write"],
                "own_state": own_state,
                "copy_token": _token_inputs(copy), "in_place_token": _token_inputs(in_place),
            })  # fmt: skip
    return rows


def traffic_check() -> str:
    """The in-place kernel's bytes under Triton's interpreter vs the model: a 35B-shaped batch
    of 3 (one padded slot), 128x128 bf16 states."""

    # lazy: the engine's stack (torch, SGLang), not the base install's
    import torch

    shape = _shape("35B-A3B")
    heads, value_heads, v, k = shape["heads"], shape["value_heads"], shape["v"], shape["k"]
    sys.modules.pop(gdn.V_MAJOR_MODULE, None)
    with interpreter():
        kernel = getattr(importlib.import_module(gdn.V_MAJOR_MODULE), gdn.V_MAJOR_KERNEL)
        g = torch.Generator().manual_seed(0)
        n = 3
        shapes = {"state": (n + 2, value_heads, v, k), "q": (1, n, heads, k), "k": (1, n, heads, k),
                  "v": (1, n, value_heads, v), "a": (n, value_heads), "b": (n, value_heads),
                  "A_log": (value_heads,), "dt_bias": (value_heads,)}  # fmt: skip
        t = {
            name: torch.randn(*dims, generator=g).to(torch.bfloat16)
            for name, dims in shapes.items()
        }
        t["indices"] = torch.tensor([3, -1, 1], dtype=torch.int32)
        t["cu_seqlens"] = torch.arange(n + 1, dtype=torch.int32)
        with count_bytes(t) as got:
            kernel(t["A_log"], t["a"], t["dt_bias"], 1.0, 20.0, t["q"], t["k"], t["v"], t["b"],
                   t["state"], t["indices"], cu_seqlens=t["cu_seqlens"],
                   use_qk_l2norm_in_kernel=True)  # fmt: skip
    model = gdn.decode_traffic(gdn.IN_PLACE, batch=n, heads=heads, value_heads=value_heads, v=v,
                               k=k, sizes=_sizes(shape), stored=2)  # fmt: skip
    counted = {
        "state_read": got["state:load"], "state_write": got["state:store"],
        "q": got["q:load"], "k": got["k:load"], "v": got["v:load"], "o": got["other:store"],
        "gating": sum(got[f"{x}:load"] for x in ("a", "b", "A_log", "dt_bias")),
        "indices": got["indices:load"] + got["cu_seqlens:load"], "copies": 0, "view_copies": 0,
    }  # fmt: skip
    if counted != model:
        raise SystemExit(f"perf-patches: the traffic model {model} != the interpreter's {counted}")
    return f"equal ({sum(counted.values()):,} B for batch {n}, one slot padded)"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def traffic_report(rows: list[dict[str, Any]], checked: str) -> list[str]:
    lines = [
        "",
        "## Plain decode (MTP off): memory traffic per GDN layer and step",
        "",
        "`gdn-decode-state-layout`'s two routes (`patches.gdnDecodeRoute`), from the kernels' "
        "loads and stores (`decode_traffic`); per TP rank, 128x128 states, bf16.",
        "",
        "| model (TP) | batch | copy route | in place | in place / copy | in-place state vs "
        "the kernel's own 2 x N x HV x V x K x itemsize | q, k, a, b (with A_log, dt_bias) "
        "in place / copy route | per step in place / copy (x GDN layers) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["in_place"] / r["copy"]
        same = r["in_place_state"] == r["own_state"]
        layers = r["gdn_layers"]
        lines.append(
            f"| {r['model']} (TP {r['tp']}: {r['value_heads']} value heads, {r['heads']} key) "
            f"| {r['batch']} | {_mib(r['copy'])} | {_mib(r['in_place'])} | {ratio:.3f} "
            f"{'PASS' if ratio <= 0.25 else 'MISS'} | {_mib(r['in_place_state'])} "
            f"{'= PASS' if same else '!= MISS'} | "
            f"{r['in_place_token']:,} B / {r['copy_token']:,} B | "
            f"{_mib(r['in_place'] * layers)} / {_mib(r['copy'] * layers)} "
            f"({layers}) |"
        )
    lines += [
        "",
        "Model vs Triton's interpreter (the in-place kernel's counted loads and stores): "
        f"{checked}.",
        "q, k, a, b: the in-place kernel loads q and k once per (request, head) where the "
        "replaced kernel loads them per V block (2 at V = 128), and reads SGLang's split views "
        "of q, k, v, a and b in place where the replaced wrapper copies them (read + write); "
        "v, o and the gating scalars are the same on both routes. Bytes, not time: TPOT "
        "before/after is for the target.",
        "",
    ]
    return lines


def report() -> list[str]:
    s, d = startup(int(os.environ.get("PERF_RUNS", "200"))), decisions()

    def ok(flag: bool) -> str:
        return "PASS" if flag else "MISS"

    return [
        "# perf-patches",
        "",
        "Command: `make perf-patches` (tools/perf/patches.py).",
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| `python -c pass` without the hook (median of {s['runs']}) | "
        f"{s['without_ms']:.2f} ms | |",
        f"| `python -c pass` with the .pth hook (median of {s['runs']}) | "
        f"{s['with_ms']:.2f} ms | |",
        f"| added start-up time (difference of medians) | {s['added_ms']:.2f} ms | "
        f"< 2 ms {ok(s['added_ms'] < 2)} |",
        f"| the hook's own import time (`-X importtime`, median) | "
        f"{s['hook_import_ms']:.3f} ms | < 2 ms {ok(s['hook_import_ms'] < 2)} |",
        f"| description size | {d['keys']:,} keys | ~150k |",
        f"| fallback decision, {d['layers']} MoE layers (cold, builds the index) | "
        f"{d['patch_s'] * 1e3:.1f} ms | |",
        f"| preflight's raising variant, {d['layers']} layers | "
        f"{d['preflight_s'] * 1e3:.1f} ms | |",
        f"| MTP all-FLOAT question | {d['mtp_s'] * 1e3:.1f} ms | |",
        f"| decision time in total | {d['total_s'] * 1e3:.1f} ms | < 1 s {ok(d['total_s'] < 1)} |",
        "",
        "The start-up difference is measured with subprocesses on a shared machine; the "
        "import-time figure is the hook's own cost without process-start noise.",
        *traffic_report(traffic(), traffic_check()),
    ]


if __name__ == "__main__":
    raise SystemExit(run("patches", report))
