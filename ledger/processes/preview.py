"""The dry replay: what a resume would do, computed without executing or writing anything.

The agent function runs against the recorded results with ``DrySteps`` in place of the live
steps. Each call is judged by the engine's own decision (``ledger.engine.decide``): it would
replay, it is stale (stored hash differs from today's, with both inputs for a diff), it is a
started effect that must be settled, it would execute, or the path diverges. No tool, model or
effect runs; nothing is written. The walk stops at the first call that has no recorded result
(it cannot know what the result would be), at a divergence, or when its time is up; calls after
a stale step are marked as depending on a stale observation.

An async agent is walked the same way, on the calling thread with no event loop: the dry steps
never suspend, so its coroutine runs to its end in one ``send``; an ``await`` of anything other
than the run context stops the walk there.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from ledger import canonical, registry, selectors
from ledger.conf import conf
from ledger.engine import AsyncRunContext, RunContext, collector
from ledger.engine.calls import Call
from ledger.engine.decide import Action, decide
from ledger.engine.walk import Walk
from ledger.errors import ContinueAsNew, Divergence, LedgerError, NotAllowed, NotJSON
from ledger.models import Run, Step, StepStatus
from ledger.transitions import TodaysInputs


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

    def blocks_again(self) -> str:
        """Why a resume now would stop again before anything new runs, in one sentence; ""
        when it would get further (or the preview cannot tell: it ran out of time)."""
        if not self.available:
            return self.unavailable_reason
        stale = self.by_action("stale")
        if stale:
            return (
                f"step {stale[0].step_id} is stale: accept its stored result or re-execute "
                "from it first, or the resume stops there again"
            )
        unknown = [s for s in self.by_action("settle") if not s.reconcile_available]
        if unknown:
            return (
                f"effect {unknown[0].step_id} has no read path: settle it first, or the resume "
                "stops there again"
            )
        if self.divergence_policy == "refuse" and self.diverges:
            return (
                "the recorded path diverges from today's agent and its policy is refuse: "
                "start a clean run instead, or the resume stops there again"
            )
        return ""


class DrySteps:
    """The steps of a dry replay: each call is compared with its row, never executed.

    Paths are checked under ``refuse`` whatever the agent's policy, so that a replanning
    agent's divergence is reported too.
    """

    def __init__(
        self, *, walk: Walk, preview: Preview, deadline: float, clock: Callable[[], datetime]
    ) -> None:
        self.walk = walk
        self.preview = preview
        self.deadline = deadline
        self.clock = clock
        self.stale_seen = False

    def step(self, call: Call, *, path_checked: bool = False) -> Any:
        if time.monotonic() > self.deadline:
            self.preview.timed_out = True
            raise _Stop("the preview ran out of time")
        row = self.walk.live_row(call.step_id)
        entry = PreviewStep(
            step_id=call.step_id,
            action="execute",
            kind=call.kind,
            tool=call.tool,
            current_hash=call.input_hash,
            current_inputs=call.inputs,
            after_stale=self.stale_seen,
            reconcile_available=call.reconcile is not None,
            stored_hash=row.input_hash if row is not None else "",
        )
        self.preview.steps.append(entry)
        if not path_checked:
            try:
                self.walk.check_path(call.step_id, policy="refuse")
            except Divergence as exc:
                entry.action, entry.detail = "diverge", exc.detail
                raise _Stop(exc.detail) from None
        action = decide(kind=call.kind, input_hash=call.input_hash, row=row, now=self.clock())
        if row is not None and action in (Action.REPLAY, Action.STALE):
            if row.status == StepStatus.SUCCEEDED:
                entry.action = str(action)
                self.stale_seen = self.stale_seen or action == Action.STALE
                self.walk.advance(call.step_id)
                return row.result
            entry.action = "stale"
            entry.detail = f"{row.status} under key {row.effect_key} with other inputs"
            raise _Stop(f"{call.step_id} must be settled before anything after it can run")
        if action == Action.REREAD:
            entry.action = "reread"
            raise _Stop(f"{call.step_id} is a read whose result expired: it would read again")
        if row is not None and action == Action.RECONCILE:
            entry.action = "settle"
            entry.detail = f"started under key {row.effect_key}; " + (
                "its tool's reconcile will be asked" if call.reconcile else "no read path"
            )
            if call.reconcile is not None:
                # Not "must be settled": the resume settles it itself by asking the lookup.
                raise _Stop(
                    f"{call.step_id} is a started effect: the resume asks its tool's lookup "
                    "first, and the walk cannot see past the answer"
                )
            raise _Stop(f"{call.step_id} must be settled before anything after it can run")
        entry.detail = "first execution" if row is None else f"attempt {row.attempt + 1}"
        if call.approval is not None and (row is None or not row.effect_key):
            entry.detail += "; " + _gate_note(self.walk.run_id, call, self.clock())
        raise _Stop(f"{call.step_id} would execute; the walk cannot see past it")

    async def astep(self, call: Call) -> Any:
        """An async agent's call: judged as a sync one's, never suspending (``_run_inline``)."""
        return self.step(call)

    async def afanout(self, calls: list[Call], max_workers: int) -> dict[str, Any]:
        return self.fanout(calls, max_workers)

    def fanout(self, calls: list[Call], max_workers: int) -> dict[str, Any]:
        """Each sibling is reported (replay, stale, settle, execute); the walk stops after the
        fan-out when any sibling would need work, as the engine would run them all at once."""
        try:
            self.walk.check_fanout_path([c.step_id for c in calls], policy="refuse")
        except Divergence as exc:
            self.preview.steps.append(
                PreviewStep(
                    step_id=exc.step_id, action="diverge", kind="", tool="", detail=exc.detail
                )
            )
            raise _Stop(exc.detail) from None
        results: dict[str, Any] = {}
        stop: _Stop | None = None
        for call in calls:
            try:
                results[call.step_id] = self.step(call, path_checked=True)
            except _Stop as exc:
                stop = stop or exc
            self.walk.prev = call.step_id
        if stop is not None:
            raise stop
        return results


def _gate_note(run_id: str, call: Call, now: datetime) -> str:
    """What the gate of a gated effect would do on the resume (``ledger.engine.gate``)."""
    gate = selectors.gate_latest(run_id=run_id, step_id=call.step_id)
    same = gate is not None and gate.digest == call.input_hash
    if same and gate is not None and gate.expires_at > now:
        if gate.status == "approved":
            return f"approved (gate #{gate.pk}): it would be sent once under its effect key"
        if gate.status == "waiting":
            return f"it waits at approval gate #{gate.pk}: the run stops there again"
    if same and gate is not None and gate.status == "rejected" and gate.on_reject == "raise":
        return f"rejected by {gate.decided_by_name}: the call would raise ApprovalRejected"
    return "it needs a person's approval first: the run would stop at a new gate"


def preview_resume(*, run_id: str, seconds: float = 5.0) -> Preview:
    """Dry-replay a run's agent against its ledger; see the module docstring."""
    run = Run.objects.get(pk=run_id)
    preview = Preview(run_id=run_id)
    definition = registry.get_agent(run.agent)
    if definition is None:
        preview.available = False
        preview.unavailable_reason = registry.missing_agent_message(run.agent)
        return preview
    preview.divergence_policy = definition.divergence
    stamped = bool(run.tool_schema_hash)  # a run no worker executed yet takes today's code
    if stamped and run.plan_version != definition.plan_version:
        preview.plan_changes.append(
            f"plan version {run.plan_version!r} → {definition.plan_version!r}"
        )
    if stamped and run.tool_schema_hash != definition.tool_schema_hash:
        preview.plan_changes.append("tool schema changed")
    ledger = selectors.load_steps(run_id)
    walk = Walk(run_id=run_id, agent=definition, ledger=ledger)
    # One moment for the whole walk (a preview is a snapshot: a read's expiry is judged at the
    # time it was asked), not a clock read per step.
    moment = timezone.now()

    def clock() -> datetime:
        return moment

    steps = DrySteps(walk=walk, preview=preview, deadline=time.monotonic() + seconds, clock=clock)
    inputs = canonical.ordered(run.inputs)
    kind = AsyncRunContext if definition.is_async else RunContext
    ctx = kind(walk=walk, steps=steps, inputs=inputs, clock=clock)
    try:
        with collector.held_off():  # no tool runs; bounded by ``seconds`` (engine.collector)
            _run_inline(definition.fn(ctx, inputs))
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
        if row.step_id not in walked and row.status != StepStatus.ABANDONED
    ]
    return preview


