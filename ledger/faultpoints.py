"""Named points where development equipment may inject a fault; a no-op in production.

The product marks a handful of places — ``engine.before_send`` (an effect's intent committed,
before the lease check and the send), ``gate.after_use`` (an approval gate's approval used
with the effect's intent, in one transaction, nothing sent yet), ``mailbox.before_commit`` (an
event taken from a run's mailbox and its step written, in a transaction not yet committed),
``task.after_execute`` (a run's outcome committed, before the task returns),
``notify.after_send`` (a notification received, before it is recorded as sent),
``claude.model.before_forward`` and ``claude.model.after_record`` (a Claude session's model
request about to leave for the model; its answer recorded, not yet handed to the CLI) — and
the example tools mark theirs (``charge.after_effect`` …). ``point(name)`` does nothing unless
a hook is installed; only
the development equipment installs one (``harness.faults``: kill, freeze or call a test's
function at a named point). Nothing here reads the environment.

``clock()`` is the clock the workers' tasks execute runs with: Django's ``timezone.now`` unless
the equipment installed another (``install_clock``: a test's clock moved forward an hour, so
that real workers see a sleep of an hour come due without anyone waiting for it).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

_hook: Callable[[str], None] | None = None
_clock: Callable[[], datetime] | None = None


def point(name: str) -> None:
    """Reached a named point: the installed hook, if any, decides what happens."""
    hook = _hook
    if hook is not None:
        hook(name)


def install(hook: Callable[[str], None] | None) -> None:
    """Install the one hook (``None`` removes it)."""
    global _hook
    _hook = hook


def installed() -> bool:
    return _hook is not None


def clock() -> Callable[[], datetime]:
    """The clock a worker executes a run with: ``timezone.now`` unless the equipment installed
    another."""
    return _clock or timezone.now


def install_clock(clock: Callable[[], datetime] | None) -> None:
    """Install the workers' clock (``None``: ``timezone.now`` again)."""
    global _clock
    _clock = clock
