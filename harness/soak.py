"""The soak: a thousand trials mixing every fault the harness can make, on two brokers.

One plan (``killtest.plan`` with every fault family: SIGKILL at every crash point and from
outside at random moments, SIGSTOP zombies woken after their run was taken over, database
connection cuts at every commit of every effect and at random moments) is dealt alternately to
a cluster on the default filesystem broker and one on a private Redis server; each runs its
share with its own workers and beat against the same database. The wall time is bounded: no
batch starts after ``budget_seconds``. The report's ``soak_line()`` is the summary.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import killtest
from harness.servers import RedisServer

BROKERS = ("filesystem", "redis")


@contextlib.contextmanager
def broker(name: str, root: Path) -> Iterator[str]:
    """A broker URL: the no-server default, or a private Redis started (and stopped) here."""
    if name == "filesystem":
        yield "filesystem://localhost//"
        return
    server = RedisServer(root / "redis").start()
    try:
        yield server.url
    finally:
        server.stop()


def run(
    *,
    trials: int,
    seed: int,
    root: Path,
    budget_seconds: float,
    brokers: tuple[str, ...] = BROKERS,
    parallel: int = 4,
    progress: Callable[[str], None] | None = None,
    only: int | None = None,
) -> killtest.Report:
    started = time.monotonic()
    chosen = killtest.plan(max(trials, (only or 0) + 1), seed, killtest.FAULTS)
    done: list[killtest.Trial] = []
    for number, name in enumerate(brokers):
        share = [t for t in chosen[number :: len(brokers)] if only in (None, t.index)]
        if not share:
            continue
        left = budget_seconds - (time.monotonic() - started)
        # Each broker gets an even part of what is left of the budget.
        budget = left / (len(brokers) - number)
        with broker(name, root / name) as url:
            report = killtest.run(
                trials=len(share),
                seed=seed,
                root=root / name,
                parallel=parallel,
                progress=_prefixed(progress, name),
                broker_url=url,
                budget_seconds=budget,
                chosen=share,
            )
        done += report.trials
    done.sort(key=lambda t: t.index)
    return killtest.Report(trials=done, seed=seed, elapsed=time.monotonic() - started)


def _prefixed(progress: Callable[[str], None] | None, name: str) -> Callable[[str], None] | None:
    if progress is None:
        return None
    return lambda line: progress(f"[{name}] {line}")
