"""`patches verify --build --npu` (issue 33): in the NPU image the real sgl-kernel-npu is
installed, so the build reads the decode kernel and the mover against the pool SGLang 0.5.23
allocates (V-major, contiguous), and a kernel file it cannot read fails the build instead of
passing as unknown. Stand-in kernel trees beside SGLang's real source."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

from qwen_npu.patches import buildcheck
from qwen_npu.patches.gdn_contract import DECODE_FILE, MOVER_FILE
from tests.patches import gdn_kernels
from tools.paths import STUBS

SGLANG = Path(sysconfig.get_paths()["purelib"]) / "sglang"


def site(tmp_path: Path, *, decode: str | None = "k-major") -> Path:
    root = tmp_path / "site"
    (root / "sgl_kernel_npu" / "mamba").mkdir(parents=True)
    (root / "sglang").symlink_to(SGLANG)
    shutil.copy(STUBS / "sgl_kernel_npu" / MOVER_FILE, root / "sgl_kernel_npu" / MOVER_FILE)
    if decode is not None:
        (root / "sgl_kernel_npu" / "fla").mkdir()
        (root / "sgl_kernel_npu" / DECODE_FILE).write_text(gdn_kernels.kernel_source(decode))
    return root


def test_the_npu_build_reads_the_kernels_against_the_v_major_pool(tmp_path: Path) -> None:
    links = buildcheck.gdn_readable(str(site(tmp_path)), npu=True, decode_patch="applied")
    assert links["mover"]["verdict"] == "pass", links["mover"]
    decode = links["decode_kernel"]
    assert (
        decode["verdict"] == "pass" and "gdn-decode-state-layout is applied" in decode["evidence"]
    )
    # Without the patch (its build row not pinned) the K-major kernel against the pool fails.
    unpatched = buildcheck.gdn_readable(str(site(tmp_path / "b")), npu=True, decode_patch="drifted")
    assert unpatched["decode_kernel"]["verdict"] == "fail"


def test_an_unreadable_kernel_fails_the_npu_build_and_is_unknown_elsewhere(tmp_path: Path) -> None:
    tree = str(site(tmp_path, decode=None))
    npu = buildcheck.gdn_readable(tree, npu=True, decode_patch="applied")["decode_kernel"]
    assert npu["verdict"] == "fail"
    assert npu["evidence"].startswith("unreadable in the NPU image: no sgl_kernel_npu/")
    cpu = buildcheck.gdn_readable(tree, npu=False, decode_patch="applied")["decode_kernel"]
    assert cpu["verdict"] == "unknown"