def _run_inline(result: Any) -> Any:
    """An async agent's coroutine, run to its end on this thread with no event loop: the dry
    steps never suspend, so every ``await ctx...`` returns at once. An agent that awaits
    anything else (a sleep, a client of its own) cannot be walked further without running it."""
    if not inspect.iscoroutine(result):
        return result
    why = "the agent awaits something other than its run context; the walk stops there"
    try:
        result.send(None)
    except StopIteration as stop:
        return stop.value
    except RuntimeError as exc:
        said = str(exc).lower()
        if "no running event loop" not in said and "not currently running on any" not in said:
            raise
        # asyncio.sleep and the like, with no loop to run them; anyio's and sniffio's "not
        # running on any asynchronous event loop" (a framework such as PydanticAI).
        raise _Stop(why) from None
    result.close()
    raise _Stop(why)


def would_stop_again(run_id: str) -> str:
    """Why a resume of ``run_id`` now would stop again before anything new runs ("" when it
    would get further): the one check behind every resume and retry (``ledger.processes.resume``
    hands it to the transitions; the dashboard's, the command line's and the bulk previews show
    it), time-bounded by
    ``RUNLEDGER_PREVIEW_SECONDS``. Reads only."""
    return preview_resume(run_id=run_id, seconds=conf.RUNLEDGER_PREVIEW_SECONDS).blocks_again()


def stale_entry(step: Step) -> TodaysInputs:
    """Today's inputs of a stale step, from a dry replay (for ``step_accept_stale``);
    ``NotAllowed`` when the replay does not find the step stale."""
    preview = preview_resume(run_id=step.run_id)
    if not preview.available:
        raise NotAllowed(preview.unavailable_reason)
    for entry in preview.steps:
        if entry.step_id == step.step_id:
            if entry.action != "stale":
                raise NotAllowed(
                    f"step {step.step_id!r} is not stale: a resume would {entry.action} it"
                )
            return TodaysInputs(
                stored_hash=entry.stored_hash,
                current_hash=entry.current_hash,
                current_inputs=entry.current_inputs,
            )
    why = preview.stopped or preview.error or "the agent no longer calls it"
    raise NotAllowed(f"the dry replay does not reach step {step.step_id!r} ({why})")


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
