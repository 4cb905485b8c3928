"""The harness as a Django app: ``manage.py killtest``, and the tasks' crash point installed."""

from __future__ import annotations

from functools import partial

from django.apps import AppConfig

#: The named crash point between a task's committed outcome and its acknowledgement.
AFTER_EXECUTE = "task.after_execute"


class HarnessConfig(AppConfig):
    name = "harness"
    verbose_name = "Kill-test harness"

    def ready(self) -> None:
        install()


def install() -> None:
    """Make every task reach the fault point ``task.after_execute`` (``RUNLEDGER_KILL_AT``)."""
    from ledger.examples import faults
    from runs import tasks

    tasks.after_execute_hook = partial(faults.point, AFTER_EXECUTE)


def uninstall() -> None:
    from runs import tasks

    tasks.after_execute_hook = None
