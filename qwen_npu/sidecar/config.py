"""The sidecar's settings: one ``Settings(BaseSettings)`` class and its flags.

Each knob is declared, typed and validated once; pydantic-settings derives its variable
``QWEN_NPU_<FIELD>`` and, unless ``EnvOnly``, its flag ``--<field-with-dashes>`` (or the short
form in ``SHORTCUTS``). A bad value stops the start with one line naming both and the fix.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, CliSettingsSource, CliSuppress, SettingsConfigDict

from qwen_npu.checkpoint.model_config import ModelConfigError, read_model_config
from qwen_npu.cli_parser import OneLineParser, field_number
from qwen_npu.ports import LOCAL_ENGINE_URL, SIDECAR_PORT

_T = TypeVar("_T")
ENV_PREFIX = "QWEN_NPU_"
#: Field -> the short flag it also answers to (``--host`` beside ``--sidecar-host``).
SHORTCUTS: dict[str, str] = {"sidecar_host": "host", "sidecar_port": "port"}
#: A field without a flag: the environment (the chart) sets it. The other fields have both.
EnvOnly = CliSuppress[_T]

DEFAULT_CANARY_PROMPT = (
    "List the planets of the solar system in order from the Sun, one per line, with one short "
    "fact about each."
)


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line naming the key and the fix."""


class Settings(BaseSettings):
    """Every setting of the sidecar; environment names are ``QWEN_NPU_`` + the upper-case field."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        frozen=True,
        cli_kebab_case=True,
        cli_shortcuts={field.replace("_", "-"): short for field, short in SHORTCUTS.items()},
        cli_hide_none_type=True,
        cli_avoid_json=True,
    )

    # Where things are (each also a flag; the description is its --help).
    engine_url: str = Field(
        LOCAL_ENGINE_URL, description="Base URL of the SGLang engine (same pod)."
    )
    sidecar_host: str = Field("0.0.0.0", description="Address the sidecar listens on.")
    sidecar_port: int = Field(
        SIDECAR_PORT, ge=1, le=65535, description="Port the sidecar listens on."
    )
    state_dir: Path | None = Field(
        None, description="Folder of the patches' state.json (shared volume); unset: unknown."
    )
    model_dir: Path | None = Field(
        None, description="Checkpoint folder (or config.json) for the predicted UB plan."
    )
    tp_size: int = Field(1, ge=1, description="Tensor parallel size (heads per rank = heads / tp).")
    # Environment only (docs/sidecar.md tables their meaning); a secret on the command line would
    # show in ps and in the pod spec.
    mamba_ssm_dtype: EnvOnly[Literal["float32", "bfloat16", "float16"] | None] = None
    engine_api_key: EnvOnly[SecretStr | None] = None
    engine_api_key_file: EnvOnly[Path | None] = None
    startup_budget_s: EnvOnly[float] = Field(1800.0, gt=0)
    liveness_failures: EnvOnly[int] = Field(3, ge=1)
    poll_interval_s: EnvOnly[float] = Field(5.0, gt=0)
    health_timeout_s: EnvOnly[float] = Field(10.0, gt=0)  # keep under SGLang's 20 s
    info_interval_s: EnvOnly[float] = Field(15.0, gt=0)
    request_timeout_s: EnvOnly[float] = Field(5.0, gt=0)
    max_response_bytes: EnvOnly[int] = Field(8 * 1024 * 1024, ge=1024)
    canary_interval_s: EnvOnly[float] = Field(60.0, ge=0)  # 0: off
    canary_timeout_s: EnvOnly[float] = Field(60.0, gt=0)
    canary_prompt: EnvOnly[str] = Field(DEFAULT_CANARY_PROMPT, min_length=1)
    canary_max_tokens: EnvOnly[int] = Field(64, ge=8, le=4096)
    canary_golden_file: EnvOnly[Path | None] = None
    canary_degeneration_max: EnvOnly[float] = Field(0.5, ge=0, le=1)
    canary_golden_min_ratio: EnvOnly[float] = Field(0.5, ge=0, le=1)
    log_level: EnvOnly[Literal["debug", "info", "warning", "error"]] = "info"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def canary_enabled(self) -> bool:
        return self.canary_interval_s > 0

    @field_validator("engine_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")) or len(value) < 10:
            raise ValueError(f"not an http(s) URL; use e.g. {LOCAL_ENGINE_URL}")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.engine_api_key is not None and self.engine_api_key_file is not None:
            raise ValueError(
                "engine_api_key and engine_api_key_file are both set; set only one of them"
            )
        return self

    def api_key(self) -> str | None:
        """The engine's bearer token (from the variable or the file), or None."""
        if self.engine_api_key is not None:
            return self.engine_api_key.get_secret_value() or None
        if self.engine_api_key_file is not None:
            return self.engine_api_key_file.read_text(encoding="utf-8").strip() or None
        return None

    def golden_text(self) -> str | None:
        """The golden canary output, or None when no golden file is configured."""
        if self.canary_golden_file is None:
            return None
        return self.canary_golden_file.read_text(encoding="utf-8").strip()

    def public_dict(self) -> dict[str, Any]:
        """The settings as JSON-able values, secrets redacted (for /status and the start log)."""
        data = self.model_dump(mode="json")
        if data.get("engine_api_key"):
            data["engine_api_key"] = "***"
        return data


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


