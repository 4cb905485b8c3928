"""A failed attempt as the ledger keeps it: exception type, message, and a traceback cut down
to the frames that explain it — the agent's (where it made the call) and the tool's (where it
raised) — capped in size. One entry of ``Step.errors`` per failed attempt.

An entry holds ``attempt``, ``at`` (ISO time), ``error`` (``Type: message``, as before),
``type`` (the exception's qualified name), ``message``, ``traceback`` (text, at most
RUNLEDGER_MAX_TRACEBACK_CHARS), and for a failure that will be retried ``retry_at`` (ISO time)
and ``retries_left`` (how many retries the policy still allows after it), or ``final: true``
with ``why`` when it will not be. Entries written before these fields existed carry only the
first three; readers (``ledger.selectors.failures``) take both.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ledger.engine.calls import storable

_LEDGER = str(Path(__file__).resolve().parents[1]) + os.sep
# The agent authors' code that lives inside the package: the examples and the loops' adapters.
_AUTHORS = tuple(_LEDGER + d + os.sep for d in ("examples", "loops"))
_LIBRARIES = tuple(
    {str(Path(p).resolve()) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")
     if (p := sysconfig.get_paths().get(k))}
)  # fmt: skip
MESSAGE_CHARS = 2000


def _authors_frame(filename: str) -> bool:
    """A frame of the agent's or a tool's code: not the engine's, not a library's."""
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    if path.startswith(_AUTHORS):
        return True
    return not path.startswith(_LEDGER) and not path.startswith(_LIBRARIES)


def _keep(frames: Iterable[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    return [f for f in frames if _authors_frame(f.filename)]


_WORKER = _LEDGER + os.path.join("processes", "execute.py")


def _below_the_worker(stack: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    """The frames from the agent function down: what called the worker (a Celery task, a
    command, a test) explains nothing about the failure."""
    frames = list(stack)
    for i in range(len(frames) - 1, -1, -1):
        if frames[i].name == "_execute_agent" and frames[i].filename == _WORKER:
            return frames[i + 1 :]
    return frames


def traceback_text(exc: BaseException, *, limit: int, caller: bool = True) -> str:
    """The traceback of ``exc`` raised inside a tool call: the agent's frames leading to the
    call (from the current stack) then the tool's, each chained cause too; at most ``limit``
    characters (the end kept: the raise and the message are there)."""
    te = traceback.TracebackException.from_exception(exc, capture_locals=False)
    inner = te.stack
    kept = _keep(inner)
    if not kept and len(inner):
        kept = [inner[-1]]  # only library frames: keep the one that raised
    outer = _keep(_below_the_worker(traceback.extract_stack()[:-1])) if caller else []
    te.stack = traceback.StackSummary.from_list([*outer, *kept])
    seen: set[int] = {id(te)}
    link = te.__cause__ or te.__context__
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.stack = traceback.StackSummary.from_list(_keep(link.stack) or list(link.stack)[-1:])
        link = link.__cause__ or link.__context__
    text = storable("".join(te.format()))
    if len(text) > limit:
        text = f"… [{len(text) - limit} characters cut]\n" + text[-limit:]
    return text


def qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    module = cls.__module__
    return (
        cls.__qualname__ if module in ("builtins", "__main__") else f"{module}.{cls.__qualname__}"
    )


def entry(exc: BaseException, *, attempt: int, at: str, error: str, limit: int) -> dict[str, Any]:
    """The ``Step.errors`` entry of one failed attempt (its outcome fields added by the caller)."""
    try:
        message = str(exc)
    except Exception:
        message = "<the exception's text could not be read>"
    return {
        "attempt": attempt,
        "at": at,
        "error": error[:2000],
        "type": qualified_name(exc),
        "message": storable(message)[:MESSAGE_CHARS],
        "traceback": traceback_text(exc, limit=limit),
    }
