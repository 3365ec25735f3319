"""The simulator's settings: ``SimConfig`` (pydantic-settings) and ``build``, which layers them.

One kebab-case name per key: a YAML key (``ttft-ms: 50``), a flag (``--ttft-ms 50``) and,
upper-cased with ``QWEN_NPU_SIM_``, an environment variable. A YAML layer may name a chart profile
(``chart-profile:``, ``chart-values:``): the engine's flags then come from the chart's render
(chart_engine.py). ``build`` calls the sources itself (YAML, environment, flags as init values), so
the start line can say which layer set each key and an error's key names the layer that gave it.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasGenerator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from qwen_npu.ports import ENGINE_PORT
from qwen_npu.sim.chart_engine import ChartProfileError, engine_keys

ENV_PREFIX = "QWEN_NPU_SIM_"
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
_NONE_WORDS = ("", "none", "null")
#: Keys whose value turns speculative decoding on when speculative-algorithm is not given.
SPEC_IMPLYING = ("accept-length", "accept-distribution", "accept-rate")


class ConfigError(ValueError):
    """Bad simulator configuration; the message is one line naming the source, key and fix."""


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _f(default: Any, help_: str, **limits: Any) -> Any:
    return Field(default, description=help_, **limits)


def _cost(default: float | None, help_: str) -> Any:
    """A duration or price: a finite number >= 0."""
    return Field(default, description=help_, ge=0, allow_inf_nan=False)


def _fraction(default: float | None, help_: str) -> Any:
    return Field(default, description=help_, ge=0, le=1)


class SimConfig(BaseSettings):
    """Every knob of the simulator. Field ``foo_bar`` is key/flag ``foo-bar``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        enable_decoding=False,  # accept-distribution is comma-separated there too
        coerce_numbers_to_str=True,
        alias_generator=AliasGenerator(serialization_alias=_kebab),
    )

    # Server
    host: str = _f("127.0.0.1", "address to listen on")
    port: int = _f(ENGINE_PORT, "port to listen on (SGLang's default)", ge=1, le=65535)
    model_path: str = _f("Qwen/Qwen3.6-35B-A3B-w8a8-sim", "model_path reported by /model_info")
    served_model_name: str = _f("", "model name in /v1/models and metric labels (model-path)")
    log_level: Literal["debug", "info", "warning", "error"] = _f(
        "info", "debug, info, warning or error"
    )
    # Timing: prefill
    ttft_ms: float = _cost(50.0, "time to first token of an unqueued request, before prompt cost")
    prefill_ms_per_1k_tokens: float = _cost(0.0, "TTFT added per 1000 prompt tokens")
    prefill_serial: bool = _f(
        False, "prefills run one batch at a time, so TTFT grows with arrivals"
    )
    prefill_batch_tokens: int = _f(
        0, "with prefill-serial: prompt tokens one prefill batch may hold (0 = one request)", ge=0
    )
    # Timing: decode (docs/simulator.md, "The timing model")
    itl_ms: float = _f(
        10.0,
        "one decode step (one verify step with speculative decoding)",
        gt=0,
        allow_inf_nan=False,
    )
    itl_ms_per_running_req: float = _cost(
        0.0, "decode step time added per running request beyond 1"
    )
    step_fixed_ms: float | None = _cost(
        None, "fixed part of one engine step; when set, steps are priced per token (not itl-ms)"
    )
    step_ms_per_token: float = _cost(0.0, "step time per token in the batch (with step-fixed-ms)")
    draft_step_ms: float = _cost(0.0, "draft model's cost per draft step (with step-fixed-ms)")
    max_running_requests: int = _f(64, "requests decoded at once; the rest wait in the queue", ge=1)
    max_queued_requests: int = _f(4096, "queue bound; beyond it /generate answers 503", ge=0)
    startup_delay_s: float = _cost(
        0.0, "seconds of 503 from /health, /ready and /generate at start"
    )
    health_check_timeout_s: float = _f(
        20.0, "/health is 503 when its 1-token generate is late", gt=0
    )
    health_check_poll_s: float = _f(
        1.0, "/health looks for engine output this often (SGLang: 1)", gt=0
    )
    max_total_tokens: int = _f(
        500000, "KV pool size in tokens; sglang:token_usage divides by it", ge=1
    )
    # Speculative decoding (MTP)
    speculative_algorithm: Literal["none", "NEXTN", "EAGLE", "EAGLE3"] = _f(
        "none", "none or NEXTN/EAGLE/EAGLE3 (MTP-like verify steps)"
    )
    speculative_num_steps: int = _f(3, "draft steps per verify step", ge=1, le=16)
    speculative_eagle_topk: int = _f(
        1, "reported; with 1 a verify step has num-steps+1 tokens", ge=1
    )
    speculative_num_draft_tokens: int = _f(
        4, "tokens per request in a verify step (topk > 1)", ge=1
    )
    accept_rate: float | None = _fraction(
        None, "chance the first draft token is accepted (implies NEXTN when set)"
    )
    accept_decay: float = _fraction(1.0, "accept-rate's factor per further draft position")
    accept_length: float | None = _f(
        None, "mean tokens per verify step, 1..num-steps+1 (implies NEXTN; over accept-rate)", ge=1
    )
    accept_distribution: list[float] | None = _f(
        None, "probabilities of 1..num-steps+1 tokens per verify step (overrides accept-length)"
    )
    # Output
    seed: int = _f(0, "seed of sampled output, acceptance draws and error draws")
    vocab_size: int = _f(151936, "token ids are drawn below this", ge=2)
    context_length: int = _f(262144, "prompt + max_new_tokens beyond this answers 400", ge=2)
    default_max_new_tokens: int = _f(128, "max_new_tokens when a request gives none", ge=1)
    # Reported shape
    tp_size: int = _f(2, "reported in /server_info", ge=1)
    # Faults (also changeable at run time through PATCH /sim/faults)
    error_rate: float = _fraction(0.0, "fraction of generate requests answered with HTTP 500")
    hang_health: bool = _f(False, "/health and /health_generate hang until cleared")
    hang_generate: bool = _f(False, "generation emits nothing until cleared")
    crash_after_s: float = _cost(0.0, "exit 1 this many seconds after start (0 = never)")
    metrics_delay_s: float = _cost(0.0, "/metrics answers this many seconds late")
    metrics_malformed: bool = _f(False, "/metrics returns text Prometheus rejects")
    garbled: bool = _f(False, "greedy output degenerates into repetition")
    garble_after_tokens: int = _f(8, "tokens of normal output before the repetition starts", ge=0)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # constructing reads no environment: build() calls the sources

    @field_validator("*", mode="before")
    @classmethod
    def _blank(cls, value: Any, info: ValidationInfo) -> Any:
        """An empty or "none" string: false for a boolean, none for an optional key."""
        if isinstance(value, str) and value.strip().lower() in _NONE_WORDS:
            f = cls.model_fields[str(info.field_name)]
            if f.annotation is bool and not value.strip():
                return False
            if f.default is None:
                return None
        return value

    @field_validator("accept_distribution", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() not in _NONE_WORDS:
            return [x.strip() for x in value.split(",")]
        return value

    @model_validator(mode="after")
    def _between_fields(self) -> SimConfig:
        """The rules between keys, every broken one named (one line, ``key: problem; ...``)."""
        errs = []
        if self.step_fixed_ms is not None and self.step_fixed_ms + self.step_ms_per_token <= 0:
            errs.append("step-fixed-ms: step-fixed-ms + step-ms-per-token must be > 0 ms")
        top = self.speculative_num_steps + 1
        if self.accept_length is not None and self.accept_length > top:
            errs.append(
                f"accept-length: {self.accept_length} must lie in 1..{top} "
                "(speculative-num-steps + 1)"
            )
        dist = self.accept_distribution
        if dist is not None and len(dist) != top:
            errs.append(
                f"accept-distribution: has {len(dist)} entries; give {top} "
                f"(for 1..{top} tokens per verify step)"
            )
        if dist is not None and not (all(p >= 0 for p in dist) and abs(sum(dist) - 1.0) < 1e-6):
            errs.append(f"accept-distribution: probabilities {dist} must be >= 0 and sum to 1")
        if errs:
            raise ValueError("; ".join(errs))
        return self

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    @property
    def spec_enabled(self) -> bool:
        return self.speculative_algorithm != "none"


#: Every key (kebab-case) and its pydantic field (``.description`` is the help, ``.default``).
FIELDS: dict[str, FieldInfo] = {_kebab(name): f for name, f in SimConfig.model_fields.items()}
_HINTS = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "list": "a list of numbers (comma-separated on the command line)",
    "string": "a string",
}


