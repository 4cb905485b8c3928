"""The dashboard's views, one module per page family (``runs/dashboard/urls.py`` names them all).

``run_list``: the runs list and its fragments. ``run_page``: a run, its steps, the resume
preview and the raw ledger. ``run_actions``: resume, retry, cancel, fork. ``stale``: a stale
step's accept or re-execute. ``settle``: the settlement queue and a step's settle page.
``bulk``: bulk actions from the list. ``audit``: the audit page.

Read-side modules only read; an acting module calls one ``ledger.transitions`` function per
POST. No view module imports another: what they share is in ``runs.dashboard.http`` and
``runs.dashboard.presenting``.
"""
