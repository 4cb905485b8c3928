"""runledger's ledger: the durable step record of an agent run and the engine that writes it.

Agent authors import from ``ledger.agents``; the workers call ``ledger.processes.execute``; every
write to a run or a step goes through ``ledger.transitions``; every read the pages need is in
``ledger.selectors``. This package never imports ``runs``.
"""

from __future__ import annotations

from importlib import metadata

import ledger.moved  # noqa: F401 - the old module names keep working, deprecated


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, once built or installed)."""
    try:
        return metadata.version("runledger")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, never installed
        return "0+unknown"


#: runledger's version: the one place it is read (``runledger --version``, the API's root,
#: the dashboard's footer).
__version__ = _version()
