"""Build SGLang 0.5.23's real MTP draft model on CPU and report what it became (a test child).

Why this exists: the patch tests drive SGLang's functions one at a time; the upstream pull
request's proof is the model itself ("MTP loads in bf16"). This script runs SGLang's own chain as
its draft worker does: the ServerArgs of the profile's plain command line (``--quantization
modelslim``, NEXTN, no draft quantization flag) published the way the scheduler publishes them,
a one-process gloo group, the draft ``ModelConfig``, the loader's quantization config (a real
``ModelSlimConfig`` read from ``quant_model_description.json``), and the loader's
``_initialize_model``. Real sizes are built on the meta device (no memory); a tiny config is
built on CPU and loaded from a synthetic ModelSlim checkpoint.

It runs in its own process (tests/patches/test_sglang_mtp_model.py starts it) because it sets
SGLang's process-wide state: the published server arguments and the distributed groups.

Where SGLang branches on the platform, it gets the NPU answer: the NPU's memory capacity while the
ServerArgs (``--device npu --attention-backend ascend``) resolve, ``is_npu`` in qwen3_5_mtp, the
rotary embedding base's and the model loader's module flags. Nothing runs a kernel.

Usage: ``python sglang_mtp_build.py SPEC.json OUT.json``. SPEC: {"port": int, "tp": int (1),
"rank": int (0), "jobs": [...]}, each job {"kind": "meta"|"load", "model_dir": str, "patched":
bool}. OUT: one result per job. With tp > 1, start one process per rank (same port).
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

#: Parts of the draft module, by parameter name (first match wins).
PARTS = (
    ("embed_tokens", "model.embed_tokens."),
    ("lm_head", "lm_head."),
    ("routed_experts", ".mlp.experts."),
    ("shared_experts", ".mlp.shared_expert"),
    ("attention", ".qkv_proj."),
    ("attention", ".o_proj."),
    ("router", ".mlp.gate."),
    ("dense_mlp", ".mlp.gate_up_proj."),
    ("dense_mlp", ".mlp.down_proj."),
    ("fc", "fc."),
)


def part_of(name: str) -> str:
    for part, marker in PARTS:
        if name.startswith(marker) or marker in name:
            return part
    return "norms"


def setup(model_dir: Path, port: int, tp: int, rank: int) -> None:
    """Publish the profile's ServerArgs as the scheduler does; a gloo group of ``tp`` processes."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed import parallel_state

    publish(model_dir, tp, rank)
    parallel_state.init_distributed_environment(
        world_size=tp,
        rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        local_rank=rank,
        backend="gloo",
    )
    parallel_state.initialize_model_parallel()
    assert runtime_context.get_parallel().tp_size == tp
    assert runtime_context.get_parallel().tp_rank == rank


def publish(model_dir: Path, tp: int, rank: int) -> None:
    """The command line every profile resolves to (helm/qwen-npu, engine args), for model_dir."""
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(
        model_path=str(model_dir),
        quantization="modelslim",
        speculative_algorithm="NEXTN",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        disable_radix_cache=True,
        trust_remote_code=True,
        device="npu",
        attention_backend="ascend",
        tp_size=tp,
    )
    runtime_context.publish(
        server_args,
        role="scheduler",
        ranks=runtime_context.SpawnRanks(world_rank=rank, dp_rank=None, gpu_id=rank),
    )


#: HBM of one 910B NPU in MiB, what torch_npu would report (preflight's default 64 GiB).
NPU_MEMORY_MIB = 65_536


def npu_memory_answers() -> None:
    """``--device npu`` asks torch_npu for the NPU's memory while the ServerArgs resolve."""
    import sglang.srt.hardware_backend.npu.utils as npu_utils
    import sglang.srt.utils.common as common

    for module in (common, npu_utils):
        module.get_npu_memory_capacity = lambda: NPU_MEMORY_MIB


def npu_answers() -> None:
    """The NPU answer where the draft's construction branches on the platform."""
    import sglang.srt.layers.rotary_embedding.base as rotary_base
    import sglang.srt.model_loader.loader as loader
    import sglang.srt.models.qwen3_5_mtp as mtp

    mtp.is_npu = lambda: True
    rotary_base._is_npu = True
    loader._is_npu = True


@contextmanager
def patches(on: bool) -> Iterator[None]:
    """The qwen-npu patches as the .pth hook left them (on), or reverted for the block (off)."""
    from qwen_npu.patches.fixes import modelslim_moe_unquant_fallback as moe
    from qwen_npu.patches.fixes import mtp_modelslim_unquant as mtp

    for module in (moe, mtp):
        module.apply()
    if on:
        assert moe.active() and mtp.active(), "the patches did not apply"
        yield
        return
    for module in (moe, mtp):
        module.revert()
    try:
        yield
    finally:
        for module in (moe, mtp):
            module.apply()


