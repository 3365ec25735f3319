"""The simulator's one configuration object, and how flags, environment and YAML build it.

Every field has a documented default. The same kebab-case name works as a YAML key
(``ttft-ms: 50``), a flag (``--ttft-ms 50``) and, upper-cased with ``QWEN_NPU_SIM_``, an environment
variable (``QWEN_NPU_SIM_TTFT_MS=50``). Precedence: flags > environment > YAML (``--config`` over
``--profile``) > defaults. ``validate()`` returns specific errors, one line each.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "QWEN_NPU_SIM_"
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
SPEC_ALGORITHMS = ("none", "NEXTN", "EAGLE", "EAGLE3")


class ConfigError(ValueError):
    """Bad simulator configuration; the message is one line naming the source, key and fix."""


def _f(default: Any, help_: str, **kw: Any) -> Any:
    return field(default=default, metadata={"help": help_, **kw})


@dataclass
class SimConfig:
    """Every knob of the simulator. Field ``foo_bar`` is key/flag ``foo-bar``."""

    # Server
    host: str = _f("127.0.0.1", "address to listen on")
    port: int = _f(30000, "port to listen on (SGLang's default)")
    model_path: str = _f("Qwen/Qwen3.6-35B-A3B-w8a8-sim", "model_path reported by /model_info")
    served_model_name: str = _f("", "model name in /v1/models and metric labels (model-path)")
    log_level: str = _f("info", "debug, info, warning or error")
    # Timing
    ttft_ms: float = _f(50.0, "time to first token of an unqueued request, before prompt cost")
    prefill_ms_per_1k_tokens: float = _f(0.0, "TTFT added per 1000 prompt tokens")
    prefill_serial: bool = _f(False, "prefills run one at a time, so TTFT grows with arrivals")
    itl_ms: float = _f(10.0, "one decode step (one verify step with speculative decoding)")
    itl_ms_per_running_req: float = _f(0.0, "decode step time added per running request beyond 1")
    max_running_requests: int = _f(64, "requests decoded at once; the rest wait in the queue")
    max_queued_requests: int = _f(4096, "queue bound; beyond it /generate answers 503")
    startup_delay_s: float = _f(0.0, "seconds of 503 from /health, /ready and /generate at start")
    health_check_timeout_s: float = _f(20.0, "/health is 503 when its 1-token generate is late")
    health_check_poll_s: float = _f(1.0, "/health looks for engine output this often (SGLang: 1)")
    max_total_tokens: int = _f(500000, "KV pool size in tokens; sglang:token_usage divides by it")
    # Speculative decoding (MTP)
    speculative_algorithm: str = _f("none", "none or NEXTN/EAGLE/EAGLE3 (MTP-like verify steps)")
    speculative_num_steps: int = _f(3, "draft steps per verify step")
    speculative_eagle_topk: int = _f(1, "reported only")
    speculative_num_draft_tokens: int = _f(4, "draft tokens per verify step (reported)")
    accept_length: float | None = _f(
        None, "mean tokens per verify step, 1..num-steps+1 (implies NEXTN when set)"
    )
    accept_distribution: list[float] | None = _f(  # noqa: RUF009
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

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    @property
    def spec_enabled(self) -> bool:
        return self.speculative_algorithm != "none"

    def validate(self) -> list[str]:
        """Every problem, one line each naming the key and the fix; empty when valid."""
        errs: list[str] = []

        def need(ok: bool, key: str, msg: str) -> None:
            if not ok:
                errs.append(f"{key}: {msg}")

        need(1 <= self.port <= 65535, "port", f"{self.port} is not a TCP port; use 1..65535")
        need(
            self.log_level in ("debug", "info", "warning", "error"),
            "log-level",
            f"{self.log_level!r}; use debug, info, warning or error",
        )
        for key in ("ttft_ms", "prefill_ms_per_1k_tokens", "itl_ms_per_running_req"):
            val = getattr(self, key)
            need(math.isfinite(val) and val >= 0, _kebab(key), f"{val} must be >= 0 ms")
        need(
            math.isfinite(self.itl_ms) and self.itl_ms > 0,
            "itl-ms",
            f"{self.itl_ms} must be > 0 ms",
        )
        need(self.max_running_requests >= 1, "max-running-requests", "must be >= 1")
        need(self.max_queued_requests >= 0, "max-queued-requests", "must be >= 0")
        for key in ("startup_delay_s", "crash_after_s", "metrics_delay_s"):
            val = getattr(self, key)
            need(math.isfinite(val) and val >= 0, _kebab(key), f"{val} must be >= 0 s")
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

    def as_dict(self) -> dict[str, Any]:
        """The effective config with kebab-case keys (what the start log prints)."""
        return {_kebab(k): v for k, v in dataclasses.asdict(self).items()}


def _kebab(name: str) -> str:
    return name.replace("_", "-")


FIELDS: dict[str, dataclasses.Field[Any]] = {_kebab(f.name): f for f in fields(SimConfig)}
FAULT_KEYS: tuple[str, ...] = tuple(f.name for f in fields(SimConfig) if f.metadata.get("fault"))


def field_kind(f: dataclasses.Field[Any]) -> str:
    """'bool', 'int', 'float', 'str', 'float?' (optional float) or 'floats?' (optional list)."""
    t = str(f.type)
    if "list" in t:
        return "floats?"
    if "None" in t:
        return "float?"
    return t


def coerce(key: str, value: Any, source: str) -> Any:
    """Convert one raw value (YAML scalar, env string or flag string) to the field's type."""
    f = FIELDS[key]
    kind = field_kind(f)
    where = f"{source}: key {key}"
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind == "float?":
            if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
                return None
            return float(value)
        if kind == "floats?":
            if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
                return None
            items = value if isinstance(value, list) else str(value).split(",")
            return [float(x) for x in items]
        if value is None:
            raise ValueError
        return str(value)
    except (TypeError, ValueError):
        hint = {
            "bool": "true or false",
            "int": "an integer",
            "float": "a number",
            "float?": "a number or none",
            "floats?": "a list of numbers (comma-separated on the command line)",
        }.get(kind, "a string")
        raise ConfigError(f"{where}: {value!r} is not {hint}; fix the value") from None


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
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("_", "-")
        if key not in FIELDS:
            raise unknown_key_error(key, str(path))
        out[key] = coerce(key, value, str(path))
    return out


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


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The QWEN_NPU_SIM_* variables as {kebab-key: typed value} (PROFILE and CONFIG excluded)."""
    out: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        key = name[len(ENV_PREFIX) :].lower().replace("_", "-")
        if key in ("profile", "config"):
            continue
        if key not in FIELDS:
            raise unknown_key_error(key, f"environment {name}")
        out[key] = coerce(key, value, f"environment {name}")
    return out


def build(
    flags: Mapping[str, Any] | None = None,
    *,
    profile: str | None = None,
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[SimConfig, dict[str, str]]:
    """Merge defaults < profile YAML < config YAML < env < flags.

    Returns the config and, per key that is not a default, where its value came from.
    ``flags`` holds already-typed values keyed by kebab-case name. Raises ConfigError.
    """
    env = os.environ if env is None else env
    profile = profile or env.get(ENV_PREFIX + "PROFILE") or None
    config_file = config_file or env.get(ENV_PREFIX + "CONFIG") or None
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}

    def layer(values: Mapping[str, Any], source: str) -> None:
        for key, value in values.items():
            merged[key] = value
            origin[key] = source

    if profile:
        path = profile_path(profile)
        layer(load_yaml(path), f"profile {profile}")
    if config_file:
        layer(load_yaml(Path(config_file)), f"config {config_file}")
    layer(from_env(env), "environment")
    for key in flags or {}:
        if key not in FIELDS:
            raise unknown_key_error(key, "flags")
    layer(dict(flags or {}), "flag")
    cfg = SimConfig(**{k.replace("-", "_"): v for k, v in merged.items()})
    implied = cfg.accept_length is not None or cfg.accept_distribution is not None
    if implied and not cfg.spec_enabled and "speculative-algorithm" not in merged:
        cfg.speculative_algorithm = "NEXTN"
        origin["speculative-algorithm"] = "implied by accept-length/accept-distribution"
    errs = cfg.validate()
    if errs:
        where = ", ".join(sorted({origin.get(e.split(":")[0], "default") for e in errs}))
        raise ConfigError(f"invalid simulator config ({where}): " + "; ".join(errs))
    return cfg, origin
