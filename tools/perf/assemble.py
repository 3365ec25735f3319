"""``make perf``'s last step: the reports in out/perf/ assembled into docs/perf.md, the one home of
every timing figure the docs quote. Between its two markers the page holds one block per report;
a block whose report is absent this time stays as it was (``make perf-sim`` then this step
refreshes the simulator's block alone). Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN = "<!-- make perf: generated from out/perf/*.md below; edit the tools, not this part -->"
END = "<!-- make perf: generated above -->"
BLOCK = re.compile(r"^### `out/perf/([\w.-]+)\.md`$", re.M)


def blocks(section: str) -> dict[str, str]:
    """part -> its block's body, from a generated section."""
    parts = BLOCK.split(section)  # text before, then name, body, name, body, ...
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def demote(report: str) -> str:
    """The report's Markdown headings three levels down, so they nest under the block heading."""
    return re.sub(r"^(#{1,3}) ", lambda m: "#" * (len(m.group(1)) + 3) + " ", report, flags=re.M)


def section(parts: dict[str, str]) -> str:
    """The generated section (markers included) for ``parts`` (part -> body), sorted by part."""
    body = "\n\n".join(
        f"### `out/perf/{part}.md`\n\n{parts[part].strip()}" for part in sorted(parts)
    )
    return f"{BEGIN}\n\n{body}\n\n{END}"


def split(page: str) -> tuple[str, str, str]:
    """(before, between, after) the page's two markers; ValueError unless each is there once."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"the page must hold each marker once, in order: {BEGIN} ... {END}")
    head, rest = page.split(BEGIN, 1)
    between, tail = rest.split(END, 1)
    return head, between, tail


def assemble(page: str, reports: dict[str, str]) -> str:
    """``page`` with its generated section rebuilt: the old blocks, each replaced by its report."""
    head, old, tail = split(page)
    parts = blocks(old) | {part: demote(text) for part, text in reports.items()}
    return head + section(parts) + tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.perf.assemble", description=__doc__)
    parser.add_argument("reports", type=Path, help="the folder of the reports (out/perf)")
    parser.add_argument("--page", type=Path, default=Path("docs/perf.md"))
    args = parser.parse_args(argv)
    found = sorted(args.reports.glob("*.md")) if args.reports.is_dir() else []
    try:
        text = assemble(args.page.read_text(), {p.stem: p.read_text() for p in found})
    except (OSError, ValueError) as exc:
        print(f"tools.perf.assemble: {args.page}: {exc}; restore the markers", file=sys.stderr)
        return 2
    args.page.write_text(text)
    print(f">> {args.page}: {len(found)} report(s) from {args.reports} assembled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
