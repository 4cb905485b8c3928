"""The model client interface: a real HTTP round trip to a Messages-API endpoint on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from ledger import transitions
from ledger.examples import agents as examples
from ledger.models import Step
from tests.support.llm_wire import anthropic_events

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


class _Messages(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _Messages.seen.append({"body": body, "key": self.headers["x-api-key"]})
        answer = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": "I approve this refund of 4200 cents."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 40, "output_tokens": 9},
        }
        if body.get("stream"):  # asked while a live reader may follow (ledger.live), as the API
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for name, data in anthropic_events(answer):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.close_connection = True
            return
        payload = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def messages_api(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Messages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_port}")
    _Messages.seen.clear()
    yield _Messages.seen
    server.shutdown()


@pytest.mark.parametrize("name", ["refund", "refund_async"])
def test_with_a_key_the_example_agent_asks_a_real_model_once_and_replays_it(
    name, messages_api, execute
) -> None:
    """The sync agent through ``AnthropicClient.complete`` (stdlib HTTP), the async one through
    its ``acomplete`` (the official SDK's ``AsyncAnthropic``): the same request, the same row."""
    assert examples.default_model() == "claude-haiku-4-5"
    run = transitions.run_start(agent=name, inputs={"invoice_id": "inv_1001"})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded" and outcome.result["refunded"] is True
    assert len(messages_api) == 1
    assert messages_api[0]["key"] == "test-key"
    assert "inv_1001" in messages_api[0]["body"]["messages"][0]["content"]
    decide = Step.objects.get(run=run, step_id="decide")
    assert decide.model_id == "claude-haiku-4-5"
    assert decide.result["text"] == "I approve this refund of 4200 cents."
    from ledger.models import Run

    Run.objects.filter(pk=run.run_id).update(status="failed")
    transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
    assert execute(run.run_id).status == "succeeded"
    assert len(messages_api) == 1  # the recorded answer replays; the model is not asked again


def test_without_a_key_the_example_agent_uses_the_scripted_client(monkeypatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("RUNLEDGER_EXAMPLE_MODEL", raising=False)
    assert examples.default_model() == "scripted:refund-decision"
