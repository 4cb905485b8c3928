"""runledger settings.

Every knob is an environment variable with a working default, so that `make demo` needs no
server: the ledger defaults to a SQLite file under ./var and production points DATABASE_URL at
PostgreSQL.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from runs.brokers import TRANSPORT as FILESYSTEM_TRANSPORT
from runs.brokers import filesystem_options

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("RUNLEDGER_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    """SECRET_KEY, or a random key made once and kept in VAR_DIR (never a key known to all).

    Several web machines must share one SECRET_KEY: set it in their environment.
    """
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = VAR_DIR / "secret_key"
    if not path.exists():
        import secrets

        # Written aside, then linked into place: processes starting together agree on one key.
        draft = path.with_name(f".secret_key.{os.getpid()}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")

# Modules imported at start-up so that their @agent and @tool decorators register.
RUNLEDGER_AGENT_MODULES = env_list("RUNLEDGER_AGENT_MODULES", "ledger.examples.agents")
# The example agents' simulated downstream systems have tables of their own: installed when the
# agent modules name an example module (the default, so the demo has them) or when asked for.
RUNLEDGER_EXAMPLES = env_bool("RUNLEDGER_EXAMPLES", False) or any(
    m == "ledger.examples" or m.startswith("ledger.examples.") for m in RUNLEDGER_AGENT_MODULES
)
# The kill-test harness (harness/, with the examples it kills): test equipment, never deployed.
# `make killtest` and the workers a harness Cluster starts set it.
RUNLEDGER_HARNESS = env_bool("RUNLEDGER_HARNESS", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    "ledger",
    *(["ledger.examples"] if RUNLEDGER_EXAMPLES or RUNLEDGER_HARNESS else []),
    "runs",
    *(["harness"] if RUNLEDGER_HARNESS else []),
]

MIDDLEWARE = [
    # /healthz, /readyz and /metrics answer before the host check and the HTTPS redirect: a load
    # balancer or Prometheus reaches a web process by its address over plain HTTP.
    "runs.probes.ProbesMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "runs.security.NoStoreForSignedInMiddleware",
    "runs.logs.ActorMiddleware",
    # Last: a locked-out sign-in is answered after the other middleware ran (django-axes).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "runs.urls"
WSGI_APPLICATION = "runs.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "runs.context.dashboard",
            ],
            # The dashboard is a package of the runs app, not an app: name its tag library.
            "libraries": {"dashboard": "runs.dashboard.templatetags"},
        },
    },
]

# The ledger. SQLite is the no-server default for the demo; production is PostgreSQL.
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'runledger.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # BEGIN IMMEDIATE takes the write lock up front, so a fenced write's lease check and its
    # write cannot be split by another writer (the SQLite analogue of FOR SHARE).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        # WAL lets the dashboard read while a worker writes.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("TEST", {})
# The example downstream systems (ledger.examples) keep their tables in the ledger's database.
# A fault test that cuts the workers' line to the ledger sets this to reach the same database
# on another line, as a real payment provider or mail server would be: a cut ledger connection
# must not also be a failing provider.
RUNLEDGER_DOWNSTREAM_DATABASE_URL = os.environ.get("RUNLEDGER_DOWNSTREAM_DATABASE_URL", "")
if RUNLEDGER_DOWNSTREAM_DATABASE_URL:
    DATABASES["downstream"] = dj_database_url.parse(RUNLEDGER_DOWNSTREAM_DATABASE_URL)
    DATABASE_ROUTERS = ["ledger.examples.routers.DownstreamRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's four validators, applied by the admin, `changepassword` and `createroleuser`.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": int(os.environ.get("RUNLEDGER_PASSWORD_MIN_LENGTH", "12"))},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes first: it refuses a locked-out sign-in before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# --- security (every setting an environment variable; safe defaults when DEBUG is off) -------
# With DEBUG off, cookies are Secure, HSTS is on and plain HTTP is redirected to HTTPS, so that
# `manage.py check --deploy` is clean with only SECRET_KEY and ALLOWED_HOSTS set. Development
# over plain HTTP (the demo, a laptop) sets RUNLEDGER_PLAIN_HTTP=1, which turns all three off.
RUNLEDGER_PLAIN_HTTP = env_bool("RUNLEDGER_PLAIN_HTTP", DEBUG)
_https = not RUNLEDGER_PLAIN_HTTP
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _https)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", _https)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", _https)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000" if _https else "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _https)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", _https)


def _proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto: https`` (the header your proxy sets on HTTPS requests) as Django
    wants it: ``("HTTP_X_FORWARDED_PROTO", "https")``. Empty: no proxy header is trusted."""
    if not value.strip():
        return None
    name, sep, expected = value.partition(":")
    if not sep or not name.strip() or not expected.strip():
        raise ValueError(
            f"RUNLEDGER_PROXY_SSL_HEADER must read 'Header-Name: value', not {value!r}"
        )
    return "HTTP_" + name.strip().upper().replace("-", "_"), expected.strip()


SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(os.environ.get("RUNLEDGER_PROXY_SSL_HEADER", ""))
USE_X_FORWARDED_HOST = env_bool("USE_X_FORWARDED_HOST", False)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
X_FRAME_OPTIONS = "DENY"
# A session lasts RUNLEDGER_SESSION_SECONDS (8 h) from sign-in, and ends with the browser when
# RUNLEDGER_SESSION_BROWSER_CLOSE is on.
SESSION_COOKIE_AGE = int(os.environ.get("RUNLEDGER_SESSION_SECONDS", str(8 * 3600)))
SESSION_EXPIRE_AT_BROWSER_CLOSE = env_bool("RUNLEDGER_SESSION_BROWSER_CLOSE", False)
# Sign-in throttling (django-axes): after AXES_FAILURE_LIMIT wrong passwords for one user name
# from one address, that pair is locked out for AXES_COOLOFF_MINUTES (`manage.py axes_reset`,
# `axes_reset_username NAME` or `axes_reset_ip ADDR` unlock it at once).
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("AXES_COOLOFF_MINUTES", "15")) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_RESET_ON_SUCCESS = True
# The client address axes counts by: REMOTE_ADDR, or behind a proxy the header it sets
# (e.g. HTTP_X_FORWARDED_FOR with AXES_IPWARE_PROXY_COUNT=1).
AXES_IPWARE_META_PRECEDENCE_ORDER = env_list("AXES_IP_HEADERS", "REMOTE_ADDR")
AXES_IPWARE_PROXY_COUNT = int(os.environ.get("AXES_IPWARE_PROXY_COUNT", "0")) or None
# Content-Security-Policy (django-csp): scripts, styles and connections from this site only;
# no inline script or style (htmx's own indicator style is turned off in base.html).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
        **(
            {"report-uri": [os.environ["RUNLEDGER_CSP_REPORT_URI"]]}
            if os.environ.get("RUNLEDGER_CSP_REPORT_URI")
            else {}
        ),
    }
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("RUNLEDGER_STATIC_ROOT", VAR_DIR / "staticfiles"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at start-up when it is missing
# WhiteNoise serves static files from every web process. After `manage.py collectstatic` (the
# serve stack runs it) the files have hashed, compressed copies served with a one-year immutable
# cache; before it (the demo, the tests) they are found where they are, under their own names.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "runs.staticfiles.HashedStaticStorage"},
}
WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "staticfiles.json").exists()

# Logs: JSON lines by default (runs/logs.py names the fields), plain text for people with
# RUNLEDGER_LOG_FORMAT=plain (the demo sets it). Celery's workers use the same format.
RUNLEDGER_LOG_FORMAT = os.environ.get("RUNLEDGER_LOG_FORMAT", "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"ledger_context": {"()": "runs.logs.LedgerContext"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s%(context)s %(message)s"},
        "json": {"()": "runs.logs.json_formatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain" if RUNLEDGER_LOG_FORMAT == "plain" else "json",
            "filters": ["ledger_context"],
        }
    },
    "loggers": {
        "ledger": {"handlers": ["console"], "level": os.environ.get("LEDGER_LOG_LEVEL", "INFO")},
        "runs": {"handlers": ["console"], "level": os.environ.get("RUNS_LOG_LEVEL", "INFO")},
    },
}

