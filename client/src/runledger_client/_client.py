"""The Python client of runledger's HTTP API (``/api/v1/``): Django-free, on httpx.

Install ``runledger-client`` (or ``runledger[client]`` beside the server)::

    from runledger_client import Client   # or: from ledger.client import Client

    runledger = Client("https://runs.example.com", token="rl_…")
    run = runledger.start("refund", {"invoice_id": "inv_1"}, idempotency_key="dispute-981")
    runs = runledger.start_many(                      # up to 1,000 in one request
        [{"agent": "refund", "inputs": {"invoice_id": i}, "idempotency_key": i} for i in ids]
    )
    done = runledger.wait(run.run_id, timeout=300)     # long-polls until it settles
    done = runledger.run("refund", {"invoice_id": "inv_2"}, timeout=60)  # start and wait
    for event in runledger.stream(run.run_id):         # what the agent emits, as it comes
        print(event.kind, event.data)                  # resumable: last_event_id=event.id
    refund = runledger.result(run.run_id)             # its result, or RunFailed/RunCancelled/…

Approval gates (``approvals``, ``approve``, ``reject``: a person's approver token), pauses
(``pauses``, ``pause``, ``lift``), a run's ``executions`` and each step's failed attempts
(``steps``), ``accept_stale``, and webhook subscriptions (``subscribe``, ``webhooks``,
``unsubscribe``, or ``start(..., webhooks=[...])``) are here too; ``verify_webhook`` checks a
delivery's Standard Webhooks signature in the application's endpoint::

    from runledger_client import verify_webhook

    event = verify_webhook(request.body, request.headers, secret)  # or WebhookVerificationError

Safe calls are retried on a lost connection, a 502/503/504 and a 429 (after ``Retry-After``):
every GET, and ``start`` and ``start_many``, which always send an idempotency key per run (one
is made when none is given) so that a retried start is the same run. ``cancel``, ``resume`` and
``retry`` are not retried: a retry of one that did happen would be refused as a conflict.

This distribution imports neither Django nor runledger's server: an application's process
needs only httpx and standardwebhooks. ``AsyncClient`` (``runledger_client._async``) has the
same methods, awaited.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

import httpx

from runledger_client.webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "Agent",
    "ApiError",
    "AttemptFailure",
    "Busy",
    "Client",
    "Conflict",
    "Execution",
    "Forbidden",
    "Gate",
    "InvalidRequest",
    "NotFound",
    "Pause",
    "RateLimited",
    "Run",
    "RunCancelled",
    "RunFailed",
    "RunNeedsAttention",
    "RunSummary",
    "SentEvent",
    "Step",
    "StreamEvent",
    "TextDelta",
    "Unauthorized",
    "UnexpectedAnswer",
    "Webhook",
    "WebhookVerificationError",
    "verify_webhook",
]

#: The server answers a long-poll after at most this many seconds.
MAX_WAIT = 60.0
RETRIED_STATUSES = frozenset({429, 502, 503, 504})
#: The most runs one ``start_many`` call starts (the server's limit too).
MAX_BATCH = 1000


# --- typed answers ---------------------------------------------------------------------------

T = TypeVar("T")


def _parse(cls: type[T], data: dict[str, Any]) -> T:
    """An answer's fields into the dataclass (unknown fields ignored: a newer server may add)."""
    kwargs = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        if f.type in ("datetime", "datetime | None") and isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        kwargs[f.name] = value
    return cls(**kwargs)


@dataclass(frozen=True)
class Run:
    run_id: str
    agent: str
    status: str
    #: The team the run belongs to (who may see and act on it; "" from an older server).
    team: str = ""
    reason: str = ""
    detail: str = ""
    title: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    inputs: Any = None
    result: Any = None
    error: str = ""
    idempotency_key: str | None = None
    concurrency_key: str = ""
    concurrency_limit: int = 0
    priority: int = 0
    not_before: datetime | None = None
    deadline_at: datetime | None = None
    #: The schedule whose tick started the run ("" for none).
    schedule: str = ""
    plan_version: str = ""
    resume_count: int = 0
    max_resumes: int = 0
    version: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    finished: bool = False
    settled: bool = False
    links: dict[str, str] = field(default_factory=dict)
    #: True when this answer's start made the run (201), False when it existed (200).
    created: bool | None = None
    #: The per-run subscriptions a start made, each with its ``secret`` (shown once).
    webhooks: list[Webhook] = field(default_factory=list)


