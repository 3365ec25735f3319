"""The recommended SGLang command line: the documented Ascend flags, NEXTN only with MTP on."""

from __future__ import annotations

import pytest

from qwen_npu.preflight import LaunchOptions, recommended_args, recommended_command


def flag_value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_ascend_profile_flags() -> None:
    args = recommended_args("/models/q", LaunchOptions(tp=2))
    assert flag_value(args, "--model-path") == "/models/q"
    assert flag_value(args, "--device") == "npu"
    assert flag_value(args, "--attention-backend") == "ascend"
    assert flag_value(args, "--quantization") == "modelslim"
    assert flag_value(args, "--tp-size") == "2"
    assert flag_value(args, "--mem-fraction-static") == "0.8"
    assert flag_value(args, "--cuda-graph-bs-decode") == "16"
    assert flag_value(args, "--port") == "30000"
    assert {"--disable-radix-cache", "--trust-remote-code", "--enable-metrics"} <= set(args)
    assert flag_value(args, "--speculative-algorithm") == "NEXTN"
    assert flag_value(args, "--speculative-num-steps") == "3"
    assert flag_value(args, "--speculative-eagle-topk") == "1"
    assert flag_value(args, "--speculative-num-draft-tokens") == "4"


def test_never_the_draft_quantization_workaround() -> None:
    for mtp in (True, False):
        args = recommended_args("/m", LaunchOptions(mtp=mtp))
        assert not any("draft-model-quantization" in a for a in args)


def test_mtp_off_removes_every_speculative_flag() -> None:
    off = recommended_args("/m", LaunchOptions(mtp=False))
    assert not any(a.startswith("--speculative") for a in off)
    on = recommended_args("/m", LaunchOptions(mtp=True))
    start = on.index("--speculative-algorithm")
    assert on[:start] + on[start + 8 :] == off


def test_options_change_the_line() -> None:
    opts = LaunchOptions(
        tp=8,
        quantized=False,
        mem_fraction_static=0.75,
        cuda_graph_bs=None,
        mamba_ssm_dtype="bfloat16",
        served_model_name="qwen",
        extra=("--log-level", "info"),
    )
    cmd = recommended_command("/m", opts)
    assert cmd[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--quantization" not in cmd and "--cuda-graph-bs-decode" not in cmd
    assert flag_value(cmd, "--mem-fraction-static") == "0.75"
    assert flag_value(cmd, "--mamba-ssm-dtype") == "bfloat16"
    assert flag_value(cmd, "--served-model-name") == "qwen"
    assert cmd[-2:] == ["--log-level", "info"]


@pytest.mark.sglang
def test_sglang_0_5_23_parses_the_line_as_meant() -> None:
    """SGLang's own argument parser reads every flag (0.5.23 has no plain --cuda-graph-bs)."""
    from sglang.srt.server_args import prepare_server_args

    opts = LaunchOptions(tp=4, mamba_ssm_dtype="bfloat16", served_model_name="qwen")
    parsed = prepare_server_args(recommended_args("/models/q", opts))
    assert parsed.model_path == "/models/q" and parsed.served_model_name == "qwen"
    assert (parsed.device, parsed.attention_backend) == ("npu", "ascend")
    assert (parsed.quantization, parsed.tp_size) == ("modelslim", 4)
    assert parsed.mem_fraction_static == 0.8 and parsed.cuda_graph_bs_decode == [16]
    assert parsed.disable_radix_cache and parsed.trust_remote_code and parsed.enable_metrics
    assert parsed.mamba_ssm_dtype == "bfloat16"
    assert parsed.speculative_algorithm == "NEXTN"
    steps = (parsed.speculative_num_steps, parsed.speculative_eagle_topk)
    assert steps == (3, 1) and parsed.speculative_num_draft_tokens == 4
    assert parsed.speculative_draft_model_quantization is None
    assert (parsed.host, parsed.port) == ("0.0.0.0", 30000)
    off = prepare_server_args(recommended_args("/models/q", LaunchOptions(mtp=False)))
    assert off.speculative_algorithm is None
