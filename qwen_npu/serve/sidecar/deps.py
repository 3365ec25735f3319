"""Request dependencies as ``Annotated`` aliases: the app's settings and its monitor.

Why this exists: routes read the cached state through ``MonitorDep`` instead of reaching for a
global, so a test builds an app with its own settings and fake engine and nothing leaks between
apps.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from qwen_npu.serve.sidecar.config import Settings
from qwen_npu.serve.sidecar.monitor import Monitor


def get_monitor(request: Request) -> Monitor:
    monitor: Monitor = request.app.state.monitor
    return monitor


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


MonitorDep = Annotated[Monitor, Depends(get_monitor)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
