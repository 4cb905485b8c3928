"""A run's ledger as the tests read it: its rows by step id, and the recorded path."""

from __future__ import annotations

from ledger.models import Step


def rows(run_id: str) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


def chain(ledger: dict[str, Step]) -> list[str]:
    """The recorded path: from the row nothing links to, along ``next_step_id``."""
    linked = {r.next_step_id for r in ledger.values()}
    (first,) = [s for s in ledger if s not in linked]
    path = [first]
    while (following := ledger[path[-1]].next_step_id) is not None and len(path) <= len(ledger):
        path.append(following)
    return path
