"""The chart's model.fetch: the staging Job, the engine pods' wait, the node-local fetch, helm test.

Their command lines are read by the CLI's own parsers and then run for real: the rendered Job's
arguments and environment fetch from the test hub into a directory standing for the claim, the
rendered init container's ``fetch wait`` and the helm test's ``fetch verify`` pass on it. Strict
schema validation (1.29-1.37) and checkov cover the ci/fetch*-values.yaml scenarios with the
rest of the chart (tests/helm).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import certifi
import helm_python as helm
import pytest

from fixtures.hubserver import Hub
from qwen_npu.fetch.cli import build_parser, build_verify_parser, build_wait_parser
from tests.fetch.conftest import RunFetch
from tools import chart as chart_tool

FETCH = chart_tool.values_from(chart_tool.CI_DIR / "fetch-values.yaml")
NODE_LOCAL = chart_tool.values_from(chart_tool.CI_DIR / "fetch-nodelocal-values.yaml")


def _job(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = chart_tool.find(docs, "Job")
    return job


def _init(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for _, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
        for c in template["spec"].get("initContainers", []):
            if c["name"] == name:
                return dict(c)
    raise AssertionError(f"no init container {name}")


def _mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in container.get("volumeMounts", [])}


def test_should_render_job_whose_args_the_cli_parses_to_the_values() -> None:
    docs = chart_tool.render_docs(FETCH)
    job = _job(docs)
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["qwen-npu", "fetch"]
    args = build_parser().parse_args(container["args"])
    f = FETCH["model"]["fetch"]
    assert args.source == f["source"] and args.revision == f["revision"]
    assert str(args.dest) == "/models/Qwen3.6-35B-A3B-w8a8"
    assert args.jobs == 8 and args.attempts == 6 and args.preflight is False
    assert args.ca_bundle == "/etc/qwen-npu/fetch-ca/ca.crt"
    # The claim: the existing one, writable here only; the chart owns no claim.
    claim = next(v for v in spec["volumes"] if v["name"] == "model")
    assert claim["persistentVolumeClaim"] == {"claimName": "qwen-models"}
    assert not _mounts(container)["model"].get("readOnly")
    assert chart_tool.find(docs, "PersistentVolumeClaim") == []
    # Credentials as files from the existing Secret, named in the fetch's errors.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["QWEN_NPU_FETCH_SECRET"] == "modelscope-token"
    assert env["QWEN_NPU_FETCH_SECRET_KEYS"] == "MODELSCOPE_API_TOKEN=token"
    assert all("valueFrom" not in e for e in container["env"])
    secret = next(v for v in spec["volumes"] if v["name"] == "fetch-credentials")
    assert secret["secret"]["secretName"] == "modelscope-token"
    assert env["HTTPS_PROXY"] == "http://proxy.example.internal:3128"
    assert (
        env["HF_HOME"].startswith("/tmp") and _mounts(container)["fetch-tmp"]["mountPath"] == "/tmp"
    )


def test_should_make_engine_pods_wait_read_only_before_preflight() -> None:
    docs = chart_tool.render_docs(FETCH)
    for _, template in chart_tool.pod_templates(chart_tool.engine_workload(docs)):
        names = [c["name"] for c in template["spec"]["initContainers"]]
        assert names.index("fetch-wait") < names.index("preflight")
        for c in [*template["spec"]["initContainers"], *template["spec"]["containers"]]:
            if "model" in _mounts(c):
                assert _mounts(c)["model"]["readOnly"] is True, c["name"]
    wait = _init(docs, "fetch-wait")
    assert wait["args"][0] == "wait"
    args = build_wait_parser().parse_args(wait["args"][1:])
    assert args.source == FETCH["model"]["fetch"]["source"] and args.revision == "v1.0"
    assert args.sizes_only is False and args.log_every == 60  # sums checked, progress each minute


def test_should_fetch_wait_and_verify_with_rendered_commands(
    hub: Hub, run_fetch: RunFetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Job's, the init container's and helm test's commands, run against the test hub."""
    values = chart_tool.deep_merge(
        FETCH,
        {
            "model": {
                "fetch": {
                    "source": "modelscope://org/model",
                    "revision": "",
                    "mirrors": {},
                    "proxy": {"https": ""},
                }
            }
        },
    )
    docs = chart_tool.render_docs(values)
    (container,) = _job(docs)["spec"]["template"]["spec"]["containers"]
    mounts = {
        "/models": tmp_path / "claim",
        "/etc/qwen-npu/fetch-credentials": tmp_path / "secret",
        "/etc/qwen-npu/fetch-ca": tmp_path / "ca",
    }

    def local(text: str) -> str:
        for mount, path in mounts.items():
            text = text.replace(mount, str(path))
        return text

    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "token").write_text("t0ken")
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "ca.crt").write_bytes(Path(certifi.where()).read_bytes())
    (tmp_path / "claim").mkdir()
    hub.faults.token = "t0ken"
    for e in container["env"]:
        if e["name"] != "HOME":
            monkeypatch.setenv(e["name"], local(str(e["value"])))
    args = [local(a) for a in container["args"]]
    code, out, err = run_fetch(*args, fast=False)
    assert code == 0, err
    assert "files verified" in out, shlex.join(args)
    wait = [local(a) for a in _init(docs, "fetch-wait")["args"]]
    assert run_fetch(*wait)[0] == 0
    (test_pod,) = [
        d for d in chart_tool.find(docs, "Pod") if d["metadata"]["name"].endswith("manifest")
    ]
    verify = [local(a) for a in test_pod["spec"]["containers"][0]["args"]]
    assert verify[0] == "verify" and build_verify_parser().parse_args(verify[1:]).source
    assert run_fetch(*verify)[0] == 0
    # Another revision asked for: the wait does not accept this marker (it keeps waiting).
    other = [*wait, "--revision", "v2", "--timeout", "0.1", "--poll", "0.05"]
    assert run_fetch(*other)[0] == 4