def draft(model_dir: Path, device: str) -> tuple[Any, Any]:
    """The draft ModelConfig and the model SGLang's loader builds for it on ``device``."""
    from sglang.srt import runtime_context
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import loader
    from sglang.srt.model_loader.utils import set_default_torch_dtype

    model_config = ModelConfig.from_server_args(
        runtime_context.get_server_args(),
        model_path=str(model_dir),
        is_draft_model=True,
    )
    load_config = LoadConfig(load_format="auto")
    quant_config = loader._get_quantization_config(model_config, load_config)
    with set_default_torch_dtype(model_config.dtype), torch.device(device):
        model = loader._initialize_model(model_config, load_config, quant_config)
    return model_config, (quant_config, model)


def describe(model: Any, quant_config: Any, model_config: Any) -> dict[str, Any]:
    from sglang.srt import runtime_context
    from sglang.srt.layers.moe.fused_moe_triton import FusedMoE

    server_args = runtime_context.get_server_args()

    by_part: dict[str, int] = {}
    dtypes: set[str] = set()
    params: dict[str, dict[str, Any]] = {}
    for name, param in model.named_parameters():
        nbytes = param.numel() * param.element_size()
        by_part[part_of(name)] = by_part.get(part_of(name), 0) + nbytes
        dtypes.add(str(param.dtype).removeprefix("torch."))
        params[name] = {"shape": list(param.shape), "bytes": nbytes}
    moe = {
        name: type(module.quant_method).__name__
        for name, module in model.named_modules()
        if isinstance(module, FusedMoE)
    }
    return {
        "ok": True,
        "server_args": {
            "device": server_args.device,
            "attention_backend": server_args.attention_backend,
            "quantization": server_args.quantization,
            "speculative_algorithm": server_args.speculative_algorithm,
        },
        "class": type(model).__name__,
        "architectures": list(model_config.hf_config.architectures),
        "draft_quantization": model_config.quantization,
        "loader_quant_config": type(quant_config).__name__ if quant_config else None,
        "model_quant_config": type(model.quant_config).__name__ if model.quant_config else None,
        "moe_quant_methods": moe,
        "dtypes": sorted(dtypes),
        "bytes": sum(by_part.values()),
        "bytes_by_part": by_part,
        "params": params,
    }


def meta_job(model_dir: Path) -> dict[str, Any]:
    model_config, (quant_config, model) = draft(model_dir, "meta")
    return describe(model, quant_config, model_config)


def load_job(model_dir: Path) -> dict[str, Any]:
    """Tiny draft on CPU, every parameter NaN, then SGLang's load_weights from the shards."""
    from safetensors.torch import load_file

    model_config, (quant_config, model) = draft(model_dir, "cpu")
    result = describe(model, quant_config, model_config)
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(float("nan"))
    weights: list[tuple[str, torch.Tensor]] = []
    for shard in sorted(model_dir.glob("*.safetensors")):
        weights.extend(load_file(str(shard)).items())
    loaded = model.load_weights(iter(weights))
    untouched = sorted(n for n, p in model.named_parameters() if torch.isnan(p).any().item())
    # What the draft worker does next: take the target's embedding and head.
    target_head = torch.full_like(model.lm_head.weight, 0.5)
    model.set_embed_and_head(None, target_head)
    after_head = sorted(n for n, p in model.named_parameters() if torch.isnan(p).any().item())
    checkpoint = dict(weights)
    fc_equal = torch.equal(model.fc.weight, checkpoint["mtp.fc.weight"])
    experts = model.model.layers[0].mlp.experts
    gate0 = checkpoint["mtp.layers.0.mlp.experts.0.gate_proj.weight"]
    up0 = checkpoint["mtp.layers.0.mlp.experts.0.up_proj.weight"]
    down1 = checkpoint["mtp.layers.0.mlp.experts.1.down_proj.weight"]
    result.update(
        {
            "checkpoint_tensors": len(weights),
            "checkpoint_dtypes": sorted({str(t.dtype).removeprefix("torch.") for _, t in weights}),
            "loaded_names": sorted(loaded),
            "untouched_after_load": untouched,
            "untouched_after_set_embed_and_head": after_head,
            "fc_equals_checkpoint": fc_equal,
            "expert0_w13_equals_gate_up": torch.equal(
                experts.w13_weight[0], torch.cat([gate0, up0])
            ),
            "expert1_w2_equals_down": torch.equal(experts.w2_weight[1], down1),
        }
    )
    return result


def failure(exc: BaseException) -> dict[str, Any]:
    frames = traceback.extract_tb(exc.__traceback__)
    return {
        "ok": False,
        "error_type": type(exc).__name__,
        "error": str(exc),
        "frames": [f"{Path(f.filename).name}:{f.name}" for f in frames],
    }


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    jobs = spec["jobs"]
    tp, rank = int(spec.get("tp", 1)), int(spec.get("rank", 0))
    npu_memory_answers()
    setup(Path(jobs[0]["model_dir"]), int(spec["port"]), tp, rank)
    npu_answers()
    results = []
    for job in jobs:
        model_dir = Path(job["model_dir"])
        publish(model_dir, tp, rank)  # last publish wins: the engine of this checkpoint
        run = meta_job if job["kind"] == "meta" else load_job
        with patches(job["patched"]):
            try:
                results.append(run(model_dir))
            except Exception as exc:  # the unpatched build is expected to fail: report it
                results.append(failure(exc))
    Path(argv[1]).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
