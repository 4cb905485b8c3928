"""Recovery under production stress (issue 24), on real workers and PostgreSQL: a worker host
lost (SIGKILL) with hundreds of runs queued, and the database restarted under queued and running
runs. The tests assert what happened (tests/runs/operations/test_recovery_under_load.py);
``manage.py bench_recovery`` prints how long it took.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.core.management import call_command
from django.db import OperationalError, connection

from harness.bench import agents
from harness.cluster import Cluster, wait_for
from harness.servers import PostgresServer
from harness.unannounced import start_unannounced
from ledger import transitions
from ledger.engine import pooling
from ledger.models import FINAL_STATUSES, Run, RunStatus
from runs.operations.tasks import start_run

AGENT = "bench-slow"
MODULES = f"ledger.examples.agents,{agents.__name__}"
#: Celery's line for a task sent again by autoretry (runs.operations.tasks: DATABASE_ERRORS).
RETRY_LINE = re.compile(r"Task runledger\.(start|resume)_run\[\S+\] retry: Retry in")


def queue_slow_runs(cluster: Cluster, n: int, *, hold: float) -> list[str]:
    """``n`` runs of the slow agent, queued in the ledger and sent to the cluster's broker."""
    ids = [start_unannounced(agent=AGENT, inputs={"hold": hold}).run_id for _ in range(n)]
    for run_id in ids:
        cluster.send(start_run, run_id)
    return ids


def count(run_ids: list[str], *statuses: str) -> int:
    return Run.objects.filter(pk__in=run_ids, status__in=statuses).count()


# --- a worker host lost under a deep queue --------------------------------------------------


@dataclass
class HostLost:
    """What happened when host ``a`` was SIGKILLed with the queue deep."""

    run_ids: list[str]
    orphans: list[str]  # the runs host a was executing when it died
    queued_at_kill: int
    requeued_after: float = 0.0  # s from the kill until the sweep had re-queued every orphan
    queued_at_requeue: int = 0  # the backlog then
    taken_after: float = 0.0  # s from the kill until another worker had claimed every orphan
    queued_at_takeover: int = 0  # the backlog then
    seen: dict[str, float] = field(default_factory=dict)


def lose_a_host_under_a_deep_queue(
    cluster: Cluster, *, runs: int, hold: float, concurrency: int = 2, timeout: float = 300
) -> HostLost:
    """Two hosts (``runledger worker``, each its runs' pool and its control process) and beat;
    ``runs`` slow runs queued; once host a executes ``concurrency`` of them, its whole process
    group is SIGKILLed (a machine lost). Returns when host b has claimed every orphan."""
    victim = cluster.runledger_worker("host-a", concurrency=concurrency)
    cluster.runledger_worker("host-b", concurrency=concurrency)
    cluster.beat()
    run_ids = queue_slow_runs(cluster, runs, hold=hold)
    on_a = Run.objects.filter(status=RunStatus.RUNNING, lease_owner__startswith="host-a@")
    if not wait_for(lambda: on_a.count() >= concurrency, timeout=timeout):
        raise TimeoutError(f"host a never took {concurrency} runs:\n{cluster.log('host-a')}")
    Cluster.kill(victim)
    killed = time.monotonic()
    victim.wait(timeout=60)
    # Read after the kill: a run that finished in between is no orphan.
    orphans = list(on_a.values_list("run_id", flat=True))
    lost = HostLost(run_ids, orphans, queued_at_kill=count(run_ids, RunStatus.QUEUED))
    taken = Run.objects.filter(pk__in=orphans, executions__gte=2)
    released = Run.objects.filter(pk__in=orphans).exclude(lease_owner__startswith="host-a@")

    def progress() -> bool:
        now = time.monotonic() - killed
        if not lost.requeued_after and released.count() == len(orphans):
            lost.requeued_after, lost.queued_at_requeue = now, count(run_ids, RunStatus.QUEUED)
        if taken.count() == len(orphans):
            lost.taken_after, lost.queued_at_takeover = now, count(run_ids, RunStatus.QUEUED)
            return True
        return False

    if not wait_for(progress, timeout=timeout):
        raise TimeoutError(f"the orphans {orphans} were not taken over:\n{cluster.log('host-b')}")
    lost.requeued_after = lost.requeued_after or lost.taken_after
    return lost


