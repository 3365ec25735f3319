"""Request dependencies as ``Annotated`` aliases: the app's monitor.

Why this exists: routes read the cached state through ``MonitorDep`` instead of reaching for a
global, so a test builds an app with its own settings and fake engine and nothing leaks between
apps.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from qwen_npu.serve.sidecar.monitor import Monitor


def get_monitor(request: Request) -> Monitor:
    monitor: Monitor = request.app.state.monitor
    return monitor


MonitorDep = Annotated[Monitor, Depends(get_monitor)]
