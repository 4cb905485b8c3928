"""An upgrade in place with runs in flight, as docs/platform/install.md (Upgrading) says to do
it: the previous release's wheel (built here from its git tag) serves runs on PostgreSQL with a
real ``runledger worker`` and ``beat``; mid-flight the workers get SIGTERM and drain, and while
they drain the new wheel is installed over the old one in the same virtualenv and ``runledger
migrate`` runs; then the new version's worker and beat start. Every run must finish, with each
effect sent once: one team notification per refund run (the notifier keeps every message: a
duplicate would show), one charge and one email per approved refund, one report per survey.

The previous release is the tag ``v0.1.0``, or its commit where a clone has no tags; a shallow
clone that holds neither skips. Slow (two wheels, a virtualenv with every dependency, real
processes); PostgreSQL only, like a production deployment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from harness.cluster import database_url, wait_for
from tests.support.packaging import ROOT, build_wheel

pytestmark = pytest.mark.slow

PREVIOUS_TAG = "v0.1.0"
PREVIOUS_COMMIT = "f2e163e7255cc97c6d1ca793951db5da0fdb5d06"  # what v0.1.0 tags
SURVEYS = 8
INVOICES = ["inv_1001", "inv_1002", "inv_1003", "inv_1004", "inv_1005", "inv_1006"]
REFUNDS = 8


def _previous_release() -> str:
    for ref in (PREVIOUS_TAG, PREVIOUS_COMMIT):
        found = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"],
            capture_output=True, text=True,
        )  # fmt: skip
        if found.returncode == 0:
            return found.stdout.strip()
    pytest.skip(f"this clone holds neither {PREVIOUS_TAG} nor {PREVIOUS_COMMIT} (shallow?)")


def _pip(venv: Path, *args: str) -> None:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "-q", *args],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the previous release's wheel, this tree's wheel)."""
    commit = _previous_release()
    source = tmp_path_factory.mktemp("previous")
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(source)], stdin=archive.stdout, check=True)
    assert archive.wait() == 0
    old_out = tmp_path_factory.mktemp("old-wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(old_out)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    [old] = old_out.glob("runledger-*.whl")
    new = build_wheel(tmp_path_factory.mktemp("source") / "runledger", tmp_path_factory.mktemp("w"))
    return old, new


@pytest.fixture
def database() -> Iterator[str]:
    """A database of its own on the suite's PostgreSQL server, dropped afterwards."""
    test_db = settings.DATABASES["default"]
    if test_db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("an upgrade is tested on PostgreSQL")
    name = f"runledger_upgrade_{os.getpid()}"
    admin = database_url({**test_db, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield database_url({**test_db, "NAME": name})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Deployment:
    """One virtualenv and the processes it runs, configured as production is (DEBUG off)."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.venv = root, root / "venv"
        self.procs: list[subprocess.Popen[bytes]] = []
        keep = ("PATH", "HOME", "LANG", "TMPDIR", "PGHOST", "PGUSER", "PGPASSWORD")
        self.env = {
            **{k: v for k, v in os.environ.items() if k in keep},
            "DATABASE_URL": url,
            "CELERY_BROKER_URL": "filesystem://localhost//",
            "SECRET_KEY": "an-upgrade-test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
            "RUNLEDGER_VAR_DIR": str(root / "var"),
            "RUNLEDGER_EXAMPLES": "1",
            "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
            "RUNLEDGER_SILENCED_CHECKS": "runledger.E001,runledger.W001",
            "RUNLEDGER_LOG_FORMAT": "plain",
            # The filesystem broker is this test's choice (no broker server needed), said
            # explicitly as a deployment on an embedded default must.
            "RUNLEDGER_ALLOW_EMBEDDED": "1",
            "RUNLEDGER_BROKER_POLL_SECONDS": "0.1",
            "RUNLEDGER_LEASE_SECONDS": "10",
            "RUNLEDGER_SWEEP_SECONDS": "1",
        }
        (root / "var").mkdir(parents=True, exist_ok=True)

    def command(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [str(self.venv / "bin" / "runledger"), *args],
            env=self.env, cwd=self.root, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert done.returncode == 0, (
            f"runledger {args[0]}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        )
        return done.stdout

    def python(self, code: str) -> Any:
        """``code`` run by ``runledger shell``; the JSON of what it prints last."""
        out = self.command("shell", "-c", textwrap.dedent(code))
        return json.loads(out.strip().splitlines()[-1])

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [str(self.venv / "bin" / "runledger"), *args],
            env=self.env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def serve(self, version: str) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
        worker = self.start(f"worker-{version}", "worker", "--concurrency", "2", "-l", "info")
        beat = self.start(f"beat-{version}", "beat", "-l", "info", "--schedule",
                          str(self.root / "var" / f"beat-{version}"))  # fmt: skip
        return worker, beat

    def logs(self) -> str:
        return "\n".join(
            f"== {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            for log in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=60)


STATUSES = """
    import json
    from ledger.models import Run
    print(json.dumps({r.run_id: r.status for r in Run.objects.all()}))
"""


def test_runs_in_flight_survive_an_in_place_upgrade(
    wheels: tuple[Path, Path], database: str, tmp_path: Path
) -> None:
    old, new = wheels
    deployment = Deployment(tmp_path, database)
    subprocess.run([sys.executable, "-m", "venv", str(deployment.venv)], check=True, timeout=300)
    _pip(deployment.venv, "install", str(old))
    deployment.command("migrate", "--noinput", "-v0")
    try:
        worker, beat = deployment.serve("old")
        started = deployment.python(f"""
            import json
            from ledger import api
            ids = [api.start_run("survey", {{"records": 8, "delay_ms": 150}}).run_id
                   for _ in range({SURVEYS})]
            ids += [api.start_run("refund", {{"invoice_id": inv}}).run_id
                    for inv in {(INVOICES * 2)[:REFUNDS]!r}]
            print(json.dumps(ids))
        """)
        assert len(started) == SURVEYS + REFUNDS

        def some_done_some_running() -> bool:
            statuses = list(deployment.python(STATUSES).values())
            return statuses.count("succeeded") >= 3 and statuses.count("running") >= 1

        assert wait_for(some_done_some_running, timeout=240, interval=0.5), deployment.logs()

        # The documented procedure: drain the old workers, and while they drain, install the
        # new release over the old one and migrate.
        worker.send_signal(signal.SIGTERM)
        beat.send_signal(signal.SIGTERM)
        _pip(deployment.venv, "install", "--force-reinstall", "--no-deps", str(new))
        _pip(deployment.venv, "install", str(new))  # the new release's new dependencies
        deployment.command("migrate", "--noinput", "-v0")
        assert worker.wait(timeout=180) is not None and beat.wait(timeout=60) is not None

        deployment.serve("new")

        def all_settled() -> bool:
            statuses = deployment.python(STATUSES)
            return all(s not in ("queued", "running") for s in statuses.values())

        assert wait_for(all_settled, timeout=300, interval=1), deployment.logs()
        report = deployment.python("""
            import json
            from ledger.models import Run
            from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
            runs = list(Run.objects.all())
            print(json.dumps({
                "statuses": sorted({r.status for r in runs}),
                "approved": sum(1 for r in runs if (r.result or {}).get("refunded") is True),
                "notifications": Notification.objects.count(),
                "charges": ProviderCharge.objects.count(),
                "emails": OutboxMessage.objects.count(),
            }))
        """)
        installed = deployment.python(
            "import importlib.metadata, json; "
            "print(json.dumps(importlib.metadata.version('runledger')))"
        )
    finally:
        deployment.stop()
    assert report["statuses"] == ["succeeded"], deployment.logs()
    assert report["notifications"] == REFUNDS  # one per refund run, approved or denied
    assert report["charges"] == report["approved"] > 0
    assert report["emails"] == SURVEYS + report["approved"]
    # The new release is the one installed (the wheel's version: name-version-tags.whl).
    assert installed == new.name.split("-")[1], (installed, new.name)
