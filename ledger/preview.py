"""The dry replay: what a resume would do, computed without executing or writing anything.

The agent function runs against the recorded results. Each call is compared with its ledger
row: it would replay, it is stale (stored hash differs from today's, with both inputs for a
diff), it is a started effect that must be settled, it would execute for the first time, or the
path diverges. No tool, model or effect runs; nothing is written. The walk stops at the first
call that has no recorded result (it cannot know what the result would be), at a divergence, or
when its time is up; calls after a stale step are marked as depending on a stale observation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from django.utils import timezone

from ledger import registry, store
from ledger.engine import RunContext, _Call
from ledger.errors import ContinueAsNew, Divergence, LedgerError, NotJSON
from ledger.models import Run


class _Stop(Exception):
    """Ends the walk: the next call has no recorded result to go on with."""


@dataclass
class PreviewStep:
    step_id: str
    action: str  # replay | stale | settle | execute | reread | diverge
    kind: str
    tool: str
    current_hash: str = ""
    stored_hash: str = ""
    current_inputs: Any = None
    stored_inputs: Any = None
    after_stale: bool = False
    reconcile_available: bool = False
    detail: str = ""


@dataclass
class Preview:
    run_id: str
    available: bool = True
    unavailable_reason: str = ""
    plan_changes: list[str] = field(default_factory=list)
    divergence_policy: str = ""
    steps: list[PreviewStep] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)
    stopped: str = ""
    finished: bool = False
    timed_out: bool = False
    error: str = ""

    def by_action(self, action: str) -> list[PreviewStep]:
        return [s for s in self.steps if s.action == action]

    @property
    def stale_ids(self) -> set[str]:
        return {s.step_id for s in self.steps if s.action == "stale"}

    @property
    def diverges(self) -> bool:
        return any(s.action == "diverge" for s in self.steps) or bool(self.plan_changes)


class DryRunContext(RunContext):
    """A run context that only compares: it never executes a tool and never writes."""

    def __init__(self, *, preview: Preview, deadline: float, **kwargs: Any) -> None:
        super().__init__(token="", **kwargs)
        # A replanning agent's divergence is reported too: the walk checks paths under a copy
        # whose policy is "refuse" (the registered agent is shared by every thread).
        self.agent = replace(self.agent, divergence="refuse")
        self.preview = preview
        self.deadline = deadline
        self.stale_seen = False
        self._in_fanout = False

    def _step(self, call: _Call) -> Any:
        if time.monotonic() > self.deadline:
            self.preview.timed_out = True
            raise _Stop("the preview ran out of time")
        row = self._ledger.get(call.step_id)
        if row is not None and row.status == "abandoned":
            row = None
        entry = PreviewStep(
            step_id=call.step_id,
            action="execute",
            kind=call.kind,
            tool=call.tool,
            current_hash=call.input_hash,
            current_inputs=call.inputs,
            after_stale=self.stale_seen,
            reconcile_available=call.reconcile is not None,
        )
        self.preview.steps.append(entry)
        try:
            self._check_path(call.step_id)
        except Divergence as exc:
            entry.action, entry.detail = "diverge", exc.detail
            raise _Stop(exc.detail) from None
        if row is not None:
            entry.stored_hash = row.input_hash
        if row is not None and row.status == "succeeded":
            if row.input_hash != call.input_hash:
                entry.action = "stale"
                self.stale_seen = True
            elif self._expired(row):
                entry.action = "reread"
                raise _Stop(f"{call.step_id} is a read whose result expired: it would read again")
            else:
                entry.action = "replay"
            self._prev = call.step_id
            self._walked.append(call.step_id)
            return row.result
        if row is not None and row.status == "started" and call.kind == "effect":
            entry.action = "settle"
            entry.detail = f"started under key {row.effect_key}; " + (
                "its tool's reconcile will be asked" if call.reconcile else "no read path"
            )
            raise _Stop(f"{call.step_id} must be settled before anything after it can run")
        entry.detail = "first execution" if row is None else f"attempt {row.attempt + 1}"
        raise _Stop(f"{call.step_id} would execute; the walk cannot see past it")

    def _check_path(self, step_id: str, accept: frozenset[str] = frozenset()) -> list[str]:
        """Like the engine's check, but a replanning agent's divergence is reported too."""
        if self._in_fanout:
            return []  # the fan-out's path was checked as a whole
        return super()._check_path(step_id, accept)

    def _fanout(self, calls: list[_Call], max_workers: int) -> dict[str, Any]:
        """Each sibling is reported (replay, stale, settle, execute); the walk stops after the
        fan-out when any sibling would need work, as the engine would run them all at once."""
        try:
            self._check_fanout_path(calls)
        except Divergence as exc:
            self.preview.steps.append(
                PreviewStep(
                    step_id=exc.step_id, action="diverge", kind="", tool="", detail=exc.detail
                )
            )
            raise _Stop(exc.detail) from None
        results: dict[str, Any] = {}
        stop: _Stop | None = None
        self._in_fanout = True
        try:
            for call in calls:
                try:
                    results[call.step_id] = self._step(call)
                except _Stop as exc:
                    stop = stop or exc
                self._prev = call.step_id
        finally:
            self._in_fanout = False
        if stop is not None:
            raise stop
        return results


def preview_resume(*, run_id: str, seconds: float = 5.0) -> Preview:
    """Dry-replay a run's agent against its ledger; see the module docstring."""
    run = Run.objects.get(pk=run_id)
    preview = Preview(run_id=run_id)
    definition = registry.get_agent(run.agent)
    if definition is None:
        errors = registry.import_errors()
        why = "; ".join(f"{m}: {e}" for m, e in errors.items()) or "it is not registered"
        preview.available = False
        preview.unavailable_reason = f"agent {run.agent!r} is not available here: {why}"
        return preview
    preview.divergence_policy = definition.divergence
    if run.plan_version != definition.plan_version:
        preview.plan_changes.append(
            f"plan version {run.plan_version!r} → {definition.plan_version!r}"
        )
    if run.tool_schema_hash != definition.tool_schema_hash:
        preview.plan_changes.append("tool schema changed")
    ledger = store.load_steps(run_id)
    ctx = DryRunContext(
        preview=preview,
        deadline=time.monotonic() + seconds,
        run_id=run_id,
        agent=definition,
        inputs=run.inputs,
        ledger=ledger,
        clock=timezone.now,
    )
    try:
        definition.fn(ctx, run.inputs)
        preview.finished = True
    except _Stop as stop:
        preview.stopped = str(stop)
    except ContinueAsNew:
        preview.finished = True
        preview.stopped = "the run ends here and continues as a new run (continue_as_new)"
    except (LedgerError, NotJSON) as exc:
        preview.error = str(exc)
    except Exception as exc:  # agent code failing on recorded data is worth showing
        preview.error = f"the agent raised {type(exc).__name__}: {exc}"
    _attach_stored_inputs(run, preview)
    walked = {s.step_id for s in preview.steps}
    preview.not_reached = [
        row.step_id
        for row in sorted(ledger.values(), key=lambda r: r.seq)
        if row.step_id not in walked and row.status != "abandoned"
    ]
    return preview


def _attach_stored_inputs(run: Run, preview: Preview) -> None:
    """Stored inputs, for the diff, of the steps whose hash differs from today's only: the
    inputs column is the ledger's bulkiest, and a long run's would otherwise load whole."""
    differing = [s for s in preview.steps if s.stored_hash and s.stored_hash != s.current_hash]
    if not differing:
        return
    stored = dict(
        run.steps.filter(step_id__in=[s.step_id for s in differing]).values_list(
            "step_id", "inputs"
        )
    )
    for entry in differing:
        entry.stored_inputs = stored.get(entry.step_id)
