"""Deprecated: moved to ``ledger.processes.retention``. This name keeps working for now, with a
``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from ledger.processes.retention import *  # noqa: F403

warnings.warn(
    "ledger.retention moved to ledger.processes.retention; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
