"""Which metric names a PromQL expression reads, without a PromQL parser.

Good enough for the expressions this package writes (and checked against a real Prometheus by the
end-to-end test): strings, label matchers, range selectors, grouping clauses and chart
placeholders are blanked out, and what remains that looks like an identifier and is not a
function call, keyword or number is a metric name.
"""

from __future__ import annotations

import re

_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
     "bool", "offset", "atan2", "inf", "nan"}
)  # fmt: skip
_STRIP = (
    re.compile(r"\$\{[^}]*\}"),  # ${thresholds.x} chart placeholders
    re.compile(r'"(?:[^"\\]|\\.)*"'),  # strings (label values, label_values() args)
    re.compile(r"\{[^}]*\}"),  # label matchers
    re.compile(r"\[[^\]]*\]"),  # range and subquery selectors
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
)
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    text = expr
    for pattern in _STRIP:
        text = pattern.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names
