"""What the engine raises. Blocking errors stop a run as needs_attention with a reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class LedgerError(Exception):
    """Base of the engine's errors."""


class NotJSON(LedgerError, ValueError):
    """An input or a result is not JSON (or not storable in PostgreSQL's jsonb)."""

    def __init__(self, step_id: str, path: str, problem: str) -> None:
        self.step_id, self.path, self.problem = step_id, path, problem
        where = f"step {step_id!r}, " if step_id else ""
        super().__init__(f"{where}{path}: {problem}")


class RunBlocked(LedgerError):
    """The run cannot go on without a person: it stops as needs_attention."""

    reason = ""

    def __init__(self, step_id: str, detail: str) -> None:
        self.step_id, self.detail = step_id, detail
        super().__init__(f"{self.reason}: step {step_id!r}: {detail}")


class StaleCheckpoint(RunBlocked):
    """A succeeded step's stored input hash differs from the hash of today's inputs."""

    reason = "stale"


class NeedsReconciliation(RunBlocked):
    """A started effect's outcome is unknown and its tool cannot tell (or gave a bad answer)."""

    reason = "reconciliation"


class Divergence(RunBlocked):
    """The replayed path differs from the recorded one (or the plan or tool schema changed)."""

    reason = "divergence"


class BudgetExhausted(RunBlocked):
    reason = "budget"


class AgentMissing(RunBlocked):
    reason = "agent_missing"


class ApprovalRequired(RunBlocked):
    """An effect waits for a person's approval of its exact arguments before it is sent.

    ``arguments_text`` is the canonical JSON the tool will receive and ``digest`` its sha256
    (the step's input hash): the gate's approval binds them.
    """

    reason = "approval"

    def __init__(
        self,
        step_id: str,
        detail: str,
        *,
        tool: str,
        arguments_text: str,
        digest: str,
        approvers: int,
        on_reject: str,
        expires_after: float,
    ) -> None:
        self.tool, self.arguments_text, self.digest = tool, arguments_text, digest
        self.approvers, self.on_reject, self.expires_after = approvers, on_reject, expires_after
        super().__init__(step_id, detail)


class ApprovalRejected(LedgerError):
    """A person rejected the effect this call would have sent (``on_reject="raise"``): the agent
    may catch it and go on; a replay raises it again at the same call."""

    def __init__(self, step_id: str, by: str, reason: str) -> None:
        self.step_id, self.by, self.reason = step_id, by, reason
        super().__init__(f"step {step_id!r}: the effect was rejected by {by}: {reason}")


class RunPaused(RunBlocked):
    """An operator's pause holds the run: it stops ``paused`` (not needs_attention) until the
    pause is lifted, and that stop costs no resume budget."""

    reason = "pause"

    def __init__(self, step_id: str, detail: str, pause_id: int) -> None:
        self.pause_id = pause_id
        super().__init__(step_id, detail)


class DeadlineReached(RunBlocked):
    """The run's deadline passed: it stops as failed with reason ``deadline`` at its next step
    (its started effects looked up first, as after a crash), not as needs_attention."""

    reason = "deadline"


class LeaseLost(LedgerError):
    """This worker's lease on the run was taken or revoked: it must commit nothing and stop."""


class StepFailed(LedgerError):
    """A step failed on its last allowed attempt."""

    def __init__(self, step_id: str, attempt: int, error: str) -> None:
        self.step_id, self.attempt, self.error = step_id, attempt, error
        super().__init__(f"step {step_id!r} failed on attempt {attempt}: {error}")


class RetryAfter(Exception):
    """Raised by a tool to say when to try again: ``raise RetryAfter(30, "rate limited")``.

    The engine waits ``seconds`` before the retry instead of its computed back-off (see
    ``ledger.retry``); it still counts as one of the tool's retries. Any exception with a numeric
    ``retry_after`` attribute is honoured the same way (e.g. one carrying an HTTP Retry-After).
    """

    def __init__(self, seconds: float, message: str = "") -> None:
        self.retry_after = float(seconds)
        super().__init__(message or f"retry after {self.retry_after:g}s")


