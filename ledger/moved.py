"""Old module names, kept working for a deprecation period after their modules moved.

``import ledger.worker`` (say) still works: it warns (``DeprecationWarning``) and gives a module
holding the names of its new home, ``ledger.processes.execute`` and ``ledger.processes.sweep``.
No file stands at the old place: a finder on ``sys.meta_path`` answers for the names in
``MOVED`` (and ``runs`` adds its own). CHANGELOG.md lists them; they go in a later release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType

#: Old module name: the modules whose names it now gives.
MOVED: dict[str, tuple[str, ...]] = {
    "ledger.worker": ("ledger.processes.execute", "ledger.processes.sweep"),
    "ledger.preview": ("ledger.processes.preview",),
    "ledger.deploy": ("ledger.processes.deploy_check",),
    "ledger.effect_audit": ("ledger.processes.effect_audit",),
    "ledger.notify": ("ledger.processes.delivery",),
    "ledger.retention": ("ledger.processes.retention",),
    # The operator functions: their writes are ledger.transitions, their reads ledger.selectors.
    "ledger.operations": ("ledger.transitions", "ledger.selectors"),
    "ledger.operations.bulk": ("ledger.transitions.bulk", "ledger.selectors.bulk"),
    "ledger.operations.edits": ("ledger.transitions.edits", "ledger.selectors.operator"),
    "ledger.operations.errors": ("ledger.errors",),
    "ledger.operations.queries": ("ledger.selectors.operator",),
    "ledger.operations.runs": ("ledger.transitions.actions",),
    "ledger.operations.settle": ("ledger.transitions.settle",),
    "ledger.operations.stale": ("ledger.transitions.stale",),
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.moved: dict[str, tuple[str, ...]] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        # An old package whose old submodules are answered too (``ledger.operations.bulk``).
        package = any(name.startswith(f"{fullname}.") for name in self.moved)
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def exec_module(self, module: ModuleType) -> None:
        news = self.moved[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {' and '.join(news)}; the old name will be removed",
            DeprecationWarning,
            stacklevel=2,
        )
        for new in news:
            source = importlib.import_module(new)
            for name, value in vars(source).items():
                # An old submodule's name stays its own (``ledger.transitions.bulk`` is not
                # what ``ledger.operations.bulk`` was).
                if not name.startswith("__") and f"{module.__name__}.{name}" not in self.moved:
                    setattr(module, name, value)


_finder = _Finder()


def keep(moved: Mapping[str, Sequence[str]]) -> None:
    """Answer for these old names from now on (idempotent)."""
    _finder.moved.update({old: tuple(new) for old, new in moved.items()})
    if _finder not in sys.meta_path:
        sys.meta_path.append(_finder)


keep(MOVED)
