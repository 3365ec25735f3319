"""qwen_npu.hardware.kernel_contents against the SGLang 0.5.23 installed here and stand-in kernel
packages built from what it imports: complete, one module short (the decode_optimized module, as
in a release from before sgl-kernel-npu PR #740), a name short, an op without the keyword SGLang
passes; installed (a site-packages tree) and straight from a release zip of wheels."""

from __future__ import annotations

import io
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from qwen_npu.hardware import kernel_contents as kc

SGLANG = Path(sysconfig.get_paths()["purelib"])
DECODE = "sgl_kernel_npu.fla.fused_sigmoid_gating_recurrent_decode_optimized"

#: TORCH_LIBRARY schemas as sgl-kernel-npu's csrc/pytorch_extensions.cpp defines them (verify op,
#: conv op) and as the chunk op's host takes its arguments (csrc/.../chunk_gated_delta_rule.cpp);
#: the compiled library holds each as one string.
SCHEMAS = {
    "recurrent_gated_delta_rule": "recurrent_gated_delta_rule(Tensor mix_qkv, Tensor(a!) "
    "recurrent_state, Tensor beta, float scale, Tensor actual_seq_lengths, Tensor "
    "ssm_state_indices, int nk, int nv, Tensor(b!)? intermediate_state=None, Tensor? "
    "cache_indices=None, Tensor? num_accepted_tokens=None, Tensor? g=None, Tensor? gk=None) "
    "-> Tensor",
    "causal_conv1d": "causal_conv1d(Tensor x, Tensor weight, Tensor(a!) conv_states, Tensor? "
    "bias=None, Tensor? query_start_loc=None, Tensor? cache_indices=None, Tensor? "
    "has_initial_state=None, Tensor? num_accepted_tokens=None, int activation_mode=0, int "
    "pad_slot_id=-1, int run_mode=0) -> Tensor",
    "chunk_gated_delta_rule": "chunk_gated_delta_rule(Tensor query, Tensor key, Tensor value, *, "
    "Tensor? beta=None, Tensor? initial_state=None, Tensor? actual_seq_lengths=None, float? "
    "scale=None, Tensor? g=None, Tensor? chunk_state=None) -> (Tensor, Tensor)",
}


def kernel_files(drop_module: str = "", drop_name: str = "", schemas: dict[str, str] | None = None):
    """{path: bytes} of a stand-in sgl_kernel_npu defining what SGLang's path imports."""
    files: dict[str, bytes] = {"sgl_kernel_npu/__init__.py": b""}
    for need in kc.sglang_needs(SGLANG):
        if need.module == drop_module:
            continue
        rel = need.module.replace(".", "/") + ".py"
        parts = rel.split("/")
        for i in range(1, len(parts)):
            files.setdefault("/".join(parts[:i]) + "/__init__.py", b"")
        body = files.get(rel, b"").decode()
        for name in need.names:
            if name != drop_name and f"def {name}(" not in body:
                body += f"def {name}(*args, **kwargs):\n    return None\n"
        files[rel] = body.encode()
    text = b"\x00".join(s.encode() for s in (schemas or SCHEMAS).values())
    files["sgl_kernel_npu/lib/libsgl_kernel_npu.so"] = b"\x7fELF\x00junk\x00" + text + b"\x00"
    return files


def site(tmp_path: Path, files: dict[str, bytes]) -> kc.KernelFiles:
    for rel, data in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return kc.KernelFiles.from_site(tmp_path)


def release_zip(tmp_path: Path, files: dict[str, bytes]) -> Path:
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as w:
        for rel, data in files.items():
            w.writestr(rel, data)
        w.writestr("sgl_kernel_npu-2026.9.0.post9.dist-info/RECORD", "")
    path = tmp_path / "sgl-kernel-npu-2026.9.0.post9-torch2.10.0-py312-cann9.1.0-910b-x86_64.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("sgl_kernel_npu-2026.9.0.post9-cp312-cp312-linux_x86_64.whl", wheel.getvalue())
        z.writestr("deep_ep-1.0-cp312-cp312-linux_x86_64.whl", b"PK\x05\x06" + b"\x00" * 18)
    return path


