"""System checks (``manage.py check``, and before every management command): dangerous
configuration said out loud at start-up.

- ``runledger.E001`` (error): the development equipment (``harness``: fault points that kill the
  process, the demo's staged crashes, bulk seeding) is installed while DEBUG is off — a
  deployment that carries ``RUNLEDGER_HARNESS=1`` by mistake. The equipment's own processes
  silence it on purpose (``RUNLEDGER_SILENCED_CHECKS=runledger.E001``).
- ``runledger.W001`` (warning): the example agents' simulated downstream systems
  (``ledger.examples``) are installed: their tables and tools are for the demo and the tests.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register(Tags.compatibility)
def equipment_is_not_deployed(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    if apps.is_installed("harness") and not settings.DEBUG:
        found.append(
            Error(
                "The development equipment (harness) is installed with DEBUG off.",
                hint="Unset RUNLEDGER_HARNESS in a deployment: the harness kills processes at "
                "named fault points and seeds fake data. Equipment processes silence this "
                "check on purpose with RUNLEDGER_SILENCED_CHECKS=runledger.E001.",
                id="runledger.E001",
            )
        )
    if apps.is_installed("ledger.examples"):
        found.append(
            Warning(
                "The example agents' simulated downstream systems (ledger.examples) are installed.",
                hint="They serve the demo and the tests. A deployment names its own agents in "
                "RUNLEDGER_AGENT_MODULES and leaves RUNLEDGER_EXAMPLES off.",
                id="runledger.W001",
            )
        )
    return found
