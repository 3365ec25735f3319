"""docs/perf.md's generated part and `make perf`'s step that writes it (tools/perf/assemble.py).

The slow benchmarks are not run here: the assembler is fed reports made in the test, and the page
itself must already be what the assembler writes (re-assembling it with no report changes nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.paths import DOCS
from tools.perf import assemble

PAGE = DOCS / "perf.md"


def _page(blocks: dict[str, str]) -> str:
    return "# Figures\n\nby hand\n\n" + assemble.section(blocks) + "\n"


def test_the_page_holds_the_generated_part_in_the_assembler_s_format() -> None:
    text = PAGE.read_text()
    assert text.count(assemble.BEGIN) == 1 and text.count(assemble.END) == 1
    assert assemble.assemble(text, {}) == text
    parts = assemble.blocks(assemble.split(text)[1])
    assert {"loadtest", "patches", "preflight", "sidecar", "sim"} <= set(parts)
    assert all(body for body in parts.values())


def test_a_report_replaces_its_block_and_leaves_the_others() -> None:
    page = _page({"sim": "old sim figures", "sidecar": "sidecar figures"})
    new = assemble.assemble(page, {"sim": "# qwen-npu sim\n\n## Capacity\n\n22,200 tok/s\n"})
    parts = assemble.blocks(assemble.split(new)[1])
    assert parts["sidecar"] == "sidecar figures"
    assert parts["sim"] == "#### qwen-npu sim\n\n##### Capacity\n\n22,200 tok/s"
    assert new.startswith("# Figures\n\nby hand\n\n") and "old sim figures" not in new


def test_a_new_report_gets_its_block_in_order() -> None:
    new = assemble.assemble(_page({"sim": "s"}), {"fetch": "f"})
    assert list(assemble.blocks(assemble.split(new)[1])) == ["fetch", "sim"]


def test_a_page_without_its_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="marker"):
        assemble.assemble("# Figures\n", {"sim": "s"})


def test_main_writes_the_page_and_names_a_broken_one_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "perf"
    reports.mkdir()
    (reports / "preflight.md").write_text("# preflight\n\n0.49 s\n")
    page = tmp_path / "perf.md"
    page.write_text(_page({"preflight": "old"}))
    assert assemble.main([str(reports), "--page", str(page)]) == 0
    assert "#### preflight\n\n0.49 s" in page.read_text()
    page.write_text("# no markers\n")
    assert assemble.main([str(reports), "--page", str(page)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(page) in err[0] and "marker" in err[0]
