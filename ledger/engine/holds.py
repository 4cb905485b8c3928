"""The pauses one execution obeys (``ledger.models.Pause``), read at the claim and again by
each heartbeat: never per step. A step of a paused tool that would reach the tool (execute,
look up, re-read) raises ``RunPaused``; a replayed one does not, as it reaches nothing. A pause
of the run or its agent stops the execution at its next step of any kind, as does the run's
deadline once it has passed (``DeadlineReached``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ledger.errors import DeadlineReached, RunPaused
from ledger.selectors.pauses import ActivePauses

NONE = ActivePauses(whole=None, tools={})


class Holds:
    """Thread-safe by assignment: the heartbeat replaces ``current`` while steps read it."""

    def __init__(
        self,
        load: Callable[[], ActivePauses] | None = None,
        *,
        deadline: datetime | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._load = load
        self.current = NONE
        #: The run's deadline (``Run.deadline_at``): checked before every step, by ``clock``.
        self.deadline = deadline
        self._clock = clock

    def refresh(self) -> None:
        if self._load is not None:
            self.current = self._load()

    def check_whole(self, step_id: str, *, deadline: bool = True) -> None:
        if deadline and self.deadline is not None and self._clock is not None:
            now = self._clock()
            if now >= self.deadline:
                raise DeadlineReached(
                    step_id,
                    f"deadline {self.deadline:%Y-%m-%d %H:%M:%S %Z} passed at {now:%H:%M:%S}",
                )
        pause = self.current.whole
        if pause is not None:
            raise RunPaused(step_id, _detail(pause.scope, pause.target, pause.reason), pause.pk)

    def check_tool(self, step_id: str, tool: str) -> None:
        pause = self.current.tools.get(tool) if self.current.tools else None
        if pause is not None:
            raise RunPaused(step_id, _detail("tool", tool, pause.reason), pause.pk)


def _detail(scope: str, target: str, reason: str) -> str:
    return f"paused: {scope} {target!r} is paused ({reason}); lifting the pause queues the run"
