"""Logs (JSON lines or plain text), the health probes and the Prometheus metrics."""

from __future__ import annotations

from runs.operations.proxies import parse_networks
from runs.settings import env, sections
from runs.settings.ledger import LEDGER

# Logs: JSON lines by default (runs/operations/logs.py names the fields), plain text for people
# with RUNLEDGER_LOG_FORMAT=plain (the demo sets it). Celery's workers use the same format.
RUNLEDGER_LOG_FORMAT = env.str(
    "RUNLEDGER_LOG_FORMAT",
    "json",
    section=sections.OBSERVE,
    doc="`json` (one JSON object a line, with the run, step and worker of each record) or "
    "`plain` (text for people; the demo's). Celery's workers use the same.",
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "ledger_context": {"()": "runs.operations.logs.LedgerContext"},
        # No credential reaches a log line: ?access_token=rl_… in a request line, a secret.
        "redact": {"()": "runs.operations.logs.RedactSecrets"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s%(context)s %(message)s"},
        "json": {"()": "runs.operations.logs.json_formatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain" if RUNLEDGER_LOG_FORMAT == "plain" else "json",
            "filters": ["ledger_context", "redact"],
        }
    },
    # One handler, on the root: the ledger's and runs' records (at their levels) and everything
    # else (Django's, the libraries', Python's warnings: at WARNING) reach it. Celery's worker
    # and beat replace it with their own handler, in the same format (runs/celery.py).
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "ledger": {
            "level": env.str(
                "LEDGER_LOG_LEVEL",
                "INFO",
                section=sections.OBSERVE,
                doc="The `ledger` logger's level.",
            ),
        },
        "runs": {
            "level": env.str(
                "RUNS_LOG_LEVEL", "INFO", section=sections.OBSERVE, doc="The `runs` logger's level."
            ),
        },
        # Django's own: with DEBUG off its default sends an unhandled error in a view (a 500,
        # django.request with the traceback) only to mail_admins, i.e. nowhere. Here it is a
        # JSON line. 4xx answers are in gunicorn's access log; django.security's warnings stay.
        "django": {"level": "WARNING"},
        "django.request": {"level": "ERROR"},
    },
}

# /readyz warns (never fails: a late sweep is no reason to pull a web node) when the sweep beacon
# is older than this (three sweep intervals and a minute).
RUNLEDGER_READY_SWEEP_LATE_SECONDS = env.float(
    "RUNLEDGER_READY_SWEEP_LATE_SECONDS",
    3 * LEDGER["RUNLEDGER_SWEEP_SECONDS"] + 60,
    section=sections.OBSERVE,
    shown="3 * RUNLEDGER_SWEEP_SECONDS + 60",
    doc="`/readyz` warns when the sweep last ran longer ago than this (the control process or "
    "beat is down); it stays 200: the age is `runledger_sweep_lag_seconds`, alert on that.",
)
RUNLEDGER_READY_BROKER_SECONDS = env.float(
    "RUNLEDGER_READY_BROKER_SECONDS",
    2.0,
    section=sections.OBSERVE,
    doc="How long `/readyz` waits for the broker to accept a connection.",
)
# /metrics is locked by default: a request carries the token, or comes (through a named proxy,
# runs.operations.proxies) from a network opted in below.
RUNLEDGER_METRICS_TOKEN = env.str(
    "RUNLEDGER_METRICS_TOKEN",
    "",
    section=sections.OBSERVE,
    doc="`/metrics` (and `metrics_exporter`) answer requests carrying `Authorization: Bearer "
    "<token>` (Prometheus' `authorization: {credentials: ...}`). Unset, and with no "
    "`RUNLEDGER_METRICS_NETWORKS`, they answer 403 to everyone.",
)
RUNLEDGER_METRICS_NETWORKS = parse_networks(
    env.list(
        "RUNLEDGER_METRICS_NETWORKS",
        [],
        section=sections.OBSERVE,
        doc="Opt-in: comma-separated networks whose clients `/metrics` answers without the "
        "token. Needs `RUNLEDGER_TRUSTED_PROXIES` (the proxy in front, or `none`): the "
        "client's address is the one the trusted proxy forwards, never the proxy's own.",
    ),
    name="RUNLEDGER_METRICS_NETWORKS",
)
# Traces: one OpenTelemetry trace per run (runs.operations.tracing), exported by every process
# that executes runs; the exporter reads the standard OTEL_EXPORTER_OTLP_* variables itself.
RUNLEDGER_TRACES = env.str(
    "RUNLEDGER_TRACES",
    "off",
    section=sections.OBSERVE,
    doc="`off`, `otlp` (OpenTelemetry traces of runs, executions and steps sent over OTLP/HTTP "
    "to `OTEL_EXPORTER_OTLP_ENDPOINT`, default `http://localhost:4318`; needs the `otel` "
    "extra) or `global` (spans go to the tracer provider the process already has, e.g. "
    "`opentelemetry-instrument`'s). Traces are made where runs execute: set it on the workers.",
)
if RUNLEDGER_TRACES not in ("off", "otlp", "global"):
    raise ValueError(f"RUNLEDGER_TRACES={RUNLEDGER_TRACES!r}: say off, otlp or global")
env.declare(
    "PROMETHEUS_MULTIPROC_DIR",
    section=sections.OBSERVE,
    kind="path",
    default="(unset; serve sets RUNLEDGER_VAR_DIR/prometheus)",
    doc="prometheus_client's multiprocess directory: set for several gunicorn workers (and "
    "Celery pool children), so that `/metrics` adds up every process's counters.",
)
