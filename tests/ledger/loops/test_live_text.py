"""Live model text (issue 33, item 4): the tool-use loops on the real ``anthropic`` and
``openai`` SDKs ask a provider on loopback (``tests/support/llm_wire.py``) for streamed answers
and a client following the run's stream with ``live=True`` sees the text as it arrives — a
piece is read while its model call is still in progress (the provider holds the rest back) —
while each model step is recorded once, whole; a resume's replay of a recorded turn asks and
sends nothing; the pieces are not stored, so a reader that connects later sees none.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection

from harness.cluster import wait_for
from ledger import client as rl
from ledger import transitions, waiting
from ledger.models import Run, Step, StreamEvent
from runs.api import tokens
from tests.support.llm_wire import WireModel

pytest.importorskip("anthropic")
pytest.importorskip("openai")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),  # NOTIFY carries the pieces
]
assert connection

WAIT = 120
#: The first piece of text the resume's reader sees (OpenAI's tool-call turns carry no text).
FIRST_PIECE = {"anthropic": ("chat.turn.2", "Turn "), "openai": ("chat.turn.4", "Refunded ")}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireModel]:
    with WireModel() as served:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", served.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{served.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield served
        served.release()


@pytest.fixture
def api() -> Iterator[rl.Client]:
    """The client, against the API in this process (httpx's WSGI transport into Django)."""
    from django.core.wsgi import get_wsgi_application

    made = tokens.token_create(name="reader", role="viewer")
    transport = httpx.WSGITransport(app=get_wsgi_application())
    with rl.Client("http://testserver", made.secret, transport=transport, backoff=0.05) as client:
        yield client


class Reader(threading.Thread):
    """Follows the run's stream with live text, keeping what it read in order."""

    def __init__(self, client: rl.Client, run_id: str) -> None:
        super().__init__(daemon=True)
        self.client, self.run_id = client, run_id
        self.read: list[Any] = []

    def run(self) -> None:
        try:
            for item in self.client.stream(self.run_id, live=True):
                self.read.append(item)
        finally:
            connection.close()

    def pieces(self) -> list[rl.TextDelta]:
        return [i for i in self.read if isinstance(i, rl.TextDelta)]


def listening(run_id: str) -> bool:
    return run_id in waiting._listener._live  # the reader's stream hears the run's live text


def model_text(api: str, answer: dict[str, Any]) -> str:
    if api == "anthropic":
        return "".join(b.get("text", "") for b in answer["content"] if b["type"] == "text")
    return answer["choices"][0]["message"].get("content") or ""


@pytest.mark.parametrize("api_name", ["anthropic", "openai"])
def test_a_reader_sees_the_text_live_the_step_is_recorded_whole_and_a_replay_sends_none(
    api_name: str, model: WireModel, api: rl.Client, execute: Any, crash_at: Any
) -> None:
    run_id = transitions.run_start(
        agent="refund_loop", inputs={"invoice_ids": ["inv_1001", "inv_1003"], "api": api_name}
    ).run_id
    crash_at("fetch_invoice")  # the first execution dies in turn 1's tools: turn 1 is recorded
    execute(run_id, crash_expected=True)
    assert model.streamed == 1

    reader = Reader(api, run_id)
    reader.start()
    assert wait_for(lambda: listening(run_id), timeout=WAIT)
    model.hold()  # the next streamed answer (turn 2) stops after its first piece of text
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(execute(run_id)), daemon=True)
    worker.start()
    try:
        assert model.paused.wait(WAIT)
        assert wait_for(lambda: reader.pieces(), timeout=WAIT)
        [first] = reader.pieces()
        assert (first.step_id, first.text) == FIRST_PIECE[api_name]
        # Seen while the model call is still in progress: its step is not recorded yet.
        assert not Step.objects.filter(run_id=run_id, step_id=first.step_id).exists()
    finally:
        model.release()
        worker.join(WAIT)
        connection.close()
    reader.join(WAIT)

    assert done and done[0].status == "succeeded", done
    models = {s.step_id: s for s in Step.objects.filter(run_id=run_id, kind="model")}
    assert sorted(models) == ["chat.turn.1", "chat.turn.2", "chat.turn.3", "chat.turn.4"]
    assert {s.attempt for s in models.values()} == {1}  # each recorded once
    said: dict[str, str] = {}
    for piece in reader.pieces():
        said[piece.step_id] = said.get(piece.step_id, "") + piece.text
    # Turn 1 was replayed (no request, no piece); each executed turn's pieces make its answer.
    for step_id, text in said.items():
        assert text == model_text(api_name, models[step_id].result), step_id
    executed = [s for s in models if s != "chat.turn.1" and model_text(api_name, models[s].result)]
    assert sorted(said) == sorted(executed)
    assert dict(model.turns_asked()) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert model.streamed == 4
    assert not StreamEvent.objects.filter(run_id=run_id).exists()  # live text is not stored
    assert Run.objects.get(pk=run_id).result["text"] == "Refunded and emailed every customer."

    later = list(api.stream(run_id, live=True))  # a reader after the fact: nothing live is kept
    assert later == []
