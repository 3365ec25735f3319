"""boto3 against moto's S3 server on 127.0.0.1, as ``s3://`` and as ``obs://`` (OBS speaks S3).

Covers what is particular to object stores: the revision is a digest of the objects' ETags, a
single-part ETag is checked as MD5 and a multipart one part by part, missing credentials name the
variables (and the chart's Secret), OBS needs its endpoint, and a full disk mid-file resumes with a
ranged read.
"""

from __future__ import annotations

import errno
import hashlib
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from moto.server import ThreadedMotoServer

from qwen_npu.fetch import transfer
from qwen_npu.fetch.layout import Revision, Store
from tests.fetch.conftest import RunFetch, error_line

MIB = 1024 * 1024


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def _aws_env(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)


@pytest.fixture(scope="module")
def bucket(moto_url: str) -> tuple[str, dict[str, bytes]]:
    """A bucket with a checkpoint under prefix ``q/``: one multipart object, small ones."""
    name = f"models-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="test-key",
        aws_secret_access_key="test-secret",
    )
    s3.create_bucket(Bucket=name)
    rnd = random.Random(7)
    files = {"config.json": b'{"a": 1}', "tok/tokenizer.json": rnd.randbytes(3000)}
    for key, data in files.items():
        s3.put_object(Bucket=name, Key=f"q/{key}", Body=data)
    big = rnd.randbytes(5 * MIB + 5)  # two parts: 5 MiB (the smallest S3 takes) and 5 bytes
    files["model.safetensors"] = big
    src = Path(f"/tmp/{name}.bin")
    src.write_bytes(big)
    try:
        s3.upload_file(
            str(src),
            name,
            "q/model.safetensors",
            Config=TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB),
        )
    finally:
        src.unlink()
    s3.put_object(Bucket=name, Key="elsewhere/ignored.bin", Body=b"not under the prefix")
    return name, files


def _complete(dest: Path, files: dict[str, bytes]) -> dict[str, object]:
    rev = Revision(dest.resolve())
    assert rev.check(sums=True) == []
    manifest = rev.manifest()
    assert manifest is not None
    assert {e["path"]: e["sha256"] for e in manifest["files"]} == {
        n: hashlib.sha256(d).hexdigest() for n, d in files.items()
    }
    return manifest


@pytest.mark.parametrize("scheme", ["s3", "obs"])
def test_should_fetch_bucket_prefix_checking_md5_and_multipart_etags(
    scheme: str,
    bucket: tuple[str, dict[str, bytes]],
    moto_url: str,
    run_fetch: RunFetch,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, files = bucket
    if scheme == "obs":
        monkeypatch.setenv("OBS_ENDPOINT", moto_url)
        monkeypatch.setenv("OBS_ACCESS_KEY_ID", "test-key")
        monkeypatch.setenv("OBS_SECRET_ACCESS_KEY", "test-secret")
    dest = tmp_path / "m"
    code, out, err = run_fetch(f"{scheme}://{name}/q", str(dest))
    assert code == 0, err
    manifest = _complete(dest, files)
    checks = {e["path"]: e["check"] for e in manifest["files"]}
    assert checks == {
        "config.json": "md5",
        "tok/tokenizer.json": "md5",
        "model.safetensors": "s3-multipart",
    }
    assert str(manifest["revision"]).startswith("objects-")
    code, out, err = run_fetch(f"{scheme}://{name}/q", str(dest))
    assert code == 0 and "nothing downloaded" in out


def test_should_fetch_new_revision_when_an_object_is_replaced(
    bucket: tuple[str, dict[str, bytes]], run_fetch: RunFetch, tmp_path: Path
) -> None:
    name, _ = bucket
    s3 = boto3.client("s3")
    s3.put_object(Bucket=name, Key="r/config.json", Body=b'{"a": 1}')
    dest = tmp_path / "m"
    assert run_fetch(f"s3://{name}/r", str(dest))[0] == 0
    first = dest.resolve()
    s3.put_object(Bucket=name, Key="r/config.json", Body=b'{"a": 2}')
    code, _, err = run_fetch(f"s3://{name}/r", str(dest))
    assert code == 0, err
    assert dest.resolve() != first and first.is_dir()  # beside the old one, which stays
    assert (dest / "config.json").read_bytes() == b'{"a": 2}'


def test_should_name_secret_and_key_when_credentials_are_missing(
    bucket: tuple[str, dict[str, bytes]],
    run_fetch: RunFetch,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, _ = bucket
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("QWEN_NPU_FETCH_SECRET", "obs-keys")
    monkeypatch.setenv(
        "QWEN_NPU_FETCH_SECRET_KEYS", "AWS_ACCESS_KEY_ID=ak,AWS_SECRET_ACCESS_KEY=sk"
    )
    code, _, err = run_fetch(f"s3://{name}/q", str(tmp_path / "m"))
    line = error_line(err)
    assert code == 2
    assert "AWS_ACCESS_KEY_ID (Secret 'obs-keys', key 'ak')" in line
    assert "AWS_SECRET_ACCESS_KEY (Secret 'obs-keys', key 'sk')" in line


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("s3://no-such-bucket-here/q", "no bucket 'no-such-bucket-here'"),
        ("s3://{bucket}/nothing-here", "no objects under 'nothing-here/'"),
        ("obs://{bucket}/q", "OBS_ENDPOINT is not set"),
    ],
)
def test_should_refuse_unknown_bucket_empty_prefix_and_missing_obs_endpoint(
    source: str,
    why: str,
    bucket: tuple[str, dict[str, bytes]],
    run_fetch: RunFetch,
    tmp_path: Path,
) -> None:
    code, _, err = run_fetch(source.format(bucket=bucket[0]), str(tmp_path / "m"))
    assert code == 2
    assert why in error_line(err)


def test_should_resume_object_with_ranged_read_after_full_disk(
    bucket: tuple[str, dict[str, bytes]],
    run_fetch: RunFetch,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, files = bucket
    real = transfer._write
    seen = {"big": 0}

    def full_after_two_chunks(out, chunk):  # type: ignore[no-untyped-def]
        if len(chunk) == MIB:
            seen["big"] += 1
            if seen["big"] > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        real(out, chunk)

    monkeypatch.setattr(transfer, "_write", full_after_two_chunks)
    dest = tmp_path / "m"
    code, _, err = run_fetch(f"s3://{name}/q", str(dest), "--jobs", "1")
    assert code == 3 and "the disk filled up" in error_line(err)
    assert not dest.exists()
    partial = next(Store(dest).home.glob("revs/*/.qwen-npu/partial/model.safetensors"))
    assert partial.stat().st_size == 2 * MIB
    monkeypatch.setattr(transfer, "_write", real)
    code, _, err = run_fetch(f"s3://{name}/q", str(dest))
    assert code == 0, err
    start = next(line for line in err.splitlines() if "event=start" in line)
    resumed = int(start.split(" bytes=")[1].split()[0])
    assert 2 * MIB <= resumed < 2 * MIB + 3008 + 1  # from the 2 MiB on disk, not from 0
    _complete(dest, files)
