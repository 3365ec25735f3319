"""The simulated scheduler: a bounded running set, a queue, and one timer that drives every request.

Deadlines are absolute on the loop clock (a late wake-up never accumulates) and priced by
``timing``; the timer fires early (epoll rounds sleeps up) by a lead tracked from streamed sends,
so a burst of due steps is centred on its deadline. The model: docs/simulator.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from qwen_npu.sim import timing
from qwen_npu.sim.config import SimConfig
from qwen_npu.sim.metrics import SimMetrics
from qwen_npu.sim.timing import acceptance_distribution
from qwen_npu.sim.tokens import TokenStream, splitmix64

EARLY_S = 0.0005  # wake this much before a deadline; epoll sleeps round up to 1 ms
MAX_LEAD_S = 0.005  # the burst-centring lead never exceeds this
LEAD_STEP_S = 0.000002  # the lead's step per observed send
SLICE = 16  # steps emitted per loop iteration before polling for new requests
WINDOW_S = 10.0  # window of gen_throughput and the spec gauges


class QueueFull(Exception):
    """The waiting queue is at max-queued-requests."""


class Aborted(Exception):
    """The request was aborted (client gone or server stopping)."""


@dataclass(slots=True)
class PrefillBatch:
    """The last prefill batch of the serial lane (``prefill-serial``)."""

    start: float
    end: float
    tokens: int
    members: list[Request]


@dataclass(slots=True)
class Chunk:
    """Tokens emitted by one engine step for one request."""

    n: int
    t: float
    finished: bool
    emitted: int  # the request's tokens so far, this chunk included
    verify_ct: int  # its verify steps so far
    deadline: float  # when the step was due (loop clock)


@dataclass(slots=True, eq=False)
class Request:
    """One generation in flight."""

    no: int
    prompt_len: int
    max_new: int
    tokens: TokenStream
    streaming: bool
    log_metrics: bool = True
    base: int = field(init=False)
    arrival: float = field(default=0.0, init=False)
    admitted: float = field(default=-1.0, init=False)
    deadline: float = field(default=0.0, init=False)
    first_t: float = field(default=-1.0, init=False)
    last_t: float = field(default=0.0, init=False)
    emitted: int = field(default=0, init=False)
    verify_ct: int = field(default=0, init=False)
    running: bool = field(default=False, init=False)
    done: bool = field(default=False, init=False)
    error: BaseException | None = field(default=None, init=False)
    chunks: deque[Chunk] = field(default_factory=deque, init=False)
    waiter: asyncio.Future[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.base = splitmix64(self.no * 0x2545F491 + 17)

    async def next_chunks(self) -> list[Chunk]:
        """Wait for the engine's next output; raises Aborted if the request was aborted."""
        while not self.chunks:
            if self.error is not None:
                raise self.error
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        out = list(self.chunks)
        self.chunks.clear()
        return out

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)


