"""Fan-out wall time: 8 reads of 50 ms each through ctx.parallel, 1, 4 and 8 workers at once.

    DATABASE_URL=... .venv/bin/python manage.py shell < harness/bench/fanout.py

Prints the median of three runs per width; the floor is one read (50 ms) plus the writes.
"""

from __future__ import annotations

import time

from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger.agents import agent
from ledger.examples.agents import lookup_record
from ledger.processes import execute


@agent("fanout-bench", tools=[lookup_record])
def bench(ctx, inputs):
    reads = {
        f"r{i:02d}": (lookup_record, {"index": i, "delay_ms": inputs["delay_ms"]})
        for i in range(inputs["n"])
    }
    return ctx.parallel(reads, step="fan", max_workers=inputs["workers"])


for workers in (1, 4, 8):
    times = []
    for _ in range(3):
        inputs = {"n": 8, "delay_ms": 50, "workers": workers}
        run = start_unannounced(agent="fanout-bench", inputs=inputs)
        t = time.perf_counter()
        out = execute.run_execute(
            run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
        )
        times.append(time.perf_counter() - t)
        assert out is not None and out.status == "succeeded"
    median = sorted(times)[1] * 1000
    print(f"fan-out of 8 reads of 50 ms, max_workers={workers}: median {median:.0f} ms per run")
