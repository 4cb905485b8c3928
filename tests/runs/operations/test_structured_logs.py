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


@pytest.mark.sqlite_ok
def test_a_retried_task_whose_next_attempt_starts_on_another_thread_unbinds_its_own_fields() -> (
    None
):
    """A retry is sent again under the same task id; in a threads pool (a worker holding many
    runs) its next attempt can begin on another thread before this attempt ends. Each attempt
    unbinds the fields it bound, in its own thread's context (before: the first attempt popped
    the second's token and Celery logged "created in a different Context")."""
    import threading

    from ledger import logcontext
    from runs.celery import _bind_task, _unbind_task

    first_bound, second_bound, errors = threading.Event(), threading.Event(), []

    def first() -> None:
        try:
            _bind_task("task-1", None, args=("run_first",))
            first_bound.set()
            second_bound.wait(timeout=60)
            _unbind_task("task-1")
            assert logcontext.current() == {}
        except Exception as exc:
            errors.append(exc)

    def second() -> None:
        first_bound.wait(timeout=60)
        _bind_task("task-1", None, args=("run_first",))
        second_bound.set()
        assert logcontext.current()["task_id"] == "task-1"
        _unbind_task("task-1")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