# --- runledger ---------------------------------------------------------------------------
# RUNLEDGER_AGENT_MODULES, RUNLEDGER_EXAMPLES and RUNLEDGER_HARNESS are above INSTALLED_APPS.
# Dotted path of the model client (ledger.llm.ModelClient); the scripted client needs no key.
RUNLEDGER_MODEL_CLIENT = os.environ.get("RUNLEDGER_MODEL_CLIENT", "ledger.llm.AnthropicClient")
# Canonical inputs larger than this are stored as a truncated preview (the hash covers all).
RUNLEDGER_MAX_STORED_INPUT_BYTES = int(os.environ.get("RUNLEDGER_MAX_STORED_INPUT_BYTES", "65536"))
# Default resume budget of an agent that does not set its own.
RUNLEDGER_DEFAULT_MAX_RESUMES = int(os.environ.get("RUNLEDGER_DEFAULT_MAX_RESUMES", "10"))
# How long a worker's lease on a run lasts without a heartbeat.
RUNLEDGER_LEASE_SECONDS = float(os.environ.get("RUNLEDGER_LEASE_SECONDS", "30"))
# Fencing for effects (ledger.engine.fence): a worker sends an effect only while its lease is
# valid by its own monotonic clock with this margin to spare (from the last confirmed claim or
# renewal), and a worker taking a run over waits this long past the previous lease's expiry
# before it asks about or re-sends that holder's effects. Default: 5 s, or a quarter of a
# lease shorter than 20 s. Keep it below a third of the lease; half or more is refused.
RUNLEDGER_EFFECT_MARGIN_SECONDS = float(
    os.environ.get("RUNLEDGER_EFFECT_MARGIN_SECONDS", min(5.0, RUNLEDGER_LEASE_SECONDS / 4))
)
if not 0 <= RUNLEDGER_EFFECT_MARGIN_SECONDS < RUNLEDGER_LEASE_SECONDS / 2:
    raise ImproperlyConfigured(
        f"RUNLEDGER_EFFECT_MARGIN_SECONDS={RUNLEDGER_EFFECT_MARGIN_SECONDS} must be at least 0 "
        f"and below half of RUNLEDGER_LEASE_SECONDS={RUNLEDGER_LEASE_SECONDS} (keep it below a "
        "third): a worker stops sending effects that long before its lease ends"
    )
# Operator settlements of ambiguous effects (ledger.transitions): with approval on, a settlement
# is a proposal that a second person approves; off, the proposer's settlement applies at once.
RUNLEDGER_SETTLEMENT_APPROVAL = env_bool("RUNLEDGER_SETTLEMENT_APPROVAL", True)
# Largest result (canonical JSON bytes) an operator may enter for an effect that happened.
RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES = int(
    os.environ.get("RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES", "65536")
)
# The engine's step writes as server-side prepared statements on PostgreSQL (one parse and
# plan per connection). Turn off (0) behind a pooler in transaction mode (PgBouncer < 1.21).
RUNLEDGER_PG_PREPARE = env_bool("RUNLEDGER_PG_PREPARE", True)
# Batched durability (agents registered with durability="batched"; ledger.engine.batch): the
# results of read, model and clock steps wait in memory and are committed together — with the
# next effect's intent row, with any other write, at the end of the execution, or once this
# many steps wait or the oldest has waited this many milliseconds (checked at each step). No
# effect is ever sent before every step ahead of it is committed; a crash loses only the
# waiting steps, which the resume executes again. An agent may set its own numbers.
RUNLEDGER_BATCH_MAX_STEPS = int(os.environ.get("RUNLEDGER_BATCH_MAX_STEPS", "100"))
RUNLEDGER_BATCH_MAX_MS = float(os.environ.get("RUNLEDGER_BATCH_MAX_MS", "200"))
if RUNLEDGER_BATCH_MAX_STEPS < 1 or RUNLEDGER_BATCH_MAX_MS < 0:
    raise ImproperlyConfigured(
        "RUNLEDGER_BATCH_MAX_STEPS must be at least 1 and RUNLEDGER_BATCH_MAX_MS at least 0"
    )
# A run's ledger holds at most this many steps: a call that would add one more stops the run
# as needs_attention (reason budget). Long-lived agents continue_as_new before reaching it.
RUNLEDGER_MAX_STEPS_PER_RUN = int(os.environ.get("RUNLEDGER_MAX_STEPS_PER_RUN", "10000"))
# The same bound by size: the stored results (canonical JSON bytes) of the steps a run has
# walked. A new step past it stops the run (budget); agents compare ctx.history_bytes.
RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN = int(
    os.environ.get("RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN", str(50 * 1024 * 1024))
)

