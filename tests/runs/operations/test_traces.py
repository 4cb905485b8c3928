"""Traces of runs (issue 35, item 5): one OpenTelemetry trace per run, whose id is derived from
the run id; a span per execution and per executed step, model steps in the GenAI semantic
conventions; a step replayed after a crash is an event on the execution that walked past it,
never a second span. First in process (the SDK's in-memory exporter, across a crash and its
replay), then from a real Celery worker to an OTLP/HTTP receiver on loopback that decodes the
protobuf export requests it is sent."""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from harness.cluster import database_url
from ledger import observe, transitions
from ledger.models import Run, Step
from runs.operations.tracing import RunIdGenerator, RunTracer, trace_ids
from tests.support.llm_wire import WireModel
from tests.support.processes import (
    deployment_env,
    manage,
    redis_reachable,
    wait_for,
    worker,
)

pytestmark = pytest.mark.django_db(transaction=True)
LOOP = {"invoice_ids": ["inv_1001", "inv_1003"], "api": "anthropic"}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireModel]:
    with WireModel() as served:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", served.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        yield served


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    provider = TracerProvider(id_generator=RunIdGenerator())
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RunTracer(provider.get_tracer("runledger"))
    observe.subscribe(tracer)
    yield exporter
    observe.unsubscribe(tracer)
    provider.shutdown()


def test_a_run_is_one_trace_across_a_crash_and_its_replay_and_a_replayed_step_is_no_new_span(
    model: WireModel, execute: Any, crash_at: Any, exported: InMemorySpanExporter
) -> None:
    run = transitions.run_start(agent="refund_loop", inputs=LOOP)
    crash_at("charge.after_effect")  # turn 2's first refund sent, its result not recorded
    execute(run.run_id, crash_expected=True)
    assert not [s for s in exported.get_finished_spans() if s.name.startswith("run ")]
    assert execute(run.run_id, worker="worker-2").status == "succeeded"

    spans = exported.get_finished_spans()
    trace_id, run_span_id = trace_ids(run.run_id)
    assert {s.context.trace_id for s in spans} == {trace_id}
    (root,) = [s for s in spans if s.name == "run refund_loop"]
    assert root.context.span_id == run_span_id and root.parent is None
    assert root.attributes["runledger.run.status"] == "succeeded"
    assert root.attributes["runledger.executions"] == 2
    executions = sorted(
        (s for s in spans if s.name == "execution refund_loop"),
        key=lambda s: s.attributes["runledger.execution"],
    )
    assert [e.attributes["runledger.execution.status"] for e in executions] == [
        "lost",
        "succeeded",
    ]
    assert all(e.parent is not None and e.parent.span_id == run_span_id for e in executions)

    # Each model turn is one span, whichever execution asked it; its tokens are the ledger's.
    models = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    rows = {r.step_id: r for r in Step.objects.filter(run_id=run.run_id, kind="model")}
    assert sorted(s.attributes["runledger.step_id"] for s in models) == sorted(rows)
    for span in models:
        row = rows[span.attributes["runledger.step_id"]]
        assert span.name == "chat claude-haiku-4-5"
        assert span.attributes["gen_ai.request.model"] == "claude-haiku-4-5"
        assert span.attributes["gen_ai.usage.input_tokens"] == row.tokens_in
        assert span.attributes["gen_ai.usage.output_tokens"] == row.tokens_out
        assert span.attributes["runledger.cost_usd"] == float(row.cost_usd)
        assert span.parent is not None
        assert span.parent.span_id in {e.context.span_id for e in executions}
    first = executions[0].context.span_id
    asked_before = {"chat.turn.1", "chat.turn.2"}
    assert {
        s.attributes["runledger.step_id"] for s in models if s.parent.span_id == first
    } == asked_before
    # The second execution replayed what the first recorded: events on its span, no spans.
    replayed = [e.attributes["runledger.step_id"] for e in executions[1].events]
    assert asked_before <= set(replayed)
    assert executions[1].attributes["runledger.execution.replayed"] == len(replayed)
    step_spans = [s for s in spans if "runledger.step_id" in s.attributes]
    succeeded = [s.attributes["runledger.step_id"] for s in step_spans if s.status.is_ok]
    assert len(succeeded) == len(set(succeeded))  # no step succeeded twice in the trace
    ledger_steps = set(Step.objects.filter(run_id=run.run_id).values_list("step_id", flat=True))
    assert set(succeeded) <= ledger_steps


class OtlpReceiver:
    """An OTLP/HTTP trace receiver on loopback: decodes each ``POST /v1/traces`` protobuf."""

    def __init__(self) -> None:
        self.spans: list[tuple[bytes, Any]] = []  # (trace id, span) as the wire says
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                encoding = self.headers.get("content-encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            receiver.spans.extend((s.trace_id, s) for s in scope.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def named(self, prefix: str) -> list[Any]:
        with self.lock:
            return [s for _, s in self.spans if s.name.startswith(prefix)]


@pytest.mark.slow
@pytest.mark.skipif(not redis_reachable(), reason="needs Redis on 127.0.0.1:6379")
def test_a_real_worker_sends_a_runs_trace_to_an_otlp_receiver(model: WireModel, tmp_path) -> None:
    receiver = OtlpReceiver()
    receiver.thread.start()
    try:
        env = deployment_env(
            tmp_path,
            DATABASE_URL=database_url(),
            RUNLEDGER_TRACES="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="200",
            OTEL_SERVICE_NAME="runledger-worker",
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="test-key",
        )
        work = worker(env, tmp_path)
        try:
            started = manage(env, "start_run", "refund_loop", "--inputs", json.dumps(LOOP))
            assert started.returncode == 0, started.stderr
            run_id = Run.objects.order_by("-created_at").values_list("run_id", flat=True)[0]
            assert wait_for(lambda: receiver.named("run "), timeout=120), work.output()[-3000:]
        finally:
            work.stop()
    finally:
        receiver.server.shutdown()
    assert Run.objects.get(pk=run_id).status == "succeeded"
    trace_id, run_span_id = trace_ids(run_id)
    (root,) = receiver.named("run refund_loop")
    assert root.trace_id == trace_id.to_bytes(16, "big")
    assert root.span_id == run_span_id.to_bytes(8, "big") and root.parent_span_id == b""
    (execution,) = receiver.named("execution refund_loop")
    assert execution.parent_span_id == root.span_id
    turns = receiver.named("chat ")
    assert len(turns) == 4 and {t.trace_id for t in turns} == {root.trace_id}
    rows = {r.step_id: r for r in Step.objects.filter(run_id=run_id, kind="model")}
    for turn in turns:
        attributes = {a.key: a.value for a in turn.attributes}
        assert turn.parent_span_id == execution.span_id
        row = rows[attributes["runledger.step_id"].string_value]
        assert attributes["gen_ai.request.model"].string_value == "claude-haiku-4-5"
        assert attributes["gen_ai.usage.input_tokens"].int_value == row.tokens_in
        assert attributes["gen_ai.usage.output_tokens"].int_value == row.tokens_out
