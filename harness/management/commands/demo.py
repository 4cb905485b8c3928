"""`make demo`: the first ten minutes of a newcomer.

Sets up the demo once (users for each role, real stuck runs produced by crashing processes),
then runs the web server, a Celery worker and Celery beat on the embedded defaults until Ctrl-C.
Running it again reuses the data.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from harness import demo_scenarios as scenarios
from harness.unannounced import start_unannounced
from ledger.models import Run, WebhookSubscription
from ledger.transitions.events import subscribe
from runs.operations import stack

DEMO_USERS = (
    ("viewer", "viewer", "reads runs and ledgers"),
    ("olivia", "operator", "resumes, cancels, proposes settlements"),
    ("arthur", "approver", "approves settlements"),
    ("admin", "admin", "everything, and the Django admin"),
)
ALLOW = "RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS"
LONG_RUN = {
    "records": 400,
    "delay_ms": 1500,
    "story": "A long survey that reads 400 records slowly; it is still in progress. Its worker "
    "renews its lease with a heartbeat while it runs.",
}


class Command(BaseCommand):
    help = "Set up the demo (once) and run the dashboard, a worker and beat until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--setup-only", action="store_true", help="set up, then exit")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument(
            "--receiver-port",
            type=int,
            default=0,
            help="the demo's webhook receiver (default: the web port + 1)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        receiver_port = options["receiver_port"] or options["port"] + 1
        self._channel(receiver_port)
        self._users()
        self._scenarios()
        if options["setup_only"]:
            return
        self._serve(options["host"], options["port"], started, receiver_port)

    # --- set-up -----------------------------------------------------------------------------

    def _users(self) -> None:
        created = []
        for username, role, what in DEMO_USERS:
            if User.objects.filter(username=username).exists():
                continue
            password = secrets.token_urlsafe(9)
            with transaction.atomic():
                user = User.objects.create_user(username=username, password=password)
                if role == "admin":
                    user.is_staff = user.is_superuser = True
                    user.save()
                else:
                    user.groups.add(Group.objects.get(name=role))
            created.append((username, role, password, what))
        if not created:
            self.stdout.write("demo users exist already (their passwords were printed once;")
            self.stdout.write(f"  see {self._credentials_file()} or `manage.py changepassword`)")
            return
        lines = [f"  {u:<8} {p:<14} {r:<9} {w}" for u, r, p, w in created]
        self.stdout.write(self.style.SUCCESS("demo users (printed once):"))
        self.stdout.write("  user     password       role      can")
        self.stdout.write("\n".join(lines))
        path = self._credentials_file()
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)

    def _channel(self, port: int) -> None:
        """The notification channel of the demo: a webhook to its own receiver on loopback
        (unless RUNLEDGER_NOTIFY_WEBHOOK_URL names another), and the refund agent's completion
        events subscribed to it, so the Notifications page and "who was told" have content.
        Set before the scenarios run: their blocks write the notifications. The receiver is
        on loopback, which the webhook policy refuses unless allowed: the demo allows
        127.0.0.1 (here and in the processes it starts, which inherit the environment)."""
        base = f"http://127.0.0.1:{port}"
        allowed = [n for n in os.environ.get(ALLOW, "").split(",") if n.strip()]
        if "127.0.0.1" not in allowed:
            os.environ[ALLOW] = ",".join([*allowed, "127.0.0.1"])
        setattr(settings, ALLOW, os.environ[ALLOW].split(","))
        os.environ.setdefault("RUNLEDGER_NOTIFY_WEBHOOK_URL", f"{base}/operators")
        settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = os.environ["RUNLEDGER_NOTIFY_WEBHOOK_URL"]
        url = f"{base}/events"
        if not WebhookSubscription.objects.filter(url=url, removed_at__isnull=True).exists():
            subscribe(url, agent="refund", description="the demo's receiver", by="demo")
        self._receiver = base

    def _credentials_file(self) -> Path:
        return Path(settings.VAR_DIR) / "demo-credentials.txt"

    def _scenarios(self) -> None:
        if Run.objects.filter(inputs__has_key="story").exists():
            self.stdout.write("demo runs exist already: reusing them")
            return
        self.stdout.write("producing the demo's runs for real (each crash is a killed process):")
        for scenario in scenarios.SCENARIOS:
            run = scenarios.produce(scenario)
            state = run.status + (f" ({run.reason})" if run.reason else "")
            self.stdout.write(f"  {run.run_id}  {scenario.key:<28} {state}")
        long_run = start_unannounced(agent="survey", inputs=LONG_RUN)
        self.stdout.write(
            f"  {long_run.run_id}  {'long-run-in-progress':<28} queued for the worker"
        )

    # --- serving ----------------------------------------------------------------------------

    def _serve(self, host: str, port: int, started: float, receiver_port: int) -> None:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        receiver = Path(settings.BASE_DIR) / "harness" / "demo_receiver.py"
        received = Path(settings.VAR_DIR) / "demo-received.jsonl"
        commands = {
            "receiver": [
                sys.executable,
                str(receiver),
                "--port",
                str(receiver_port),
                "--log",
                str(received),
            ],
            "web": [
                sys.executable,
                manage,
                "runserver",
                f"{host}:{port}",
                "--noreload",
                "--insecure",
            ],
            "worker": stack.worker_command(
                name=f"demo-worker-{os.getpid()}@%h", concurrency=2, loglevel="WARNING"
            ),
            "beat": stack.beat_command(loglevel="WARNING"),
        }
        # The demo is plain HTTP on loopback, for people: no HTTPS redirect, readable logs.
        env = {"RUNLEDGER_PLAIN_HTTP": "1", "RUNLEDGER_LOG_FORMAT": "plain", **os.environ}
        # The dashboard and the worker know the framework agent of its scenario too.
        modules = [m for m in env.get("RUNLEDGER_AGENT_MODULES", "").split(",") if m]
        for module in scenarios.FRAMEWORK_MODULES.split(","):
            if module not in modules:
                modules.append(module)
        env["RUNLEDGER_AGENT_MODULES"] = ",".join(modules)
        children = stack.start(commands, env)
        self._enqueue_queued()
        url = f"http://{host}:{port}/"
        try:
            # "ready" when the web server answers, not when it was started: a click on the URL
            # in the first second or two got "connection refused".
            stack.wait_until_served(f"{url}healthz", children, seconds=120)
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nrunledger demo: {url}  "
                    f"(ready in {time.monotonic() - started:.0f} s; Ctrl-C stops it)"
                )
            )
            self.stdout.write(
                f"notifications go to the demo's webhook receiver: what it received is at "
                f"{self._receiver}/ (and in {received})"
            )
            stack.wait_for_signal(children, say=self.stderr.write)
        except stack.NotServing as exc:
            raise CommandError(f"the demo did not start: {exc}") from exc
        finally:
            self._stop(children)

    def _enqueue_queued(self) -> None:
        """Once the worker runs: the queued runs (the long run, and any a previous demo left)."""
        from runs.operations.tasks import send_start

        for run_id in Run.objects.filter(status="queued").values_list("run_id", flat=True):
            send_start(run_id)

    def _stop(self, children: stack.Children) -> None:
        """SIGTERM everything; what still runs after a few seconds is killed.

        The worker's warm shutdown would wait for the long run to finish; it is killed instead,
        and its run is recovered from the ledger by the next start's sweep, as after any crash.
        """
        stack.stop(children, grace_seconds=5)
        self.stdout.write("demo stopped; its data stays in " + str(settings.VAR_DIR))
