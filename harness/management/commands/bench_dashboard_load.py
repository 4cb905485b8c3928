"""``manage.py bench_dashboard_load --clients 20 --seconds 60``: the dashboard under signed-in
clients, through a real gunicorn (``runs.gunicorn_conf``, DEBUG off, JSON access log to a file).

Each client is a thread with its own session: it signs in through the login form (django-axes
and all), then loops over the pages an operator keeps open — the runs list and its htmx refresh,
a filtered list, a run page, the settlement queue — with ``--think`` seconds between requests
(an operator's dashboard polls; it does not hammer), until ``--seconds`` pass. Prints
p50/p95/p99 per page and overall, with the throughput. Run it after ``seed_bulk`` (``make
bench-dashboard-load`` seeds 20,000 runs into a throwaway PostgreSQL first).
"""

from __future__ import annotations

import http.cookiejar
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness.cluster import database_url
from harness.servers import die_with_parent
from ledger.models import Run
from runs.dashboard.roles import user_set_role

PASSWORD = "bench passphrase long enough"
ROOT = Path(__file__).resolve().parents[3]


class Session:
    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str, headers: dict[str, str] | None = None) -> int:
        request = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with self.opener.open(request, timeout=60) as response:
                response.read()
                return int(response.status)
        except urllib.error.HTTPError as exc:
            exc.read()
            return int(exc.code)

    def sign_in(self, username: str) -> None:
        self.get("/accounts/login/")
        token = next(c.value for c in self.jar if c.name == "csrftoken")
        data = urllib.parse.urlencode(
            {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token}
        ).encode()
        request = urllib.request.Request(
            self.base + "/accounts/login/", data=data, headers={"Referer": self.base + "/"}
        )
        with self.opener.open(request, timeout=60) as response:
            if "Sign out" not in response.read().decode():
                raise CommandError(f"{username} could not sign in")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status) == 200
    except OSError:
        return False


class Command(BaseCommand):
    help = "Signed-in clients on the dashboard through a real gunicorn; p50/p95/p99 per page."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--clients",
            default="20",
            help="clients, or comma-separated counts run one after another (`1,20`: the first "
            "gives the pages' own time, the second what 20 clients wait)",
        )
        parser.add_argument("--seconds", type=float, default=60.0)
        parser.add_argument("--think", type=float, default=1.0, help="seconds between requests")
        parser.add_argument("--web-concurrency", type=int, default=2)

    def handle(self, *args: Any, **options: Any) -> None:
        runs = list(Run.objects.order_by("-created_at").values_list("pk", flat=True)[:2000])
        if not runs:
            raise CommandError("no runs: run seed_bulk first")
        total = Run.objects.count()
        phases = [int(n) for n in str(options["clients"]).split(",")]
        names = [f"bench-{i:02d}" for i in range(max(phases))]
        for name in names:
            user, _ = User.objects.get_or_create(username=name)
            user.set_password(PASSWORD)
            user.save()
            user_set_role(user=user, role="operator")
        with tempfile.TemporaryDirectory() as tmp:
            port, web = self._gunicorn(Path(tmp), options["web_concurrency"])
            try:
                for clients in phases:
                    load = os.getloadavg()[0]
                    timings = self._load(f"http://127.0.0.1:{port}", names[:clients], runs, options)
                    self._report(timings, total, clients, load, options)
            finally:
                web.terminate()
                web.wait(timeout=60)

    def _gunicorn(self, tmp: Path, concurrency: int) -> tuple[int, subprocess.Popen[bytes]]:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")},
            "DJANGO_SETTINGS_MODULE": "runs.settings",
            "DATABASE_URL": database_url(),
            "DEBUG": "0",
            "RUNLEDGER_ALLOW_EMBEDDED": "1",  # the filesystem broker (nothing is sent)
            "RUNLEDGER_PLAIN_HTTP": "1",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1",
            "RUNLEDGER_VAR_DIR": str(tmp),
            "WEB_CONCURRENCY": str(concurrency),
        }
        log = (tmp / "gunicorn.log").open("wb")
        command = [sys.executable, "-m", "gunicorn", "-c", "python:runs.gunicorn_conf"]
        web = subprocess.Popen(
            [*command, "--bind", f"127.0.0.1:{port}"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 120
        while not _answers(f"http://127.0.0.1:{port}/healthz"):
            if web.poll() is not None or time.monotonic() > deadline:
                raise CommandError((tmp / "gunicorn.log").read_text()[-3000:])
            time.sleep(0.5)  # polling a condition: the server answers
        return port, web

    def _load(
        self, base: str, names: list[str], runs: list[str], options: dict[str, Any]
    ) -> dict[str, list[float]]:
        timings: dict[str, list[float]] = defaultdict(list)
        errors: list[str] = []
        lock = threading.Lock()
        stop_at = time.monotonic() + options["seconds"]
        htmx = {"HX-Request": "true", "HX-Target": "run-table"}

        def client(index: int, name: str) -> None:
            rng = random.Random(index)
            session = Session(base)
            session.sign_in(name)
            pages = [
                ("runs list", lambda: "/", None),
                ("runs list, htmx refresh", lambda: "/", htmx),
                (
                    "needs attention, oldest first",
                    lambda: "/?status=needs_attention&order=oldest",
                    None,
                ),
                ("run page", lambda: f"/runs/{rng.choice(runs)}/", None),
                ("settlement queue", lambda: "/settlements/", None),
            ]
            time.sleep(rng.uniform(0, options["think"]))  # the clients do not start in step
            while time.monotonic() < stop_at:
                page, path, headers = rng.choice(pages)
                t0 = time.perf_counter()
                status = session.get(path(), headers)
                elapsed = (time.perf_counter() - t0) * 1000
                with lock:
                    if status >= 400:
                        errors.append(f"{page}: {status}")
                    timings[page].append(elapsed)
                time.sleep(options["think"])

        threads = [threading.Thread(target=client, args=(i, n)) for i, n in enumerate(names)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise CommandError(f"{len(errors)} requests failed, e.g. {errors[:5]}")
        return timings

    def _report(
        self,
        timings: dict[str, list[float]],
        total: int,
        clients: int,
        load: float,
        options: dict[str, Any],
    ) -> None:
        everything = [t for values in timings.values() for t in values]
        self.stdout.write(
            f"\n{clients} signed-in clients, {total} runs, {options['seconds']:.0f} s, "
            f"think {options['think']} s, gunicorn x{options['web_concurrency']}: "
            f"{len(everything)} requests, {len(everything) / options['seconds']:.1f} req/s "
            f"(machine load average {load:.1f} at the start, {os.cpu_count()} cores)"
        )
        self.stdout.write(f"{'page':<32} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
        for page, values in [*sorted(timings.items()), ("all pages", everything)]:
            # One sample (a page so slow that a client reached it once) is its own quantiles.
            q = (
                statistics.quantiles(values, n=100, method="inclusive")
                if len(values) > 1
                else values * 99
            )
            self.stdout.write(
                f"{page:<32} {len(values):>6} {q[49]:>8.1f} {q[94]:>8.1f} {q[98]:>8.1f}"
            )
