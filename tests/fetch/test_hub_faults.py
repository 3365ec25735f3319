"""The real huggingface_hub and modelscope clients against a hub on 127.0.0.1, with every fault.

Each test names the fault of issue 25 it covers; "never marked complete unless verified" is checked
in each failing case (no marker, DEST not created).
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import subprocess
import threading
from collections import namedtuple
from pathlib import Path

import pytest

from fixtures.hubserver import Hub, Repo
from qwen_npu import processes
from qwen_npu.fetch import run as run_module
from qwen_npu.fetch import transfer
from qwen_npu.fetch.cli import main
from qwen_npu.fetch.layout import Revision, Store
from qwen_npu.log import LINE
from tests.fetch.conftest import BIG, FAST, RunFetch, error_line, repo_files

SCHEMES = ["hf", "modelscope"]


def _assert_complete(dest: Path, files: dict[str, bytes]) -> dict[str, object]:
    assert dest.is_symlink()
    rev = Revision(dest.resolve())
    assert rev.check(sums=True) == []
    for name, data in files.items():
        assert (dest / name).read_bytes() == data
    manifest = rev.manifest()
    assert manifest is not None
    assert {e["path"]: e["sha256"] for e in manifest["files"]} == {
        n: hashlib.sha256(d).hexdigest() for n, d in files.items()
    }
    return manifest


def _assert_not_complete(dest: Path) -> None:
    assert not dest.exists(), "DEST must not point anywhere before every file verified"
    for marker in Store(dest).home.glob("revs/*/.qwen-npu/complete"):
        raise AssertionError(f"{marker} written for an unverified revision")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_fetch_verify_and_record_revision_then_download_nothing_on_second_run(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    code, out, err = run_fetch(f"{scheme}://org/model", str(dest))
    assert code == 0, err
    manifest = _assert_complete(dest, hub.repos["org/model"].files)
    assert manifest["revision"] == hub.repos["org/model"].commit  # the immutable id
    assert manifest["source"] == f"{scheme}://org/model"
    assert (Path(str(dest.resolve())) / ".qwen-npu" / "complete").is_file()
    assert "event=progress" in err or "event=downloaded" in err
    assert "rate_mb_s=" in err and "total_bytes=" in err
    assert [line for line in err.splitlines() if not LINE.fullmatch(line)] == []  # one shape
    reads = dict(hub.reads)
    code, out, err = run_fetch(f"{scheme}://org/model", str(dest))
    assert code == 0, err
    assert "nothing downloaded" in out
    assert dict(hub.reads) == reads  # the second run read no file


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("gs://bucket/x", "unknown scheme 'gs'"),
        ("hf://just-a-name", "is not org/name"),
        ("modelscope:/org/name", "no scheme"),
        ("s3://bucket/x@v2", "object stores take no @revision"),
    ],
)
def test_should_refuse_bad_source_in_one_line(
    source: str, why: str, run_fetch: RunFetch, tmp_path: Path
) -> None:
    code, _, err = run_fetch(source, str(tmp_path / "m"))
    assert code == 2
    assert why in error_line(err)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_name_unknown_repo_and_revision(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    code, _, err = run_fetch(f"{scheme}://org/nothing", str(tmp_path / "m"))
    assert code == 2
    assert "no repository 'org/nothing'" in error_line(err)
    code, _, err = run_fetch(f"{scheme}://org/model@no-such-branch", str(tmp_path / "m"))
    assert code == 2
    assert "no revision 'no-such-branch'" in error_line(err)
    assert not Store(tmp_path / "m").home.exists()  # bad input leaves nothing behind


@pytest.mark.parametrize(
    ("scheme", "env"), [("hf", "HF_TOKEN"), ("modelscope", "MODELSCOPE_API_TOKEN")]
)
def test_should_name_secret_and_key_when_token_is_missing_or_wrong(
    scheme: str,
    env: str,
    hub: Hub,
    run_fetch: RunFetch,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub.faults.token = "right"
    monkeypatch.setenv("QWEN_NPU_FETCH_SECRET", "hub-token")
    monkeypatch.setenv("QWEN_NPU_FETCH_SECRET_KEYS", f"{env}=token")
    code, _, err = run_fetch(f"{scheme}://org/model", str(tmp_path / "m"))
    line = error_line(err)
    assert code == 2
    assert f"{env} (Secret 'hub-token', key 'token')" in line
    assert "empty" in line or "wants a token" in line
    monkeypatch.setenv(env, "wrong")
    code, _, err = run_fetch(f"{scheme}://org/model", str(tmp_path / "m"))
    line = error_line(err)
    assert code == 2
    assert f"refused the token in {env} (Secret 'hub-token', key 'token')" in line
    assert hub.reads == {}  # no file was read with a refused token
    # The chart's way: the Secret mounted as files, the key names mapped to the variables.
    monkeypatch.delenv(env)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text("right\n")
    monkeypatch.setenv("QWEN_NPU_FETCH_CREDENTIALS_DIR", str(secret))
    code, _, err = run_fetch(f"{scheme}://org/model", str(tmp_path / "m"))
    assert code == 0, err


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_refuse_before_first_byte_when_space_is_short(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(run_module.shutil, "disk_usage", lambda _: usage(10**9, 10**9, 1000))
    code, _, err = run_fetch(f"{scheme}://org/model", str(tmp_path / "m"))
    line = error_line(err)
    total = sum(len(d) for d in hub.repos["org/model"].files.values())
    assert code == 3
    assert f"needs {total} bytes" in line and "has 1000 bytes" in line
    assert hub.reads == {}
    _assert_not_complete(tmp_path / "m")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_resume_cut_file_and_never_refetch_verified_files(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    cut = 1024 * 1024 + 7
    hub.faults.cut_after[BIG] = cut
    hub.faults.cuts_left[BIG] = 2
    dest = tmp_path / "m"
    # One attempt per file: the cut fails this run; the other files verify and stay.
    code, _, err = run_fetch(f"{scheme}://org/model", str(dest), "--attempts", "1")
    assert code == 1
    assert f"{BIG}: not verified after 1 attempts" in error_line(err)
    _assert_not_complete(dest)
    small = {n: c for n, c in hub.reads.items() if n != BIG}
    assert small and all(c == 1 for c in small.values())
    # The next run resumes the cut file (one more cut, then the rest) and reads nothing else.
    code, _, err = run_fetch(f"{scheme}://org/model", str(dest))
    assert code == 0, err
    _assert_complete(dest, hub.repos["org/model"].files)
    assert {n: c for n, c in hub.reads.items() if n != BIG} == small
    ranges = [r for name, r in hub.ranges if name == BIG]
    assert len(ranges) == 3 and ranges[0] is None
    # Each read starts where the bytes on disk end (the client's last whole chunk before the cut).
    offsets = [int(str(r).removeprefix("bytes=").rstrip("-")) for r in ranges[1:]]
    assert 0 < offsets[0] <= cut < offsets[1] <= offsets[0] + cut
    assert "event=retry" in err and "resuming from the bytes on disk" in err


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_fetch_corrupt_file_again_and_never_mark_it_complete(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    hub.faults.corrupt[BIG] = 1
    dest = tmp_path / "m"
    code, _, err = run_fetch(f"{scheme}://org/model", str(dest))
    assert code == 0, err
    assert "event=corrupt" in err and hub.reads[BIG] == 2
    _assert_complete(dest, hub.repos["org/model"].files)
    # A source that keeps sending a bad byte: the fetch fails, nothing is marked complete.
    hub.faults.corrupt["tokenizer.json"] = 99
    other = tmp_path / "other"
    code, _, err = run_fetch(f"{scheme}://org/model", str(other), "--attempts", "2")
    assert code == 1
    assert "tokenizer.json: not verified after 2 attempts" in error_line(err)
    _assert_not_complete(other)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_follow_mirror_redirect_without_forwarding_token(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = "HF_TOKEN" if scheme == "hf" else "MODELSCOPE_API_TOKEN"
    with Hub({"org/model": Repo(repo_files())}) as cdn:
        hub.faults.redirect_to = cdn.url
        hub.faults.token = "t"
        monkeypatch.setenv(env, "t")
        dest = tmp_path / "m"
        code, _, err = run_fetch(f"{scheme}://org/model", str(dest))
        assert code == 0, err
        _assert_complete(dest, hub.repos["org/model"].files)
        assert hub.reads == {} and sum(cdn.reads.values()) == len(cdn.repos["org/model"].files)
        assert "Bearer t" not in cdn.auth_seen  # the token stays with the mirror's host


@pytest.mark.parametrize("scheme", SCHEMES)
def test_should_stop_on_full_disk_keep_verified_files_and_resume(
    scheme: str, hub: Hub, run_fetch: RunFetch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = transfer._write
    written = {"n": 0}

    def full_disk(out, chunk):  # type: ignore[no-untyped-def]
        if written["n"] >= 1 and len(chunk) >= 1024 * 1024:
            raise OSError(errno.ENOSPC, "No space left on device")
        written["n"] += 1 if len(chunk) >= 1024 * 1024 else 0
        real(out, chunk)

    monkeypatch.setattr(transfer, "_write", full_disk)
    dest = tmp_path / "m"
    code, _, err = run_fetch(f"{scheme}://org/model", str(dest), "--jobs", "1")
    line = error_line(err)
    assert code == 3
    assert "the disk filled up during the fetch (No space left on device)" in line
    _assert_not_complete(dest)
    monkeypatch.setattr(transfer, "_write", real)
    code, _, err = run_fetch(f"{scheme}://org/model", str(dest))
    assert code == 0, err
    _assert_complete(dest, hub.repos["org/model"].files)
    assert [r for n, r in hub.ranges if n == BIG][-1] == "bytes=1048576-"
    assert all(c == 1 for n, c in hub.reads.items() if n != BIG)


def test_should_refetch_new_revision_without_touching_old_files_until_complete(
    hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    assert run_fetch("hf://org/model", str(dest))[0] == 0
    old_root = dest.resolve()
    old = {p: p.read_bytes() for p in old_root.rglob("*") if p.is_file()}
    # The branch moves: one file changes. The new revision fails once (a cut, one attempt):
    # DEST still points to the old files, untouched.
    repo = hub.repos["org/model"]
    repo.files = {**repo.files, BIG: repo.files[BIG][::-1]}
    repo.commit = "f" * 40
    hub.faults.cut_after[BIG] = 1000
    hub.faults.cuts_left[BIG] = 1
    code, _, err = run_fetch("hf://org/model", str(dest), "--attempts", "1")
    assert code == 1
    assert dest.resolve() == old_root
    assert {p: p.read_bytes() for p in old_root.rglob("*") if p.is_file()} == old
    code, _, err = run_fetch("hf://org/model", str(dest))
    assert code == 0, err
    assert dest.resolve().name == "f" * 40
    _assert_complete(dest, repo.files)
    assert old_root.is_dir()  # the previous revision stays for pods still reading it
    assert "previous=" + old_root.name in err


def test_should_refetch_a_damaged_file_of_a_complete_dest(
    hub: Hub, run_fetch: RunFetch, tmp_path: Path
) -> None:
    dest = tmp_path / "m"
    assert run_fetch("hf://org/model", str(dest))[0] == 0
    target = dest.resolve() / "tokenizer.json"
    target.write_bytes(b"x" * 10)  # someone truncated a file
    code, _, err = run_fetch("hf://org/model", str(dest))
    assert code == 0, err
    assert "event=damaged" in err and hub.reads["tokenizer.json"] == 2
    _assert_complete(dest, hub.repos["org/model"].files)
    code, _, err = run_fetch("verify", str(dest), "--json")
    assert code == 0 and json.loads(_)["ok"] is True


def test_should_refuse_dest_it_did_not_make(run_fetch: RunFetch, tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    code, _, err = run_fetch("hf://org/model", str(tmp_path / "m"))
    assert code == 2
    assert "was not made by qwen-npu fetch" in error_line(err)
    shutil.rmtree(tmp_path / "m")


def test_should_stop_on_a_real_full_disk_and_resume_once_space_is_back(
    hub: Hub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A 4 MiB tmpfs (the tests run as root, as CI does) fills up while the shard is half-sent."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    assert mounted.returncode == 0, f"cannot mount a small tmpfs: {mounted.stderr}"
    try:
        gate, reached = threading.Event(), threading.Event()
        hub.faults.gate[BIG] = gate
        hub.faults.gate_reached[BIG] = reached
        dest = disk / "m"
        codes: list[int] = []
        worker = threading.Thread(
            target=lambda: codes.append(main(["hf://org/model", str(dest), *FAST, "--jobs", "1"]))
        )
        worker.start()
        assert reached.wait(60)
        # The server has sent half the shard; wait until the client has written some of it (on a
        # loaded machine it may not have yet), so the retry has a partial file to resume from.
        processes.wait_until(
            lambda: any(p.stat().st_size for p in disk.rglob(BIG) if p.is_file()),
            what="the half-sent shard's first bytes on the small disk",
        )
        filler = disk / "filler"
        with filler.open("wb") as f:  # take every byte left
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        gate.set()
        worker.join(60)
        err = capsys.readouterr().err
        assert codes == [3], err
        assert "the disk filled up during the fetch (No space left on device)" in error_line(err)
        _assert_not_complete(dest)
        filler.unlink()
        del hub.faults.gate[BIG]
        assert main(["hf://org/model", str(dest), *FAST]) == 0, capsys.readouterr().err
        _assert_complete(dest, hub.repos["org/model"].files)
        offsets = [r for n, r in hub.ranges if n == BIG]
        assert offsets[0] is None and str(offsets[-1]).startswith(
            "bytes="
        )  # resumed, not restarted
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
