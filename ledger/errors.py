"""What the engine raises. Blocking errors stop a run as needs_attention with a reason."""

from __future__ import annotations

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


class LeaseLost(LedgerError):
    """This worker's lease on the run was taken or revoked: it must commit nothing and stop."""


class StepFailed(LedgerError):
    """A step failed on its last allowed attempt."""

    def __init__(self, step_id: str, attempt: int, error: str) -> None:
        self.step_id, self.attempt, self.error = step_id, attempt, error
        super().__init__(f"step {step_id!r} failed on attempt {attempt}: {error}")


class DuplicateStepId(LedgerError):
    """Agent code used one step id twice in a run."""


class AgentDefinitionError(LedgerError):
    """An agent or tool was registered wrongly."""


class ContinueAsNew(BaseException):
    """Raised by ``ctx.continue_as_new(inputs)``: end this run, continue in a new one.

    A ``BaseException`` like ``SystemExit``, so that an agent's ``except Exception`` around its
    own code cannot swallow it; the worker catches it and commits the continuation.
    """

    def __init__(self, inputs: object) -> None:
        self.inputs = inputs
        super().__init__("continue as a new run")


# --- a person's action, refused (nothing was written) ---------------------------------


class OperationError(LedgerError):
    """An operator action was refused; nothing was written."""


class Conflict(OperationError):
    """The row changed since the operator opened it. ``current`` is its state now."""

    def __init__(self, message: str, *, current: dict[str, Any] | None = None) -> None:
        self.current = current or {}
        super().__init__(message)


class NotAllowed(OperationError):
    """The action does not apply to the run or step in its present state."""


class SelfApproval(NotAllowed):
    """The proposer of a settlement tried to approve it."""


class InvalidInput(OperationError, ValueError):
    """A reason is missing, or a result is not JSON or too large."""
