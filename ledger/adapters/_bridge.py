"""The bridge between an async agent framework's event loop and the thread that runs the ledger.

PydanticAI and the OpenAI Agents SDK are async; the ledger's steps are not, and only the
calling (worker) thread holds the run's database connection, lease and ledger context. So the
framework runs on a new event loop in a thread of its own (``serve``), and every model request
and tool call it makes crosses back to the calling thread as one job (``ask``), which runs it
and hands the outcome back. The calling thread reaches the loop with ``on_loop`` (to ask the
real model, say).

Once a job raises on the calling thread (a ledger outcome: the run stops or fails), every later
job is refused with ``Stopped`` without running, and ``serve`` raises that first error after the
framework's loop has ended, whatever the framework did with it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


class Stopped(Exception):
    """What the framework is told for a job refused because the run's thread raised."""


@dataclass
class Job:
    run: Callable[[], Any]  # runs on the calling thread (the ledger call)
    done: Future[Any] = field(default_factory=Future)


class Bridge:
    """Runs a framework's coroutine on an event loop in a helper thread and serves its jobs.

    ``name`` names the helper thread. ``hand_back``: the job that raised gets its own exception
    in the framework's loop (True), or a ``Stopped`` in its place (False); either way ``serve``
    raises the original.
    """

    def __init__(self, *, name: str = "runledger-agent", hand_back: bool = False) -> None:
        self.name = name
        self.hand_back = hand_back
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def ask(self, run: Callable[[], Any]) -> Any:
        """From the framework's loop: run ``run`` (a ledger call) on the calling thread."""
        job = Job(run)
        self.jobs.put(job)
        return await asyncio.wrap_future(job.done)

    def on_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """From the calling thread: run ``coro`` on the framework's loop; wait for its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def serve(self, main: Coroutine[Any, Any, Any], *, shared: bool = False) -> Any:
        """Run ``main`` on a new event loop in a thread; serve its jobs here until it ends.

        ``shared``: on the process's shared event loop (``ledger.engine.aio``) instead, as a
        coroutine beside the other runs' (no thread and no loop of its own), unless the calling
        thread runs a loop itself."""
        if shared and not _runs_a_loop():
            return self._serve_shared(main)
        outcome: dict[str, Any] = {}

        def framework_thread() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                outcome["value"] = loop.run_until_complete(main)
            except BaseException as exc:  # handed to the calling thread
                outcome["error"] = exc
            finally:
                self.jobs.put(None)
                loop.close()

        thread = threading.Thread(target=framework_thread, name=self.name, daemon=True)
        thread.start()
        raised: BaseException | None = None
        while (job := self.jobs.get()) is not None:
            if not job.done.set_running_or_notify_cancel():
                continue  # the framework gave the call up (a sibling failed): nothing was run
            if raised is not None:
                job.done.set_exception(Stopped("the run stopped at an earlier step"))
                continue
            try:
                job.done.set_result(job.run())
            except BaseException as exc:  # a ledger outcome: it stops the run
                raised = exc
                job.done.set_exception(
                    exc if self.hand_back else Stopped("the run stopped at this step")
                )
        thread.join()
        if raised is not None:
            raise raised
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def _serve_shared(self, main: Coroutine[Any, Any, Any]) -> Any:
        from ledger.engine import aio

        loop = aio.shared_loop()
        self.loop = loop

        async def framework() -> Any:
            try:
                return await main
            finally:
                self.jobs.put(None)

        done = asyncio.run_coroutine_threadsafe(framework(), loop)
        raised = self._serve_jobs()
        if raised is not None:
            done.exception()  # the framework's end, whatever it did with the refusal
            raise raised
        return done.result()

    def _serve_jobs(self) -> BaseException | None:
        """Serve jobs on the calling thread until the framework ends; the first job's error."""
        raised: BaseException | None = None
        while (job := self.jobs.get()) is not None:
            if not job.done.set_running_or_notify_cancel():
                continue
            if raised is not None:
                job.done.set_exception(Stopped("the run stopped at an earlier step"))
                continue
            try:
                job.done.set_result(job.run())
            except BaseException as exc:  # a ledger outcome: it stops the run
                raised = exc
                job.done.set_exception(
                    exc if self.hand_back else Stopped("the run stopped at this step")
                )
        return raised


def _runs_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
