"""What the metrics hook adds to each step write: ``ledger.observe.emit("step_written")`` with
the Prometheus observer subscribed, against no observer. Prints microseconds per call.

    RUNLEDGER_VAR_DIR=$(mktemp -d) .venv/bin/python harness/bench/observe_overhead.py
    PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) RUNLEDGER_VAR_DIR=$(mktemp -d) \\
        .venv/bin/python harness/bench/observe_overhead.py      # as under gunicorn and Celery
"""

from __future__ import annotations

import os
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")

import django

django.setup()

from ledger import observe  # noqa: E402
from runs.operations import metrics  # noqa: E402

CALLS = 200_000


def emit() -> None:
    observe.emit(
        "step_written", run_id="run_x", step_id="s", kind="read", status="succeeded", seconds=1e-3
    )


def per_call() -> float:
    return min(timeit.repeat(emit, number=CALLS, repeat=5)) / CALLS * 1e6


def main() -> None:
    mode = "multiprocess" if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else "one process"
    observed = per_call()
    observe.unsubscribe(metrics.observe)
    bare = per_call()
    print(
        f"observe ({mode}): {observed:.2f} us per step with the Prometheus observer, "
        f"{bare:.2f} us with none"
    )


if __name__ == "__main__":
    main()
