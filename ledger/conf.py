"""The ledger app's settings, each declared once: name, default, type, meaning.

As Django's ``global_settings`` holds Django's defaults, this module holds the ledger's. Code reads
them through one accessor, ``conf``::

    from ledger.conf import conf

    seconds = conf.RUNLEDGER_LEASE_SECONDS

which answers the Django setting of that name when the project's settings define one (so
``override_settings`` and a project's own settings module work) and the declared default
otherwise. The project's settings (``runs.settings``) read each declared name from the
environment variable of the same name (``from_environ``). The documentation's configuration
reference is generated from these declarations, and a test fails when a setting read anywhere is
undeclared.

Importing this module needs no Django settings: the accessor touches them only when read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings  # a lazy object: importing it reads no settings

#: The kinds a declared value may have, and how an environment variable's text becomes one.
KINDS = ("bool", "int", "float", "str", "list")

TRUE = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class Setting:
    """One setting: ``default`` is its value unless ``derive`` computes it from the settings
    declared before it (``default_text`` then says in words what the default is)."""

    name: str
    default: Any
    kind: str
    doc: str
    section: str
    default_text: str = ""
    derive: Callable[[Mapping[str, Any]], Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")
        if not self.doc.strip():
            raise ValueError(f"{self.name}: a setting needs a meaning")

    def parse(self, text: str) -> Any:
        """The value of ``text`` (an environment variable's) as this setting's kind."""
        if self.kind == "bool":
            return text.strip().lower() in TRUE
        if self.kind == "int":
            return int(text)
        if self.kind == "float":
            return float(text)
        if self.kind == "list":
            return [item.strip() for item in text.split(",") if item.strip()]
        return text

    def shown_default(self) -> str:
        """The default as a person reads it in the reference."""
        if self.default_text:
            return self.default_text
        if self.kind == "bool":
            return "on" if self.default else "off"
        if self.kind == "list":
            return ", ".join(self.default) if self.default else "(empty)"
        return str(self.default) if self.default != "" else "(empty)"


WORKERS = "Workers and leases"
ENGINE = "The engine"
AGENTS = "Agents"
OPERATORS = "Operators and settlements"
NOTIFY = "Notifications"
RECOVERY = "Recovery"
ALERTS = "Alerts and paging"

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "RUNLEDGER_AGENT_MODULES",
        [],
        "list",
        "Comma-separated modules imported at start-up so that their `@agent` and `@tool` "
        "decorators register (e.g. `acme_agents.refunds`). Empty by default: a deployment names "
        "its own agents; `make demo` and the tests name `ledger.examples.agents`. A module that "
        "fails to import is logged, and its runs stop with reason `agent_missing`.",
        AGENTS,
    ),
    Setting(
        "RUNLEDGER_EXAMPLE_ASKED",
        "",
        "str",
        "A file the example PydanticAI agent (`ledger.examples.pydantic_agents`) appends one "
        "line to for each model request it really answers, so that the tests and the demo can "
        "count asks per turn across worker processes. Empty: nothing is written. Read from the "
        "environment when the request is made.",
        AGENTS,
    ),
    Setting(
        "RUNLEDGER_MODEL_CLIENT",
        "ledger.llm.AnthropicClient",
        "str",
        "Dotted path of the model client (`ledger.llm.ModelClient`) behind `ctx.model`. Models "
        "named `scripted:<name>` never reach it: they answer from the scripted-model registry.",
        AGENTS,
    ),
    Setting(
        "RUNLEDGER_MODEL_PRICES",
        "",
        "str",
        "Prices of models in US dollars per million tokens, as a JSON object of model id to "
        "`[input, output]` (an id ending in `*` matches by prefix, the longest first), e.g. "
        '`{"claude-sonnet-4*": [3, 15], "my-finetune": [0.5, 1.5]}`. Laid over the shipped '
        "table (`ledger.usage.DEFAULT_PRICES`: Claude and OpenAI models): a model step's cost is "
        "its tokens at its model's price, worked out when it is recorded. A model the table does "
        "not know keeps its tokens and has no cost.",
        AGENTS,
        default_text="(empty: the shipped table)",
    ),
    Setting(
        "RUNLEDGER_DEFAULT_TEAM",
        "default",
        "str",
        "The team of a run whose agent declares none (`@agent(team=...)`) and whose start names "
        "none. Roles, tokens and every page and API answer are scoped by team "
        "(`runs.dashboard.teams`).",
        AGENTS,
    ),
    Setting(
        "RUNLEDGER_DEFAULT_MAX_RESUMES",
        10,
        "int",
        "The resume budget of an agent that sets none: past it a run stops as needs_attention "
        "(reason `budget`) until a person raises it.",
        AGENTS,
    ),
    Setting(
        "RUNLEDGER_MAX_STORED_INPUT_BYTES",
        65536,
        "int",
        "Canonical inputs larger than this are stored as a truncated preview (the input hash "
        "always covers all of them).",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_MAX_STEPS_PER_RUN",
        10000,
        "int",
        "A run's ledger holds at most this many steps: a call that would add one more stops the "
        "run as needs_attention (reason `budget`). Long-lived agents `continue_as_new` first.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN",
        50 * 1024 * 1024,
        "int",
        "The same bound by size: the stored results (canonical JSON bytes) of the steps a run "
        "walked. A new step past it stops the run (`budget`); agents compare "
        "`ctx.history_bytes`.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_PG_PREPARE",
        True,
        "bool",
        "The engine's step writes as server-side prepared statements on PostgreSQL (one parse "
        "and plan per connection). Turn off behind a pooler in transaction mode (PgBouncer "
        "before 1.21).",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_SLEEP_HOLD_SECONDS",
        10.0,
        "float",
        "A `ctx.sleep` (or the rest of one, or a `ctx.wait_for_event` whose timeout ends) due "
        "within this many seconds waits in the worker, which keeps renewing the run's lease. A "
        "longer wait releases the run: it holds no worker slot and no database connection, "
        "costs no resume budget, and is queued again when it is due (or when its event "
        "arrives).",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_EVENT_POLL_SECONDS",
        0.5,
        "float",
        "How often a `ctx.wait_for_event` that waits holding the run (its timeout ends within "
        "RUNLEDGER_SLEEP_HOLD_SECONDS) looks in the run's mailbox again.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_MAX_EVENT_BYTES",
        65536,
        "int",
        "The largest payload (canonical JSON, UTF-8 bytes) an event sent to a run may carry; "
        "a larger one is refused (HTTP 413) and nothing is written.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_RETRY_SLEEP_MAX_SECONDS",
        10.0,
        "float",
        "A tool's retry whose back-off (or `RetryAfter`) is at most this many seconds waits "
        "asleep in the worker, which keeps renewing the run's lease. A longer wait releases the "
        "run instead: it is re-queued for the moment the retry is due (a Celery countdown; the "
        "sweep re-queues it if that message is lost) and the worker takes other runs meanwhile.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_RETRY_AFTER_MAX_SECONDS",
        3600.0,
        "float",
        "The longest wait a tool's `RetryAfter` (or an exception's `retry_after`) is honoured "
        "for; a longer one is cut to this.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_MAX_TRACEBACK_CHARS",
        4000,
        "int",
        "Each failed attempt of a step keeps its exception's type, message and traceback (the "
        "agent's and the tool's frames) in the step's `errors`; a traceback longer than this "
        "keeps its end (where it raised).",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_BATCH_MAX_STEPS",
        100,
        "int",
        'Batched durability (agents registered with `durability="batched"`): the results of '
        "read, model and clock steps wait in memory and commit together once this many wait "
        "(or with the next effect's intent, any other write, the end of the execution). No "
        "effect is sent before every step ahead of it is committed. At least 1.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_BATCH_MAX_MS",
        200.0,
        "float",
        "Batched durability: the waiting steps commit once the oldest has waited this many "
        "milliseconds (checked at each step). At least 0.",
        ENGINE,
    ),
    Setting(
        "RUNLEDGER_LEASE_SECONDS",
        30.0,
        "float",
        "How long a worker's lease on a run lasts without a heartbeat. A run whose worker "
        "stopped renewing it is recovered by the sweep once it expires.",
        WORKERS,
    ),
    Setting(
        "RUNLEDGER_EFFECT_MARGIN_SECONDS",
        None,
        "float",
        "Fencing for effects: a worker sends an effect only while its lease is valid by its own "
        "monotonic clock with this margin to spare, and a worker taking a run over waits this "
        "long past the previous lease's expiry before it asks about or re-sends that holder's "
        "effects. Keep it below a third of the lease; half or more is refused.",
        WORKERS,
        default_text="5, or a quarter of a lease shorter than 20 s",
        derive=lambda s: min(5.0, s["RUNLEDGER_LEASE_SECONDS"] / 4),
    ),
    Setting(
        "RUNLEDGER_SWEEP_SECONDS",
        10.0,
        "float",
        "Celery beat runs the lease sweep (task `runledger.sweep`) this often: it re-queues "
        "runs whose worker's lease expired.",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS",
        1.0,
        "float",
        "The longest the sweep waits for a lock another session holds (a frozen worker's run "
        "row, another sweep's beacon or totals): past it that piece is skipped until the next "
        "pass, so recovery never waits on a frozen process (PostgreSQL `lock_timeout`, per "
        "transaction).",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS",
        300.0,
        "float",
        "A queued run that no worker touched for this long has lost its message: the sweep "
        "enqueues it again.",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_PRIORITY_AGING_SECONDS",
        60.0,
        "float",
        "Priority without starvation: a queued run outranks one started this many seconds "
        "later per level of priority between them (a run of priority 0 that waited 5 minutes "
        "goes before a priority-5 run started just now, at 60 s).",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_RATE_LIMITS",
        "",
        "str",
        "Rate limits per tool and per model, across every worker, as JSON: "
        '`{"model:claude-haiku-4-5": {"requests": "4000/min", "tokens": "400000/min"}, '
        '"tool:charge": "10/min"}`. A key\'s limit here wins over the tool\'s `rate_limit=`. '
        "Rates are `<count>/<unit>` (s, min, hour, day; `5/10s`); a rate that cannot be read "
        "or a limit of 0 stops the process at start-up, saying which key.",
        RECOVERY,
        default_text="(none)",
    ),
    Setting(
        "RUNLEDGER_RATE_LIMIT_HOLD_SECONDS",
        10.0,
        "float",
        "A call that must wait for its rate-limit slot at most this many seconds waits in the "
        "worker, holding the run; a longer wait releases the run (as a retry's back-off does) "
        "until shortly before its slot, which it keeps.",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_MAX_START_DELAY_DAYS",
        366.0,
        "float",
        "How far ahead a start's `start_at` may be; a later one is refused (nothing written).",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_SCHEDULE_GRACE_SECONDS",
        120.0,
        "float",
        "A schedule's tick is on time when the schedules' pass (beat's `runledger.schedules`, "
        "as often as the sweep) sees it within this many seconds; a later one is missed, and "
        "the schedule's policy for missed ticks (skip, once, each) says what it starts.",
        RECOVERY,
    ),
    Setting(
        "RUNLEDGER_SETTLEMENT_APPROVAL",
        True,
        "bool",
        "Hand settlements of ambiguous effects need two people: a settlement is a proposal that "
        "a second person approves. Off, the proposer's settlement applies at once.",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_APPROVAL_EXPIRES_SECONDS",
        86400.0,
        "float",
        "How long an approval gate (`@tool(approval=...)`) stays open, unless the tool says: "
        "an approval given later is refused, and an approval not used by then is void (the "
        "resume asks again).",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_APPROVAL_LINK_SECONDS",
        3600.0,
        "float",
        "How long the signed approval link in a gate's notification works (it still needs "
        "sign-in, and works once).",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_APPROVER_PERMISSION",
        "runs.approve_settlements",
        "str",
        "The permission of the people who approve gates: each gets a signed link in a gate's "
        "notification (the dashboard's approver role holds it).",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_ACTION_LOCK_WAIT_SECONDS",
        2.0,
        "float",
        "How long an operator's action (dashboard, API, command) waits for a run's row while "
        "another writer holds it (its worker committing a step, another action, retention) "
        "before it is refused as busy: nothing written, HTTP 409 `busy` with `Retry-After`. "
        "Keep it below the web server's request timeout.",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES",
        65536,
        "int",
        "The largest result (canonical JSON bytes) an operator may enter for an effect that "
        "happened.",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_PREVIEW_SECONDS",
        5.0,
        "float",
        "Time bound of a dry replay (the stale-hash comparison, the resume preview, the deploy "
        "check's per-run judgement).",
        OPERATORS,
    ),
    Setting(
        "RUNLEDGER_PUBLIC_URL",
        "http://127.0.0.1:8000",
        "str",
        "The dashboard's address as people reach it: links in notifications point here.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_WEBHOOK_URL",
        "",
        "str",
        "Where notifications of runs that need attention are POSTed. Empty: no webhook.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_WEBHOOK_FORMAT",
        "json",
        "str",
        '`json` (runledger\'s payload) or `slack` (a Slack-compatible `{"text": …}`).',
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_EMAIL_TO",
        [],
        "list",
        "Comma-separated addresses that notifications are emailed to (through Django's mail "
        "framework, the `EMAIL_*` settings). Empty: no email.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_EMAIL_FROM",
        "runledger@localhost",
        "str",
        "The sender of notification emails.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS",
        3600.0,
        "float",
        "A run still needing attention this long after its notification is announced again.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_MAX_ATTEMPTS",
        8,
        "int",
        "Delivery attempts of one notification before it is given up (and shown as failed).",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_BACKOFF_SECONDS",
        10.0,
        "float",
        "The first retry's delay after a failed delivery; each further retry doubles it.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_TIMEOUT_SECONDS",
        10.0,
        "float",
        "How long one delivery attempt (webhook request, SMTP conversation) may take.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS",
        [],
        "list",
        "Comma-separated CIDRs (`10.20.0.0/16`, `::1/128`) and host names "
        "(`hooks.internal.example`) that application webhooks may reach although they are "
        "inside the network. Empty: a subscription's URL must be a public internet address "
        "or a name resolving only to such addresses — private, loopback, link-local, "
        "multicast, CGNAT, metadata addresses and runledger's own host are refused at "
        "subscription and again at each delivery (docs/webhooks.md, the SSRF policy).",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_EVENT_MAX_RESULT_BYTES",
        65536,
        "int",
        "A completion event carries the run's result up to this many bytes of JSON; a larger "
        "result is left out (`result_omitted` says its size) for the application to read.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_NOTIFY_EVERY_SECONDS",
        15.0,
        "float",
        "Celery beat delivers due notifications (task `runledger.notifications`) this often; "
        "a notification is also delivered at once after its event.",
        NOTIFY,
    ),
    Setting(
        "RUNLEDGER_ALERT_RULES",
        "",
        "str",
        "The alert rules, as a JSON list (docs/operators/alerts.md): each with a `name`, a "
        "`kind` (`blocked_longer`, `blocked_rate`, `gate_waiting`, `recovery_lagging`), its "
        "threshold (`minutes`, `percent`, `seconds`), optionally `per` (`agent`, `tool`), `to` "
        "(receiver names) and `severity`. Empty: no rules. A rule that does not parse stops "
        "every process at start-up, saying which.",
        ALERTS,
    ),
    Setting(
        "RUNLEDGER_ALERT_RECEIVERS",
        "",
        "str",
        'Where alerts page, as a JSON object of name → receiver: `{"type": "pagerduty", '
        '"routing_key": …}` (Events API v2), `{"type": "opsgenie", "api_key": …, '
        '"url": …}`, `{"type": "slack", "url": …}` (an incoming webhook), or '
        '`{"type": "webhook", "url": …, "secret": "whsec_…"}` (signed as '
        "Standard Webhooks). A pagerduty or opsgenie receiver's `inbound_secret` lets the pager "
        "acknowledge back at `POST /hooks/alerts/<name>`. Keep it in a secret store: it holds "
        "keys.",
        ALERTS,
    ),
    Setting(
        "RUNLEDGER_ALERT_EVERY_SECONDS",
        30.0,
        "float",
        "Celery beat evaluates the alert rules and delivers their pages (task `runledger.alerts`, "
        "on the control queue) this often.",
        ALERTS,
    ),
    Setting(
        "RUNLEDGER_ALERT_RUNS_LISTED",
        100,
        "int",
        "An incident lists at most this many of the runs it covers (an acknowledgement puts the "
        "acknowledging person on them); its count is always complete.",
        ALERTS,
    ),
)

DECLARED: dict[str, Setting] = {s.name: s for s in SETTINGS}
if len(DECLARED) != len(SETTINGS):
    raise RuntimeError("ledger.conf declares a setting twice")


def from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every declared setting's value: the environment variable of its name, else its default
    (derived from the settings before it where it has ``derive``). Raises ``ValueError`` naming
    the variable whose text is not of its kind, and what ``validate`` refuses."""
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        text = environ.get(setting.name)
        if text is not None and text != "":
            try:
                values[setting.name] = setting.parse(text)
            except ValueError:
                raise ValueError(f"{setting.name}={text!r} is not a valid {setting.kind}") from None
        elif setting.derive is not None:
            values[setting.name] = setting.derive(values)
        else:
            values[setting.name] = setting.default
    validate(values)
    return values


def validate(values: Mapping[str, Any]) -> None:
    """Refuse combinations that would break a guarantee (``ValueError`` saying which)."""
    margin, lease = values["RUNLEDGER_EFFECT_MARGIN_SECONDS"], values["RUNLEDGER_LEASE_SECONDS"]
    if not 0 <= margin < lease / 2:
        raise ValueError(
            f"RUNLEDGER_EFFECT_MARGIN_SECONDS={margin} must be at least 0 and below half of "
            f"RUNLEDGER_LEASE_SECONDS={lease} (keep it below a third): a worker stops sending "
            "effects that long before its lease ends"
        )
    from ledger.egress import parse_allowed
    from ledger.usage import parse_prices

    parse_allowed(values["RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS"])
    from ledger.ratelimits import BadRate, configured

    try:
        configured(values["RUNLEDGER_RATE_LIMITS"])
    except BadRate as exc:
        raise ValueError(str(exc)) from None
    if values["RUNLEDGER_RATE_LIMIT_HOLD_SECONDS"] < 0:
        raise ValueError("RUNLEDGER_RATE_LIMIT_HOLD_SECONDS must be at least 0")
    from ledger.alert_rules import parse_receivers, parse_rules

    parse_rules(
        values["RUNLEDGER_ALERT_RULES"], parse_receivers(values["RUNLEDGER_ALERT_RECEIVERS"])
    )
    parse_prices(values["RUNLEDGER_MODEL_PRICES"])
    from ledger.teams import is_team

    if not is_team(values["RUNLEDGER_DEFAULT_TEAM"]):
        raise ValueError(
            f"RUNLEDGER_DEFAULT_TEAM={values['RUNLEDGER_DEFAULT_TEAM']!r} is not a team: 1 to 63 "
            "characters from a-z 0-9 _ - starting with a letter or a digit"
        )
    if values["RUNLEDGER_BATCH_MAX_STEPS"] < 1 or values["RUNLEDGER_BATCH_MAX_MS"] < 0:
        raise ValueError(
            "RUNLEDGER_BATCH_MAX_STEPS must be at least 1 and RUNLEDGER_BATCH_MAX_MS at least 0"
        )


_MISSING = object()


class _Conf:
    """``conf.<name>``: the project's Django setting of that name, else the declared default."""

    def __getattr__(self, name: str) -> Any:
        # On the engine's hot path (a step write reads RUNLEDGER_PG_PREPARE): one dict lookup and
        # one attribute read, which Django's LazySettings answers from its cache.
        setting = DECLARED.get(name)
        if setting is None:
            raise AttributeError(f"{name} is not a declared runledger setting (ledger.conf)")
        value = getattr(settings, name, _MISSING)
        if value is not _MISSING:
            return value
        if setting.derive is not None:
            return setting.derive(_Defaults())
        return setting.default

    def __dir__(self) -> Iterable[str]:
        return list(DECLARED)


class _Defaults(dict[str, Any]):
    """What a derived default reads: the other settings through the accessor."""

    def __missing__(self, key: str) -> Any:
        return getattr(conf, key)


conf = _Conf()
