"""The architectures preflight calls ours are the ones SGLang serves a Qwen3.5/3.6 checkpoint as.

``SUPPORTED_ARCHITECTURES`` (qwen_npu/checkpoint/model_config.py) is a copy: held here equal to the
``EntryClass`` lists of the pinned SGLang's qwen3_5.py and qwen3_5_text.py, read from their source
(importing them would load torch).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from qwen_npu.checkpoint.model_config import SUPPORTED_ARCHITECTURES

MODULES = ("qwen3_5.py", "qwen3_5_text.py")


def _entry_classes(path: Path) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
        ):
            value = node.value
            items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
            return [item.id for item in items if isinstance(item, ast.Name)]
    raise AssertionError(f"{path}: no EntryClass")


def test_supported_architectures_are_sglangs_qwen3_5_entry_classes() -> None:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    models = Path(next(iter(spec.submodule_search_locations))) / "srt" / "models"
    found = [name for module in MODULES for name in _entry_classes(models / module)]
    assert sorted(found) == sorted(SUPPORTED_ARCHITECTURES)
