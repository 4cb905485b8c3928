"""Paths, Django's core switches, the installed apps, middleware, templates and static files."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from runs.settings import env, sections
from runs.settings.ledger import RUNLEDGER_EXAMPLES, RUNLEDGER_HARNESS

BASE_DIR = Path(__file__).resolve().parent.parent.parent
PACKAGE_DIR = BASE_DIR / "runs"


def _assets(name: str) -> Path:
    """The dashboard's ``templates`` or ``static``: inside the package when installed from the
    wheel (setup.py puts them there), beside ``manage.py`` in a source checkout."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else BASE_DIR / name


def _default_var_dir() -> Path:
    """``./var`` beside ``manage.py`` in a source checkout; in an installed copy never inside
    the package (site-packages is not the service's to write): the user's data directory."""
    if (BASE_DIR / "manage.py").is_file():
        return BASE_DIR / "var"
    return Path.home() / ".local" / "share" / "runledger"


VAR_DIR = env.path(
    "RUNLEDGER_VAR_DIR",
    _default_var_dir(),
    section=sections.PATHS,
    shown="./var in a source checkout; installed, ~/.local/share/runledger",
    doc="Where the no-server defaults keep their files: the SQLite ledger, the filesystem "
    "broker's messages, the generated secret key, beat's schedule, collected static files, "
    "archives. Set it in production (a directory the service's user owns); never inside the "
    "installed package.",
)


# Private to the service's user: the SQLite ledger, the broker's messages, the secret key, and
# archives holding full inputs and results live here.
def _make_var_dir(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(
            f"runledger: RUNLEDGER_VAR_DIR {path} cannot be made ({exc.strerror}): set "
            "RUNLEDGER_VAR_DIR to a directory this user may write"
        ) from None


_make_var_dir(VAR_DIR)

DEBUG = env.bool(
    "DEBUG",
    False,
    section=sections.WEB,
    doc="Django's debug mode. Never in production. Off, cookies are Secure, HSTS is on and "
    "plain HTTP is redirected (see `RUNLEDGER_PLAIN_HTTP`).",
)


def _secret_key() -> tuple[str, bool]:
    """SECRET_KEY, or a random key made once and kept in VAR_DIR (never a key known to all);
    and whether it was given.

    Several web machines must share one SECRET_KEY: set it in their environment.
    """
    given = env.str(
        "SECRET_KEY",
        "",
        section=sections.WEB,
        shown="a random key made once and kept in RUNLEDGER_VAR_DIR/secret_key",
        doc="Django's secret key (sessions, CSRF, signed links). Several web machines must "
        "share one: set it in their environment.",
    )
    if given:
        return given, True
    path = VAR_DIR / "secret_key"  # `check --deploy` refuses it (runledger.E002)
    if not path.exists():
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
    return path.read_text().strip(), False


# RUNLEDGER_SECRET_KEY_SET: whether SECRET_KEY came from the environment. `check --deploy` errs
# when it did not: each machine would make its own, breaking sessions across web nodes.
SECRET_KEY, RUNLEDGER_SECRET_KEY_SET = _secret_key()
ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS",
    ["localhost", "127.0.0.1", "[::1]", "testserver"],
    section=sections.WEB,
    doc="Comma-separated host names this site answers to (Django's `ALLOWED_HOSTS`).",
)

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
    "runs.dashboard",
    "runs.api",
    "runs.operations",
    *(["harness"] if RUNLEDGER_HARNESS else []),
]

MIDDLEWARE = [
    # A request id, the method, path and client on every log record of the request (a probe's
    # too); the response carries X-Request-ID.
    "runs.operations.logs.RequestContextMiddleware",
    # /healthz, /readyz and /metrics answer before the host check and the HTTPS redirect: a load
    # balancer or Prometheus reaches a web process by its address over plain HTTP.
    "runs.operations.probes.ProbesMiddleware",
    # Under /api/v1/: text the ledger cannot store in a path, query or header is a 422; a path
    # no route matches (404) and a wrong method (405) answer problem documents, not HTML pages.
    "runs.api.problems.ApiEdge",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every time in the reader's own zone (their Preferences; UTC by default).
    "runs.dashboard.zones.ReaderTimeZoneMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "runs.dashboard.security.NoStoreForSignedInMiddleware",
    "runs.operations.logs.ActorMiddleware",
    # Last: a locked-out sign-in is answered after the other middleware ran (django-axes).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "runs.urls"
WSGI_APPLICATION = "runs.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [_assets("templates")],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "runs.dashboard.context_processors.dashboard",
            ],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's four validators, applied by the admin, `changepassword` and `createroleuser`.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {
            "min_length": env.int(
                "RUNLEDGER_PASSWORD_MIN_LENGTH",
                12,
                section=sections.SIGN_IN,
                doc="The shortest password the admin, `changepassword` and `createroleuser` "
                "accept (beside Django's other three validators).",
            )
        },
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes first: it refuses a locked-out sign-in before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Roles in one team (runs.dashboard.teams): has_perm with and without a run.
    "runs.dashboard.teams.TeamRoleBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [_assets("static")]
STATIC_ROOT = env.path(
    "RUNLEDGER_STATIC_ROOT",
    VAR_DIR / "staticfiles",
    section=sections.PATHS,
    shown="RUNLEDGER_VAR_DIR/staticfiles",
    doc="Where `collectstatic` (run by `serve`) puts the hashed, compressed static files that "
    "WhiteNoise serves.",
)
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at start-up when it is missing
# WhiteNoise serves static files from every web process. After `manage.py collectstatic` (the
# serve stack runs it) the files have hashed, compressed copies served with a one-year immutable
# cache; before it (the demo, the tests) they are found where they are, under their own names.
STORAGES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "runs.staticfiles.HashedStaticStorage"},
}
WHITENOISE_USE_FINDERS = not (STATIC_ROOT / "staticfiles.json").exists()

# Checks that a process may silence on purpose (the development equipment silences
# runledger.E001, "the harness is installed with DEBUG off", for its own processes).
SILENCED_SYSTEM_CHECKS = env.list(
    "RUNLEDGER_SILENCED_CHECKS",
    [],
    section=sections.WEB,
    doc="Comma-separated system checks to silence (Django's `SILENCED_SYSTEM_CHECKS`), e.g. "
    "`runledger.W001` where the example systems are installed on purpose.",
)