# --- the dashboard -----------------------------------------------------------------------
# How often the runs list (and an active run's header) re-fetches itself; the page's script
# pauses while the tab is hidden and backs off while nothing changes.
RUNLEDGER_LIST_REFRESH_SECONDS = int(os.environ.get("RUNLEDGER_LIST_REFRESH_SECONDS", "5"))
RUNLEDGER_RUNS_PER_PAGE = int(os.environ.get("RUNLEDGER_RUNS_PER_PAGE", "50"))
RUNLEDGER_STEPS_PER_PAGE = int(os.environ.get("RUNLEDGER_STEPS_PER_PAGE", "100"))
# Time bound of a dry replay (the stale-hash comparison and the resume preview).
RUNLEDGER_PREVIEW_SECONDS = float(os.environ.get("RUNLEDGER_PREVIEW_SECONDS", "5"))

# --- Celery (see runs/celery.py) ---------------------------------------------------------
# The ledger, not the broker, is what makes runs durable. A broker only carries "run X should
# make progress" hints; every hint is safe to lose (the lease sweep below re-queues a run whose
# worker died or whose message vanished) and safe to deliver twice (the run's lease admits one
# executor). When a whole worker (parent and children) is SIGKILLed, the filesystem and the
# SQLAlchemy transports lose the message it held ("unacked" lives only in the worker's memory),
# and Redis gives it back only after visibility_timeout. So recovery comes from the sweep (the
# kill test relies on nothing else); the broker only makes it faster.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost//")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The no-server default: messages are files under RUNLEDGER_VAR_DIR/broker, shared by every
    # process on this machine that uses the same directory. Still a real worker process. The
    # transport is kombu's, fixed to publish each message whole (see runs/brokers.py).
    CELERY_BROKER_TRANSPORT = FILESYSTEM_TRANSPORT
    CELERY_BROKER_TRANSPORT_OPTIONS = filesystem_options(
        VAR_DIR / "broker",
        polling_interval=float(os.environ.get("RUNLEDGER_BROKER_POLL_SECONDS", "0.2")),
    )
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # Redis re-delivers an unacknowledged message after visibility_timeout, and a message
        # with an ETA or countdown is "unacknowledged" from the moment it is fetched: a timeout
        # shorter than a countdown re-delivers it over and over. runledger sends no countdowns
        # or ETAs, and the sweep recovers lost work within seconds, so a long timeout (1 h)
        # costs nothing and keeps a long-running agent's message from being handed to a second
        # worker mid-run (which the lease would refuse, but why wake it).
        "visibility_timeout": int(os.environ.get("RUNLEDGER_BROKER_VISIBILITY_TIMEOUT", "3600")),
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# One named queue, so that a shared broker can carry other projects' queues beside ours.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("RUNLEDGER_QUEUE", "runledger")
# Acknowledge a task after it returns, not when it is fetched: a worker that dies mid-task
# leaves the message to be re-delivered (where the transport can) instead of silently consumed.
CELERY_TASK_ACKS_LATE = True
# When a pool child is killed (OOM, SIGKILL), put its message back rather than ack it as failed.
# The re-delivered task finds the dead child's lease still live and does nothing; the sweep
# re-queues the run when that lease expires. A run is never executed twice at once either way.
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A task that raised is acknowledged: retrying is the ledger's job (resume), not the broker's.
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
# Agent runs are long and uneven: a worker reserves one message per pool process, no more, so a
# worker that dies takes no extra prefetched messages down with it, and a free worker is not
# starved while a busy one sits on a backlog.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The dashboard reads state from the ledger, never from Celery results: store none.
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Celery beat runs the lease sweep (runs.tasks.sweep) every RUNLEDGER_SWEEP_SECONDS.
RUNLEDGER_SWEEP_SECONDS = float(os.environ.get("RUNLEDGER_SWEEP_SECONDS", "10"))
# A queued run with no worker after this long has lost its message: the sweep enqueues it again.
RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS = float(
    os.environ.get("RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS", "300")
)
CELERY_BEAT_SCHEDULE = {
    "runledger-sweep": {
        "task": "runledger.sweep",
        "schedule": RUNLEDGER_SWEEP_SECONDS,
        # A sweep nobody picked up in time is replaced by the next one; do not pile them up.
        "options": {"expires": max(RUNLEDGER_SWEEP_SECONDS * 2, 1.0)},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- notifications: off unless a channel is configured (issue 10) ---------------------------
# A webhook (JSON POST, or a Slack-compatible {"text": …} payload) and/or email through Django's
# mail framework (SMTP). Each notification is an outbox row written with its event, delivered by
# the beat task runledger.notifications (and at once after the event), with retries and back-off.
RUNLEDGER_NOTIFY_WEBHOOK_URL = os.environ.get("RUNLEDGER_NOTIFY_WEBHOOK_URL", "")
RUNLEDGER_NOTIFY_WEBHOOK_FORMAT = os.environ.get("RUNLEDGER_NOTIFY_WEBHOOK_FORMAT", "json")
RUNLEDGER_NOTIFY_EMAIL_TO = env_list("RUNLEDGER_NOTIFY_EMAIL_TO", "")
RUNLEDGER_NOTIFY_EMAIL_FROM = os.environ.get("RUNLEDGER_NOTIFY_EMAIL_FROM", "runledger@localhost")
RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS = float(
    os.environ.get("RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS", "3600")
)
RUNLEDGER_NOTIFY_MAX_ATTEMPTS = int(os.environ.get("RUNLEDGER_NOTIFY_MAX_ATTEMPTS", "8"))
RUNLEDGER_NOTIFY_BACKOFF_SECONDS = float(os.environ.get("RUNLEDGER_NOTIFY_BACKOFF_SECONDS", "10"))
RUNLEDGER_NOTIFY_TIMEOUT_SECONDS = float(os.environ.get("RUNLEDGER_NOTIFY_TIMEOUT_SECONDS", "10"))
RUNLEDGER_NOTIFY_EVERY_SECONDS = float(os.environ.get("RUNLEDGER_NOTIFY_EVERY_SECONDS", "15"))
# Links in notifications point here.
RUNLEDGER_PUBLIC_URL = os.environ.get("RUNLEDGER_PUBLIC_URL", "http://127.0.0.1:8000")
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
CELERY_BEAT_SCHEDULE["runledger-notifications"] = {
    "task": "runledger.notifications",
    "schedule": RUNLEDGER_NOTIFY_EVERY_SECONDS,
    "options": {"expires": max(RUNLEDGER_NOTIFY_EVERY_SECONDS * 2, 1.0)},
}

# --- health and metrics (runs/probes.py) -------------------------------------------------
# /readyz fails when the sweep beacon is older than this (three sweep intervals and a minute).
RUNLEDGER_READY_SWEEP_LATE_SECONDS = float(
    os.environ.get("RUNLEDGER_READY_SWEEP_LATE_SECONDS", str(3 * RUNLEDGER_SWEEP_SECONDS + 60))
)
# How long /readyz waits for the broker to accept a connection.
RUNLEDGER_READY_BROKER_SECONDS = float(os.environ.get("RUNLEDGER_READY_BROKER_SECONDS", "2"))
# /metrics answers requests from these networks, or carrying "Authorization: Bearer <token>".
RUNLEDGER_METRICS_TOKEN = os.environ.get("RUNLEDGER_METRICS_TOKEN", "")
RUNLEDGER_METRICS_NETWORKS = [
    ipaddress.ip_network(net, strict=False)
    for net in env_list("RUNLEDGER_METRICS_NETWORKS", "127.0.0.0/8,::1/128")
]

# --- retention (manage.py prune_runs) ------------------------------------------------------
# Where the step rows of pruned runs go, as <dir>/<YYYY-MM>/<run_id>.jsonl.gz.
RUNLEDGER_ARCHIVE_DIR = Path(os.environ.get("RUNLEDGER_ARCHIVE_DIR", VAR_DIR / "archive"))
# Set (in days) to let beat prune runs finished longer ago than that, once a day.
RUNLEDGER_PRUNE_AFTER_DAYS = int(os.environ.get("RUNLEDGER_PRUNE_AFTER_DAYS", "0"))
if RUNLEDGER_PRUNE_AFTER_DAYS > 0:
    CELERY_BEAT_SCHEDULE["runledger-prune"] = {"task": "runledger.prune", "schedule": 24 * 3600.0}
