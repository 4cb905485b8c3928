"""The rows a tool-use loop's transcript is built from (``ledger.loops.transcript``)."""

from __future__ import annotations

from typing import Any

from django.db.models import Exists

from ledger.models import Step

#: Most rows of loop steps a transcript reads (a turn is one row plus one per tool call).
TRANSCRIPT_ROWS = 2000
_FIELDS = ("pk", "step_id", "kind", "status", "result", "settled_by", "error", "attempt")


def loop_rows(*, run_id: str) -> list[dict[str, Any]]:
    """The run's rows whose step id has a ``.turn.`` part, in execution order, without their
    inputs (a turn's inputs hold the whole conversation so far: quadratic in the turns).
    A run without a model turn has none: the query's one-time condition asks the model
    steps' index (``step_run_model``) first, instead of every row of a long run being read for
    a ``.turn.`` part it does not have."""
    turns = Step.objects.filter(run_id=run_id, kind="model", step_id__contains=".turn.")
    rows = (
        Step.objects.filter(run_id=run_id, step_id__contains=".turn.")
        .filter(Exists(turns))
        .order_by("seq")
    )
    return list(rows.values(*_FIELDS)[:TRANSCRIPT_ROWS])


def first_turn_inputs(*, run_id: str, step_ids: list[str]) -> dict[str, Any]:
    """The stored inputs of the first turns (system prompt and first user message), by id."""
    rows = Step.objects.filter(run_id=run_id, step_id__in=step_ids)
    return dict(rows.values_list("step_id", "inputs"))


def pydantic_ai_turns(run_id: str) -> list[dict[str, Any]]:
    """The model steps of the run's PydanticAI agents (``ledger.adapters.pydantic_ai``), in
    execution order; the inputs only of first turns (later ones repeat the conversation)."""
    rows = Step.objects.filter(
        run_id=run_id, kind="model", step_id__regex=r"\.turn\.\d+$", result__has_key="response"
    ).order_by("seq")
    found: list[dict[str, Any]] = [
        dict(r) for r in rows.values("step_id", "result")[:TRANSCRIPT_ROWS]
    ]
    firsts = [r["step_id"] for r in found if r["step_id"].endswith(".turn.1")]
    inputs = first_turn_inputs(run_id=run_id, step_ids=firsts)
    for row in found:
        row["inputs"] = inputs.get(row["step_id"])
    return found
