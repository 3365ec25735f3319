"""The locustfile: CONC users, each a closed loop of one streamed request at a time.

Used by ``qwen-npu bench`` as a library (local runner, or the master of WORKERS worker processes),
by those workers (``locust --worker -f <this file>``), and by ``make bench-ui`` (locust's web UI,
the dataset cycling until you press stop). Each user takes the next dataset index from a ticket
source (a counter; in distributed mode the master, by message) and hands the measured
``RequestOutput`` to a sink (a list; or a message to the master).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import gevent  # type: ignore[import-untyped]
import requests
from gevent.event import AsyncResult  # type: ignore[import-untyped]
from locust import HttpUser, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from qwen_npu.loadtest.backends import BACKEND_MAPPING, Backend, RequestInput, RequestOutput
from qwen_npu.loadtest.config import BenchConfig, add_request_flags, data_from_args
from qwen_npu.loadtest.dataset import DatasetRow, load
from qwen_npu.loadtest.wire import WireSession
from qwen_npu.ports import LOCAL_ENGINE_URL

MSG_TICKET_REQUEST = "qwen_npu_ticket_request"
MSG_TICKET = "qwen_npu_ticket"
MSG_RESULT = "qwen_npu_result"
CLIENT_ENV = "QWEN_NPU_BENCH_CLIENT"


class BenchState:
    """What the users of one process share: rows, backend, ticket source and result sink."""

    def __init__(
        self,
        config: BenchConfig,
        next_ticket: Callable[[], int | None],
        sink: Callable[[RequestOutput], None],
    ) -> None:
        self.config = config
        self.rows: list[DatasetRow] = load(config.data)
        self.backend: Backend = BACKEND_MAPPING[config.api]()
        self.next_ticket = next_ticket
        self.sink = sink
        self.users_started = 0
        self.warm_sessions: list[WireSession] = []

    def prewarm(self, target: str, count: int) -> None:
        """Open ``count`` user connections now, before the measured phase starts its clock."""
        if _wire_for(target):
            self.warm_sessions += [WireSession(target).warm() for _ in range(count)]

    def session_for(self, target: str) -> requests.Session | WireSession:
        """A pre-warmed connection, else one opened now (http://), or a requests session."""
        if not _wire_for(target):
            return requests.Session()
        return self.warm_sessions.pop() if self.warm_sessions else WireSession(target).warm()

    def start_delay_s(self) -> float:
        """Users start ``ramp_ms_per_user`` apart (BenchConfig says why)."""
        k = self.users_started
        self.users_started += 1
        return k * self.config.ramp_ms_per_user / 1000.0


def _wire_for(target: str) -> bool:
    """The wire client serves plain http:// targets, unless ``QWEN_NPU_BENCH_CLIENT=requests``
    asks for the requests client (the one before it; `make perf-loadtest` measures both)."""
    return target.startswith("http://") and os.environ.get(CLIENT_ENV, "wire") != "requests"


class CountingTickets:
    """Indices 0..n-1 once each (gevent is cooperative: no lock needed); ``cycle`` repeats them."""

    def __init__(self, n: int, cycle: bool = False) -> None:
        self._it = itertools.cycle(range(n)) if cycle else iter(range(n))
        self.stopped = False

    def __call__(self) -> int | None:
        if self.stopped:
            return None
        return next(self._it, None)


class RemoteTickets:
    """A worker's ticket source: asks the master for the next index and waits for its answer."""

    def __init__(self, runner: WorkerRunner) -> None:
        self._runner = runner
        self._waiting: dict[int, AsyncResult] = {}
        self._ids = itertools.count()
        runner.register_message(MSG_TICKET, self._on_ticket)

    def _on_ticket(self, environment: Environment, msg: Any, **_: Any) -> None:
        waiter = self._waiting.pop(int(msg.data["id"]), None)
        if waiter is not None:
            waiter.set(msg.data["index"])

    def __call__(self) -> int | None:
        rid = next(self._ids)
        waiter: AsyncResult = AsyncResult()
        self._waiting[rid] = waiter
        self._runner.send_message(MSG_TICKET_REQUEST, {"id": rid})
        try:
            index = waiter.get(timeout=30)
        except gevent.Timeout:
            return None
        return None if index is None else int(index)


def serve_tickets(runner: MasterRunner, tickets: Callable[[], int | None]) -> None:
    """On the master: answer each worker's ticket request with the next index (None = done)."""

    def on_request(environment: Environment, msg: Any, **_: Any) -> None:
        runner.send_message(
            MSG_TICKET, {"id": msg.data["id"], "index": tickets()}, client_id=msg.node_id
        )

    runner.register_message(MSG_TICKET_REQUEST, on_request)


def fire_stats(environment: Environment, backend: Backend, out: RequestOutput) -> None:
    """Report E2E and TTFT to locust's own statistics (its UI, CSV and HTML reports)."""
    timings = [("E2E", out.latency, out.output_len), ("TTFT", out.ttft, 0)]
    for kind, seconds, length in timings[: 2 if out.success else 1]:
        environment.events.request.fire(  # type: ignore[no-untyped-call]
            request_type=kind,
            name=backend.path,
            response_time=seconds * 1000.0,
            response_length=length,
            exception=None if out.success else RuntimeError(out.error),
            context={},
        )


class BenchUser(HttpUser):
    """One closed-loop user: next ticket, one streamed request, record it, repeat."""

    host = os.environ.get("QWEN_NPU_BENCH_TARGET", LOCAL_ENGINE_URL)

    def on_start(self) -> None:
        # A plain requests.Session (what HttpUser's client is built on) per user: one kept-alive
        # connection, and none of HttpSession's per-request bookkeeping inside the timings.
        state: BenchState | None = getattr(self.environment, "qwen_bench", None)
        self.stream_session: requests.Session | WireSession = requests.Session()
        if state is not None:
            self.stream_session = state.session_for(self.host or state.config.target)
            gevent.sleep(state.start_delay_s())

    def on_stop(self) -> None:
        self.stream_session.close()

    @task
    def one_request(self) -> None:
        state: BenchState | None = getattr(self.environment, "qwen_bench", None)
        if state is None:
            raise StopUser()
        index = state.next_ticket()
        if index is None:
            raise StopUser()
        url = self.host or state.config.target
        inp = RequestInput(url, state.rows[index], state.config.model, index)
        out = state.backend.request(self.stream_session, inp)
        fire_stats(self.environment, state.backend, out)
        state.sink(out)

    def wait_time(self) -> float:
        return 0.0


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def _add_arguments(parser: Any, **_: Any) -> None:
    add_request_flags(parser.add_argument_group("qwen-npu bench"))


@events.init.add_listener  # type: ignore[untyped-decorator]
def _on_init(environment: Environment, **_: Any) -> None:
    """Locust's own CLI (a worker of ``qwen-npu bench``, ``make bench-ui``) builds the state."""
    runner = environment.runner
    if isinstance(runner, MasterRunner) or getattr(environment, "qwen_bench", None) is not None:
        return
    config = BenchConfig.from_env()
    if isinstance(runner, WorkerRunner):
        if config is None:
            return
        sink: Callable[[RequestOutput], None] = lambda out: runner.send_message(  # noqa: E731
            MSG_RESULT, out.as_dict()
        )
        environment.qwen_bench = BenchState(config, RemoteTickets(runner), sink)  # type: ignore[attr-defined]
        return
    opts = environment.parsed_options
    if config is None and opts is not None:
        config = BenchConfig(
            target=environment.host or BenchUser.host,
            api=opts.api,
            data=data_from_args(opts),
            ramp_ms_per_user=0.0,  # the web UI ramps with its own spawn rate
        )
    if config is not None:
        # Interactive (web UI): cycle through the dataset until the user presses stop.
        tickets = CountingTickets(config.data.num_prompts, cycle=True)
        environment.qwen_bench = BenchState(config, tickets, lambda out: None)  # type: ignore[attr-defined]
