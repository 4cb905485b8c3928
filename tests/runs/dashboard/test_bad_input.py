"""Bad input never answers 500 (issue 14, item 5): the eight requests a hostile-user suite found,
each reproduced, plus run ids, the admin and the commands. Each answers a clear message and
writes nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from harness.cluster import Cluster
from ledger import transitions
from ledger.errors import InvalidInput
from ledger.models import AuditEvent, Run, Settlement, Step
from tests.support.dashboard_runs import renewal_run, user_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

DEEP_LISTS = "[" * 990 + "]" * 990
VERY_DEEP_LISTS = "[" * 100_000
DEEP_OBJECTS = '{"a":' * 5_000 + "1" + "}" * 5_000
LONG_INT = "9" * 5_000
HOSTILE_RESULTS = [DEEP_LISTS, VERY_DEEP_LISTS, DEEP_OBJECTS, LONG_INT, '{"n": ' + LONG_INT + "}"]
NUL_RESULTS = ['{"ref": "a\\u0000b"}', '{"a\\u0000": 1}', '"\\ud800"', "NaN", '{"x": Infinity}']


@pytest.fixture(autouse=True)
def _clean(dashboard_ready, settings) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    """A broker folder of this test's own (no workers): what the views enqueue lands here."""
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


def client_as(role: str, name: str) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user_in(role, name=name))
    return client


@pytest.fixture
def olive() -> Client:
    return client_as("operator", "olive")


def counts() -> tuple[int, int, int, int]:
    return (
        Run.objects.count(),
        Step.objects.count(),
        Settlement.objects.count(),
        AuditEvent.objects.count(),
    )


def legacy_run(run_id: str) -> Run:
    """A run stored before run ids were checked (as old data or another tool may have)."""
    run = transitions.run_start(agent="survey", inputs={"records": 1})
    Run.objects.filter(pk=run.run_id).update(run_id=run_id)
    return Run.objects.get(pk=run_id)


# --- run ids ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run_id", ["a/b", "", "x" * 65, "a b", "a\x00b", "..", ".hidden", "é", "a?b", "a#b"]
)
def test_a_run_id_outside_the_documented_set_is_refused_where_a_run_is_created(run_id) -> None:
    before = counts()
    with pytest.raises(InvalidInput, match="run id"):
        transitions.run_start(agent="survey", inputs={}, run_id=run_id)
    assert counts() == before


@pytest.mark.parametrize("run_id", ["a", "run_1", "order:1234.v2-retry", "A" * 64, "_x"])
def test_a_run_id_in_the_documented_set_is_accepted(run_id) -> None:
    assert transitions.run_start(agent="survey", inputs={}, run_id=run_id).run_id == run_id


def test_the_start_run_command_refuses_a_run_id_with_a_slash_and_writes_nothing() -> None:
    before = counts()
    with pytest.raises(CommandError, match="run id"):
        call_command("start_run", "survey", "--run-id", "a/b", "--inputs", "{}")
    assert counts() == before


@pytest.mark.parametrize("run_id", ["a/b", "..", "50%", "%2F", "a\nb", "ünï cödé", "a?b#c"])
def test_runs_stored_with_any_id_still_list_link_and_open(olive, run_id) -> None:
    legacy_run(run_id)
    for url in ("/", "/?status=queued", "/bulk/?action=cancel&scope=filter&status=queued"):
        response = olive.get(url)
        assert response.status_code == 200, url
    link = reverse("runs:detail", args=[run_id])
    assert link in olive.get("/").content.decode()
    page = olive.get(link)
    assert page.status_code == 200
    assert run_id in page.content.decode() or "&" in run_id


# --- the eight known 500s -----------------------------------------------------------------


def test_a_nul_byte_in_the_page_cursor_is_a_message(olive) -> None:
    transitions.run_start(agent="survey", inputs={"records": 1})
    cursor = base64.urlsafe_b64encode(b"2020-01-01T00:00:00+00:00|\x00").decode().rstrip("=")
    response = olive.get(f"/?after={cursor}")
    assert response.status_code == 200
    assert "page link is damaged" in response.content.decode()


