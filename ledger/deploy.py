"""Deprecated: moved to ``ledger.processes.deploy_check``. This name keeps working for now, with a
``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from ledger.processes.deploy_check import *  # noqa: F403

warnings.warn(
    "ledger.deploy moved to ledger.processes.deploy_check; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
