"""Async agents: the event loop they run on, and where sync code and the loop meet.

An agent may be an ``async def``; so may its tools, its lookups (reconcile functions) and its
model client. The engine's decisions and ledger writes stay the sync code the sync agents use
(``ledger.engine.live``), written once as generators that *yield* what must leave the process —
a tool call, a lookup, a wait — and never do it themselves. Two drivers run them:

- the sync driver (a sync agent) does each request in line on the calling thread, as before;
- the async driver (``await ctx.call(...)`` in an async agent) advances the generator — the
  decisions and the ledger writes, Django ORM, sync — on a thread of the ledger pool
  (``ledger_phase``), and does the requests on the event loop: an ``async def`` tool or lookup
  is awaited there, a sync one runs on a thread of the loop's default executor
  (``asyncio.to_thread``; ``SYNC_CALL_THREADS`` on the shared loop), a wait is an
  ``asyncio.sleep``. The ledger thread gives its database connection back after each phase
  (``connections.close_all()``; with Django's connection pool, to the pool), so a run waiting
  on a model holds no connection and no thread, only its coroutine; a phase that touches no
  table (a replay, a read's first half) opens none. The connections of async runs in a process
  are bounded by the ledger pool's threads (``LEDGER_THREADS``).

Step ids, input hashes, effect keys and every write are the sync engine's own: a sync agent's
ledger and an async agent's are the same rows. The lease is checked before an effect leaves
where its intent committed (``LeaseFence.check``, both drivers) and, for an async run, again on
the loop immediately before the tool call (``LeaseFence.recheck``), after the hop between them.

The loop: ``ledger.processes.execute.run_execute`` — what a Celery worker thread calls — meets an
async agent by running its coroutine on this process's one shared event loop (a daemon thread,
started on first use and again in a forked child; ``run``), so the runs of all the worker's
threads share one loop; the calling thread waits for the outcome holding no connection (it
closes its own first). Called from a thread that runs a loop itself, or when the shared loop
has stopped, ``run`` falls back to ``asyncio.run`` on a private loop in a fresh thread: slower,
never wrong. ``ledger.processes.execute.arun_execute`` is the entry point for code already on a
loop (its agent runs on the caller's loop). A ``SystemExit`` or ``KeyboardInterrupt`` inside a
run is carried out of its task to the waiting thread, never into the shared loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ledger.errors import NotAwaited
from ledger.registry import is_async

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Threads that run async runs' ledger phases (and so bound their database connections).
LEDGER_THREADS = 16
#: Threads of the shared loop's default executor: the sync tools, lookups and model clients of
#: async runs (asyncio's own default, five more than the CPUs, would let six block a process).
SYNC_CALL_THREADS = 64

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_thread: threading.Thread | None = None
_pid = 0
_ledger_pool: ThreadPoolExecutor | None = None
_pool_pid = 0


def shared_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for async runs, running on a daemon thread (started on first
    use, and again in a forked child, which does not inherit the thread)."""
    global _loop, _loop_thread, _pid
    with _lock:
        alive = _loop_thread is not None and _loop_thread.is_alive()
        if _loop is not None and _pid == os.getpid() and alive and not _loop.is_closed():
            return _loop
        loop = asyncio.new_event_loop()
        loop.set_default_executor(
            ThreadPoolExecutor(SYNC_CALL_THREADS, thread_name_prefix="runledger-sync-call")
        )
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        thread = threading.Thread(target=serve, name="runledger-async-loop", daemon=True)
        thread.start()
        ready.wait()
        _loop, _loop_thread, _pid = loop, thread, os.getpid()
        return loop


def on_shared_loop() -> bool:
    return _loop_thread is threading.current_thread() and _pid == os.getpid()


def run(coro: Coroutine[Any, Any, T], *, loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``coro`` to its end from sync code and return its result (or raise its exception).

    On ``loop`` (default: the shared loop), in a task that carries the caller's context
    variables (the log fields bound around an execution); the calling thread waits. From a
    thread that runs an event loop itself, or when the loop is gone, on a private loop in a
    fresh thread, so that no loop is ever blocked waiting on itself.
    """
    context = contextvars.copy_context()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return _private(coro, context)
    wrapped = _in_context(coro, context)
    try:
        future = asyncio.run_coroutine_threadsafe(wrapped, loop or shared_loop())
    except RuntimeError as exc:  # the loop stopped or closed (interpreter shutdown)
        wrapped.close()
        log.warning("the event loop is unavailable (%s); using a private loop", exc)
        return _private(coro, context)
    try:
        return future.result()
    except _Escaped as escaped:
        raise escaped.inner from None


class _Escaped(Exception):
    """Carries a ``SystemExit`` or ``KeyboardInterrupt`` raised in a run out of its task: let
    through, it would stop the shared loop, and every run on it with it."""

    def __init__(self, inner: BaseException) -> None:
        super().__init__(repr(inner))
        self.inner = inner


async def _in_context(coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
    return await asyncio.get_running_loop().create_task(_guarded(coro), context=context)


async def _guarded(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Escaped(exc) from exc


def _private(coro: Coroutine[Any, Any, T], context: contextvars.Context) -> T:
    """The fallback: ``asyncio.run`` on a thread of its own (the caller's may run a loop)."""
    box: dict[str, Any] = {}

    def main() -> None:
        try:
            box["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:  # handed to the caller as it is
            box["error"] = exc

    thread = threading.Thread(target=main, name="runledger-async-private")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def call_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` from sync code; an ``async def`` (a lookup) runs on the shared loop."""
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        return run(_awaited(value))
    return value


async def _awaited(value: Awaitable[T]) -> T:
    return await value


async def call_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` from the loop: an ``async def`` is awaited on it, a sync function runs on a
    thread of the loop's default executor (it may block: a sync tool, a sync model client) and
    gives back any database connection it took. An awaitable returned by a sync function (a
    wrapper around an ``async def``) is awaited too."""
    if is_async(fn):
        value = fn(*args, **kwargs)
    else:
        value = await asyncio.to_thread(_and_close, fn, *args, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


def _and_close(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    finally:
        _close_connections()


def _pool() -> ThreadPoolExecutor:
    global _ledger_pool, _pool_pid
    with _lock:
        if _ledger_pool is None or _pool_pid != os.getpid():
            _ledger_pool = ThreadPoolExecutor(LEDGER_THREADS, thread_name_prefix="ledger-async")
            _pool_pid = os.getpid()
        return _ledger_pool


async def ledger_phase(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` — engine code that may read or write the ledger (Django ORM) — on a thread of
    the ledger pool, with the caller's context variables, off the loop; the thread's database
    connection is given back when it returns."""
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool(), context.run, _and_close, fn, *args)


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


def refuse_awaitable(value: Any, *, what: str) -> None:
    """Raise ``NotAwaited`` when ``value`` is an awaitable (closing a coroutine, so that Python
    does not warn later that it was never awaited)."""
    if not inspect.isawaitable(value):
        return
    if inspect.iscoroutine(value):
        value.close()
    raise NotAwaited(
        f"{what} is a coroutine, not a value: an async def was called without await "
        "(write `await ...`; an async agent awaits ctx.call, ctx.model and ctx.parallel)"
    )
