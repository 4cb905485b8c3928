"""The dashboard's pages: how much one page shows and how often the lists refresh."""

from __future__ import annotations

from runs.settings import env, sections

RUNLEDGER_LIST_REFRESH_SECONDS = env.int(
    "RUNLEDGER_LIST_REFRESH_SECONDS",
    5,
    section=sections.DASHBOARD,
    doc="How often the runs list (and an active run's header) re-fetches itself; the page's "
    "script pauses while the tab is hidden and backs off while nothing changes.",
)
RUNLEDGER_RUNS_PER_PAGE = env.int(
    "RUNLEDGER_RUNS_PER_PAGE", 50, section=sections.DASHBOARD, doc="Runs on one page of the list."
)
RUNLEDGER_STEPS_PER_PAGE = env.int(
    "RUNLEDGER_STEPS_PER_PAGE", 100, section=sections.DASHBOARD, doc="Steps on one page of a run."
)
