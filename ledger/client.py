"""The Python client of runledger's HTTP API, as ``ledger.client``: the ``runledger-client``
distribution's ``runledger_client`` under the name it has always had (``pip install
'runledger[client]'`` installs it). ``Client``, ``AsyncClient``, the answers, the errors and
``verify_webhook`` are the same objects under both names. No Django is imported.
"""

from __future__ import annotations

try:
    from runledger_client import *  # noqa: F403
    from runledger_client import __all__  # noqa: F401 - what `import *` gives
except ModuleNotFoundError as exc:  # pragma: no cover - the extra not installed
    if exc.name != "runledger_client":
        raise
    raise ModuleNotFoundError(
        "ledger.client needs the client: pip install 'runledger[client]' (or runledger-client)",
        name=exc.name,
    ) from None
from runledger_client._client import MAX_WAIT, RETRIED_STATUSES, _error, _parse  # noqa: F401
