"""The simulator's one configuration object, and how flags, environment and YAML build it.

Every field has a documented default. The same kebab-case name works as a YAML key
(``ttft-ms: 50``), a flag (``--ttft-ms 50``) and, upper-cased with ``QWEN_NPU_SIM_``, an environment
variable (``QWEN_NPU_SIM_TTFT_MS=50``).

A YAML layer may name a chart profile (``chart-profile:``, ``chart-values:``): the engine's flags
(model name, TP, speculative decoding) then come from the chart's render (chart_engine.py).

Precedence (explicit, in ``build``): flags > environment > YAML (``--config`` over ``--profile``) >
defaults. Each layer is a dict of values checked by the model on its own (``typed``: types and
ranges, so an error names the layer, the key and the fix); ``build`` merges the layers in that
order and validates the result once more with the cross-field rules. The layers are merged here,
not by a settings library's sources, because the start log reports, per key, which layer its value
came from, and because tests pass the environment as a mapping.

Ranges are ``Field(ge=, le=, gt=)`` and ``Literal`` on the fields; the rules between fields (an
acceptance length within 1..num-steps + 1, a distribution of num-steps + 1 probabilities summing to
1, a step that takes time) are one ``model_validator``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from qwen_npu.ports import ENGINE_PORT
from qwen_npu.sim.chart_engine import ChartProfileError, engine_keys

ENV_PREFIX = "QWEN_NPU_SIM_"
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
SPEC_ALGORITHMS = ("none", "NEXTN", "EAGLE", "EAGLE3")
_NONE_WORDS = ("", "none", "null")
#: Validation context of one layer on its own: the cross-field rules wait for the merged config.
_ONE_LAYER = {"one_layer": True}


class ConfigError(ValueError):
    """Bad simulator configuration; the message is one line naming the source, key and fix."""


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _f(default: Any, help_: str, *, fault: bool = False, **limits: Any) -> Any:
    extra: Any = {"fault": True} if fault else None
    return Field(default, description=help_, json_schema_extra=extra, **limits)


#: A duration or price: a finite number >= 0.
_AT_LEAST_0: dict[str, Any] = {"ge": 0, "allow_inf_nan": False}
_FRACTION: dict[str, Any] = {"ge": 0, "le": 1}


class SimConfig(BaseModel):
    """Every knob of the simulator. Field ``foo_bar`` is key/flag ``foo-bar``.

    Constructing it reads no environment (``build`` layers the sources) and checks everything:
    types, ranges and the rules between fields.
    """

    model_config = ConfigDict(
        extra="forbid",
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
    ttft_ms: float = _f(
        50.0, "time to first token of an unqueued request, before prompt cost", **_AT_LEAST_0
    )
    prefill_ms_per_1k_tokens: float = _f(0.0, "TTFT added per 1000 prompt tokens", **_AT_LEAST_0)
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
    itl_ms_per_running_req: float = _f(
        0.0, "decode step time added per running request beyond 1", **_AT_LEAST_0
    )
    step_fixed_ms: float | None = _f(
        None,
        "fixed part of one engine step; when set, steps are priced per token (not itl-ms)",
        **_AT_LEAST_0,
    )
    step_ms_per_token: float = _f(
        0.0, "step time per token in the batch (with step-fixed-ms)", **_AT_LEAST_0
    )
    draft_step_ms: float = _f(
        0.0, "draft model's cost per draft step (with step-fixed-ms)", **_AT_LEAST_0
    )
    max_running_requests: int = _f(64, "requests decoded at once; the rest wait in the queue", ge=1)
    max_queued_requests: int = _f(4096, "queue bound; beyond it /generate answers 503", ge=0)
    startup_delay_s: float = _f(
        0.0, "seconds of 503 from /health, /ready and /generate at start", **_AT_LEAST_0
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
    accept_rate: float | None = _f(
        None, "chance the first draft token is accepted (implies NEXTN when set)", **_FRACTION
    )
    accept_decay: float = _f(1.0, "accept-rate's factor per further draft position", **_FRACTION)
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
    error_rate: float = _f(
        0.0, "fraction of generate requests answered with HTTP 500", fault=True, **_FRACTION
    )
    hang_health: bool = _f(False, "/health and /health_generate hang until cleared", fault=True)
    hang_generate: bool = _f(False, "generation emits nothing until cleared", fault=True)
    crash_after_s: float = _f(
        0.0, "exit 1 this many seconds after start (0 = never)", **_AT_LEAST_0
    )
    metrics_delay_s: float = _f(
        0.0, "/metrics answers this many seconds late", fault=True, **_AT_LEAST_0
    )
    metrics_malformed: bool = _f(False, "/metrics returns text Prometheus rejects", fault=True)
    garbled: bool = _f(False, "greedy output degenerates into repetition", fault=True)
    garble_after_tokens: int = _f(8, "tokens of normal output before the repetition starts", ge=0)

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
    def _between_fields(self, info: ValidationInfo) -> SimConfig:
        """The rules between keys, every broken one named (one line, ``key: problem; ...``)."""
        if info.context and info.context.get("one_layer"):
            return self
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
FAULT_KEYS: tuple[str, ...] = tuple(
    name
    for name, f in SimConfig.model_fields.items()
    if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("fault")
)
_HINTS = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "list": "a list of numbers (comma-separated on the command line)",
    "string": "a string",
}


def _problem(err: Any, raw: Mapping[str, Any]) -> tuple[str, str]:
    """(kebab key, what is wrong with its value) of one pydantic error."""
    name = str(err["loc"][0]) if err["loc"] else ""
    kind = "list" if len(err["loc"]) > 1 else err["type"].split("_")[0]
    value = raw.get(name)
    if kind in _HINTS:
        hint = _HINTS[kind]
        if FIELDS[_kebab(name)].default is None and kind != "list":
            hint += " or none"
        return _kebab(name), f"{value!r} is not {hint}"
    return _kebab(name), f"{value!r}: {err['msg'][0].lower()}{err['msg'][1:]}"


def typed(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """One layer of raw values (kebab-case keys) checked and typed by the model on its own.

    Unknown keys, values of the wrong type and values out of range raise ConfigError naming
    ``source`` and every bad key.
    """
    for key in values:
        if key not in FIELDS:
            raise unknown_key_error(key, source)
    raw = {k.replace("-", "_"): v for k, v in values.items()}
    try:
        cfg = SimConfig.model_validate(raw, context=_ONE_LAYER)
    except ValidationError as exc:
        problems = [_problem(err, raw) for err in exc.errors(include_url=False)]
        said = "; ".join(f"key {key}: {what}" for key, what in problems)
        raise ConfigError(f"{source}: {said}; fix the value") from None
    return {_kebab(k): getattr(cfg, k) for k in raw}


def unknown_key_error(key: str, source: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(FIELDS), n=1)
    hint = f"did you mean {close[0]!r}?" if close else "see docs/simulator.md for the keys"
    return ConfigError(f"{source}: unknown key {key!r}; {hint}")


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML profile into {kebab-key: typed value}; ConfigError on any problem."""
    # lazy: an extra's (pyproject.toml); the base install goes without
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found; pass an existing --config FILE") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "syntax error"
        raise ConfigError(f"{path}: not valid YAML ({first}); fix the file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of key: value; fix the file")
    data = {str(k).replace("_", "-"): v for k, v in data.items()}
    engine: dict[str, Any] = {}
    chart_profile = data.pop("chart-profile", None)
    chart_values = data.pop("chart-values", None) or {}
    if chart_profile is not None:  # the engine's flags as the chart renders them (chart_engine)
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
    return typed({**engine, **data}, str(path))


