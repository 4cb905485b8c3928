"""The operator dashboard: pages, forms and what they show (a package of the ``runs`` app).

Owns every page and htmx fragment of the dashboard (``views/``, one module per page family),
the request helpers every view shares (``http``: the typed htmx request, the lookups that check
permission, how a refusal is shown), the forms, the presentation of ledger rows
(``presenting``) and the template tags (``templatetags``, registered as the ``dashboard``
library in ``runs/settings.py``).

It never writes ledger rows itself: a view reads through ``ledger.selectors`` and the dry
replay, and acts through one function of ``ledger.transitions``. It never imports the kill-test
harness (``harness``) or ``ledger.examples``; it imports the project wiring only for the
permissions (``runs.dashboard.models``) and the tasks it enqueues after a commit
(``runs.operations.tasks``).
"""
