"""`make demo`'s set-up end to end, as a newcomer meets it: no DATABASE_URL, no broker server.

Runs the real demo command (SQLite file, filesystem broker, a real Celery worker and beat, the
web server) in a temporary directory, signs in over HTTP and checks that the runs list shows
every scenario with the status the engine gave it (among them a run waiting for an event and one
asking a person, its question on its page); then stops it with Ctrl-C.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runs.cli import EQUIPMENT_ENV  # the harness's commands, and the examples

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "charge-lookup-down": ("needs_attention", "reconciliation"),
    "notify-no-read-path": ("needs_attention", "reconciliation"),
    "gateway-charge-unknown": ("needs_attention", "reconciliation"),
    "gateway-charge-never-sent": ("needs_attention", "reconciliation"),
    "stale-after-prompt-change": ("needs_attention", "stale"),
    "plan-divergence": ("needs_attention", "divergence"),
    "budget-used": ("needs_attention", "budget"),
    "recovered-before-charge": ("succeeded", ""),
    "recovered-after-email": ("succeeded", ""),
    "pydantic-ai-refund-recovered": ("succeeded", ""),
    "asking-a-person": ("needs_attention", "question"),
    "payout-waiting-at-its-gate": ("needs_attention", "approval"),
}
ROW = re.compile(
    r'<a class="[^"]*" href="/runs/(?P<run>[^/]+)/">(?P<title>[^<]*)</a>'
    r'(?:\s*<div class="mono small muted">[^<]*</div>)?</td>\s*<td>[^<]*</td>\s*<td>\s*'
    r'<span class="badge st-[^"]*">(?P<status>[^<]*)</span>\s*'
    r'(?:<span class="badge reason">(?P<reason>[^<]*)</span>)?'
)

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """Just enough of a browser: cookies, CSRF, forms."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=30) as response:
            return str(response.read().decode())

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


def _wait_for(process: subprocess.Popen[str], needle: str, seconds: float) -> str:
    """Read the demo's output until ``needle`` appears; return all of it."""
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            if process.poll() is not None:
                break
            continue
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"{needle!r} never appeared; the demo printed:\n{''.join(seen)}")


def _reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class SetUp:
    """A demo set up once on PostgreSQL (``demo --setup-only``), kept as a template database:
    each broker's test serves a fresh copy of it, as if it had just been set up."""

    admin_url: str
    template: str
    var_dir: Path
    receiver_port: int
    printed: str
    copies: list[str] = field(default_factory=list)

    def copy(self, tmp_path: Path) -> tuple[str, Path]:
        """(DATABASE_URL, RUNLEDGER_VAR_DIR) of a copy that only this test uses."""
        import psycopg

        name = f"{self.template}_{len(self.copies)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        self.copies.append(name)
        var = tmp_path / "var"
        shutil.copytree(self.var_dir, var)
        return self.admin_url.rsplit("/", 1)[0] + "/" + name, var


@pytest.fixture(scope="module")
def demo_set_up_on_postgresql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SetUp]:
    """The demo's set-up (users, the stuck runs produced by killed processes: most of its time)
    done once on a fresh database of the suite's PostgreSQL server; dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        pytest.skip("no PostgreSQL server (DATABASE_URL) to run the demo against")
    import psycopg

    name = f"runledger_demo_{os.getpid()}"
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    var = tmp_path_factory.mktemp("demo-set-up")
    env = _demo_env({**os.environ, "DATABASE_URL": url.rsplit("/", 1)[0] + "/" + name}, var)
    # What the set-up sends goes to the filesystem broker in its folder, which no worker reads:
    # each copy's demo sends its queued runs again on its own broker (demo._enqueue_queued).
    env.pop("CELERY_BROKER_URL", None)
    # The receiver's port is in the set-up (the completion events' subscription): every copy
    # serves its receiver there.
    receiver_port = _free_port()
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    setup_only = ["demo", "--setup-only", "--receiver-port", str(receiver_port)]
    done = subprocess.run(
        [sys.executable, "manage.py", *setup_only],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    setup = SetUp(admin_url, name, var, receiver_port, done.stdout)
    try:
        yield setup
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for db in [*setup.copies, name]:
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def test_the_demo_sets_up_real_stuck_runs_and_serves_them(tmp_path: Path) -> None:
    """On the embedded defaults: no DATABASE_URL, no broker server."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    _run_demo(tmp_path, env)


@pytest.mark.parametrize(
    ("broker", "port"),
    [("redis://127.0.0.1:6379/15", 6379), ("amqp://guest:guest@127.0.0.1:5672//", 5672)],
    ids=["redis", "rabbitmq"],
)
def test_the_same_demo_runs_on_postgresql_and_a_broker_server(
    tmp_path: Path, demo_set_up_on_postgresql: SetUp, broker: str, port: int
) -> None:
    """The production parts, chosen by environment variables only: the demo set up on
    PostgreSQL (once for both brokers: a copy each), then served with its worker and beat on
    the broker server — the runs it queues, its beat's notifications, its own long run all go
    through that broker."""
    if not _reachable(port):
        pytest.skip(f"no broker listening on {port}")
    setup = demo_set_up_on_postgresql
    database, var = setup.copy(tmp_path)
    env = {**os.environ, "DATABASE_URL": database, "CELERY_BROKER_URL": broker}
    queue = env["RUNLEDGER_QUEUE"] = f"runledger-demo-test-{os.getpid()}"  # a queue of its own
    try:
        _run_demo(tmp_path, env, var_dir=var, set_up=setup)
    finally:
        from kombu import Connection

        with Connection(broker) as connection:  # leave the broker as we found it
            connection.default_channel.queue_delete(queue)