def cancel_backlog(run_ids: list[str], *, keep: list[str]) -> None:
    """Cancel the runs still queued, but ``keep`` (so that a test need not wait for them)."""
    for run_id in Run.objects.filter(pk__in=run_ids, status=RunStatus.QUEUED).values_list(
        "run_id", flat=True
    ):
        if run_id not in keep:
            with contextlib.suppress(transitions.OperationError):
                transitions.run_cancel(
                    run_id=run_id, by="test", reason="backlog not needed", seen_version=None
                )


# --- the database restarted under the runs --------------------------------------------------


@contextlib.contextmanager
def default_database(server: PostgresServer) -> Iterator[None]:
    """Point this process's default connection at ``server`` (migrated), then back. With the
    connection pool on, the pool (made from the settings it first saw) is closed on each side:
    a pooled connection would still be the old database's."""
    saved = dict(connection.settings_dict)
    _forget_connections()
    connection.settings_dict.update(
        NAME="postgres", HOST="127.0.0.1", PORT=server.port, USER="postgres", PASSWORD=""
    )
    try:
        call_command("migrate", verbosity=0)
        yield
    finally:
        _forget_connections()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def _forget_connections() -> None:
    pooling.close_pool()  # with the pool on, its kept connections too


def statuses(run_ids: list[str]) -> dict[str, str]:
    """The runs' statuses; {} while the database cannot answer (it is restarting)."""
    try:
        return dict(Run.objects.filter(pk__in=run_ids).values_list("run_id", "status"))
    except OperationalError:
        connection.close()
        return {}


def all_final(run_ids: list[str]) -> bool:
    found = statuses(run_ids)
    done = (*FINAL_STATUSES, RunStatus.NEEDS_ATTENTION)
    return len(found) == len(run_ids) and all(s in done for s in found.values())


@dataclass
class DatabaseRestart:
    run_ids: list[str]
    queued_at_stop: int
    running_at_stop: int
    down_seconds: float = 0.0
    done_after: float = 0.0  # s from the database's return until every run had ended
    retries: int = 0  # tasks sent again with back-off while the database was away


def restart_database_under_runs(
    cluster: Cluster,
    server: PostgresServer,
    *,
    runs: int,
    hold: float,
    workers: tuple[str, ...],
    stay_down: Callable[[], object],
    timeout: float = 300,
) -> DatabaseRestart:
    """Queue ``runs`` slow runs on ``workers`` (already started); once some run and the rest
    are queued, stop PostgreSQL (immediate: a crash), call ``stay_down()`` (a condition to wait
    for, or a fixed time for a benchmark), start it again; returns when every run has ended."""
    run_ids = queue_slow_runs(cluster, runs, hold=hold)
    if not wait_for(lambda: count(run_ids, RunStatus.RUNNING) >= 2, timeout=timeout):
        raise TimeoutError(f"the runs never started:\n{cluster.log(workers[0])}")
    queued, running = count(run_ids, RunStatus.QUEUED), count(run_ids, RunStatus.RUNNING)
    connection.close()
    stopped = time.monotonic()
    server.stop()
    try:
        stay_down()
    finally:
        server.start()
    back = time.monotonic()
    restart = DatabaseRestart(run_ids, queued_at_stop=queued, running_at_stop=running)
    restart.down_seconds = back - stopped
    if not wait_for(lambda: all_final(run_ids), timeout=timeout, interval=0.2):
        raise TimeoutError(f"{statuses(run_ids)}\n{cluster.log(workers[0])}")
    restart.done_after = time.monotonic() - back
    restart.retries = retries_logged(cluster, workers)
    return restart


def retries_logged(cluster: Cluster, workers: tuple[str, ...]) -> int:
    return sum(len(RETRY_LINE.findall(cluster.log(w, tail=1_000_000))) for w in workers)
