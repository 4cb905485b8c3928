"""OpenTelemetry traces of runs: one trace per run, a span per execution and per executed step.

An observer of the ledger's events (``ledger.observe``), subscribed when ``RUNLEDGER_TRACES``
is on, that turns them into spans through the OpenTelemetry API (a core dependency; the SDK and
the OTLP exporter are the ``otel`` extra):

- the **trace id** is derived from the run id (``trace_ids``): every execution of a run, in any
  worker, after any number of crashes, lands in the same trace, and anyone holding a run id can
  find its trace;
- the **run span** (``run <agent>``, from the run's creation to its end) has an id derived from
  the run id too; its executions are its children from the first, and it is exported once, by
  the execution that finishes the run (a run cancelled while no worker held it has no run span);
- an **execution span** (``execution <agent>``) per claim, from the claim to how it ended
  (``runledger.execution.status``: ``succeeded``, ``needs_attention``, ``lost`` …); a worker
  killed mid-execution never ends its span, so it is not exported — its steps that had ended are;
- a **step span** per executed attempt of a step, child of its execution; a model step follows
  the OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name`` ``chat``,
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``) and carries its
  cost (``runledger.cost_usd``);
- a **replayed step** is not a span: the execution that walked past it records a
  ``step.replayed`` event (with the step id and kind) and counts them
  (``runledger.execution.replayed``), so a trace shows each model call and effect once however
  many times the run was resumed.

The span ids of the run span come from ``RunIdGenerator``, which ``configure`` installs in the
SDK's tracer provider; with a provider of your own (``RUNLEDGER_TRACES=global``) install it
there too, or the run span gets a fresh id and its executions point at a parent that is never
exported. Observers run on the engine's hot path: this one only creates and ends spans (the
SDK's batch processor exports on its own thread).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

log = logging.getLogger(__name__)

TRACER_NAME = "runledger"


def trace_ids(run_id: str) -> tuple[int, int]:
    """(trace id, run span id) of a run: the first 128 and next 64 bits of a hash of its id."""
    digest = hashlib.sha256(f"runledger:{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


_fixed = threading.local()


class RunIdGenerator:
    """The SDK's random ids, except for a run span, whose ids are its run's (``trace_ids``)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        ids = getattr(_fixed, "ids", None)
        return ids[1] if ids is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = getattr(_fixed, "ids", None)
        return ids[0] if ids is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        """W3C's "random" trace flag: a run's trace id is a hash, as good as random, but made."""
        return getattr(_fixed, "ids", None) is None


