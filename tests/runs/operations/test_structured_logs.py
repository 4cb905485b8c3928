"""Structured logs: a ledger line written during an execution is JSON naming its run, worker
and lease, whatever the message says."""

from __future__ import annotations

import io
import json
import logging

import pytest

from ledger import transitions
from runs.operations.logs import LedgerContext, json_formatter

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_ledger_line_during_an_execution_is_json_with_run_worker_and_lease(
    execute, clock, crash_at
) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(LedgerContext())
    handler.setFormatter(json_formatter())
    logging.getLogger("ledger").addHandler(handler)
    try:
        run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}, clock=clock)
        crash_at("notify.after_effect")  # the notification has no read path: the run blocks
        execute(run.run_id, crash_expected=True)
        execute(run.run_id, worker="worker-2")
    finally:
        logging.getLogger("ledger").removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    blocked = next(line for line in lines if "needs attention" in line["message"])
    assert blocked["level"] == "WARNING" and blocked["logger"] == "ledger.processes.execute"
    assert blocked["run_id"] == run.run_id
    assert blocked["worker"] == "worker-2"
    assert len(blocked["lease"]) == 8
    assert "context" not in blocked and "time" in blocked


def test_a_signed_in_request_binds_its_actor_and_an_anonymous_one_none(rf) -> None:
    from django.contrib.auth.models import AnonymousUser, User

    from ledger import logcontext
    from runs.operations.logs import ActorMiddleware

    seen: list[dict[str, str]] = []

    def view(request):
        seen.append(dict(logcontext.current()))
        return None

    middleware = ActorMiddleware(view)
    signed_in = rf.get("/")
    signed_in.user = User.objects.create_user(username="olivia", password="x" * 16)
    middleware(signed_in)
    anonymous = rf.get("/")
    anonymous.user = AnonymousUser()
    middleware(anonymous)
    assert seen == [{"actor": "olivia"}, {}]
    assert logcontext.current() == {}
