"""The items of an OpenAI Agents SDK session kept by the ledger
(``ledger.adapters.openai_agents.LedgerSession``): derived from the session steps the runs
recorded, never stored twice.

A session operation is a read step whose tool is ``session:<op>`` and whose inputs name the
session (``{"session_id", "op", "items"?}``). The items are the fold of the succeeded ``add``,
``pop`` and ``clear`` steps of every run that used the session id, in the order they finished
(a step that never finished changed nothing: its execution is replayed or redone)."""

from __future__ import annotations

from typing import Any

from ledger.models import Step

#: The operations that change a session's items (``get`` only reads them).
CHANGES = ("session:add", "session:pop", "session:clear")


def session_items(session_id: str) -> list[Any]:
    """The session's items now, oldest first."""
    rows = (
        Step.objects.filter(tool__in=CHANGES, status="succeeded", inputs__session_id=session_id)
        .order_by("finished_at", "run_id", "seq")
        .values_list("tool", "inputs")
    )
    items: list[Any] = []
    for tool, inputs in rows:
        if tool == "session:add":
            items.extend((inputs or {}).get("items") or [])
        elif tool == "session:pop":
            if items:
                items.pop()
        else:
            items.clear()
    return items
