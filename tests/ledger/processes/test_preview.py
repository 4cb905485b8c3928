from __future__ import annotations

import pytest

from ledger import transitions
from ledger.examples import agents as examples
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import Run, Step
from ledger.processes.preview import preview_resume

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def snapshot(run_id: str) -> list[tuple]:
    return list(Step.objects.filter(run_id=run_id).order_by("seq").values_list())


def test_preview_of_a_crashed_effect_lists_replays_and_the_step_to_settle(
    execute, crash_at
) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("notify.after_effect")
    execute(run.run_id, crash_expected=True)
    before = (snapshot(run.run_id), Notification.objects.count(), ProviderCharge.objects.count())
    preview = preview_resume(run_id=run.run_id)
    actions = [(s.step_id, s.action) for s in preview.steps]
    assert actions == [
        ("fetch_invoice", "replay"),
        ("decided_at", "replay"),
        ("decide", "replay"),
        ("refund", "replay"),
        ("email_customer", "replay"),
        ("notify", "settle"),
    ]
    assert preview.steps[-1].reconcile_available is False
    assert "must be settled" in preview.stopped
    assert (
        snapshot(run.run_id),
        Notification.objects.count(),
        ProviderCharge.objects.count(),
    ) == before


def test_preview_marks_a_stale_step_with_both_inputs_and_its_downstream(
    execute, crash_at, monkeypatch
) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("email.before_effect")
    execute(run.run_id, crash_expected=True)
    monkeypatch.setattr(
        examples, "REFUND_PROMPT", "Refund {invoice_id}? {total_cents} cents: {reason} {customer}"
    )
    preview = preview_resume(run_id=run.run_id)
    by_id = {s.step_id: s for s in preview.steps}
    stale = by_id["decide"]
    assert stale.action == "stale" and stale.stored_hash != stale.current_hash
    assert stale.stored_inputs["prompt"] != stale.current_inputs["prompt"]
    assert by_id["refund"].after_stale and not by_id["fetch_invoice"].after_stale
    assert by_id["email_customer"].action == "settle"
    assert OutboxMessage.objects.count() == 0


def test_preview_reports_a_missing_agent_instead_of_failing(execute) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    Run.objects.filter(pk=run.run_id).update(agent="deleted-agent")
    preview = preview_resume(run_id=run.run_id)
    assert not preview.available and "deleted-agent" in preview.unavailable_reason


def test_preview_of_a_fresh_run_says_the_first_step_would_execute() -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    preview = preview_resume(run_id=run.run_id)
    assert [(s.step_id, s.action) for s in preview.steps] == [("fetch_invoice", "execute")]


def test_the_dry_replay_holds_the_collector_off_and_gives_it_back(execute, monkeypatch) -> None:
    """The agent's dry replay runs with Python's cyclic collector held off (its objects hold no
    cycles; a 10,000-step replay went 180 → 133 ms), and the collector is on again after it —
    after a replay that stops early too — and stays off for a caller that had it off."""
    import dataclasses
    import gc

    from ledger import registry
    from ledger.engine import collector

    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    seen: list[bool] = []
    definition = registry.get_agent("refund")
    body = definition.fn

    def watched(ctx, inputs):
        seen.append(gc.isenabled())
        return body(ctx, inputs)

    def with_body(fn):
        changed = dataclasses.replace(definition, fn=fn)
        monkeypatch.setattr(registry, "get_agent", lambda name: changed)

    with_body(watched)
    assert gc.isenabled()
    preview = preview_resume(run_id=run.run_id)
    assert preview.finished and seen == [False]
    assert gc.isenabled()
    with_body(lambda ctx, inputs: 1 / 0)
    assert "ZeroDivisionError" in preview_resume(run_id=run.run_id).error
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.held_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
