"""The operator dashboard: pages, forms and what they show (the app ``runs.dashboard``, label
``runs``), and the permissions and roles its views check (``models``, ``roles``).

Owns every page and htmx fragment of the dashboard (``views/``, one module per page family),
the request helpers every view shares (``http``: the typed htmx request, the lookups that check
permission, how a refusal is shown), the forms, the presentation of ledger rows
(``presenting``), the template tags (``templatetags``) and its URLs (``urls``).

It never writes ledger rows itself: a view reads through ``ledger.selectors`` and the dry
replay, and acts through one function of ``ledger.transitions``. It never imports the kill-test
harness (``harness``) or ``ledger.examples``, and enqueues nothing itself: a run its action
queues is announced by the ledger (``ledger.signals.run_queued``) and sent by
``runs.operations``.
"""