def profile_path(name: str) -> Path:
    """The packaged profile ``name`` (file stem); ConfigError lists the known ones."""
    path = PROFILES_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(list_profiles()) or "none"
        hint = (
            "; a YAML file of your own goes to --config" if name.endswith((".yaml", ".yml")) else ""
        )
        raise ConfigError(f"profile {name!r}: not found; use one of: {known}{hint}")
    return path


def list_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def _env_layer(env: Mapping[str, str]) -> list[tuple[dict[str, Any], str]]:
    """The QWEN_NPU_SIM_* variables, one typed layer per variable (so errors name it)."""
    layers = []
    for name, value in env.items():
        if not name.upper().startswith(ENV_PREFIX):
            continue
        key = _kebab(name[len(ENV_PREFIX) :].lower())
        if key in ("profile", "config"):
            continue
        if key not in FIELDS:
            raise unknown_key_error(key, f"environment {name}")
        layers.append((typed({key: value}, f"environment {name}"), "environment"))
    return layers


def build(
    flags: Mapping[str, Any] | None = None,
    *,
    profile: str | None = None,
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[SimConfig, dict[str, str]]:
    """Merge defaults < profile YAML < config YAML < env < flags.

    Returns the config and, per key that is not a default, where its value came from.
    ``flags`` holds values keyed by kebab-case name (typed or strings). Raises ConfigError.
    """
    env = os.environ if env is None else env
    profile = profile or env.get(ENV_PREFIX + "PROFILE") or None
    config_file = config_file or env.get(ENV_PREFIX + "CONFIG") or None
    layers: list[tuple[dict[str, Any], str]] = []
    if profile:
        layers.append((load_yaml(profile_path(profile)), f"profile {profile}"))
    if config_file:
        layers.append((load_yaml(Path(config_file)), f"config {config_file}"))
    layers += _env_layer(env)
    layers.append((typed(flags or {}, "flags"), "flag"))
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for values, source in layers:
        for key, value in values.items():
            merged[key] = value
            origin[key] = source
    implied = any(merged.get(k) is not None for k in SPEC_IMPLYING)
    if implied and "speculative-algorithm" not in merged:
        merged["speculative-algorithm"] = "NEXTN"
        origin["speculative-algorithm"] = "implied by " + "/".join(SPEC_IMPLYING)
    try:
        cfg = SimConfig.model_validate({k.replace("-", "_"): v for k, v in merged.items()})
    except ValidationError as exc:
        errs = [e["msg"].removeprefix("Value error, ") for e in exc.errors(include_url=False)]
        problems = [p for e in errs for p in e.split("; ")]
        keys = {p.split(":")[0] for p in problems}
        where = ", ".join(sorted({origin.get(k, "default") for k in keys}))
        raise ConfigError(f"invalid simulator config ({where}): " + "; ".join(problems)) from None
    return cfg, origin


#: Keys whose value turns speculative decoding on when speculative-algorithm is not given.
SPEC_IMPLYING = ("accept-length", "accept-distribution", "accept-rate")