def test_sglangs_own_imports_are_the_list() -> None:
    modules = {n.module for n in kc.sglang_needs(SGLANG)}
    assert {
        DECODE,
        "sgl_kernel_npu.activation.fused_sigmoid_mul",
        "sgl_kernel_npu.fla.chunk",
    } <= modules
    calls = {c.name: c for c in kc.sglang_op_calls(SGLANG)}
    assert set(calls) == set(SCHEMAS)
    assert "chunk_state" in calls["chunk_gated_delta_rule"].keywords
    assert "intermediate_state" in calls["recurrent_gated_delta_rule"].keywords


def test_a_complete_kernel_passes(tmp_path: Path) -> None:
    verdict = kc.check(SGLANG, site(tmp_path, kernel_files()))
    assert verdict.missing == [] and verdict.checked >= 15


def test_a_kernel_without_the_decode_optimized_module_fails_naming_it(tmp_path: Path) -> None:
    verdict = kc.check(SGLANG, site(tmp_path, kernel_files(drop_module=DECODE)))
    (missing,) = verdict.missing
    assert missing.startswith(f"module {DECODE} (imported by SGLang at ")
    assert "gdn_triton.py:" in missing


def test_a_missing_name_and_a_missing_op_keyword_are_named(tmp_path: Path) -> None:
    schemas = dict(SCHEMAS)
    schemas["chunk_gated_delta_rule"] = schemas["chunk_gated_delta_rule"].replace(
        ", Tensor? chunk_state=None", ""
    )
    files = kernel_files(drop_name="conv_state_rollback", schemas=schemas)
    missing = kc.check(SGLANG, site(tmp_path, files)).missing
    assert any(
        m.startswith("sgl_kernel_npu.mamba.mamba_state_update_triton.conv_state_rollback")
        for m in missing
    ), missing
    assert any(
        m.startswith("op torch.ops.npu.chunk_gated_delta_rule argument(s) chunk_state")
        for m in missing
    ), missing
    del schemas["recurrent_gated_delta_rule"]
    no_op = kc.check(SGLANG, site(tmp_path / "b", kernel_files(schemas=schemas))).missing
    assert any(
        m.startswith("op torch.ops.npu.recurrent_gated_delta_rule (called at") for m in no_op
    )


