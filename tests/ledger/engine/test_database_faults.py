"""A database error in the engine's own ledger write, in process, on PostgreSQL.

The database refuses a step write (a full disk, SQLSTATE 53100, raised by a trigger: the
stand-in for a tablespace on a full filesystem) or drops the connection in the middle of it
(the backend terminates itself: SQLSTATE 57P01, as when the server shuts down). The agent
wraps its effect in ``except Exception`` and tries again — the engine must not let it: whether
the intent committed is unknown, and an effect whose intent is not known to be recorded must
not be sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from ledger import transitions
from ledger.agents import RunContext, agent
from ledger.examples.agents import refund_charge
from ledger.examples.models import ProviderCharge
from ledger.models import Run, RunStatus, Step, StepStatus
from ledger.processes import sweep

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


@agent("stubborn_refund", plan_version="1", max_resumes=5, tools=[refund_charge])
def stubborn_refund(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Tries its refund three times, swallowing every Exception (agents do this)."""
    for _ in range(3):
        try:
            return ctx.call(refund_charge, step="refund", customer="cus_1", amount_cents=500)
        except Exception:  # the point: an agent that swallows errors
            continue
    return {"gave_up": True}


_REFUSE = """
CREATE OR REPLACE FUNCTION faults_refuse_step() RETURNS trigger AS $$
BEGIN
    IF NEW.step_id = 'refund' AND NEW.status = 'started' THEN
        IF TG_ARGV[0] = 'disk_full' THEN
            RAISE EXCEPTION 'could not extend file: No space left on device'
                USING ERRCODE = 'disk_full';
        ELSE
            PERFORM pg_terminate_backend(pg_backend_pid());
            PERFORM pg_sleep(5);
        END IF;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER faults_refuse_step BEFORE INSERT OR UPDATE ON ledger_step
    FOR EACH ROW EXECUTE FUNCTION faults_refuse_step('{action}');
"""


@contextlib.contextmanager
def refusing(action: str) -> Iterator[None]:
    with connection.cursor() as cur:
        cur.execute(_REFUSE.format(action=action))
    try:
        yield
    finally:
        connection.close()  # the terminated backend's connection is gone
        with connection.cursor() as cur:
            cur.execute("DROP TRIGGER IF EXISTS faults_refuse_step ON ledger_step")


def charges(run_id: str) -> int:
    return ProviderCharge.objects.filter(idempotency_key__startswith=f"{run_id}:").count()


def test_a_refused_intent_write_fails_the_run_and_the_agent_cannot_send_anyway(execute) -> None:
    run = transitions.run_start(agent="stubborn_refund", inputs={})
    with refusing("disk_full"):
        outcome = execute(run.run_id)
    assert outcome.status == RunStatus.FAILED
    assert "SQLSTATE 53100" in outcome.detail and "(intent)" in outcome.detail
    assert "the tool was not called" in outcome.detail
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "No space left on device" in run.error
    assert charges(run.run_id) == 0  # not once, though the agent tried three times
    assert not Step.objects.filter(run_id=run.run_id, step_id="refund").exists()


def test_a_connection_lost_in_an_intent_write_leaves_the_run_to_the_sweep(execute, clock) -> None:
    run = transitions.run_start(agent="stubborn_refund", inputs={})
    with refusing("terminate"):
        outcome = execute(run.run_id)
    assert outcome is None  # nothing recorded: the database was gone
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.lease_token  # held until it expires
    assert charges(run.run_id) == 0
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    assert sweep.runs_sweep(clock=clock) == [run.run_id]
    outcome = execute(run.run_id)
    assert outcome.status == RunStatus.SUCCEEDED
    assert charges(run.run_id) == 1
    step = Step.objects.get(run_id=run.run_id, step_id="refund")
    assert step.status == StepStatus.SUCCEEDED and step.attempt == 1
    assert Run.objects.get(pk=run.run_id).resume_count == 1
