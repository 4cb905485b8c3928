"""The ``runledger`` command: every management command with the project's settings, from any
directory, and Celery's worker and beat.

    runledger start_run refund '{"invoice_id": "inv_1002"}'
    runledger worker --concurrency 8        # the runs' pool (8) and the control process
    runledger worker --runs-in-flight 500   # one process holding up to 500 runs, on threads
    runledger worker --only runs -c 8       # celery -A runs worker -Q <runs queue> -c 8
    runledger worker --only control         # the sweep and notifications only
    runledger beat                          # celery -A runs beat (exactly one)
    runledger --help                        # runledger's commands, apart from Django's

``manage.py`` keeps working and is the same thing. The development equipment's commands
(``demo``, ``killtest``, ``soak``, ``bench_*``, ``seed_bulk``, ``example_execute``) run from a
source checkout, where ``harness/`` is: ``runledger demo`` installs the equipment and the example
agents for that one process, as ``make demo`` does. They are not in the wheel.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

CELERY = ("worker", "beat")
EQUIPMENT_ENV = {
    "RUNLEDGER_HARNESS": "1",
    "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
    "RUNLEDGER_SILENCED_CHECKS": "runledger.E001,runledger.W001",
}


def equipment_commands() -> set[str]:
    """The commands of the development equipment, if this checkout has it (found on disk, not
    imported: importing ``harness`` would install its fault hook)."""
    checkout = Path(__file__).resolve().parent.parent  # beside runs/ in a source checkout
    if importlib.util.find_spec("harness") is None and (checkout / "harness").is_dir():
        sys.path.append(str(checkout))
    spec = importlib.util.find_spec("harness")
    if spec is None or not spec.submodule_search_locations:
        return set()
    folder = Path(next(iter(spec.submodule_search_locations))) / "management" / "commands"
    return {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
    name = args[0] if args else "help"
    if name == "worker":
        sys.exit(worker(args[1:]))
    if name in CELERY:
        from runs.celery import app

        app.start([name, *args[1:]])
        return
    if name in equipment_commands() and os.environ.get("RUNLEDGER_HARNESS") != "1":
        for key, value in EQUIPMENT_ENV.items():
            os.environ.setdefault(key, value)
        os.environ["RUNLEDGER_HARNESS"] = "1"
    if name in ("help", "-h", "--help") and len(args) <= 1:
        print_help()
        return
    from django.core.management import execute_from_command_line

    execute_from_command_line(["runledger", *args])


def worker(args: list[str]) -> int:
    """``runledger worker``: two Celery workers under one command, so that recovery never waits
    behind runs — the runs' pool (``RUNLEDGER_QUEUE`` and ``RUNLEDGER_RECOVERED_QUEUE``, the
    Celery options given) and a control
    process (``RUNLEDGER_CONTROL_QUEUE``: the sweep and notification delivery, two threads).
    ``--only runs`` or ``--only control`` starts one of them in this process; a ``-Q`` of one's
    own is passed to Celery as it is (then the control queue needs a worker of its own).
    SIGTERM and SIGQUIT are passed on to both (they share this command's process group); when
    either exits the other is stopped, and the command exits with the first one's code (the
    supervisor restarts the whole)."""
    only, rest = _take_only(args)
    rest = _runs_in_flight(rest)
    if only is None and any(
        a in ("-Q", "--queues", "-h", "--help") or a.startswith("--queues=") for a in rest
    ):
        only = "as given"  # Celery's own: its help, or queues of one's choosing
    if only is not None:
        from django.conf import settings

        from runs.celery import app

        queues: list[str] = []
        if only == "runs":
            mine = [settings.CELERY_TASK_DEFAULT_QUEUE, settings.RUNLEDGER_RECOVERED_QUEUE]
            queues = ["-Q", ",".join(mine)]
        elif only == "control":
            queues = ["-Q", settings.RUNLEDGER_CONTROL_QUEUE, "-P", "threads", "-c", "2"]
        app.start(["worker", *queues, *rest])
        return 0
    return _supervise(rest)


def _runs_in_flight(args: list[str]) -> list[str]:
    """``--runs-in-flight N``: the runs' pool holds up to N runs in one process, each on a
    thread (Celery's threads pool, ``-P threads -c N``): a run waiting on a model or a tool
    costs a thread, not a process, and no database connection (``RUNLEDGER_DB_POOL_SIZE``
    bounds the process's). Refused beside ``-P``/``-c`` of one's own (which say otherwise)."""
    rest = list(args)
    for i, arg in enumerate(rest):
        if arg != "--runs-in-flight" and not arg.startswith("--runs-in-flight="):
            continue
        value = arg.split("=", 1)[1] if "=" in arg else (rest[i + 1] if i + 1 < len(rest) else "")
        del rest[i : i + (1 if "=" in arg else 2)]
        if not value.isdigit() or int(value) < 1:
            _refuse(f"--runs-in-flight takes a number of runs (1 or more), not {value!r}")
        clashing = {"-P", "--pool", "-c", "--concurrency"}
        if any(a in clashing or a.startswith(("--pool=", "--concurrency=")) for a in rest):
            _refuse("--runs-in-flight sets the pool and its size: leave out -P and -c")
        return [*rest, "-P", "threads", "-c", value]
    return rest


def _refuse(message: str) -> None:
    sys.stderr.write(f"runledger worker: {message}\n")
    sys.exit(2)


def _take_only(args: list[str]) -> tuple[str | None, list[str]]:
    rest, only = list(args), None
    for i, arg in enumerate(rest):
        if arg == "--only" or arg.startswith("--only="):
            value = (
                arg.split("=", 1)[1] if "=" in arg else (rest[i + 1] if i + 1 < len(rest) else "")
            )
            del rest[i : i + (1 if "=" in arg else 2)]
            if value not in ("runs", "control"):
                sys.stderr.write(f"runledger worker: --only takes runs or control, not {value!r}\n")
                sys.exit(2)
            only = value
            break
    return only, rest


def _control_args(rest: list[str]) -> list[str]:
    """The options of the runs' worker that the control process shares: the log level, the
    node name (prefixed ``control.``) and the ``--without-…`` switches."""
    out: list[str] = []
    name = "celery@%h"
    for i, arg in enumerate(rest):
        value = rest[i + 1] if i + 1 < len(rest) else ""
        if arg in ("-l", "--loglevel"):
            out += ["-l", value]
        elif arg.startswith("--loglevel="):
            out.append(arg)
        elif arg in ("-n", "--hostname"):
            name = value
        elif arg.startswith("--hostname="):
            name = arg.split("=", 1)[1]
        elif arg.startswith("--without-"):
            out.append(arg)
    return [*out, "-n", f"control.{name}"]


def _supervise(rest: list[str]) -> int:
    import signal
    import subprocess

    me = [sys.executable, "-m", "runs.cli", "worker"]
    children = [
        subprocess.Popen([*me, "--only", "runs", *rest], preexec_fn=_die_with_parent),
        subprocess.Popen(
            [*me, "--only", "control", *_control_args(rest)], preexec_fn=_die_with_parent
        ),
    ]

    def forward(signum: int, frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, forward)
    # Ctrl-C reaches the whole process group (both children) from the terminal: passing it on
    # as well would be a second SIGINT, which Celery takes as "stop at once".
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code: int | None = None
    while code is None:
        pid, status = os.wait()
        for child in children:
            if child.pid == pid:
                child.returncode = os.waitstatus_to_exitcode(status)
                code = child.returncode
    for child in children:
        if child.poll() is None:
            child.terminate()  # the other one drains, as on a SIGTERM from outside
    for child in children:
        child.wait()
    return code if code >= 0 else 128 - code


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if this command is killed (SIGKILL) before it."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def print_help() -> None:
    """runledger's own commands first, grouped by app; then Django's and the libraries'."""
    import django
    from django.core.management import get_commands, load_command_class

    django.setup()
    ours: dict[str, list[str]] = {}
    others: list[str] = []
    for command, app in sorted(get_commands().items()):
        if app.startswith(("ledger", "runs")):
            ours.setdefault(app, []).append(command)
        else:
            others.append(command)
    out = ["usage: runledger <command> [options]   (runledger <command> --help for one)", ""]
    out += ["  worker     start the workers: the runs' pool and the control process (--only …)"]
    out += ["  beat       start Celery beat: the sweep and deliveries (exactly one)", ""]
    for app, commands in ours.items():
        out.append(f"runledger's commands ({app}):")
        for command in commands:
            helptext = " ".join(load_command_class(app, command).help.split())
            first = helptext.split(". ")[0].rstrip(".")
            out.append(f"  {command:<22} {first[:76] + '…' if len(first) > 77 else first}")
        out.append("")
    spare = sorted(equipment_commands() - set(get_commands()))
    if spare:
        out.append("development equipment (from a source checkout): " + ", ".join(spare))
        out.append("")
    out.append("Django's and the libraries' commands: " + ", ".join(others))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
