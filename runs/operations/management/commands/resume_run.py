"""Resume a stopped run: `manage.py resume_run run_… [--max-resumes 8] [--reason …] [--inline]`.

Audited like the dashboard's Resume: the audit row names the actor ``cli:<login>``. Refused
(exit 1, no resume spent) when the dry replay says the run would stop again at once, unless
``--anyway``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from ledger.processes import resume
from runs.operations.commands import RequeueCommand


class Command(RequeueCommand):
    help = "Queue a stopped run (needs attention, failed) to resume from its ledger."
    default_reason = "resumed from the command line"
    transition = resume.run_resume
