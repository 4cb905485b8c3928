"""Variables read outside the settings — by gunicorn's configuration, the ``serve`` command, the
model client and the example agents — declared here so that the reference lists them too."""

from __future__ import annotations

from runs.settings import env, sections

env.declare(
    "WEB_CONCURRENCY",
    section=sections.PROCESSES,
    kind="int",
    default="2",
    doc="gunicorn worker processes per web machine (`runs/gunicorn_conf.py`).",
)
env.declare(
    "RUNLEDGER_WEB_TIMEOUT",
    section=sections.PROCESSES,
    kind="int",
    default="30",
    doc="Seconds a gunicorn worker may stay silent before it is restarted (its threads serve "
    "requests; the API's long-poll answers within 60 s).",
)
env.declare(
    "RUNLEDGER_WEB_THREADS",
    section=sections.PROCESSES,
    kind="int",
    default="8",
    doc="Threads per gunicorn worker (`gthread`): each serves one request, a long-poll of "
    "`GET /api/v1/runs/{id}/wait` included.",
)
env.declare(
    "RUNLEDGER_ACCESS_LOG",
    section=sections.PROCESSES,
    kind="str",
    default="- (standard output)",
    doc="Where gunicorn writes its access log; empty: none.",
)
env.declare(
    "FORWARDED_ALLOW_IPS",
    section=sections.PROCESSES,
    kind="list",
    default="127.0.0.1, ::1",
    doc="The proxies gunicorn trusts for `X-Forwarded-*` headers.",
)
env.declare(
    "HOST",
    section=sections.PROCESSES,
    kind="str",
    default="127.0.0.1",
    doc="The address `serve` (and the demo) bind the web server to.",
)
env.declare(
    "PORT",
    section=sections.PROCESSES,
    kind="int",
    default="8000",
    doc="The port `serve` (and the demo) bind the web server to.",
)
env.declare(
    "RUNLEDGER_WORKER_CONCURRENCY",
    section=sections.PROCESSES,
    kind="int",
    default="4",
    doc="Pool processes of the Celery worker that `serve` starts.",
)
env.declare(
    "RUNLEDGER_STOP_SECONDS",
    section=sections.PROCESSES,
    kind="float",
    default="30",
    doc="How long `serve` waits for its processes to stop after Ctrl-C before it kills them.",
)
env.declare(
    "ANTHROPIC_API_KEY",
    section=sections.MODELS,
    kind="str",
    default="(empty)",
    doc="The key `ledger.llm.AnthropicClient` (the default model client) sends.",
)
env.declare(
    "ANTHROPIC_BASE_URL",
    section=sections.MODELS,
    kind="str",
    default="https://api.anthropic.com",
    doc="Where `ledger.llm.AnthropicClient` sends its requests.",
)
for name, doc in (
    ("RUNLEDGER_EXAMPLE_PROMPT", "The example refund agent's prompt version (`1` or `2`)."),
    ("RUNLEDGER_EXAMPLE_PLAN", "The example renewal agent's plan version."),
    ("RUNLEDGER_EXAMPLE_MODEL", "The model the example agents ask (default: a scripted one)."),
    ("RUNLEDGER_PROVIDER_LOOKUP", "`down`: the example payment provider's lookup API fails."),
):
    env.declare(name, section=sections.EQUIPMENT, kind="str", default="(unset)", doc=doc)
