"""Deprecated: moved to ``ledger.processes.delivery``. This name keeps working for now, with a
``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from ledger.processes.delivery import *  # noqa: F403

warnings.warn(
    "ledger.notify moved to ledger.processes.delivery; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
