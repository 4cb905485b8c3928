"""Named crash points inside the example tools, for kill tests and the demo.

``RUNLEDGER_KILL_AT=charge.after_effect`` (or a comma-separated list) makes the process SIGKILL
itself when it reaches that point, the first time in this process; tests in one process can
instead install a hook with ``set_hook``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

_hooks: dict[str, Callable[[], None]] = {}
_fired: set[str] = set()


def point(name: str) -> None:
    hook = _hooks.get(name)
    if hook is not None:
        hook()
    wanted = os.environ.get("RUNLEDGER_KILL_AT", "")
    if wanted and name in wanted.split(",") and name not in _fired:
        _fired.add(name)
        os.kill(os.getpid(), signal.SIGKILL)


def set_hook(name: str, hook: Callable[[], None]) -> None:
    _hooks[name] = hook


def clear_hooks() -> None:
    _hooks.clear()
    _fired.clear()
