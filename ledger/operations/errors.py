"""What an operator action raises when it refuses. Every message is written for the operator."""

from __future__ import annotations

from typing import Any

from ledger.errors import LedgerError


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
