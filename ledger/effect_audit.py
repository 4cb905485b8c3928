"""Deprecated: moved to ``ledger.processes.effect_audit``. This name keeps working for now, with a
``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from ledger.processes.effect_audit import *  # noqa: F403

warnings.warn(
    "ledger.effect_audit moved to ledger.processes.effect_audit; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
