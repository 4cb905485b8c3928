"""Deprecated: moved to ``runs.operations.tasks``. This name keeps working for now, with a
``DeprecationWarning``; import the new one (see CHANGELOG.md)."""

from __future__ import annotations

import warnings

from runs.operations.tasks import *  # noqa: F403

warnings.warn(
    "runs.tasks moved to runs.operations.tasks; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
)