def test_the_release_zip_is_read_before_anything_is_installed(tmp_path: Path) -> None:
    good = release_zip(tmp_path, kernel_files())
    assert kc.check(SGLANG, kc.KernelFiles.from_zip(good)).missing == []
    (tmp_path / "bad").mkdir()
    bad = release_zip(tmp_path / "bad", kernel_files(drop_module=DECODE))
    done = subprocess.run(
        [sys.executable, "-m", "qwen_npu.hardware.kernel_contents", "--zip", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    (verdict,) = done.stdout.splitlines()
    assert verdict.startswith("qwen_npu.hardware level=ERROR event=kernel_contents_missing ")
    assert DECODE in verdict and "SGL_KERNEL_NPU_VERSION" in verdict
    assert f"missing: module {DECODE}" in done.stderr


@pytest.mark.parametrize("content", [b"not a zip", None])
def test_a_bad_zip_is_one_line_not_a_traceback(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "x.zip"
    if content is None:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("README", "no wheels")
    else:
        path.write_bytes(content)
    assert kc.main(["--zip", str(path)]) == 2


def test_the_installed_site_without_the_kernel_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """This venv has no sgl_kernel_npu (the stubs are not on its path): the check says so."""
    assert kc.main(["--site", str(SGLANG)]) == 1
    assert "the sgl_kernel_npu package itself" in capsys.readouterr().out


# --- issue 41: the engine-start lookup imports what SGLang imports, and says what it searched ----

#: A stand-in torch_npu (the real one needs an NPU) and, in the module SGLang imports from
#: sgl_kernel_npu.fla, the op registration a release may do on a submodule's import (#747's
#: chunk_gated_delta_rule comes with its own Python wrapper): the ops are real torch ops in the
#: ``npu`` namespace, and the module maps a compiled library as an extension or ctypes would.
REGISTERING_MODULE = "sgl_kernel_npu.fla.chunk"
REGISTRATION = """
import ctypes as _ctypes
import os as _os

import torch as _torch

_lib = _torch.library.Library("npu", "FRAGMENT")
for _schema in {schemas!r}:
    _lib.define(_schema)
_so = _os.path.join(_os.path.dirname(__file__), "..", "lib", "libsgl_kernel_npu.so")
_handle = _ctypes.CDLL(_os.path.realpath(_so))
"""


def registering_site(tmp_path: Path, register_in: str | None) -> Path:
    """Stand-in packages on a path of their own: the GDN ops registered when ``register_in`` is
    imported (None: never), a real shared library under sgl_kernel_npu/lib/."""
    root = tmp_path / "stand-ins"
    files = kernel_files()
    files["torch_npu/__init__.py"] = b""
    files["sgl_kernel_npu/lib/libsgl_kernel_npu.so"] = Path(zlib_extension()).read_bytes()
    if register_in is not None:
        rel = register_in.replace(".", "/") + ".py"
        files[rel] = files[rel] + REGISTRATION.format(schemas=list(SCHEMAS.values())).encode()
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def zlib_extension() -> str:
    import zlib

    path = getattr(zlib, "__file__", None)
    if path is None:
        pytest.skip("zlib is built into this interpreter: no shared library to map")
    return str(path)


def registered(stand_ins: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "qwen_npu.hardware.kernel_contents", "--registered",
         "--site", str(SGLANG)],
        env={"PYTHONPATH": str(stand_ins), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_an_op_a_submodule_registers_is_found_after_importing_what_sglang_imports(
    tmp_path: Path,
) -> None:
    assert REGISTERING_MODULE in {n.module for n in kc.sglang_needs(SGLANG)}
    done = registered(registering_site(tmp_path, REGISTERING_MODULE))
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = done.stdout.splitlines()
    assert verdict.startswith("qwen_npu.hardware level=INFO event=npu_ops_registered ")
    imported = verdict.split(" imported=", 1)[1].split()[0].split(",")
    assert imported[:2] == ["torch_npu", "sgl_kernel_npu"]
    assert {REGISTERING_MODULE, DECODE} <= set(imported)
    assert " libraries=sgl_kernel_npu/lib/libsgl_kernel_npu.so" in verdict


def test_an_op_nothing_registers_is_named_with_what_was_searched(tmp_path: Path) -> None:
    done = registered(registering_site(tmp_path, None))
    assert done.returncode == 1
    (verdict,) = done.stdout.splitlines()
    assert "event=npu_op_missing ops=" in verdict and "chunk_gated_delta_rule" in verdict
    assert f",{REGISTERING_MODULE}" in verdict and " libraries=none" in verdict


def test_a_module_sglang_imports_that_does_not_import_is_named(tmp_path: Path) -> None:
    stand_ins = registering_site(tmp_path, REGISTERING_MODULE)
    (stand_ins / (DECODE.replace(".", "/") + ".py")).write_text("raise OSError('no libascend')\n")
    done = registered(stand_ins)
    assert done.returncode == 1
    (verdict,) = done.stdout.splitlines()
    assert f"event=npu_ops_unavailable module={DECODE} " in verdict and "no libascend" in verdict


def test_the_build_time_line_names_the_packages_and_libraries_it_searched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zip_path = release_zip(tmp_path, kernel_files())
    assert kc.main(["--zip", str(zip_path)]) == 0
    out = capsys.readouterr().out
    assert "event=kernel_contents_ok " in out
    assert " packages=sgl_kernel_npu,attentions " in out
    assert " libraries=sgl_kernel_npu/lib/libsgl_kernel_npu.so" in out
