"""The Claude adapter's model proxy (``ledger.adapters.claude_model_proxy``) below the CLI: what
a step is hashed over, which answers are whole enough to record, the SSE it answers with, and
its own failure to reach the upstream — over real loopback sockets, without the ledger."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("claude_agent_sdk")

from ledger.adapters import claude_model_proxy as proxy
from tests.support.llm_wire_claude import ClaudeWire

BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.8d1;"},
        {"type": "text", "text": "You refund invoices."},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>\nToday's date is 2026-12-01.\n"},
                {"type": "text", "text": "Refund inv_1001."},
            ],
        }
    ],
    "tools": [{"name": "mcp__runledger__fetch_invoice", "input_schema": {"type": "object"}}],
    "metadata": {"user_id": '{"device_id":"abc","session_id":"s1"}'},
    "max_tokens": 32000,
    "stream": True,
}
HEADERS = {"anthropic-beta": "interleaved-thinking-2025-05-14, claude-code-20250219"}


def test_a_step_is_hashed_over_what_is_asked_not_over_the_executions_noise() -> None:
    today = proxy.request_that_matters(BODY, HEADERS)
    tomorrow = json.loads(
        json.dumps(BODY)
        .replace("2026-12-01", "2026-12-02")
        .replace("abc", "def")
        .replace("2.1.332.8d1", "2.1.332.9e2")
    )
    assert proxy.request_that_matters(tomorrow, HEADERS) == today
    assert today["system"] == [{"type": "text", "text": "You refund invoices."}]
    assert today["betas"] == ["claude-code-20250219", "interleaved-thinking-2025-05-14"]
    assert "metadata" not in today
    # What is asked is kept: another system prompt, model or setting is another request.
    for field, value in [("model", "claude-opus-4-5"), ("max_tokens", 100), ("top_k", 3)]:
        assert proxy.request_that_matters({**BODY, field: value}, HEADERS) != today
    other = {**BODY, "system": [{"type": "text", "text": "You refund nothing."}]}
    assert proxy.request_that_matters(other, HEADERS) != today


def test_only_requests_offering_runledgers_tools_are_the_conversation() -> None:
    assert proxy.offers(BODY, "mcp__runledger__")
    assert not proxy.offers({**BODY, "tools": []}, "mcp__runledger__")  # title generation
    assert not proxy.offers({"messages": []}, "mcp__runledger__")


def events(*names: str) -> list[list[Any]]:
    return [[name, {"type": name}] for name in names]


def test_only_a_whole_successful_answer_is_recorded() -> None:
    whole = events("message_start", "content_block_stop", "message_stop")
    assert proxy.Answer(200, events=whole).complete
    cut_off = events("message_start", "content_block_stop")
    assert not proxy.Answer(200, events=cut_off).complete
    assert "before message_stop" in proxy.Answer(200, events=cut_off).summary()
    failed = [*events("message_start"), ["error", {"type": "error", "error": {"x": 1}}]]
    assert not proxy.Answer(200, events=failed).complete
    assert "error in its stream" in proxy.Answer(200, events=failed).summary()
    assert not proxy.Answer(529, body=b'{"type":"error"}').complete
    message = json.dumps({"type": "message", "content": []}).encode()
    assert proxy.Answer(200, body=message).complete
    assert not proxy.Answer(200, body=b"not json").complete


def test_a_recorded_stream_joins_its_deltas_and_answers_the_same_events_again() -> None:
    def delta(index: int, kind: str, text: str) -> list[Any]:
        field = {"text_delta": "text", "input_json_delta": "partial_json"}[kind]
        return [
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: text}},
        ]

    streamed = [
        ["message_start", {"type": "message_start", "message": {"id": "msg_1"}}],
        ["ping", {"type": "ping"}],
        delta(0, "text_delta", "Refun"),
        delta(0, "text_delta", "ded."),
        delta(1, "input_json_delta", '{"a":'),
        delta(1, "input_json_delta", "1}"),
        ["message_stop", {"type": "message_stop"}],
    ]
    record = proxy.Answer(200, "text/event-stream", events=streamed).record()
    assert [name for name, _ in record["events"]] == [
        "message_start",
        "content_block_delta",
        "content_block_delta",
        "message_stop",
    ]
    assert record["events"][1][1]["delta"] == {"type": "text_delta", "text": "Refunded."}
    assert record["events"][2][1]["delta"]["partial_json"] == '{"a":1}'
    again = proxy.Answer.recorded(json.loads(json.dumps(record))).response()
    assert again.media_type == "text/event-stream"
    assert proxy._parse_sse(iter(bytes(again.body).decode().split("\n"))) == record["events"]


@pytest.fixture
def wire() -> Iterator[ClaudeWire]:
    with ClaudeWire() as served:
        yield served


def test_a_request_is_forwarded_unchanged_and_its_stream_read_whole(wire: ClaudeWire) -> None:
    request = proxy.Forwarded(
        "POST", "/v1/messages", "beta=true", {"x-api-key": "sk-1"}, json.dumps(BODY).encode()
    )
    with httpx.Client() as client:
        answer = proxy.forward(wire.url, request, client)
    assert answer.complete, answer
    assert wire.bodies == [BODY]  # as the CLI sent it, metadata and all
    names = [name for name, _ in answer.events or []]
    assert names[0] == "message_start" and names[-1] == "message_stop"


def test_an_upstream_nobody_answers_is_a_502_saying_so() -> None:
    with socket.socket() as sock:  # a port just freed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    request = proxy.Forwarded("POST", "/v1/messages", "", {}, b"{}")
    with httpx.Client() as client:
        answer = proxy.forward(f"http://127.0.0.1:{port}", request, client)
    assert answer.status == 502 and not answer.complete
    error = json.loads(answer.body)["error"]
    assert error["type"] == "api_error"
    assert f"got no answer from http://127.0.0.1:{port}" in error["message"]
