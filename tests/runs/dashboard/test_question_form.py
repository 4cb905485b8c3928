"""The run page's answer form (``ctx.ask``): fields made from the question's JSON Schema, shown
escaped; a person with the role answers and the run is queued; one without sees no form and
is refused."""

from __future__ import annotations

from typing import Any

import pytest

from harness.unannounced import start_unannounced
from ledger.models import AuditEvent, MailboxEvent, Run
from ledger.processes.execute import run_execute
from tests.support import wait_agents  # noqa: F401 - registers the asker
from tests.support.dashboard_runs import signed_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def asked(tmp_path: Any) -> str:
    run_id = start_unannounced(
        agent="asker",
        inputs={"marks": str(tmp_path / "m"), "invoice": "<script>x</script>", "role": "operator"},
    ).run_id
    run_execute(run_id=run_id, worker="w", heartbeat=False)
    return run_id


def test_an_operator_answers_on_the_run_page(dashboard_ready: Any, tmp_path: Any) -> None:
    run_id = asked(tmp_path)
    olive = signed_in("operator", "olive")

    page = olive.get(f"/runs/{run_id}/").content.decode()

    section = page[page.index('id="run-question"') :]
    assert "<script>x</script>" not in section and "&lt;script&gt;x&lt;/script&gt;" in section
    assert 'name="field_approve"' in section and 'type="checkbox"' in section
    assert 'name="field_note"' in section

    answer = olive.post(
        f"/runs/{run_id}/answer/", {"field_approve": "on", "field_note": "fine", "reason": "ok"}
    )

    assert answer.status_code == 302
    assert Run.objects.get(pk=run_id).status == "queued"
    assert MailboxEvent.objects.get().payload == {"approve": True, "note": "fine"}
    assert AuditEvent.objects.get(action="question_answer").actor == "olive"
    story = olive.get(f"/runs/{run_id}/").content.decode()
    assert "answered its question" in story  # among what people did to the run


def test_a_viewer_sees_no_form_and_is_refused(dashboard_ready: Any, tmp_path: Any) -> None:
    run_id = asked(tmp_path)
    vera = signed_in("viewer", "vera")

    page = vera.get(f"/runs/{run_id}/").content.decode()
    assert 'id="run-question"' in page and 'name="field_approve"' not in page

    assert vera.post(f"/runs/{run_id}/answer/", {"field_approve": "on"}).status_code == 403
    assert Run.objects.get(pk=run_id).status == "needs_attention"
    assert not MailboxEvent.objects.exists()
