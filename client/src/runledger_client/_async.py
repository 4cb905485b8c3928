"""``AsyncClient``: the client's methods, awaited, on ``httpx.AsyncClient`` — for an asyncio
application (FastAPI, an async agent host) that must not block its loop on a long-poll.

Each method is the sync ``Client``'s with ``await``; ``runs()`` and ``approvals()`` are async
iterators (``async for``). The answers, the errors and the retry rules are the same objects and
the same rules (``runledger_client._client``)::

    async with AsyncClient("https://runs.example.com", token="rl_…") as runledger:
        run = await runledger.start("refund", {"invoice_id": "inv_1"}, idempotency_key="d-981")
        refund = await runledger.result(run.run_id)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from runledger_client._client import (
    MAX_WAIT,
    RETRIED_STATUSES,
    Agent,
    Execution,
    Gate,
    Pause,
    Run,
    RunSummary,
    Schedule,
    SentEvent,
    Step,
    StreamEvent,
    TextDelta,
    UnexpectedAnswer,
    Webhook,
    _batch_items,
    _batch_runs,
    _delta,
    _error,
    _event,
    _json,
    _outcome,
    _parse,
    _quote,
    _schedule_body,
    _step,
)


class AsyncClient:
    """A connection to one runledger, for asyncio. ``retries``: attempts after the first for
    safe calls; ``backoff``: the first pause in seconds (doubling, capped at 10 s)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retries, self.backoff = retries, backoff
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=httpx.Timeout(timeout, read=max(timeout, MAX_WAIT + 15)),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- runs ----------------------------------------------------------------------------------

    async def start(
        self,
        agent: str,
        inputs: Any = None,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        title: str | None = None,
        labels: dict[str, str] | None = None,
        webhooks: list[dict[str, Any]] | None = None,
        wait: float | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        priority: int | None = None,
        start_at: datetime | str | None = None,
        deadline: float | datetime | str | None = None,
        team: str | None = None,
    ) -> Run:
        """``Client.start``: start a run, or get the run the same key already started
        (``wait``: answer once it settled, at most 60 seconds)."""
        body: dict[str, Any] = {"agent": agent, "inputs": inputs if inputs is not None else {}}
        for name, value in (
            ("run_id", run_id),
            ("title", title),
            ("labels", labels),
            ("webhooks", webhooks),
            ("concurrency_key", concurrency_key),
            ("concurrency_limit", concurrency_limit),
            ("priority", priority),
            ("start_at", start_at.isoformat() if isinstance(start_at, datetime) else start_at),
            ("deadline", deadline.isoformat() if isinstance(deadline, datetime) else deadline),
            ("team", team),
        ):
            if value is not None:
                body[name] = value
        key = idempotency_key or f"client-{uuid.uuid4()}"
        params = {"wait": round(wait, 3)} if wait else None
        answer = await self._send(
            "POST", "/runs", json=body, headers={"Idempotency-Key": key}, params=params
        )
        data = _json(answer)
        hooks = [_parse(Webhook, w) for w in data.pop("webhooks", None) or []]
        created = data.pop("created", answer.status_code == 201)  # an older server: the status
        return _parse(Run, {**data, "created": created, "webhooks": hooks})

    async def send_event(
        self, run_id: str, name: str, payload: Any = None, *, event_id: str | None = None
    ) -> SentEvent:
        """``Client.send_event``, awaited."""
        body = {"name": name, "payload": payload, "event_id": event_id or f"client-{uuid.uuid4()}"}
        answer = await self._send("POST", f"/runs/{_quote(run_id)}/events", json=body)
        return _parse(SentEvent, _json(answer))

    async def start_many(self, runs: Sequence[Mapping[str, Any]]) -> list[Run]:
        """``Client.start_many``: up to 1,000 runs in one request; one ``Run`` per item."""
        answer = await self._send("POST", "/runs/batch", json={"runs": _batch_items(runs)})
        return _batch_runs(_json(answer))

    async def get_run(self, run_id: str) -> Run:
        """The run now (``GET /runs/{run_id}``), without waiting; ``NotFound`` if none."""
        return _parse(Run, _json(await self._send("GET", f"/runs/{_quote(run_id)}")))

    #: The same as ``get_run`` (its first name).
    get = get_run

    async def wait(self, run_id: str, timeout: float = MAX_WAIT) -> Run:
        """``Client.wait``: the run once settled, or as it is after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            answer = await self._send(
                "GET",
                f"/runs/{_quote(run_id)}/wait",
                params={"timeout": round(min(left, MAX_WAIT), 3)},
            )
            run = _parse(Run, _json(answer))
            if run.settled or time.monotonic() >= deadline:
                return run

    async def run(
        self, agent: str, inputs: Any = None, *, timeout: float = MAX_WAIT, **start: Any
    ) -> Run:
        """``Client.run``: start a run and wait for it to settle (or ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        run = await self.start(agent, inputs, wait=min(max(timeout, 0.0), MAX_WAIT), **start)
        left = deadline - time.monotonic()
        if run.settled or left <= 0:
            return run
        return await self.wait(run.run_id, timeout=left)

    async def stream(
        self, run_id: str, last_event_id: int | None = None, *, live: bool = False
    ) -> AsyncIterator[StreamEvent | TextDelta]:
        """``Client.stream``: ``async for event in runledger.stream(run_id)``, each event once,
        in order, reconnecting after the last one seen; ends when the run settles. ``live``:
        also the model's text as it arrives (``TextDelta``, live only)."""
        after = last_event_id
        attempt = 0
        path = f"/runs/{_quote(run_id)}/stream" + ("?live=true" if live else "")
        while True:
            headers = {"Accept": "text/event-stream"}
            if after is not None:
                headers["Last-Event-ID"] = str(after)
            try:
                async with self._http.stream("GET", path, headers=headers) as answer:
                    if answer.status_code in RETRIED_STATUSES and attempt < self.retries:
                        await answer.aread()
                        await self._pause(attempt, answer.headers.get("Retry-After"))
                        attempt += 1
                        continue
                    if answer.status_code >= 300:
                        await answer.aread()
                        if answer.status_code >= 400:
                            raise _error(answer)
                        raise UnexpectedAnswer(answer)
                    async for kind, data in _asse(answer.aiter_lines()):
                        attempt = 0
                        if kind == "end":
                            return
                        if kind == "delta":
                            yield _delta(data)
                            continue
                        event = _event(data)
                        after = event.id
                        yield event
            except httpx.TransportError:
                if attempt >= self.retries:
                    raise
                await self._pause(attempt, None)
                attempt += 1

    async def result(self, run_id: str, timeout: float | None = None) -> Any:
        """``Client.result``: the run's result, or ``RunFailed``, ``RunCancelled``,
        ``RunNeedsAttention``, ``TimeoutError``."""
        while True:
            run = await self.wait(run_id, timeout=MAX_WAIT if timeout is None else timeout)
            if run.settled or timeout is not None:
                break
        return _outcome(run, timeout)

    async def cancel(self, run_id: str, reason: str, *, seen_version: int | None = None) -> Run:
        return await self._act(run_id, "cancel", reason=reason, seen_version=seen_version)

    async def resume(
        self,
        run_id: str,
        reason: str,
        *,
        seen_version: int | None = None,
        max_resumes: int | None = None,
    ) -> Run:
        return await self._act(
            run_id, "resume", reason=reason, seen_version=seen_version, max_resumes=max_resumes
        )

    async def retry(self, run_id: str, reason: str, *, seen_version: int | None = None) -> Run:
        return await self._act(run_id, "retry", reason=reason, seen_version=seen_version)

    async def runs(self, *, limit: int = 50, **filters: Any) -> AsyncIterator[RunSummary]:
        """Every run matching the dashboard's filters, a page at a time (``async for``)."""
        params = {k: v for k, v in filters.items() if v is not None}
        params["limit"] = limit
        while True:
            page = _json(await self._send("GET", "/runs", params=params))
            for row in page["runs"]:
                yield _parse(RunSummary, row)
            if not page["next_cursor"]:
                return
            params["cursor"] = page["next_cursor"]

    async def steps(self, run_id: str) -> list[Step]:
        out: list[Step] = []
        after = 0
        while True:
            params = {"after": after, "limit": 500}
            path = f"/runs/{_quote(run_id)}/steps"
            page = _json(await self._send("GET", path, params=params))
            out.extend(_step(s) for s in page["steps"])
            if not page["next_cursor"]:
                return out
            after = int(page["next_cursor"])

    async def agents(self) -> list[Agent]:
        return [_parse(Agent, a) for a in _json(await self._send("GET", "/agents"))]

    async def executions(self, run_id: str) -> list[Execution]:
        rows = _json(await self._send("GET", f"/runs/{_quote(run_id)}/executions"))
        return [_parse(Execution, e) for e in rows]

    async def accept_stale(
        self,
        run_id: str,
        step: int,
        reason: str,
        *,
        seen_version: int | None = None,
        resume: bool = True,
    ) -> Run:
        payload: dict[str, Any] = {"reason": reason, "resume": resume}
        if seen_version is not None:
            payload["seen_version"] = seen_version
        path = f"/runs/{_quote(run_id)}/steps/{int(step)}/accept-stale"
        answer = await self._send("POST", path, json=payload, safe=False)
        return _parse(Run, _json(answer)["run"])

    # --- approval gates ------------------------------------------------------------------------

    async def approvals(self) -> AsyncIterator[Gate]:
        """Every gate waiting for a decision, oldest first (``async for``)."""
        page = 1
        while True:
            rows = _json(await self._send("GET", "/approvals", params={"page": page}))
            for gate in rows:
                yield _parse(Gate, gate)
            if len(rows) < 100:
                return
            page += 1

    async def approval(self, gate_id: int) -> Gate:
        return _parse(Gate, _json(await self._send("GET", f"/approvals/{int(gate_id)}")))

    async def approve(self, gate_id: int, reason: str = "") -> Gate:
        return await self._decide(gate_id, "approve", reason)

    async def reject(self, gate_id: int, reason: str) -> Gate:
        return await self._decide(gate_id, "reject", reason)

    # --- pauses --------------------------------------------------------------------------------

    async def pauses(self, *, active: bool = True) -> list[Pause]:
        params = {"active": str(active).lower()}
        rows = _json(await self._send("GET", "/pauses", params=params))
        return [_parse(Pause, p) for p in rows]

    async def pause(self, scope: str, target: str, reason: str) -> Pause:
        body = {"scope": scope, "target": target, "reason": reason}
        return _parse(Pause, _json(await self._send("POST", "/pauses", json=body, safe=False)))

    async def get_pause(self, pause_id: int) -> Pause:
        return _parse(Pause, _json(await self._send("GET", f"/pauses/{int(pause_id)}")))

    async def lift(self, pause_id: int, reason: str, *, expected: int) -> Pause:
        body = {"reason": reason, "expected": expected}
        path = f"/pauses/{int(pause_id)}/lift"
        return _parse(Pause, _json(await self._send("POST", path, json=body, safe=False)))

    # --- schedules -----------------------------------------------------------------------------

    async def add_schedule(
        self,
        name: str,
        agent: str,
        inputs: Any = None,
        *,
        cron: str | None = None,
        interval: int | None = None,
        timezone: str = "UTC",
        missed: str = "skip",
        **options: Any,
    ) -> Schedule:
        body = _schedule_body(name, agent, inputs, cron, interval, timezone, missed, options)
        answer = await self._send("POST", "/schedules", json=body, safe=False)
        return _parse(Schedule, _json(answer))

    async def schedules(self, *, removed: bool = False) -> list[Schedule]:
        params = {"removed": str(removed).lower()}
        return [
            _parse(Schedule, s) for s in _json(await self._send("GET", "/schedules", params=params))
        ]

    async def get_schedule(self, schedule: str) -> Schedule:
        answer = await self._send("GET", f"/schedules/{_quote(schedule)}")
        return _parse(Schedule, _json(answer))

    async def pause_schedule(self, schedule: str, reason: str = "") -> Schedule:
        path = f"/schedules/{_quote(schedule)}/pause"
        answer = await self._send("POST", path, json={"reason": reason}, safe=False)
        return _parse(Schedule, _json(answer))

    async def resume_schedule(self, schedule: str, reason: str = "") -> Schedule:
        path = f"/schedules/{_quote(schedule)}/resume"
        answer = await self._send("POST", path, json={"reason": reason}, safe=False)
        return _parse(Schedule, _json(answer))

    async def remove_schedule(self, schedule: str) -> Schedule:
        path = f"/schedules/{_quote(schedule)}"
        return _parse(Schedule, _json(await self._send("DELETE", path, safe=False)))

    # --- webhook subscriptions -----------------------------------------------------------------

    async def subscribe(
        self,
        url: str,
        *,
        agent: str | None = None,
        run_id: str | None = None,
        events: list[str] | None = None,
        description: str = "",
        team: str | None = None,
    ) -> Webhook:
        body: dict[str, Any] = {"url": url, "description": description}
        for name, value in (
            ("agent", agent),
            ("run_id", run_id),
            ("events", events),
            ("team", team),
        ):
            if value is not None:
                body[name] = value
        answer = await self._send("POST", "/webhooks", json=body, safe=False)
        return _parse(Webhook, _json(answer))

    async def webhooks(
        self, *, agent: str | None = None, run_id: str | None = None, removed: bool = False
    ) -> list[Webhook]:
        params: dict[str, Any] = {"removed": str(removed).lower()}
        for name, value in (("agent", agent), ("run_id", run_id)):
            if value is not None:
                params[name] = value
        rows = _json(await self._send("GET", "/webhooks", params=params))
        return [_parse(Webhook, w) for w in rows]

    async def unsubscribe(self, subscription_id: int) -> Webhook:
        path = f"/webhooks/{int(subscription_id)}"
        return _parse(Webhook, _json(await self._send("DELETE", path, safe=False)))

    # --- plumbing ------------------------------------------------------------------------------

    async def _decide(self, gate_id: int, decision: str, reason: str) -> Gate:
        path = f"/approvals/{int(gate_id)}/{decision}"
        answer = await self._send("POST", path, json={"reason": reason}, safe=False)
        return _parse(Gate, _json(answer))

    async def _act(self, run_id: str, action: str, **body: Any) -> Run:
        payload = {k: v for k, v in body.items() if v is not None}
        path = f"/runs/{_quote(run_id)}/{action}"
        return _parse(Run, _json(await self._send("POST", path, json=payload, safe=False)))

    async def _send(
        self, method: str, path: str, *, safe: bool = True, **kw: Any
    ) -> httpx.Response:
        """One call; a safe one is retried on a lost connection or a passing refusal."""
        attempt = 0
        while True:
            try:
                answer = await self._http.request(method, path, **kw)
            except httpx.TransportError:
                if not safe or attempt >= self.retries:
                    raise
                await self._pause(attempt, None)
                attempt += 1
                continue
            if answer.status_code < 300:
                return answer
            if answer.status_code < 400:  # a redirect is never followed: a POST would be lost
                raise UnexpectedAnswer(answer)
            if safe and answer.status_code in RETRIED_STATUSES and attempt < self.retries:
                await self._pause(attempt, answer.headers.get("Retry-After"))
                attempt += 1
                continue
            raise _error(answer)

    async def _pause(self, attempt: int, retry_after: str | None) -> None:
        pause = min(self.backoff * 2**attempt, 10.0)
        if retry_after is not None and retry_after.isdigit():
            pause = max(pause, min(float(retry_after), 30.0))
        await asyncio.sleep(pause)


async def _asse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, str]]:
    """``_client._sse`` for an async stream of lines: (event type, data) per event."""
    kind = "message"
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value