class RetryLater(BaseException):
    """A step's next attempt is due in ``seconds``, longer than a worker may wait holding the
    lease (RUNLEDGER_RETRY_SLEEP_MAX_SECONDS): the execution ends, the run is released and
    re-queued for then. A ``BaseException`` so that an agent's ``except Exception`` cannot take
    it for the step's failure and go on."""

    def __init__(self, step_id: str, seconds: float, detail: str) -> None:
        self.step_id, self.seconds, self.detail = step_id, seconds, detail
        super().__init__(f"step {step_id!r}: {detail}")


class Waiting(RetryLater):
    """A ``ctx.sleep`` or ``ctx.wait_for_event`` waits longer than a worker may hold the run
    (RUNLEDGER_SLEEP_HOLD_SECONDS): the execution ends and the run is released until
    ``wake_at`` (None: until its event arrives), or until an event named ``event`` arrives."""

    def __init__(self, step_id: str, *, wake_at: datetime | None, event: str, detail: str) -> None:
        super().__init__(step_id, 0.0, detail)
        self.wake_at, self.event = wake_at, event


class RateLimited(RetryLater):
    """A call's rate-limit slot is further off than a worker may wait holding the run
    (RUNLEDGER_RATE_LIMIT_HOLD_SECONDS): the execution ends and the run is released until
    ``seconds`` from now (a little before its slot, which it keeps); ``detail`` is what its
    page says (``waiting: rate limit tool:charge 10/min, next slot in 12 s``)."""


class DuplicateStepId(LedgerError):
    """Agent code used one step id twice in a run."""


class AgentDefinitionError(LedgerError):
    """An agent or tool was registered wrongly."""


class NotAwaited(AgentDefinitionError):
    """A coroutine (or another awaitable) stood where a value is expected: an ``async def``
    called without ``await`` (a step's argument, a tool's or the agent's result), an ``async
    def`` tool called from a sync agent, or a step begun before the one before it was awaited."""


class ContinueAsNew(BaseException):
    """Raised by ``ctx.continue_as_new(inputs)``: end this run, continue in a new one.

    A ``BaseException`` like ``SystemExit``, so that an agent's ``except Exception`` around its
    own code cannot swallow it; the worker catches it and commits the continuation.
    """

    def __init__(self, inputs: object) -> None:
        self.inputs = inputs
        super().__init__("continue as a new run")


class HandedBack(BaseException):
    """Raised at a step boundary when this worker is draining (``ledger.engine.drain``): the
    run goes back to the queue for another worker. A ``BaseException`` like ``ContinueAsNew``,
    so that an agent's ``except Exception`` cannot swallow it."""

    def __init__(self, step_id: str) -> None:
        self.step_id = step_id
        super().__init__(f"handed back before step {step_id!r}: this worker is stopping")


