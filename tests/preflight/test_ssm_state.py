"""The SSM state dtype against the target chip, and preflight judging the engine's own command line.

The Qwen3.5/3.6 checkpoints say ``mamba_ssm_dtype: float32``; on 910B and A3 the prefill op takes
a float32 state only on Ascend950 (qwen_npu.hardware.chips), so without a flag preflight stops the
pod in one line naming the limit and the fix. With ``--engine-args`` it reads TP, SSM dtype,
speculative decoding and quantization from the line the chart rendered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qwen_npu.hardware import chips
from tests.preflight.conftest import RunCli

ENGINE = [
    "--served-model-name",
    "Qwen3.6-35B-A3B",
    "--device",
    "npu",
    "--quantization",
    "modelslim",
    "--tp-size",
    "2",
    "--mem-fraction-static",
    "0.7",
    "--mamba-ssm-dtype",
    "bfloat16",
    "--speculative-algorithm",
    "NEXTN",
    "--chunked-prefill-size",
    "-1",
    "--enable-metrics",
]


@pytest.mark.parametrize("chip", ["910b", "a3"])
def test_should_exit_1_naming_the_op_and_the_flag_when_fp32_state_on_910b_or_a3(
    ckpt_35b: Path, run_cli: RunCli, chip: str
) -> None:
    code, out, _ = run_cli(str(ckpt_35b), "--tp", "2", "--chip", chip)
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.strip().startswith("BLOCKING ssm-dtype")]
    where = f"SSM state float32 (the checkpoint's own, from config.json mamba_ssm_dtype) on {chip}"
    for needle in (where, chips.PREFILL_OP, "only on Ascend950", "--mamba-ssm-dtype bfloat16"):
        assert needle in line, line
    assert out.splitlines()[-1].startswith(
        "verdict=would_fail exit=1 blocking=ssm-dtype-unsupported"
    )


def test_should_default_to_910b_and_read_the_chip_from_env(
    ckpt_35b: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, data, _ = run_cli(str(ckpt_35b), "--tp", "2", "--json")
    assert (code, data["chip"]) == (1, "910b")
    monkeypatch.setenv(chips.ENV_CHIP, "ascend950")
    code, data, _ = run_cli(str(ckpt_35b), "--tp", "2", "--no-mtp", "--json")
    assert (code, data["chip"], data["verdict"]) == (0, "ascend950", "ready")


def test_should_plan_h_block_size_2_without_ub_patch_when_state_is_bf16(
    ckpt_35b: Path, run_cli: RunCli
) -> None:
    code, data, _ = run_cli(str(ckpt_35b), "--tp", "2", "--mamba-ssm-dtype", "bfloat16", "--json")
    assert code == 0, data["blocking"]
    assert data["ub_plan"]["h_block_size"] == 2 and data["ub_plan"]["dtype"] == "bfloat16"
    assert "mamba-scatter-ub-aware" not in data["patches"]["needed"]


def test_should_allow_fp32_on_ascend950_and_warn_about_the_verify_op_with_mtp(
    ckpt_35b: Path, run_cli: RunCli
) -> None:
    code, data, _ = run_cli(str(ckpt_35b), "--tp", "2", "--chip", "ascend950", "--json")
    assert code == 0 and data["ub_plan"]["h_block_size"] == 1
    (warning,) = [f for f in data["findings"] if f["code"] == "ssm-dtype-verify"]
    assert chips.VERIFY_OP in warning["message"] and "gdn_contract.ssm_dtype" in warning["message"]


def test_should_block_fp16_state_even_on_ascend950(ckpt_35b: Path, run_cli: RunCli) -> None:
    code, data, _ = run_cli(
        str(ckpt_35b), "--mamba-ssm-dtype", "float16", "--chip", "ascend950", "--json"
    )
    assert code == 1 and {f["code"] for f in data["blocking"]} == {"ssm-dtype-unsupported"}


def test_should_judge_the_engine_line_when_given_engine_args(
    ckpt_35b: Path, run_cli: RunCli
) -> None:
    line = ["--model-path", str(ckpt_35b), *ENGINE]
    code, data, _ = run_cli("--json", "--engine-args", *line)
    assert code == 0, data["blocking"]
    assert data["model_dir"] == str(ckpt_35b) and data["command"] == line
    assert (data["tp"]["tp"], data["tp"]["source"]) == (2, "flag")
    assert data["mtp"]["enabled"] is True and data["memory"]["mem_fraction_static"] == 0.7
    assert data["model"]["mamba_ssm_dtype_source"] == "flag"
    assert data["ub_plan"]["h_block_size"] == 2
    # As SGLang's argparse: --flag=value, the last of a repeated flag; MTP off drops the algorithm.
    off = [a for a in line if a not in ("--speculative-algorithm", "NEXTN")]
    code, data, _ = run_cli(
        "--json", "--engine-args", *off, "--tp-size=4", "--mamba-ssm-dtype=float32"
    )
    assert data["tp"]["tp"] == 4 and data["mtp"]["enabled"] is False
    assert {f["code"] for f in data["blocking"]} == {"ssm-dtype-unsupported"}


def test_should_warn_when_engine_quantization_disagrees_with_the_checkpoint(
    ckpt_35b: Path, run_cli: RunCli
) -> None:
    line = ["--model-path", str(ckpt_35b), *ENGINE]
    unquantized = [a for a in line if a not in ("--quantization", "modelslim")]
    code, data, _ = run_cli("--json", "--engine-args", *unquantized)
    assert code == 0
    assert "quantization-flag" in {f["code"] for f in data["findings"]}


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--engine-args", "--tp-size", "2"], "no --model-path"),
        (["--engine-args", "--model-path", "/m", "--tp-size", "two"], "--tp-size"),
        (["--tp", "2", "--engine-args", "--model-path", "/m"], "--tp given with --engine-args"),
        ([], "no MODEL_DIR"),
    ],
)
def test_should_exit_2_in_one_line_when_engine_args_are_bad(
    run_cli: RunCli, argv: list[str], needle: str
) -> None:
    code, _, err = run_cli(*argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