#: Field -> the flag messages and docs name (the short form where there is one), for the fields
#: that have a flag (EnvOnly's CliSuppress marks the others).
FLAGS: dict[str, str] = {
    name: "--" + SHORTCUTS.get(name, name.replace("_", "-"))
    for name, info in Settings.model_fields.items()
    if argparse.SUPPRESS not in info.metadata
}


def _where(field: str) -> str:
    return env_name(field) + (f" / {FLAGS[field]}" if field in FLAGS else "")


def cli_parser(description: str) -> tuple[OneLineParser, CliSettingsSource[Settings]]:
    """The ``qwen-npu sidecar`` parser with one flag per field, and the source that reads it."""
    parser = OneLineParser(prog="qwen-npu sidecar", description=description)
    source: CliSettingsSource[Settings] = CliSettingsSource(Settings, root_parser=parser)
    for action in parser._actions:  # the numbers range-checked by the parser, from the fields
        number = field_number(Settings.model_fields.get(action.dest))
        if number is not None:
            action.type = number
    return parser, source


def describe_error(exc: ValidationError) -> str:
    """One line naming the first bad key (environment variable and flag) and the fix."""
    first = exc.errors()[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "__root__"]
    field = loc[0] if loc else ""
    msg = str(first["msg"]).removeprefix("Value error, ")
    if field not in Settings.model_fields:
        return f"settings: {msg}"
    value = first.get("input")
    shown = f" = {value!r}" if isinstance(value, str | int | float) else ""
    return f"setting {_where(field)}{shown}: {msg}; fix the value or unset it"


def load_settings(*, cli: CliSettingsSource[Settings] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment, with the parsed flags (``cli``) or ``overrides`` on top.

    The files the settings name are read here too: a missing one is a start error (SettingsError,
    one line), not a poller error later.
    """
    try:
        settings = Settings(
            _cli_settings_source=cli,  # type: ignore[call-arg]
            **{k: v for k, v in overrides.items() if v is not None},
        )
    except ValidationError as exc:
        raise SettingsError(describe_error(exc)) from None
    for field in ("engine_api_key_file", "canary_golden_file"):
        path = getattr(settings, field)
        try:
            if path is not None:
                path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise SettingsError(
                f"setting {env_name(field)} = {str(path)!r}: cannot read the file ({reason}); "
                "mount it or unset the variable"
            ) from None
    if settings.model_dir is not None:
        try:
            read_model_config(settings.model_dir, environ={})
        except ModelConfigError as exc:
            raise SettingsError(f"setting {_where('model_dir')}: {exc}") from None
    return settings
