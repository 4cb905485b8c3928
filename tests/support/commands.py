"""Running a management command in the test's own process: its exit code and its output."""

from __future__ import annotations

from io import StringIO

from django.core.management import CommandError, call_command


def run_cmd(*args: str) -> tuple[int, str]:
    """The exit code and output of a command run in this process (a refusal's message last)."""
    out = StringIO()
    try:
        call_command(*args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"CommandError: {exc}"
    return 0, out.getvalue()