def _demo_env(env: dict[str, str], var_dir: Path) -> dict[str, str]:
    env.pop("RUNLEDGER_NOTIFY_WEBHOOK_URL", None)  # the demo's own channel: its receiver
    env.pop("RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS", None)  # the tests' allowance: a newcomer has none
    env.update({**EQUIPMENT_ENV, "RUNLEDGER_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1"})
    return env


def _run_demo(
    tmp_path: Path, env: dict[str, str], *, var_dir: Path | None = None, set_up: SetUp | None = None
) -> None:
    """Serve the demo (after setting it up, unless ``set_up`` did) and check what it shows."""
    port = _free_port()
    receiver_port = set_up.receiver_port if set_up else _free_port()
    env = _demo_env(env, var_dir or tmp_path)
    if set_up is None:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )
    demo = subprocess.Popen(
        [
            sys.executable,
            *("manage.py", "demo", "--port", str(port), "--receiver-port", str(receiver_port)),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        printed = _wait_for(demo, "runledger demo: http://", 300)
        if set_up is not None:
            assert "demo runs exist already: reusing them" in printed
            printed = set_up.printed + printed  # the users and runs it printed then
        # Keep reading what the demo and its children (web server, worker) print, so a full
        # pipe never blocks them on a slow machine; the tail explains a failure.
        later: list[str] = []
        reader = threading.Thread(target=lambda: later.extend(demo.stdout or []), daemon=True)
        reader.start()
        users = dict(
            re.findall(r"^\s+(\w+)\s+(\S+)\s+(?:viewer|operator|approver|admin)\s", printed, re.M)
        )
        assert set(users) == {"viewer", "olivia", "arthur", "admin"}
        runs = dict(
            (key, run_id)
            for run_id, key in re.findall(r"^\s+(run_\w+)\s+([\w-]+)\s", printed, re.M)
        )
        assert set(EXPECTED) <= set(runs)
        browser = Browser(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 120  # the web server starts beside the worker
        while True:
            try:
                browser.get("/accounts/login/")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        page = browser.sign_in("viewer", users["viewer"])
        assert "Sign out" in page or "sign out" in page.lower()
        rows = {m["run"]: (m["status"], m["reason"] or "") for m in ROW.finditer(browser.get("/"))}
        for key, expected in EXPECTED.items():
            assert rows.get(runs[key]) == expected, (key, rows.get(runs[key]))
        # A run waits for an event (released: queued, no worker held) and one asks a person,
        # the question on its page (a viewer reads it; an operator would get the form).
        waiting = browser.get(f"/runs/{runs['waiting-for-an-event']}/")
        assert 'id="run-waiting"' in waiting and "return_received" in waiting
        assert rows.get(runs["waiting-for-an-event"], ("",))[0] == "queued"
        asking = browser.get(f"/runs/{runs['asking-a-person']}/")
        assert 'id="run-question"' in asking and "over the automatic limit" in asking
        assert 'id="run-stream"' in asking  # what the agent emitted before it asked
        # The long run is picked up by the demo's real worker.
        long_run = runs["long-run-in-progress"]
        deadline = time.monotonic() + 120
        while "running" not in browser.get(f"/runs/{long_run}/"):
            if time.monotonic() > deadline:
                raise AssertionError("the demo's worker never started the long run")
            time.sleep(0.5)
        # The demo pages someone: its beat delivers the blocked runs' notifications to its own
        # webhook receiver, which shows what it got; the Notifications page says it was sent.
        received: list[dict[str, object]] = []
        deadline = time.monotonic() + 180
        while not any(e["path"] == "/operators" for e in received):
            if time.monotonic() > deadline:
                raise AssertionError(f"the receiver got no operator notification: {received}")
            time.sleep(1)
            with urllib.request.urlopen(
                f"http://127.0.0.1:{receiver_port}/received.json", timeout=30
            ) as answer:
                received = json.loads(answer.read())
        assert f"http://127.0.0.1:{receiver_port}/" in printed + "".join(later)
        blocked = runs["charge-lookup-down"]
        assert any(blocked in json.dumps(e["body"]) for e in received), received
        shown = browser.get("/notifications/")
        assert "channels: webhook" in shown and 'class="badge delivery-sent"' in shown
        assert "Who was told" in browser.get(f"/runs/{blocked}/")
        with urllib.request.urlopen(f"http://127.0.0.1:{receiver_port}/", timeout=30) as answer:
            assert "What the demo's webhook received" in answer.read().decode()
    finally:
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C, as a person stops it
        try:
            demo.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            raise
    reader.join(timeout=30)
    assert demo.returncode == 0, "".join(later)[-4000:]
