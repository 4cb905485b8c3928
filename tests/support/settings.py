"""The test suite's settings: the project's own (``runs.settings``), with the example agents and
the development equipment named explicitly, as ``make demo`` and the harness name them.

Set in the environment before the project's settings read it, so that every process a test
starts (``manage.py`` …, Celery workers) inherits the same choice.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("RUNLEDGER_AGENT_MODULES", "ledger.examples.agents")
# The receivers of the webhook tests listen on loopback, which the SSRF policy refuses unless
# allowed (tests/ledger/processes/test_webhook_egress.py proves the default refuses it).
os.environ.setdefault("RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
os.environ.setdefault("RUNLEDGER_SILENCED_CHECKS", "runledger.E001,runledger.W001")
# Workers, beat and gunicorn that tests start with DEBUG off may use the SQLite ledger and the
# filesystem broker (a test of the refusal unsets it).
os.environ.setdefault("RUNLEDGER_ALLOW_EMBEDDED", "1")


def _var_dir_of_this_xdist_worker() -> None:
    """Under pytest-xdist (``make test``) each worker process has a RUNLEDGER_VAR_DIR of its
    own, inside the one given (else ./var): the filesystem broker's messages that a test reads
    back (tests/runs/operations/test_batch_start_publish.py) are only its process's, as the
    test database is (pytest-django's test_<name>_gw0 …). Set once, in the xdist process: its
    children inherit it, and a child that a test gives a RUNLEDGER_VAR_DIR of its own (a
    SQLite file the test reads afterwards) keeps that one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or os.environ.get("TESTS_XDIST_VAR_DIR_SET"):
        return
    root = Path(__file__).resolve().parents[2]
    base = Path(os.environ.get("RUNLEDGER_VAR_DIR") or root / "var")
    os.environ["RUNLEDGER_VAR_DIR"] = str(base / f"xdist-{worker}")
    os.environ["TESTS_XDIST_VAR_DIR_SET"] = "1"


_var_dir_of_this_xdist_worker()

from runs.settings import *  # noqa: E402, F403
