"""The rows a transcript is built from: a tool-use loop's (``ledger.loops.transcript``) and the
framework adapters' (``ledger.adapters``)."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.db.models import Exists

from ledger.models import Step
from ledger.states import StepKind

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


def langgraph_turns(run_id: str) -> list[dict[str, Any]]:
    """The model steps of the run's LangGraph graphs (``ledger.adapters.langgraph``), in
    execution order; the inputs only of the first (later ones repeat the conversation)."""
    rows = Step.objects.filter(
        run_id=run_id, kind="model", step_id__regex=r"\.model\.\d+$", result__has_key="generations"
    ).order_by("seq")
    found: list[dict[str, Any]] = [
        dict(r) for r in rows.values("step_id", "result")[:TRANSCRIPT_ROWS]
    ]
    inputs = first_turn_inputs(run_id=run_id, step_ids=[r["step_id"] for r in found[:1]])
    for row in found:
        row["inputs"] = inputs.get(row["step_id"])
    return found


#: The ``adapter`` the OpenAI Agents SDK adapter writes into its model steps' inputs.
OPENAI_AGENTS = "openai-agents"

# Each turn's input holds the whole conversation so far, so the database keeps the inputs and
# sends, per model step, only the user messages its input adds: those past the items the step
# before it held and answered (``seen``, the previous row's input and output counts). A string
# input is one user message.
_OPENAI_TURNS_SQL = f"""
SELECT w.step_id, w.finished_at, w.output::text,
    (CASE WHEN jsonb_typeof(w.input) = 'string' THEN
        CASE WHEN w.seen = 0 THEN jsonb_build_array(w.input) ELSE '[]'::jsonb END
    ELSE (
        SELECT coalesce(jsonb_agg(e.item -> 'content' ORDER BY e.i), '[]'::jsonb)
        FROM jsonb_array_elements(
            CASE WHEN jsonb_typeof(w.input) = 'array' THEN w.input ELSE '[]'::jsonb END
        ) WITH ORDINALITY AS e(item, i)
        WHERE e.i > w.seen AND e.item ->> 'role' = 'user'
    ) END)::text
FROM (
    SELECT t.*, coalesce(lag(t.n_input + t.n_output) OVER (ORDER BY t.seq), 0) AS seen
    FROM (
        SELECT seq, step_id, finished_at, inputs -> 'input' AS input, result -> 'output' AS output,
            CASE jsonb_typeof(inputs -> 'input')
                WHEN 'array' THEN jsonb_array_length(inputs -> 'input')
                WHEN 'string' THEN 1 ELSE 0 END AS n_input,
            CASE jsonb_typeof(result -> 'output')
                WHEN 'array' THEN jsonb_array_length(result -> 'output') ELSE 0 END AS n_output
        FROM {Step._meta.db_table}
        WHERE run_id = %s AND kind = %s AND status = 'succeeded' AND inputs ->> 'adapter' = %s
    ) t
) w
ORDER BY w.seq
"""


def openai_agents_turns(run_id: str) -> list[dict[str, Any]]:
    """The model steps of the run's OpenAI Agents SDK agents (``ledger.adapters.openai_agents``),
    in execution order: ``step_id``, ``finished_at``, ``output`` (the stored answer's items) and
    ``users`` (the contents of the user messages the step's input adds to the conversation).

    One query. On PostgreSQL the steps' inputs stay in the database (each turn's input repeats
    the conversation so far: reading them whole is quadratic in the turns); elsewhere (the
    SQLite demo) they are read and the same rows built here (``openai_agents_turns_read``)."""
    if connection.vendor != "postgresql":
        return openai_agents_turns_read(run_id)
    with connection.cursor() as cursor:
        cursor.execute(_OPENAI_TURNS_SQL, [run_id, StepKind.MODEL.value, OPENAI_AGENTS])
        found = cursor.fetchall()
    return [
        {
            "step_id": step_id,
            "finished_at": finished_at,
            "output": _items(output),
            "users": json.loads(users),
        }
        for step_id, finished_at, output, users in found
    ]


def openai_agents_turns_read(run_id: str) -> list[dict[str, Any]]:
    """``openai_agents_turns`` from the whole inputs, read (any database)."""
    rows = Step.objects.filter(
        run_id=run_id, kind=StepKind.MODEL, status="succeeded", inputs__adapter=OPENAI_AGENTS
    ).only("step_id", "inputs", "result", "finished_at")
    found: list[dict[str, Any]] = []
    seen = 0
    for row in rows.order_by("seq"):
        inputs, result = row.inputs or {}, row.result or {}
        items = inputs.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
        output = result.get("output")
        output = output if isinstance(output, list) else []
        users = [
            item.get("content")
            for item in items[seen:]
            if isinstance(item, dict) and item.get("role") == "user"
        ]
        seen = len(items) + len(output)
        found.append(
            {
                "step_id": row.step_id,
                "finished_at": row.finished_at,
                "output": output,
                "users": users,
            }
        )
    return found


def _items(text: str | None) -> list[Any]:
    value = json.loads(text) if text is not None else None
    return value if isinstance(value, list) else []
