"""The simulator's one configuration object, and how flags, environment and YAML build it.

Every field has a documented default. The same kebab-case name works as a YAML key
(``ttft-ms: 50``), a flag (``--ttft-ms 50``) and, upper-cased with ``QWEN_NPU_SIM_``, an environment
variable (``QWEN_NPU_SIM_TTFT_MS=50``). Precedence: flags > environment > YAML (``--config`` over
``--profile``) > defaults. ``validate()`` returns specific errors, one line each.

Typing and coercion are pydantic-settings' (as in the sidecar's settings): the environment layer is
its ``EnvSettingsSource`` over the given mapping, and every layer (YAML, environment, flags) is
validated by the model itself, so an error names the layer, the key and the expected type. The
layers are merged here rather than by ``BaseSettings.__init__`` because the start log reports, per
key, which layer its value came from.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasGenerator, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

ENV_PREFIX = "QWEN_NPU_SIM_"
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
SPEC_ALGORITHMS = ("none", "NEXTN", "EAGLE", "EAGLE3")
_NONE_WORDS = ("", "none", "null")


class ConfigError(ValueError):
    """Bad simulator configuration; the message is one line naming the source, key and fix."""


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def _f(default: Any, help_: str, *, fault: bool = False) -> Any:
    return Field(default, description=help_, json_schema_extra={"fault": True} if fault else None)


class SimConfig(BaseSettings):
    """Every knob of the simulator. Field ``foo_bar`` is key/flag ``foo-bar``.

    Constructing it reads no environment (``build`` layers the sources); types are checked at
    construction, ranges and cross-field rules by ``validate()``.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        extra="forbid",
        coerce_numbers_to_str=True,
        alias_generator=AliasGenerator(serialization_alias=_kebab),
    )

    # Server
    host: str = _f("127.0.0.1", "address to listen on")
    port: int = _f(30000, "port to listen on (SGLang's default)")
    model_path: str = _f("Qwen/Qwen3.6-35B-A3B-w8a8-sim", "model_path reported by /model_info")
    served_model_name: str = _f("", "model name in /v1/models and metric labels (model-path)")
    log_level: str = _f("info", "debug, info, warning or error")
    # Timing: prefill
    ttft_ms: float = _f(50.0, "time to first token of an unqueued request, before prompt cost")
    prefill_ms_per_1k_tokens: float = _f(0.0, "TTFT added per 1000 prompt tokens")
    prefill_serial: bool = _f(
        False, "prefills run one batch at a time, so TTFT grows with arrivals"
    )
    prefill_batch_tokens: int = _f(
        0, "with prefill-serial: prompt tokens one prefill batch may hold (0 = one request)"
    )
    # Timing: decode (docs/simulator.md, "The timing model")
    itl_ms: float = _f(10.0, "one decode step (one verify step with speculative decoding)")
    itl_ms_per_running_req: float = _f(0.0, "decode step time added per running request beyond 1")
    step_fixed_ms: float | None = _f(
        None, "fixed part of one engine step; when set, steps are priced per token (not itl-ms)"
    )
    step_ms_per_token: float = _f(0.0, "step time per token in the batch (with step-fixed-ms)")
    draft_step_ms: float = _f(0.0, "draft model's cost per draft step (with step-fixed-ms)")
    max_running_requests: int = _f(64, "requests decoded at once; the rest wait in the queue")
    max_queued_requests: int = _f(4096, "queue bound; beyond it /generate answers 503")
    startup_delay_s: float = _f(0.0, "seconds of 503 from /health, /ready and /generate at start")
    health_check_timeout_s: float = _f(20.0, "/health is 503 when its 1-token generate is late")
    health_check_poll_s: float = _f(1.0, "/health looks for engine output this often (SGLang: 1)")
    max_total_tokens: int = _f(500000, "KV pool size in tokens; sglang:token_usage divides by it")
    # Speculative decoding (MTP)
    speculative_algorithm: str = _f("none", "none or NEXTN/EAGLE/EAGLE3 (MTP-like verify steps)")
    speculative_num_steps: int = _f(3, "draft steps per verify step")
    speculative_eagle_topk: int = _f(1, "reported; with 1 a verify step has num-steps+1 tokens")
    speculative_num_draft_tokens: int = _f(4, "tokens per request in a verify step (topk > 1)")
    accept_rate: float | None = _f(
        None, "chance the first draft token is accepted (implies NEXTN when set)"
    )
    accept_decay: float = _f(1.0, "accept-rate's factor per further draft position")
    accept_length: float | None = _f(
        None, "mean tokens per verify step, 1..num-steps+1 (implies NEXTN; over accept-rate)"
    )
    accept_distribution: Annotated[list[float] | None, NoDecode] = _f(
        None, "probabilities of 1..num-steps+1 tokens per verify step (overrides accept-length)"
    )
    # Output
    seed: int = _f(0, "seed of sampled output, acceptance draws and error draws")
    vocab_size: int = _f(151936, "token ids are drawn below this")
    context_length: int = _f(262144, "prompt + max_new_tokens beyond this answers 400")
    default_max_new_tokens: int = _f(128, "max_new_tokens when a request gives none")
    # Reported shape
    tp_size: int = _f(2, "reported in /server_info")
    # Faults (also changeable at run time through PATCH /sim/faults)
    error_rate: float = _f(0.0, "fraction of generate requests answered with HTTP 500", fault=True)
    hang_health: bool = _f(False, "/health and /health_generate hang until cleared", fault=True)
    hang_generate: bool = _f(False, "generation emits nothing until cleared", fault=True)
    crash_after_s: float = _f(0.0, "exit 1 this many seconds after start (0 = never)")
    metrics_delay_s: float = _f(0.0, "/metrics answers this many seconds late", fault=True)
    metrics_malformed: bool = _f(False, "/metrics returns text Prometheus rejects", fault=True)
    garbled: bool = _f(False, "greedy output degenerates into repetition", fault=True)
    garble_after_tokens: int = _f(8, "tokens of normal output before the repetition starts")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # build() layers YAML, environment and flags itself

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

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    @property
    def spec_enabled(self) -> bool:
        return self.speculative_algorithm != "none"

    def validate(self) -> list[str]:  # type: ignore[override]  # not pydantic's deprecated classmethod
        """Every problem, one line each naming the key and the fix; empty when valid."""
        errs: list[str] = []

        def need(ok: bool, key: str, msg: str) -> None:
            if not ok:
                errs.append(f"{key}: {msg}")

        def at_least_0(key: str, unit: str) -> None:
            val = getattr(self, key)
            need(math.isfinite(val) and val >= 0, _kebab(key), f"{val} must be >= 0 {unit}")

        need(1 <= self.port <= 65535, "port", f"{self.port} is not a TCP port; use 1..65535")
        need(
            self.log_level in ("debug", "info", "warning", "error"),
            "log-level",
            f"{self.log_level!r}; use debug, info, warning or error",
        )
        for key in ("ttft_ms", "prefill_ms_per_1k_tokens", "itl_ms_per_running_req"):
            at_least_0(key, "ms")
        for key in ("step_ms_per_token", "draft_step_ms"):
            at_least_0(key, "ms")
        need(self.prefill_batch_tokens >= 0, "prefill-batch-tokens", "must be >= 0 (0 = off)")
        need(
            math.isfinite(self.itl_ms) and self.itl_ms > 0,
            "itl-ms",
            f"{self.itl_ms} must be > 0 ms",
        )
        if self.step_fixed_ms is not None:
            at_least_0("step_fixed_ms", "ms")
            need(
                self.step_fixed_ms + self.step_ms_per_token > 0,
                "step-fixed-ms",
                "step-fixed-ms + step-ms-per-token must be > 0 ms (a step takes time)",
            )
        need(self.max_running_requests >= 1, "max-running-requests", "must be >= 1")
        need(self.max_queued_requests >= 0, "max-queued-requests", "must be >= 0")
        for key in ("startup_delay_s", "crash_after_s", "metrics_delay_s"):
            at_least_0(key, "s")
        need(self.health_check_timeout_s > 0, "health-check-timeout-s", "must be > 0 s")
        need(self.health_check_poll_s > 0, "health-check-poll-s", "must be > 0 s")
        need(self.max_total_tokens >= 1, "max-total-tokens", "must be >= 1")
        need(
            self.speculative_algorithm in SPEC_ALGORITHMS,
            "speculative-algorithm",
            f"{self.speculative_algorithm!r}; use one of {', '.join(SPEC_ALGORITHMS)}",
        )
        need(1 <= self.speculative_num_steps <= 16, "speculative-num-steps", "use 1..16")
        need(self.speculative_eagle_topk >= 1, "speculative-eagle-topk", "must be >= 1")
        need(self.speculative_num_draft_tokens >= 1, "speculative-num-draft-tokens", ">= 1")
        top = self.speculative_num_steps + 1
        if self.accept_rate is not None:
            need(0.0 <= self.accept_rate <= 1.0, "accept-rate", f"{self.accept_rate}; use 0..1")
        need(0.0 <= self.accept_decay <= 1.0, "accept-decay", f"{self.accept_decay}; use 0..1")
        if self.accept_length is not None:
            need(
                1.0 <= self.accept_length <= top,
                "accept-length",
                f"{self.accept_length} must lie in 1..{top} (speculative-num-steps + 1)",
            )
        if self.accept_distribution is not None:
            dist = self.accept_distribution
            need(
                len(dist) == top,
                "accept-distribution",
                f"has {len(dist)} entries; give {top} (for 1..{top} tokens per verify step)",
            )
            need(
                all(p >= 0 for p in dist) and abs(sum(dist) - 1.0) < 1e-6,
                "accept-distribution",
                f"probabilities {dist} must be >= 0 and sum to 1",
            )
        need(self.vocab_size >= 2, "vocab-size", "must be >= 2")
        need(self.context_length >= 2, "context-length", "must be >= 2")
        need(self.default_max_new_tokens >= 1, "default-max-new-tokens", "must be >= 1")
        need(self.tp_size >= 1, "tp-size", "must be >= 1")
        need(0.0 <= self.error_rate <= 1.0, "error-rate", f"{self.error_rate}; use 0..1")
        need(self.garble_after_tokens >= 0, "garble-after-tokens", "must be >= 0")
        return errs


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


