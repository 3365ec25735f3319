"""The V-major decode kernel (qwen_npu/patches/kernels/gdn_decode_v_major.py) as a kernel.

Its numbers through SGLang's decode, against float64 and against the K-major kernel it replaces,
are the fourth patch's tests (tests/patches/fixes/test_gdn_decode_state_layout.py); here, what the
kernel's own text says to the project's layout reader, the check the drift guard relies on.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from qwen_npu.patches.fixes import gdn_decode_state_layout as patch
from qwen_npu.upstream import kernels


def test_the_v_major_kernel_reads_as_v_major_to_the_projects_own_reader(
    v_major_kernel: ModuleType,
) -> None:
    source = Path(v_major_kernel.__file__).read_text()
    reading = kernels.decode_addressing(source, patch.V_MAJOR_KERNEL)
    assert reading.verdict == kernels.V_MAJOR, reading
