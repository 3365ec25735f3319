"""`make perf-patches`: what the patches cost. Writes out/perf/patches.md and prints it.

1. Start-up: the .pth hook's added time for ``python -c pass``. Two throwaway venvs from the same
   base interpreter, identical except that one has qwen_npu and ``qwen_npu_patches.pth`` in its
   site-packages (as a wheel install puts them); runs are interleaved, the median of each is taken.
   ``-X importtime`` gives the hook's own import time as a second, noise-free figure. Goal < 2 ms.
2. Decision time over a 397B-sized synthetic description (60 layers x 512 experts, ~155k keys):
   the patch's fallback decision for every MoE layer (60 + the MTP layer, first call building the
   per-description index), the preflight's raising variant, and the MTP question. Goal < 1 s.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.paths import REPO

PTH = REPO / "qwen_npu" / "patches" / "qwen_npu_patches.pth"


def _venv(root: Path, with_hook: bool) -> Path:
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", root],
        check=True,
    )
    python = root / "bin" / "python"
    site_dir = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
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
    from qwen_npu.checkpoint import modelslim_desc as md

    desc = big_description()
    prefixes = [f"model.language_model.layers.{i}.mlp.experts" for i in range(60)]
    prefixes.append("mtp.layers.0.mlp.experts")
    md._index_cache = None  # a cold start, as in a fresh engine process
    start = time.perf_counter()
    answers = [md.moe_all_float(desc, p) for p in prefixes]
    patch_s = time.perf_counter() - start
    start = time.perf_counter()
    raising = [md.moe_layer_is_unquantized(desc, p) for p in prefixes]
    preflight_s = time.perf_counter() - start
    start = time.perf_counter()
    mtp = md.mtp_is_all_float(desc)
    mtp_s = time.perf_counter() - start
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


def report(s: dict[str, float], d: dict[str, float]) -> str:
    def ok(flag: bool) -> str:
        return "PASS" if flag else "MISS"

    return "\n".join(
        [
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
            f"| decision time in total | {d['total_s'] * 1e3:.1f} ms | "
            f"< 1 s {ok(d['total_s'] < 1)} |",
            "",
            "The start-up difference is measured with subprocesses on a shared machine; the "
            "import-time figure is the hook's own cost without process-start noise.",
            "",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "perf" / "patches.md")
    args = parser.parse_args()
    text = report(startup(args.runs), decisions())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
