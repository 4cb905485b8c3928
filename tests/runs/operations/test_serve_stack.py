"""The production stack as `manage.py serve` runs it: gunicorn, a Celery worker and beat, on
this suite's PostgreSQL and the Redis on loopback, driven over HTTP like a browser would.

Signs in through gunicorn, fetches a hashed static file with its long cache headers, reads
/readyz green, scrapes /metrics and sees the step counter grow when a run executes, then stops
the worker and sees /readyz warn of the late sweep (and stay ready).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from harness.cluster import database_url
from ledger.models import Run
from tests.support.processes import free_port, redis_reachable, wait_for

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "a long enough passphrase"
METRICS_TOKEN = secrets.token_urlsafe(16)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Web:
    """HTTP with cookies: enough of a browser for a sign-in and a few pages."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.base + path, headers=headers)
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def sign_in(self, username: str, password: str) -> str:
        self.get("/accounts/login/")
        token = next(c.value for c in self.jar if c.name == "csrftoken")
        data = urllib.parse.urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": token}
        ).encode()
        request = urllib.request.Request(
            self.base + "/accounts/login/", data=data, headers={"Referer": self.base + "/"}
        )
        with self.opener.open(request, timeout=30) as response:
            return str(response.read().decode())


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Web, dict[str, str], dict[str, int]]]:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "RUNLEDGER_"))},
        "DJANGO_SETTINGS_MODULE": "runs.settings",
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/11",
        "RUNLEDGER_QUEUE": f"runledger-serve-{uuid.uuid4().hex[:10]}",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "RUNLEDGER_PLAIN_HTTP": "1",  # loopback without TLS; the HTTPS defaults are tested apart
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",  # a deployment names its agents
        "RUNLEDGER_VAR_DIR": str(tmp_path),
        "RUNLEDGER_SWEEP_SECONDS": "0.5",
        "RUNLEDGER_LEASE_SECONDS": "3",
        "RUNLEDGER_READY_SWEEP_LATE_SECONDS": "4",
        "RUNLEDGER_STOP_SECONDS": "10",
        "WEB_CONCURRENCY": "2",
        "RUNLEDGER_METRICS_TOKEN": METRICS_TOKEN,
    }
    log = (tmp_path / "serve.log").open("w+")
    serve = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def output() -> str:
        return (tmp_path / "serve.log").read_text()

    try:
        ready = wait_for(lambda: "stack ready" in output() or serve.poll() is not None, timeout=180)
        assert ready and serve.poll() is None, output()
        pids = {m[0]: int(m[1]) for m in re.findall(r"(web|worker|beat) pid (\d+)", output())}
        yield Web(f"http://127.0.0.1:{port}"), env, pids
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGINT)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
        log.close()


def steps_written(web: Web) -> float:
    status, _, body = web.get("/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
    assert status == 200, body
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.decode().splitlines()
        if line.startswith("runledger_steps_written_total{")
    )


@pytest.mark.skipif(not redis_reachable(), reason="needs Redis on 127.0.0.1:6379")
def test_the_serve_stack_serves_signs_in_counts_steps_and_reports_a_stopped_worker(stack) -> None:
    web, env, pids = stack
    User.objects.create_user(username="pat", password=PASSWORD, is_superuser=True)

    page = web.sign_in("pat", PASSWORD)
    assert "Sign out" in page
    status, headers, _ = web.get("/")
    assert status == 200 and "no-store" in headers["Cache-Control"]
    assert "script-src 'self'" in headers["Content-Security-Policy"]

    css = re.search(r'href="(/static/runs/dashboard\.[0-9a-f]{12}\.css)"', page)
    assert css, "the page links the hashed stylesheet"
    status, headers, body = web.get(css.group(1), **{"Accept-Encoding": "gzip"})
    assert status == 200
    assert (
        "max-age=315360000" in headers["Cache-Control"] and "immutable" in headers["Cache-Control"]
    )
    assert headers.get("Content-Encoding") == "gzip" and body[:2] == b"\x1f\x8b"

    status, _, body = web.get("/readyz")
    assert status == 200, body
    assert json.loads(body)["status"] == "ok"

    before = steps_written(web)
    started = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "start_run",
            "survey",
            "--inputs",
            '{"records": 3}',
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    run_id = re.search(r"run_\w+", started.stdout).group(0)  # type: ignore[union-attr]
    done = wait_for(lambda: Run.objects.filter(pk=run_id, status="succeeded").exists(), timeout=120)
    assert done, Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    assert steps_written(web) >= before + 3

    os.killpg(pids["worker"], signal.SIGTERM)  # the worker stops; beat's sweeps go unanswered

    def sweep_reported() -> dict[str, object] | None:
        status, _, body = web.get("/readyz")
        checks = json.loads(body)["checks"]
        # Reported, but the web stays ready: a late sweep is no reason to pull a web node.
        return checks if status == 200 and "warning" in checks["sweep"] else None

    checks = wait_for(sweep_reported, timeout=90)
    assert checks, web.get("/readyz")
    assert checks["database"]["ok"] and checks["broker"]["ok"]  # type: ignore[index]
