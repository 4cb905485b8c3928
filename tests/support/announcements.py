"""What the ledger announced to the workers (``ledger.signals.run_queued``), recorded by a test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ledger import signals


@dataclass
class Announcements:
    """(run id, cause) of each announcement, in order; ``with_starts=False`` leaves out the
    test's own starts (cause ``start``)."""

    with_starts: bool = True
    seen: list[tuple[str, str]] = field(default_factory=list)

    def receive(self, sender: Any, run_id: str, cause: str, **kwargs: Any) -> None:
        if self.with_starts or cause != "start":
            self.seen.append((run_id, cause))

    @property
    def ids(self) -> list[str]:
        return [run_id for run_id, _ in self.seen]


@contextmanager
def recording(*, with_starts: bool = True) -> Iterator[Announcements]:
    """Record the announcements made inside the block."""
    record = Announcements(with_starts=with_starts)
    uid = f"test-announcements-{id(record)}"
    signals.run_queued.connect(record.receive, dispatch_uid=uid)
    try:
        yield record
    finally:
        signals.run_queued.disconnect(dispatch_uid=uid)