def test_an_audit_date_at_the_end_of_the_calendar_is_a_message(olive) -> None:
    for query in ("until=9999-12-31", "since=9999-12-31", "since=0001-01-01&until=0001-01-01"):
        response = olive.get(f"/audit/?{query}")
        assert response.status_code == 200, query
        assert "Ignored" in response.content.decode(), query


def test_a_5000_digit_resume_budget_on_the_bulk_preview_is_a_message(olive) -> None:
    run = transitions.run_start(agent="survey", inputs={"records": 1})
    response = olive.get(f"/bulk/?action=resume&run={run.run_id}&max_resumes={LONG_INT}")
    assert response.status_code == 200
    assert "ignored the resume budget" in response.content.decode()


def test_a_5000_digit_version_in_a_bulk_target_is_a_message(olive) -> None:
    run = transitions.run_start(agent="survey", inputs={"records": 1})
    before = counts()
    response = olive.post(
        "/bulk/apply/", {"action": "cancel", "reason": "x", "target": [f"{run.run_id}:{LONG_INT}"]}
    )
    assert response.status_code == 400  # nothing left to act on
    assert "damaged target" in response.content.decode()
    assert counts() == before
    assert Run.objects.get(pk=run.run_id).status == "queued"


@pytest.mark.parametrize("result", HOSTILE_RESULTS + NUL_RESULTS)
def test_a_hostile_settle_result_is_a_message_and_nothing_is_written(
    olive, execute, crash_at, result
) -> None:
    run = renewal_run(execute, crash_at)
    step = Step.objects.get(run=run, step_id="charge")
    before = counts()
    response = olive.post(
        f"/runs/{run.run_id}/steps/{step.pk}/settle/propose/",
        {"outcome": "happened", "result": result, "reason": "seen", "seen_version": step.version},
    )
    assert response.status_code == 400
    assert "the result" in response.content.decode()
    assert counts() == before


@pytest.mark.parametrize("result", HOSTILE_RESULTS + NUL_RESULTS)
def test_a_hostile_result_in_the_admins_step_edit_is_a_message(execute, result) -> None:
    from django.contrib.auth.models import User

    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    step = Step.objects.get(run=run, step_id="fetch_invoice")
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser(username="root", password=None))
    before = counts()
    url = reverse("admin:ledger_step_change", args=[quote(step.pk)])
    response = client.post(url, _step_form(step, result=result, change_reason="merge"))
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert counts() == before
    assert Step.objects.get(pk=step.pk).version == step.version


def _step_form(step: Step, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "status": step.status,
        "result": json.dumps(step.result),
        "next_step_id": step.next_step_id or "",
        "effect_key": step.effect_key or "",
        "error": step.error,
        "attempt": step.attempt,
        "expires_at_0": "",
        "expires_at_1": "",
        "seen_version": step.version,
        "change_reason": "",
        "_save": "Save",
    }
    data.update(changes)
    return data


# --- the commands -------------------------------------------------------------------------


@pytest.mark.parametrize("text", [*HOSTILE_RESULTS, '{"a": "\\u0000"}', "NaN"])
def test_start_run_refuses_hostile_inputs_with_a_message(text) -> None:
    before = counts()
    with pytest.raises(CommandError, match="--inputs"):
        call_command("start_run", "survey", "--inputs", text)
    assert counts() == before


@pytest.mark.parametrize(
    "args",
    [
        ["start_run", "survey", "--max-resumes", LONG_INT],
        ["start_run", "survey", "--max-resumes", str(2**40)],
        ["resume_run", "a\x00b"],
        ["resume_run", "nope", "--max-resumes", str(2**40)],
        ["show_run", "a\x00b"],
        ["list_runs", "--agent", "a\x00b"],
        ["list_runs", "--limit", LONG_INT],
    ],
)
def test_commands_refuse_hostile_arguments_with_a_message(args) -> None:
    before = counts()
    with pytest.raises((CommandError, SystemExit)):
        call_command(*args)
    assert counts() == before
