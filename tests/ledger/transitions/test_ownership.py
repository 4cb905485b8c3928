"""The transition owner: no module but ``ledger.transitions`` writes a run or a step row."""

from __future__ import annotations

import pytest
from django.db import connection

from ledger.models import Run
from tests.support import ownership


def test_no_product_module_but_the_owner_writes_run_or_step_rows() -> None:
    assert ownership.static_writers() == []


def test_the_static_check_finds_a_queryset_write_outside_the_owner() -> None:
    rogue = ownership.ROOT / "runs" / "_rogue_writer_for_test.py"
    rogue.write_text(
        "from ledger.models import Run\n\n\ndef f(run):\n"
        "    Run.objects.filter(pk=1).update(status='failed')\n    run.save()\n"
    )
    try:
        found = ownership.static_writers()
    finally:
        rogue.unlink()
    assert [f.split(": ", 1)[1] for f in found] == [
        "Run….update()",
        "run.save() of a run or step",
    ]


@pytest.mark.django_db
def test_the_runtime_guard_refuses_a_write_from_outside_the_owner(monkeypatch) -> None:
    from harness.unannounced import start_unannounced
    from ledger.transitions import lifecycle

    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_owner"})
    Run.objects.filter(pk=run.run_id).update(detail="")  # a test's own write is allowed
    with connection.cursor() as cur:
        cur.execute("UPDATE ledger_run SET detail = '' WHERE run_id = %s", [run.run_id])
    # Pretend the owner lives elsewhere: the owner's own write now comes from "outside". The run
    # is queued and unchanged since it was seen, so the transition does reach its UPDATE.
    run.refresh_from_db()
    monkeypatch.setattr(ownership, "OWNER", "ledger/nowhere/")
    with pytest.raises(ownership.OutsideWriter, match=r"ledger/transitions/lifecycle\.py"):
        lifecycle.run_requeue_lost(run_id=run.run_id, seen_at=run.updated_at)