class RunTracer:
    """The observer: ``tracer`` makes the spans; open execution spans are kept per run id."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self._executions: dict[str, trace.Span] = {}
        self._lock = threading.Lock()

    def __call__(self, event: str, fields: Mapping[str, Any]) -> None:
        handler = _HANDLERS.get(event)
        if handler is not None:
            handler(self, fields)

    def _run_context(self, run_id: str) -> Any:
        trace_id, span_id = trace_ids(run_id)
        parent = SpanContext(
            trace_id=trace_id,
            span_id=span_id,
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(parent))

    def execution_begun(self, f: Mapping[str, Any]) -> None:
        span = self.tracer.start_span(
            f"execution {f['agent']}",
            context=self._run_context(f["run_id"]),
            kind=SpanKind.INTERNAL,
            start_time=_ns(f["at"]),
            attributes={
                "runledger.run_id": f["run_id"],
                "runledger.agent": f["agent"],
                "runledger.execution": f["number"],
                "runledger.worker": f["worker"],
            },
        )
        with self._lock:
            self._executions[f["run_id"]] = span

    def step_replayed(self, f: Mapping[str, Any]) -> None:
        span = self._executions.get(f["run_id"])
        if span is not None:
            span.add_event(
                "step.replayed",
                {"runledger.step_id": f["step_id"], "runledger.step.kind": f["kind"]},
            )

    def step_executed(self, f: Mapping[str, Any]) -> None:
        parent = self._executions.get(f["run_id"])
        context = (
            trace.set_span_in_context(parent)
            if parent is not None
            else self._run_context(f["run_id"])
        )
        model = f["kind"] == "model"
        attributes: dict[str, Any] = {
            "runledger.run_id": f["run_id"],
            "runledger.step_id": f["step_id"],
            "runledger.step.kind": f["kind"],
            "runledger.step.tool": f["tool"],
            "runledger.step.attempt": f["attempt"],
        }
        if model:
            attributes["gen_ai.operation.name"] = "chat"
            attributes["gen_ai.request.model"] = f["model_id"]
            for name, key in (("input_tokens", "tokens_in"), ("output_tokens", "tokens_out")):
                if f[key] is not None:
                    attributes[f"gen_ai.usage.{name}"] = f[key]
            if f["cost_usd"] is not None:
                attributes["runledger.cost_usd"] = float(f["cost_usd"])
        name = f"chat {f['model_id']}" if model else f"{f['kind']} {f['tool'] or f['step_id']}"
        span = self.tracer.start_span(
            name,
            context=context,
            kind=SpanKind.CLIENT if f["kind"] in ("model", "effect", "read") else SpanKind.INTERNAL,
            start_time=_ns(f["began"]),
            attributes=attributes,
        )
        if f["error"]:
            span.set_status(Status(StatusCode.ERROR, f["error"][:500]))
        span.end(end_time=max(_ns(f["ended"]), _ns(f["began"])))

    def execution_ended(self, f: Mapping[str, Any]) -> None:
        with self._lock:
            span = self._executions.pop(f["run_id"], None)
        if span is not None:
            span.set_attribute("runledger.execution.status", f["status"])
            span.set_attribute("runledger.execution.replayed", f["replayed"])
            span.set_attribute("runledger.execution.executed", f["executed"])
            if f["reason"]:
                span.set_attribute("runledger.reason", f["reason"])
            if f["status"] in ("failed", "lost"):
                span.set_status(Status(StatusCode.ERROR, f["reason"] or f["status"]))
            span.end(end_time=_ns(f["at"]))
        if f["final"]:
            self._run_span(f)

    def _run_span(self, f: Mapping[str, Any]) -> None:
        """The run's own span, once it is over, under its derived ids (``RunIdGenerator``)."""
        _fixed.ids = trace_ids(f["run_id"])
        try:
            span = self.tracer.start_span(
                f"run {f['agent']}",
                context=trace.set_span_in_context(trace.INVALID_SPAN),
                kind=SpanKind.INTERNAL,
                start_time=_ns(f["created_at"]),
                attributes={
                    "runledger.run_id": f["run_id"],
                    "runledger.agent": f["agent"],
                    "runledger.run.status": f["status"],
                    "runledger.executions": f["number"],
                },
            )
        finally:
            _fixed.ids = None
        if f["status"] == "failed":
            span.set_status(Status(StatusCode.ERROR, f["reason"] or "failed"))
        span.end(end_time=_ns(f["at"]))


_HANDLERS = {
    "execution_begun": RunTracer.execution_begun,
    "execution_ended": RunTracer.execution_ended,
    "step_executed": RunTracer.step_executed,
    "step_replayed": RunTracer.step_replayed,
}


def configure(mode: str, *, service_name: str = "runledger") -> RunTracer | None:
    """Set tracing up for this process (``RUNLEDGER_TRACES``): ``off`` (nothing), ``otlp`` (the
    SDK with an OTLP/HTTP exporter, configured by the standard ``OTEL_EXPORTER_OTLP_*``
    variables, behind a batch processor), ``global`` (whatever tracer provider the process
    already set, e.g. by ``opentelemetry-instrument``). Returns the observer to subscribe."""
    if mode == "off":
        return None
    if mode == "global":
        return RunTracer(trace.get_tracer(TRACER_NAME))
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "RUNLEDGER_TRACES=otlp needs the OpenTelemetry SDK and its OTLP exporter: "
            "pip install 'runledger[otel]'"
        ) from exc
    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: service_name}),
        id_generator=RunIdGenerator(),  # type: ignore[arg-type]  # the SDK's interface, duck-typed
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return RunTracer(provider.get_tracer(TRACER_NAME))
