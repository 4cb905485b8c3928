"""What a test run starts ends when the test run is killed: the command ``with_postgres.py``
runs and its throwaway PostgreSQL (a watchdog stops the detached server and removes its files),
and a child started with ``die_with_parent`` (the harness's workers, beat, gunicorn, Redis)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.servers import postgres_bindir
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.sqlite_ok,
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux: reads /proc"),
]

ROOT = Path(__file__).resolve().parents[2]
PAUSE = (
    "import os, signal; print('child', os.getpid(), os.environ['DATABASE_URL'], flush=True); "
    "signal.pause()"
)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _line(proc: subprocess.Popen[str], first: str) -> list[str]:
    """The words after ``first`` on the first line of the process's output that starts so."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(first + " "):
            return line.split()[1:]
    raise AssertionError(f"no line starting {first!r}")


@pytest.mark.skipif(postgres_bindir() is None, reason="no PostgreSQL binaries")
def test_a_killed_with_postgres_ends_its_command_and_its_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    runner = subprocess.Popen(
        [sys.executable, str(ROOT / "harness" / "with_postgres.py"), sys.executable, "-c", PAUSE],
        env=env, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        [pid, url] = _line(runner, "child")
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert _answers(port) and _alive(int(pid))
        tmp = Path(tempfile.gettempdir())
        [cluster] = [p.parent for p in tmp.glob(f"runledger-pg-*/.s.PGSQL.{port}")]
        runner.kill()  # SIGKILL: no finally of its own runs
        runner.wait()
        assert wait_for(lambda: not _alive(int(pid)), timeout=120), (
            f"the command outlived it ({cluster})"
        )
        assert wait_for(lambda: not _answers(port), timeout=120), "PostgreSQL outlived it"
        assert wait_for(lambda: not cluster.exists(), timeout=120), "its files were left"
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)


PARENT = """
import subprocess, sys
from harness.servers import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"],
                         preexec_fn=die_with_parent, start_new_session=True)
print('child', child.pid, flush=True)
child.wait()
"""


def test_a_child_started_to_die_with_its_parent_does(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    [pid] = _line(parent, "child")
    assert _alive(int(pid))
    parent.kill()
    parent.wait()
    try:
        assert wait_for(lambda: not _alive(int(pid)), timeout=60), "the child outlived its parent"
    finally:
        if _alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)
