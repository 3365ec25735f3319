"""Panel builders shared by the dashboards (on grafana-foundation-sdk), and the finishing pass.

Where an alert watches a panel's quantity, the panel draws the alert's threshold (a placeholder
the chart fills from its values, so the line moves with the alert) and links to the alert's
runbook section. ``Board.finish`` applies what every dashboard shares.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from grafana_foundation_sdk.builders import common as gcommon
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common as mcommon
from grafana_foundation_sdk.models import dashboard as mdash
from grafana_foundation_sdk.models import prometheus as mprom

from qwen_npu.observability.config import Config, threshold_placeholder

DATASOURCE = mdash.DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


Direction = Literal["above", "below"]


def _targets(queries: list[Query], table: bool = False) -> list[cogbuilder.Builder[Dataquery]]:
    out: list[cogbuilder.Builder[Dataquery]] = []
    for i, q in enumerate(queries):
        t = gprom.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        if q.legend:
            t = t.legend_format(q.legend)
        if q.instant:
            t = t.instant()
        if table:
            t = t.format(mprom.PromQueryFormat.TABLE)
        out.append(t)
    return out


def _thresholds(
    key: str | float | None, direction: Direction, cfg: Config
) -> gdash.ThresholdsConfig:
    """One step at the alert's threshold (a config key) or at a fixed number."""
    steps = [mdash.Threshold(value=None, color="green")]
    if key is not None:
        value = cfg.thresholds[key] if isinstance(key, str) else float(key)
        low, high = ("green", "red") if direction == "above" else ("red", "green")
        steps = [mdash.Threshold(value=None, color=low), mdash.Threshold(value=value, color=high)]
    return gdash.ThresholdsConfig().mode(mdash.ThresholdsMode.ABSOLUTE).steps(steps)


class Board:
    """A dashboard under construction, and each panel's threshold for the finishing pass."""

    def __init__(
        self, title: str, description: str, cfg: Config, *variables: gdash.QueryVariable
    ) -> None:
        self.cfg = cfg
        self.builder = gdash.Dashboard(title).description(description)
        self.builder = self.builder.with_variable(
            gdash.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        for variable in variables:
            self.builder = self.builder.with_variable(variable)
        self.thresholds: dict[str, str | float | None] = {}

    def row(self, title: str) -> None:
        self.builder = self.builder.with_row(gdash.Row(title))

    def _add(
        self,
        title: str,
        panel: gts.Panel | gtable.Panel,
        alert: str | tuple[str, ...],
        threshold: str | float | None,
    ) -> None:
        if title in self.thresholds:
            raise ValueError(f"duplicate panel title {title!r}")
        if alert:
            panel = panel.links(
                [
                    gdash.DashboardLink(f"Runbook: {name}")
                    .type(mdash.DashboardLinkType.LINK)
                    .url(self.cfg.runbook_url(name))
                    .target_blank(True)
                    for name in ((alert,) if isinstance(alert, str) else alert)
                ]
            )
        self.builder = self.builder.with_panel(panel)
        self.thresholds[title] = threshold

    def timeseries(
        self,
        title: str,
        description: str,
        unit: str,
        queries: list[Query],
        *,
        threshold: str | float | None = None,
        direction: Direction = "above",
        alert: str | tuple[str, ...] = (),
        width: int = 12,
        min_val: float | None = None,
        max_val: float | None = None,
    ) -> None:
        p = (
            gts.Panel()
            .title(title)
            .description(description)
            .unit(unit)
            .datasource(DATASOURCE)
            .targets(_targets(queries))
            .thresholds(_thresholds(threshold, direction, self.cfg))
            .span(width)
            .height(8)
            .fill_opacity(10)
        )
        if threshold is not None:
            style = gcommon.GraphThresholdsStyleConfig().mode(
                mcommon.GraphThresholdsStyleMode.LINE_AND_AREA
            )
            p = p.thresholds_style(style)
        if min_val is not None:
            p = p.min(min_val)
        if max_val is not None:
            p = p.max(max_val)
        self._add(title, p, alert, threshold)

    def table(self, title: str, description: str, queries: list[Query], alert: str = "") -> None:
        p = gtable.Panel().title(title).description(description).datasource(DATASOURCE)
        p = p.targets(_targets(queries, table=True)).span(12).height(8)
        self._add(title, p, alert, None)

    def finish(self, filename: str) -> dict[str, Any]:
        """Plain JSON with what every dashboard shares: a ``uid`` stable across regeneration (24
        hex digits of the file name's SHA-256; Grafana allows 40 characters), the conventions,
        the runbook and sibling links, sequential panel ids and the chart placeholder of each
        threshold (filled with the value the alert gets too)."""
        model: dict[str, Any] = json.loads(json.dumps(self.builder.build(), cls=JSONEncoder))
        model["uid"] = "qwen-npu-" + hashlib.sha256(filename.encode()).hexdigest()[:24]
        model["tags"] = ["qwen-npu"]
        model["refresh"] = "30s"
        model["timezone"] = "utc"
        model["time"] = {"from": "now-3h", "to": "now"}
        model["graphTooltip"] = 1  # shared crosshair
        model["editable"] = False
        model["links"] = [
            {
                "title": "Runbook",
                "type": "link",
                "url": self.cfg.runbook_base,
                "icon": "doc",
                "targetBlank": True,
                "tooltip": "docs/runbook.md: what to do for each qwen-npu alert",
            },
            {
                "title": "Qwen NPU dashboards",
                "type": "dashboards",
                "tags": ["qwen-npu"],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            },
        ]
        for panel_id, panel in enumerate(model.get("panels", []), start=1):
            panel["id"] = panel_id
            if panel.get("type") == "row":
                continue
            threshold = self.thresholds[panel["title"]]
            if isinstance(threshold, str):
                steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
                steps[1]["value"] = threshold_placeholder(threshold)
        return model


def query_variable(
    name: str, label: str, query: str, all_value: str | None = ".*"
) -> gdash.QueryVariable:
    """A multi-select label variable. With ``all_value=".*"`` 'All' also matches series without
    the label; with None 'All' means exactly the values the query lists."""
    v = (
        gdash.QueryVariable(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(mdash.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(mdash.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .current(mdash.VariableOption(selected=True, text="All", value="$__all"))
    )
    return v if all_value is None else v.all_value(all_value)
