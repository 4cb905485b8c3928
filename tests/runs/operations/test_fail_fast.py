"""Web, worker and beat refuse to start by accident: with DEBUG off on the embedded defaults
(the SQLite ledger, the filesystem broker) unless ``RUNLEDGER_ALLOW_EMBEDDED`` says so, and on
an unmigrated database at all; each in one line and an exit. ``runledger worker`` says which
of its two processes ended it, and how."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import wait_for

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
PY = sys.executable
COMMANDS = {
    "web": [PY, "-m", "gunicorn", "-c", "python:runs.gunicorn_conf", "--bind", "127.0.0.1:0"],
    "worker": [PY, "-m", "runs.cli", "worker", "-c", "1"],
    "celery worker": [PY, "-m", "celery", "-A", "runs", "worker", "-c", "1"],
    "beat": [PY, "-m", "runs.cli", "beat"],
}


def _env(var: Path, **extra: str) -> dict[str, str]:
    """A deployment's environment with nothing set but a var dir: the embedded defaults."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNLEDGER_", "CELERY_", "DJANGO_"))
        and k not in ("DATABASE_URL", "DEBUG", "PYTHONPATH")
    }
    return {**keep, "PYTHONPATH": str(ROOT), "RUNLEDGER_VAR_DIR": str(var), **extra}


def _run(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A var dir whose SQLite ledger is migrated."""
    var = tmp_path_factory.mktemp("var")
    done = _run([PY, str(ROOT / "manage.py"), "migrate", "-v0"], _env(var), var)
    assert done.returncode == 0, done.stderr
    return var


@pytest.mark.parametrize("process", sorted(COMMANDS))
def test_a_process_refuses_the_embedded_defaults_with_debug_off(
    process: str, tmp_path: Path
) -> None:
    done = _run(COMMANDS[process], _env(tmp_path), tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "refusing to start" in line]
    assert len(lines) == 1, done.stderr
    assert "SQLite" in lines[0] and "filesystem" in lines[0], lines
    assert "RUNLEDGER_ALLOW_EMBEDDED=1" in lines[0]


@pytest.mark.parametrize("process", sorted(COMMANDS))
def test_a_process_refuses_an_unmigrated_database_in_one_line(process: str, tmp_path: Path) -> None:
    done = _run(COMMANDS[process], _env(tmp_path, RUNLEDGER_ALLOW_EMBEDDED="1"), tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    [line] = [line for line in done.stderr.splitlines() if "not migrated" in line]
    assert line.startswith(f"runledger {process.split()[-1]}: the database is not migrated (")
    assert line.endswith("run `runledger migrate` first.")


def test_beat_starts_on_the_embedded_defaults_when_allowed(migrated: Path, tmp_path: Path) -> None:
    log = tmp_path / "beat.log"
    env = _env(migrated, RUNLEDGER_ALLOW_EMBEDDED="1", RUNLEDGER_LOG_FORMAT="plain")
    command = [*COMMANDS["beat"], "-s", str(tmp_path / "schedule"), "-l", "info"]
    with log.open("wb") as out:
        beat = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=out, stderr=out)
    try:
        assert wait_for(lambda: "beat: Starting" in log.read_text(), timeout=120), log.read_text()
        assert beat.poll() is None
    finally:
        beat.terminate()
        beat.wait(timeout=60)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize(("role", "said"), [("runs", "the runs' pool"), ("control", "control")])
def test_runledger_worker_says_which_process_ended_it_and_how(
    role: str, said: str, migrated: Path, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = _env(migrated, RUNLEDGER_ALLOW_EMBEDDED="1", RUNLEDGER_LOG_FORMAT="plain")
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*COMMANDS["worker"], "-l", "info", "--without-mingle", "--without-gossip"],
            env=env, cwd=tmp_path, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    try:
        assert wait_for(lambda: log.read_text().count(" ready.") >= 2, timeout=180), log.read_text()
        [child] = [p for p in _children(worker.pid) if f"--only {role}" in _cmdline(p)]
        os.kill(child, signal.SIGKILL)
        assert worker.wait(timeout=180) != 0
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    text = log.read_text()
    line = next((x for x in text.splitlines() if f"(pid {child})" in x), "")
    assert said in line and "was killed by SIGKILL" in line, text
