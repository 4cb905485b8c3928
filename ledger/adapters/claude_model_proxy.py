"""The loopback Messages API proxy that makes a Claude session's model requests ledger steps.

The Claude Agent SDK's bundled CLI talks to the Messages API itself; ``run_session`` points it
(``ANTHROPIC_BASE_URL``) at this proxy, which the session owns: a Starlette app served by uvicorn
on 127.0.0.1 in the session's event loop. Each request of the session's main conversation (a
``POST /v1/messages`` offering one of runledger's tools) is handed to the run's thread, where it
becomes a model step (``claude.model.<n>``, the n-th such request of the session):

- recorded: answered from the ledger, never asked again (a changed request is a stale step);
- new: forwarded to the configured upstream (the base URL the session would have used); the
  whole answer is read, then recorded, then sent to the CLI — so the CLI never acts on an
  answer the ledger does not hold, and a crash before the commit asks again;
- an upstream error (4xx/5xx, an ``error`` event in the stream, a cut-off stream) is relayed
  to the CLI as the upstream sent it and records nothing: the CLI retries what it retries, and
  its request, asked again, is the same step.

Every other request (the CLI's side requests: title generation, token counting, anything that
does not offer runledger's tools) is passed through unrecorded; those are not durable.

This module knows HTTP, not the ledger: ``ledger.adapters.claude_agent_sdk`` gives it the
function that turns a main-conversation request into an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

DEFAULT_UPSTREAM = "https://api.anthropic.com"
#: How long the proxy waits for an upstream answer (the CLI's own request timeout).
UPSTREAM_TIMEOUT = 600.0
#: Headers never copied between the CLI and the upstream (hop-by-hop, or recomputed).
_DROP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "accept-encoding"}
)
#: The CLI's attribution block in the system prompt (its version and a fingerprint).
_BILLING = "x-anthropic-billing-header:"
#: The date the CLI tells the model in a reminder; a crash across midnight must not move it.
_DATE = re.compile(r"(Today's date is (?:now )?)\d{4}-\d{2}-\d{2}")
#: Concatenated when consecutive deltas of one content block repeat them (``_compact``).
_DELTA_TEXT = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}


# --- what of a request the step is hashed over ------------------------------------------------


def request_that_matters(body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """The part of a Messages API request that decides the answer: the step's inputs.

    Everything the CLI sends is kept (model, system prompt, messages, tools, tool choice,
    ``max_tokens``, thinking, temperature, context management, ``stream``, and the beta features
    of the ``anthropic-beta`` header), except what changes from one execution of the same
    session to the next without changing what is asked: ``metadata`` (the CLI's per-machine
    device id and per-execution session id), the system prompt's attribution block
    (``x-anthropic-billing-header: cc_version=…``) and the date in the CLI's "Today's date is"
    reminder. A field this list does not know is kept: a change it makes is a stale step, not a
    silently wrong replay.
    """
    kept = {k: v for k, v in body.items() if k != "metadata"}
    system = kept.get("system")
    if isinstance(system, list):
        kept["system"] = [
            block
            for block in system
            if not (isinstance(block, dict) and str(block.get("text", "")).startswith(_BILLING))
        ]
    if "messages" in kept:
        kept["messages"] = _undated(kept["messages"])
    betas = sorted(b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip())
    if betas:
        kept["betas"] = betas
    return kept


def _undated(value: Any) -> Any:
    if isinstance(value, str):
        return _DATE.sub(r"\1<date>", value)
    if isinstance(value, list):
        return [_undated(v) for v in value]
    if isinstance(value, dict):
        return {k: _undated(v) for k, v in value.items()}
    return value


def offers(body: Mapping[str, Any], prefix: str) -> bool:
    """Whether a request offers one of the tools whose names start with ``prefix``: the mark of
    the session's main conversation (the CLI's side requests offer no tools)."""
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(t, dict) and str(t.get("name", "")).startswith(prefix) for t in tools
    )


# --- answers ----------------------------------------------------------------------------------


@dataclass
class Answer:
    """What the proxy sends back to the CLI: a status, and SSE events or a body."""

    status: int
    content_type: str = "application/json"
    body: bytes = b""
    events: list[list[Any]] | None = None  # [[event name, data], ...] for a stream
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """A whole, successful answer (the only kind recorded as a step)."""
        if self.status != 200:
            return False
        if self.events is not None:
            names = [name for name, _data in self.events]
            return "error" not in names and bool(names) and names[-1] == "message_stop"
        try:
            data = json.loads(self.body)
        except ValueError:
            return False
        return isinstance(data, dict) and data.get("type") == "message"

    def record(self) -> dict[str, Any]:
        """The answer as the step's result (JSON): the events of a stream, or the message."""
        if self.events is not None:
            return {"stream": True, "events": _compact(self.events)}
        return {"stream": False, "message": json.loads(self.body)}

    @classmethod
    def recorded(cls, result: Mapping[str, Any]) -> Answer:
        """The answer a recorded step gives the CLI: the same events (or message) again."""
        if result.get("stream"):
            return cls(200, "text/event-stream", events=[list(e) for e in result["events"]])
        return cls(200, body=_json_bytes(result["message"]))

    def summary(self) -> str:
        """What went wrong, in one line, for the run's error (an answer that is not complete)."""
        if self.events is not None:
            errors = [data for name, data in self.events if name == "error"]
            if errors:
                return f"the model's API sent an error in its stream: {_short(errors[0])}"
            if self.status == 200:
                return "the model's API ended its stream before message_stop"
        return f"the model's API answered {self.status}: {_short(self.body)}"

    def response(self) -> Response:
        if self.events is not None:
            content = b"".join(_sse(name, data) for name, data in self.events)
            return Response(content, self.status, self.headers, media_type="text/event-stream")
        return Response(self.body, self.status, self.headers, media_type=self.content_type)


