"""The deploy check: what the agent code loaded now would do to every run in flight.

Each unfinished run (queued, running, needs attention) is dry-replayed with
``ledger.processes.preview.preview_resume`` against its ledger — nothing executes, nothing is
written —
and judged:

- ``replay``: every recorded step replays; a resume goes on from where the run stands;
- ``stale``: a recorded step's inputs hash differently today (a changed prompt, a changed
  tool argument): the step, and which inputs changed;
- ``diverged``: the plan version or the tool schema changed, or the walk leaves the recorded
  path; blocking when the agent's policy is ``refuse``, not under ``replan``;
- ``missing``: the agent is not registered in this process, or a tool its ledger used is no
  longer among its tools;
- ``settle``: a started effect a resume would have to settle and that has no read path;
- ``error``: the agent raised on its own recorded results;
- ``unknown``: the dry replay ran out of its time (``seconds`` per run).

``blocks`` says whether a resume under this code would stop the run for a person.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ledger import registry
from ledger.processes.preview import Preview, preview_resume
from ledger.selectors.deploy import runs_in_flight, tools_used

BLOCKING = frozenset({"stale", "diverged", "missing", "settle", "error"})


@dataclass
class Verdict:
    """What a resume under the code loaded now would do to one run."""

    run_id: str
    agent: str
    status: str
    verdict: str
    step_id: str = ""
    detail: str = ""
    changed: list[str] = field(default_factory=list)  # the inputs that changed, for stale

    @property
    def blocks(self) -> bool:
        return self.verdict in BLOCKING


def deploy_check(
    *, agent: str | None = None, limit: int = 1000, seconds: float = 5.0
) -> Iterator[Verdict]:
    """Judge the unfinished runs, oldest first, at most ``limit``, each within ``seconds``.

    Reads only. A run that finishes or starts while the check runs is judged as it was read.
    """
    for run_id, name, status in runs_in_flight(agent=agent, limit=limit):
        preview = preview_resume(run_id=run_id, seconds=seconds)
        yield judge(Verdict(run_id=run_id, agent=name, status=status, verdict="replay"), preview)


def judge(verdict: Verdict, preview: Preview) -> Verdict:
    """Fill ``verdict`` from a dry replay: the first reason to block wins."""
    if not preview.available:
        verdict.verdict, verdict.detail = "missing", preview.unavailable_reason
        return verdict
    gone = _missing_tools(verdict.run_id, verdict.agent)
    if gone:
        verdict.verdict = "missing"
        verdict.detail = f"tool(s) no longer among the agent's tools: {', '.join(gone)}"
        return verdict
    stale = preview.by_action("stale")
    if stale:
        first = stale[0]
        verdict.verdict, verdict.step_id = "stale", first.step_id
        verdict.changed = changed_inputs(first.stored_inputs, first.current_inputs)
        verdict.detail = first.detail or f"inputs changed: {', '.join(verdict.changed) or '?'}"
        return verdict
    if preview.diverges:
        diverge = preview.by_action("diverge")
        verdict.step_id = diverge[0].step_id if diverge else ""
        why = preview.plan_changes + [d.detail for d in diverge]
        replan = preview.divergence_policy == "replan"
        verdict.verdict = "replay" if replan else "diverged"
        verdict.detail = "; ".join(why) + (" (policy replan: it goes on)" if replan else "")
        if not replan:
            return verdict
    for entry in preview.by_action("settle"):
        if not entry.reconcile_available:
            verdict.verdict, verdict.step_id, verdict.detail = "settle", entry.step_id, entry.detail
            return verdict
    if preview.error:
        verdict.verdict, verdict.detail = "error", preview.error
    elif preview.timed_out:
        verdict.verdict, verdict.detail = "unknown", "the dry replay ran out of time"
    elif not verdict.detail:
        verdict.detail = preview.stopped or ("finishes on replay" if preview.finished else "")
    return verdict


def changed_inputs(stored: Any, current: Any, *, path: str = "") -> list[str]:
    """The paths (``prompt``, ``messages[3].content``) where two inputs differ, at most 20."""
    if isinstance(stored, dict) and isinstance(current, dict):
        out: list[str] = []
        for key in sorted(set(stored) | set(current)):
            out += changed_inputs(stored.get(key), current.get(key), path=f"{path}.{key}")
        return [p.lstrip(".") for p in out][:20]
    if isinstance(stored, list) and isinstance(current, list) and len(stored) == len(current):
        out = []
        for i, (a, b) in enumerate(zip(stored, current, strict=True)):
            out += changed_inputs(a, b, path=f"{path}[{i}]")
        return out[:20]
    return [] if stored == current else [path.lstrip(".") or "(all)"]


def _missing_tools(run_id: str, agent: str) -> list[str]:
    definition = registry.get_agent(agent)
    if definition is None:
        return []
    return sorted(tools_used(run_id) - {t.name for t in definition.tools})
