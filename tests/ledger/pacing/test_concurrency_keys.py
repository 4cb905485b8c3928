"""Concurrency keys (``ledger.pacing``): at most ``limit`` runs of a key execute at once, decided
when a worker claims the run; a held-back run stays queued saying why, and is offered again when
a slot frees."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import api, registry, transitions
from ledger.errors import AgentDefinitionError
from ledger.models import Execution, ExecutionEnding, Run, RunStatus
from ledger.processes.execute import run_execute
from tests.support import paced_agents  # noqa: F401 - registers the agents
from tests.support.announcements import recording

pytestmark = pytest.mark.django_db(transaction=True)


def _claim(run_id: str, owner: str = "w1", **kw: object) -> str | None:
    return transitions.lease_claim(run_id=run_id, owner=owner, seconds=30, **kw)  # type: ignore[arg-type]


def test_the_agents_declared_key_is_made_from_the_inputs() -> None:
    run = Run.objects.get(pk=api.start_run("paced", {"customer": "cus_42"}).run_id)
    assert (run.concurrency_key, run.concurrency_limit) == ("customer:cus_42", 1)
    plain = Run.objects.get(pk=api.start_run("paced-free", {}).run_id)
    assert (plain.concurrency_key, plain.concurrency_limit) == ("", 0)


def test_a_second_run_of_a_full_key_stays_queued_and_says_why() -> None:
    first = api.start_run("paced", {"customer": "cus_42"}).run_id
    second = api.start_run("paced", {"customer": "cus_42"}).run_id
    other = api.start_run("paced", {"customer": "cus_7"}).run_id
    assert _claim(first) is not None
    assert _claim(second, "w2") is None
    assert _claim(other, "w2") is not None  # another key is not held back
    held = Run.objects.get(pk=second)
    assert held.status == RunStatus.QUEUED and held.lease_token is None
    assert held.executions == 0 and not Execution.objects.filter(run_id=second).exists()
    assert held.detail == "waiting: 1 of 1 running for customer cus_42"


def test_a_start_gives_its_own_key_and_limit() -> None:
    ids = [
        api.start_run("paced-free", {}, concurrency_key="sandbox", concurrency_limit=2).run_id
        for _ in range(3)
    ]
    assert [_claim(r, f"w{i}") is not None for i, r in enumerate(ids)] == [True, True, False]
    assert Run.objects.get(pk=ids[2]).detail == "waiting: 2 of 2 running for key sandbox"


def test_a_finished_run_offers_its_slot_to_the_oldest_queued_run_of_its_key() -> None:
    first = api.start_run("paced", {"customer": "cus_42", "seconds": 0}).run_id
    second = api.start_run("paced", {"customer": "cus_42", "seconds": 0}).run_id
    third = api.start_run("paced", {"customer": "cus_42", "seconds": 0}).run_id
    with recording(with_starts=False) as heard:
        outcome = run_execute(run_id=second, worker="w2", heartbeat=False)
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED
    assert heard.seen == [(first, "slot")]  # one slot: the oldest queued run, not the third
    assert run_execute(run_id=first, worker="w1", heartbeat=False) is not None
    assert Run.objects.get(pk=first).status == RunStatus.SUCCEEDED
    assert Run.objects.get(pk=third).status == RunStatus.QUEUED


def test_a_dead_workers_slot_frees_with_its_lease() -> None:
    now = timezone.now()
    first = api.start_run("paced", {"customer": "cus_42"}).run_id
    second = api.start_run("paced", {"customer": "cus_42"}).run_id
    old = transitions.lease_claim(run_id=first, owner="dead", seconds=5, clock=lambda: now)
    assert old is not None
    transitions.execution_begin(run_id=first, number=1, worker="dead", clock=lambda: now)
    assert _claim(second, "w2", clock=lambda: now + timedelta(seconds=1)) is None
    later = now + timedelta(seconds=6)  # the dead worker's lease ran out
    with recording(with_starts=False) as heard:
        assert _claim(second, "w2", clock=lambda: later) is not None
    dead = Run.objects.get(pk=first)
    assert dead.status == RunStatus.QUEUED and dead.lease_token is None  # fenced, re-queued
    assert Execution.objects.get(run_id=first).ending == ExecutionEnding.CRASHED
    assert heard.seen == [(first, "recovery")]
    # The re-queued run now waits for the slot like any other.
    assert _claim(first, "w3", clock=lambda: later) is None


def test_a_run_without_a_key_is_claimed_as_before() -> None:
    ids = [api.start_run("paced-free", {}).run_id for _ in range(3)]
    assert all(_claim(r, f"w{i}") is not None for i, r in enumerate(ids))


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"concurrency_key": "k", "concurrency_limit": -1}, "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": 0}, "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": True}, "concurrency_limit"),
        ({"concurrency_limit": 2}, "needs a concurrency_key"),
        ({"concurrency_key": ""}, "concurrency_key"),
        ({"concurrency_key": "x" * 201}, "concurrency_key"),
    ],
)
def test_bad_concurrency_options_are_refused_and_nothing_is_written(options, says) -> None:
    with pytest.raises(api.InvalidInput, match=says):
        api.start_run("paced-free", {}, **options)
    with pytest.raises(api.BatchRefused):
        api.start_runs([{"agent": "paced-free", **options}])
    assert not Run.objects.exists()


def test_inputs_without_the_declared_key_are_refused() -> None:
    with pytest.raises(api.InvalidInput, match=r"inputs\.customer"):
        api.start_run("paced", {"invoice": "inv_1"})
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "spec",
    [
        {"key": "customer"},
        {"key": "inputs."},
        {"key": "inputs.customer", "limit": 0},
        {"key": "inputs.customer", "per": 1},
        "inputs.customer",
    ],
)
def test_a_bad_declaration_is_refused_when_the_agent_is_defined(spec) -> None:
    with pytest.raises(AgentDefinitionError):
        registry.agent("paced-bad", concurrency=spec)(lambda ctx, inputs: None)
    assert registry.get_agent("paced-bad") is None