class Engine:
    """Admission, the queue, and the one timer that emits tokens."""

    def __init__(self, cfg: SimConfig, metrics: SimMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.loop = asyncio.get_running_loop()
        self.running: set[Request] = set()
        self.stopping = False  # stop_all was called (SIGINT): no request runs any more
        self.waiting: deque[Request] = deque()
        self._heap: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._paused_at: float | None = None
        self._batch: PrefillBatch | None = None  # prefill-serial: the lane's last batch
        self._step_price: dict[int, float] = {}  # running requests -> step seconds
        self.last_emit = -math.inf
        self.lead = 0.0  # burst-centring lead (seconds), see observe_send()
        self.lateness: deque[float] = deque(maxlen=20000)  # recent send lateness (seconds)
        self.spec = cfg.spec_enabled
        dist = acceptance_distribution(cfg)
        self._cum = list(itertools.accumulate(dist))
        self._cum[-1] = 1.0
        self.total_generated = 0
        # Per-second buckets: second -> [tokens, verify steps, accepted drafts]
        self._window: dict[int, list[int]] = {}
        self._last_accept = (0.0, 0.0)

    # -- timing model ------------------------------------------------------------------------

    def prefill_s(self, prompt_tokens: int) -> float:
        return timing.prefill_ms(self.cfg, prompt_tokens) / 1000.0

    def step_s(self) -> float:
        n = len(self.running)
        price = self._step_price.get(n)
        if price is None:  # the config is fixed: price each batch size once (hot path)
            price = self._step_price[n] = timing.step_ms(self.cfg, n) / 1000.0
        return price

    # -- admission ---------------------------------------------------------------------------

    def stop_all(self) -> None:
        """Ctrl-C: end every request in flight or queued now (their streams close cleanly, so
        the server stops at once instead of cancelling them), and every later one on arrival."""
        self.stopping = True
        for req in [*self.running, *self.waiting]:
            self.abort(req, Aborted("the server is stopping"))

    def submit(self, req: Request, arrival: float | None = None) -> None:
        """Admit now or queue (QueueFull at the bound). TTFT counts from ``arrival``, when the
        server received the request (loop clock), as a real server's does."""
        if self.stopping:
            self.abort(req, Aborted("the server is stopping"))
            return
        now = self.loop.time()
        if arrival is None or arrival > now:
            arrival = now
        req.arrival = now = arrival
        if len(self.running) < self.cfg.max_running_requests and not self.waiting:
            self._admit(req, now)
        elif len(self.waiting) < self.cfg.max_queued_requests or not req.log_metrics:
            self.waiting.append(req)
        else:
            raise QueueFull

    def _admit(self, req: Request, at: float) -> None:
        req.admitted = at
        req.running = True
        self.running.add(req)
        if req.log_metrics:
            self.metrics.queue_time.observe(max(at - req.arrival, 0.0))
        if not self.cfg.prefill_serial:
            self._push(at + self.prefill_s(req.prompt_len), req)
            return
        b = self._batch
        cap = self.cfg.prefill_batch_tokens
        open_ = b is not None and at < b.end and all(r.emitted == 0 for r in b.members)
        if b is not None and open_ and b.tokens + req.prompt_len <= cap:
            b.tokens += req.prompt_len
            b.end = b.start + self.prefill_s(b.tokens)
            b.members.append(req)
            for r in b.members:  # the whole batch ends later; their old heap entries go stale
                if not r.done:
                    self._push(b.end, r)
            return
        start = at if b is None else max(at, b.end)
        b = PrefillBatch(start, start + self.prefill_s(req.prompt_len), req.prompt_len, [req])
        self._batch = b
        self._push(b.end, req)

    def _push(self, deadline: float, req: Request) -> None:
        req.deadline = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), req))
        if self._paused_at is None and deadline - EARLY_S < self._timer_at:
            self._arm()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = math.inf

    def _arm(self) -> None:
        self._disarm()
        if self._heap and self._paused_at is None:
            at = self._heap[0][0] - EARLY_S - self.lead
            self._timer_at = at
            self._timer = self.loop.call_at(at, self._on_timer)

    def abort(self, req: Request, error: BaseException | None = None) -> None:
        """Drop a request (client gone); its slot is freed at once."""
        if req.done:
            return
        req.done = True
        req.error = error or Aborted()
        if req.running:
            req.running = False
            self.running.discard(req)
            self._fill(self.loop.time())
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        if req.log_metrics:
            self.metrics.aborted.inc()
        req._wake()

    def _fill(self, at: float) -> None:
        while self.waiting and len(self.running) < self.cfg.max_running_requests:
            self._admit(self.waiting.popleft(), at)

    # -- the step ----------------------------------------------------------------------------

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = -math.inf  # no re-arming while this pass pushes new deadlines
        if self._paused_at is not None:
            self._timer_at = math.inf
            return
        now = self.loop.time()
        heap = self._heap
        horizon = now + EARLY_S + self.lead
        budget = SLICE
        while heap and heap[0][0] <= horizon:
            if budget == 0:
                # More is due: finish it in the next loop iteration, after the poll, so that
                # requests arriving meanwhile get their arrival stamped without waiting.
                self.loop.call_soon(self._on_timer)
                return
            deadline, _, req = heapq.heappop(heap)
            if not req.done and deadline == req.deadline:  # else aborted, or moved (stale)
                self._step(req, deadline, now)
                budget -= 1
        self._arm()

    def _draw(self, req: Request) -> int:
        u = splitmix64(req.base + req.verify_ct) / 18446744073709551616.0
        return min(bisect_right(self._cum, u) + 1, len(self._cum))

    def _step(self, req: Request, deadline: float, now: float) -> None:
        first = req.emitted == 0
        if first or not self.spec:
            n = 1
        else:
            n = self._draw(req)
            req.verify_ct += 1
        n = min(n, req.max_new - req.emitted)
        req.tokens.take(n)
        req.emitted += n
        t = deadline if now < deadline else now
        self.last_emit = t
        finished = req.emitted >= req.max_new
        if req.log_metrics:
            self.total_generated += n
            sec = int(t)
            bucket = self._window.get(sec)
            if bucket is None:
                bucket = self._window[sec] = [0, 0, 0]
                self._trim(sec)
            bucket[0] += n
            if not first and self.spec:
                bucket[1] += 1
                bucket[2] += n - 1
            if first:
                ttft = self.metrics.child("time_to_first_token_seconds", req.streaming)
                ttft.observe(t - req.arrival)
            else:
                self.metrics.itl.observe((t - req.last_t) / n)
        if first:
            req.first_t = t
        req.last_t = t
        req.chunks.append(Chunk(n, t, finished, req.emitted, req.verify_ct, deadline))
        if finished:
            req.done = True
            req.running = False
            self.running.discard(req)
            if req.log_metrics:
                self._finished(req, t)
            self._fill(deadline)
        else:
            self._push(deadline + self.step_s(), req)
        req._wake()

    def _finished(self, req: Request, end: float) -> None:
        """Record one finished request the way SGLang's tokenizer collector does."""
        child, streaming, tokens = self.metrics.child, req.streaming, req.emitted
        child("prompt_tokens_total", streaming).inc(req.prompt_len)
        child("generation_tokens_total", streaming).inc(tokens)
        child("num_requests_total", streaming).inc()
        child("e2e_request_latency_seconds", streaming).observe(end - req.arrival)
        if tokens > 1:
            tpot = (end - req.first_t) / (tokens - 1)
            child("request_time_per_output_token_seconds", streaming).observe(tpot)
        if req.verify_ct:
            self.metrics.spec_verify.inc(req.verify_ct)

    def _trim(self, sec: int) -> None:
        for s in [s for s in self._window if s < sec - WINDOW_S]:
            del self._window[s]

    def observe_send(self, lateness: float) -> None:
        """Track the median lateness of streamed sends towards zero (a quantile tracker)."""
        self.lateness.append(lateness)
        if lateness > 0:
            self.lead = min(self.lead + LEAD_STEP_S, MAX_LEAD_S)
        else:
            self.lead = max(self.lead - LEAD_STEP_S, 0.0)

    # -- hang_generate -----------------------------------------------------------------------

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = self.loop.time()
            self._disarm()

    def resume(self) -> None:
        if self._paused_at is None:
            return
        shift = self.loop.time() - self._paused_at
        self._paused_at = None
        self._heap = [(d + shift, s, r) for d, s, r in self._heap]
        heapq.heapify(self._heap)
        for r in {r for _, _, r in self._heap}:
            r.deadline += shift
        if self._batch is not None:
            self._batch.start += shift
            self._batch.end += shift
        self._arm()

    # -- what /metrics and /server_info read -------------------------------------------------

    def window_stats(self) -> tuple[float, float, float]:
        """(tokens/s, accept length, accept rate) over the last WINDOW_S seconds."""
        now = self.loop.time()
        self._trim(int(now))
        lo = now - WINDOW_S
        tok = ver = acc = 0
        for sec, (a, b, c) in self._window.items():
            if sec >= lo:
                tok, ver, acc = tok + a, ver + b, acc + c
        if ver:
            drafts = ver * self.cfg.speculative_num_steps
            self._last_accept = ((ver + acc) / ver, acc / drafts)
        return tok / WINDOW_S, self._last_accept[0], self._last_accept[1]

    def timing_stats(self) -> dict[str, float]:
        """How late streamed events left the server lately (its own view of falling behind)."""
        late = sorted(self.lateness)
        stats: dict[str, float] = {"sends": len(late), "lead_ms": self.lead * 1000}
        if late:
            stats["send_lateness_median_ms"] = late[len(late) // 2] * 1000
            stats["send_lateness_p99_ms"] = late[min(len(late) - 1, int(len(late) * 0.99))] * 1000
            stats["tokens_emitted"] = self.total_generated
        return stats

    def gauges(self) -> dict[str, float]:
        """The scheduler gauges of /metrics (short names), computed at scrape time."""
        c = self.cfg
        tput, acc_len, acc_rate = self.window_stats()
        used = sum(r.prompt_len + r.emitted for r in self.running)
        spec = self.spec
        return {
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "gen_throughput": tput,
            "cache_hit_rate": 0.0,
            "token_usage": min(used / c.max_total_tokens, 1.0),
            "mamba_usage": len(self.running) / c.max_running_requests,
            "spec_accept_length": acc_len if spec else 0.0,
            "spec_accept_rate": acc_rate if spec else 0.0,
            "spec_num_steps": c.speculative_num_steps if spec else 0,
            "spec_num_draft_tokens": c.speculative_num_draft_tokens if spec else 0,
        }
