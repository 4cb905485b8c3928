"""gunicorn's configuration for the serve stack (``gunicorn -c python:runs.gunicorn_conf``).

Every value can still be overridden by gunicorn's own environment (``WEB_CONCURRENCY``,
``GUNICORN_CMD_ARGS``) or command line.
"""

from __future__ import annotations

import os
from typing import Any

wsgi_app = "runs.wsgi:application"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# Threads: the API's long-poll (GET /api/v1/runs/{id}/wait, up to 60 s) holds a thread, not a
# whole worker process; under gthread the timeout is the worker's heartbeat, not a request's.
worker_class = "gthread"
threads = int(os.environ.get("RUNLEDGER_WEB_THREADS", "8"))
# Dashboard pages are short reads; a worker silent longer than this is stuck, not loaded.
timeout = int(os.environ.get("RUNLEDGER_WEB_TIMEOUT", "30"))
graceful_timeout = 20
# Load the project once in the arbiter: workers fork with it, and a broken setting fails the
# start instead of every worker in a loop.
preload_app = True
accesslog = os.environ.get("RUNLEDGER_ACCESS_LOG", "-") or None
# gunicorn's own lines and its access log as the project's JSON lines (RUNLEDGER_LOG_FORMAT).
logger_class = "runs.operations.logs.GunicornLogger"
# No control socket: its default path is shared by every gunicorn of the user on this machine.
control_socket_disable = True
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")


def on_starting(server: Any) -> None:
    """Before the workers start: the metric files of processes that are gone stop counting
    (never the directory emptied: a worker and beat on this machine keep writing there)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from runs.operations.metrics import forget_dead_processes

        forget_dead_processes()


def child_exit(server: Any, worker: Any) -> None:
    """A gunicorn worker's metric files stop counting as live when it exits."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
