"""The engine: the run context an agent receives and what becomes of each of its calls.

- ``context``: ``RunContext`` (and ``AsyncRunContext``, awaited), the agent author's API;
  builds each call (validated, hashed inputs, a stable step id) and hands it to a ``Steps``;
- ``decide``: what a resume does with a call given its recorded row and the recorded path —
  the one decision the live steps act on and the dry replay (``ledger.processes.preview``) reports;
- ``live``: the live steps: replay, reconcile or execute, fan-out on threads, every write
  through ``ledger.transitions`` fenced by the lease token;
- ``fence``: when an effect may leave the process (the lease's local deadline, the takeover's
  wait, the fencing token);
- ``batch``: batched durability, the finished steps waiting to be committed together;
- ``walk``: where an execution stands on the recorded path (shared by context and steps);
- ``calls``: the ``Call`` record and the text forms the ledger stores;
- ``execution``: a live execution's context (``live_context``), and its batch's end;
- ``aio``: async agents: the shared event loop, and where sync code and the loop meet.
- ``pooling``: a connection per step, given back to the process's pool (``step_connection``).

Never imports ``runs``; writes nothing except through ``ledger.transitions``. Importing this
package (``RunContext``) needs no Django settings: ``execution`` and ``live`` load the tables.
"""

from __future__ import annotations

from ledger.engine.context import AsyncRunContext, RunContext

__all__ = ["AsyncRunContext", "RunContext"]
