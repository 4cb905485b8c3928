"""One step call as the engine and the dry replay see it, and the text forms the ledger stores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ledger.registry import Approval
from ledger.retry import RetryPolicy, arguments_misfit
from ledger.states import StepKind

if TYPE_CHECKING:
    from ledger.registry import Tool


@dataclass(frozen=True)
class WaitSpec:
    """What a waiting step waits for: a due time (``seconds`` from its first execution, or
    ``until``; neither: no timeout) and, for ``ctx.wait_for_event``, the event's ``name``."""

    seconds: float | None = None
    until: datetime | None = None
    event: str | None = None
    #: ``ctx.ask``: the question; the run stops for a person's answer (``QuestionAsked``)
    #: instead of waiting released, and the answer arrives as the event ``event``.
    question: str | None = None

    def due(self, now: datetime) -> datetime | None:
        """The due time, as the step's first execution records it."""
        if self.until is not None:
            return self.until
        if self.seconds is not None:
            return now + timedelta(seconds=self.seconds)
        return None


@dataclass
class Call:
    """Everything about one step call that does not depend on the ledger."""

    step_id: str
    kind: StepKind
    tool: str
    inputs: Any
    inputs_text: str
    input_hash: str
    execute: Callable[[str | None], Any]
    reconcile: Callable[[str], Any] | None = None
    retries: int = 0
    #: The retry policy (its ``retries`` equal ``retries``); None: retry at once, as before.
    policy: RetryPolicy | None = None
    #: The registered tool a ``ctx.call`` calls (None for model and clock steps).
    source: Tool | None = None
    ttl_seconds: float | None = None
    model_id: str = ""
    prompt_hash: str = ""
    seq: int | None = None  # taken up front for a fan-out sibling (on the calling thread)
    next_step_id: str | None = None  # a fan-out sibling's link to the next sibling
    approval: Approval | None = None  # an effect a person approves before it is sent
    #: ``execute`` gives a coroutine (an ``async def`` tool or model client): an async agent
    #: awaits it on the loop; anything else runs on a thread (``ledger.engine.aio``).
    is_async: bool = False
    #: A sleep or a wait for an event (``ctx.sleep``, ``ctx.wait_for_event``): the live steps
    #: record its due time first, then wait (``LiveSteps._run_wait``); ``execute`` is unused.
    wait: WaitSpec | None = None


def misfit(call: Call) -> bool:
    """After a ``TypeError`` from ``call``: whether its arguments do not fit the tool's signature
    (the engine's deterministic error, never retried) rather than the tool raising it."""
    tool = call.source
    if tool is None or not isinstance(call.inputs, dict):
        return False
    hidden: dict[str, Any] = {}
    if call.kind == StepKind.EFFECT:
        hidden["idempotency_key"] = ""
        if tool.takes_fencing_token:
            hidden["fencing_token"] = 0
    return arguments_misfit(tool.fn, call.inputs, **hidden)


_ERROR_LIMIT = 10_000


def describe(exc: BaseException) -> str:
    """An exception as text the ledger can always store: a tool's error may be huge, hold NUL
    bytes or lone surrogates (rejected by PostgreSQL), or have a ``__str__`` that raises."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__}: <the exception's text could not be read>"
    return storable(text)


def storable(text: str) -> str:
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > _ERROR_LIMIT:
        text = f"{text[:_ERROR_LIMIT]}… [{len(text)} characters, cut]"
    return text
