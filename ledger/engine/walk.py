"""Where one execution (or one dry replay) stands on a run's recorded path.

The run context, the live steps and the dry replay share one ``Walk``: the in-memory ledger,
the step the walk came from, the steps it has walked, the seq counter and the counts. Fan-out
siblings on other threads touch it only under its lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger.engine.decide import StepRow, abandon_branch, expected_step
from ledger.errors import Divergence
from ledger.registry import Agent
from ledger.states import StepStatus

log = logging.getLogger(__name__)


@dataclass
class Walk:
    run_id: str
    agent: Agent
    ledger: dict[str, StepRow]
    prev: str | None = None  # the step whose successor the next call is
    walked: list[str] = field(default_factory=list)  # step ids returned so far, in order
    replayed: int = 0
    executed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_seq: int = 0

    def __post_init__(self) -> None:
        self.next_seq = max((row.seq for row in self.ledger.values()), default=0) + 1

    def live_row(self, step_id: str) -> StepRow | None:
        row = self.ledger.get(step_id)
        return None if row is None or row.status == StepStatus.ABANDONED else row

    def advance(self, *step_ids: str) -> None:
        """The walk returned these steps (in chain order)."""
        self.walked.extend(step_ids)
        self.prev = step_ids[-1]

    def count(self, *, replayed: int = 0, executed: int = 0) -> None:
        with self.lock:
            self.replayed += replayed
            self.executed += executed

    def take_seq(self) -> int:
        with self.lock:
            seq = self.next_seq
            self.next_seq += 1
            return seq

    def check_path(
        self, step_id: str, *, accept: frozenset[str] = frozenset(), policy: str | None = None
    ) -> list[str]:
        """Compare the call with the recorded path; return the rows a replan abandons.

        ``accept``: other recorded step ids that may stand where this one is expected.
        ``policy`` overrides the agent's divergence policy (the dry replay reports every
        divergence, so it checks under ``refuse``). Raises ``Divergence`` under ``refuse``.
        """
        expected = expected_step(self.ledger, self.prev)
        if expected is None or expected == step_id or expected in accept:
            return []
        where = f"after {self.prev!r}" if self.prev else "as the first step"
        detail = f"the recorded run went {where} to {expected!r}; today's code calls {step_id!r}"
        if (policy or self.agent.divergence) == "refuse":
            raise Divergence(step_id, detail)
        log.warning("run %s: replanning: %s", self.run_id, detail)
        return abandon_branch(self.ledger, expected)

    def check_fanout_path(self, step_ids: Sequence[str], *, policy: str | None = None) -> list[str]:
        """The recorded path must hold the siblings in chain order, as for single steps.

        When the fan-out opens the run, the recorded first row may be any sibling: the one
        that committed first need not be the first in the chain. Leaves ``prev`` unchanged.
        """
        entry = self.prev
        ids = frozenset(step_ids)
        abandon: list[str] = []
        try:
            for i, step_id in enumerate(step_ids):
                accept = ids if i == 0 and entry is None else frozenset()
                abandon += self.check_path(step_id, accept=accept, policy=policy)
                self.prev = step_id
        finally:
            self.prev = entry
        return abandon
