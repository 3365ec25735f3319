"""``Sim``: the state every route shares (config, engine, faults, metrics, drain, start clock).

One object per app, on ``app.state.sim``. It owns the answers that refuse a request before the
engine sees it (``gate``) and the count of generate requests in flight, which the SIGTERM drain
waits on (SGLang counts its ``rid_to_state`` the same way). ``Faults`` are the run-time switches
behind ``GET/PATCH /sim/faults`` (docs/architecture.md); all but ``crash`` are config keys too.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import random
import time
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from qwen_npu.log import PartLog
from qwen_npu.sim import protocol as proto
from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.metrics import SimMetrics
from qwen_npu.sim.scheduler import Engine
from qwen_npu.sim.scheduler import Request as EngineRequest
from qwen_npu.sim.tokens import stream_for

log = PartLog("sim")


class FaultError(ValueError):
    """A bad PATCH body; the message names the key and the fix."""


class Faults(BaseModel):
    """The current fault switches, checked strictly (``true``, not ``"yes"``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    error_rate: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)
    hang_health: bool = False
    hang_generate: bool = False
    metrics_delay_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    metrics_malformed: bool = False
    garbled: bool = False
    crash: bool = False  # PATCH only: the process exits 1 at once
    _changed: asyncio.Event = PrivateAttr(default_factory=asyncio.Event)

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Faults:
        return cls(**{k: getattr(cfg, k) for k in cls.model_fields if k != "crash"})

    def parse_patch(self, body: Any) -> dict[str, Any]:
        """Validate a PATCH body into {key: value}; FaultError names the first bad key."""
        if not isinstance(body, dict):
            raise FaultError('body must be a JSON object such as {"hang_health": true}')
        try:
            checked = Faults.model_validate({**self.model_dump(), **body})
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            key = err["loc"][0]
            if err["type"] == "extra_forbidden":
                known = ", ".join(Faults.model_fields)
                raise FaultError(f"unknown fault {key!r}; known: {known}") from None
            raise FaultError(f"{key}: {err['input']!r}: {err['msg'].lower()}") from None
        return {k: getattr(checked, k) for k in body}

    def apply(self, changes: dict[str, Any]) -> None:
        for key, value in changes.items():
            if key != "crash":
                setattr(self, key, value)
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    async def next_change(self) -> None:
        await self._changed.wait()


def crash(reason: str) -> None:
    """Exit 1 at once, as a crashed engine would (no drain, no clean shutdown)."""
    log("error", "crash", reason=reason, what="exiting 1 as asked (simulated crash)")
    logging.shutdown()
    os._exit(1)


class Sim:
    """State shared by the routes: config, engine, faults, metrics, drain and the start clock."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.metrics = SimMetrics(cfg.model_name)
        self.faults = Faults.from_config(cfg)
        self.engine: Engine | None = None
        self.ready_at = 0.0
        self.started_wall = time.time()
        self.counter = itertools.count()
        self.error_rng = random.Random(cfg.seed)
        #: Set on SIGTERM: probes answer 503 and the drain watchdog waits for ``in_flight`` 0.
        self.draining = False
        #: The last /health found no engine output in time (SGLang's ServerStatus.UnHealthy).
        self.unhealthy = False
        #: Generate requests accepted and not yet answered in full (streams until their end).
        self.in_flight = 0
        #: Generate requests that arrived: in all, before the server was ready, while draining
        #: (GET /sim/stats; the failover proof counts what reached a replica too early).
        self.arrivals = dict.fromkeys(
            ("requests_arrived", "requests_before_ready", "requests_while_draining"), 0
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.engine = Engine(self.cfg, self.metrics)
        self.ready_at = loop.time() + self.cfg.startup_delay_s
        if self.faults.hang_generate:
            self.engine.pause()
        what = "the simulator answers /health and /generate now"
        loop.call_at(self.ready_at, functools.partial(log, "info", "ready", what=what))
        if self.cfg.crash_after_s:
            loop.call_later(self.cfg.crash_after_s, crash, "crash-after-s elapsed")

    @property
    def eng(self) -> Engine:
        assert self.engine is not None, "the app's lifespan has not started"
        return self.engine

    def ready(self) -> bool:
        """Past the simulated startup delay (SGLang: ServerStatus.Up)."""
        return self.engine is not None and self.eng.loop.time() >= self.ready_at

    def healthy(self) -> bool:
        """What /ready reports: up, and not draining (SGLang's is_ready)."""
        return self.ready() and not self.draining

    def new_request(self, p: proto.GenParams, *, log_metrics: bool = True) -> EngineRequest:
        no = next(self.counter)
        garble = self.cfg.garble_after_tokens if self.faults.garbled else None
        tokens = stream_for(
            p.prompt_ids,
            greedy=p.greedy,
            seed=self.cfg.seed,
            request_no=no,
            vocab_size=self.cfg.vocab_size,
            garble_after=garble,
        )
        return EngineRequest(no, len(p.prompt_ids), p.max_new, tokens, p.stream, log_metrics)

    def count_arrival(self) -> None:
        self.arrivals["requests_arrived"] += 1
        self.arrivals["requests_before_ready"] += not self.ready()
        self.arrivals["requests_while_draining"] += self.draining

    def gate(self) -> JSONResponse | None:
        """The answer that refuses a generate request before it reaches the engine, if any.

        A draining server still serves new requests, as SGLang 0.5.23 does (its tokenizer
        manager checks ``gracefully_exit`` only in /health and the watchdog): the router stops
        sending once /health answers 503.
        """
        if not self.ready():
            return proto.error("the server is starting (simulated startup delay)", 503, "busy")
        rate = self.faults.error_rate
        if rate and self.error_rng.random() < rate:
            what = "simulated engine error (fault error_rate)"
            return proto.error(what, 500, "InternalServerError")
        return None