def test_should_fetch_on_each_node_with_node_local_cache() -> None:
    docs = chart_tool.render_docs(NODE_LOCAL)
    assert chart_tool.find(docs, "Job") == []
    fetch = _init(docs, "fetch")
    args = build_parser().parse_args(fetch["args"])
    assert args.source.startswith("obs://") and str(args.dest) == "/models/Qwen3.6-35B-A3B-w8a8"
    assert not _mounts(fetch)["model"].get(
        "readOnly"
    )  # this container alone writes the node's copy
    env = {e["name"]: e.get("value") for e in fetch["env"]}
    assert env["OBS_ENDPOINT"].startswith("https://obs.")
    engine = chart_tool.container(
        next(t for _, t in chart_tool.pod_templates(chart_tool.engine_workload(docs))), "engine"
    )
    assert engine is not None and _mounts(engine)["model"]["readOnly"] is True
    (test_pod,) = [
        d for d in chart_tool.find(docs, "Pod") if d["metadata"]["name"].endswith("manifest")
    ]
    assert (
        "podAffinity" in test_pod["spec"]["affinity"]
    )  # beside an engine pod: a node that fetched
    assert "--sizes-only" in test_pod["spec"]["containers"][0]["args"]


def test_should_name_a_new_job_and_roll_pods_when_revision_changes() -> None:
    old = chart_tool.render_docs(FETCH)
    new = chart_tool.render_docs(
        chart_tool.deep_merge(FETCH, {"model": {"fetch": {"revision": "v2"}}})
    )
    assert _job(old)["metadata"]["name"] != _job(new)["metadata"]["name"]

    def checksum(docs: list[dict[str, Any]]) -> str:
        return str(
            chart_tool.engine_workload(docs)["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
        )

    assert checksum(old) != checksum(new)


@pytest.mark.parametrize(
    ("fetch", "model", "why"),
    [
        ({"source": "ftp://x/y"}, {}, "is not a SOURCE"),
        (
            {"source": "hf://org/name"},
            {"source": "image", "image": {"reference": "r/x:1"}},
            "model.source=image",
        ),
        ({"source": "s3://b/p", "revision": "v1"}, {}, "revision is set for an object store"),
        (
            {"source": "hf://org/name", "credentials": {"keys": {"HF_TOKEN": "t"}}},
            {},
            "without model.fetch.credentials.existingSecret",
        ),
    ],
)
def test_should_fail_render_naming_the_value(
    fetch: dict[str, Any], model: dict[str, Any], why: str
) -> None:
    values = {"model": {**model, "fetch": {"enabled": True, **fetch}}}
    with pytest.raises(helm.HelmRenderError, match=why):
        chart_tool.render(values)
