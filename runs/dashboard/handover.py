"""What the run page's "On it" box shows (``runs/partials/handover.html``): who is on the run,
its newest notes, and whether the reader may act (operators and approvers). Shared by the run
page and the handover views (``views/handover.py``)."""

from __future__ import annotations

import secrets
from typing import Any

from django.http import HttpRequest

from ledger.models import Run
from ledger.selectors.handover import handover_of, run_notes
from runs.dashboard.models import APPROVE_SETTLEMENTS, OPERATE_RUNS

#: Who may take a run and leave notes.
HAND = (OPERATE_RUNS, APPROVE_SETTLEMENTS)
#: Notes shown on the run page (the audit has them all).
NOTES_SHOWN = 10


def handover_context(request: HttpRequest, run: Run, **extra: Any) -> dict[str, Any]:
    return {
        "handover": handover_of(run_id=run.run_id),
        "notes": list(run_notes(run_id=run.run_id)[:NOTES_SHOWN]),
        "notes_shown": NOTES_SHOWN,
        "can_hand": any(request.user.has_perm(p, run) for p in HAND),
        "note_key": secrets.token_urlsafe(12),
        "note_text": "",
        **extra,
    }
