"""The test suite's settings: the project's own (``runs.settings``), with the example agents and
the development equipment named explicitly, as ``make demo`` and the harness name them.

Set in the environment before the project's settings read it, so that every process a test
starts (``manage.py`` …, Celery workers) inherits the same choice.
"""

from __future__ import annotations

import os

os.environ.setdefault("RUNLEDGER_AGENT_MODULES", "ledger.examples.agents")
# The receivers of the webhook tests listen on loopback, which the SSRF policy refuses unless
# allowed (tests/ledger/processes/test_webhook_egress.py proves the default refuses it).
os.environ.setdefault("RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
os.environ.setdefault("RUNLEDGER_SILENCED_CHECKS", "runledger.E001,runledger.W001")

from runs.settings import *  # noqa: F403
