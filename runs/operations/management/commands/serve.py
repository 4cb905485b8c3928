"""``manage.py serve``: the production stack on one machine — gunicorn, a Celery worker, beat.

Configured by the same environment variables as a deployment that runs the three parts apart
(DATABASE_URL, CELERY_BROKER_URL, SECRET_KEY, ALLOWED_HOSTS, …). It migrates, collects the
static files (hashed and compressed, served by WhiteNoise), starts the three, and waits until
``/readyz`` is green (database, migrations, broker, a first sweep by worker and beat): a stack
that is not ready in ``--ready-seconds`` is stopped and the command fails, naming the checks.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.operations import stack


class Command(BaseCommand):
    help = "Run the production stack here: gunicorn (web), a Celery worker and Celery beat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument(
            "--worker-concurrency",
            type=int,
            default=int(os.environ.get("RUNLEDGER_WORKER_CONCURRENCY", "4")),
        )
        parser.add_argument("--ready-seconds", type=float, default=120.0)
        parser.add_argument("--no-migrate", action="store_true", help="skip `migrate`")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["no_migrate"]:
            call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": self._metrics_dir()}
        bind = f"{options['host']}:{options['port']}"
        children = stack.start(
            {
                "web": [
                    *[sys.executable, "-m", "gunicorn", "-c", "python:runs.gunicorn_conf"],
                    *["--bind", bind],
                ],
                "worker": stack.worker_command(
                    name=f"runledger-{os.getpid()}@%h", concurrency=options["worker_concurrency"]
                ),
                "beat": stack.beat_command(),
            },
            env,
        )
        self.stdout.write(" ".join(f"{name} pid {c.pid}" for name, c in children.items()))
        try:
            self._wait_ready(f"http://{bind}/readyz", children, options["ready_seconds"])
            # Without the web there is nothing to serve; a worker or beat that stops is reported
            # by /readyz (the sweep goes late) and left to the machine's supervisor.
            stack.wait_for_signal(children, say=self.stderr.write, essential=["web"])
        finally:
            stack.stop(
                children, grace_seconds=float(os.environ.get("RUNLEDGER_STOP_SECONDS", "30"))
            )
            self.stdout.write("runledger stack stopped")

    def _metrics_dir(self) -> str:
        """Prometheus's multiprocess files: emptied at each start (the dead processes' counts
        would otherwise be added to the new ones')."""
        path = Path(
            os.environ.get("PROMETHEUS_MULTIPROC_DIR") or Path(settings.VAR_DIR) / "prometheus"
        )
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return str(path)

    def _wait_ready(self, url: str, children: stack.Children, seconds: float) -> None:
        try:
            body = stack.wait_until_served(url, children, seconds)
        except stack.NotServing as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"runledger stack ready: {url[:-7]}/"))
        self.stdout.write(json.dumps(body["checks"]))
