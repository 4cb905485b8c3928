"""``runledger metrics_exporter``: ``/metrics`` for a machine that runs workers (or beat) and no
web process.

The worker's pool children and beat write their counters to ``PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode); this small HTTP server adds them up when Prometheus
scrapes it, behind the same token (``RUNLEDGER_METRICS_TOKEN``) or opted-in networks as the
web's ``/metrics``. A process of its own rather than a thread in the worker: one exporter covers
every worker and beat on the machine, keeps answering while a worker restarts or drains, and the
worker does no HTTP. It leaves out the gauges read from the ledger (runs by status, sweep lag):
the web's ``/metrics`` reports those once for the whole deployment.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from prometheus_client.exposition import ThreadingWSGIServer

from runs.operations.metrics import exposition, forget_dead_processes
from runs.operations.probes import metrics_allowed

log = logging.getLogger("runs.metrics_exporter")
StartResponse = Callable[..., Any]


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """GET /metrics with the token (or from an opted-in network): the counters; else a refusal."""
    if environ.get("PATH_INFO", "") not in ("/metrics", "/"):
        return _json(start_response, "404 Not Found", "not found")
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return _json(start_response, "405 Method Not Allowed", "method not allowed")
    if not metrics_allowed(environ):
        return _json(start_response, "403 Forbidden", "forbidden")
    body, content_type = exposition(ledger=False)
    start_response("200 OK", [("Content-Type", content_type), ("Cache-Control", "no-store")])
    return [body]


def _json(start_response: StartResponse, status: str, word: str) -> list[bytes]:
    start_response(status, [("Content-Type", "application/json")])
    return [json.dumps({"status": word}).encode()]


class _LoggedHandler(WSGIRequestHandler):
    """Each request as a log record (JSON lines, like the rest), not wsgiref's stderr text."""

    def log_message(self, format: str, *args: Any) -> None:
        log.info(
            "%s %s",
            self.command,
            self.path,
            extra={"peer": self.client_address[0], "line": format % args},
        )


class Command(BaseCommand):
    help = (
        "Serve /metrics for a machine without a web process: the counters of its workers and "
        "beat (PROMETHEUS_MULTIPROC_DIR), behind RUNLEDGER_METRICS_TOKEN."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
        parser.add_argument("--port", type=int, default=9808, help="port to listen on (9808)")

    def handle(self, *args: Any, **options: Any) -> None:
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
        if not directory:
            raise CommandError(
                "PROMETHEUS_MULTIPROC_DIR is not set: set it (the same directory) for the "
                "workers, beat and this exporter on this machine"
            )
        if not settings.RUNLEDGER_METRICS_TOKEN and not settings.RUNLEDGER_METRICS_NETWORKS:
            raise CommandError(
                "set RUNLEDGER_METRICS_TOKEN (or RUNLEDGER_METRICS_NETWORKS): without either "
                "the exporter would refuse every scrape"
            )
        forget_dead_processes(directory)
        try:
            server = make_server(
                options["host"],
                options["port"],
                application,
                ThreadingWSGIServer,
                handler_class=_LoggedHandler,
            )
        except OSError as exc:
            raise CommandError(
                f"cannot listen on {options['host']}:{options['port']}: {exc}"
            ) from exc
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        log.info(
            "metrics exporter listening on http://%s:%s/metrics",
            options["host"],
            server.server_port,
            extra={"directory": directory, "port": server.server_port},
        )
        try:
            server.serve_forever()
        finally:
            server.server_close()
