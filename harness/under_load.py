"""Run a command (``make test``) while a CPU hog keeps every core busy, then stop the hog.

``make test-under-load`` uses it to prove the suite does not depend on how fast the machine
is. The hog is ``stress-ng --cpu N`` (installed from Debian with apt-get when missing and
possible), else one Python busy loop per core. It runs in its own process group and is
stopped when the command ends, fails, or this script is interrupted (SIGINT, SIGTERM).

    python harness/under_load.py make test

``RUNLEDGER_HOG=python`` forces the Python loops; ``RUNLEDGER_HOG_CPUS`` sets how many
(default: every core). The exit status is the command's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

BUSY_LOOP = "while True:\n    pass\n"


def stress_ng() -> str | None:
    """stress-ng's path, installing Debian's package when it is missing and we may."""
    found = shutil.which("stress-ng")
    if found or os.environ.get("RUNLEDGER_HOG") == "python":
        return found
    if shutil.which("apt-get") and os.geteuid() == 0:
        print("under_load: installing stress-ng from Debian", flush=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "stress-ng"],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            stdout=subprocess.DEVNULL,
            check=False,
        )
    return shutil.which("stress-ng")


def start_hog(cpus: int) -> list[subprocess.Popen[bytes]]:
    """Processes that keep ``cpus`` cores busy, each leading its own process group."""
    tool = None if os.environ.get("RUNLEDGER_HOG") == "python" else stress_ng()
    if tool:
        print(f"under_load: stress-ng --cpu {cpus}", flush=True)
        return [subprocess.Popen([tool, "--cpu", str(cpus), "--quiet"], start_new_session=True)]
    print(f"under_load: {cpus} Python busy loops", flush=True)
    return [
        subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
        for _ in range(cpus)
    ]


def stop_hog(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each hog's process group (stress-ng reaps its workers), SIGKILL after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        if all(proc.poll() is not None for proc in procs):
            return


@contextlib.contextmanager
def hog(cpus: int) -> Iterator[None]:
    procs = start_hog(cpus)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the finally below

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        stop_hog(procs)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("under_load: hog stopped", flush=True)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cpus = int(os.environ.get("RUNLEDGER_HOG_CPUS") or os.cpu_count() or 2)
    started = time.monotonic()
    with hog(cpus):
        code = subprocess.call(argv)
    minutes, seconds = divmod(int(time.monotonic() - started), 60)
    verdict = "passed" if code == 0 else f"FAILED (exit {code})"
    print(f"under_load: {' '.join(argv)} {verdict} in {minutes}m{seconds:02d}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
