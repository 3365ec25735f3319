"""Ctrl-C on the simulator with a stream in flight: it stops at once, the stream ends cleanly.

Issue 40 item 10: uvicorn's graceful shutdown waited up to its timeout (3 s) for the stream, then
cancelled it, which logged an ``Exception in ASGI application`` traceback. Now the engine ends the
requests in flight at the first SIGINT. Events only: the first token read, the process exiting;
the stream asked for would run for minutes, so an exit at all proves it did not wait for it, and
uvicorn's own "timeout graceful shutdown exceeded" line must not appear.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.sim.test_drain import StreamReader, exit_code, sim

pytestmark = pytest.mark.slow


def test_sigint_with_a_stream_in_flight_stops_at_once_without_a_traceback(tmp_path: Path) -> None:
    with sim(tmp_path, None, "--itl-ms", "20") as (url, proc):
        reader = StreamReader(url, max_new=20000).start()  # 400 s of tokens at 20 ms each
        assert reader.first.wait(30) and reader.events, reader.error
        proc.send_signal(signal.SIGINT)
        assert exit_code(proc) == 0
        assert reader.done.wait(30)
    log = (tmp_path / f"sim-{url.rsplit(':', 1)[1]}.log").read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert "timeout graceful shutdown exceeded" not in log, log
    assert "event=interrupted" in log and "in_flight=1" in log, log
    # The stream was ended by the server (no [DONE]: it did not finish), not broken mid-event.
    assert reader.error is None and reader.events and reader.events[-1] != "[DONE]"
    assert len(reader.events) < 20000
