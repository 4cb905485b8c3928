"""Deprecated: moved to ``ledger.processes.preview``. This name keeps working for now, with a
``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from ledger.processes.preview import *  # noqa: F403

warnings.warn(
    "ledger.preview moved to ledger.processes.preview; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