@dataclass(frozen=True)
class StreamEvent:
    """One event of a run's stream (what its agent emitted with ``ctx.emit``); ``id`` is what
    a reader resumes after (``stream(run_id, last_event_id=event.id)``)."""

    id: int
    kind: str
    data: Any = None
    step_id: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class TextDelta:
    """A piece of a model's answer as it arrives (``stream(run_id, live=True)``): live only —
    not stored, no id, never seen again on a reconnect; the model step records the whole
    answer."""

    step_id: str
    text: str


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    agent: str
    status: str
    team: str = ""
    reason: str = ""
    title: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    created_at: datetime | None = None
    status_changed_at: datetime | None = None


@dataclass(frozen=True)
class AttemptFailure:
    """One failed attempt of a step: the exception, its capped traceback, what came next."""

    step_id: str
    attempt: int | None = None
    at: datetime | None = None
    type: str = ""
    message: str = ""
    traceback: str = ""
    retry_at: datetime | None = None
    retry_after: float | None = None
    final: bool = False
    why: str = ""


@dataclass(frozen=True)
class Step:
    id: int
    step_id: str
    seq: int
    kind: str
    status: str
    tool: str = ""
    attempt: int = 1
    version: int = 1
    effect_key: str | None = None
    result: Any = None
    error: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    failures: list[AttemptFailure] = field(default_factory=list)


@dataclass(frozen=True)
class Execution:
    """One execution of a run, claim to end: which worker, when, how it ended."""

    number: int
    worker: str
    ending: str
    started_at: datetime | None = None
    ended_at: datetime | None = None
    seconds: float | None = None
    ending_label: str = ""
    host: str = ""
    pid: int | None = None
    task_id: str = ""
    reason: str = ""
    step_id: str = ""
    replayed: int = 0
    executed: int = 0
    error: str = ""


@dataclass(frozen=True)
class Gate:
    """An approval gate: the exact canonical arguments (``arguments_text``) and their digest."""

    id: int
    run_id: str
    step_id: str
    tool: str
    status: str
    arguments: Any = None
    arguments_text: str = ""
    digest: str = ""
    approvers_required: int = 1
    approved_by: list[str] = field(default_factory=list)
    on_reject: str = "raise"
    created_at: datetime | None = None
    expires_at: datetime | None = None
    decided_by: str = ""
    decided_at: datetime | None = None
    decision_reason: str = ""
    used_at: datetime | None = None
    void_reason: str = ""
    run_status: str = ""
    links: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Pause:
    """A pause of a tool, an agent or a run; ``held``: the runs it holds now."""

    id: int
    scope: str
    target: str
    reason: str = ""
    created_by: str = ""
    created_at: datetime | None = None
    active: bool = True
    held: int = 0
    lifted_by: str = ""
    lifted_at: datetime | None = None
    lift_reason: str = ""
    requeued: int = 0


@dataclass(frozen=True)
class Schedule:
    """A schedule: each tick of ``cron`` (in ``timezone``) or of ``interval`` seconds starts one
    run of ``agent`` with ``inputs``; its runs answer ``schedule == id``."""

    id: str
    name: str
    agent: str
    #: The team of the schedule and of the runs it starts ("" from an older server).
    team: str = ""
    inputs: Any = None
    cron: str | None = None
    interval: int | None = None
    timezone: str = "UTC"
    missed: str = "skip"
    description: str = ""
    priority: int | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    deadline: float | None = None
    next_at: datetime | None = None
    paused: bool = False
    paused_by: str = ""
    last_tick_at: datetime | None = None
    last_run_id: str = ""
    last_error: str = ""
    ticks_skipped: int = 0
    created_by: str = ""
    created_at: datetime | None = None
    removed: bool = False
    removed_by: str = ""
    removed_at: datetime | None = None