def error_answer(status: int, kind: str, message: str) -> Answer:
    """An answer in the Messages API's error shape (``invalid_request_error`` is not retried
    by the CLI; ``api_error`` on a 5xx is)."""
    return Answer(
        status, body=_json_bytes({"type": "error", "error": {"type": kind, "message": message}})
    )


def _compact(events: Iterable[list[Any]]) -> list[list[Any]]:
    """Drop ``ping``s and join consecutive text/JSON/thinking deltas of one content block: the
    same answer in fewer events (a long answer streams one event per few tokens)."""
    out: list[list[Any]] = []
    for name, data in events:
        if name == "ping":
            continue
        last = out[-1][1] if out else None
        if (
            name == "content_block_delta"
            and isinstance(last, dict)
            and out[-1][0] == "content_block_delta"
            and last.get("index") == data.get("index")
            and last["delta"].get("type") == data["delta"].get("type") in _DELTA_TEXT
        ):
            key = _DELTA_TEXT[data["delta"]["type"]]
            joined = {**last["delta"], key: last["delta"][key] + data["delta"][key]}
            out[-1] = [name, {**last, "delta": joined}]
            continue
        out.append([name, data])
    return out


def _sse(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _json_bytes(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _short(value: Any) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else json.dumps(value)
    return text if len(text) <= 500 else f"{text[:500]}…"


def _parse_sse(lines: Iterator[str]) -> list[list[Any]]:
    """The events of a ``text/event-stream`` body: [[event name, parsed data], ...]."""
    events: list[list[Any]] = []
    name, data = "", list[str]()
    for line in lines:
        if line == "":
            if data:
                payload = "\n".join(data)
                try:
                    parsed: Any = json.loads(payload)
                except ValueError:
                    parsed = payload
                kind = parsed.get("type") if isinstance(parsed, dict) else None
                events.append([name or kind or "message", parsed])
            name, data = "", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return events


# --- forwarding ---------------------------------------------------------------------------------


@dataclass
class Forwarded:
    """One request as the CLI sent it, to be sent on unchanged."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


def forward(upstream: str, request: Forwarded, client: httpx.Client) -> Answer:
    """Send ``request`` to ``upstream`` and read the whole answer (blocking: the run's thread
    or a worker thread calls it). The proxy's own failure to get an answer (unreachable, timed
    out, cut off) is a 502 in the API's error shape, saying so."""
    url = upstream.rstrip("/") + request.path + (f"?{request.query}" if request.query else "")
    try:
        with client.stream(
            request.method, url, headers=request.headers, content=request.body
        ) as response:
            kind = response.headers.get("content-type", "")
            headers = {
                k: v
                for k, v in response.headers.items()
                if k.lower() in ("request-id", "retry-after")
            }
            if kind.startswith("text/event-stream"):
                events = _parse_sse(response.iter_lines())
                return Answer(response.status_code, kind, events=events, headers=headers)
            return Answer(
                response.status_code, kind or "application/json", response.read(), headers=headers
            )
    except httpx.HTTPError as exc:
        return error_answer(
            502,
            "api_error",
            f"runledger's model proxy got no answer from {upstream}: {type(exc).__name__}: {exc}",
        )


def forwardable(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {k: v for k, v in headers if k.lower() not in _DROP}


# --- the server ---------------------------------------------------------------------------------

#: Turns a main-conversation request (the request, its parsed body) into the CLI's answer.
OnStep = Callable[[Forwarded, dict[str, Any]], Awaitable[Answer]]


class ModelProxy:
    """The session's proxy: ``async with ModelProxy(...).serving() as url:``."""

    def __init__(
        self, *, upstream: str, tool_prefix: str, on_step: OnStep, pass_through: bool = True
    ) -> None:
        self.upstream = upstream
        self.tool_prefix = tool_prefix
        self.on_step = on_step
        self.pass_through = pass_through  # False in a dry replay: nothing leaves the machine
        self.passed_through = 0  # side requests sent on unrecorded
        self.client = httpx.Client(timeout=httpx.Timeout(UPSTREAM_TIMEOUT, connect=30.0))
        route = Route("/{path:path}", self._handle, methods=["GET", "POST", "PUT", "DELETE"])
        self.app = Starlette(routes=[route])

    async def _handle(self, request: Request) -> Response:
        call = Forwarded(
            method=request.method,
            path=request.url.path,
            query=request.url.query,
            headers=forwardable(request.headers.items()),
            body=await request.body(),
        )
        parsed = _json_object(call.body) if call.method == "POST" else None
        if call.path == "/v1/messages" and parsed is not None and offers(parsed, self.tool_prefix):
            answer = await self.on_step(call, parsed)
        elif not self.pass_through:
            answer = error_answer(
                400, "invalid_request_error", "runledger's model proxy: not sent in a dry replay"
            )
        else:
            self.passed_through += 1
            answer = await asyncio.to_thread(forward, self.upstream, call, self.client)
        return answer.response()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Serve on a free loopback port for the block; yields the base URL."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()  # raises the server's own failure
                    raise RuntimeError("runledger's model proxy stopped before it started")
                await asyncio.sleep(0.01)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await task
            sock.close()
            self.client.close()


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
