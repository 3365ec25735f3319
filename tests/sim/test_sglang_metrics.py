"""The ``sglang:*`` metric list against the SGLang 0.5.23 wheel, and the simulator's /metrics."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from qwen_npu.metrics import sglang as sm

from .test_faults import assert_promtool_accepts
from .test_server import gen_body


def _collector_source() -> str:
    spec = importlib.util.find_spec("sglang.srt.observability.metrics_collector")
    if spec is None or spec.origin is None:
        pytest.fail("SGLang's metrics_collector is missing: run `make setup`")
    return Path(spec.origin).read_text()


def _list_literal(src: str, var: str) -> list[float]:
    m = re.search(rf"{var} = (\[[^\]]*\])", src)
    assert m, f"{var} not found in SGLang's metrics_collector"
    return [float(x) for x in ast.literal_eval(m.group(1))]


@pytest.mark.sglang
def test_every_name_and_kind_exists_in_the_wheel() -> None:
    src = _collector_source()
    for spec in sm.SGLANG_METRICS:
        m = re.search(rf'(\w+)\(\s*name="{re.escape(spec.name)}"', src)
        assert m, f"{spec.name} is not declared by SGLang 0.5.23"
        assert m.group(1).lower() == spec.kind, (spec.name, m.group(1))


@pytest.mark.sglang
def test_histogram_buckets_match_the_wheel_defaults() -> None:
    src = _collector_source()
    assert tuple(_list_literal(src, "bucket_time_to_first_token")) == sm.TTFT_BUCKETS
    assert tuple(_list_literal(src, "bucket_inter_token_latency")) == sm.ITL_BUCKETS
    assert tuple(_list_literal(src, "bucket_e2e_request_latency")) == sm.E2E_BUCKETS
    queue = re.search(r'name="sglang:queue_time_seconds".*?buckets=(\[[^\]]*\])', src, re.S)
    assert queue
    assert tuple(float(x) for x in ast.literal_eval(queue.group(1))) == sm.QUEUE_TIME_BUCKETS


@pytest.mark.sglang
def test_labels_match_the_wheel() -> None:
    src = _collector_source()
    for label in sm.SCHEDULER_LABELS:
        assert f'"{label}":' in src, label
    assert '"is_streaming"' in src
    running = next(s for s in sm.SGLANG_METRICS if s.name == "sglang:num_running_reqs")
    assert running.labels == sm.SCHEDULER_LABELS


def test_list_shape() -> None:
    names = [s.name for s in sm.SGLANG_METRICS]
    assert len(names) == len(set(names))
    for spec in sm.SGLANG_METRICS:
        assert spec.name.startswith("sglang:")
        assert (spec.kind == "counter") == spec.name.endswith("_total")
        assert (spec.kind == "histogram") == bool(spec.buckets)
        assert list(spec.buckets) == sorted(spec.buckets)


@pytest.mark.system
def test_sim_exports_every_metric_with_labels_and_values(
    spec_sim: str, client: httpx.Client
) -> None:
    for stream in (False, True):
        r = client.post(spec_sim + "/generate", json={**gen_body(30), "stream": stream})
        assert r.status_code == 200
    text = client.get(spec_sim + "/metrics").text
    assert_promtool_accepts(text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for spec in sm.SGLANG_METRICS:
        base = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
        fam = families.get(base)
        assert fam is not None, f"{spec.name} missing from /metrics"
        assert fam.type == spec.kind
        for sample in fam.samples:
            expected = set(spec.labels) | ({"le"} if sample.name.endswith("_bucket") else set())
            assert set(sample.labels) == expected, (sample.name, sample.labels)
        if spec.kind == "histogram":
            les = sorted({float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")})
            assert les[:-1] == list(spec.buckets) and les[-1] == float("inf")

    def value(name: str, **labels: str) -> float:
        total = 0.0
        for fam in families.values():
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    assert value("sglang:num_requests_total") >= 2
    assert value("sglang:num_requests_total", is_streaming="true") >= 1
    assert value("sglang:generation_tokens_total") >= 60
    assert value("sglang:spec_verify_calls_total") >= 2 * 29 / 4
    assert 1.5 < value("sglang:spec_accept_length") <= 4
    assert 0 < value("sglang:spec_accept_rate") <= 1
    assert value("sglang:spec_num_steps") == 3
    assert value("sglang:time_to_first_token_seconds_count") >= 2
    assert value("sglang:inter_token_latency_seconds_count") > 0
    assert "_created" not in text  # as SGLang's multiprocess exposition
