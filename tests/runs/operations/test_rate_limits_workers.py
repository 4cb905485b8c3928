"""A rate limit on real Celery workers and PostgreSQL (issue 34): a tool limited to 10/min, 50
calls from 5 runs on 2 worker processes, counted at a loopback downstream — never more than 10
in any minute of the workers' clock, none lost, none twice.

The workers' clock is stopped (``harness.faults``: ``@<unix seconds>`` in
RUNLEDGER_CLOCK_OFFSET_FILE) and moved on by the test one slot (6 s) at a time once the call due
at the slot has arrived: five minutes of calls in seconds, and the downstream stamps each call
with the clock it arrived under.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from harness.cluster import Cluster, wait_for
from harness.unannounced import start_unannounced
from ledger.models import Execution, RateLimit, Run
from runs.operations.tasks import start_run
from tests.support import ratelimited_agents
from tests.support.receivers import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 120  # seconds any condition may take on a loaded machine before the test fails
MODULES = f"ledger.examples.agents,{ratelimited_agents.__name__}"
SLOT = 6.0  # 10/min


class Downstream:
    """A loopback HTTP service that stamps each call with the workers' (stopped) clock."""

    def __init__(self, clock_file: Path) -> None:
        self.calls: list[tuple[float, str]] = []
        self.port = free_port()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                at = float(clock_file.read_text().strip()[1:])
                outer.calls.append((at, self.headers["Idempotency-Key"]))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(json.dumps({"ok": True}).encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/calls"

    def most_in_a_minute(self) -> int:
        times = sorted(at for at, _ in self.calls)
        return max((sum(1 for t in times if a <= t < a + 60) for a in times), default=0)


def stop_clock(path: Path, at: float) -> None:
    """Stop the workers' clock at ``at``: written whole (renamed into place), never read half."""
    part = path.with_suffix(".part")
    part.write_text(f"@{at:.3f}")
    os.replace(part, path)


@pytest.fixture
def clock_file(tmp_path: Path) -> Path:
    path = tmp_path / "clock"
    stop_clock(path, time.time())
    return path


@pytest.fixture
def cluster(tmp_path: Path, clock_file: Path) -> Iterator[Cluster]:
    env = {
        "RUNLEDGER_AGENT_MODULES": MODULES,
        "RUNLEDGER_CLOCK_OFFSET_FILE": str(clock_file),
        "RUNLEDGER_RATE_LIMIT_HOLD_SECONDS": "60",  # two workers wait two slots at most
    }
    with Cluster(tmp_path / "cluster", lease_seconds=5.0, lost_after=3600.0, env=env) as c:
        yield c
    connection.close()


def test_a_tool_limited_to_10_a_minute_gets_at_most_10_calls_in_any_minute_from_two_workers(
    cluster: Cluster, clock_file: Path
) -> None:
    downstream = Downstream(clock_file)
    inputs = {"calls": 10, "url": downstream.url}
    runs = [start_unannounced(agent="rated", inputs=inputs).run_id for _ in range(5)]
    cluster.worker("w1", concurrency=1)
    cluster.worker("w2", concurrency=1)
    for run_id in runs:
        cluster.send(start_run, run_id)

    def finished() -> bool:
        return Run.objects.filter(pk__in=runs, status="succeeded").count() == len(runs)

    seen, started = 0, time.monotonic()
    while not finished():
        assert time.monotonic() - started < 10 * WAIT, cluster.log("w1") + cluster.log("w2")
        # The call due at this slot arrives (or every run is done); then the clock moves on.
        arrived = wait_for(lambda n=seen: len(downstream.calls) > n or finished(), timeout=WAIT)
        assert arrived, cluster.log("w1") + cluster.log("w2")
        seen = len(downstream.calls)
        stop_clock(clock_file, float(clock_file.read_text()[1:]) + SLOT)

    keys = [key for _, key in downstream.calls]
    assert sorted(keys) == sorted(f"{r}:{n}" for r in runs for n in range(10))  # none lost, once
    assert downstream.most_in_a_minute() == 10  # at the limit, never above it
    row = RateLimit.objects.get(pk="tool:rated_ping")
    assert row.taken == 50 and row.rate == "10/min"
    # Both workers executed runs: the limit held across processes, not within one.
    workers = Execution.objects.filter(run_id__in=runs).values_list("worker", flat=True)
    assert {w.split("@")[0] for w in workers} == {"w1", "w2"}
    downstream.server.shutdown()
