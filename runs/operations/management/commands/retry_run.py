"""Retry a failed run: `manage.py retry_run run_… [--reason …] [--max-resumes N] [--inline]`.

The resume replays what succeeded and executes the failed step again (attempt + 1, the same
effect key for an effect). Audited as ``cli:<login>``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from ledger.processes import resume
from runs.operations.commands import RequeueCommand


class Command(RequeueCommand):
    help = "Retry a failed run: replay what succeeded, execute the failed step again."
    default_reason = "retried from the command line"
    transition = resume.run_retry
