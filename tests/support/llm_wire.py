"""A model provider on loopback that speaks the wire formats the tool-use loops use.

``POST /v1/messages`` (Anthropic's Messages API: ``tool_use`` blocks, ``tool_result`` blocks)
and ``POST /v1/chat/completions`` (OpenAI's Chat Completions: ``tool_calls``, ``role: tool``).
The official SDKs are pointed at it with ``base_url``; nothing is faked below the HTTP line.

Its "model" follows the refund script of ``ledger.examples.agents.refund_loop``, deciding each
turn from the conversation it is sent (as a real model does): turn 1 fetches every invoice
named (parallel tool calls), turn 2 refunds each from the fetched invoices, turn 3 emails each
customer naming the charge id from the refund results, turn 4 answers in text. It records every
request, and ``fail(status, times)`` answers the next requests with a transient error.
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
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if status != 200:
                self.send_header("retry-after-ms", "20")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
