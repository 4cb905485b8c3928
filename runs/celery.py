"""The Celery app: `celery -A runs worker` runs agents, `celery -A runs beat` runs the sweep.

Configuration lives in runs/settings/celery.py under the CELERY_ prefix (with the reasons).
With RUNLEDGER_LOG_FORMAT=json (the default) every line a worker or beat writes is a JSON
object: Celery's handlers use the project's formatter, the start-up banner is one record
(``celery worker starting`` / ``celery beat starting``, the banner's facts as fields), and
every record during a task names its ``task_id`` and, for a run's task, the ``run_id`` — the
"Task … raised unexpected" line of a task that failed too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from contextvars import Token
from functools import cached_property
from typing import Any

from celery import Celery
from celery.apps import worker as celery_worker_module
from celery.apps.beat import Beat
from celery.apps.worker import Worker
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    beat_init,
    task_postrun,
    task_prerun,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from celery.utils.log import get_multiprocessing_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
log = logging.getLogger("runs.celery")


def _json() -> bool:
    from runs.operations.logs import json_wanted

    return json_wanted()


class JsonWorker(Worker):
    """Celery's worker program; its banner as one JSON record when the logs are JSON."""

    def on_before_init(self, quiet: bool = False, **kwargs: Any) -> None:
        from runs.startup import refuse_or_go

        refuse_or_go("worker")  # one line and exit: embedded defaults, an unmigrated database
        if _json():
            # Celery's first words (a warning about running as root) come before its logging is
            # set up: Django's (root: JSON lines) takes them, and its shutdown notices, which it
            # writes straight to the file descriptors, become JSON lines too.
            import django

            django.setup()
            logging.captureWarnings(True)
            celery_worker_module.safe_say = _say_json  # type: ignore[attr-defined]
        super().on_before_init(quiet=quiet, **kwargs)

    def emit_banner(self) -> None:
        if not _json():
            super().emit_banner()
            return
        me: Any = self  # WorkController's attributes, which celery-types does not declare
        log.info(
            "celery worker %s starting",
            me.hostname,
            extra={
                "hostname": me.hostname,
                "concurrency": me.concurrency,
                "pool": getattr(me.pool_cls, "__module__", str(me.pool_cls)),
                "queues": sorted(self.app.amqp.queues.consume_from),
                "broker": self.app.connection().as_uri(),  # without the password
                "tasks": sorted(t for t in self.app.tasks if not t.startswith("celery.")),
            },
        )


def _say_json(msg: str, f: Any = sys.__stderr__) -> None:
    """celery.apps.worker.safe_say as a JSON line: one ``os.write`` (it runs in signal
    handlers: no logging lock), as Celery's own does."""
    line = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "level": "WARNING"}
    line |= {"logger": "celery.apps.worker", "message": " ".join(str(msg).split())}
    with contextlib.suppress(OSError, ValueError):  # as Celery's: never abort a shutdown
        os.write(f.fileno(), json.dumps(line).encode() + b"\n")


class JsonBeat(Beat):
    """Celery's beat program: quiet (no printed banner) when the logs are JSON; ``beat_init``
    logs the banner's facts once logging is set up."""

    def run(self) -> None:
        from runs.startup import refuse_or_go

        refuse_or_go("beat")
        if _json():
            self.quiet = True
        super().run()


class RunledgerCelery(Celery):
    @cached_property
    def Worker(self) -> Any:
        return self.subclass_with_self(JsonWorker)

    @cached_property
    def Beat(self) -> Any:
        return self.subclass_with_self(JsonBeat)


app = RunledgerCelery("runs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs.operations"])


@after_setup_logger.connect
def _log_once(logger: logging.Logger, **kwargs: object) -> None:
    # Django's LOGGING gives the root logger a console handler; in a worker Celery replaces it
    # with its own (worker_hijack_root_logger), through which the ledger's and runs' records
    # propagate: keep no handler of their own, so each line is written once.
    for name in ("ledger", "runs", "django"):
        logging.getLogger(name).handlers.clear()
    _json_lines(logger)
    # Celery gives billiard's pool logger (which does not propagate) a handler of its own: its
    # lines ("Process 'ForkPoolWorker-1' … exited with 'signal 15'" at a shutdown) are JSON too.
    pool_logger = get_multiprocessing_logger()
    if pool_logger is not None:
        _json_lines(pool_logger)


@after_setup_task_logger.connect
def _task_log(logger: logging.Logger, **kwargs: object) -> None:
    _json_lines(logger)


def _json_lines(logger: logging.Logger) -> None:
    """RUNLEDGER_LOG_FORMAT=json: Celery's own handlers write the project's JSON lines too."""
    if not _json():
        return
    from runs.operations.logs import use_json

    for handler in logger.handlers:
        use_json(handler)


@worker_ready.connect
def _report_agent_modules(sender: object = None, **kwargs: object) -> None:
    """At start, a worker says which agent modules failed to import: in its log, and in a
    beacon that ``/readyz`` reports (``agent_modules``). It takes no run of an agent it lacks
    (``ledger.processes.execute``)."""
    from runs.operations import probes

    probes.worker_started(getattr(sender, "hostname", "") or "celery")


@worker_shutdown.connect
def _forget_agent_modules(sender: object = None, **kwargs: object) -> None:
    from runs.operations import probes

    probes.worker_stopped(getattr(sender, "hostname", "") or "celery")


@beat_init.connect
def _beat_banner(sender: Any, **kwargs: object) -> None:
    if not _json():
        return
    scheduler = sender.get_scheduler(lazy=True)
    log.info(
        "celery beat starting",
        extra={
            "broker": sender.app.connection().as_uri(),
            "scheduler": type(scheduler).__name__,
            "schedule": str(sender.schedule_filename),
            "max_interval": sender.max_interval,
        },
    )


#: The bound log fields per (task id, thread): a task that retries is sent again under the same
#: id, and in a threads pool its next attempt can start on another thread before this attempt's
#: task_postrun has run.
_task_fields: dict[tuple[str, int], Token[Any]] = {}


@task_prerun.connect
def _bind_task(task_id: str, task: Any, args: Any = (), kwargs: Any = None, **rest: Any) -> None:
    """Every record during the task names it, and its run (the first argument of a run's task):
    Celery's own "Task … raised unexpected" record is written before task_postrun."""
    from ledger import logcontext

    fields = {"task_id": task_id}
    run_id = (kwargs or {}).get("run_id") or (args[0] if args else None)
    if isinstance(run_id, str) and run_id.startswith("run_"):
        fields["run_id"] = run_id
    _task_fields[task_id, threading.get_ident()] = logcontext.bind(**fields)


@task_postrun.connect
def _unbind_task(task_id: str, **rest: Any) -> None:
    from ledger import logcontext

    token = _task_fields.pop((task_id, threading.get_ident()), None)
    if token is not None:
        logcontext.unbind(token)


@worker_process_shutdown.connect
def _process_dead(pid: int | None = None, **kwargs: object) -> None:
    """A pool child's live-gauge metric files stop counting when it exits (as gunicorn's
    child_exit does for its workers); its counters stay, summed into the totals."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
