"""Memory of a real worker (docs/platform/sizing.md): a Celery worker with ``-c 4`` (prefork)
executes 16 survey runs of ~330 steps each; then each process's RSS and PSS (its share of the
pages the forked children share with their parent) are read from /proc.

    DATABASE_URL=... RUNLEDGER_HARNESS=1 \\
        .venv/bin/python manage.py shell < harness/bench/worker_memory.py

(with a migrated PostgreSQL: ``harness/with_postgres.py`` runs it on a throwaway one). Prints
``name: value unit`` lines.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness.cluster import Cluster, wait_for
from ledger import transitions
from ledger.models import Run
from runs.operations.tasks import start_run


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def _kib(pid: int, field: str, source: str) -> int:
    for line in Path(f"/proc/{pid}/{source}").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


root = Path(tempfile.mkdtemp(prefix="worker-memory-"))
with Cluster(
    root, lease_seconds=30.0, env={"RUNLEDGER_AGENT_MODULES": "ledger.examples.agents"}
) as c:
    worker = c.worker("mem", concurrency=4)
    runs = [transitions.run_start(agent="survey", inputs={"records": 300}) for _ in range(16)]
    for run in runs:
        c.send(start_run, run.run_id)
    ids = [r.run_id for r in runs]
    assert wait_for(
        lambda: Run.objects.filter(pk__in=ids, status="succeeded").count() == len(ids),
        timeout=600,
    ), c.log("mem")
    pids = [worker.pid, *_children(worker.pid)]
    rss = {pid: _kib(pid, "VmRSS", "status") for pid in pids}
    pss = {pid: _kib(pid, "Pss", "smaps_rollup") for pid in pids}
    print(f"worker_parent_rss: {rss[worker.pid] / 1024:.0f} MiB")
    children = [p for p in pids if p != worker.pid]
    print(f"pool_processes: {len(children)}")
    print(f"pool_child_rss: {max(rss[p] for p in children) / 1024:.0f} MiB (largest)")
    print(f"pool_child_pss: {max(pss[p] for p in children) / 1024:.0f} MiB (largest)")
    print(f"worker_total_pss: {sum(pss.values()) / 1024:.0f} MiB (-c 4, parent and pool)")