class RunCancelled(BaseException):
    """Raised in the agent when its run is cancelled (a person, a token): a model call or a
    wait in progress ends at once with it. A ``BaseException`` like ``ContinueAsNew``, so
    that an agent's ``except Exception`` does not swallow it (a ``finally`` still runs); the
    worker records the execution ``cancelled``, with the cancel's who and why. Not to be
    confused with ``ledger.api.RunCancelled``, what an application's ``result()`` raises."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id} was cancelled")


# --- a person's action, refused (nothing was written) ---------------------------------


class OperationError(LedgerError):
    """An operator action was refused; nothing was written."""


class Conflict(OperationError):
    """The row changed since the operator opened it. ``current`` is its state now."""

    def __init__(self, message: str, *, current: dict[str, Any] | None = None) -> None:
        self.current = current or {}
        super().__init__(message)


class Busy(OperationError):
    """Another writer held the run's row (its worker committing a step, another operator's
    action, retention) for longer than the action may wait (``RUNLEDGER_ACTION_LOCK_WAIT_SECONDS``):
    nothing was written; the same action can be tried again in ``retry_after`` seconds."""

    def __init__(self, run_id: str, *, waited: float, retry_after: int = 2) -> None:
        self.run_id, self.waited, self.retry_after = run_id, waited, retry_after
        super().__init__(
            f"run {run_id} is busy: another writer (its worker committing a step, or another "
            f"action) held it for more than {waited:g} s; nothing was changed — try again in a "
            "few seconds"
        )


class NotAllowed(OperationError):
    """The action does not apply to the run or step in its present state."""


class WouldStopAgain(NotAllowed):
    """A resume or retry refused because the dry replay says the run would stop again at once
    (``why``, one sentence); no resume was spent. Pass ``anyway=True`` to spend one regardless."""

    def __init__(self, run_id: str, why: str) -> None:
        self.run_id, self.why = run_id, why
        super().__init__(f"not resumed, no resume spent: {why}")


class SelfApproval(NotAllowed):
    """The proposer of a settlement tried to approve it."""


class InvalidInput(OperationError, ValueError):
    """A reason is missing, or a result is not JSON or too large."""


@dataclass(frozen=True)
class ItemError:
    """Why the item at ``index`` refused its batch: ``kind`` is ``invalid``,
    ``unknown-agent`` or ``conflict`` (``current`` as in ``Conflict``)."""

    index: int
    kind: str
    message: str
    current: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "type": self.kind, "message": self.message}
        if self.current:
            out["current"] = self.current
        return out


class BatchRefused(InvalidInput):
    """A batch start refused whole, nothing written: ``errors`` lists each bad item."""

    def __init__(self, errors: list[ItemError]) -> None:
        self.errors = errors
        shown = "; ".join(f"runs[{e.index}]: {e.message}" for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(
            f"{len(errors)} of the batch's runs cannot start, so none was started: {shown}{more}"
        )

    @property
    def conflicts_only(self) -> bool:
        return all(e.kind == "conflict" for e in self.errors)


#: SQLSTATEs after which the ledger is worth asking again soon: the connection is gone (class
#: 08, or no answer at all), the server is shutting down or starting, or a serialization clash.
TRANSIENT_SQLSTATES = ("08", "57P01", "57P02", "57P03", "40001", "40P01")


class LedgerUnavailable(BaseException):
    """The database failed one of the engine's own ledger writes for a step.

    A ``BaseException`` like ``ContinueAsNew``: an agent's ``except Exception`` must not swallow
    it and call the tool again as if the write had happened — whether it committed is unknown.
    ``what`` is the write: ``intent`` (an effect's started row, before the tool is called),
    ``result`` (an effect's outcome, after the call), ``failure``, ``settlement`` or ``step``
    (a read, model or clock row). ``transient`` says whether the database was lost (the
    connection cut, the server restarting) rather than refusing the statement (a timeout, a
    full disk).
    """

    def __init__(self, step_id: str, what: str, cause: Exception) -> None:
        self.step_id, self.what, self.cause = step_id, what, cause
        self.sqlstate: str | None = getattr(cause.__cause__, "sqlstate", None) or getattr(
            cause, "sqlstate", None
        )
        super().__init__(f"the ledger write of step {step_id!r} ({what}) failed: {self.problem}")

    @property
    def problem(self) -> str:
        text = " ".join(str(self.cause).split())[:500] or type(self.cause).__name__
        return f"SQLSTATE {self.sqlstate}: {text}" if self.sqlstate else text

    @property
    def transient(self) -> bool:
        state = self.sqlstate
        return state is None or state.startswith(TRANSIENT_SQLSTATES)

    def explain(self) -> str:
        """What an operator reads on the failed run: what failed, and what a retry does."""
        consequence = {
            "intent": "the effect's intent was not recorded, so the tool was not called",
            "result": "the effect was called under its effect key but its outcome was not "
            "recorded; the step stays started, and a retry asks the downstream system (or a "
            "person) through that key before sending anything again",
            "settlement": "the downstream system's answer about the effect was not recorded; "
            "the step stays started, and a retry asks it again before sending anything",
        }.get(self.what, "nothing after it ran")
        return (
            f"the database refused the ledger write of step {self.step_id!r} ({self.what}): "
            f"{self.problem}. {consequence[0].upper()}{consequence[1:]}. Fix the database "
            "(disk space, statement_timeout, locks), then retry the run."
        )


class QuestionAsked(RunBlocked):
    """``ctx.ask``: the run stops until a person answers (or ``wake_at``, its timeout)."""

    reason = "question"

    def __init__(self, step_id: str, detail: str, *, wake_at: datetime | None) -> None:
        super().__init__(step_id, detail)
        self.wake_at = wake_at


class UnknownRun(OperationError, LookupError):
    """No run of that id (an event sent to a run that does not exist)."""


class PayloadTooLarge(InvalidInput):
    """An event's payload is larger than RUNLEDGER_MAX_EVENT_BYTES."""

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit
