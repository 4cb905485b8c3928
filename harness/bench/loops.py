"""A tool-use loop's overhead: the example refund_loop (4 turns, 6 tool steps, 4 of them
effects) on each real SDK against the loopback provider of tests/support/llm_wire.py, executed
and then replayed (a resume that finds every step recorded asks the model nothing).

    DATABASE_URL=... RUNLEDGER_EXAMPLES=1 \
        .venv/bin/python manage.py shell < harness/bench/loops.py

Prints the median of five runs per SDK: the whole run, and the replay of the finished run.
"""

from __future__ import annotations

import os
import time

from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import transitions
from ledger.models import Run
from ledger.processes import execute
from tests.support.llm_wire import WireModel

with WireModel() as served:
    os.environ.update(
        ANTHROPIC_BASE_URL=served.url,
        ANTHROPIC_API_KEY="bench",
        OPENAI_BASE_URL=f"{served.url}/v1",
        OPENAI_API_KEY="bench",
    )
    for api in ("anthropic", "openai"):
        live, replay = [], []
        for _ in range(5):
            inputs = {"invoice_ids": ["inv_1001", "inv_1003"], "api": api}
            run = start_unannounced(agent="refund_loop", inputs=inputs)
            t = time.perf_counter()
            out = execute.run_execute(
                run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
            )
            live.append(time.perf_counter() - t)
            assert out is not None and out.status == "succeeded", out
            Run.objects.filter(pk=run.run_id).update(status="failed")
            transitions.run_resume(
                run_id=run.run_id, by="bench", reason="bench", seen_version=None, anyway=True
            )
            asked = len(served.requests)
            t = time.perf_counter()
            again = execute.run_execute(
                run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
            )
            replay.append(time.perf_counter() - t)
            assert again is not None and again.status == "succeeded", again
            assert len(served.requests) == asked  # the replay asked the model nothing
        print(
            f"refund_loop on {api}: 4 turns + 6 tool steps, median {sorted(live)[2] * 1000:.0f} ms"
            f" per run; replay of the finished run {sorted(replay)[2] * 1000:.0f} ms"
        )
