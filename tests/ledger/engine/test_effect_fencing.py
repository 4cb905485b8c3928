"""Fencing for effects: a worker frozen past its lease must not send its effect when it wakes.

Real Celery workers on the test database (``harness.cluster``). Worker A freezes itself with
SIGSTOP (its whole process group, as a VM pause would) at a named hold point
(``RUNLEDGER_HOLD_AT``, ``harness.faults``) in one of two windows of an effect:

- (a) the intent row committed, the request not yet sent (``engine.before_send``);
- (b) the request sent, its result not committed (the provider's ``*.after_effect`` point);

for each of three providers: ``payment`` (idempotency keys, a lookup, fencing tokens),
``ledger`` (append-only, not idempotent, a lookup by key) and ``notify`` (no read path, no
idempotency). Worker B and the sweep take the run over and finish it (or stop it for a person);
then A gets SIGCONT. The effect counts are exact, and A, awake, writes nothing.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from harness.cluster import Cluster, wait_for
from ledger import transitions
from ledger.examples.models import LedgerEntry, Notification, ProviderCharge, ProviderFence
from ledger.models import Run, Step
from runs.operations.tasks import start_run
from tests.support import probe_agents  # noqa: F401  (registers the one_effect agent here too)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

LEASE = 3.0  # a heartbeat every second; the deadline 2.5 s after each renewal is sent
MARGIN = 0.5
#: How many effects each provider's table holds.
COUNT: dict[str, Callable[[], int]] = {
    "payment": lambda: ProviderCharge.objects.count(),
    "ledger": lambda: LedgerEntry.objects.count(),
    "notify": lambda: Notification.objects.count(),
}
AFTER_EFFECT = {
    "payment": "charge.after_effect",
    "ledger": "ledger.after_effect",
    "notify": "notify.after_effect",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.probe_agents",
        "PYTHONPATH": str(settings.BASE_DIR),
    }
    with Cluster(
        tmp_path, lease_seconds=LEASE, sweep_seconds=0.5, effect_margin=MARGIN, env=env
    ) as c:
        yield c
    connection.close()


def ledger_state(run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = Run.objects.values().get(pk=run_id)
    steps = list(Step.objects.filter(run_id=run_id).order_by("seq").values())
    return run, steps


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status in ("succeeded", "needs_attention")


def freeze_at(cluster: Cluster, tmp_path: Path, *, point: str, provider: str) -> tuple[Run, Any]:
    """Start a one-effect run on worker A, which SIGSTOPs its own group at ``point``."""
    mark = tmp_path / "held"
    victim = cluster.worker("a", env={"RUNLEDGER_HOLD_AT": point, "RUNLEDGER_HOLD_MARK": str(mark)})
    run = transitions.run_start(agent="one_effect", inputs={"provider": provider})
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: mark.exists() and mark.read_text().endswith("\n"), timeout=60), (
        cluster.log("a")
    )
    assert wait_for(lambda: is_stopped(victim), timeout=20)
    return run, victim


def is_stopped(proc: subprocess.Popen[bytes]) -> bool:
    """The worker's parent is in state T (stopped)."""
    with open(f"/proc/{proc.pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def take_over_then_wake(cluster: Cluster, run: Run, victim: Any) -> tuple[Any, Any]:
    """B and the sweep recover the run; then A wakes. Returns the ledger before and after."""
    cluster.worker("b")
    cluster.beat()
    assert wait_for(lambda: settled(run.run_id), timeout=60), cluster.log("b")
    before = ledger_state(run.run_id)
    Cluster.kill(victim, signal.SIGCONT)
    assert wait_for(lambda: "lost its lease" in cluster.log("a"), timeout=60), cluster.log("a")
    return before, ledger_state(run.run_id)


@pytest.mark.parametrize("provider", ["payment", "ledger", "notify"])
def test_a_worker_frozen_after_the_intent_never_sends_when_it_wakes(
    cluster, tmp_path, provider
) -> None:
    run, victim = freeze_at(cluster, tmp_path, point="engine.before_send", provider=provider)
    assert Step.objects.get(run_id=run.run_id, step_id="effect").status == "started"
    assert COUNT[provider]() == 0

    before, after = take_over_then_wake(cluster, run, victim)

    if provider == "notify":  # no read path: B cannot know, a person settles; nobody sent it
        assert (before[0]["status"], before[0]["reason"]) == ("needs_attention", "reconciliation")
        assert COUNT[provider]() == 0
    else:  # B's lookup said "not happened" and B sent it, once; A never did
        assert before[0]["status"] == "succeeded"
        assert [s["attempt"] for s in before[1]] == [2]
        assert COUNT[provider]() == 1
    assert after == before  # the woken worker wrote nothing
    assert before[0]["executions"] == 2
    assert "not sent: no lease renewal confirmed" in cluster.log("a", tail=200)


@pytest.mark.parametrize("provider", ["payment", "ledger", "notify"])
def test_a_worker_frozen_after_sending_commits_nothing_when_it_wakes(
    cluster, tmp_path, provider
) -> None:
    run, victim = freeze_at(cluster, tmp_path, point=AFTER_EFFECT[provider], provider=provider)
    assert Step.objects.get(run_id=run.run_id, step_id="effect").status == "started"
    assert COUNT[provider]() == 1

    before, after = take_over_then_wake(cluster, run, victim)

    assert after == before
    assert COUNT[provider]() == 1
    if provider == "notify":
        assert (before[0]["status"], before[0]["reason"]) == ("needs_attention", "reconciliation")
    else:  # settled by B's lookup, not sent again
        assert before[0]["status"] == "succeeded"
        assert [(s["status"], s["attempt"]) for s in before[1]] == [("succeeded", 1)]


def test_the_payment_provider_refuses_a_stale_holder_that_passed_its_check(
    cluster, tmp_path
) -> None:
    """Frozen inside the tool, after the lease check, before the request: only the provider
    can stop it. B's lookup carries fencing token 2, so A's request with 1 is refused."""
    run, victim = freeze_at(cluster, tmp_path, point="charge.before_effect", provider="payment")
    before, after = take_over_then_wake(cluster, run, victim)
    assert after == before
    assert before[0]["status"] == "succeeded"
    assert ProviderCharge.objects.count() == 1
    fence = ProviderFence.objects.get()
    assert (fence.token, fence.refused) == (2, 1)