@dataclass(frozen=True)
class Webhook:
    """A subscription to completion events; ``secret`` only in the answer that made it."""

    id: int
    url: str
    agent: str = ""
    run_id: str = ""
    #: An agent's subscription: only this team's runs of it ("" every team's).
    team: str = ""
    events: list[str] = field(default_factory=list)
    description: str = ""
    created_by: str = ""
    created_at: datetime | None = None
    removed_by: str = ""
    removed_at: datetime | None = None
    secret: str | None = None


@dataclass(frozen=True)
class SentEvent:
    """An event in a run's mailbox; ``created`` False when its id was sent before."""

    run_id: str
    event_id: str
    name: str
    payload: Any = None
    created: bool = True
    created_at: datetime | None = None
    consumed_step_id: str = ""
    consumed_at: datetime | None = None


@dataclass(frozen=True)
class Agent:
    name: str
    requires: list[str]
    plan_version: str
    description: str = ""
    divergence: str = ""
    tools: list[str] = field(default_factory=list)


# --- errors ------------------------------------------------------------------------------------


class ApiError(Exception):
    """A refusal: ``problem`` is the RFC 9457 document (``type``, ``title``, ``detail``…)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.detail = str(problem.get("detail") or problem.get("title") or "")
        super().__init__(f"{status} {problem.get('title', '')}: {self.detail}")


class InvalidRequest(ApiError):
    """400/413/422: the request was refused as it is (``problem['errors']`` by field path)."""


class Unauthorized(ApiError):
    """401: no token, a wrong one, or a revoked one."""


class Forbidden(ApiError):
    """403: this token's role may not do this."""


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409: the run id or idempotency key was used with other values, or the run moved on."""


class Busy(Conflict):
    """409 ``busy``: another writer held the run (its worker committing a step) past the
    server's wait; nothing was changed. Send the same call again after ``retry_after`` seconds
    (a change is not retried by the client: the caller decides)."""

    @property
    def retry_after(self) -> float:
        return float(self.problem.get("retry_after", 2))


class RateLimited(ApiError):
    """429 after the retries: ``retry_after`` seconds, as the server said."""

    @property
    def retry_after(self) -> float:
        return float(self.problem.get("retry_after", 1))


class UnexpectedAnswer(ApiError):
    """An answer that is not the API's JSON — an HTML page, a redirect, an empty body: the URL
    does not lead to a runledger API as it is (a proxy's error page, a login page, an
    HTTPS-only server asked over plain HTTP). ``status``, ``content_type``, ``location`` (where
    a redirect points) and ``excerpt`` (the start of the body) say what came instead."""

    def __init__(self, answer: httpx.Response) -> None:
        self.url = str(answer.request.url)
        self.content_type = answer.headers.get("Content-Type", "")
        self.location = answer.headers.get("Location")
        self.excerpt = _excerpt(answer.text)
        what = self.content_type.split(";")[0].strip() or "no content type"
        detail = f"{answer.request.method} {self.url} answered {what}, not the API's JSON"
        if self.location is not None:
            detail += f": it redirects to {self.location} (use that address as the client's URL)"
        elif self.excerpt:
            detail += f": {self.excerpt!r}"
        else:
            detail += ": an empty body"
        super().__init__(
            answer.status_code,
            {"title": answer.reason_phrase or "Unexpected answer", "detail": detail},
        )


_ERRORS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
}


class RunNotSucceeded(Exception):
    """``result()`` of a run that did not succeed; ``run`` is the run as read."""

    def __init__(self, run: Run) -> None:
        self.run = run
        super().__init__(f"run {run.run_id} is {run.status}: {run.error or run.detail}")


class RunFailed(RunNotSucceeded):
    pass


class RunCancelled(RunNotSucceeded):
    pass


class RunNeedsAttention(RunNotSucceeded):
    """Stopped until a person acts on the dashboard (``run.reason`` says why)."""


# --- the client --------------------------------------------------------------------------------


class Client:
    """A connection to one runledger. ``retries``: attempts after the first for safe calls;
    ``backoff``: the first pause in seconds (doubling, capped at 10 s)."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retries, self.backoff = retries, backoff
        self._http = httpx.Client(
            base_url=url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=httpx.Timeout(timeout, read=max(timeout, MAX_WAIT + 15)),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- runs ----------------------------------------------------------------------------------

    def start(
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
        """Start a run, or get the run the same key (or run id) already started.

        ``wait`` (at most 60 seconds): the answer comes once the run settled or the wait
        ended (``run()`` starts and waits as long as you like).

        Without ``idempotency_key`` one is made for this call, so its retries are one start;
        give your own (a dispute's id) to make repeated calls of your code one start too.
        ``webhooks=[{"url": …, "events": ["run.succeeded"]}]`` subscribes this run's
        completion events with its start; ``run.webhooks`` holds each with its secret (only
        in the answer that made the run: a repeat subscribes nothing again).
        ``concurrency_key``: at most ``concurrency_limit`` (default 1, or the agent's declared
        limit) runs with this key execute at once across the server's workers; the others
        wait queued and their ``detail`` says why. ``priority`` (0 to 9): taken before older
        queued runs of lower priority. ``start_at`` (an aware datetime or ISO 8601 text): queued
        now, not executed before then. ``deadline`` (seconds, or a time): past it the run
        stops, failed with reason ``deadline``. ``team``: the team the run belongs to (default:
        the token's team, else the agent's declared team, else the server's default team); a
        team the token may not start runs in is ``Forbidden``."""
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
        answer = self._send(
            "POST", "/runs", json=body, headers={"Idempotency-Key": key}, params=params
        )
        data = _json(answer)
        hooks = [_parse(Webhook, w) for w in data.pop("webhooks", None) or []]
        created = data.pop("created", answer.status_code == 201)  # an older server: the status
        return _parse(Run, {**data, "created": created, "webhooks": hooks})

    def send_event(
        self, run_id: str, name: str, payload: Any = None, *, event_id: str | None = None
    ) -> SentEvent:
        """Send the event ``name`` with ``payload`` to a run's mailbox, where its agent's
        ``ctx.wait_for_event(name)`` takes it exactly once. Idempotent by ``event_id``: without
        one, one is made for this call, so its retries are one event; give your own (the
        webhook's delivery id) to make repeated calls of your code one event too. The same id
        with another name or payload is a ``Conflict``; so is a finished run."""
        body = {"name": name, "payload": payload, "event_id": event_id or f"client-{uuid.uuid4()}"}
        answer = self._send("POST", f"/runs/{_quote(run_id)}/events", json=body)
        return _parse(SentEvent, _json(answer))

    def start_many(self, runs: Sequence[Mapping[str, Any]]) -> list[Run]:
        """Start up to 1,000 runs in one request, one transaction and one publish on the
        server; one ``Run`` per item, in order, each with ``created``.

        Each item holds ``start``'s arguments: ``agent``, ``inputs``, ``run_id``,
        ``idempotency_key``, ``title``, ``labels``, ``webhooks``, ``concurrency_key``,
        ``concurrency_limit``, ``priority``, ``team``. An item without an
        ``idempotency_key`` gets one made for this call, so a retried request is the same
        batch. One bad item refuses the whole batch, nothing is written: ``InvalidRequest``
        (422) or ``Conflict`` (409, every bad item a conflict), with ``problem['errors']``
        listing each bad item by ``index``. An empty batch or one over 1,000 is a
        ``ValueError`` before anything is sent."""
        answer = self._send("POST", "/runs/batch", json={"runs": _batch_items(runs)})
        return _batch_runs(_json(answer))

    def get_run(self, run_id: str) -> Run:
        """The run now (``GET /runs/{run_id}``), without waiting; ``NotFound`` if none."""
        return _parse(Run, _json(self._send("GET", f"/runs/{_quote(run_id)}")))

    #: The same as ``get_run`` (its first name).
    get = get_run

    def wait(self, run_id: str, timeout: float = MAX_WAIT) -> Run:
        """The run once it finished or stopped for a person (``run.settled``), or as it is
        after ``timeout`` seconds; long-polls, at most 60 s a request."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            run = _parse(
                Run,
                _json(
                    self._send(
                        "GET",
                        f"/runs/{_quote(run_id)}/wait",
                        params={"timeout": round(min(left, MAX_WAIT), 3)},
                    )
                ),
            )
            if run.settled or time.monotonic() >= deadline:
                return run

    def run(
        self,
        agent: str,
        inputs: Any = None,
        *,
        timeout: float = MAX_WAIT,
        **start: Any,
    ) -> Run:
        """Start a run (``start``'s arguments) and wait for it to settle: the run once it
        finished or stopped for a person (``run.settled``), or as it is after ``timeout``
        seconds. The first ``MAX_WAIT`` seconds are waited in the start's own request
        (``POST /runs?wait=``), the rest by long-polls."""
        deadline = time.monotonic() + timeout
        run = self.start(agent, inputs, wait=min(max(timeout, 0.0), MAX_WAIT), **start)
        left = deadline - time.monotonic()
        if run.settled or left <= 0:
            return run
        return self.wait(run.run_id, timeout=left)

    def stream(
        self, run_id: str, last_event_id: int | None = None, *, live: bool = False
    ) -> Iterator[StreamEvent | TextDelta]:
        """The events the run's agent emits (``ctx.emit``), each once and in order, as they
        come, after ``last_event_id`` (None: from the first); ends when the run settles.
        ``live``: also the model's text as it arrives (``TextDelta``, live only: a piece sent
        while no reader was connected is not seen again).

        Follows ``GET /runs/{run_id}/stream`` (Server-Sent Events) and reconnects after the
        last event seen when the server closes a long stream or the connection drops, so a
        reader sees every event exactly once. ``NotFound`` for an unknown run."""
        after = last_event_id
        attempt = 0
        path = f"/runs/{_quote(run_id)}/stream" + ("?live=true" if live else "")
        while True:
            headers = {"Accept": "text/event-stream"}
            if after is not None:
                headers["Last-Event-ID"] = str(after)
            try:
                with self._http.stream("GET", path, headers=headers) as answer:
                    if answer.status_code in RETRIED_STATUSES and attempt < self.retries:
                        answer.read()
                        self._pause(attempt, answer.headers.get("Retry-After"))
                        attempt += 1
                        continue
                    if answer.status_code >= 300:
                        answer.read()
                        raise (
                            _error(answer)
                            if answer.status_code >= 400
                            else UnexpectedAnswer(answer)
                        )
                    for kind, data in _sse(answer.iter_lines()):
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
                self._pause(attempt, None)
                attempt += 1

    def result(self, run_id: str, timeout: float | None = None) -> Any:
        """The run's result, waiting up to ``timeout`` seconds (None: as long as it takes).
        Raises ``RunFailed``, ``RunCancelled``, ``RunNeedsAttention``, or ``TimeoutError``."""
        while True:
            run = self.wait(run_id, timeout=MAX_WAIT if timeout is None else timeout)
            if run.settled or timeout is not None:
                break
        return _outcome(run, timeout)

    def cancel(self, run_id: str, reason: str, *, seen_version: int | None = None) -> Run:
        return self._act(run_id, "cancel", reason=reason, seen_version=seen_version)

    def resume(
        self,
        run_id: str,
        reason: str,
        *,
        seen_version: int | None = None,
        max_resumes: int | None = None,
    ) -> Run:
        return self._act(
            run_id, "resume", reason=reason, seen_version=seen_version, max_resumes=max_resumes
        )

    def retry(self, run_id: str, reason: str, *, seen_version: int | None = None) -> Run:
        return self._act(run_id, "retry", reason=reason, seen_version=seen_version)

    def runs(self, *, limit: int = 50, **filters: Any) -> Iterator[RunSummary]:
        """Every run matching the dashboard's filters (status, reason, agent, older_than,
        search, order, schedule, team), fetched a page at a time — of the teams the token
        reaches only (the server filters)."""
        params = {k: v for k, v in filters.items() if v is not None}
        params["limit"] = limit
        while True:
            page = _json(self._send("GET", "/runs", params=params))
            for row in page["runs"]:
                yield _parse(RunSummary, row)
            if not page["next_cursor"]:
                return
            params["cursor"] = page["next_cursor"]

    def steps(self, run_id: str) -> list[Step]:
        out: list[Step] = []
        after = 0
        while True:
            page = _json(
                self._send(
                    "GET", f"/runs/{_quote(run_id)}/steps", params={"after": after, "limit": 500}
                )
            )
            out.extend(_step(s) for s in page["steps"])
            if not page["next_cursor"]:
                return out
            after = int(page["next_cursor"])

    def agents(self) -> list[Agent]:
        return [_parse(Agent, a) for a in _json(self._send("GET", "/agents"))]

    def executions(self, run_id: str) -> list[Execution]:
        """The run's executions in order (worker, start, end, how each ended)."""
        rows = _json(self._send("GET", f"/runs/{_quote(run_id)}/executions"))
        return [_parse(Execution, e) for e in rows]

    def accept_stale(
        self,
        run_id: str,
        step: int,
        reason: str,
        *,
        seen_version: int | None = None,
        resume: bool = True,
    ) -> Run:
        """Keep a stale step's stored result (``step``: the step's ``id``) for today's inputs;
        the run is queued when it is stopped on that step. Not retried."""
        payload: dict[str, Any] = {"reason": reason, "resume": resume}
        if seen_version is not None:
            payload["seen_version"] = seen_version
        path = f"/runs/{_quote(run_id)}/steps/{int(step)}/accept-stale"
        return _parse(Run, _json(self._send("POST", path, json=payload, safe=False))["run"])

    # --- approval gates ------------------------------------------------------------------------

    def approvals(self) -> Iterator[Gate]:
        """Every gate waiting for a decision, oldest first (fetched 100 at a time)."""
        page = 1
        while True:
            rows = _json(self._send("GET", "/approvals", params={"page": page}))
            yield from (_parse(Gate, g) for g in rows)
            if len(rows) < 100:
                return
            page += 1

    def approval(self, gate_id: int) -> Gate:
        return _parse(Gate, _json(self._send("GET", f"/approvals/{int(gate_id)}")))

    def approve(self, gate_id: int, reason: str = "") -> Gate:
        """Approve a gate: needs a person's approver token. Not retried (a repeat is a 409)."""
        return self._decide(gate_id, "approve", reason)

    def reject(self, gate_id: int, reason: str) -> Gate:
        return self._decide(gate_id, "reject", reason)

    # --- pauses --------------------------------------------------------------------------------

    def pauses(self, *, active: bool = True) -> list[Pause]:
        rows = _json(self._send("GET", "/pauses", params={"active": str(active).lower()}))
        return [_parse(Pause, p) for p in rows]

    def pause(self, scope: str, target: str, reason: str) -> Pause:
        """Pause a ``tool`` (in every agent), an ``agent`` or a ``run`` by name or id."""
        body = {"scope": scope, "target": target, "reason": reason}
        return _parse(Pause, _json(self._send("POST", "/pauses", json=body, safe=False)))

    def get_pause(self, pause_id: int) -> Pause:
        return _parse(Pause, _json(self._send("GET", f"/pauses/{int(pause_id)}")))

    def lift(self, pause_id: int, reason: str, *, expected: int) -> Pause:
        """Lift a pause, queueing the runs it holds: ``expected`` is the ``held`` count you
        read (a ``Conflict`` when it moved since)."""
        body = {"reason": reason, "expected": expected}
        path = f"/pauses/{int(pause_id)}/lift"
        return _parse(Pause, _json(self._send("POST", path, json=body, safe=False)))

    # --- schedules -----------------------------------------------------------------------------

    def add_schedule(
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
        """Add a schedule: ``cron`` (five fields, in ``timezone``) or ``interval`` seconds;
        ``missed`` is ``skip``, ``once`` or ``each``; ``options``: ``priority``,
        ``concurrency_key``, ``concurrency_limit``, ``deadline``, ``description``, ``reason``,
        ``team`` (the schedule's and its runs'; default the token's, else the agent's).
        Refused (nothing written): ``InvalidRequest`` (422), ``Conflict`` (a name in use)."""
        body = _schedule_body(name, agent, inputs, cron, interval, timezone, missed, options)
        return _parse(Schedule, _json(self._send("POST", "/schedules", json=body, safe=False)))

    def schedules(self, *, removed: bool = False) -> list[Schedule]:
        rows = _json(self._send("GET", "/schedules", params={"removed": str(removed).lower()}))
        return [_parse(Schedule, s) for s in rows]

    def get_schedule(self, schedule: str) -> Schedule:
        """A schedule by its id (``sch_…``) or its live name."""
        return _parse(Schedule, _json(self._send("GET", f"/schedules/{_quote(schedule)}")))

    def pause_schedule(self, schedule: str, reason: str = "") -> Schedule:
        path = f"/schedules/{_quote(schedule)}/pause"
        answer = self._send("POST", path, json={"reason": reason}, safe=False)
        return _parse(Schedule, _json(answer))

    def resume_schedule(self, schedule: str, reason: str = "") -> Schedule:
        path = f"/schedules/{_quote(schedule)}/resume"
        answer = self._send("POST", path, json={"reason": reason}, safe=False)
        return _parse(Schedule, _json(answer))

    def remove_schedule(self, schedule: str) -> Schedule:
        path = f"/schedules/{_quote(schedule)}"
        return _parse(Schedule, _json(self._send("DELETE", path, safe=False)))

    # --- webhook subscriptions -----------------------------------------------------------------

    def subscribe(
        self,
        url: str,
        *,
        agent: str | None = None,
        run_id: str | None = None,
        events: list[str] | None = None,
        description: str = "",
        team: str | None = None,
    ) -> Webhook:
        """Subscribe ``url`` to the completion events of every run of ``agent`` (or of one
        run); the answer's ``secret`` is shown this once: keep it to verify deliveries.
        ``team`` (with ``agent``): only that team's runs (default: the token's team)."""
        body: dict[str, Any] = {"url": url, "description": description}
        for name, value in (
            ("agent", agent),
            ("run_id", run_id),
            ("events", events),
            ("team", team),
        ):
            if value is not None:
                body[name] = value
        return _parse(Webhook, _json(self._send("POST", "/webhooks", json=body, safe=False)))

    def webhooks(
        self, *, agent: str | None = None, run_id: str | None = None, removed: bool = False
    ) -> list[Webhook]:
        params: dict[str, Any] = {"removed": str(removed).lower()}
        for name, value in (("agent", agent), ("run_id", run_id)):
            if value is not None:
                params[name] = value
        return [_parse(Webhook, w) for w in _json(self._send("GET", "/webhooks", params=params))]

    def unsubscribe(self, subscription_id: int) -> Webhook:
        path = f"/webhooks/{int(subscription_id)}"
        return _parse(Webhook, _json(self._send("DELETE", path, safe=False)))

    # --- plumbing ------------------------------------------------------------------------------

    def _decide(self, gate_id: int, decision: str, reason: str) -> Gate:
        path = f"/approvals/{int(gate_id)}/{decision}"
        return _parse(Gate, _json(self._send("POST", path, json={"reason": reason}, safe=False)))

    def _act(self, run_id: str, action: str, **body: Any) -> Run:
        payload = {k: v for k, v in body.items() if v is not None}
        answer = self._send("POST", f"/runs/{_quote(run_id)}/{action}", json=payload, safe=False)
        return _parse(Run, _json(answer))

    def _send(self, method: str, path: str, *, safe: bool = True, **kw: Any) -> httpx.Response:
        """One call; a safe one is retried on a lost connection or a passing refusal."""
        attempt = 0
        while True:
            try:
                answer = self._http.request(method, path, **kw)
            except httpx.TransportError:
                if not safe or attempt >= self.retries:
                    raise
                self._pause(attempt, None)
                attempt += 1
                continue
            if answer.status_code < 300:
                return answer
            if answer.status_code < 400:  # a redirect is never followed: a POST would be lost
                raise UnexpectedAnswer(answer)
            if safe and answer.status_code in RETRIED_STATUSES and attempt < self.retries:
                self._pause(attempt, answer.headers.get("Retry-After"))
                attempt += 1
                continue
            raise _error(answer)

    def _pause(self, attempt: int, retry_after: str | None) -> None:
        pause = min(self.backoff * 2**attempt, 10.0)
        if retry_after is not None and retry_after.isdigit():
            pause = max(pause, min(float(retry_after), 30.0))
        time.sleep(pause)


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """Server-Sent Events from a stream's lines: (event type, data) per event."""
    kind = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield kind, "\n".join(data)
            kind, data = "message", []
            continue
        if line.startswith(":"):
            continue  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value


def _outcome(run: Run, timeout: float | None) -> Any:
    """What ``result`` answers for a run it waited on: the result of a run that succeeded, else
    the exception its state calls for (``TimeoutError`` while it is still going)."""
    if run.status == "succeeded":
        return run.result
    if run.status == "failed":
        raise RunFailed(run)
    if run.status == "cancelled":
        raise RunCancelled(run)
    if run.status == "needs_attention":
        raise RunNeedsAttention(run)
    raise TimeoutError(f"run {run.run_id} is still {run.status} after {timeout} s")


def _event(data: str) -> StreamEvent:
    import json

    return _parse(StreamEvent, json.loads(data))


def _delta(data: str) -> TextDelta:
    import json

    return _parse(TextDelta, json.loads(data))


def _step(data: dict[str, Any]) -> Step:
    failures = [_parse(AttemptFailure, f) for f in data.get("failures") or []]
    return _parse(Step, {**data, "failures": failures})


def _quote(run_id: str) -> str:
    from urllib.parse import quote

    return quote(run_id, safe="")


def _json(answer: httpx.Response) -> Any:
    """The answer's JSON; ``UnexpectedAnswer`` when it has none (an HTML page, an empty body)."""
    try:
        return answer.json()
    except ValueError:  # json.JSONDecodeError, UnicodeDecodeError
        raise UnexpectedAnswer(answer) from None


def _excerpt(text: str, limit: int = 200) -> str:
    """The start of a body on one line (an HTML page's first words, not its whole source)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _error(answer: httpx.Response) -> ApiError:
    try:
        problem = answer.json()
    except ValueError:
        return UnexpectedAnswer(answer)
    if not isinstance(problem, dict):
        return UnexpectedAnswer(answer)
    if answer.status_code in (409, 429) and "Retry-After" in answer.headers:
        problem = {**problem, "retry_after": answer.headers["Retry-After"]}
    cls = _ERRORS.get(answer.status_code, ApiError)
    if cls is Conflict and str(problem.get("type", "")).endswith("/busy"):
        cls = Busy
    return cls(answer.status_code, problem)


def _batch_items(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``start_many``'s request body's runs, each with a key; ``ValueError`` before sending."""
    if isinstance(runs, str | bytes | Mapping) or not isinstance(runs, Sequence):
        raise ValueError("start_many takes a list of runs to start")
    if not 1 <= len(runs) <= MAX_BATCH:
        raise ValueError(
            f"start_many takes 1 to {MAX_BATCH} runs; this batch has {len(runs)} (split it)"
        )
    items = []
    for i, item in enumerate(runs):
        if not isinstance(item, Mapping):
            raise ValueError(f"runs[{i}]: a run to start is a mapping with agent and inputs")
        body = {
            k: v.isoformat() if isinstance(v, datetime) else v
            for k, v in item.items()
            if v is not None
        }
        body.setdefault("inputs", {})
        body.setdefault("idempotency_key", f"client-{uuid.uuid4()}")
        items.append(body)
    return items


def _batch_runs(data: Mapping[str, Any]) -> list[Run]:
    out = []
    for run in data["runs"]:
        hooks = [_parse(Webhook, w) for w in run.pop("webhooks", None) or []]
        out.append(_parse(Run, {**run, "webhooks": hooks}))
    return out


def _schedule_body(
    name: str,
    agent: str,
    inputs: Any,
    cron: str | None,
    interval: int | None,
    timezone: str,
    missed: str,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "agent": agent, "timezone": timezone, "missed": missed}
    body["inputs"] = {} if inputs is None else inputs
    for key, value in (("cron", cron), ("interval", interval), *options.items()):
        if value is not None:
            body[key] = value
    return body
