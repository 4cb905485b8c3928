"""Deprecated: moved to ``ledger.processes.execute`` and ``ledger.processes.sweep``. This name
keeps working for now, with a ``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from ledger.processes.execute import *  # noqa: F403
from ledger.processes.sweep import *  # noqa: F403

warnings.warn(
    "ledger.worker moved to ledger.processes.execute and ledger.processes.sweep; "
    "the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
