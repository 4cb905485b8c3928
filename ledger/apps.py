from __future__ import annotations

import importlib
import logging

from django.apps import AppConfig

from ledger.conf import conf

log = logging.getLogger(__name__)


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the agents and tools named in settings. A module that fails to import is
        # logged, not fatal: a worker takes no run of an agent it lacks while an import error
        # stands (ledger.processes.execute), and /readyz reports it.
        import ledger.checks  # noqa: F401 - its @register adds the system checks
        from ledger import registry
        from ledger.engine import pooling

        pooling.install_fork_guard()  # a forked child opens a connection pool of its own

        for module in conf.RUNLEDGER_AGENT_MODULES:
            try:
                importlib.import_module(module)
            except Exception as exc:
                registry.record_import_error(module, exc)
                log.exception("agent module %s failed to import", module)
