"""Fixtures and test agents for the operator actions (ledger.transitions): the tests under
transitions/ and the admin's (test_admin.py, whose edits go through the same transitions)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harness.unannounced import start_unannounced
from ledger.models import Run
from tests.support.announcements import Announcements, recording
from tests.support.operator_agents import CHAIN, LOOKUP


@pytest.fixture(autouse=True)
def _reset_knobs() -> Any:
    LOOKUP["mode"] = "unknown"
    CHAIN.update(salt="v1", factor=2)
    yield
    LOOKUP["mode"] = "unknown"
    CHAIN.update(salt="v1", factor=2)


# --- people and the enqueue hook --------------------------------------------------------------


@dataclass
class People:
    alice: Any  # an operator
    bob: Any  # an approver
    carol: Any  # another approver


@pytest.fixture
def people(django_user_model: Any) -> People:
    make = django_user_model.objects.create_user
    return People(
        alice=make(username="alice"),
        bob=make(username="bob"),
        carol=make(username="carol"),
    )


@pytest.fixture
def enqueued() -> Iterator[Announcements]:
    """The runs announced to the workers after a commit (``.ids``, in order), but for the test's
    own starts."""
    with recording(with_starts=False) as record:
        yield record


# --- runs in the states the operator actions start from ---------------------------------------


@pytest.fixture
def blocked(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Callable[..., Run]:
    """Start ``agent``, crash at ``point``, resume once: the run stops for a person."""

    def make(agent_name: str, inputs: dict[str, Any], point: str, reason: str) -> Run:
        run = start_unannounced(agent=agent_name, inputs=inputs)  # the test executes it
        crash_at(point)
        execute(run.run_id, crash_expected=True)
        outcome = execute(run.run_id, worker="worker-2")
        assert (outcome.status, outcome.reason) == ("needs_attention", reason), outcome
        run.refresh_from_db()
        return run

    return make
