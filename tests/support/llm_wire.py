"""A model provider on loopback that speaks the wire formats the tool-use loops use.

``POST /v1/messages`` (Anthropic's Messages API: ``tool_use`` blocks, ``tool_result`` blocks)
and ``POST /v1/chat/completions`` (OpenAI's Chat Completions: ``tool_calls``, ``role: tool``).
The official SDKs are pointed at it with ``base_url``; nothing is faked below the HTTP line.

Its "model" follows the refund script of ``ledger.examples.agents.refund_loop``, deciding each
turn from the conversation it is sent (as a real model does): turn 1 fetches every invoice
named (parallel tool calls), turn 2 refunds each from the fetched invoices, turn 3 emails each
customer naming the charge id from the refund results, turn 4 answers in text. It records every
request, and ``fail(status, times)`` answers the next requests with a transient error.

A request with ``stream: true`` is answered as the provider streams (Server-Sent Events: the
Messages API's ``message_start`` … ``content_block_delta`` … ``message_stop``; Chat Completions'
``chat.completion.chunk`` lines and ``[DONE]``), the text a word per event. ``hold()`` makes
the server stop after the first piece of text of the next streamed answer until ``release()``,
so a test can see a piece arrive while the model call is still in progress.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
RATE_LIMITED = {"error": {"message": "Rate limit reached", "type": "requests", "code": None}}


class WireModel:
    """The loopback server; ``with WireModel() as model:`` serves on a free port."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.failures: list[int] = []
        self.lock = threading.Lock()
        self.streamed = 0  # answers sent as streams
        self.holding = threading.Event()  # set: stop after the next stream's first piece
        self.released = threading.Event()
        self.paused = threading.Event()  # set once a held stream is stopped at its first piece
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> WireModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, status: int, times: int = 1) -> None:
        with self.lock:
            self.failures.extend([status] * times)

    def hold(self) -> None:
        self.released.clear()
        self.paused.clear()
        self.holding.set()

    def release(self) -> None:
        self.holding.clear()
        self.released.set()

    def turns_asked(self) -> Counter[int]:
        """How often each turn (1, 2, …) was answered, transient errors not counted."""
        with self.lock:
            return Counter(turn_of(api, body) for api, body in self.requests)

    # --- answering ---------------------------------------------------------------------------

    def answer(self, api: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.failures:
                status = self.failures.pop(0)
                return status, OVERLOADED if api == "anthropic" else RATE_LIMITED
            self.requests.append((api, body))
        turn = turn_of(api, body)
        calls = script(turn, first_user(api, body), results_of(api, body))
        return 200, (anthropic_message if api == "anthropic" else openai_completion)(
            body, turn, calls
        )


def script(turn: int, user: str, results: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """The refund script: the tool calls of ``turn`` (none: the final answer)."""
    if turn == 1:
        return [("fetch_invoice", {"invoice_id": i}) for i in re.findall(r"inv_\d+", user)]
    if turn == 2:
        return [
            ("refund_charge", {"customer": r["customer"], "amount_cents": r["total_cents"]})
            for r in results
        ]
    if turn == 3:
        return [
            (
                "send_email",
                {
                    "to": f"{r['customer']}@example.com",
                    "subject": "Your refund",
                    "body": f"We refunded you ({r['charge_id']}).",
                },
            )
            for r in results
        ]
    return []


def turn_of(api: str, body: dict[str, Any]) -> int:
    return 1 + sum(1 for m in body["messages"] if m["role"] == "assistant")


def first_user(api: str, body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def results_of(api: str, body: dict[str, Any]) -> list[Any]:
    """The tool results handed back since the model's last turn, parsed from their JSON."""
    messages = body["messages"]
    if api == "anthropic":
        last = messages[-1]["content"]
        texts = [b["content"] for b in last if isinstance(b, dict) and b["type"] == "tool_result"]
    else:
        texts = []
        for m in reversed(messages):
            if m["role"] != "tool":
                break
            texts.insert(0, m["content"])
    return [json.loads(t) for t in texts]


def _usage(body: dict[str, Any]) -> tuple[int, int]:
    return len(json.dumps(body["messages"])) // 4, 25


def anthropic_message(
    body: dict[str, Any], turn: int, calls: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": f"Turn {turn}."}]
    content += [
        {"type": "tool_use", "id": f"toolu_{turn}_{i}", "name": name, "input": args}
        for i, (name, args) in enumerate(calls)
    ]
    if not calls:
        content = [{"type": "text", "text": "Refunded and emailed every customer."}]
    tokens_in, tokens_out = _usage(body)
    return {
        "id": f"msg_{turn}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
    }


def openai_completion(
    body: dict[str, Any], turn: int, calls: list[tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{turn}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ]
    else:
        message["content"] = "Refunded and emailed every customer."
    tokens_in, tokens_out = _usage(body)
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1764547200,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        },
    }


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [text]


def anthropic_events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The Messages API's stream of ``message``: (event name, data) in order."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, block in enumerate(message["content"]):
        opened: dict[str, Any]
        deltas: list[dict[str, Any]]
        if block["type"] == "text":
            opened, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": w} for w in _words(block["text"])],
            )
        else:
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": opened},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    end = {
        "type": "message_delta",
        "delta": stop,
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    events += [("message_delta", end), ("message_stop", {"type": "message_stop"})]
    return events


def openai_chunks(completion: dict[str, Any], *, usage: bool) -> list[dict[str, Any]]:
    """Chat Completions' stream of ``completion``: its chunks in order (the usage last)."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {
        "object": "chat.completion.chunk"
    }
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": w}) for w in _words(message["content"] or "") if w]
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **call}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


def _handler(model: WireModel) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length))
            if self.path == "/v1/messages":
                status, payload = model.answer("anthropic", body)
            elif self.path == "/v1/chat/completions":
                status, payload = model.answer("openai", body)
            else:
                status, payload = 404, {"error": {"message": f"no route {self.path}"}}
            if status == 200 and body.get("stream"):
                self.stream(body, payload)
                return
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status != 200:
                self.send_header("retry-after-ms", "20")
            self.end_headers()
            self.wfile.write(data)

        def stream(self, body: dict[str, Any], payload: dict[str, Any]) -> None:
            with model.lock:
                model.streamed += 1
            if self.path == "/v1/messages":
                lines = [
                    f"event: {name}\ndata: {json.dumps(data)}\n\n"
                    for name, data in anthropic_events(payload)
                ]
                texts = [n == "content_block_delta" and d["delta"]["type"] == "text_delta"
                         for n, d in anthropic_events(payload)]  # fmt: skip
            else:
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                chunks = openai_chunks(payload, usage=usage)
                lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
                texts = [bool(c["choices"] and c["choices"][0]["delta"].get("content"))
                         for c in chunks] + [False]  # fmt: skip
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.end_headers()
            held = model.holding.is_set()
            for line, text in zip(lines, texts, strict=True):
                self.wfile.write(line.encode())
                self.wfile.flush()
                if text and held:
                    held = False
                    model.paused.set()
                    model.released.wait(timeout=300)
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
