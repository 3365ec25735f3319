"""Panel builders shared by the dashboards, on grafana-foundation-sdk.

Each helper takes what an on-call reader needs (title, description, unit, queries) plus, where an
alert watches the same quantity, the alert's threshold key and name: the panel then draws the
threshold (a placeholder the chart fills from its values, so the line moves with the alert) and
links to the alert's runbook section. ``Board`` records those pairings for ``defaults.finish``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from grafana_foundation_sdk.builders import common as gcommon
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common as mcommon
from grafana_foundation_sdk.models import dashboard as mdash
from grafana_foundation_sdk.models import prometheus as mprom

from qwen_npu.observability.config import DEFAULT, Config

DATASOURCE = mdash.DataSourceRef(type_val="prometheus", uid="${datasource}")
RUNBOOK_LINK_MARK = "runbook:"  # defaults.finish turns "runbook:<Alert>" into the runbook URL


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class PanelNote:
    """What the finishing pass needs to know about one panel."""

    threshold: str | float | None = None  # config threshold key (or fixed number) drawn
    alerts: tuple[str, ...] = ()  # alerts whose runbook sections the panel links to
    queries: list[Query] = field(default_factory=list)


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
    steps: list[mdash.Threshold]
    if key is None:
        return (
            gdash.ThresholdsConfig()
            .mode(mdash.ThresholdsMode.ABSOLUTE)
            .steps([mdash.Threshold(value=None, color="green")])
        )
    value = cfg.thresholds[key].default if isinstance(key, str) else float(key)
    if direction == "above":
        steps = [
            mdash.Threshold(value=None, color="green"),
            mdash.Threshold(value=value, color="red"),
        ]
    else:
        steps = [
            mdash.Threshold(value=None, color="red"),
            mdash.Threshold(value=value, color="green"),
        ]
    return gdash.ThresholdsConfig().mode(mdash.ThresholdsMode.ABSOLUTE).steps(steps)


class Board:
    """A dashboard under construction: rows, panels and the notes the finishing pass reads."""

    def __init__(self, title: str, description: str, cfg: Config = DEFAULT) -> None:
        self.cfg = cfg
        self.builder = gdash.Dashboard(title).description(description)
        self.notes: dict[str, PanelNote] = {}

    def row(self, title: str) -> None:
        self.builder = self.builder.with_row(gdash.Row(title))

    def _note(self, title: str, note: PanelNote) -> None:
        if title in self.notes:
            raise ValueError(f"duplicate panel title {title!r}")
        self.notes[title] = note

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
        height: int = 8,
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
            .height(height)
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
        if alert:
            p = p.links(_runbook_links(alert))
        self.builder = self.builder.with_panel(p)
        self._note(title, PanelNote(threshold, _names(alert), queries))

    def table(
        self,
        title: str,
        description: str,
        queries: list[Query],
        *,
        alert: str | tuple[str, ...] = (),
        width: int = 12,
        height: int = 8,
    ) -> None:
        p = (
            gtable.Panel()
            .title(title)
            .description(description)
            .datasource(DATASOURCE)
            .targets(_targets(queries, table=True))
            .span(width)
            .height(height)
        )
        if alert:
            p = p.links(_runbook_links(alert))
        self.builder = self.builder.with_panel(p)
        self._note(title, PanelNote(None, _names(alert), queries))


def _names(alert: str | tuple[str, ...]) -> tuple[str, ...]:
    return (alert,) if isinstance(alert, str) else alert


def _runbook_links(alert: str | tuple[str, ...]) -> list[cogbuilder.Builder[mdash.DashboardLink]]:
    return [
        gdash.DashboardLink(f"Runbook: {name}")
        .type(mdash.DashboardLinkType.LINK)
        .url(RUNBOOK_LINK_MARK + name)
        .target_blank(True)
        for name in _names(alert)
    ]


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


def datasource_variable() -> gdash.DatasourceVariable:
    return gdash.DatasourceVariable("datasource").label("Data source").type("prometheus")
