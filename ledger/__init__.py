"""runledger's ledger: the durable step record of an agent run and the engine that writes it.

Agent authors import from ``ledger.agents``; the workers call ``ledger.processes.execute``; every
write to a run or a step goes through ``ledger.transitions``; every read the pages need is in
``ledger.selectors``. This package never imports ``runs``.
"""

from __future__ import annotations

import ledger.moved  # noqa: F401 - the old module names keep working, deprecated