def typed(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    """One layer of raw values (kebab-case keys) checked and typed by the model.

    Unknown keys and values of the wrong type raise ConfigError naming ``source`` and the key.
    """
    for key in values:
        if key not in FIELDS:
            raise unknown_key_error(key, source)
    raw = {k.replace("-", "_"): v for k, v in values.items()}
    try:
        cfg = SimConfig(**raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        kind = "list" if len(err["loc"]) > 1 else err["type"].split("_")[0]
        hint = _HINTS.get(kind, "valid")
        if FIELDS[_kebab(name)].default is None and kind != "list":
            hint += " or none"
        value = raw.get(name)
        raise ConfigError(
            f"{source}: key {_kebab(name)}: {value!r} is not {hint}; fix the value"
        ) from None
    return {_kebab(k): getattr(cfg, k) for k in raw}


def unknown_key_error(key: str, source: str) -> ConfigError:
    close = difflib.get_close_matches(key, list(FIELDS), n=1)
    hint = f"did you mean {close[0]!r}?" if close else "see docs/simulator.md for the keys"
    return ConfigError(f"{source}: unknown key {key!r}; {hint}")


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML profile into {kebab-key: typed value}; ConfigError on any problem."""
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
    return typed({str(k).replace("_", "-"): v for k, v in data.items()}, str(path))


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


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        super().__init__(SimConfig)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {k.lower(): v for k, v in self._env.items()}


def _env_layer(env: Mapping[str, str]) -> list[tuple[dict[str, Any], str]]:
    """The QWEN_NPU_SIM_* variables, one typed layer per variable (so errors name it)."""
    ours = {k: v for k, v in env.items() if k.upper().startswith(ENV_PREFIX)}
    layers = []
    for name in ours:
        key = _kebab(name[len(ENV_PREFIX) :].lower())
        if key in ("profile", "config"):
            continue
        if key not in FIELDS:
            raise unknown_key_error(key, f"environment {name}")
    found = _EnvSource(ours)()
    for field_name, value in found.items():
        source = f"environment {ENV_PREFIX}{field_name.upper()}"
        layers.append((typed({_kebab(field_name): value}, source), "environment"))
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
    cfg = SimConfig(**{k.replace("-", "_"): v for k, v in merged.items()})
    errs = cfg.validate()
    if errs:
        where = ", ".join(sorted({origin.get(e.split(":")[0], "default") for e in errs}))
        raise ConfigError(f"invalid simulator config ({where}): " + "; ".join(errs))
    return cfg, origin


#: Keys whose value turns speculative decoding on when speculative-algorithm is not given.
SPEC_IMPLYING = ("accept-length", "accept-distribution", "accept-rate")
