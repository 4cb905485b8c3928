"""``manage.py bench_dashboard``: server time and SQL queries of the dashboard's pages.

Requests go through Django's test client in this process (URL routing, middleware, sessions,
permission checks, queries, template rendering: everything but the network), signed in as an
operator. Each page is requested ``--repeat`` times; the median and the query count are printed.
Run it after ``seed_bulk``. Requests are made as HTTPS (``secure=True``): the project's default
settings redirect plain HTTP (``SECURE_SSL_REDIRECT``), and a redirect is not a page. A page that
answers anything but 200/204 stops the benchmark. ``--json`` writes each median as a figure
(``dashboard <page>: <ms> ms``) with its query count, the table sizes and the load average.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from harness.bench.results import merge_json
from ledger.models import Run, Step
from ledger.selectors import run_status_counts
from runs.dashboard.roles import user_set_role


class _HttpsClient(Client):
    """Django's test client making every request over HTTPS, as a deployment serves the
    dashboard: plain HTTP is redirected by default (``SECURE_SSL_REDIRECT``)."""

    def get(self, path: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.setdefault("secure", True)
        return super().get(path, *args, **kwargs)


class Command(BaseCommand):
    help = "Time the runs list and a long run's pages; print server time and SQL query counts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repeat", type=int, default=7)
        parser.add_argument(
            "--run", default="", help="the long run (default: the one with most steps)"
        )
        parser.add_argument("--json", default="", help="write the figures to this file")
        parser.add_argument(
            "--label", default="", help="the figures' vendor key (default: dashboard_<runs>)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        client = _HttpsClient()
        user, _ = User.objects.get_or_create(username="bench-operator")
        user_set_role(user=user, role="operator")
        client.force_login(user)
        big = options["run"] or self._longest_run()
        small = Step.objects.filter(run_id=big).count()
        other = Run.objects.exclude(pk=big).order_by("-created_at").values_list("pk", flat=True)[0]
        runs, steps = Run.objects.count(), Step.objects.count()
        self.stdout.write(
            f"{runs} runs, {steps} steps; long run {big} has {small} steps; "
            f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} (shared machine: noisy)\n"
        )
        self._figures: dict[str, dict[str, Any]] = {}
        deep = self._deep_cursor(client, pages=20)
        htmx = {"HX-Request": "true", "HX-Target": "run-table"}
        counts = {"HX-Request": "true", "HX-Target": "status-counts"}
        table = client.get("/", headers=htmx).content.decode()
        digest = table.split('data-digest="', 1)[1].split('"', 1)[0]
        compare = f"/runs/{big}/steps/?page=100&compare=1"
        preview = f"/runs/{big}/preview/"
        cases: list[tuple[str, str, dict[str, str]]] = [
            ("list, newest first", "/", {}),
            ("list, needs attention, oldest first", "/?status=needs_attention&order=oldest", {}),
            ("list, reason stale, oldest first", "/?reason=stale&order=oldest", {}),
            ("list, agent survey + succeeded", "/?agent=survey&status=succeeded", {}),
            ("list, in state >= 7d", "/?age=7d", {}),
            ("list, lease expired", "/?status=lease_expired", {}),
            ("list, run id prefix search", "/?q=run_ab", {}),
            ("list, title words search (20 of 100k)", "/?q=for+cus_0042", {}),
            ("list, label search customer:cus_0042", "/?q=customer:cus_0042", {}),
            ("list, words any order: inv_000042 REFUND", "/?q=inv_000042+REFUND", {}),
            ("list, words: cus_0042 refund", "/?q=cus_0042+refund", {}),
            ("list, run id without run_", f"/?q={other[4:]}", {}),
            ("list, part of a run id", f"/?q={other[8:18]}", {}),
            ("list, effect step id + title word", "/?q=s1.refund_charge+cus_0042", {}),
            ("list, error words: gave up", "/?q=gave+up", {}),
            ("list, 21st page (keyset)", f"/?{deep}", {}),
            ("status counts (htmx poll)", "/", counts),
            ("list table refresh (htmx), changed", "/", htmx),
            ("list table refresh (htmx), unchanged: 204", f"/?digest={digest}", htmx),
            ("run page, short run", f"/runs/{other}/", {}),
            ("run page, long run, page 1", f"/runs/{big}/", {}),
            ("run page, long run, page 100", f"/runs/{big}/?page=100", {}),
            ("steps + hash compare (dry replay), p.100", compare, {}),
            ("resume preview (dry replay), long run", preview, {"HX-Request": "true"}),
            ("ledger.json download, long run", f"/runs/{big}/ledger.json?download=1", {}),
            ("settlement queue, page 1", "/settlements/", {}),
            ("approval queue, page 1", "/approvals/", {}),
            ("settle page (evidence, forms)", self._settle_url(), {}),
            ("audit, newest", "/audit/", {}),
            ("audit, one actor + action", "/audit/?actor=amy&action=run_resume", {}),
            ("audit, one run", f"/audit/?run={other}", {}),
            ("audit, run by part of an id", f"/audit/?run={other[4:14]}", {}),
            ("audit, run by title words", "/audit/?run=cus_0042+refund", {}),
            ("audit, 21st page (keyset)", f"/audit/?{self._deep_audit(client, 20)}", {}),
            ("trends, last 24h (hourly rollup)", "/trends/", {}),
            ("trends, last 7d (hourly rollup)", "/trends/?window=7d", {}),
        ]  # fmt: skip
        self.stdout.write(
            f"{'page':<44} {'median ms':>10} {'max ms':>8} {'sql ms':>7} {'cpu ms':>7} "
            f"{'queries':>8} {'bytes':>10}"
        )
        for name, url, headers in cases:
            self._measure(client, name, url, headers, options["repeat"])
        self._counts(options["repeat"])
        load = os.getloadavg()[0]
        for name, fig in self._figures.items():
            cpu = f", {fig['cpu_ms']:.1f} ms cpu" if "cpu_ms" in fig else ""
            self.stdout.write(
                f"dashboard {name}: {fig['value']:.1f} ms  # {fig['queries']} queries{cpu}"
            )
        self.stdout.write(f"# load average at the end: {load:.2f}")
        if options["json"]:
            label = options["label"] or f"dashboard_{runs}"
            self._figures["runs"] = {"value": runs, "unit": "runs"}
            self._figures["steps"] = {"value": steps, "unit": "steps"}
            self._figures["load average"] = {"value": load, "unit": "load"}
            merge_json(Path(options["json"]), label, self._figures)
            self.stdout.write(f"# written to {options['json']} under {label!r}")

    def _counts(self, repeat: int) -> None:
        """The status counts alone, as kept (triggers' totals plus unfolded deltas) and as the
        GROUP BY over ``ledger_run`` they replace, with the lease-expiry range count."""
        now = timezone.now()
        cases: list[tuple[str, Any]] = [
            ("status counts selector (kept totals)", lambda: run_status_counts(now=now)),
            ("status counts as GROUP BY ledger_run (before)", lambda: list(
                Run.objects.order_by().values_list("status", "reason").annotate(n=Count("*"))
            )),
        ]  # fmt: skip
        for name, call in cases:
            times = []
            call()
            for _ in range(repeat):
                start = time.perf_counter()
                call()
                times.append((time.perf_counter() - start) * 1000)
            with CaptureQueriesContext(connection) as captured:
                call()
            median = statistics.median(times)
            self.stdout.write(
                f"{name:<44} {median:>10.1f} {max(times):>8.1f} {'':>7} {len(captured):>8}"
            )
            self._figures[name] = {
                "value": round(median, 2),
                "unit": "ms",
                "queries": len(captured),
            }

    def _longest_run(self) -> str:
        row = Step.objects.values("run_id").annotate(n=Count("*")).order_by("-n").first()
        return str(row["run_id"]) if row else ""

    def _settle_url(self) -> str:
        step = Step.objects.filter(status="started", kind="effect").order_by("updated_at").first()
        return f"/runs/{step.run_id}/steps/{step.pk}/settle/" if step else "/settlements/"

    def _deep_audit(self, client: Client, pages: int) -> str:
        """Follow the audit's 'Older' links ``pages`` times; the last query string."""
        query = ""
        for _ in range(pages):
            html = client.get(f"/audit/?{query}").content.decode()
            if 'rel="next"' not in html:
                break
            before = html[: html.index('rel="next"')]
            query = before[before.rindex('href="?') + 7 :].split('"', 1)[0].replace("&amp;", "&")
        return query

    def _deep_cursor(self, client: Client, pages: int) -> str:
        """Follow 'Next page' links ``pages`` times; return the last query string."""
        query = ""
        for _ in range(pages):
            response = client.get(f"/?{query}")
            if response.status_code != 200:
                raise CommandError(f"the runs list answered HTTP {response.status_code}")
            html = response.content.decode()
            marker = 'rel="next"'
            if marker not in html:
                break  # fewer pages than asked: the last one
            before = html[: html.index(marker)]
            href = before[before.rindex('href="') + 6 :]
            query = href[href.index("?") + 1 : href.index('"')].replace("&amp;", "&")
        return query

    def _measure(
        self, client: Client, name: str, url: str, headers: dict[str, str], repeat: int
    ) -> None:
        times, sql, cpu, queries, size = [], [], [], 0, 0
        client.get(url, headers=headers)  # warm caches (templates, plans)
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                start, start_cpu = time.perf_counter(), time.process_time()
                response = client.get(url, headers=headers)
                body = (
                    b"".join(response.streaming_content)  # type: ignore[attr-defined]
                    if response.streaming
                    else response.content
                )
                times.append((time.perf_counter() - start) * 1000)
                cpu.append((time.process_time() - start_cpu) * 1000)
            queries, size = len(captured), len(body)
            sql.append(sum(float(q["time"]) for q in captured.captured_queries) * 1000)
            if response.status_code not in (200, 204):
                raise CommandError(f"{name} ({url}): HTTP {response.status_code}, not a page")
        median = statistics.median(times)
        self.stdout.write(
            f"{name:<44} {median:>10.1f} {max(times):>8.1f} "
            f"{statistics.median(sql):>7.1f} {statistics.median(cpu):>7.1f} {queries:>8} "
            f"{size:>10}"
        )
        self._figures[name] = {
            "value": round(median, 2), "unit": "ms", "queries": queries, "bytes": size,
            "sql_ms": round(statistics.median(sql), 2),
            # This process's CPU (Django, the driver): on a shared machine the wall time
            # also holds the time spent waiting for a core.
            "cpu_ms": round(statistics.median(cpu), 2),
        }  # fmt: skip
