"""A loopback Messages API that the Claude Agent SDK's bundled CLI talks to (streaming SSE).

The CLI is pointed at it with ``ANTHROPIC_BASE_URL``; nothing is faked below the HTTP line, and
the CLI runs for real (its subprocess, its transcript, its hooks, its in-process MCP tools).
Like ``tests.support.llm_wire``, its "model" decides each turn from the conversation it is sent:
fetch every invoice the first prompt names (parallel tool calls), refund the first one's
customer (``refund_charge``, an effect with a lookup), tell the team naming the charge id
(``notify_team``, an effect without one), then answer in text. It records every request it
answers (``bodies``); ``fail(status, times)`` answers the next requests with an error instead.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.llm_wire import WireModel

PREFIX = "mcp__runledger__"


class ClaudeWire(WireModel):
    """``with ClaudeWire() as model:`` serves on a free port; ``model.env`` is the CLI's env.
    The server of ``tests.support.llm_wire.WireModel`` with this module's answers."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []  # every request, in order
        self.server.RequestHandlerClass = _handler(self)

    @property
    def env(self) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-loopback",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def __enter__(self) -> ClaudeWire:
        super().__enter__()
        return self

    def decisions(self) -> Counter[str]:
        """How often each decision (``fetch``, ``refund``, ``notify``, ``answer``) was made."""
        with self.lock:
            return Counter(decide(body)[0] for body in self.bodies)

    def reply(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        with self.lock:
            self.bodies.append(body)
            turn = len(self.bodies)
        _what, calls = decide(body)
        if not calls:
            return "end_turn", [{"type": "text", "text": what_text(body)}]
        return "tool_use", [
            {
                "type": "tool_use",
                "id": f"toolu_{turn}_{i}",
                "name": wire_name(body, name),
                "input": args,
            }
            for i, (name, args) in enumerate(calls)
        ]


def wire_name(body: dict[str, Any], name: str) -> str:
    """The name the CLI offers tool ``name`` under: runledger's server's, or an author's own
    MCP server's (``mcp__<server>__<name>``)."""
    for offered in body.get("tools") or []:
        if str(offered.get("name", "")).endswith(f"__{name}"):
            return str(offered["name"])
    return PREFIX + name


def seen(body: dict[str, Any]) -> dict[str, list[Any]]:
    """The (non-error) tool results of the conversation, parsed, by tool name."""
    names: dict[str, str] = {}
    out: dict[str, list[Any]] = {}
    for message in body["messages"]:
        content = message["content"]
        if not isinstance(content, list):
            continue
        for block in content:
            if block.get("type") == "tool_use":
                names[block["id"]] = block["name"].split("__")[-1]
            elif block.get("type") == "tool_result" and not block.get("is_error"):
                # The CLI appends its reminders to a tool result as more text parts.
                parts = block["content"]
                texts = [parts] if isinstance(parts, str) else [p.get("text", "") for p in parts]
                for text in texts[:1]:
                    try:
                        value = json.loads(text)
                    except ValueError:
                        continue
                    out.setdefault(names.get(block["tool_use_id"], "?"), []).append(value)
    return out


def first_user(body: dict[str, Any]) -> str:
    for message in body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    return ""


def decide(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    results = seen(body)
    if "fetch_invoice" not in results:
        ids = re.findall(r"inv_\d+", first_user(body))
        return "fetch", [("fetch_invoice", {"invoice_id": i}) for i in ids]
    if "refund_charge" not in results:
        invoice = results["fetch_invoice"][0]
        args = {"customer": invoice["customer"], "amount_cents": invoice["total_cents"]}
        return "refund", [("refund_charge", args)]
    if "notify_team" not in results:
        charge = results["refund_charge"][0]["charge_id"]
        return "notify", [("notify_team", {"channel": "#refunds", "text": f"refunded {charge}"})]
    return "answer", []


def what_text(body: dict[str, Any]) -> str:
    results = seen(body)
    charge = results["refund_charge"][0]["charge_id"]
    return f"Refunded {charge} and told the team."


def _handler(model: ClaudeWire) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length))
            if not self.path.startswith("/v1/messages"):
                self.send_response(404)
                self.end_headers()
                return
            with model.lock:
                status = model.failures.pop(0) if model.failures else 0
            if status:
                self._fail(status)
                return
            stop, content = model.reply(body)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            n = len(model.bodies)
            self._event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": f"msg_{n}",
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", "claude"),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": 1},
                    },
                },
            )
            for i, block in enumerate(content):
                start: dict[str, Any]
                if block["type"] == "text":
                    start = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": block["text"]}
                else:
                    start = {**block, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": start},
                )
                self._event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                )
                self._event("content_block_stop", {"type": "content_block_stop", "index": i})
            self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 25},
                },
            )
            self._event("message_stop", {"type": "message_stop"})

        def _fail(self, status: int) -> None:
            kind = "overloaded_error" if status >= 500 else "invalid_request_error"
            data = json.dumps({"type": "error", "error": {"type": kind, "message": "refused"}})
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def _event(self, name: str, data: dict[str, Any]) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
