"""The SGLang command line a checkpoint should start with on Ascend: the profile's flags.

Why this exists: the Helm chart, the runbook and preflight must agree on one command line (the
documented Ascend flags, and the NEXTN flags when MTP is on). This function is that one place; a
test can render the chart and compare its arguments with ``recommended_args``. The command never
carries ``--speculative-draft-model-quantization``: the patches make the plain line work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: What the engine image's entrypoint runs (it passes its arguments through).
LAUNCHER: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
DEFAULT_MEM_FRACTION_STATIC = 0.8
DEFAULT_CUDA_GRAPH_BS = 16
DEFAULT_PORT = 30000
NEXTN_NUM_STEPS = 3
NEXTN_EAGLE_TOPK = 1
NEXTN_NUM_DRAFT_TOKENS = 4


def _number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class LaunchOptions:
    """The choices behind the command line; the defaults are the profile's."""

    tp: int = 1
    mtp: bool = True
    quantized: bool = True  # adds --quantization modelslim
    mem_fraction_static: float = DEFAULT_MEM_FRACTION_STATIC
    cuda_graph_bs: int | None = DEFAULT_CUDA_GRAPH_BS
    mamba_ssm_dtype: str | None = None  # only passed on when the user chose it
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    served_model_name: str | None = None
    speculative_num_steps: int = NEXTN_NUM_STEPS
    speculative_eagle_topk: int = NEXTN_EAGLE_TOPK
    speculative_num_draft_tokens: int = NEXTN_NUM_DRAFT_TOKENS
    extra: tuple[str, ...] = field(default=())


def recommended_args(model_path: str, options: LaunchOptions | None = None) -> list[str]:
    """The arguments of ``sglang.launch_server`` (no launcher), in a fixed order."""
    o = options or LaunchOptions()
    args = ["--model-path", model_path]
    if o.served_model_name:
        args += ["--served-model-name", o.served_model_name]
    args += ["--device", "npu", "--attention-backend", "ascend"]
    if o.quantized:
        args += ["--quantization", "modelslim"]
    args += ["--tp-size", str(o.tp), "--mem-fraction-static", _number(o.mem_fraction_static)]
    if o.cuda_graph_bs is not None:
        args += ["--cuda-graph-bs-decode", str(o.cuda_graph_bs)]
    args += ["--disable-radix-cache", "--trust-remote-code"]
    if o.mamba_ssm_dtype is not None:
        args += ["--mamba-ssm-dtype", o.mamba_ssm_dtype]
    if o.mtp:
        args += [
            "--speculative-algorithm",
            "NEXTN",
            "--speculative-num-steps",
            str(o.speculative_num_steps),
            "--speculative-eagle-topk",
            str(o.speculative_eagle_topk),
            "--speculative-num-draft-tokens",
            str(o.speculative_num_draft_tokens),
        ]
    args += ["--enable-metrics", "--host", o.host, "--port", str(o.port)]
    return [*args, *o.extra]


def recommended_command(model_path: str, options: LaunchOptions | None = None) -> list[str]:
    """``python3 -m sglang.launch_server`` followed by ``recommended_args(model_path, options)``."""
    return [*LAUNCHER, *recommended_args(model_path, options)]
