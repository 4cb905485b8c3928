"""Running a management command in the test's process, as the operator command tests do."""

from __future__ import annotations

from io import StringIO

from django.core.management import CommandError, call_command


def run_cmd(*args: str) -> tuple[int, str]:
    """The command's exit code and output (a CommandError carries the code it exits with)."""
    out = StringIO()
    try:
        call_command(*args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"CommandError: {exc}"
    return 0, out.getvalue()
