"""The ledger app's settings (declared in ``ledger.conf``), each read from the environment
variable of its name; and which optional apps are installed."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from ledger import conf
from runs.settings import env, sections

try:
    LEDGER = conf.from_environ(os.environ)
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
globals().update(LEDGER)

# The example agents' simulated downstream systems have tables of their own: installed when the
# agent modules name an example module or when asked for.
RUNLEDGER_EXAMPLES = env.bool(
    "RUNLEDGER_EXAMPLES",
    False,
    section=sections.EQUIPMENT,
    doc="Install the example agents' simulated downstream systems (`ledger.examples`: a payment "
    "provider, an outbox, a notifier, their tables). On by itself when `RUNLEDGER_AGENT_MODULES` "
    "names an example module. A deployment leaves it off; a system check warns when it is on.",
) or any(
    m == "ledger.examples" or m.startswith("ledger.examples.")
    for m in LEDGER["RUNLEDGER_AGENT_MODULES"]
)
# The development equipment (harness/: the kill test, the soak, the demo's staged crashes, the
# benchmarks and their fault points): never deployed.
RUNLEDGER_HARNESS = env.bool(
    "RUNLEDGER_HARNESS",
    False,
    section=sections.EQUIPMENT,
    doc="Install the development equipment (`harness`: the kill test, the soak, the demo's "
    "staged crashes, benchmarks, bulk seeding and the fault-point registry). Set by the "
    "Makefile's `demo`, `killtest`, `soak` and `bench` targets; never in a deployment: with "
    "DEBUG off the system check `runledger.E001` fails (equipment silences it on purpose "
    "through `RUNLEDGER_SILENCED_CHECKS`).",
)