def _problem(err: Any) -> str:
    """What is wrong with one key, from its pydantic error."""
    key = _kebab(str(err["loc"][0]))
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(key, list(FIELDS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "see qwen-npu sim --help for the keys"
        return f"unknown key {key!r}; {hint}"
    kind = "list" if len(err["loc"]) > 1 else err["type"].split("_")[0]
    value = err["input"]
    if kind in _HINTS:
        none = " or none" if FIELDS[key].default is None and kind != "list" else ""
        return f"key {key}: {value!r} is not {_HINTS[kind]}{none}"
    return f"key {key}: {value!r}: {err['msg'][0].lower()}{err['msg'][1:]}"


class _Yaml(YamlConfigSettingsSource):
    """A profile or --config file: kebab-case keys, chart-profile expanded; errors name the file."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        # lazy: an extra's (pyproject.toml); the base install goes without
        import yaml

        path = Path(file_path)
        try:
            data = super()._read_file(path)
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "syntax error"
            raise ConfigError(f"{path}: not valid YAML ({first}); fix the file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping of key: value; fix the file")
        data = {_kebab(str(k)): v for k, v in data.items()}
        chart_profile = data.pop("chart-profile", None)
        chart_values = data.pop("chart-values", None) or {}
        if chart_profile is not None:  # the engine's flags as the chart renders them
            if not isinstance(chart_values, dict):
                raise ConfigError(f"{path}: chart-values must be a mapping of chart values")
            try:
                engine = engine_keys(str(chart_profile), chart_values)
            except ChartProfileError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            restated = sorted(set(engine) & set(data))
            if restated:
                raise ConfigError(
                    f"{path}: {', '.join(restated)} come from chart-profile {chart_profile}; "
                    "drop them here (or change the chart profile / chart-values)"
                )
            data = {**engine, **data}
        return {k.replace("-", "_"): v for k, v in data.items()}


def _yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():  # the source would skip it
        found = "a folder, not a file" if path.is_dir() else "file not found"
        raise ConfigError(f"{path}: {found}; pass an existing {what}")
    return _Yaml(SimConfig, yaml_file=path)()


def profile_path(name: str) -> Path:
    """The packaged profile ``name`` (file stem); ConfigError lists the known ones."""
    path = PROFILES_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(list_profiles()) or "none"
        own = name.endswith((".yaml", ".yml"))
        hint = "; a YAML file of your own goes to --config" if own else ""
        raise ConfigError(f"profile {name!r}: not found; use one of: {known}{hint}")
    return path


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def _env_layers(env: Mapping[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
    """One layer per QWEN_NPU_SIM_* variable (so an error names it); a mistyped one is an error."""
    source = EnvSettingsSource(SimConfig)
    source.env_vars = {k.lower(): v for k, v in env.items()}  # the mapping given, not os.environ
    found = source()
    for name in env:  # variables the source skips: no such key
        key = name[len(ENV_PREFIX) :].lower()
        if name.upper().startswith(ENV_PREFIX) and key not in (*found, "profile", "config"):
            found[key] = env[name]
    return [
        ("environment", f"environment {ENV_PREFIX}{k.upper()}", {k: v}) for k, v in found.items()
    ]


def build(
    flags: Mapping[str, Any] | None = None,
    *,
    profile: str | None = None,
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[SimConfig, dict[str, str]]:
    """Merge defaults < profile YAML < config YAML < env < flags (kebab-case keys): the config
    and, per key that is not a default, where its value came from. Raises ConfigError."""
    env = os.environ if env is None else env
    profile = profile or env.get(ENV_PREFIX + "PROFILE") or None
    config_file = config_file or env.get(ENV_PREFIX + "CONFIG") or None
    layers: list[tuple[str, str, dict[str, Any]]] = []
    if profile:
        where = f"profile {profile}"
        layers.append((where, where, _yaml(profile_path(profile), "--profile")))
    if config_file:
        path = Path(config_file)
        layers.append((f"config {config_file}", str(path), _yaml(path, "--config FILE")))
    layers += _env_layers(env)
    layers.append(("flag", "flag", {k.replace("-", "_"): v for k, v in (flags or {}).items()}))
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    source: dict[str, str] = {}
    for label, where, values in layers:
        for key, value in values.items():
            merged[key], origin[_kebab(key)], source[key] = value, label, where
    implied = any(merged.get(k.replace("-", "_")) is not None for k in SPEC_IMPLYING)
    if implied and "speculative_algorithm" not in merged:
        merged["speculative_algorithm"] = "NEXTN"
        origin["speculative-algorithm"] = "implied by " + "/".join(SPEC_IMPLYING)
    try:
        return SimConfig(**merged), origin
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    by_source: dict[str, list[str]] = {}
    for err in (e for e in errors if e["loc"]):
        by_source.setdefault(source[str(err["loc"][0])], []).append(_problem(err))
    if by_source:
        said = "; ".join(f"{where}: {'; '.join(p)}" for where, p in by_source.items())
        unknown_only = all(e["type"] == "extra_forbidden" for e in errors)
        raise ConfigError(said if unknown_only else f"{said}; fix the value")
    msg = "; ".join(e["msg"].removeprefix("Value error, ") for e in errors)
    where = ", ".join(sorted({origin.get(k, "default") for k in FIELDS if f"{k}: " in msg}))
    raise ConfigError(f"invalid simulator config ({where}): {msg}")
