"""Named crash points inside the example tools, for kill tests and the demo.

``RUNLEDGER_KILL_AT=charge.after_effect`` (or a comma-separated list) makes the process SIGKILL
itself when it reaches that point, the first time in this process; ``charge.after_effect@2``
the second time (fan-out siblings reach the same point). Tests in one process can instead
install a hook with ``set_hook``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Callable

_hooks: dict[str, Callable[[], None]] = {}
_fired: set[str] = set()
_reached: Counter[str] = Counter()
_lock = threading.Lock()  # fan-out siblings reach points from several threads


def point(name: str) -> None:
    hook = _hooks.get(name)
    if hook is not None:
        hook()
    wanted = os.environ.get("RUNLEDGER_KILL_AT", "")
    if not wanted:
        return
    with _lock:
        _reached[name] += 1
        times = _reached[name]
    for spec in wanted.split(","):
        target, _, nth = spec.partition("@")
        if target == name and times == int(nth or 1) and spec not in _fired:
            _fired.add(spec)
            os.kill(os.getpid(), signal.SIGKILL)


def set_hook(name: str, hook: Callable[[], None]) -> None:
    _hooks[name] = hook


def clear_hooks() -> None:
    _hooks.clear()
    _fired.clear()
    _reached.clear()
