"""The model client interface: how ``ctx.model(...)`` reaches a language model.

A model call is an external read with a non-deterministic answer: the engine hashes its inputs
(model id, system text, prompt, tool schema), stores the output and never asks again for a
recorded step. Clients only have to answer once.

``ScriptedClient`` is deterministic and needs no key: model ids ``scripted:<name>`` are answered
by a function registered with ``script(name)``. Any other model id goes to the real client in
``RUNLEDGER_MODEL_CLIENT`` (see ``AnthropicClient``).

An async agent's ``await ctx.model(...)`` awaits the client's ``acomplete`` (same arguments, same
answer) on the event loop where the client has one — ``AnthropicClient`` does, on the official
SDK's ``AsyncAnthropic`` — and otherwise runs its ``complete`` on a thread.

While a reader may follow the run live (``ledger.live.wanted``), ``AnthropicClient`` asks for
the answer as a stream and hands its text on as it arrives; the answer it returns (and the step
records) is the same whole answer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import urllib.request
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from django.utils.module_loading import import_string

from ledger import live
from ledger.conf import conf

ModelOutput = dict[str, Any]
#: ``fn(prompt, system) -> dict``; an ``async def`` answers async agents only.
Script = Callable[[str, str], Any]

_scripts: dict[str, Script] = {}


class ModelClient(Protocol):
    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        """Return the model's answer as JSON data, e.g. ``{"text": ..., "tool_calls": [...]}``."""
        ...


class AsyncModelClient(ModelClient, Protocol):
    """A client that async agents await: ``acomplete`` answers as ``complete`` does."""

    async def acomplete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput: ...


def script(name: str) -> Callable[[Script], Script]:
    """Register ``fn(prompt, system) -> dict`` as the answer of model id ``scripted:<name>``."""

    def register(fn: Script) -> Script:
        _scripts[name] = fn
        return fn

    return register


class ScriptedClient:
    """Deterministic answers for tests and the demo."""

    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        answer = _script(model)(prompt, system)
        if inspect.isawaitable(answer):
            if inspect.iscoroutine(answer):
                answer.close()
            raise TypeError(f"scripted model {model!r} is an async def: only async agents ask it")
        return answer  # type: ignore[no-any-return]

    async def acomplete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        answer = _script(model)(prompt, system)
        return await answer if inspect.isawaitable(answer) else answer  # type: ignore[no-any-return]


def _script(model: str) -> Script:
    name = model.removeprefix("scripted:")
    fn = _scripts.get(name)
    if fn is None:
        raise LookupError(f"no scripted model named {name!r} (register one with script())")
    return fn


class AnthropicClient:
    """Calls Anthropic's Messages API when ``ANTHROPIC_API_KEY`` is set (stdlib HTTP only)."""

    @property
    def url(self) -> str:
        base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        return base.rstrip("/") + "/v1/messages"

    def complete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        key = _api_key()
        body = _body(model, prompt, system)
        streaming = live.wanted()  # a reader may follow the run: ask for the text as it comes
        if streaming:
            body["stream"] = True
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={
                "x-api-key": key,
                "anthropic-version": "2023-06-01",
                "content-type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            payload = _from_stream(response) if streaming else json.loads(response.read())
        return _answer(payload, model)

    async def acomplete(
        self, *, model: str, prompt: str, system: str, tools: list[dict[str, Any]]
    ) -> ModelOutput:
        """The same request on the official SDK's ``AsyncAnthropic`` (the ``anthropic`` extra),
        awaited on the loop; the same answer, from the response's own JSON. The engine retries
        a failed model step itself, so the SDK does not."""
        try:
            from anthropic import AsyncAnthropic
        except ImportError as exc:  # pragma: no cover - the extra is in the dev environment
            raise RuntimeError(
                "async model calls need the anthropic SDK: pip install 'runledger[anthropic]'"
            ) from exc
        base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        key = _api_key()
        # One SDK client per event loop (and base URL and key), kept: making one builds an
        # HTTP client and its TLS context, tens of milliseconds of CPU on the loop itself,
        # which at hundreds of runs in flight held every other run's step behind it.
        clients = _ASYNC_CLIENTS.setdefault(asyncio.get_running_loop(), {})
        client = clients.get((base, key))
        if client is None:
            client = clients[base, key] = AsyncAnthropic(
                api_key=key,
                base_url=base,
                max_retries=0,
                timeout=120,
                default_headers={"x-api-key": key},  # the Messages API's header, as complete sends
            )
        if live.wanted():  # a reader may follow the run: the text as it comes, the same answer
            async with client.messages.stream(**_body(model, prompt, system)) as stream:
                async for text in stream.text_stream:
                    live.delta(text)
                message = await stream.get_final_message()
            return _answer(message.model_dump(mode="json", exclude_none=True), model)
        raw = await client.messages.with_raw_response.create(**_body(model, prompt, system))
        payload = json.loads(raw.http_response.content)
        return _answer(payload, model)


#: The async SDK clients, per event loop (forgotten with their loop).
_ASYNC_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)


def _api_key() -> str:
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise RuntimeError("ANTHROPIC_API_KEY is not set")
    return key


def _body(model: str, prompt: str, system: str) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 1024,
        "system": system,
        "messages": [{"role": "user", "content": prompt}],
    }


def _from_stream(response: Any) -> dict[str, Any]:
    """The Messages API's answer from its stream (Server-Sent Events, read line by line), each
    piece of text handed to ``ledger.live.delta`` as it arrives: the same fields ``_answer``
    reads from a whole answer (the text blocks, the model, the usage)."""
    payload: dict[str, Any] = {"content": [], "usage": {}}
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        event = json.loads(line[5:])
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            payload["model"] = message.get("model")
            payload["usage"].update(message.get("usage") or {})
        elif kind == "content_block_start":
            payload["content"].append(dict(event.get("content_block") or {}))
        elif kind == "content_block_delta" and event["delta"].get("type") == "text_delta":
            text = event["delta"].get("text", "")
            block = payload["content"][-1]
            block["text"] = block.get("text", "") + text
            live.delta(text)
        elif kind == "message_delta":
            payload["usage"].update(event.get("usage") or {})
        elif kind == "error":
            raise RuntimeError(f"the model's stream failed: {event.get('error')}")
    return payload


def _answer(payload: dict[str, Any], model: str) -> ModelOutput:
    text = "".join(part.get("text", "") for part in payload.get("content", []))
    return {"text": text, "model": payload.get("model", model), "usage": payload.get("usage")}


def client_for(model: str) -> ModelClient:
    if model.startswith("scripted:"):
        return ScriptedClient()
    return import_string(conf.RUNLEDGER_MODEL_CLIENT)()  # type: ignore[no-any-return]
