"""The conversation of a run's tool-use loops, as the model saw it, linked to the ledger.

Built from the ledger alone: the first turn's stored request (system prompt, first user
message), each turn's stored answer (the assistant's text and tool calls), and each tool call's
own row (status, result, who settled it). Each turn and each tool call carries its step id and
row, so the page can link the conversation to the step chain and back. Reads only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ledger.loops.base import branch_key
from ledger.selectors.transcript import first_turn_inputs, loop_rows

TURN = re.compile(r"^(?P<loop>.+)\.turn\.(?P<n>\d+)$")
TOOL = re.compile(r"^(?P<loop>.+)\.turn\.(?P<n>\d+)\.tools\..+$")


@dataclass
class Call:
    """A tool call the model asked for, and what became of it in the ledger."""

    id: str
    name: str
    arguments: Any
    step_id: str = ""
    row: dict[str, Any] | None = None  # None: answered with an error, without a step
    stale: bool = False

    @property
    def result_text(self) -> str:
        if self.row is None or self.row["result"] is None:
            return ""
        return json.dumps(self.row["result"], ensure_ascii=False, sort_keys=True)


@dataclass
class Turn:
    n: int
    step_id: str
    row: dict[str, Any]
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    stale: bool = False

    @property
    def attempts(self) -> int:
        result = self.row.get("result") or {}
        return int(result.get("attempts") or 1) if isinstance(result, dict) else 1


@dataclass
class Transcript:
    loop: str
    api: str  # anthropic | openai
    model: str = ""
    system: str = ""
    user: str = ""
    turns: list[Turn] = field(default_factory=list)


def transcripts(*, run_id: str, stale_step_ids: frozenset[str] = frozenset()) -> list[Transcript]:
    """Every tool-use loop of the run, in the order they started (``[]`` for other agents)."""
    rows = loop_rows(run_id=run_id)
    by_id = {r["step_id"]: r for r in rows}
    loops: dict[str, Transcript] = {}
    turns = [(TURN.match(r["step_id"]), r) for r in rows if r["kind"] == "model"]
    firsts = [r["step_id"] for m, r in turns if m and m["n"] == "1"]
    inputs = first_turn_inputs(run_id=run_id, step_ids=firsts)
    for match, row in turns:
        if match is None or not isinstance(row["result"], dict):
            continue
        if "response" in row["result"]:  # a framework adapter's turn (ledger.adapters)
            continue
        loop = match["loop"]
        if loop not in loops:
            loops[loop] = _opening(loop, row["result"], inputs.get(f"{loop}.turn.1"))
        turn = _turn(int(match["n"]), row, loops[loop].api)
        turn.stale = row["step_id"] in stale_step_ids
        for i, call in enumerate(turn.calls):
            call.step_id = f"{loop}.turn.{turn.n}.tools.{branch_key(i, call.name)}"
            call.row = by_id.get(call.step_id)
            call.stale = call.step_id in stale_step_ids
        loops[loop].turns.append(turn)
    return list(loops.values())


def turn_anchor(step_id: str) -> str:
    """The step id of the turn a loop step belongs to (its own, for a turn), or ``""``."""
    match = TURN.match(step_id) or TOOL.match(step_id)
    return f"{match['loop']}.turn.{match['n']}" if match else ""


def _opening(loop: str, answer: dict[str, Any], inputs: Any) -> Transcript:
    api = "openai" if "choices" in answer else "anthropic"
    out = Transcript(loop=loop, api=api, model=str(answer.get("model", "")))
    if not isinstance(inputs, dict):  # stored as a preview when too large
        return out
    messages = inputs.get("messages") or []
    out.system = str(inputs.get("system") or "")
    for message in messages:
        if message.get("role") == "system" and not out.system:
            out.system = str(message.get("content") or "")
        if message.get("role") == "user":
            out.user = _text(message.get("content"))
            break
    return out


def _turn(n: int, row: dict[str, Any], api: str) -> Turn:
    answer = row["result"]
    turn = Turn(n=n, step_id=row["step_id"], row=row)
    if api == "anthropic":
        content = answer.get("content") or []
        turn.text = _text(content)
        turn.calls = [
            Call(id=str(b.get("id", "")), name=str(b.get("name", "")), arguments=b.get("input"))
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        return turn
    message = ((answer.get("choices") or [{}])[0]).get("message") or {}
    turn.text = str(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        turn.calls.append(
            Call(
                id=str(call.get("id", "")),
                name=str(function.get("name", "")),
                arguments=_arguments(function.get("arguments")),
            )
        )
    return turn


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _arguments(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError:
        return text
